//! Eviction of idle owners under physical memory pressure.

use crate::common::{Counter, manager, queuing, runs_request};
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

/// 1000 bytes free; `idle` holds 600 of them and `requester` may queue.
struct Scene {
    mgr: cubie_mem::MemoryManager,
    sim: cubie_mem::SimBackend,
    evicted: Counter,
    idle: cubie_mem::Instance,
    requester: cubie_mem::Instance,
    held: cubie_mem::DeviceArray<f64>,
}

fn scene() -> Scene {
    let (mgr, sim) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let idle = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let requester = mgr.register(queuing()).unwrap();
    let held = hold(&mgr, &idle, 75);
    Scene {
        mgr,
        sim,
        evicted,
        idle,
        requester,
        held,
    }
}

impl Scene {
    /// The requester asks for 600 bytes; returns the number of chunks.
    fn request_600(&self) -> usize {
        self.mgr
            .queue_request(&self.requester, [("x", runs_request(8, 75))])
            .unwrap();
        self.mgr.allocate_queue_for(&self.requester).unwrap().chunks
    }
}

#[test]
fn an_idle_owner_is_evicted_to_fit_a_batch_whole() {
    let sc = scene();
    assert_eq!(sc.request_600(), 1, "after eviction the batch fits whole");
    assert_eq!(sc.evicted.get(), 1);
    assert_eq!(sc.held.release_reason(), Some(ReleaseReason::Evicted));
    let err = sc.held.to_vec().unwrap_err();
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
    assert_eq!(sc.idle.allocated_bytes(), 0);
    assert_eq!(sc.sim.free_bytes(), 400);
    assert_eq!(sc.mgr.memory_report().total.evictions, 1);
}

#[test]
fn busy_owners_are_never_evicted() {
    let sc = scene();
    let work = sc.mgr.begin_work(&sc.idle).unwrap();
    sc.mgr
        .queue_request(&sc.requester, [("x", runs_request(8, 75))])
        .unwrap();
    let r = sc.mgr.allocate_queue_for(&sc.requester).unwrap();
    // Only 400 free: alloc 392, max_chunk = 75 * 392 / 600 = 49 -> 2 chunks of 38.
    assert_eq!((r.chunks, r.chunk_length), (2, 38));
    assert_eq!(sc.evicted.get(), 0);
    assert!(sc.held.is_valid());
    work.finish().unwrap();
}

#[test]
fn an_owner_is_idle_only_once_its_completion_events_fire() {
    let sc = scene();
    sc.sim.hold_completions(true);
    sc.mgr.begin_work(&sc.idle).unwrap().finish().unwrap();
    assert_eq!(
        sc.request_600(),
        2,
        "the GPU is still busy with the idle owner's work"
    );
    assert!(sc.held.is_valid());

    sc.sim.hold_completions(false);
    assert_eq!(sc.request_600(), 1);
    assert_eq!(sc.evicted.get(), 1);
}

#[test]
fn dropping_work_records_completion_too() {
    let sc = scene();
    {
        let _work = sc.mgr.begin_work(&sc.idle).unwrap();
    }
    assert_eq!(sc.request_600(), 1);
    assert!(!sc.held.is_valid());
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
    // 100 runs (a batch the partition of 75 that `a` holds does not cover):
    // 800 bytes where 400 are free, chunked around its own owner's arrays.
    mgr.queue_request(&sibling, [("x", runs_request(8, 100))])
        .unwrap();
    assert_eq!(mgr.allocate_queue_for(&sibling).unwrap().chunks, 3);
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

/// cubie's scenario: `a` holds a pinned `X(1)` (`f64 [1, 1000]`, 8,000
/// bytes), about 1,000 bytes are free (a busy owner holds the rest), and
/// `b` requests a pinned `X(1)`. Pinned arrays count in what eviction
/// releases, as in cubie: `a` is evicted and the batch runs in one chunk
/// (before, `a` was no candidate and the batch ran in 9 chunks of 112).
#[test]
fn evicting_pinned_arrays_makes_room_for_a_pinned_batch_as_in_cubie() {
    let (mgr, _) = manager(1 << 30, 9000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let busy = mgr.register(queuing()).unwrap();
    let b = mgr.register(queuing()).unwrap();
    let pinned = || runs_request(8, 1000).memory(cubie_mem::MemoryKind::Pinned);
    mgr.queue_request(&a, [("p", pinned())]).unwrap();
    let p = mgr
        .allocate_queue_for(&a)
        .unwrap()
        .take_pinned::<f64>("p")
        .unwrap();
    let _held = hold(&mgr, &busy, 1000);
    let _work = mgr.begin_work(&busy).unwrap();
    assert_eq!(mgr.mem_info().unwrap().free, 1000);
    mgr.queue_request(&b, [("x", pinned())]).unwrap();
    let r = mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(evicted.get(), 1);
    assert_eq!(p.release_reason(), Some(ReleaseReason::Evicted));
    assert_eq!((r.chunks, r.chunk_length), (1, 1000), "{}", r.plan());
}

/// Page-locked memory given back serves a batch's pinned arrays, not its
/// device arrays: eviction counts released pinned bytes only up to the
/// batch's own pinned bytes (a device-only batch does not evict an owner
/// holding only pinned memory at all:
/// `owners_holding_only_pinned_memory_are_not_candidates`).
#[test]
fn released_pinned_bytes_count_only_toward_the_batchs_pinned_arrays() {
    let (mgr, _) = manager(1 << 30, 1000);
    let evicted = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(evicted.hook()))
        .unwrap();
    let b = mgr.register(queuing()).unwrap();
    let pinned = |runs| runs_request(8, runs).memory(cubie_mem::MemoryKind::Pinned);
    mgr.queue_request(&a, [("p", pinned(1000))]).unwrap();
    mgr.allocate_queue(&a).unwrap();
    // R = 1200 device + 1200 pinned >= Fe = 1000: evicting `a` gives back
    // 8000 pinned bytes, of which the batch can use its own 1200, so
    // Fe = 2200, alloc = 2156 and max_chunk = floor(150 * 2156 / 2400) =
    // 134: 2 chunks of 75 (without `a`'s bytes, 3 chunks of 50).
    mgr.queue_request(&b, [("x", runs_request(8, 150)), ("y", pinned(150))])
        .unwrap();
    let r = mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(evicted.get(), 1);
    assert_eq!((r.chunks, r.chunk_length), (2, 75));
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
    assert_eq!(mgr.memory_report().instances.len(), 0);
}
