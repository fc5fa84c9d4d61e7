//! An owner that became idle: while it works, and while its last work's
//! completion has not fired, a batch chunks around it; once it fired, the
//! owner is evicted and the batch planned on the room it frees. The plan
//! never counts bytes the allocation cannot obtain.

use crate::common::{Counter, manager, queuing};
use cubie_mem::{ArrayRequest, Registration, ReleaseReason};

#[test]
fn an_owner_is_evicted_only_once_its_work_completed() {
    let (mgr, sim) = manager(1 << 30, 2304);
    let evicted = Counter::default();
    let flags = mgr
        .register(
            Registration::new()
                .stream_group("flags")
                .on_invalidate(evicted.hook()),
        )
        .unwrap();
    mgr.queue_request(
        &flags,
        [("flags", ArrayRequest::of::<u8>([1824]).unchunkable())],
    )
    .unwrap();
    mgr.allocate_queue_for(&flags).unwrap();
    let pressure = mgr.register(queuing().stream_group("pressure")).unwrap();
    let big = || {
        mgr.queue_request(
            &pressure,
            [(
                "big",
                ArrayRequest::of::<f32>([2, 2, 1024]).total_runs(1024),
            )],
        )
        .unwrap();
        mgr.allocate_queue_for(&pressure)
    };

    // Busy: the batch chunks around it.
    let work = mgr.begin_work(&flags).unwrap();
    let busy = big().unwrap();
    assert!(busy.chunks > 1, "{}", busy.chunks);
    assert_eq!(evicted.get(), 0);

    // Its work finished, but the completion has not fired yet.
    sim.hold_completions(true);
    work.finish().unwrap();
    let pending = big().unwrap();
    assert!(pending.chunks > 1, "{}", pending.chunks);
    assert_eq!(evicted.get(), 0);

    // Fired: evicted once, and the batch is planned on the room it frees.
    sim.hold_completions(false);
    let after = big().unwrap();
    assert_eq!(evicted.get(), 1);
    assert!(
        after.chunks < pending.chunks,
        "{} vs {}",
        after.chunks,
        pending.chunks
    );
}

/// The figures of the three calls: with `flags` held, 480 bytes count
/// (the free 16 and the 464 of `big` the call replaces); once it is
/// evicted, all 2304, less the 2% reserve: chunks of 141 runs at most.
#[test]
fn the_three_plans_count_only_bytes_the_allocation_obtains() {
    let (mgr, sim) = manager(1 << 30, 2304);
    let flags = mgr
        .register(
            Registration::new()
                .stream_group("flags")
                .on_invalidate(|| {}),
        )
        .unwrap();
    mgr.queue_request(
        &flags,
        [("flags", ArrayRequest::of::<u8>([1824]).unchunkable())],
    )
    .unwrap();
    mgr.allocate_queue_for(&flags).unwrap();
    let pressure = mgr.register(queuing().stream_group("pressure")).unwrap();
    let big = || {
        mgr.queue_request(
            &pressure,
            [(
                "big",
                ArrayRequest::of::<f32>([2, 2, 1024]).total_runs(1024),
            )],
        )
        .unwrap();
        let mut response = mgr.allocate_queue_for(&pressure).unwrap();
        let array = response.take::<f32>("big").unwrap();
        (response.chunks, response.chunk_length, array)
    };
    let work = mgr.begin_work(&flags).unwrap();
    let (chunks, length, first) = big();
    assert_eq!((chunks, length, first.nbytes()), (36, 29, 464));
    sim.hold_completions(true);
    work.finish().unwrap();
    let (chunks, length, second) = big();
    assert_eq!((chunks, length), (36, 29));
    assert!(second.is_valid(), "the same shape: kept");
    sim.hold_completions(false);
    let (chunks, length, third) = big();
    assert_eq!((chunks, length, third.nbytes()), (8, 128, 2048));
    // The device could not hold the new 2048 bytes beside the old 464:
    // those were freed first, and nothing else is held.
    assert_eq!(second.release_reason(), Some(ReleaseReason::Replaced));
    assert_eq!(sim.free_bytes(), 2304 - 2048);
    assert_eq!(mgr.memory_report().total.current_bytes, 2048);
}

/// When the new array cannot be allocated even after its predecessor was
/// freed to make room, the call fails cleanly: the queue is kept, the
/// figures count only what is held, and the same call succeeds later.
#[test]
fn a_call_that_freed_a_predecessor_and_failed_leaves_consistent_figures() {
    let (mgr, sim) = manager(1 << 30, 1000);
    let solver = mgr.register(queuing()).unwrap();
    let request = |n: usize| [("x", ArrayRequest::of::<u8>([n]).unchunkable())];
    mgr.queue_request(&solver, request(400)).unwrap();
    let old = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u8>("x")
        .unwrap();
    // 900 bytes do not fit beside the 400 held (600 free), but do once they
    // are gone; the allocation itself then fails.
    mgr.queue_request(&solver, request(900)).unwrap();
    sim.set_fail_allocations_after(Some(0));
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(error.is_out_of_memory(), "{error}");
    assert_eq!(old.release_reason(), Some(ReleaseReason::Replaced));
    assert_eq!(solver.allocated_bytes(), 0);
    let stats = mgr.memory_report().total;
    assert_eq!((stats.current_bytes, stats.current_count), (0, 0));
    assert_eq!(sim.free_bytes(), 1000);
    assert!(solver.has_queued());
    sim.set_fail_allocations_after(None);
    let x = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u8>("x")
        .unwrap();
    assert_eq!(x.nbytes(), 900);
    assert_eq!(mgr.memory_report().total.current_bytes, 900);
}

/// With room for both, a failed call leaves the array it would have
/// replaced intact.
#[test]
fn with_room_for_both_a_failed_call_keeps_the_predecessor() {
    let (mgr, sim) = manager(1 << 30, 10_000);
    let solver = mgr.register(queuing()).unwrap();
    let request = |n: usize| [("x", ArrayRequest::of::<u8>([n]).unchunkable())];
    mgr.queue_request(&solver, request(400)).unwrap();
    let old = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u8>("x")
        .unwrap();
    mgr.queue_request(&solver, request(900)).unwrap();
    sim.set_fail_allocations_after(Some(0));
    assert!(mgr.allocate_queue(&solver).is_err());
    assert!(old.is_valid());
    assert_eq!(solver.allocated_bytes(), 400);
}

/// The out-of-memory error's `idle_held` counts what eviction could release
/// for the batch: idle owners other than the requester's own.
#[test]
fn idle_held_leaves_out_the_requesters_own_owner() {
    let (mgr, sim) = manager(1 << 30, 10_000);
    let requester = mgr.register(queuing()).unwrap();
    let sibling = mgr.register(queuing().owner(&requester)).unwrap();
    let other = mgr.register(queuing()).unwrap();
    for (instance, bytes) in [(&sibling, 500), (&other, 300)] {
        mgr.queue_request(
            instance,
            [("held", ArrayRequest::of::<u8>([bytes]).unchunkable())],
        )
        .unwrap();
        mgr.allocate_queue_for(instance).unwrap();
    }
    mgr.queue_request(
        &requester,
        [("x", ArrayRequest::of::<u8>([100]).unchunkable())],
    )
    .unwrap();
    sim.set_fail_allocations_after(Some(0));
    let error = mgr.allocate_queue_for(&requester).unwrap_err();
    assert!(
        matches!(error, cubie_mem::MemError::OutOfMemory { idle_held, .. } if idle_held.0 == 300),
        "{error}"
    );
}
