//! A chunk pipeline that fails: over random failure points (which chunk
//! errors or panics, before or after launching its kernel), buffer-set
//! counts and host memory kinds, every chunk computed before the failure is
//! in the host arrays, no later chunk wrote anything there, the error names
//! the chunk, and nothing leaks: device memory, page-locked blocks, staging
//! buffers, events and streams are all back where they started.

use crate::common;
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

use cubie_mem::backend::Backend;
use cubie_mem::{
    ArrayRequest, BatchError, ChunkPlan, DeviceArray, HostKernel, HostMemoryKind, MemError,
    Registration, SimBackend,
};
use proptest::prelude::*;

const TOTAL: u64 = 1 << 30;

/// One buffer set of the test's kernel.
struct Set {
    input: DeviceArray<u32>,
    output: DeviceArray<u32>,
    state: DeviceArray<u32>,
}

/// How the computation of the failing chunk fails.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Failure {
    /// Returns an error before launching its kernel.
    ErrorBefore,
    /// Launches its kernel (whose results must not be claimed), then
    /// returns an error.
    ErrorAfter,
    /// Panics.
    Panic,
}

#[derive(Debug, Clone)]
struct Case {
    runs: usize,
    chunk_length: usize,
    sets: usize,
    kind: HostMemoryKind,
    staging_bytes: usize,
    fail_at: usize,
    failure: Failure,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..=24,
        1usize..=3,
        prop_oneof![
            Just(HostMemoryKind::Pinned),
            Just(HostMemoryKind::Pageable),
            Just(HostMemoryKind::Spilled),
        ],
        prop_oneof![Just(4usize), Just(12), Just(1 << 20)],
        prop_oneof![
            Just(Failure::ErrorBefore),
            Just(Failure::ErrorAfter),
            Just(Failure::Panic)
        ],
    )
        .prop_flat_map(|(runs, sets, kind, staging_bytes, failure)| {
            (1usize..=runs).prop_flat_map(move |chunk_length| {
                let chunks = runs.div_ceil(chunk_length);
                (0..chunks).prop_map(move |fail_at| Case {
                    runs,
                    chunk_length,
                    sets,
                    kind,
                    staging_bytes,
                    fail_at,
                    failure,
                })
            })
        })
}

fn output_of(x: u32) -> u32 {
    x.wrapping_mul(3).wrapping_add(1)
}

fn state_of(v: u32) -> u32 {
    v.wrapping_add(7)
}

/// What one case leaves behind.
struct Outcome {
    result: std::thread::Result<Result<(), BatchError<MemError>>>,
    output: Vec<u32>,
    state: Vec<u32>,
}

/// Runs the case's batch on `sim`, then frees everything it made.
fn run_case(case: &Case, sim: &SimBackend) -> Result<Outcome, MemError> {
    let mgr = common::manager_on(sim.clone());
    let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
    let requests = (0..case.sets).flat_map(|set| {
        ["input", "output", "state"].map(|label| {
            (
                format!("{label}{set}"),
                ArrayRequest::of::<u32>([2, case.chunk_length]).unchunkable(),
            )
        })
    });
    mgr.queue_request(&solver, requests)?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let sets = (0..case.sets)
        .map(|set| {
            Ok(Set {
                input: response.take(&format!("input{set}"))?,
                output: response.take(&format!("output{set}"))?,
                state: response.take(&format!("state{set}"))?,
            })
        })
        .collect::<Result<Vec<_>, MemError>>()?;
    let shape = [2, case.runs];
    let input: Vec<u32> = (0..2 * case.runs as u32).map(|i| i * 11 + 5).collect();
    let state: Vec<u32> = (0..2 * case.runs as u32).map(|i| i ^ 0x5a).collect();
    let host_in = mgr.create_host_array(shape, case.kind, Some(&input), &solver)?;
    let mut host_out = mgr.create_host_array::<u32>(shape, case.kind, None, &solver)?;
    let mut host_state = mgr.create_host_array(shape, case.kind, Some(&state), &solver)?;
    let plan = ChunkPlan::new(
        case.runs,
        case.runs.div_ceil(case.chunk_length),
        case.chunk_length,
    )?;
    let streamer = mgr
        .chunk_streamer(&solver, &plan)?
        .with_staging_bytes(case.staging_bytes);
    let pipeline = streamer
        .pipeline_sets(&sets)
        .input_with(&host_in, |set| set.input.along(1))
        .output_with(&mut host_out, |set| set.output.along(1))
        .inout_with(&mut host_state, |set| set.state.along(1));
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        pipeline.run(|chunk, set| {
            let failing = chunk.index == case.fail_at;
            if failing && case.failure == Failure::ErrorBefore {
                return Err(MemError::NoBufferSets);
            }
            if failing && case.failure == Failure::Panic {
                panic!("the computation of chunk {} panicked", chunk.index);
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
                        .for_each(|(y, &x)| *y = output_of(x));
                    state.iter_mut().for_each(|v| *v = state_of(*v));
                    Ok(())
                })?;
            if failing {
                return Err(MemError::NoBufferSets);
            }
            Ok(())
        })
    }));
    assert_eq!(streamer.pool().in_flight("output"), 0, "{case:?}");
    assert_eq!(streamer.pool().in_flight("state"), 0, "{case:?}");
    assert_eq!(streamer.pool().in_flight("input"), 0, "{case:?}");
    streamer.pool().clear();
    drop(streamer);
    let outcome = Outcome {
        result,
        output: host_out.to_vec(),
        state: host_state.to_vec(),
    };
    drop((host_in, host_out, host_state, sets, response, solver));
    Ok(outcome)
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let sim = SimBackend::new(TOTAL);
    let (streams, events) = (sim.live_streams(), sim.live_events());
    let outcome = run_case(case, &sim).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let done_runs = (case.fail_at * case.chunk_length).min(case.runs);
    match (&outcome.result, case.failure) {
        (Err(payload), Failure::Panic) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            prop_assert_eq!(
                message,
                format!("the computation of chunk {} panicked", case.fail_at)
            );
        }
        (Ok(Err(error)), Failure::ErrorBefore | Failure::ErrorAfter) => {
            prop_assert_eq!(error.error(), &MemError::NoBufferSets);
            prop_assert_eq!(error.chunk(), Some(case.fail_at));
            prop_assert_eq!(error.completed(), 0..case.fail_at);
            prop_assert_eq!(error.completed_runs(), 0..done_runs);
        }
        _ => prop_assert!(false, "{case:?}: the run ended with {:?}", outcome.result),
    }
    for row in 0..2 {
        for run in 0..case.runs {
            let at = row * case.runs + run;
            let (x, v) = (at as u32 * 11 + 5, at as u32 ^ 0x5a);
            let (output, state) = if run < done_runs {
                (output_of(x), state_of(v))
            } else {
                (0, v)
            };
            prop_assert_eq!(outcome.output[at], output, "{:?}: run {}", case, run);
            prop_assert_eq!(outcome.state[at], state, "{:?}: run {}", case, run);
        }
    }
    prop_assert_eq!(sim.live_streams(), streams);
    prop_assert_eq!(sim.live_events(), events);
    prop_assert_eq!(sim.live_pinned_blocks(), 0);
    prop_assert_eq!(sim.free_bytes(), TOTAL);
    // The device saw no misuse (memory freed under a copy, host access
    // in flight): its next call is not refused.
    sim.create_stream()
        .map_err(|e| TestCaseError::fail(format!("{case:?}: {e}")))?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_failed_batch_keeps_every_finished_chunk_and_leaks_nothing(case in case()) {
        check(&case)?;
    }
}

/// A manager, an instance holding one `u32 [2, 4]` array per buffer set
/// (`x` alone for one set, `x0`, `x1`, ... for more), and a plan of a batch
/// of 8 runs in chunks of 4.
struct Bench {
    sim: SimBackend,
    mgr: cubie_mem::MemoryManager,
    solver: cubie_mem::Instance,
    sets: Vec<DeviceArray<u32>>,
    plan: ChunkPlan,
}

fn bench(sets: usize) -> Bench {
    let sim = SimBackend::new(TOTAL);
    let mgr = common::manager_on(sim.clone());
    let solver = mgr.register(common::queuing()).unwrap();
    let labels: Vec<String> = match sets {
        1 => vec!["x".into()],
        _ => (0..sets).map(|set| format!("x{set}")).collect(),
    };
    let sets = alloc(&mgr, &solver, &labels);
    Bench {
        sim,
        mgr,
        solver,
        sets,
        plan: ChunkPlan::new(8, 2, 4).unwrap(),
    }
}

/// A `u32 [2, 4]` array of `instance` under each label.
fn alloc(
    mgr: &cubie_mem::MemoryManager,
    instance: &cubie_mem::Instance,
    labels: &[String],
) -> Vec<DeviceArray<u32>> {
    let requests = labels
        .iter()
        .map(|label| (label.clone(), ArrayRequest::of::<u32>([2, 4]).unchunkable()));
    mgr.queue_request(instance, requests).unwrap();
    let mut response = mgr.allocate_queue_for(instance).unwrap();
    labels
        .iter()
        .map(|label| response.take(label).unwrap())
        .collect()
}

fn host(bench: &Bench, fill: u32) -> cubie_mem::HostArray<u32> {
    bench
        .mgr
        .create_host_array(
            [2, 8],
            HostMemoryKind::Pinned,
            Some(&[fill; 16]),
            &bench.solver,
        )
        .unwrap()
}

#[test]
fn a_pipeline_without_buffer_sets_is_refused_before_anything_runs() {
    let bench = bench(1);
    let input = host(&bench, 1);
    let streamer = bench
        .mgr
        .chunk_streamer(&bench.solver, &bench.plan)
        .unwrap();
    let no_sets: [(); 0] = [];
    let error = streamer
        .pipeline_sets(&no_sets)
        .input(&input, bench.sets[0].along(1))
        .run(|_, _| -> Result<(), MemError> { panic!("no chunk may compute") })
        .unwrap_err();
    assert_eq!(error.chunk(), None);
    assert_eq!(error.completed(), 0..0);
    assert_eq!(*error.error(), MemError::NoBufferSets);
}

#[test]
fn one_array_in_two_buffer_sets_is_refused_before_anything_moves() {
    let bench = bench(2);
    let mut output = host(&bench, 9);
    let streamer = bench
        .mgr
        .chunk_streamer(&bench.solver, &bench.plan)
        .unwrap();
    // Both sets pick the first array.
    let sets = [0usize, 1];
    let before = bench.sim.timeline().spans().len();
    let error = streamer
        .pipeline_sets(&sets)
        .output_with(&mut output, |_| bench.sets[0].along(1))
        .run(|_, _| -> Result<(), MemError> { panic!("no chunk may compute") })
        .unwrap_err()
        .into_error();
    assert_eq!(
        error,
        MemError::SharedBuffer {
            label: "x0".into(),
            first_set: 0,
            second_set: 1
        }
    );
    assert_eq!(bench.sim.timeline().spans().len(), before, "nothing moved");
    assert_eq!(output.as_slice(), [9; 16]);
    // Two arrays of one label, one per set, run.
    streamer
        .pipeline_sets(&sets)
        .output_with(&mut output, |&set| bench.sets[set].along(1))
        .run(|_, _| Ok::<_, MemError>(()))
        .unwrap();
}

#[test]
fn bindings_are_distinct_by_array_not_by_label() {
    let bench = bench(1);
    // A second instance of the same owner, with an `x` of its own.
    let other = bench
        .mgr
        .register(common::queuing().owner(&bench.solver))
        .unwrap();
    let other_x = alloc(&bench.mgr, &other, &["x".into()]).remove(0);
    let (input, mut output) = (host(&bench, 4), host(&bench, 0));
    let streamer = bench
        .mgr
        .chunk_streamer(&bench.solver, &bench.plan)
        .unwrap();
    streamer
        .pipeline()
        .input(&input, bench.sets[0].along(1))
        .output(&mut output, other_x.along(1))
        .run(|_, _| {
            cubie_mem::HostKernel::new("copy", Duration::from_nanos(10))
                .reads(&bench.sets[0])
                .writes(&other_x)
                .launch(|args| {
                    let from = args.read(&bench.sets[0])?.to_vec();
                    args.write(&other_x)?.copy_from_slice(&from);
                    Ok(())
                })
        })
        .unwrap();
    assert_eq!(output.as_slice(), [4; 16]);
    // The same array bound twice is refused, whatever the directions.
    let error = streamer
        .pipeline()
        .input(&input, bench.sets[0].along(1))
        .output(&mut output, bench.sets[0].along(1))
        .run(|_, _| Ok::<_, MemError>(()))
        .unwrap_err();
    assert_eq!(
        error.into_error(),
        MemError::DuplicateBinding { label: "x".into() }
    );
}

#[test]
fn another_managers_page_locked_arrays_go_through_staging() {
    let bench = bench(1);
    let other = common::manager_on(SimBackend::new(TOTAL));
    let elsewhere = other.register(common::queuing()).unwrap();
    let values: Vec<u32> = (0..16).collect();
    let mut foreign = other
        .create_host_array([2, 8], HostMemoryKind::Pinned, Some(&values), &elsewhere)
        .unwrap();
    let streamer = bench
        .mgr
        .chunk_streamer(&bench.solver, &bench.plan)
        .unwrap();
    let x = &bench.sets[0];
    streamer
        .pipeline()
        .inout(&mut foreign, x.along(1))
        .run(|_, _| {
            cubie_mem::HostKernel::new("add one", Duration::from_nanos(10))
                .updates(x)
                .launch(|args| {
                    args.write(x)?.iter_mut().for_each(|v| *v += 1);
                    Ok(())
                })
        })
        .unwrap();
    let expected: Vec<u32> = values.iter().map(|v| v + 1).collect();
    assert_eq!(foreign.as_slice(), expected);
    assert!(
        streamer.pool().pinned_allocations() > 0,
        "the chunks were staged in this manager's page-locked memory"
    );
}
