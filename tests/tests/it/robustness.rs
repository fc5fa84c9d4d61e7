//! The manager under hostile conditions: accesses in progress while arrays
//! are freed or evicted, calls that fail after evicting, panicking hooks,
//! and figures at the edge of their types.

use crate::common;
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Weak};
use std::thread;
use std::time::Duration;

use crate::common::{Counter, Inbox, allocate_f64, capture_logs, manager, queuing, runs_request};
use cubie_mem::{
    ArrayRequest, LimitMode, ManagerConfig, MemError, MemoryKind, MemoryManager, Registration,
    ReleaseReason, SimBackend,
};

/// Runs `f` on a thread and fails the test if it has not finished within
/// ten seconds (a deadlock), instead of hanging.
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    thread::spawn(move || done.send(f()).ok());
    finished
        .recv_timeout(Duration::from_secs(10))
        .expect("deadlock: the scenario did not finish within 10 s")
}

#[test]
fn code_inside_with_device_ptr_may_call_the_manager_while_another_thread_frees() {
    within(|| {
        let (mgr, sim) = manager(1 << 30, 1 << 20);
        let a = Arc::new(mgr.register(queuing()).unwrap());
        let x = allocate_f64(&mgr, &a, "x", runs_request(8, 10));
        let (inside, go_free) = mpsc::channel();
        let (freed, go_on) = mpsc::channel();
        let freer = thread::spawn({
            let (mgr, a) = (mgr.clone(), Arc::clone(&a));
            move || {
                go_free.recv().unwrap();
                let existed = mgr.free(&a, "x").unwrap();
                freed.send(()).unwrap();
                existed
            }
        });
        let during = x
            .with_device_ptr(|_| {
                inside.send(()).unwrap();
                go_on.recv().unwrap();
                // The free returned while this access holds the memory.
                let stream = mgr.stream(&a);
                (stream.is_ok(), sim.live_allocations())
            })
            .unwrap();
        assert!(freer.join().unwrap());
        assert_eq!(during, (true, 1), "freed only when the access ended");
        assert_eq!(sim.live_allocations(), 0);
        assert_eq!(x.release_reason(), Some(ReleaseReason::Freed));
        assert_eq!(mgr.memory_report().total.current_count, 0);
    });
}

#[test]
fn a_pinned_guard_held_across_a_free_does_not_block_the_manager() {
    within(|| {
        let (mgr, _) = manager(1 << 30, 1 << 20);
        let a = mgr.register(queuing()).unwrap();
        mgr.queue_request(
            &a,
            [(
                "p",
                ArrayRequest::of::<i32>([4])
                    .unchunkable()
                    .memory(MemoryKind::Pinned),
            )],
        )
        .unwrap();
        let p = mgr
            .allocate_queue_for(&a)
            .unwrap()
            .take_pinned::<i32>("p")
            .unwrap();
        p.copy_from_host(&[1, 2, 3, 4]).unwrap();
        let guard = p.read().unwrap();
        assert!(mgr.free(&a, "p").unwrap());
        mgr.invalidate_all();
        assert_eq!(&*guard, [1, 2, 3, 4], "the guard still reads its memory");
        assert!(p.read().is_err(), "new accesses see the release");
        drop(guard);
        assert_eq!(p.release_reason(), Some(ReleaseReason::Freed));
    });
}

#[test]
fn eviction_does_not_wait_for_an_access_and_does_not_count_its_bytes() {
    within(|| {
        let (mgr, sim) = manager(1 << 30, 1000);
        let (held_hook, other_hook) = (Counter::default(), Counter::default());
        let held = mgr
            .register(Registration::new().on_invalidate(held_hook.hook()))
            .unwrap();
        let other = mgr
            .register(Registration::new().on_invalidate(other_hook.hook()))
            .unwrap();
        let in_use = allocate_f64(
            &mgr,
            &held,
            "x",
            ArrayRequest::of::<f64>([300 / 8 + 1]).unchunkable(),
        );
        let _y = allocate_f64(
            &mgr,
            &other,
            "y",
            ArrayRequest::of::<f64>([500 / 8]).unchunkable(),
        );
        assert_eq!(sim.free_bytes(), 1000 - 304 - 496);

        let barrier = Arc::new(Barrier::new(2));
        let (release, released) = mpsc::channel::<()>();
        let access = thread::spawn({
            let barrier = Arc::clone(&barrier);
            move || {
                in_use
                    .with_device_ptr(|_| {
                        barrier.wait();
                        released.recv().ok();
                    })
                    .unwrap();
            }
        });
        barrier.wait();
        // 400 bytes with 200 free: 201 must go. The least recently used owner
        // (held) is evicted first, but an access holds its 304 bytes, so they
        // do not count and the next owner goes too.
        let b = mgr.register(queuing()).unwrap();
        let z = allocate_f64(&mgr, &b, "z", ArrayRequest::of::<f64>([50]).unchunkable());
        assert_eq!((held_hook.get(), other_hook.get()), (1, 1));
        assert_eq!(z.len(), 50);
        assert_eq!(
            sim.free_bytes(),
            1000 - 304 - 400,
            "held's memory is still in use"
        );
        release.send(()).unwrap();
        access.join().unwrap();
        assert_eq!(sim.free_bytes(), 600, "freed when the access ended");
    });
}

#[test]
fn evicted_owners_hear_of_it_even_when_the_call_then_fails() {
    let (mgr, sim) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let idle = mgr
        .register(
            Registration::new()
                .name("cache")
                .on_invalidate(evicted.hook()),
        )
        .unwrap();
    let x = allocate_f64(
        &mgr,
        &idle,
        "x",
        ArrayRequest::of::<f64>([75]).unchunkable(),
    );
    let b = mgr.register(queuing()).unwrap();
    mgr.queue_request(&b, [("y", ArrayRequest::of::<f64>([75]).unchunkable())])
        .unwrap();
    sim.set_fail_allocations_after(Some(0));
    let (result, logs) = capture_logs(|| mgr.allocate_queue(&b));
    assert!(result.unwrap_err().is_out_of_memory());
    assert_eq!(
        evicted.get(),
        1,
        "the invalidate hook ran although the call failed"
    );
    assert_eq!(x.release_reason(), Some(ReleaseReason::Evicted));
    assert!(b.has_queued());
    assert!(
        logs.contains("evicted an idle owner") && logs.contains("'cache'"),
        "{logs}"
    );
    sim.set_fail_allocations_after(None);
    mgr.allocate_queue(&b).unwrap();
    assert_eq!(evicted.get(), 1);
}

#[test]
fn a_panicking_hook_skips_no_other_hook_and_loses_no_response() {
    let (mgr, _) = manager(1 << 30, 1000);
    let quiet = Counter::default();
    let loud = mgr
        .register(
            Registration::new()
                .name("loud")
                .on_invalidate(|| panic!("invalidate hook failure")),
        )
        .unwrap();
    let quiet_one = mgr
        .register(Registration::new().on_invalidate(quiet.hook()))
        .unwrap();
    allocate_f64(
        &mgr,
        &loud,
        "x",
        ArrayRequest::of::<f64>([40]).unchunkable(),
    );
    allocate_f64(
        &mgr,
        &quiet_one,
        "x",
        ArrayRequest::of::<f64>([40]).unchunkable(),
    );

    let partner_inbox = Inbox::default();
    let trigger = mgr
        .register(
            queuing()
                .name("trigger")
                .on_allocation_ready(|_| panic!("ready hook failure")),
        )
        .unwrap();
    let _partner = mgr
        .register(
            queuing()
                .owner(&trigger)
                .on_allocation_ready(partner_inbox.hook()),
        )
        .unwrap();
    mgr.queue_request(
        &trigger,
        [("y", ArrayRequest::of::<f64>([100]).unchunkable())],
    )
    .unwrap();
    let (result, logs) = capture_logs(|| mgr.allocate_queue_for(&trigger));
    let mut response = result.unwrap();
    assert_eq!(response.take::<f64>("y").unwrap().len(), 100);
    assert_eq!(quiet.get(), 1, "the other invalidate hook ran");
    assert_eq!(partner_inbox.take().len(), 1, "the other ready hook ran");
    assert!(
        logs.contains("'loud'") && logs.contains("invalidate hook failure"),
        "{logs}"
    );
    assert!(
        logs.contains("'trigger'") && logs.contains("ready hook failure"),
        "{logs}"
    );
    assert_eq!(trigger.allocated_bytes(), 800, "the commit stands");
}

#[test]
fn an_enormous_batch_on_a_full_device_is_an_error_not_an_overflow() {
    let (mgr, _) = manager(1 << 30, 0);
    let a = mgr.register(queuing()).unwrap();
    let request = ArrayRequest::of::<u8>([usize::MAX])
        .chunk_axis(0)
        .total_runs(usize::MAX);
    mgr.queue_request(&a, [("x", request)]).unwrap();
    let error = mgr.allocate_queue(&a).unwrap_err();
    assert!(
        matches!(error, MemError::SingleRunTooLarge { depth: 1, .. }),
        "{error}"
    );
    assert!(a.has_queued());
}

#[test]
fn copies_at_absurd_offsets_are_out_of_bounds_errors() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    let error = x.copy_from_host_at(usize::MAX, &[1.0]).unwrap_err();
    assert!(matches!(error, MemError::OutOfBounds { .. }), "{error}");
    let mut out = [0.0; 2];
    assert!(x.copy_to_host_at(usize::MAX - 1, &mut out).is_err());
}

#[test]
fn caps_of_a_device_near_the_top_of_u64_do_not_overflow() {
    // Four quarters of u64::MAX as f64 (2^64) sum to 2^64 bytes of caps.
    let mgr = MemoryManager::with_config(
        SimBackend::new(u64::MAX),
        ManagerConfig {
            allocation_granule_bytes: 0,
            limit_mode: LimitMode::Active,
            ..Default::default()
        },
    );
    let first = mgr.register(queuing().proportion(0.25)).unwrap();
    let rest: Vec<_> = (0..3)
        .map(|_| mgr.register(queuing().proportion(0.25)).unwrap())
        .collect();
    assert_eq!(mgr.cap(&first), 1 << 62);
    assert_eq!(mgr.available_memory(&first).unwrap(), u64::MAX);
    let x = allocate_f64(&mgr, &first, "x", runs_request(8, 10));
    assert_eq!(x.len(), 10);
    assert!(mgr.memory_report().to_string().contains("cap"));
    drop(rest);
}

#[test]
fn a_batch_the_host_cannot_hold_is_out_of_memory_with_the_queue_kept() {
    let sim = SimBackend::new(u64::MAX);
    let mgr = common::manager_on(sim.clone());
    let a = mgr.register(queuing()).unwrap();
    for kind in [MemoryKind::Device, MemoryKind::Pinned] {
        let request = ArrayRequest::of::<u8>([1usize << 60])
            .unchunkable()
            .memory(kind);
        mgr.queue_request(&a, [("huge", request)]).unwrap();
        let error = mgr.allocate_queue(&a).unwrap_err();
        assert!(error.is_out_of_memory(), "{kind:?}: {error}");
        assert!(a.has_queued());
    }
    assert_eq!(sim.live_allocations(), 0);
}

mod extreme_figures {
    use super::*;
    use common::edge_u64;
    use proptest::prelude::*;

    fn edge_dim() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0usize),
            Just(1),
            Just(2),
            Just(usize::MAX),
            Just(usize::MAX / 2),
            1usize..2000,
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any device and any request: an answer or an error, never a panic;
        /// a failed call keeps the queue, a served one covers every run.
        #[test]
        fn queue_and_allocate_never_panic(
            total in edge_u64(),
            free in edge_u64(),
            granule in edge_u64(),
            active in any::<bool>(),
            shape in proptest::collection::vec(edge_dim(), 0..4),
            axis in prop_oneof![Just(None), (0usize..4).prop_map(Some)],
            runs in edge_dim(),
        ) {
            let sim = SimBackend::new(total).with_free(free);
            let mgr = MemoryManager::with_config(
                sim.clone(),
                ManagerConfig {
                    allocation_granule_bytes: granule,
                    limit_mode: if active { LimitMode::Active } else { LimitMode::Passive },
                    ..Default::default()
                },
            );
            let a = mgr.register(queuing()).unwrap();
            let request = ArrayRequest::of::<u8>(shape).chunk_axis(axis).total_runs(runs);
            if mgr.queue_request(&a, [("x", request)]).is_err() {
                return Ok(());
            }
            match mgr.allocate_queue_for(&a) {
                Ok(response) => {
                    let covered = (response.chunks as u128) * (response.chunk_length as u128);
                    prop_assert!(covered >= response.plan().total_runs() as u128);
                    prop_assert!(!a.has_queued());
                }
                Err(error) => {
                    prop_assert!(a.has_queued(), "{}", error);
                    prop_assert_eq!(sim.live_allocations(), 0);
                }
            }
        }
    }
}

#[test]
fn a_hook_that_triggers_itself_is_skipped_not_deadlocked() {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let ((calls, served_again), logs) = within(|| {
        capture_logs(|| {
            let (mgr, _) = manager(1 << 30, 1 << 20);
            // Weak: the hook, which the manager keeps, must not keep the
            // instance (and so itself and the manager) alive.
            let me: Arc<OnceLock<Weak<cubie_mem::Instance>>> = Arc::default();
            let calls = Arc::new(AtomicUsize::new(0));
            let served_again = Arc::new(AtomicUsize::new(0));
            let hook = {
                let (mgr, me, calls, served_again) = (
                    mgr.clone(),
                    Arc::clone(&me),
                    Arc::clone(&calls),
                    Arc::clone(&served_again),
                );
                move |_response| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    if let Some(me) = me.get().and_then(Weak::upgrade) {
                        // Queue and allocate again from inside the hook: the
                        // nested delivery would wait for this very hook.
                        mgr.queue_request(&me, [("x", runs_request(8, 4))]).unwrap();
                        if mgr.allocate_queue(&me).is_ok() {
                            served_again.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            };
            let instance = Arc::new(
                mgr.register(queuing().name("eager").on_allocation_ready(hook))
                    .unwrap(),
            );
            me.set(Arc::downgrade(&instance)).ok();
            mgr.queue_request(&instance, [("x", runs_request(8, 4))])
                .unwrap();
            mgr.allocate_queue(&instance).unwrap();
            (
                calls.load(Ordering::SeqCst),
                served_again.load(Ordering::SeqCst),
            )
        })
    });
    assert_eq!(calls, 1, "the nested delivery to the same hook was skipped");
    assert_eq!(served_again, 1, "the nested allocation itself was served");
    assert!(
        logs.contains("triggered itself") && logs.contains("'eager'"),
        "{logs}"
    );
}
