//! Resuming a chunk pipeline that failed: the resumed run computes only
//! the chunks the failed one left, every run is computed exactly once, and
//! the results are byte-exact against a run that never failed.

use crate::common;
use std::time::Duration;

use cubie_mem::{
    ArrayRequest, BatchError, ChunkPlan, DeviceArray, HostKernel, HostMemoryKind, MemError,
    MemoryManager, Registration,
};

const RUNS: usize = 1000;
const CHUNK: usize = 10;

/// One buffer set.
struct Set {
    input: DeviceArray<u32>,
    output: DeviceArray<u32>,
    state: DeviceArray<u32>,
}

fn sets(mgr: &MemoryManager, solver: &cubie_mem::Instance, n: usize) -> Vec<Set> {
    let requests = (0..n).flat_map(|set| {
        ["input", "output", "state"].map(|label| {
            (
                format!("{label}{set}"),
                ArrayRequest::of::<u32>([2, CHUNK]).unchunkable(),
            )
        })
    });
    mgr.queue_request(solver, requests).unwrap();
    let mut response = mgr.allocate_queue_for(solver).unwrap();
    (0..n)
        .map(|set| Set {
            input: response.take(&format!("input{set}")).unwrap(),
            output: response.take(&format!("output{set}")).unwrap(),
            state: response.take(&format!("state{set}")).unwrap(),
        })
        .collect()
}

/// Computes one chunk on `set`, counting each of its runs in `counts`;
/// fails (before launching anything) when `fail` says so.
fn step(
    chunk: &cubie_mem::Chunk,
    set: &Set,
    counts: &mut [usize],
    fail: bool,
) -> Result<(), MemError> {
    if fail {
        return Err(MemError::NoBufferSets);
    }
    HostKernel::new("step", Duration::from_micros(1))
        .reads(&set.input)
        .writes(&set.output)
        .updates(&set.state)
        .launch(|args| {
            let input = args.read(&set.input)?;
            let output = args.write(&set.output)?;
            let state = args.write(&set.state)?;
            output
                .iter_mut()
                .zip(input)
                .for_each(|(y, &x)| *y = x.wrapping_mul(3).wrapping_add(1));
            state.iter_mut().for_each(|v| *v = v.wrapping_add(7));
            Ok(())
        })?;
    counts[chunk.runs.clone()].iter_mut().for_each(|c| *c += 1);
    Ok(())
}

#[test]
fn a_failed_batch_resumes_where_it_stopped_and_computes_every_run_once() {
    for kind in [
        HostMemoryKind::Pinned,
        HostMemoryKind::Pageable,
        HostMemoryKind::Spilled,
    ] {
        for depth in [1, 2] {
            let (mgr, _) = common::manager(1 << 30, 1 << 30);
            let solver = mgr
                .register(Registration::new().on_invalidate(|| {}))
                .unwrap();
            let sets = sets(&mgr, &solver, depth);
            let input: Vec<u32> = (0..2 * RUNS as u32).map(|i| i * 11 + 5).collect();
            let state: Vec<u32> = (0..2 * RUNS as u32).map(|i| i ^ 0x5a).collect();
            let host_in = mgr
                .create_host_array([2, RUNS], kind, Some(&input), &solver)
                .unwrap();
            let mut host_out = mgr
                .create_host_array::<u32>([2, RUNS], kind, None, &solver)
                .unwrap();
            let mut host_state = mgr
                .create_host_array([2, RUNS], kind, Some(&state), &solver)
                .unwrap();
            let plan = ChunkPlan::new(RUNS, RUNS / CHUNK, CHUNK).unwrap();
            let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
            let mut counts = vec![0usize; RUNS];

            // A fault at chunk 70 of 100.
            let failed: BatchError = streamer
                .pipeline_sets(&sets)
                .input_with(&host_in, |set| set.input.along(1))
                .output_with(&mut host_out, |set| set.output.along(1))
                .inout_with(&mut host_state, |set| set.state.along(1))
                .run(|chunk, set| step(chunk, set, &mut counts, chunk.index == 70))
                .unwrap_err();
            assert_eq!(failed.chunk(), Some(70));
            assert_eq!(failed.completed(), 0..70);
            assert_eq!(failed.completed_runs(), 0..700);

            // Resumed, a second fault at chunk 80.
            let mut resumed = Vec::new();
            let again = streamer
                .pipeline_sets(&sets)
                .input_with(&host_in, |set| set.input.along(1))
                .output_with(&mut host_out, |set| set.output.along(1))
                .inout_with(&mut host_state, |set| set.state.along(1))
                .resume(&failed)
                .run(|chunk, set| {
                    resumed.push(chunk.index);
                    step(chunk, set, &mut counts, chunk.index == 80)
                })
                .unwrap_err();
            assert_eq!(again.chunk(), Some(80));
            assert_eq!(again.completed(), 70..80);
            assert_eq!(again.completed_runs(), 700..800);
            assert_eq!(resumed, (70..=80).collect::<Vec<_>>());

            // Resumed again: the last 20 chunks only.
            resumed.clear();
            streamer
                .pipeline_sets(&sets)
                .input_with(&host_in, |set| set.input.along(1))
                .output_with(&mut host_out, |set| set.output.along(1))
                .inout_with(&mut host_state, |set| set.state.along(1))
                .resume(&again)
                .run(|chunk, set| {
                    resumed.push(chunk.index);
                    step(chunk, set, &mut counts, false)
                })
                .unwrap();
            assert_eq!(resumed, (80..100).collect::<Vec<_>>());

            assert!(counts.iter().all(|&c| c == 1), "{kind:?} depth {depth}");
            let expected_out: Vec<u32> = input
                .iter()
                .map(|x| x.wrapping_mul(3).wrapping_add(1))
                .collect();
            let expected_state: Vec<u32> = state.iter().map(|v| v.wrapping_add(7)).collect();
            assert_eq!(host_out.to_vec(), expected_out, "{kind:?} depth {depth}");
            assert_eq!(
                host_state.to_vec(),
                expected_state,
                "{kind:?} depth {depth}"
            );
        }
    }
}

#[test]
fn a_chunk_range_outside_the_plan_is_refused_before_anything_moves() {
    let (mgr, _) = common::manager(1 << 30, 1 << 30);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let sets = sets(&mgr, &solver, 1);
    let mut host_out = mgr
        .create_host_array::<u32>([2, RUNS], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let plan = ChunkPlan::new(RUNS, RUNS / CHUNK, CHUNK).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    let mut computed = 0;
    let failure = streamer
        .pipeline_sets(&sets)
        .output_with(&mut host_out, |set| set.output.along(1))
        .chunk_range(90..120)
        .run(|_, _| {
            computed += 1;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(computed, 0);
    assert_eq!(
        failure.error(),
        &MemError::ChunkRange {
            start: 90,
            end: 120,
            chunks: 100
        }
    );
    // Nothing of the range is done: a resume starts where it did.
    assert_eq!((failure.chunk(), failure.completed()), (None, 90..90));
    assert_eq!(failure.completed_runs(), 900..900);

    // A range within the plan runs those chunks only; an empty one, none.
    let mut ran = Vec::new();
    streamer
        .pipeline_sets(&sets)
        .output_with(&mut host_out, |set| set.output.along(1))
        .chunk_range(40..43)
        .run(|chunk, _| {
            ran.push(chunk.runs.clone());
            Ok(())
        })
        .unwrap();
    assert_eq!(ran, [400..410, 410..420, 420..430]);
    streamer
        .pipeline_sets(&sets)
        .output_with(&mut host_out, |set| set.output.along(1))
        .chunk_range(100..100)
        .run(|_, _| panic!("no chunk to compute"))
        .unwrap();
}

mod set {
    //! A set's batch resumed after one device failed.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use cubie_mem::{
        DeviceArray, DeviceSet, GpuBuffers, HostKernel, HostMemoryKind, ManagerConfig, MemError,
        Registration, SimBackend, Throughput,
    };

    pub struct Dims {
        pub n_states: usize,
        pub n_runs: usize,
    }

    /// A state per run, updated in place, two buffer sets.
    #[derive(GpuBuffers)]
    #[buffers(dims = Dims, pipeline_depth = 2)]
    pub struct Solve {
        #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
        state: DeviceArray<f64>,
    }

    const STATES: usize = 4;

    /// `state = 2 * state + run` over the chunk, counting each run.
    fn step(chunk: &cubie_mem::Chunk, set: &Solve, counts: &[AtomicUsize]) -> Result<(), MemError> {
        let (runs, first) = (chunk.runs.len(), chunk.runs.start);
        let length = set.state.shape()[1];
        HostKernel::new("step", std::time::Duration::from_micros(1))
            .updates(&set.state)
            .launch(|args| {
                let state = args.write(&set.state)?;
                for row in state.chunks_mut(length) {
                    for (run, x) in row.iter_mut().take(runs).enumerate() {
                        *x = 2.0 * *x + (first + run) as f64;
                    }
                }
                Ok(())
            })?;
        for run in chunk.runs.clone() {
            counts[run].fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    #[test]
    fn a_set_resumes_each_device_where_it_stopped() {
        let set = DeviceSet::simulated(
            (0..3).map(|_| SimBackend::new(64 << 30).with_free(64 << 10)),
            ManagerConfig::default().granule(0),
        );
        let runs = 60_000;
        let buffers = set
            .allocate::<Solve>(
                runs,
                &Throughput::Equal,
                |_| Solve::registration().on_invalidate(|| {}),
                |n_runs| Dims {
                    n_states: STATES,
                    n_runs,
                },
            )
            .unwrap();
        let maker = set.manager(0).unwrap();
        let holder = maker.register(Registration::new()).unwrap();
        let initial: Vec<f64> = (0..STATES * runs).map(|i| i as f64).collect();
        let mut host = maker
            .create_host_array(
                [STATES, runs],
                HostMemoryKind::Pageable,
                Some(&initial),
                &holder,
            )
            .unwrap();
        let counts: Vec<AtomicUsize> = (0..runs).map(|_| AtomicUsize::new(0)).collect();

        let failed = buffers
            .pipeline()
            .inout(&mut host, |set| &set.state)
            .run(|device, chunk, set| {
                if device == 1 && chunk.index == 2 {
                    return Err(MemError::Kernel {
                        kernel: "step".into(),
                        reason: "diverged".into(),
                    });
                }
                step(chunk, set, &counts)
            })
            .unwrap_err();
        assert_eq!((failed.device(), failed.chunk()), (Some(1), Some(2)));
        let saved: usize = failed.saved_runs().iter().map(|r| r.len()).sum();
        assert!(saved < runs);

        let resumed = AtomicUsize::new(0);
        let done = buffers
            .pipeline()
            .inout(&mut host, |set| &set.state)
            .resume(&failed)
            .run(|_, chunk, set| {
                resumed.fetch_add(chunk.runs.len(), Ordering::Relaxed);
                step(chunk, set, &counts)
            })
            .unwrap();
        assert_eq!(done.len(), 3);
        // Only the runs not saved were computed again.
        assert_eq!(resumed.into_inner(), runs - saved);
        assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        let expected: Vec<f64> = initial
            .iter()
            .enumerate()
            .map(|(i, x)| 2.0 * x + (i % runs) as f64)
            .collect();
        let got = host.as_slice();
        assert!(
            got.iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "results differ from a run that never failed"
        );
    }
}
