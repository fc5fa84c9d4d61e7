//! Who is who: handles of one manager given to another, names in every
//! message, resources that stay bounded, and the edge figures of responses.

use crate::common::{allocate_f64, capture_logs, manager, queuing, runs_request};
use cubie_mem::backend::Backend;
use cubie_mem::{
    ArrayRequest, ArrayResponse, Bytes, DType, HostMemoryKind, LimitMode, ManagerConfig, MemError,
    MemoryManager, Registration, SimBackend,
};

#[test]
fn a_foreign_instance_is_unknown_not_a_local_one_of_the_same_number() {
    let (first, _) = manager(1 << 30, 1 << 20);
    let (second, _) = manager(1 << 30, 1 << 20);
    let foreign = first.register(queuing().stream_group("g")).unwrap();
    let local = second
        .register(
            queuing()
                .proportion(0.5)
                .stream_group("g")
                .host_spill_threshold(7),
        )
        .unwrap();
    let _partner = second.register(queuing().stream_group("g")).unwrap();
    second
        .queue_request(&local, [("x", runs_request(8, 4))])
        .unwrap();
    assert_ne!(foreign.id(), local.id());

    // Calls that cannot fail answer neutrally for a foreign instance.
    assert_eq!(second.proportion(&foreign), 0.0);
    assert_eq!(second.cap(&foreign), 0);
    assert_eq!(second.stream_group(&foreign), "");
    assert!(!second.is_grouped(&foreign));

    // Calls that can fail say so, and change nothing.
    let unknown = |result: Result<(), MemError>| {
        let error = result.unwrap_err();
        assert!(matches!(error, MemError::UnknownInstance { .. }), "{error}");
    };
    unknown(second.set_manual_proportion(&foreign, 0.1));
    unknown(second.queue_request(&foreign, [("y", runs_request(8, 4))]));
    unknown(second.allocate_queue(&foreign));
    unknown(second.change_stream_group(&foreign, "h"));
    unknown(second.stream(&foreign).map(drop));
    unknown(
        second
            .create_host_array::<f64>([4], HostMemoryKind::Pageable, None, &foreign)
            .map(drop),
    );
    assert_eq!(second.proportion(&local), 0.5);
    assert!(local.has_queued());
    assert_eq!(second.memory_report().instances.len(), 2);
}

#[test]
fn a_foreign_owner_is_unknown() {
    let (first, _) = manager(1 << 30, 1 << 20);
    let (second, _) = manager(1 << 30, 1 << 20);
    let foreign_owner = first.new_owner();
    let foreign_instance = first.register(Registration::new()).unwrap();
    let _local = second.register(Registration::new()).unwrap();
    for error in [
        second
            .register(Registration::new().owner(&foreign_owner))
            .unwrap_err(),
        second
            .register(Registration::new().owner(&foreign_instance))
            .unwrap_err(),
        second.begin_work(&foreign_owner).unwrap_err(),
    ] {
        assert!(matches!(error, MemError::UnknownOwner { .. }), "{error}");
    }
    assert_eq!(second.memory_report().instances.len(), 1);
}

#[test]
fn names_show_in_stats_reports_errors_and_tracing() {
    let (mgr, _) = manager(1 << 30, 1000);
    let hookless = mgr
        .register(Registration::new().name("rk45-outputs"))
        .unwrap();
    assert_eq!(hookless.name(), Some("rk45-outputs"));
    let error = mgr
        .queue_request(&hookless, [("x", runs_request(8, 4))])
        .unwrap_err();
    assert!(
        matches!(&error, MemError::NoInvalidateHook { instance } if instance.starts_with("'rk45-outputs'")),
        "{error}"
    );

    let cache = mgr
        .register(Registration::new().name("cache").on_invalidate(|| {}))
        .unwrap();
    allocate_f64(
        &mgr,
        &cache,
        "x",
        ArrayRequest::of::<f64>([100]).unchunkable(),
    );
    let solver = mgr.register(queuing().name("solver")).unwrap();
    let (_, logs) = capture_logs(|| {
        allocate_f64(
            &mgr,
            &solver,
            "y",
            ArrayRequest::of::<f64>([100]).unchunkable(),
        )
    });
    assert!(
        logs.contains("owner=") && logs.contains("'cache'"),
        "{logs}"
    );

    let stats = mgr.memory_report();
    let names: Vec<_> = stats.instances.iter().map(|i| i.name.as_deref()).collect();
    assert_eq!(names, [Some("rk45-outputs"), Some("cache"), Some("solver")]);
    let report = stats.to_string();
    let table = &report[report.find("scope").unwrap()..];
    assert!(table.contains("solver (default)"), "{report}");
    assert!(!table.contains("instance "), "names replace ids: {report}");
}

#[test]
fn the_report_splits_device_and_pinned_and_shows_caps_only_in_active_mode() {
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let a = mgr.register(queuing().name("a").proportion(0.5)).unwrap();
    mgr.queue_request(
        &a,
        [
            ("dev", ArrayRequest::of::<u8>([3 << 20]).unchunkable()),
            (
                "pin",
                ArrayRequest::of::<u8>([1 << 20])
                    .unchunkable()
                    .memory(cubie_mem::MemoryKind::Pinned),
            ),
        ],
    )
    .unwrap();
    mgr.allocate_queue(&a).unwrap();
    let total = mgr.memory_report().total;
    assert_eq!((total.device_bytes, total.pinned_bytes), (3 << 20, 1 << 20));
    let passive = mgr.memory_report().to_string();
    let header: Vec<&str> = passive
        .lines()
        .find(|l| l.starts_with("scope"))
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert!(
        header.contains(&"device MiB") && header.contains(&"pinned MiB"),
        "{passive}"
    );
    let row = passive.lines().find(|l| l.starts_with("a (")).unwrap();
    assert!(row.contains("3.00") && row.contains("1.00"), "{passive}");
    assert!(!passive.contains("cap"), "{passive}");
    mgr.set_limit_mode(LimitMode::Active);
    assert!(mgr.memory_report().to_string().contains("cap 512.00 MiB"));
}

#[test]
fn completion_events_stay_one_per_owner_and_stream() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    mgr.stream(&a).unwrap();
    sim.hold_completions(true);
    for _ in 0..100 {
        mgr.begin_work(&a).unwrap().finish().unwrap();
    }
    assert_eq!(
        sim.live_events(),
        1,
        "the newest event covers the older ones"
    );
    sim.hold_completions(false);
    drop(a);
    assert_eq!(sim.live_events(), 0);
}

#[test]
fn the_stream_of_a_group_that_empties_is_destroyed() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    let b = mgr.register(queuing().stream_group("g")).unwrap();
    allocate_f64(&mgr, &a, "x", runs_request(8, 4));
    assert_eq!(sim.live_streams(), 1);
    drop(a);
    assert_eq!(sim.live_streams(), 1, "b still uses it");
    mgr.change_stream_group(&b, "h").unwrap();
    assert_eq!(sim.live_streams(), 0, "g emptied; h has no stream yet");
    mgr.stream(&b).unwrap();
    drop(b);
    assert_eq!(sim.live_streams(), 0);
}

#[test]
fn a_zero_byte_batch_on_a_full_device_is_one_chunk_and_evicts_nobody() {
    // No free memory at all, for a manager without granule and for one
    // with the default 32 MiB granule.
    let (mgr, sim) = manager(1 << 30, 1000);
    let idle = mgr.register(queuing()).unwrap();
    let held = allocate_f64(
        &mgr,
        &idle,
        "x",
        ArrayRequest::of::<f64>([64]).unchunkable(),
    );
    // Another process takes the rest.
    let stream = sim.create_stream().unwrap();
    sim.alloc_device(488, &*stream).unwrap();
    assert_eq!(sim.free_bytes(), 0);
    let strict = MemoryManager::new(mgr.backend().clone());
    for mgr in [&mgr, &strict] {
        let a = mgr.register(queuing()).unwrap();
        mgr.queue_request(
            &a,
            [(
                "empty",
                ArrayRequest::new(DType::F64, [0, 4, 100]).total_runs(100),
            )],
        )
        .unwrap();
        let response = mgr.allocate_queue_for(&a).unwrap();
        assert_eq!((response.chunks, response.chunk_length), (1, 100));
        assert_eq!(response.chunked_shapes["empty"], [0, 4, 100]);
    }
    assert!(held.is_valid(), "nothing was evicted for zero bytes");
}

#[test]
fn the_default_response_is_one_chunk_of_one_run() {
    let response = ArrayResponse::default();
    assert_eq!((response.chunks, response.chunk_length), (1, 1));
    assert_eq!(response.plan().chunks(), 1);
    assert!(response.is_empty());
}

#[test]
fn taking_a_label_twice_says_it_was_taken() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("state", runs_request(8, 4))])
        .unwrap();
    let mut response = mgr.allocate_queue_for(&a).unwrap();
    response.take::<f64>("state").unwrap();
    let error = response.take::<f64>("state").unwrap_err();
    assert_eq!(
        error,
        MemError::AlreadyTaken {
            label: "state".into()
        }
    );
    let error = response.take::<f64>("nothing").unwrap_err();
    assert!(matches!(error, MemError::UnknownLabel { .. }), "{error}");
}

#[test]
fn caps_that_block_a_batch_are_named_with_the_fix() {
    // 1% of a 1 GiB device is a cap of about 10 MiB; 256 MiB are free.
    let sim = SimBackend::new(1 << 30).with_free(256 << 20);
    let mgr = MemoryManager::new(sim);
    mgr.set_limit_mode(LimitMode::Active);
    let small = mgr.register(queuing().proportion(0.01)).unwrap();
    mgr.queue_request(
        &small,
        [("table", ArrayRequest::of::<u8>([20 << 20]).unchunkable())],
    )
    .unwrap();
    let error = mgr.allocate_queue(&small).unwrap_err();
    assert!(
        matches!(&error, MemError::CapLimited { group, proportion, needed, .. }
            if group == "default" && *proportion == 0.01 && *needed == Bytes(20 << 20)),
        "{error}"
    );

    // A cap of zero: a manual proportion whose share rounds to no bytes.
    let tiny = SimBackend::new(100).with_free(100);
    let mgr = MemoryManager::with_config(
        tiny,
        ManagerConfig {
            allocation_granule_bytes: 0,
            limit_mode: LimitMode::Active,
            ..Default::default()
        },
    );
    let zero = mgr.register(queuing().proportion(0.001)).unwrap();
    assert_eq!(mgr.cap(&zero), 0);
    mgr.queue_request(&zero, [("x", runs_request(8, 4))])
        .unwrap();
    let error = mgr.allocate_queue(&zero).unwrap_err();
    assert!(
        matches!(error, MemError::CapLimited { caps: Bytes(0), needed, .. } if needed.0 > 0),
        "{error}"
    );
}
