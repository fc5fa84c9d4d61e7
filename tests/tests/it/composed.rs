//! A solver declared as its parts, as cubie's batch solver is: inputs
//! (`initial_values`, `parameters`, unchunkable `driver_coefficients`) and
//! outputs (`state`, `observables`, `status_codes`, `iteration_counters`)
//! in two buffer structs, composed under one owner with `#[buffer(part)]`,
//! allocated in one call with one plan and two buffer sets, bound in one
//! pipeline by field, on one simulated device and on a `DeviceSet` of two,
//! byte-exact against a serial reference.

use crate::common;
use std::time::Duration;

use cubie_mem::{
    DeviceArray, DeviceSet, GpuBuffers, HostArray, HostKernel, HostMemoryKind, ManagerConfig,
    MemError, MemoryManager, Precision, SimBackend, Throughput,
};

/// The sizes the shapes refer to.
pub struct SolverDims {
    pub n_states: usize,
    pub n_params: usize,
    pub n_saves: usize,
    pub segments: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = SolverDims)]
pub struct InputArrays<P: Precision> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    initial_values: DeviceArray<P>,
    #[buffer(shape = [n_params, n_runs], chunk_axis = n_runs)]
    parameters: DeviceArray<P>,
    #[buffer(shape = [segments, 2], unchunkable)]
    driver_coefficients: DeviceArray<P>,
}

#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = SolverDims)]
pub struct OutputArrays<P: Precision> {
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_saves, 1, n_runs], chunk_axis = n_runs)]
    observables: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    status_codes: DeviceArray<i32>,
    #[buffer(shape = [n_saves, 4, n_runs], chunk_axis = n_runs)]
    iteration_counters: DeviceArray<i32>,
}

/// The solver: its parts, one owner, two buffer sets.
#[derive(GpuBuffers)]
#[buffers(pipeline_depth = 2)]
pub struct BatchSolver<P: Precision> {
    #[buffer(part)]
    inputs: InputArrays<P>,
    #[buffer(part)]
    outputs: OutputArrays<P>,
}

const N_STATES: usize = 3;
const N_SAVES: usize = 6;
const SEGMENTS: usize = 2;
const DT: f64 = 0.05;

fn dims(n_runs: usize) -> SolverDims {
    SolverDims {
        n_states: N_STATES,
        n_params: 2,
        n_saves: N_SAVES,
        segments: SEGMENTS,
        n_runs,
    }
}

/// One run's trajectory: decay at its first parameter, forced by the
/// driver's segment, scaled by its second; the arithmetic the kernel does.
fn integrate(initial: f64, rate: f64, scale: f64, drivers: &[f64], save: usize) -> f64 {
    let mut y = initial;
    for step in 0..=save {
        let segment = &drivers[(step % SEGMENTS) * 2..][..2];
        y = y - DT * rate * y + DT * scale * (segment[0] + segment[1] * step as f64);
    }
    y
}

/// The host side of a batch: inputs and the results' arrays.
struct Host {
    initial: HostArray<f64>,
    parameters: HostArray<f64>,
    state: HostArray<f64>,
    observables: HostArray<f64>,
    status: HostArray<i32>,
    counters: HostArray<i32>,
}

const DRIVERS: [f64; SEGMENTS * 2] = [0.5, 0.01, -0.25, 0.02];

fn host(mgr: &MemoryManager, holder: &cubie_mem::Instance, runs: usize) -> Host {
    let initial: Vec<f64> = (0..N_STATES * runs)
        .map(|i| 1.0 + (i % 13) as f64)
        .collect();
    let parameters: Vec<f64> = (0..2 * runs).map(|i| 0.1 + (i % 7) as f64 * 0.05).collect();
    let kind = HostMemoryKind::Pageable;
    Host {
        initial: mgr
            .create_host_array([N_STATES, runs], kind, Some(&initial), holder)
            .unwrap(),
        parameters: mgr
            .create_host_array([2, runs], kind, Some(&parameters), holder)
            .unwrap(),
        state: mgr
            .create_host_array([N_SAVES, N_STATES, runs], kind, None, holder)
            .unwrap(),
        observables: mgr
            .create_host_array([N_SAVES, 1, runs], kind, None, holder)
            .unwrap(),
        status: mgr.create_host_array([runs], kind, None, holder).unwrap(),
        counters: mgr
            .create_host_array([N_SAVES, 4, runs], kind, None, holder)
            .unwrap(),
    }
}

/// The kernel over the first `len` runs of `set`'s chunk (`width` wide).
fn solve(set: &BatchSolver<f64>, len: usize) -> Result<(), MemError> {
    let (inputs, outputs) = (&set.inputs, &set.outputs);
    let width = inputs.parameters.shape()[1];
    HostKernel::new("solve", Duration::from_micros(len as u64))
        .reads(&inputs.initial_values)
        .reads(&inputs.parameters)
        .reads(&inputs.driver_coefficients)
        .writes(&outputs.state)
        .writes(&outputs.observables)
        .writes(&outputs.status_codes)
        .writes(&outputs.iteration_counters)
        .launch(|args| {
            let initial = args.read(&inputs.initial_values)?;
            let parameters = args.read(&inputs.parameters)?;
            let drivers = args.read(&inputs.driver_coefficients)?;
            let state = args.write(&outputs.state)?;
            let observables = args.write(&outputs.observables)?;
            let status = args.write(&outputs.status_codes)?;
            let counters = args.write(&outputs.iteration_counters)?;
            for run in 0..len {
                let (rate, scale) = (parameters[run], parameters[width + run]);
                for save in 0..N_SAVES {
                    let mut sum = 0.0;
                    for v in 0..N_STATES {
                        let y = integrate(initial[v * width + run], rate, scale, drivers, save);
                        state[(save * N_STATES + v) * width + run] = y;
                        sum += y;
                    }
                    observables[save * width + run] = sum;
                    for k in 0..4 {
                        counters[(save * 4 + k) * width + run] = (save * 4 + k) as i32;
                    }
                }
                status[run] = 0;
            }
            Ok(())
        })
}

/// Checks every run of `host` against the serial reference, bit for bit.
fn check(host: &Host, runs: usize) {
    let (initial, parameters) = (host.initial.as_slice(), host.parameters.as_slice());
    let (state, observables) = (host.state.as_slice(), host.observables.as_slice());
    for run in 0..runs {
        let (rate, scale) = (parameters[run], parameters[runs + run]);
        for save in 0..N_SAVES {
            let mut sum = 0.0;
            for v in 0..N_STATES {
                let y = integrate(initial[v * runs + run], rate, scale, &DRIVERS, save);
                assert_eq!(
                    state[(save * N_STATES + v) * runs + run].to_bits(),
                    y.to_bits(),
                    "run {run}, save {save}, state {v}"
                );
                sum += y;
            }
            assert_eq!(observables[save * runs + run].to_bits(), sum.to_bits());
            for k in 0..4 {
                assert_eq!(
                    host.counters.as_slice()[(save * 4 + k) * runs + run],
                    (save * 4 + k) as i32
                );
            }
        }
    }
    assert!(host.status.as_slice().iter().all(|&code| code == 0));
}

#[test]
fn a_composed_solver_streams_byte_exact_on_one_device() {
    let runs = 5_000;
    let sim = SimBackend::new(1 << 30).with_free(300_000);
    let mgr = common::manager_on(sim);
    let holder = mgr
        .register(BatchSolver::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    assert_eq!(BatchSolver::<f64>::STREAM_GROUP, "solver");
    let solver = mgr
        .allocate_buffers::<BatchSolver<f64>>(&holder, &dims(runs))
        .unwrap();
    assert!(solver.plan().chunks() > 2, "{}", solver.plan());
    assert_eq!(solver.sets().len(), 2);
    // The unchunkable coefficients are one array every set shares.
    solver.sets()[0]
        .inputs
        .driver_coefficients
        .copy_from_host(&DRIVERS)
        .unwrap();
    let mut host = host(&mgr, &holder, runs);
    mgr.chunk_streamer(&holder, solver.plan())
        .unwrap()
        .pipeline_sets(solver.sets())
        .input_with(&host.initial, |set| &set.inputs.initial_values)
        .input_with(&host.parameters, |set| &set.inputs.parameters)
        .output_with(&mut host.state, |set| &set.outputs.state)
        .output_with(&mut host.observables, |set| &set.outputs.observables)
        .output_with(&mut host.status, |set| &set.outputs.status_codes)
        .output_with(&mut host.counters, |set| &set.outputs.iteration_counters)
        .run(|chunk, set| solve(set, chunk.len()))
        .unwrap();
    check(&host, runs);
}

#[test]
fn a_composed_solver_streams_byte_exact_on_a_set_of_two_devices() {
    let runs = 6_000;
    let set = DeviceSet::simulated(
        [
            SimBackend::new(1 << 30).with_free(200_000),
            SimBackend::new(1 << 30).with_free(400_000),
        ],
        ManagerConfig::default().granule(0),
    );
    let buffers = set
        .allocate::<BatchSolver<f64>>(
            runs,
            &Throughput::Equal,
            |_| BatchSolver::<f64>::registration().on_invalidate(|| {}),
            dims,
        )
        .unwrap();
    for share in buffers.portions() {
        share.buffers().sets()[0]
            .inputs
            .driver_coefficients
            .copy_from_host(&DRIVERS)
            .unwrap();
    }
    let manager = &set.managers()[0];
    let holder = manager.register(cubie_mem::Registration::new()).unwrap();
    let mut host = host(manager, &holder, runs);
    buffers
        .pipeline()
        .input(&host.initial, |set| &set.inputs.initial_values)
        .input(&host.parameters, |set| &set.inputs.parameters)
        .output(&mut host.state, |set| &set.outputs.state)
        .output(&mut host.observables, |set| &set.outputs.observables)
        .output(&mut host.status, |set| &set.outputs.status_codes)
        .output(&mut host.counters, |set| &set.outputs.iteration_counters)
        .run(|_device, chunk, set| solve(set, chunk.len()))
        .unwrap();
    check(&host, runs);
}

#[test]
fn a_tuple_of_buffer_structs_is_allocated_as_one() {
    type Pair = (InputArrays<f32>, OutputArrays<f32>);
    assert_eq!(
        Pair::LABELS,
        [
            "initial_values",
            "parameters",
            "driver_coefficients",
            "state",
            "observables",
            "status_codes",
            "iteration_counters"
        ]
    );
    assert_eq!(Pair::STREAM_GROUP, "solver");
    let mgr = common::manager_on(SimBackend::new(1 << 30).with_free(100_000));
    let holder = mgr
        .register(Pair::registration().on_invalidate(|| {}))
        .unwrap();
    let pair = mgr.allocate_buffers::<Pair>(&holder, &dims(2_000)).unwrap();
    assert!(
        pair.plan().chunks() > 1,
        "one plan for both: {}",
        pair.plan()
    );
    let length = pair.plan().chunk_length();
    // Depth 1 everywhere: one set, which the allocation dereferences to.
    let (inputs, outputs) = &*pair;
    assert_eq!(inputs.initial_values.shape(), [N_STATES, length]);
    assert_eq!(outputs.state.shape(), [N_SAVES, N_STATES, length]);
    assert_eq!(inputs.driver_coefficients.shape(), [SEGMENTS, 2]);
}
