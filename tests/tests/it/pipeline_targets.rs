//! What a pipeline binding names: arrays that remember their axis of runs,
//! `along` for another, pinned arrays bound and used by kernels in place,
//! computations that infer their error type, and `Allocated`'s sets and
//! release.

use std::time::Duration;

use crate::common::{manager, queuing};
use cubie_mem::{
    ArrayRequest, BatchError, ChunkTarget, DeviceArray, GpuBuffers, HostKernel, HostMemoryKind,
    MemError, MemoryKind, MemoryManager, PinnedArray, ReleaseReason,
};

const RUNS: usize = 1000;

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

const DIMS: Dims = Dims {
    n_states: 3,
    n_runs: RUNS,
};

/// A state on the device and a per-run status in pinned memory, two sets.
#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Solve {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = pinned)]
    status: PinnedArray<i32>,
    #[buffer(shape = [n_states], unchunkable)]
    scale: DeviceArray<f64>,
}

/// The same without a pipeline depth: one set, so `Allocated` derefs.
#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Single {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

/// 24 kB of state and 4 kB of status, 10 kB free: several chunks.
fn chunked() -> MemoryManager {
    manager(1 << 30, 10_000).0
}

fn inputs() -> Vec<f64> {
    (0..3 * RUNS).map(|i| i as f64).collect()
}

/// Doubles the state and flags each run whose first state is odd, in
/// every chunk; the status lives in pinned memory the kernel writes in
/// place.
fn run_solve(mgr: &MemoryManager) -> (Vec<f64>, Vec<i32>, usize) {
    let solver = mgr
        .register(Solve::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Solve>(&solver, &DIMS).unwrap();
    assert!(allocated.plan().chunks() > 2);
    assert_eq!(allocated.sets().len(), 2);
    let sets = allocated.sets();
    sets[0].scale.copy_from_host(&[2.0; 3]).unwrap();
    let values = inputs();
    let mut host_state = mgr
        .create_host_array([3, RUNS], HostMemoryKind::Pageable, Some(&values), &solver)
        .unwrap();
    let mut host_status = mgr
        .create_host_array::<i32>([RUNS], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let mut chunks = 0;
    let streamer = mgr.chunk_streamer(&solver, allocated.plan()).unwrap();
    streamer
        .pipeline_sets(sets)
        .inout_with(&mut host_state, |set| &set.state)
        .output_with(&mut host_status, |set| &set.status)
        .run(|chunk, set| {
            chunks += 1;
            let runs = chunk.runs.len();
            let length = set.status.len();
            HostKernel::new("flag", Duration::from_micros(2))
                .updates(&set.state)
                .reads(&set.scale)
                .writes(&set.status)
                .launch(|args| {
                    let scale = args.read(&set.scale)?[0];
                    let status = args.write(&set.status)?;
                    let state = args.write(&set.state)?;
                    for run in 0..runs {
                        status[run] = (state[run] as i64 % 2) as i32;
                    }
                    state.iter_mut().for_each(|x| *x *= scale);
                    assert_eq!(status.len(), length);
                    Ok(())
                })?;
            Ok(())
        })
        .unwrap();
    (
        host_state.as_slice().to_vec(),
        host_status.as_slice().to_vec(),
        chunks,
    )
}

#[test]
fn bindings_default_to_the_axis_each_array_was_requested_on() {
    let mgr = chunked();
    let (state, status, chunks) = run_solve(&mgr);
    assert!(chunks > 2);
    let expected: Vec<f64> = inputs().iter().map(|x| 2.0 * x).collect();
    assert_eq!(state, expected);
    let flags: Vec<i32> = (0..RUNS).map(|run| (run % 2) as i32).collect();
    assert_eq!(
        status, flags,
        "every chunk's pinned status reached the host"
    );
}

#[test]
fn arrays_remember_their_axis_of_runs() {
    let mgr = chunked();
    let solver = mgr
        .register(Solve::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Solve>(&solver, &DIMS).unwrap();
    let set = allocated.set(1).unwrap();
    assert_eq!(set.state.chunk_axis(), Some(1));
    assert_eq!(set.status.chunk_axis(), Some(0));
    assert_eq!(set.scale.chunk_axis(), None);
    assert_eq!(ChunkTarget::from(&set.state).axis(), Some(1));
    assert_eq!(set.state.along(0).axis(), Some(0));
    assert_eq!(ChunkTarget::from(&set.status).axis(), Some(0));
}

#[test]
fn a_binding_along_another_axis_still_works() {
    // A [runs, 2] array requested on axis 0, bound explicitly on axis 0,
    // and a [2, runs] array requested whole, in the one chunk, bound along 1.
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            (
                "rows",
                ArrayRequest::of::<u32>([100, 2])
                    .chunk_axis(0)
                    .total_runs(100),
            ),
            (
                "cols",
                ArrayRequest::of::<u32>([2, 100])
                    .total_runs(100)
                    .unchunkable(),
            ),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let rows = response.take::<u32>("rows").unwrap();
    let cols = response.take::<u32>("cols").unwrap();
    assert_eq!(cols.chunk_axis(), None, "requested whole");
    let values: Vec<u32> = (0..200).collect();
    let host_rows = mgr
        .create_host_array([100, 2], HostMemoryKind::Pageable, Some(&values), &solver)
        .unwrap();
    let host_cols = mgr
        .create_host_array([2, 100], HostMemoryKind::Pageable, Some(&values), &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, response.plan()).unwrap();
    streamer
        .pipeline()
        .input(&host_rows, rows.along(0))
        .input(&host_cols, cols.along(1))
        .run(|_, _| Ok(()))
        .unwrap();
    assert_eq!(rows.to_vec().unwrap(), values);
    assert_eq!(cols.to_vec().unwrap(), values);

    let refused = streamer
        .pipeline()
        .input(&host_cols, &cols)
        .run(|_, _| Ok(()))
        .unwrap_err();
    assert!(
        matches!(refused.error(), MemError::NoRunAxis { label } if label == "cols"),
        "{refused}"
    );
}

#[test]
fn a_pinned_array_without_a_pipeline_is_a_kernel_argument() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            ("x", ArrayRequest::of::<f32>([4])),
            (
                "flags",
                ArrayRequest::of::<u8>([4]).memory(MemoryKind::Pinned),
            ),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let x = response.take::<f32>("x").unwrap();
    let flags: PinnedArray<u8> = response.take_pinned("flags").unwrap();
    x.copy_from_host(&[1.0, -2.0, 3.0, -4.0]).unwrap();
    HostKernel::new("sign", Duration::from_micros(1))
        .reads(&x)
        .writes(&flags)
        .launch(|args| {
            let x = args.read(&x)?;
            let flags = args.write(&flags)?;
            flags
                .iter_mut()
                .zip(x)
                .for_each(|(flag, x)| *flag = u8::from(*x < 0.0));
            Ok(())
        })
        .unwrap();
    assert_eq!(&*flags.read().unwrap(), &[0, 1, 0, 1]);

    let alone = HostKernel::new("alone", Duration::from_micros(1))
        .writes(&flags)
        .launch(|_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(&alone, MemError::Kernel { kernel, reason }
            if kernel == "alone" && reason.contains("no stream is current")),
        "{alone}"
    );
    let twice = HostKernel::new("twice", Duration::from_micros(1))
        .reads(&flags)
        .writes(&flags)
        .launch(|_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(&twice, MemError::Kernel { kernel, reason }
            if kernel == "twice" && reason.contains("listed twice")),
        "{twice}"
    );
}

#[derive(Debug)]
enum SolverError {
    Diverged(usize),
    Memory(MemError),
}

impl From<MemError> for SolverError {
    fn from(error: MemError) -> Self {
        SolverError::Memory(error)
    }
}

#[test]
fn a_computation_with_its_own_error_type_runs_with_error() {
    let mgr = chunked();
    let solver = mgr
        .register(Single::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Single>(&solver, &DIMS).unwrap();
    let values = inputs();
    let host = mgr
        .create_host_array([3, RUNS], HostMemoryKind::Pageable, Some(&values), &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, allocated.plan()).unwrap();
    let stopped: BatchError<SolverError> = streamer
        .pipeline()
        .input(&host, &allocated.state)
        .run_with_error(|chunk, _| match chunk.index {
            1 => Err(SolverError::Diverged(chunk.runs.start)),
            _ => Ok(()),
        })
        .unwrap_err();
    assert!(matches!(stopped.error(), SolverError::Diverged(start) if *start > 0));
    assert_eq!(stopped.chunk(), Some(1));
    // A MemError from the pipeline itself arrives converted.
    let refused = streamer
        .pipeline_sets::<()>(&[])
        .run_with_error(|_, _| Ok::<(), SolverError>(()))
        .unwrap_err();
    assert!(matches!(
        refused.error(),
        SolverError::Memory(MemError::NoBufferSets)
    ));
}

#[test]
fn allocated_of_one_set_derefs_and_release_frees_its_arrays() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let solver = mgr
        .register(Single::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Single>(&solver, &DIMS).unwrap();
    let state = allocated.state.clone();
    assert_eq!(state.shape(), [3, RUNS]);
    assert_eq!(sim.live_allocations(), 1);
    drop(allocated);
    assert!(state.is_valid(), "dropping the struct frees nothing");
    assert_eq!(sim.live_allocations(), 1);

    let allocated = mgr.allocate_buffers::<Single>(&solver, &DIMS).unwrap();
    let state = allocated.state.clone();
    allocated.release(&mgr, &solver).unwrap();
    assert_eq!(state.release_reason(), Some(ReleaseReason::Freed));
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(solver.allocated_bytes(), 0);
}

#[test]
fn release_frees_every_set_and_skips_arrays_replaced_since() {
    let mgr = chunked();
    let solver = mgr
        .register(Solve::registration().on_invalidate(|| {}))
        .unwrap();
    let first = mgr.allocate_buffers::<Solve>(&solver, &DIMS).unwrap();
    let old: Vec<DeviceArray<f64>> = first.sets().iter().map(|s| s.state.clone()).collect();
    let smaller = Dims {
        n_states: 3,
        n_runs: 10,
    };
    // A new allocation replaces the arrays; releasing the old struct must
    // not free the new ones.
    let second = mgr.allocate_buffers::<Solve>(&solver, &smaller).unwrap();
    first.release(&mgr, &solver).unwrap();
    assert!(second.set(0).unwrap().state.is_valid());
    assert!(old.iter().all(|state| !state.is_valid()));
    let kept = second.set(0).unwrap().status.clone();
    second.release(&mgr, &solver).unwrap();
    assert_eq!(kept.release_reason(), Some(ReleaseReason::Freed));
}

#[test]
fn one_pinned_set_carries_every_chunk_in_and_out_in_turn() {
    // 8 kB of pinned runs with 2 kB free for chunkable arrays: one set,
    // several chunks, each gathered into the same pinned buffer only after
    // the previous chunk's results were scattered out of it.
    let (mgr, _) = manager(1 << 30, 2_000);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [(
            "y",
            ArrayRequest::of::<f64>([RUNS])
                .chunk_axis(0)
                .total_runs(RUNS)
                .memory(MemoryKind::Pinned),
        )],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    assert!(response.chunks > 3 && response.buffer_sets() == 1);
    let y: PinnedArray<f64> = response.take_pinned("y").unwrap();
    let values: Vec<f64> = (0..RUNS).map(|i| i as f64).collect();
    let mut host = mgr
        .create_host_array([RUNS], HostMemoryKind::Pageable, Some(&values), &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, response.plan()).unwrap();
    let mut starts = Vec::new();
    streamer
        .pipeline()
        .inout(&mut host, &y)
        .run(|chunk, _| {
            starts.push(chunk.runs.start);
            let first = chunk.runs.start as f64;
            let runs = chunk.runs.len();
            HostKernel::new("negate", Duration::from_micros(3))
                .updates(&y)
                .launch(|args| {
                    let y = args.write(&y)?;
                    assert_eq!(y[0], first, "the chunk's own runs are in place");
                    y[..runs].iter_mut().for_each(|v| *v = -*v);
                    Ok(())
                })
        })
        .unwrap();
    assert_eq!(starts.len(), response.chunks);
    let negated: Vec<f64> = values.iter().map(|v| -v).collect();
    assert_eq!(host.as_slice(), negated);
}

/// A per-run rate in a page-locked set the host fills in place, and a
/// large state uploaded from page-locked memory, two sets.
#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Rated {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = pinned)]
    rate: PinnedArray<f64>,
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

#[test]
fn a_pinned_set_is_filled_once_its_kernel_is_done_not_the_other_uploads() {
    // 1 byte per ns for copies and for the host; 100 states a run, so the
    // state's uploads take 100 times the rates' gathers.
    let sim = cubie_mem::SimBackend::new(1 << 30)
        .with_free(300_000)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&cubie_mem::backend::Calibration {
            memcpy_by_threads: vec![1_000_000_000],
            ..cubie_mem::backend::Calibration::fixed()
        });
    let mgr = crate::common::manager_on(sim.clone());
    let dims = Dims {
        n_states: 100,
        n_runs: RUNS,
    };
    let solver = mgr
        .register(Rated::registration().on_invalidate(|| {}))
        .unwrap();
    let allocated = mgr.allocate_buffers::<Rated>(&solver, &dims).unwrap();
    let chunks = allocated.plan().chunks();
    assert!(chunks >= 4, "{chunks} chunks");
    let rates = mgr
        .create_host_array::<f64>([RUNS], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let states = mgr
        .create_host_array::<f64>([100, RUNS], HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    sim.clear_timeline();
    mgr.chunk_streamer(&solver, allocated.plan())
        .unwrap()
        .with_staging_threads(cubie_mem::StagingThreads::new(1).unwrap())
        .pipeline_sets(allocated.sets())
        .input_with(&rates, |set| &set.rate)
        .input_with(&states, |set| &set.state)
        .run(|_, set| {
            HostKernel::new("step", Duration::from_micros(1))
                .reads(&set.rate)
                .updates(&set.state)
                .launch(|_| Ok(()))
        })
        .unwrap();
    // The uploads run back to back: the host fills chunk k's rates while
    // chunk k - 1's state still uploads, so only the first chunk's rates
    // and the last chunk's kernel lie outside them.
    let timeline = sim.timeline();
    let uploads = timeline.busy_ns(cubie_mem::timeline::Activity::HostToDevice);
    let chunk_rates = (RUNS / chunks * 8) as u64;
    assert!(
        timeline.makespan_ns() <= uploads + chunk_rates + 1_000 + 10,
        "makespan {} against uploads {uploads} ns",
        timeline.makespan_ns()
    );
}
