//! What logs print for a user reading them: the limit that split a batch,
//! byte figures as sizes, proportions that stay readable when small and
//! never read `-0`, and instances by name. The errors' messages are in
//! `error_messages`; here their fields.

use crate::common::{self, capture_logs, manager, queuing, runs_request};
use cubie_mem::plan::Limit;
use cubie_mem::{
    ArrayRequest, ArraySide, Bytes, ChunkPlan, HostMemoryKind, LimitMode, MemError, Registration,
};

const GIB: u64 = 1 << 30;

#[test]
fn the_planning_event_names_the_limit_and_prints_sizes_and_names() {
    let (mgr, _) = manager(10_000_000, 10_000_000);
    mgr.set_limit_mode(LimitMode::Active);
    let solver = mgr
        .register(queuing().name("solver").proportion(0.001))
        .unwrap();
    // 80000 B of runs under a cap of 10000 B: alloc 9800 B, 122 runs fit,
    // so 9 chunks of 112.
    let (response, logs) = capture_logs(|| {
        mgr.queue_request(&solver, [("state", runs_request(80, 1000))])
            .unwrap();
        mgr.allocate_queue_for(&solver).unwrap()
    });
    assert_eq!(response.plan().limited_by(), Some(Limit::Caps));
    for expected in [
        "allocate_queue{trigger='solver' (instance ",
        "planned a batch: 9 chunk(s) of 112 run(s)",
        "cap_headroom=10000 B (9.77 KiB)",
        "granule=0 B",
        "limited_by=instance caps",
    ] {
        assert!(logs.contains(expected), "no {expected:?} in:\n{logs}");
    }
    assert!(!logs.contains("Some("), "{logs}");
}

#[test]
fn a_batch_in_one_chunk_is_limited_by_nothing() {
    let (mgr, _) = manager(GIB, GIB);
    let solver = mgr.register(queuing()).unwrap();
    let (response, logs) = capture_logs(|| {
        mgr.queue_request(&solver, [("state", runs_request(80, 1000))])
            .unwrap();
        mgr.allocate_queue_for(&solver).unwrap()
    });
    assert_eq!(response.plan().limited_by(), None);
    for expected in [
        "cap_headroom=none",
        "limited_by=none",
        "label=\"state\"",
        "bytes=80000 B",
    ] {
        assert!(logs.contains(expected), "no {expected:?} in:\n{logs}");
    }
}

#[test]
fn the_free_memory_limits_a_passive_batch() {
    let (mgr, _) = manager(GIB, 20_000);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("state", runs_request(80, 1000))])
        .unwrap();
    let response = mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!(response.plan().limited_by(), Some(Limit::FreeMemory));
    assert!(ChunkPlan::new(1000, 2, 500).unwrap().limited_by().is_none());
}

#[test]
fn a_tiny_cap_prints_its_proportion() {
    let (mgr, _) = manager(GIB, GIB);
    mgr.set_limit_mode(LimitMode::Active);
    // A cap of floor(1e-6 * 2^30) = 1073 B cannot hold one run of 8000 B.
    let solver = mgr.register(queuing().proportion(1e-6)).unwrap();
    mgr.queue_request(&solver, [("state", runs_request(8000, 10))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(
        matches!(error, MemError::CapLimited { proportion, caps: Bytes(1073), .. }
            if proportion == 1e-6),
        "{error}"
    );
}

#[test]
fn a_tiny_share_is_readable_in_the_statistics() {
    let (mgr, _) = manager(GIB, GIB);
    let _tiny = mgr
        .register(Registration::new().name("tiny").proportion(1e-6))
        .unwrap();
    let stats = mgr.memory_report();
    let row = stats.instances[0].to_string();
    assert!(
        row.starts_with("tiny (group default): share 1e-4%, cap 1073 B (1.05 KiB); "),
        "{row}"
    );
}

#[test]
fn an_empty_manual_pool_prints_zero_not_minus_zero() {
    let (mgr, _) = manager(GIB, GIB);
    assert!(mgr.manual_pool_proportion().is_sign_positive());
    let _auto = mgr.register(Registration::new()).unwrap();
    let error = mgr
        .register(Registration::new().proportion(0.97))
        .unwrap_err();
    match error {
        MemError::AutoPoolStarved {
            requested,
            manual_sum,
            auto_members,
            ..
        } => {
            assert_eq!((requested, manual_sum, auto_members), (0.97, 0.0, 1));
            assert!(manual_sum.is_sign_positive(), "{manual_sum}");
        }
        other => panic!("expected AutoPoolStarved, got {other:?}"),
    }
}

#[test]
fn the_auto_pool_warning_prints_proportions_readably() {
    let (mgr, _) = manager(GIB, GIB);
    let (result, logs) = capture_logs(|| mgr.register(Registration::new().proportion(0.97)));
    result.unwrap();
    for expected in [
        "remaining=0.03 minimum=0.05",
        "the manual pool leaves 0.03 to the auto pool, below the minimum auto pool of 0.05",
    ] {
        assert!(logs.contains(expected), "no {expected:?} in:\n{logs}");
    }
}

#[test]
fn a_host_array_bound_on_the_wrong_axis_says_where_the_runs_are() {
    let (mgr, _) = manager(GIB, GIB);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    let request = ArrayRequest::of::<f64>([5, 4, 1000])
        .chunk_axis(2)
        .total_runs(1000);
    let state = common::allocate_f64(&mgr, &solver, "state", request);
    let host = mgr
        .create_host_array::<f64>([5, 4, 1000], HostMemoryKind::Pageable, None, &solver)
        .unwrap();

    let one_chunk = ChunkPlan::new(1000, 1, 1000).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &one_chunk).unwrap();
    let error = streamer.copy_in(&host, &state, 1, 0).unwrap_err();
    assert!(
        matches!(
            &error,
            MemError::ChunkShapeMismatch {
                side: ArraySide::Host,
                axis: 1,
                total_runs: 1000,
                runs_axis: Some(2),
                ..
            }
        ),
        "{error:?}"
    );
    let debug = format!("{streamer:?}");
    assert!(debug.contains("instance: 'solver' (instance "), "{debug}");

    // The device array holds the whole batch, but a chunk is 500 runs.
    let halves = ChunkPlan::new(1000, 2, 500).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &halves).unwrap();
    let error = streamer.copy_in(&host, &state, 2, 0).unwrap_err();
    assert!(
        matches!(
            &error,
            MemError::ChunkShapeMismatch {
                side: ArraySide::Device,
                found,
                expected,
                chunk_length: 500,
                ..
            } if found == &[5, 4, 1000] && expected == &[5, 4, 500]
        ),
        "{error:?}"
    );
}

#[test]
fn the_pipeline_span_names_its_instance() {
    let (mgr, _) = manager(GIB, GIB);
    let solver = mgr.register(queuing().name("rk45")).unwrap();
    mgr.queue_request(&solver, [("x", runs_request(8, 100))])
        .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let x = response.take::<f64>("x").unwrap();
    let host = mgr
        .create_host_array::<f64>([1, 100], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, response.plan()).unwrap();
    let ((), logs) = capture_logs(|| {
        streamer
            .pipeline()
            .input(&host, &x)
            .run(|_, _| Ok(()))
            .unwrap();
    });
    assert!(
        logs.contains("pipeline{instance='rk45' (instance "),
        "no named pipeline span in:\n{logs}"
    );
}
