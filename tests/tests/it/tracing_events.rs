//! What `RUST_LOG=cubie_mem=debug` shows: the events of a small scenario,
//! captured on this thread by the tests' process-wide subscriber
//! (`common::capture_logs`).

use crate::common;
use cubie_mem::{ArrayRequest, HostMemoryKind, Registration};

#[test]
fn debug_events_explain_registration_planning_eviction_placement_and_transfers() {
    let (mgr, _) = common::manager(1 << 30, 4000);
    let ((), logs) = common::capture_logs(|| {
        let idle = mgr
            .register(Registration::new().name("idle cache").on_invalidate(|| {}))
            .unwrap();
        common::allocate_f64(
            &mgr,
            &idle,
            "cache",
            ArrayRequest::of::<f64>([250]).unchunkable(),
        );
        let solver = mgr
            .register(Registration::new().name("solver").on_invalidate(|| {}))
            .unwrap();
        // 3000 bytes of runs on a device with 2000 left: evicts the cache,
        // then still needs two chunks.
        mgr.queue_request(&solver, [("x", common::runs_request(800, 5))])
            .unwrap();
        let response = mgr.allocate_queue_for(&solver).unwrap();
        let plan = *response.plan();
        let x = { response }.take::<f64>("x").unwrap();
        let host = mgr
            .create_host_array::<f64>([100, 5], HostMemoryKind::Pageable, None, &solver)
            .unwrap();
        mgr.chunk_streamer(&solver, &plan)
            .unwrap()
            .pipeline()
            .input(&host, x.along(1))
            .run(|_, _| Ok::<_, cubie_mem::MemError>(()))
            .unwrap();
    });
    for expected in [
        "registered",
        "evicted an idle owner",
        "owner='idle cache'",
        "for_owner='solver'",
        "planned a batch: 2 chunk(s) of 3 run(s)",
        "chunkable=4000 B",
        "placed an array",
        "memory=\"allocated\"",
        "pipeline{",
        "queued a chunk's upload",
        "computing a chunk",
    ] {
        assert!(logs.contains(expected), "no {expected:?} in:\n{logs}");
    }
}
