//! Eviction of idle owners under physical memory pressure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Counter, manager, queuing, runs_request};
use cubie_mem::{LimitMode, MemError, Registration, ReleaseReason};

/// Allocates `runs * 8` device bytes for `instance` and returns the handle.
fn hold(
    mgr: &cubie_mem::MemoryManager,
    instance: &cubie_mem::Instance,
    runs: usize,
) -> cubie_mem::DeviceArray<f64> {
    mgr.queue_request(instance, [("held", runs_request(8, runs))])
        .unwrap();
    let mut r = mgr.allocate_queue_for(instance).unwrap();
    assert_eq!(r.chunks, 1);
    r.take::<f64>("held").unwrap()
}

#[test]
fn an_idle_owner_is_evicted_to_fit_a_batch_whole() {
    let (mgr, sim) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let held = hold(&mgr, &a, 75); // 600 of 1000
    mgr.queue_request(&b, [("x", runs_request(8, 75))]).unwrap();
    let r = mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(r.chunks, 1, "after eviction the batch fits whole");
    assert_eq!(evicted.get(), 1);
    assert_eq!(held.release_reason(), Some(ReleaseReason::Evicted));
    let err = held.to_vec().unwrap_err();
    assert!(
        matches!(
            err,
            MemError::Released {
                reason: ReleaseReason::Evicted,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(mgr.allocated_bytes(&a), 0);
    assert_eq!(sim.free_bytes(), 400);
    assert_eq!(mgr.stats().total.evictions, 1);
}

#[test]
fn busy_owners_are_never_evicted() {
    let (mgr, _) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let held = hold(&mgr, &a, 75);
    let work = mgr.begin_work(&a).unwrap();
    mgr.queue_request(&b, [("x", runs_request(8, 75))]).unwrap();
    let r = mgr.allocate_queue_for(&b).unwrap();
    // Only 400 free: alloc 392, max_chunk = 75 * 392 / 600 = 49 -> 2 chunks of 38.
    assert_eq!((r.chunks, r.chunk_length), (2, 38));
    assert_eq!(evicted.get(), 0);
    assert!(held.is_valid());
    work.finish().unwrap();
}

#[test]
fn an_owner_is_idle_only_once_its_completion_events_fire() {
    let (mgr, sim) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let held = hold(&mgr, &a, 75);
    sim.hold_completions(true);
    mgr.begin_work(&a).unwrap().finish().unwrap();
    mgr.queue_request(&b, [("x", runs_request(8, 75))]).unwrap();
    assert_eq!(
        mgr.allocate_queue_for(&b).unwrap().chunks,
        2,
        "the GPU is still busy with a's work"
    );
    assert!(held.is_valid());

    sim.hold_completions(false);
    mgr.queue_request(&b, [("x", runs_request(8, 75))]).unwrap();
    assert_eq!(mgr.allocate_queue_for(&b).unwrap().chunks, 1);
    assert_eq!(evicted.get(), 1);
}

#[test]
fn dropping_work_records_completion_too() {
    let (mgr, _) = manager(1 << 30, 1000);
    let a = mgr.register(queuing()).unwrap();
    let b = mgr.register(queuing()).unwrap();
    let held = hold(&mgr, &a, 75);
    {
        let _work = mgr.begin_work(&a).unwrap();
    }
    mgr.queue_request(&b, [("x", runs_request(8, 75))]).unwrap();
    assert_eq!(mgr.allocate_queue_for(&b).unwrap().chunks, 1);
    assert!(!held.is_valid());
}

#[test]
fn least_recently_used_owners_go_first_and_only_as_many_as_needed() {
    let (mgr, _) = manager(1 << 30, 3000);
    let (ea, ec) = (Counter::default(), Counter::default());
    let a = mgr
        .register(Registration::new().on_invalidate(ea.hook()))
        .unwrap();
    let c = mgr
        .register(Registration::new().on_invalidate(ec.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let held_a = hold(&mgr, &a, 125); // 1000
    let held_c = hold(&mgr, &c, 125); // 1000
    mgr.begin_work(&c).unwrap().finish().unwrap();
    mgr.begin_work(&a).unwrap().finish().unwrap(); // a used most recently
    // 1000 free; b needs 1800: one owner's 1000 bytes suffice.
    mgr.queue_request(&b, [("x", runs_request(8, 225))])
        .unwrap();
    assert_eq!(mgr.allocate_queue_for(&b).unwrap().chunks, 1);
    assert_eq!((ea.get(), ec.get()), (0, 1));
    assert!(held_a.is_valid());
    assert!(!held_c.is_valid());
}

#[test]
fn owners_are_evicted_whole_and_registrations_inherit_them() {
    let (mgr, _) = manager(1 << 30, 2000);
    let (e1, e2) = (Counter::default(), Counter::default());
    let owner = mgr.new_owner();
    let x = mgr
        .register(Registration::new().owner(&owner).on_invalidate(e1.hook()))
        .unwrap();
    let y = mgr
        .register(Registration::new().owner(&owner).on_invalidate(e2.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let hx = hold(&mgr, &x, 50); // 400
    let hy = hold(&mgr, &y, 50); // 400
    // 1200 free; b needs 1300: x and y go together.
    mgr.queue_request(&b, [("z", runs_request(8, 163))])
        .unwrap();
    assert_eq!(mgr.allocate_queue_for(&b).unwrap().chunks, 1);
    assert_eq!((e1.get(), e2.get()), (1, 1));
    assert!(!hx.is_valid() && !hy.is_valid());
}

#[test]
fn a_registration_owned_by_an_instance_is_evicted_with_it() {
    let (mgr, _) = manager(1 << 30, 2000);
    let (ep, ec) = (Counter::default(), Counter::default());
    let parent = mgr
        .register(Registration::new().on_invalidate(ep.hook()))
        .unwrap();
    let child = mgr
        .register(Registration::new().owner(&parent).on_invalidate(ec.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let _hp = hold(&mgr, &parent, 50);
    let _hc = hold(&mgr, &child, 50);
    mgr.queue_request(&b, [("z", runs_request(8, 163))])
        .unwrap();
    mgr.allocate_queue(&b).unwrap();
    assert_eq!((ep.get(), ec.get()), (1, 1));
}

#[test]
fn the_requesters_own_owner_is_never_evicted() {
    let (mgr, _) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let sibling = mgr.register(queuing().owner(&a)).unwrap();
    let held = hold(&mgr, &a, 75);
    mgr.queue_request(&sibling, [("x", runs_request(8, 75))])
        .unwrap();
    assert_eq!(mgr.allocate_queue_for(&sibling).unwrap().chunks, 2);
    assert_eq!(evicted.get(), 0);
    assert!(held.is_valid());
}

#[test]
fn owners_holding_only_pinned_memory_are_not_candidates() {
    let (mgr, _) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &a,
        [(
            "p",
            runs_request(8, 75).memory(cubie_mem::MemoryKind::Pinned),
        )],
    )
    .unwrap();
    mgr.allocate_queue(&a).unwrap();
    mgr.queue_request(&b, [("x", runs_request(8, 150))])
        .unwrap();
    mgr.allocate_queue(&b).unwrap();
    assert_eq!(evicted.get(), 0);
}

#[test]
fn active_mode_does_not_evict_when_the_caps_forbid_the_batch() {
    let (mgr, _) = manager(10_000, 1000);
    mgr.set_limit_mode(LimitMode::Active);
    let evicted = Counter::default();
    let a = mgr
        .register(
            Registration::new()
                .on_invalidate(evicted.hook())
                .proportion(0.5)
                .stream_group("other"),
        )
        .unwrap();
    let b = mgr.register(queuing().proportion(0.05)).unwrap(); // cap 500, alone in its group
    let _held = hold(&mgr, &a, 75);
    // R = 600 >= Fe = 400 but also >= H = 500: no eviction, chunk against min(Fe, H).
    mgr.queue_request(&b, [("x", runs_request(8, 75))]).unwrap();
    let r = mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(evicted.get(), 0);
    assert!(r.chunks > 1);
}

#[test]
fn begin_work_rejects_owners_of_other_managers() {
    let (mgr, _) = manager(1 << 30, 1000);
    let (other, _) = manager(1 << 30, 1000);
    let foreign = other.register(Registration::new()).unwrap();
    assert!(matches!(
        mgr.begin_work(&foreign),
        Err(MemError::UnknownOwner { .. })
    ));
    let foreign_owner = other.new_owner();
    let err = mgr
        .register(Registration::new().owner(&foreign_owner))
        .unwrap_err();
    assert!(matches!(err, MemError::UnknownOwner { .. }));
    assert_eq!(mgr.instance_count(), 0);
}
