//! An error that says a batch does not fit explains itself: who holds the
//! memory (by name, busy or idle, device and pinned), the device pool's
//! reserved and used bytes, the bytes lacking and the one change that would
//! make the batch fit; `memory_report` gives the same without an error. Each
//! fix is checked by making it: the same call then succeeds.

use crate::common::{manager, queuing, runs_request};
use cubie_mem::report::{Fix, OwnerState};
use cubie_mem::{ArrayRequest, LimitMode, ManagerConfig, MemError, MemoryManager, SimBackend};

const MIB: usize = 1 << 20;

fn unchunkable(bytes: usize) -> ArrayRequest {
    ArrayRequest::of::<u8>([bytes]).unchunkable()
}

fn hold(mgr: &MemoryManager, instance: &cubie_mem::Instance, bytes: usize) {
    mgr.queue_request(instance, [("cache", unchunkable(bytes))])
        .unwrap();
    mgr.allocate_queue(instance).unwrap();
}

#[test]
fn all_unchunkable_names_the_busy_owners_and_the_device_pool() {
    // A 1 GiB device; two busy named solvers hold 900 MiB; another owner
    // asks for 500 MiB unchunkable.
    let sim = SimBackend::new(1 << 30);
    let mgr = MemoryManager::new(sim.clone());
    let a = mgr.register(queuing().name("rk45 outputs")).unwrap();
    let b = mgr.register(queuing().name("euler cache")).unwrap();
    hold(&mgr, &a, 450 * MIB);
    hold(&mgr, &b, 450 * MIB);
    let _busy = (mgr.begin_work(&a).unwrap(), mgr.begin_work(&b).unwrap());
    let c = mgr.register(queuing().name("new solver")).unwrap();
    mgr.queue_request(&c, [("x", unchunkable(500 * MIB))])
        .unwrap();
    let error = mgr.allocate_queue(&c).unwrap_err();
    assert!(matches!(error, MemError::AllUnchunkable { .. }), "{error}");
    let report = error.fit_report().unwrap();
    assert_eq!(report.memory.owners.len(), 2);
    for name in ["'rk45 outputs'", "'euler cache'"] {
        assert!(
            report
                .memory
                .owners
                .iter()
                .any(|owner| owner.instances.iter().any(|i| i.starts_with(name))),
            "no owner {name}: {:?}",
            report.memory.owners
        );
    }
    for owner in &report.memory.owners {
        assert_eq!(owner.state, OwnerState::Busy);
        assert_eq!((owner.device_bytes, owner.pinned_bytes), (450 << 20, 0));
    }
    let pool = report.memory.device_pool.unwrap();
    assert_eq!((pool.reserved, pool.used), (900 << 20, 900 << 20));
    // 124 MiB free: 500 MiB needs 532 MiB free beside the 32 MiB granule.
    assert_eq!(report.lacking, (532 << 20) + 1 - (124 << 20));
    assert!(
        matches!(&report.fix, Fix::FreeBusy { bytes, .. } if *bytes == 450 << 20),
        "{:?}",
        report.fix
    );
    let table = report.to_string();
    assert!(table.contains("group default, busy"), "{table}");
    // The same owners without an error.
    let looked = mgr.memory_report();
    assert_eq!(looked.owners, report.memory.owners);
}

#[test]
fn freeing_the_idle_owner_it_names_makes_the_batch_fit() {
    // 100 MiB; idle owners hold 10 MiB (least recently used) and 40 MiB.
    // Evicting the first would cover what 55 MiB lacks of the free memory,
    // but not beside the 32 MiB granule, so no one is evicted; the report
    // names the owner whose memory is enough.
    let sim = SimBackend::new(1 << 30).with_free(100 << 20);
    let mgr = MemoryManager::new(sim);
    let older = mgr.register(queuing().name("older cache")).unwrap();
    let larger = mgr.register(queuing().name("larger cache")).unwrap();
    hold(&mgr, &older, 10 * MIB);
    hold(&mgr, &larger, 40 * MIB);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    mgr.queue_request(&solver, [("x", unchunkable(55 * MIB))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    let report = error.fit_report().unwrap();
    assert!(
        report
            .memory
            .owners
            .iter()
            .all(|o| o.state == OwnerState::Idle)
    );
    assert!(
        matches!(&report.fix, Fix::FreeIdle { owner, .. } if owner.contains("'larger cache'")),
        "{:?}",
        report.fix
    );
    mgr.free(&larger, "cache").unwrap();
    mgr.allocate_queue(&solver).unwrap();
}

#[test]
fn the_proportion_it_names_makes_a_cap_limited_batch_fit() {
    let (mgr, _sim) = manager(10_000_000, 10_000_000);
    mgr.set_limit_mode(LimitMode::Active);
    let solver = mgr.register(queuing().proportion(0.1)).unwrap();
    mgr.queue_request(&solver, [("x", unchunkable(3_000_000))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(matches!(error, MemError::CapLimited { .. }), "{error}");
    let Fix::RaiseProportion { proportion, group } = &error.fit_report().unwrap().fix else {
        panic!("{error}");
    };
    assert_eq!(group, "default");
    assert!(*proportion > 0.3 && *proportion < 0.31, "{proportion}");
    mgr.set_manual_proportion(&solver, *proportion).unwrap();
    mgr.allocate_queue(&solver).unwrap();
}

#[test]
fn releasing_the_requesters_own_arrays_it_names_makes_the_batch_fit() {
    let (mgr, _sim) = manager(1 << 30, 1000);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    let notary = mgr
        .register(queuing().name("old outputs").owner(&solver))
        .unwrap();
    hold(&mgr, &notary, 600);
    mgr.queue_request(&solver, [("x", unchunkable(900))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    let report = error.fit_report().unwrap();
    assert_eq!(report.memory.owners[0].state, OwnerState::Requesting);
    assert!(
        matches!(&report.fix, Fix::ReleaseOwn { instance, bytes: 600 } if instance.contains("'old outputs'")),
        "{:?}",
        report.fix
    );
    mgr.free(&notary, "cache").unwrap();
    mgr.allocate_queue(&solver).unwrap();
}

#[test]
fn a_granule_or_a_depth_that_keeps_the_batch_out_is_named() {
    let sim = SimBackend::new(1 << 30).with_free(40 << 20);
    let mgr = MemoryManager::new(sim);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("x", unchunkable(20 * MIB))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    let Fix::LowerGranule { granule } = error.fit_report().unwrap().fix else {
        panic!("{error}");
    };
    // The largest granule that lets 20 MiB plan in 40 MiB.
    assert_eq!(granule, (20 << 20) - 1);
    let lowered = MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(40 << 20),
        ManagerConfig::default().granule(granule),
    );
    let solver = lowered.register(queuing()).unwrap();
    lowered
        .queue_request(&solver, [("x", unchunkable(20 * MIB))])
        .unwrap();
    lowered.allocate_queue(&solver).unwrap();

    // One run of 2,560 bytes in each of 4 sets does not fit 10 runs in
    // 980 bytes; in 3 it does.
    let (mgr, _sim) = manager(1 << 30, 1000);
    let solver = mgr.register(queuing()).unwrap();
    let request = |depth| runs_request(256, 10).pipeline_depth(depth);
    mgr.queue_request(&solver, [("state", request(4))]).unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(
        matches!(error, MemError::SingleRunTooLarge { .. }),
        "{error}"
    );
    assert_eq!(
        error.fit_report().unwrap().fix,
        Fix::LowerDepth { depth: 3 }
    );
    mgr.queue_request(&solver, [("state", request(3))]).unwrap();
    mgr.allocate_queue(&solver).unwrap();
}

#[test]
fn a_refused_allocation_reports_the_owners_too() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    hold(&mgr, &solver, 1000);
    mgr.queue_request(&solver, [("y", unchunkable(2000))])
        .unwrap();
    sim.set_fail_allocations_after(Some(0));
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(matches!(error, MemError::OutOfMemory { .. }), "{error}");
    let report = error.fit_report().unwrap();
    assert_eq!(report.lacking, 0, "the figures allowed it");
    assert_eq!(report.fix, Fix::Retry, "the device has the memory");
    assert!(
        matches!(&report.memory.owners[..], [owner]
            if owner.instances.iter().any(|i| i.starts_with("'solver'")) && owner.device_bytes == 1000),
        "{:?}",
        report.memory.owners
    );
}

#[test]
fn the_planner_alone_gives_no_report() {
    let requests = [("x", unchunkable(2000))];
    let budget = cubie_mem::plan::Budget::passive(1000).with_granule(0);
    let error = cubie_mem::plan::plan(requests.iter().map(|(l, r)| (*l, r)), &budget).unwrap_err();
    assert!(error.fit_report().is_none());
}
