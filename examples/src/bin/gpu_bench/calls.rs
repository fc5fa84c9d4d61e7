//! The driver calls a pipeline chunk costs on the device, with the timeline
//! off and on (the difference between a run of 12 chunks and one of 4,
//! over 8), and the live events of a persistent buffer set after 5 and 50
//! pipeline runs (created less destroyed, the backend's idle ones
//! included). The budgets are those the fake driver's tests hold the
//! backend to (`tests/tests/fake_driver/budget.rs`).

use cubie_mem::cuda::{CudaBackend, DriverCalls, GroupStream};
use cubie_mem::{ArrayRequest, ChunkPlan, HostMemoryKind, MemoryManager, Registration};
use cubie_mem_examples::euler_decay::EulerDecay;

use super::{BenchResult, Goals, Set};

/// Runs (f64) per chunk: small, so that the calls, not the copies, are
/// what a chunk costs.
const CHUNK_RUNS: usize = 4096;
/// Driver calls a chunk may make, with the timeline off and on.
const CHUNK_BUDGET: u64 = 24;
const TIMED_CHUNK_BUDGET: u64 = 40;

/// Streams `chunks` chunks through `sets` (an inout and an input pinned
/// array, one kernel each); the driver calls the run made.
fn run(
    mgr: &MemoryManager,
    sets: &[Set],
    kernel: &EulerDecay,
    chunks: usize,
) -> BenchResult<DriverCalls> {
    let solver = mgr.register(
        Registration::new()
            .stream_group("calls")
            .on_invalidate(|| {}),
    )?;
    let runs = chunks * CHUNK_RUNS;
    let y0 = vec![1.0f64; runs];
    let rates = vec![0.5f64; runs];
    let mut y = mgr.create_host_array([runs], HostMemoryKind::Pinned, Some(&y0), &solver)?;
    let k = mgr.create_host_array([runs], HostMemoryKind::Pinned, Some(&rates), &solver)?;
    let plan = ChunkPlan::new(runs, chunks, CHUNK_RUNS)?;
    let stream = GroupStream::of(mgr, &solver)?;
    let before = CudaBackend::driver_calls();
    mgr.chunk_streamer(&solver, &plan)?
        .pipeline_sets(sets)
        .inout_with(&mut y, |set| set.y.along(0))
        .input_with(&k, |set| set.k.along(0))
        .run(|_, set| kernel.step(&stream, &set.y, &set.k, 1e-3))?;
    Ok(CudaBackend::driver_calls().since(&before))
}

/// The calls one more chunk costs: (12 chunks − 4 chunks) / 8, after a
/// warm-up run; and the calls of those 8 chunks, by function.
fn per_chunk(
    mgr: &MemoryManager,
    sets: &[Set],
    kernel: &EulerDecay,
) -> BenchResult<(f64, DriverCalls)> {
    // A first run (as long as the longest) creates the events and streams
    // later runs reuse, and takes the idle ones left before.
    run(mgr, sets, kernel, 12)?;
    let short = run(mgr, sets, kernel, 4)?;
    let long = run(mgr, sets, kernel, 12)?;
    let per_chunk = long.total().saturating_sub(short.total()) as f64 / 8.0;
    Ok((per_chunk, long.since(&short)))
}

/// Live events: created less destroyed so far.
fn live_events() -> u64 {
    let calls = CudaBackend::driver_calls();
    calls
        .get("cuEventCreate")
        .saturating_sub(calls.get("cuEventDestroy"))
}

/// Prints the driver calls per chunk and the live events of a persistent
/// buffer set, each against its goal.
pub(super) fn report(cuda: &CudaBackend, goals: &mut Goals) -> BenchResult {
    let mgr = MemoryManager::new(cuda.clone());
    let holder = mgr.register(
        Registration::new()
            .stream_group("calls")
            .on_invalidate(|| {}),
    )?;
    let labels = ["y0", "k0", "y1", "k1"];
    mgr.queue_request(
        &holder,
        labels.map(|label| (label, ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable())),
    )?;
    let mut response = mgr.allocate_queue_for(&holder)?;
    let sets = (0..2)
        .map(|s| {
            Ok(Set {
                y: response.take(labels[2 * s])?,
                k: response.take(labels[2 * s + 1])?,
            })
        })
        .collect::<BenchResult<Vec<_>>>()?;
    let kernel = EulerDecay::load(cuda)?;

    println!("\ndriver calls per pipeline chunk (an inout and an input pinned array, one kernel):");
    let (untimed, eight) = per_chunk(&mgr, &sets, &kernel)?;
    let goal = goals.check(
        untimed <= CHUNK_BUDGET as f64,
        format!("<= {CHUNK_BUDGET} driver calls a chunk"),
    );
    println!("  timeline off {untimed:>6.1}  ({goal}); 8 chunks: {eight}");
    cuda.record_timeline(true);
    let timed = per_chunk(&mgr, &sets, &kernel);
    cuda.record_timeline(false);
    let (timed, eight) = timed?;
    let goal = goals.check(
        timed <= TIMED_CHUNK_BUDGET as f64,
        format!("<= {TIMED_CHUNK_BUDGET} with the timeline"),
    );
    println!("  timeline on  {timed:>6.1}  ({goal}); 8 chunks: {eight}");
    println!("  one chunk's calls: {}", run(&mgr, &sets, &kernel, 1)?);

    let mut early = 0;
    for round in 1..=50 {
        run(&mgr, &sets, &kernel, 3)?;
        if round == 5 {
            early = live_events();
        }
    }
    let late = live_events();
    let goal = goals.check(late <= early, "no more after 50 runs than after 5");
    println!("  live events over 50 pipeline runs: {early} after 5, {late} after 50 ({goal})");
    Ok(())
}
