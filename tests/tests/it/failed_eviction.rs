//! Eviction belongs to a batch that will succeed: before evicting anyone,
//! the manager plans the batch as it would be once the chosen idle owners
//! are gone, and a batch that would still fail evicts no one. One test per
//! way a batch can fail after eviction; each checks that the idle owner
//! keeps its memory, its hook is not called, and the queue is kept.

use crate::common::{Counter, queuing, runs_request};
use cubie_mem::backend::Backend;
use cubie_mem::{
    ArrayRequest, DeviceArray, Instance, LimitMode, ManagerConfig, MemError, MemoryManager,
    Registration, SimBackend,
};

const MIB: u64 = 1 << 20;

/// An idle owner holding `bytes` beside a requester.
struct Scene {
    mgr: MemoryManager,
    sim: SimBackend,
    invalidated: Counter,
    idle: Instance,
    held: DeviceArray<u8>,
    requester: Instance,
}

/// A device of `free` bytes with `granule`; `idle` holds `bytes`.
fn scene(free: u64, granule: u64, bytes: usize) -> Scene {
    scene_on(SimBackend::new(1 << 30).with_free(free), granule, bytes)
}

/// A manager with `granule` on `sim`; `idle` holds `bytes`.
fn scene_on(sim: SimBackend, granule: u64, bytes: usize) -> Scene {
    let mgr = MemoryManager::with_config(sim.clone(), ManagerConfig::default().granule(granule));
    let invalidated = Counter::default();
    let idle = mgr
        .register(
            Registration::new()
                .name("idle solver")
                .stream_group("other")
                .on_invalidate(invalidated.hook()),
        )
        .unwrap();
    let requester = mgr.register(queuing().name("requester")).unwrap();
    mgr.queue_request(
        &idle,
        [("cache", ArrayRequest::of::<u8>([bytes]).unchunkable())],
    )
    .unwrap();
    let held = mgr
        .allocate_queue_for(&idle)
        .unwrap()
        .take::<u8>("cache")
        .unwrap();
    Scene {
        mgr,
        sim,
        invalidated,
        idle,
        held,
        requester,
    }
}

impl Scene {
    /// Queues `requests` for the requester and serves them: the error,
    /// once checked that the call changed nothing.
    fn fails(&self, requests: Vec<(&str, ArrayRequest)>) -> MemError {
        let free = self.sim.free_bytes();
        let held = self.idle.allocated_bytes();
        self.mgr.queue_request(&self.requester, requests).unwrap();
        let error = self.mgr.allocate_queue(&self.requester).unwrap_err();
        assert_eq!(self.invalidated.get(), 0, "no one evicted: {error}");
        assert!(self.held.is_valid(), "{error}");
        assert_eq!(self.idle.allocated_bytes(), held);
        assert_eq!(self.sim.free_bytes(), free);
        assert_eq!(self.mgr.memory_report().total.evictions, 0);
        assert!(self.requester.has_queued());
        error
    }
}

fn unchunkable(bytes: usize) -> ArrayRequest {
    ArrayRequest::of::<u8>([bytes]).unchunkable()
}

#[test]
fn all_unchunkable_beside_the_granule_evicts_no_one() {
    // 80 MiB free, 40 MiB held idle; 50 MiB unchunkable would fit the 80
    // MiB once evicted, but not beside the 32 MiB granule.
    let sc = scene(80 * MIB, 32 << 20, 40 << 20);
    let error = sc.fails(vec![("x", unchunkable(50 << 20))]);
    assert!(matches!(error, MemError::AllUnchunkable { .. }), "{error}");
}

#[test]
fn all_unchunkable_within_the_reserve_evicts_no_one() {
    // 1,000 bytes once evicted: 980 allocatable beside the 2% reserve.
    let sc = scene(1000, 0, 600);
    let error = sc.fails(vec![("x", unchunkable(990))]);
    assert!(matches!(error, MemError::AllUnchunkable { .. }), "{error}");
}

#[test]
fn a_batch_larger_than_all_eviction_releases_evicts_no_one() {
    let sc = scene(1000, 0, 300);
    let error = sc.fails(vec![("x", unchunkable(1200))]);
    assert!(matches!(error, MemError::AllUnchunkable { .. }), "{error}");
}

#[test]
fn below_the_granule_after_eviction_evicts_no_one() {
    // The idle owner allocates with 2 MiB free; another process then takes
    // all but 200 KiB. Evicting it would leave 800 KiB: below the 1 MiB
    // granule.
    let sc = scene(2 * MIB, MIB, 600 << 10);
    let stream = sc.sim.create_stream().unwrap();
    let taken = sc.sim.free_bytes() - (200 << 10);
    sc.sim.alloc_device(taken, &*stream).unwrap();
    let error = sc.fails(vec![("x", unchunkable(900 << 10))]);
    assert!(matches!(error, MemError::BelowGranule { .. }), "{error}");
}

#[test]
fn unchunkable_arrays_too_large_after_eviction_evict_no_one() {
    let sc = scene(1000, 0, 600);
    let error = sc.fails(vec![
        ("params", unchunkable(990)),
        ("state", runs_request(8, 100)),
    ]);
    assert!(
        matches!(error, MemError::UnchunkableTooLarge { .. }),
        "{error}"
    );
}

#[test]
fn a_run_too_large_after_eviction_evicts_no_one() {
    let sc = scene(1000, 0, 600);
    let error = sc.fails(vec![("state", runs_request(1200, 10))]);
    assert!(
        matches!(error, MemError::SingleRunTooLarge { .. }),
        "{error}"
    );
}

#[test]
fn caps_that_bind_after_eviction_evict_no_one() {
    // 10,000 bytes; the requester's cap is 5,000, the idle owner (another
    // group) holds 6,000. 4,950 unchunkable bytes are within the cap, but
    // not once 2% of it is withheld.
    let sc = scene_on(SimBackend::new(10_000), 0, 6_000);
    sc.mgr.set_manual_proportion(&sc.requester, 0.5).unwrap();
    sc.mgr.set_limit_mode(LimitMode::Active);
    let error = sc.fails(vec![("x", unchunkable(4_950))]);
    assert!(matches!(error, MemError::CapLimited { .. }), "{error}");
}

#[test]
fn a_remembered_partition_that_does_not_fit_after_eviction_evicts_no_one() {
    // The requester's notary holds an array laid out for one chunk of
    // 1,000 runs; that partition is reused before anything is planned, and
    // 16,000 bytes of it do not fit the 12,000 the notary leaves free even
    // with the idle owner gone.
    let sc = scene(20_000, 0, 4_000);
    let notary = sc.mgr.register(queuing().owner(&sc.requester)).unwrap();
    sc.mgr
        .queue_request(&notary, [("p", runs_request(8, 1000))])
        .unwrap();
    sc.mgr.allocate_queue(&notary).unwrap();
    let error = sc.fails(vec![("x", runs_request(16, 1000))]);
    assert!(error.is_out_of_memory(), "{error}");
}

#[test]
fn a_batch_that_fits_after_eviction_still_evicts() {
    let sc = scene(1000, 0, 600);
    sc.mgr
        .queue_request(&sc.requester, [("x", unchunkable(900))])
        .unwrap();
    sc.mgr.allocate_queue(&sc.requester).unwrap();
    assert_eq!(sc.invalidated.get(), 1);
    assert!(!sc.held.is_valid());
}
