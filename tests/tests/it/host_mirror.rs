//! The host mirror `#[buffers(host = Name)]` generates: its arrays have the
//! shapes, element types and memory kinds of the struct's requests, and one
//! `bind` call streams a batch (resumed after a failure too, or through a
//! composed struct's parts) exactly as one binding per array does.

use crate::common;
use std::time::Duration;

use cubie_mem::{
    BatchError, Chunk, DType, DeviceArray, DeviceSet, Element, GpuBuffers, HostArray, HostKernel,
    HostMemoryKind, ManagerConfig, MemError, MemoryManager, PinnedArray, Precision, Registration,
    SimBackend, Throughput,
};

/// The sizes the shapes refer to.
pub struct StepDims {
    pub n_states: usize,
    pub n_runs: usize,
}

/// One step of a solver: an input, an accumulator it reads and writes, a
/// result, a scratch buffer and unchunkable weights.
#[derive(GpuBuffers)]
#[stream_group("mirror")]
#[buffers(dims = StepDims, pipeline_depth = 2, host = StepHost)]
pub struct Step<P: Precision> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, input)]
    x: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = 0, inout, host_memory = spilled)]
    acc: DeviceArray<u32>,
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, output, label = "result")]
    y: DeviceArray<P>,
    #[buffer(shape = [n_runs], memory = pinned, output)]
    flags: PinnedArray<i32>,
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    scratch: DeviceArray<P>,
    #[buffer(shape = [n_states], unchunkable)]
    weights: DeviceArray<P>,
}

const N_STATES: usize = 3;
const RUNS: usize = 1000;
const WEIGHTS: [f64; N_STATES] = [0.5, -1.25, 2.0];

fn dims() -> StepDims {
    StepDims {
        n_states: N_STATES,
        n_runs: RUNS,
    }
}

/// A manager whose device holds a few chunks of `Step<f64>` at a time.
fn manager() -> MemoryManager {
    common::manager(1 << 30, 30_000).0
}

/// Fills the mirror's inputs: `x` and the accumulator's starting values.
fn fill(host: &mut StepHost<f64>) {
    for (i, x) in host.x.as_mut_slice().iter_mut().enumerate() {
        *x = (i % 17) as f64 * 0.25 - 1.0;
    }
    for (i, acc) in host.acc.as_mut_slice().iter_mut().enumerate() {
        *acc = i as u32 ^ 0x55;
    }
}

/// The kernel: `y = 2x + w`, `acc = 3 acc + 1`, `flags = run index`.
fn step(chunk: &Chunk, set: &Step<f64>) -> Result<(), MemError> {
    let width = set.x.shape()[1];
    let start = chunk.runs.start;
    HostKernel::new("step", Duration::from_micros(1))
        .reads(&set.x)
        .reads(&set.weights)
        .writes(&set.scratch)
        .writes(&set.y)
        .updates(&set.acc)
        .writes(&set.flags)
        .launch(|args| {
            let x = args.read(&set.x)?;
            let weights = args.read(&set.weights)?;
            let scratch = args.write(&set.scratch)?;
            let y = args.write(&set.y)?;
            let acc = args.write(&set.acc)?;
            let flags = args.write(&set.flags)?;
            for (v, weight) in weights.iter().enumerate() {
                for run in 0..chunk.len() {
                    let at = v * width + run;
                    scratch[at] = 2.0 * x[at];
                    y[at] = scratch[at] + weight;
                }
            }
            acc.iter_mut()
                .for_each(|a| *a = a.wrapping_mul(3).wrapping_add(1));
            for (run, flag) in flags.iter_mut().take(chunk.len()).enumerate() {
                *flag = i32::try_from(start + run).unwrap_or(-1);
            }
            Ok(())
        })
}

/// Checks every run of a streamed mirror against the arithmetic.
fn check(host: &StepHost<f64>) {
    let (x, y) = (host.x.as_slice(), host.y.as_slice());
    for (v, weight) in WEIGHTS.iter().enumerate() {
        for run in 0..RUNS {
            let at = v * RUNS + run;
            assert_eq!(y[at].to_bits(), (2.0 * x[at] + weight).to_bits());
        }
    }
    for (i, &acc) in host.acc.as_slice().iter().enumerate() {
        assert_eq!(acc, (i as u32 ^ 0x55).wrapping_mul(3).wrapping_add(1));
    }
    for (run, &flag) in host.flags.as_slice().iter().enumerate() {
        assert_eq!(flag, i32::try_from(run).unwrap());
    }
}

/// The element type of `array`, as its request names it.
fn dtype<T: Element>(_: &HostArray<T>) -> DType {
    T::DTYPE
}

#[test]
fn the_mirror_has_the_requests_shapes_elements_and_kinds() {
    let mgr = manager();
    let holder = mgr
        .register(Step::<f32>::registration().on_invalidate(|| {}))
        .unwrap();
    let requests = Step::<f32>::requests(&dims());
    let host = StepHost::<f32>::new(&mgr, &dims(), HostMemoryKind::Pageable, &holder).unwrap();
    assert_eq!(host.x.shape(), requests.get("x").unwrap().shape());
    assert_eq!(host.x.shape(), [N_STATES, RUNS]);
    assert_eq!(host.y.shape(), requests.get("result").unwrap().shape());
    assert_eq!(host.acc.shape(), [RUNS]);
    assert_eq!(host.flags.shape(), [RUNS]);
    assert_eq!(
        (dtype(&host.x), dtype(&host.y), dtype(&host.acc)),
        (DType::F32, DType::F32, DType::U32)
    );
    assert_eq!(dtype(&host.flags), requests.get("flags").unwrap().dtype());
    // The mirror's kind, except where a field names its own.
    assert_eq!(host.x.kind(), HostMemoryKind::Pageable);
    assert_eq!(host.y.kind(), HostMemoryKind::Pageable);
    assert_eq!(host.flags.kind(), HostMemoryKind::Pageable);
    assert_eq!(host.acc.kind(), HostMemoryKind::Spilled);
    assert!(host.x.as_slice().iter().all(|&x| x == 0.0), "zero-filled");

    let pinned = StepHost::<f64>::new(&mgr, &dims(), HostMemoryKind::Pinned, &holder).unwrap();
    assert_eq!(pinned.x.kind(), HostMemoryKind::Pinned);
    assert_eq!(pinned.acc.kind(), HostMemoryKind::Spilled);
    assert_eq!(dtype(&pinned.x), DType::F64);
    // No kind: the manager chooses, as `create_host_array` with `None`.
    let chosen = StepHost::<f64>::new(&mgr, &dims(), None, &holder).unwrap();
    let by_hand = mgr
        .create_host_array::<f64>([N_STATES, RUNS], None, None, &holder)
        .unwrap();
    assert_eq!(chosen.x.kind(), by_hand.kind());
    assert_eq!(chosen.acc.kind(), HostMemoryKind::Spilled);
}

#[test]
fn one_bind_streams_a_batch_as_one_binding_per_array_does() {
    let mgr = manager();
    let holder = mgr
        .register(Step::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let step_buffers = mgr.allocate_buffers::<Step<f64>>(&holder, &dims()).unwrap();
    assert!(step_buffers.plan().chunks() > 2, "{}", step_buffers.plan());
    step_buffers.sets()[0]
        .weights
        .copy_from_host(&WEIGHTS)
        .unwrap();
    let streamer = mgr.chunk_streamer(&holder, step_buffers.plan()).unwrap();

    let mut mirror = StepHost::new(&mgr, &dims(), HostMemoryKind::Pageable, &holder).unwrap();
    fill(&mut mirror);
    streamer
        .pipeline_sets(step_buffers.sets())
        .bind(&mut mirror, |set| set)
        .run(step)
        .unwrap();
    check(&mirror);

    let mut by_hand = StepHost::new(&mgr, &dims(), HostMemoryKind::Pageable, &holder).unwrap();
    fill(&mut by_hand);
    streamer
        .pipeline_sets(step_buffers.sets())
        .input_with(&by_hand.x, |set| &set.x)
        .inout_with(&mut by_hand.acc, |set| &set.acc)
        .output_with(&mut by_hand.y, |set| &set.y)
        .output_with(&mut by_hand.flags, |set| &set.flags)
        .run(step)
        .unwrap();
    assert_eq!(mirror.y.to_vec(), by_hand.y.to_vec());
    assert_eq!(mirror.acc.to_vec(), by_hand.acc.to_vec());
    assert_eq!(mirror.flags.to_vec(), by_hand.flags.to_vec());
}

#[test]
fn a_failed_batch_resumes_with_the_same_one_call_bind() {
    let mgr = manager();
    let holder = mgr
        .register(Step::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let step_buffers = mgr.allocate_buffers::<Step<f64>>(&holder, &dims()).unwrap();
    let chunks = step_buffers.plan().chunks();
    assert!(chunks > 3, "{}", step_buffers.plan());
    step_buffers.sets()[0]
        .weights
        .copy_from_host(&WEIGHTS)
        .unwrap();
    let streamer = mgr.chunk_streamer(&holder, step_buffers.plan()).unwrap();
    let mut host = StepHost::new(&mgr, &dims(), None, &holder).unwrap();
    fill(&mut host);
    let mut counts = vec![0usize; RUNS];
    let mut compute = |chunk: &Chunk, set: &Step<f64>, fail: bool| {
        if fail {
            return Err(MemError::NoBufferSets);
        }
        step(chunk, set)?;
        counts[chunk.runs.clone()].iter_mut().for_each(|c| *c += 1);
        Ok(())
    };

    let failed: BatchError = streamer
        .pipeline_sets(step_buffers.sets())
        .bind(&mut host, |set| set)
        .run(|chunk, set| compute(chunk, set, chunk.index == 2))
        .unwrap_err();
    assert_eq!(failed.chunk(), Some(2));
    assert_eq!(failed.completed(), 0..2);

    let mut resumed = Vec::new();
    streamer
        .pipeline_sets(step_buffers.sets())
        .bind(&mut host, |set| set)
        .resume(&failed)
        .run(|chunk, set| {
            resumed.push(chunk.index);
            compute(chunk, set, false)
        })
        .unwrap();
    assert_eq!(resumed, (2..chunks).collect::<Vec<_>>());
    assert!(counts.iter().all(|&c| c == 1), "every run computed once");
    check(&host);
}

/// A composed struct's first part: an input and a counter, with a mirror.
#[derive(GpuBuffers)]
#[stream_group("mirror")]
#[buffers(dims = StepDims, host = InsHost)]
pub struct Ins<P: Precision> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, input)]
    a: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = 0, inout)]
    count: DeviceArray<u32>,
}

/// Its second part: a result with the runs first, with a mirror.
#[derive(GpuBuffers)]
#[stream_group("mirror")]
#[buffers(dims = StepDims, host = OutsHost)]
pub struct Outs<P: Precision> {
    #[buffer(shape = [n_runs, n_states], chunk_axis = 0, output)]
    b: DeviceArray<P>,
}

/// The two parts, two buffer sets.
#[derive(GpuBuffers)]
#[buffers(pipeline_depth = 2)]
pub struct Both<P: Precision> {
    #[buffer(part)]
    ins: Ins<P>,
    #[buffer(part)]
    outs: Outs<P>,
}

/// `b[run][v] = 3 a[v][run]`, `count += 1`.
fn both(chunk: &Chunk, set: &Both<f64>) -> Result<(), MemError> {
    let (ins, outs) = (&set.ins, &set.outs);
    let width = ins.a.shape()[1];
    HostKernel::new("both", Duration::from_micros(1))
        .reads(&ins.a)
        .updates(&ins.count)
        .writes(&outs.b)
        .launch(|args| {
            let a = args.read(&ins.a)?;
            let count = args.write(&ins.count)?;
            let b = args.write(&outs.b)?;
            for run in 0..chunk.len() {
                for v in 0..N_STATES {
                    b[run * N_STATES + v] = 3.0 * a[v * width + run];
                }
                count[run] += 1;
            }
            Ok(())
        })
}

/// Fills the parts' inputs.
fn fill_parts(ins: &mut InsHost<f64>) {
    for (i, a) in ins.a.as_mut_slice().iter_mut().enumerate() {
        *a = i as f64 * 0.5 - 7.0;
    }
    for (i, count) in ins.count.as_mut_slice().iter_mut().enumerate() {
        *count = i as u32 * 10;
    }
}

/// Checks the parts' mirrors after one pass over every run.
fn check_parts(ins: &InsHost<f64>, outs: &OutsHost<f64>) {
    assert_eq!(outs.b.shape(), [RUNS, N_STATES]);
    let (a, b) = (ins.a.as_slice(), outs.b.as_slice());
    for run in 0..RUNS {
        for v in 0..N_STATES {
            assert_eq!(
                b[run * N_STATES + v].to_bits(),
                (3.0 * a[v * RUNS + run]).to_bits()
            );
        }
    }
    for (i, &count) in ins.count.as_slice().iter().enumerate() {
        assert_eq!(count, i as u32 * 10 + 1, "run {i} computed once");
    }
}

#[test]
fn each_part_of_a_composed_struct_binds_its_own_mirror_in_one_call() {
    let mgr = manager();
    let holder = mgr
        .register(Both::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let solver = mgr.allocate_buffers::<Both<f64>>(&holder, &dims()).unwrap();
    assert!(solver.plan().chunks() > 2, "{}", solver.plan());
    assert_eq!(solver.sets().len(), 2);
    let mut ins = InsHost::new(&mgr, &dims(), HostMemoryKind::Pinned, &holder).unwrap();
    let mut outs = OutsHost::new(&mgr, &dims(), HostMemoryKind::Pageable, &holder).unwrap();
    fill_parts(&mut ins);
    mgr.chunk_streamer(&holder, solver.plan())
        .unwrap()
        .pipeline_sets(solver.sets())
        .bind(&mut ins, |set| &set.ins)
        .bind(&mut outs, |set| &set.outs)
        .run(both)
        .unwrap();
    check_parts(&ins, &outs);
}

#[test]
fn a_device_set_pipeline_binds_a_mirror_in_one_call() {
    let set = DeviceSet::simulated(
        [
            SimBackend::new(1 << 30).with_free(20_000),
            SimBackend::new(1 << 30).with_free(40_000),
        ],
        ManagerConfig::default().granule(0),
    );
    let buffers = set
        .allocate::<Both<f64>>(
            RUNS,
            &Throughput::Equal,
            |_| Both::<f64>::registration().on_invalidate(|| {}),
            |n_runs| StepDims {
                n_states: N_STATES,
                n_runs,
            },
        )
        .unwrap();
    let manager = &set.managers()[0];
    let holder = manager.register(Registration::new()).unwrap();
    let mut ins = InsHost::new(manager, &dims(), HostMemoryKind::Pageable, &holder).unwrap();
    let mut outs = OutsHost::new(manager, &dims(), None, &holder).unwrap();
    fill_parts(&mut ins);
    let streamed = buffers
        .pipeline()
        .bind(&mut ins, |set| &set.ins)
        .bind(&mut outs, |set| &set.outs)
        .run(|_device, chunk, set| both(chunk, set))
        .unwrap();
    assert_eq!(streamed.iter().map(|runs| runs.len()).sum::<usize>(), RUNS);
    assert!(streamed.iter().all(|runs| !runs.is_empty()), "{streamed:?}");
    check_parts(&ins, &outs);
}
