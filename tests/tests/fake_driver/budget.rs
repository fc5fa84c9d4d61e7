//! What the CUDA backend costs in driver calls, counted by the fake for
//! every entry point: a chunk of the overlapped pipeline (with the
//! timeline off and on), a manager's allocation and free, and the events a
//! persistent buffer set keeps across many pipeline runs. On a real driver
//! each call costs 0.5 to 4 us of the host's time, so a pipeline of short
//! kernels is host-bound when a chunk makes many.

use std::collections::BTreeMap;

use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::{ArrayRequest, ChunkPlan, DeviceArray, HostMemoryKind, Instance, Registration};
use cubie_mem_examples::euler_decay::EulerDecay;

use super::*;

const CHUNK_RUNS: usize = 1024;
const DT: f64 = 0.01;

/// Driver calls a pipeline chunk may make with the timeline off: the
/// schedule's 3 records and 5 waits, 3 copies and a launch, and one
/// context check per backend call.
const CHUNK_BUDGET: u64 = 24;
/// With the timeline on: two timed events more around each copy and the
/// launch, recorded, and created unless idle ones are left (a span holds
/// its events until the timeline is restarted).
const TIMED_CHUNK_BUDGET: u64 = 40;
/// Driver calls of a manager's allocation of one array and of its free.
const ALLOCATION_BUDGET: u64 = 8;
const FREE_BUDGET: u64 = 4;

/// Calls of every driver entry point so far, by name (those called).
fn calls(fake: &Fake) -> BTreeMap<String, u64> {
    let symbols = concat!(env!("CARGO_MANIFEST_DIR"), "/../ci/cuda-driver/symbols.txt");
    std::fs::read_to_string(symbols)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(|name| (name.to_owned(), fake.calls(name)))
        .filter(|&(_, count)| count > 0)
        .collect()
}

/// The calls made between `before` and `after`, by name, and their total.
fn made(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> (BTreeMap<String, u64>, u64) {
    let by_name: BTreeMap<String, u64> = after
        .iter()
        .map(|(name, &count)| (name.clone(), count - before.get(name).copied().unwrap_or(0)))
        .filter(|&(_, count)| count > 0)
        .collect();
    let total = by_name.values().sum();
    (by_name, total)
}

/// One buffer set: the state and the rates.
struct Set {
    y: DeviceArray<f64>,
    k: DeviceArray<f64>,
}

/// A solver with two buffer sets on the fake device and its kernel.
struct Solver {
    cuda: CudaBackend,
    mgr: MemoryManager,
    instance: Instance,
    sets: Vec<Set>,
    kernel: EulerDecay,
    stream: GroupStream,
}

impl Solver {
    fn new() -> Solver {
        let cuda = CudaBackend::new(0).unwrap();
        let mgr = manager(&cuda);
        let instance = mgr
            .register(
                Registration::new()
                    .stream_group("budget")
                    .on_invalidate(|| {}),
            )
            .unwrap();
        let labels = ["y0", "k0", "y1", "k1"];
        mgr.queue_request(
            &instance,
            labels.map(|label| (label, ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable())),
        )
        .unwrap();
        let mut response = mgr.allocate_queue_for(&instance).unwrap();
        let sets = (0..2)
            .map(|s| Set {
                y: response.take(labels[2 * s]).unwrap(),
                k: response.take(labels[2 * s + 1]).unwrap(),
            })
            .collect();
        let kernel = EulerDecay::load(&cuda).unwrap();
        let stream = GroupStream::of(&mgr, &instance).unwrap();
        Solver {
            cuda,
            mgr,
            instance,
            sets,
            kernel,
            stream,
        }
    }

    /// Streams `chunks` chunks (an inout and an input pinned array, one
    /// kernel each) and returns the driver calls the run made, by name, and
    /// their total; checks the results.
    fn run(&self, fake: &Fake, chunks: usize) -> (BTreeMap<String, u64>, u64) {
        let runs = chunks * CHUNK_RUNS;
        let (y0, rates) = euler_inputs(runs);
        let mut y = self
            .mgr
            .create_host_array([runs], HostMemoryKind::Pinned, Some(&y0), &self.instance)
            .unwrap();
        let k = self
            .mgr
            .create_host_array([runs], HostMemoryKind::Pinned, Some(&rates), &self.instance)
            .unwrap();
        let plan = ChunkPlan::new(runs, chunks, CHUNK_RUNS).unwrap();
        let before = calls(fake);
        self.mgr
            .chunk_streamer(&self.instance, &plan)
            .unwrap()
            .pipeline_sets(&self.sets)
            .inout_with(&mut y, |set| set.y.along(0))
            .input_with(&k, |set| set.k.along(0))
            .run(|_, set| self.kernel.step(&self.stream, &set.y, &set.k, DT))
            .unwrap();
        let made = made(&before, &calls(fake));
        fake.assert_clean();
        assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
        made
    }

    /// The driver calls one more chunk costs: the difference between a run
    /// of 12 chunks and one of 4, over 8 (what a run costs once cancels),
    /// after a run that warms the backend's idle lists up.
    fn per_chunk(&self, fake: &Fake) -> (BTreeMap<String, u64>, u64) {
        // A first run (as long as the longest) creates the events and
        // streams later runs reuse, and takes the idle ones left before.
        self.run(fake, 12);
        let (short, short_total) = self.run(fake, 4);
        let (long, long_total) = self.run(fake, 12);
        let by_name = long
            .iter()
            .map(|(name, &count)| {
                let extra = count.saturating_sub(short.get(name).copied().unwrap_or(0));
                (name.clone(), extra.div_ceil(8))
            })
            .filter(|&(_, count)| count > 0)
            .collect();
        (by_name, (long_total - short_total).div_ceil(8))
    }
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_pipeline_chunk_stays_within_its_driver_call_budget() {
    let fake = Fake::open();
    let solver = Solver::new();
    let (by_name, per_chunk) = solver.per_chunk(&fake);
    println!("driver calls per chunk, timeline off: {per_chunk} {by_name:?}");
    assert!(
        per_chunk <= CHUNK_BUDGET,
        "a chunk made {per_chunk} driver calls (budget {CHUNK_BUDGET}): {by_name:?}"
    );
    assert_eq!(by_name.get("cuEventRecord"), Some(&3), "{by_name:?}");
    assert_eq!(by_name.get("cuStreamWaitEvent"), Some(&5), "{by_name:?}");
    assert_eq!(by_name.get("cuModuleGetFunction"), None, "{by_name:?}");
    assert_eq!(by_name.get("cuEventCreate"), None, "{by_name:?}");
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_timed_pipeline_chunk_stays_within_its_driver_call_budget() {
    let fake = Fake::open();
    let solver = Solver::new();
    solver.cuda.record_timeline(true);
    let (by_name, per_chunk) = solver.per_chunk(&fake);
    println!("driver calls per chunk, timeline on: {per_chunk} {by_name:?}");
    assert!(
        per_chunk <= TIMED_CHUNK_BUDGET,
        "a timed chunk made {per_chunk} driver calls (budget {TIMED_CHUNK_BUDGET}): {by_name:?}"
    );
    assert!(solver.cuda.timeline().unwrap().spans().len() >= 16 * 4);
    // A span holds its two events until the timeline is restarted; then
    // they are reused.
    solver.cuda.record_timeline(true);
    let (by_name, _) = solver.run(&fake, 4);
    assert_eq!(
        by_name.get("cuEventCreate"),
        None,
        "timed events are reused: {by_name:?}"
    );
    assert_eq!(by_name.get("cuEventDestroy_v2"), None, "{by_name:?}");
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn an_allocation_and_its_free_stay_within_their_driver_call_budget() {
    let fake = Fake::open();
    let solver = Solver::new();
    let before = calls(&fake);
    solver
        .mgr
        .queue_request(
            &solver.instance,
            [("extra", ArrayRequest::of::<f64>([CHUNK_RUNS]))],
        )
        .unwrap();
    let response = solver.mgr.allocate_queue_for(&solver.instance).unwrap();
    let allocated = calls(&fake);
    let (by_name, total) = made(&before, &allocated);
    println!("driver calls of an allocation: {total} {by_name:?}");
    assert!(
        total <= ALLOCATION_BUDGET,
        "an allocation made {total} driver calls (budget {ALLOCATION_BUDGET}): {by_name:?}"
    );
    assert_eq!(by_name.get("cuMemGetInfo_v2"), Some(&1), "{by_name:?}");
    drop(response);
    assert!(solver.mgr.free(&solver.instance, "extra").unwrap());
    let (by_name, total) = made(&allocated, &calls(&fake));
    println!("driver calls of a free: {total} {by_name:?}");
    assert!(
        total <= FREE_BUDGET,
        "a free made {total} driver calls (budget {FREE_BUDGET}): {by_name:?}"
    );
}

/// Live events (created and not destroyed, idle ones of the backend's
/// reuse list included).
fn live_events(fake: &Fake) -> u64 {
    fake.calls("cuEventCreate") - fake.calls("cuEventDestroy_v2")
}

/// Runs `runs` pipelines over one solver's buffer sets; returns the live
/// events after the first 5 and after the last, and the stream waits its
/// arrays' frees then issue.
fn persistent_sets(fake: &Fake, runs: usize) -> (u64, u64, u64) {
    let solver = Solver::new();
    let mut early = 0;
    for run in 0..runs {
        solver.run(fake, 3);
        if run == 4.min(runs - 1) {
            early = live_events(fake);
        }
    }
    let late = live_events(fake);
    let Solver { mgr, sets, .. } = solver;
    drop(sets);
    let waits = fake.calls("cuStreamWaitEvent");
    mgr.free_all();
    (early, late, fake.calls("cuStreamWaitEvent") - waits)
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn events_and_the_waits_of_frees_stay_flat_over_many_pipeline_runs() {
    let fake = Fake::open();
    let (_, _, waits_after_one) = persistent_sets(&fake, 1);
    let (early, late, waits_after_fifty) = persistent_sets(&fake, 50);
    println!(
        "live events after 5 runs {early}, after 50 {late}; waits at free after 1 run \
         {waits_after_one}, after 50 {waits_after_fifty}"
    );
    assert_eq!(late, early, "live events grew from run 5 to run 50");
    assert_eq!(
        waits_after_fifty, waits_after_one,
        "the frees after 50 runs waited more than after one"
    );
}
