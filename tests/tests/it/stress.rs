//! Many threads registering, queueing, allocating, using, freeing, evicting
//! and dropping on one manager at once, with accesses and guards held across
//! manager calls. A thread's panic fails the test at once, as that panic;
//! every thread must finish within a deadline, so that a deadlock fails the
//! test instead of hanging CI.

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{manager, runs_request};
use cubie_mem::{ArrayRequest, Instance, MemError, MemoryKind, MemoryManager, Registration};

const THREADS: usize = 8;
const ROUNDS: usize = 500;
const DEADLINE: Duration = Duration::from_secs(120);

/// Errors a round may meet under pressure from the other threads.
fn expected_under_pressure(error: &MemError) -> bool {
    error.is_out_of_memory()
        || matches!(
            error,
            MemError::SingleRunTooLarge { .. }
                | MemError::UnchunkableTooLarge { .. }
                | MemError::AllUnchunkable { .. }
                | MemError::Released { .. }
        )
}

/// One round of thread `t`: returns whether its allocation succeeded.
fn round(mgr: &MemoryManager, t: usize, round: usize, kept: &mut Vec<Instance>) -> bool {
    let groups = ["a", "b", "c"];
    let g = (t + round) % groups.len();
    let mut registration = Registration::new()
        .name(format!("t{t}r{round}"))
        .stream_group(groups[g])
        .on_invalidate(|| {});
    if let Some(owner) = kept.last().filter(|_| round.is_multiple_of(3)) {
        registration = registration.owner(owner);
    }
    let instance = mgr.register(registration).unwrap();
    // One run count per group, so partners of one owner share a batch.
    let runs = 50 + g * 10;
    mgr.queue_request(
        &instance,
        [
            ("state", runs_request(800, runs)),
            ("init", ArrayRequest::of::<f32>([16]).unchunkable()),
            (
                "status",
                ArrayRequest::of::<i32>([runs])
                    .chunk_axis(0)
                    .total_runs(runs)
                    .memory(MemoryKind::Pinned),
            ),
        ],
    )
    .unwrap();
    let work = mgr.begin_work(&instance).unwrap();
    let served = match mgr.allocate_queue_for(&instance) {
        Ok(mut response) => {
            let state = response.take::<f64>("state");
            let status = response.take_pinned::<i32>("status");
            if let (Ok(state), Ok(status)) = (state, status) {
                use_arrays(mgr, &instance, kept, &state, &status, round);
            }
            true
        }
        Err(error) if expected_under_pressure(&error) => false,
        Err(error) => panic!("thread {t} round {round}: {error}"),
    };
    work.finish().unwrap();
    occasional_calls(mgr, &instance, round);
    if round.is_multiple_of(4) {
        kept.push(instance);
    }
    if kept.len() > 5 {
        kept.remove(0);
    }
    served
}

/// Uses the handles while other threads free and evict, holding accesses
/// and guards across manager calls.
fn use_arrays(
    mgr: &MemoryManager,
    instance: &Instance,
    kept: &[Instance],
    state: &cubie_mem::DeviceArray<f64>,
    status: &cubie_mem::PinnedArray<i32>,
    round: usize,
) {
    // Either works or reports the release; never touches freed memory.
    let _ = state.copy_from_host(&vec![1.0; state.len()]);
    let _ = state.to_vec();
    // An access held across calls that take the manager's lock.
    let _ = state.with_device_ptr(|_| {
        let _ = mgr.stream(instance);
        if round.is_multiple_of(5) {
            let _ = mgr.free(instance, "state");
        }
        mgr.memory_report().total.current_count
    });
    // A pinned guard held across calls that may free or evict it.
    if let Ok(guard) = status.read() {
        if round.is_multiple_of(7) {
            let _ = mgr.free(instance, "status");
        }
        if let Some(old) = kept.first() {
            let _ = old.allocated_bytes();
        }
        assert!(guard.iter().all(|&v| v == 0 || v == 3));
    }
    if let Ok(mut guard) = status.write() {
        guard.fill(3);
    }
    // A current-stream guard held across calls.
    if let Ok(bound) = mgr.bind_stream(instance) {
        let _ = state.copy_from_host(&vec![2.0; state.len()]);
        let _ = mgr.synchronize(instance);
        drop(bound);
    }
}

/// Manager-wide calls now and then: regrouping, new streams, freeing all.
fn occasional_calls(mgr: &MemoryManager, instance: &Instance, round: usize) {
    match round % 50 {
        10 => mgr.reinit_streams().unwrap(),
        20 => mgr.free_all(),
        30 => mgr.invalidate_all(),
        40 => {
            let _ = mgr.change_stream_group(instance, "elsewhere");
        }
        _ => {}
    }
}

/// Runs `work(t)` on threads `t` in `0..threads` and returns their results
/// in thread order. A thread's panic is raised here as soon as the thread
/// ends, with its own payload; threads still running at the deadline are
/// reported as a deadlock.
fn run_threads<T, F>(threads: usize, deadline: Duration, work: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> T + Clone + Send + 'static,
{
    let (done, finished) = mpsc::channel();
    for t in 0..threads {
        let (done, work) = (done.clone(), work.clone());
        thread::spawn(move || {
            // The work (and what it holds) is gone before the result is sent.
            let result = panic::catch_unwind(AssertUnwindSafe(move || work(t)));
            // The receiver is gone only once the test has already failed.
            let _ = done.send((t, result));
        });
    }
    drop(done);
    let start = Instant::now();
    let mut results: Vec<Option<T>> = (0..threads).map(|_| None).collect();
    for finishing in 0..threads {
        match finished.recv_timeout(deadline.saturating_sub(start.elapsed())) {
            Ok((t, Ok(result))) => results[t] = Some(result),
            Ok((_, Err(payload))) => panic::resume_unwind(payload),
            Err(RecvTimeoutError::Timeout) => panic!(
                "deadlock: {} of {threads} threads did not finish within {deadline:?}",
                threads - finishing
            ),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("a thread ended without reporting its result")
            }
        }
    }
    results.into_iter().flatten().collect()
}

#[test]
fn eight_threads_end_with_an_empty_registry_and_free_memory() {
    // 768 KiB free: the threads' batches do not all fit, so idle owners are
    // evicted and batches chunked all along.
    let (mgr, sim) = manager(1 << 30, 768 << 10);
    let free_before = sim.free_bytes();
    let worker_mgr = mgr.clone();
    let served: usize = run_threads(THREADS, DEADLINE, move |t| {
        let mut kept = Vec::new();
        (0..ROUNDS)
            .filter(|&r| round(&worker_mgr, t, r, &mut kept))
            .count()
    })
    .into_iter()
    .sum();
    assert!(
        served >= THREADS * ROUNDS * 9 / 10,
        "only {served} of {} rounds were served",
        THREADS * ROUNDS
    );
    assert_eq!(mgr.memory_report().instances.len(), 0);
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(sim.free_bytes(), free_before);
    assert_eq!(sim.live_events(), 0);
    assert_eq!(sim.live_streams(), 0);
    let stats = mgr.memory_report();
    assert_eq!(stats.total.current_bytes, 0);
    assert_eq!(stats.total.current_count, 0);
    assert!(stats.total.evictions > 0, "the pressure evicted owners");
    assert!(stats.total.allocations >= (THREADS * ROUNDS) as u64);
}

#[test]
fn a_panicking_thread_fails_the_run_at_once_with_its_own_panic() {
    let started = Instant::now();
    let outcome = panic::catch_unwind(|| {
        run_threads(2, DEADLINE, |t| {
            if t == 1 {
                panic!("thread 1 gave up");
            }
            t
        })
    });
    let payload = outcome.expect_err("the thread's panic fails the run");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"thread 1 gave up"));
    assert!(
        started.elapsed() < DEADLINE / 10,
        "reported after {:?}, not at once",
        started.elapsed()
    );
}

#[test]
fn a_thread_still_running_at_the_deadline_is_reported_as_a_deadlock() {
    let outcome = panic::catch_unwind(|| {
        run_threads(2, Duration::from_millis(50), |t| {
            if t == 0 {
                thread::sleep(Duration::from_secs(1));
            }
        })
    });
    let payload = outcome.expect_err("the hang fails the run");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.starts_with("deadlock: 1 of 2 threads"), "{message}");
}
