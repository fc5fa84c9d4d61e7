//! Element types beyond the seven primitives: `half::f16`/`bf16`,
//! `num_complex::Complex<f32>`/`Complex<f64>` and a user's own
//! `#[repr(C)]` Pod struct, through requests, typed handles, copies, host
//! arrays, a host kernel, the derive and the chunk pipeline.

use std::time::Duration;

use cubie_mem::{
    ArrayRequest, DType, DeviceArray, Element, GpuBuffers, HostKernel, HostMemoryKind,
    ManagerConfig, MemError, MemoryKind, MemoryManager, PinnedArray, SimBackend,
};
use half::{bf16, f16};

use crate::common::queuing;
use num_complex::Complex;

/// One run's state: position, velocity, time and step count; 24 bytes, no
/// padding, 8-byte aligned (on 64-bit targets).
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct State {
    y: f64,
    v: f64,
    t: f32,
    steps: u32,
}

impl Element for State {
    const DTYPE: DType = DType::of::<Self>("State");
}

impl State {
    /// One explicit Euler step of `y' = v` by `dt`; the step count wraps
    /// (poisoned memory holds `u32::MAX`).
    fn step(self, dt: f32) -> State {
        State {
            y: self.y + self.v * f64::from(dt),
            v: self.v,
            t: self.t + dt,
            steps: self.steps.wrapping_add(1),
        }
    }
}

/// The same layout as [`State`] under another name: another element type.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Other {
    a: f64,
    b: f64,
    c: u64,
}

impl Element for Other {
    const DTYPE: DType = DType::of::<Self>("Other");
}

/// A manager without allocation granule, on a device with `free` bytes free.
fn manager(free: u64) -> MemoryManager {
    MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(free),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

fn states(n: usize) -> Vec<State> {
    (0..n)
        .map(|i| State {
            y: i as f64,
            v: 0.5 * i as f64,
            t: i as f32 / 4.0,
            steps: i as u32,
        })
        .collect()
}

/// `values` through a request of `T`, a device and a pinned array, blocking
/// and asynchronous copies, and host arrays of every kind.
fn round_trip<T: Element>(values: &[T]) {
    let n = values.len();
    let bytes = size_of_val(values) as u64;
    let mgr = manager(1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    let request = ArrayRequest::of::<T>([n]).unchunkable();
    assert_eq!(request.dtype(), T::DTYPE);
    assert_eq!(request.nbytes().unwrap(), bytes);
    mgr.queue_request(
        &solver,
        [
            ("device", request.clone()),
            ("pinned", request.memory(MemoryKind::Pinned)),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let device = response.take::<T>("device").unwrap();
    let pinned = response.take_pinned::<T>("pinned").unwrap();
    assert_eq!((device.len(), device.nbytes()), (n, bytes));

    device.copy_from_host(values).unwrap();
    assert_eq!(device.to_vec().unwrap(), values, "{}", T::DTYPE);
    let mut tail = vec![T::zeroed(); n - 1];
    device.copy_to_host_at(1, &mut tail).unwrap();
    assert_eq!(tail, values[1..]);
    device.copy_from_host_at(n - 1, &values[..1]).unwrap();
    assert_eq!(device.to_vec().unwrap()[n - 1], values[0]);
    assert!(matches!(
        device.copy_from_host_at(n, &values[..1]),
        Err(MemError::OutOfBounds { .. })
    ));

    pinned.write().unwrap().copy_from_slice(values);
    assert_eq!(&*pinned.read().unwrap(), values);

    for kind in [
        HostMemoryKind::Pageable,
        HostMemoryKind::Pinned,
        HostMemoryKind::Spilled,
    ] {
        let host = mgr
            .create_host_array([n], kind, Some(values), &solver)
            .unwrap();
        assert_eq!(host.as_slice(), values, "{kind:?}");
        assert_eq!(host.nbytes(), bytes);
    }
    let host = mgr
        .create_host_array::<T>([n], HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    let host = device.download_async(host).unwrap().wait().unwrap();
    let mut expected = values.to_vec();
    expected[n - 1] = values[0];
    assert_eq!(host.as_slice(), expected);

    let zeros = mgr
        .create_host_array::<T>([n], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    assert_eq!(zeros.nbytes(), bytes);
    assert!(zeros.as_slice().iter().all(|x| *x == T::zeroed()));
}

#[test]
fn half_precision_values_round_trip() {
    round_trip(&[0.5, -2.0, 65504.0, 1e-3].map(f16::from_f64));
    round_trip(&[0.5, -2.0, 3.0e38, 1e-3].map(bf16::from_f64));
}

#[test]
fn complex_values_round_trip() {
    round_trip(&[Complex::new(1.0f32, -1.0), Complex::new(0.0, 2.5)]);
    round_trip(&[
        Complex::new(1.0f64, -1.0),
        Complex::new(0.0, 2.5),
        Complex::new(-3.0, 1e300),
    ]);
}

#[test]
fn a_pod_struct_of_several_fields_round_trips() {
    assert_eq!(size_of::<State>(), 24);
    round_trip(&states(5));
}

#[test]
fn an_array_is_taken_only_as_its_own_element_type() {
    let mgr = manager(1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("state", ArrayRequest::of::<State>([4]))])
        .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    // Same size and alignment, another name: another element type.
    match response.take::<Other>("state") {
        Err(MemError::WrongArrayType {
            label,
            requested,
            found,
        }) => {
            assert_eq!(label, "state");
            assert!(requested.ends_with("DeviceArray<Other>"), "{requested}");
            assert!(found.ends_with("DeviceArray<State>"), "{found}");
        }
        other => panic!("expected WrongArrayType, got {other:?}"),
    }
    assert!(response.take::<Complex<f64>>("state").is_err());
    assert!(response.take_pinned::<State>("state").is_err());
    let state = response.take::<State>("state").unwrap();
    assert_eq!(state.nbytes(), 4 * 24);
}

#[test]
fn fresh_memory_of_a_new_type_reads_as_poison() {
    let mgr = manager(1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            ("state", ArrayRequest::of::<State>([2])),
            ("h", ArrayRequest::of::<f16>([2])),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let state = response.take::<State>("state").unwrap().to_vec().unwrap();
    assert!(state.iter().all(|s| s.y.is_nan() && s.steps == u32::MAX));
    let h = response.take::<f16>("h").unwrap().to_vec().unwrap();
    assert!(h.iter().all(|h| h.is_nan()));
}

#[test]
fn a_host_kernel_reads_and_writes_the_new_types() {
    let n = 6;
    let mgr = manager(1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            ("state", ArrayRequest::of::<State>([n])),
            ("phase", ArrayRequest::of::<Complex<f64>>([n])),
            ("h", ArrayRequest::of::<f16>([n])),
            ("w", ArrayRequest::of::<bf16>([n])),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let state = response.take::<State>("state").unwrap();
    let phase = response.take::<Complex<f64>>("phase").unwrap();
    let h = response.take::<f16>("h").unwrap();
    let w = response.take::<bf16>("w").unwrap();
    let initial = states(n);
    state.copy_from_host(&initial).unwrap();

    HostKernel::new("step", Duration::from_micros(1))
        .updates(&state)
        .writes(&phase)
        .writes(&h)
        .writes(&w)
        .launch(|args| {
            let state = args.write(&state)?;
            let (phase, h, w) = (args.write(&phase)?, args.write(&h)?, args.write(&w)?);
            for (i, s) in state.iter_mut().enumerate() {
                *s = s.step(0.25);
                phase[i] = Complex::new(s.y, s.v);
                h[i] = f16::from_f32(s.t);
                w[i] = bf16::from_f64(s.y);
            }
            Ok(())
        })
        .unwrap();

    let stepped: Vec<State> = initial.iter().map(|s| s.step(0.25)).collect();
    assert_eq!(state.to_vec().unwrap(), stepped);
    let phases: Vec<_> = stepped.iter().map(|s| Complex::new(s.y, s.v)).collect();
    assert_eq!(phase.to_vec().unwrap(), phases);
    let hs: Vec<_> = stepped.iter().map(|s| f16::from_f32(s.t)).collect();
    assert_eq!(h.to_vec().unwrap(), hs);
    let ws: Vec<_> = stepped.iter().map(|s| bf16::from_f64(s.y)).collect();
    assert_eq!(w.to_vec().unwrap(), ws);
}

pub struct Dims {
    pub n_runs: usize,
}

/// A solver whose buffers use every new element type.
#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Solver {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    state: DeviceArray<State>,
    #[buffer(shape = [2, n_runs], chunk_axis = n_runs)]
    spectrum: DeviceArray<Complex<f32>>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = pinned)]
    step_size: PinnedArray<f16>,
    #[buffer(shape = [4], unchunkable)]
    weights: DeviceArray<bf16>,
    #[buffer(shape = [3], unchunkable)]
    phase: DeviceArray<Complex<f64>>,
}

#[test]
fn a_derived_struct_holds_the_new_types_and_plans_by_their_sizes() {
    let dims = Dims { n_runs: 1000 };
    let requests = Solver::requests(&dims);
    let dtypes: Vec<_> = requests.iter().map(|(_, r)| r.dtype()).collect();
    assert_eq!(
        dtypes,
        [
            State::DTYPE,
            DType::ComplexF32,
            DType::F16,
            DType::BF16,
            DType::ComplexF64
        ]
    );
    // Chunkable: 1000 runs of 24 + 2 * 8 + 2 = 42 bytes, C = 42000 B;
    // unchunkable: 4 * 2 + 3 * 16 = 56 B. With 10000 B free, 2% is
    // withheld: alloc = 9800, max_chunk = floor(1000 * (9800 - 56) / 42000)
    // = 232, chunks = ceil(1000 / 232) = 5, chunk_length = 200.
    let mgr = manager(10_000);
    let solver = mgr
        .register(Solver::registration().on_invalidate(|| {}))
        .unwrap();
    let solver_buffers = mgr.allocate_buffers::<Solver>(&solver, &dims).unwrap();
    let plan = *solver_buffers.plan();
    assert_eq!((plan.chunks(), plan.chunk_length()), (5, 200));
    assert_eq!(
        (plan.chunkable_bytes(), plan.unchunkable_bytes()),
        (42_000, 56)
    );
    let buffers = &*solver_buffers;
    assert_eq!(buffers.state.shape(), [200]);
    assert_eq!(buffers.state.nbytes(), 200 * 24);
    assert_eq!(buffers.spectrum.shape(), [2, 200]);
    assert_eq!(buffers.spectrum.nbytes(), 2 * 200 * 8);
    assert_eq!(buffers.step_size.nbytes(), 200 * 2);
    assert_eq!(buffers.weights.nbytes(), 4 * 2);
    assert_eq!(buffers.phase.nbytes(), 3 * 16);

    buffers
        .step_size
        .write()
        .unwrap()
        .fill(f16::from_f32(0.125));
    assert!(
        buffers
            .step_size
            .read()
            .unwrap()
            .iter()
            .all(|h| h.to_f32() == 0.125)
    );
    let weights = [1.0, 0.5, 0.25, 0.0].map(bf16::from_f32);
    buffers.weights.copy_from_host(&weights).unwrap();
    assert_eq!(buffers.weights.to_vec().unwrap(), weights);
}

#[test]
fn a_chunk_pipeline_streams_states_and_complex_results_through_the_device() {
    // Per run: State in and out (24 + 24), Complex<f64> [2, runs] (32) and
    // f16 (2): 82 bytes, C = 8200 B for 100 runs. With 3000 B free:
    // alloc = 2940, max_chunk = floor(100 * 2940 / 8200) = 35, chunks = 3,
    // chunk_length = 34 (the last chunk has 32 runs).
    let runs = 100;
    let mgr = manager(3_000);
    let solver = mgr.register(queuing()).unwrap();
    let along_runs = |request: ArrayRequest, axis| request.chunk_axis(axis).total_runs(runs);
    mgr.queue_request(
        &solver,
        [
            ("initial", along_runs(ArrayRequest::of::<State>([runs]), 0)),
            ("state", along_runs(ArrayRequest::of::<State>([runs]), 0)),
            (
                "spectrum",
                along_runs(ArrayRequest::of::<Complex<f64>>([2, runs]), 1),
            ),
            ("h", along_runs(ArrayRequest::of::<f16>([runs]), 0)),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!((response.chunks, response.chunk_length), (3, 34));
    let initial = response.take::<State>("initial").unwrap();
    let state = response.take::<State>("state").unwrap();
    let spectrum = response.take::<Complex<f64>>("spectrum").unwrap();
    let h = response.take::<f16>("h").unwrap();

    let values = states(runs);
    let host_initial = mgr
        .create_host_array([runs], HostMemoryKind::Pageable, Some(&values), &solver)
        .unwrap();
    let mut host_state = mgr
        .create_host_array::<State>([runs], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    let mut host_spectrum = mgr
        .create_host_array::<Complex<f64>>([2, runs], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let mut host_h = mgr
        .create_host_array::<f16>([runs], HostMemoryKind::Pinned, None, &solver)
        .unwrap();

    let streamer = mgr.chunk_streamer(&solver, response.plan()).unwrap();
    streamer
        .pipeline()
        .input(&host_initial, &initial)
        .output(&mut host_state, &state)
        .output(&mut host_spectrum, &spectrum)
        .output(&mut host_h, &h)
        .run(|_, _| {
            HostKernel::new("step", Duration::from_micros(1))
                .reads(&initial)
                .writes(&state)
                .writes(&spectrum)
                .writes(&h)
                .launch(|args| {
                    let initial = args.read(&initial)?;
                    let state = args.write(&state)?;
                    let (spectrum, h) = (args.write(&spectrum)?, args.write(&h)?);
                    let len = initial.len();
                    for (i, s) in initial.iter().enumerate() {
                        let next = s.step(0.5);
                        state[i] = next;
                        spectrum[i] = Complex::new(next.y, 0.0);
                        spectrum[len + i] = Complex::new(0.0, next.v);
                        h[i] = f16::from_f32(next.t);
                    }
                    Ok(())
                })
        })
        .unwrap();

    let stepped: Vec<State> = values.iter().map(|s| s.step(0.5)).collect();
    assert_eq!(host_state.as_slice(), stepped);
    let (real, imaginary) = host_spectrum.as_slice().split_at(runs);
    for (run, s) in stepped.iter().enumerate() {
        assert_eq!(real[run], Complex::new(s.y, 0.0), "run {run}");
        assert_eq!(imaginary[run], Complex::new(0.0, s.v), "run {run}");
        assert_eq!(host_h.as_slice()[run], f16::from_f32(s.t), "run {run}");
    }
}

/// Views of the new element types are kernel arguments on the CUDA backend,
/// as are their values (checked at compile time).
#[cfg(feature = "cuda")]
#[test]
fn the_new_types_are_cuda_launch_arguments() {
    use cubie_mem::cuda::{DeviceView, LaunchArg};
    fn launch_arg<A: LaunchArg + ?Sized>() {}
    launch_arg::<DeviceView<'static, State>>();
    launch_arg::<DeviceView<'static, f16>>();
    launch_arg::<DeviceView<'static, bf16>>();
    launch_arg::<DeviceView<'static, Complex<f32>>>();
    launch_arg::<DeviceView<'static, Complex<f64>>>();
    launch_arg::<State>();
    launch_arg::<f16>();
    launch_arg::<Complex<f64>>();
}
