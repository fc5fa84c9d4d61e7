//! What an error's message says to the user who reads it: the figures, the
//! names and the fix. One test per variant; every other test asserts on the
//! variant and its fields, so rewording a message breaks only its test here.

use crate::common::{self, capture_logs, manager, queuing, runs_request};
use cubie_mem::plan::split::Skip;
use cubie_mem::{
    ArrayRequest, ArraySide, Bytes, ChunkPlan, DType, HostMemoryKind, LimitMode, ManagerConfig,
    MemError, MemoryManager, Registration, ReleaseReason, Shard, ShardError, SimBackend,
    StagingThreads,
};

const GIB: u64 = 1 << 30;

/// Asserts that `error`'s message contains every one of `parts`.
fn assert_names(error: &impl std::fmt::Display, parts: &[&str]) {
    let message = error.to_string();
    for part in parts {
        assert!(message.contains(part), "no {part:?} in: {message}");
    }
}

/// An unchunkable request of `bytes` bytes.
fn unchunkable(bytes: usize) -> ArrayRequest {
    ArrayRequest::of::<u8>([bytes]).unchunkable()
}

/// Makes `instance` hold `bytes` of device memory.
fn hold(mgr: &MemoryManager, instance: &cubie_mem::Instance, bytes: usize) {
    mgr.queue_request(instance, [("cache", unchunkable(bytes))])
        .unwrap();
    mgr.allocate_queue(instance).unwrap();
}

#[test]
fn below_granule_message_names_the_setting_and_the_call() {
    // 16 MiB free: below the default granule of 32 MiB.
    let mgr = MemoryManager::new(SimBackend::new(GIB).with_free(16 << 20));
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("state", runs_request(8, 1000))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(matches!(error, MemError::BelowGranule { .. }), "{error}");
    assert_names(
        &error,
        &[
            "16777216 B (16.00 MiB) free",
            "allocation granule of 33554432 B (32.00 MiB)",
            "ManagerConfig::allocation_granule_bytes",
            "MemoryManager::with_config(backend, ManagerConfig::default().granule(0))",
        ],
    );
}

#[test]
fn config_message_names_the_setting_the_path_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let (mgr, _) = manager(GIB, GIB);
    let error = mgr
        .register(
            Registration::new()
                .name("rk45-outputs")
                .spill_directory(&missing),
        )
        .unwrap_err();
    assert!(matches!(error, MemError::Config { .. }), "{error}");
    assert_names(
        &error,
        &[
            "Registration::spill_directory",
            "'rk45-outputs'",
            "not-there",
            "no such directory",
            "create it",
        ],
    );

    let error = ManagerConfig::default()
        .spill_directory(&missing)
        .validate()
        .unwrap_err();
    assert_names(
        &error,
        &[
            "ManagerConfig::spill_directory",
            "not-there",
            "no such directory",
        ],
    );

    let error = StagingThreads::new(0).unwrap_err();
    assert_names(
        &error,
        &["StagingThreads::new", "at least 1 staging thread"],
    );
    let error = StagingThreads::new(usize::MAX).unwrap_err();
    assert_names(
        &error,
        &["StagingThreads::new", "at most 1024 staging threads"],
    );
}

#[test]
fn all_unchunkable_message_names_the_arrays_the_owners_and_the_fix() {
    // An array unchunkable only by its axis: the message names the axis to set.
    let (mgr, _) = manager(GIB, 1000);
    let a = mgr.register(queuing()).unwrap();
    let state = ArrayRequest::of::<u8>([20, 100]).total_runs(100);
    mgr.queue_request(&a, [("state", state)]).unwrap();
    let (result, _) = capture_logs(|| mgr.allocate_queue(&a));
    let error = result.unwrap_err();
    assert!(matches!(error, MemError::AllUnchunkable { .. }), "{error}");
    assert_names(
        &error,
        &[
            "'state' (shape [20, 100], 2000 B",
            "has its chunk axis 2 beyond its 2 dimension(s)",
            "ArrayRequest::chunk_axis(1)",
        ],
    );

    // Two busy named solvers hold 900 MiB of a 1 GiB device.
    const MIB: usize = 1 << 20;
    let mgr = MemoryManager::new(SimBackend::new(GIB));
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
    assert_names(
        &error,
        &[
            "'rk45 outputs'",
            "'euler cache'",
            "busy 450.00 MiB",
            "device pool reserved 900.00 MiB, used 900.00 MiB",
        ],
    );

    // The planner alone knows no owners: its message names none.
    let requests = [("x", unchunkable(2000))];
    let budget = cubie_mem::plan::Budget::passive(1000).with_granule(0);
    let error = cubie_mem::plan::plan(requests.iter().map(|(l, r)| (*l, r)), &budget).unwrap_err();
    assert_names(&error, &["2000 B"]);
    assert!(!error.to_string().contains("held by"), "{error}");
}

#[test]
fn single_run_too_large_message_names_the_run_and_the_depth() {
    let error = MemError::SingleRunTooLarge {
        per_run: Bytes(2000),
        depth: 1,
        room: Bytes(980),
        unchunkable: Bytes(0),
        withheld: Bytes(20),
        report: None,
    };
    assert_names(&error, &["2000 B", "cannot fit a single run"]);
    // One buffer set: the message speaks of neither sets nor depth.
    let message = error.to_string();
    assert!(
        !message.contains("buffer set") && !message.contains("depth"),
        "{message}"
    );
    let deep = MemError::SingleRunTooLarge {
        per_run: Bytes(100),
        depth: 11,
        room: Bytes(980),
        unchunkable: Bytes(0),
        withheld: Bytes(20),
        report: None,
    };
    assert_names(
        &deep,
        &["in each of 11 buffer sets", "lower the pipeline depth"],
    );
}

#[test]
fn zero_depth_message_names_the_field() {
    let error = MemError::ZeroDepth {
        chunkable: Bytes(100),
        unchunkable: Bytes(5),
    };
    assert_names(&error, &["BatchSizes::depth"]);
}

#[test]
fn invalid_plan_message_names_the_reason_and_the_planner() {
    let error = MemError::InvalidPlan {
        total_runs: 10,
        chunks: 3,
        chunk_length: 3,
        reason: "the chunks do not cover every run",
    };
    assert_names(&error, &["the chunks do not cover every run", "plan::plan"]);
}

#[test]
fn no_device_takes_part_message_names_each_reason_and_the_fixes() {
    let error = MemError::NoDeviceTakesPart {
        reasons: vec![
            Skip::CannotHoldUnchunkable {
                unchunkable: Bytes(50),
                allocatable: Bytes(10),
            },
            Skip::CannotHoldOneRun {
                needed: Bytes(70),
                allocatable: Bytes(60),
            },
            Skip::ZeroWeight,
        ],
    };
    assert_eq!(
        error.to_string(),
        "no device can take part in the batch: device 0 cannot hold the unchunkable arrays: needs \
         more than 50 B, can allocate 10 B; device 1 cannot hold one run in each buffer set beside \
         the unchunkable arrays: needs 70 B, can allocate 60 B; device 2 has weight 0; free memory \
         on a device, or shrink the batch's unchunkable or per-run arrays (a device holds the \
         unchunkable arrays and one run in each buffer set), or give a device a weight above 0"
    );
    // Only weights: only their fix.
    let weightless = MemError::NoDeviceTakesPart {
        reasons: vec![Skip::ZeroWeight, Skip::ZeroWeight],
    };
    assert!(
        weightless
            .to_string()
            .ends_with("device 1 has weight 0; give a device a weight above 0"),
        "{weightless}"
    );
    let none = MemError::NoDeviceTakesPart { reasons: vec![] };
    assert_names(&none, &["at least one device"]);
}

#[test]
fn out_of_memory_message_names_the_array_and_the_owners() {
    let (mgr, sim) = manager(GIB, 1 << 20);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    hold(&mgr, &solver, 1000);
    mgr.queue_request(&solver, [("y", unchunkable(2000))])
        .unwrap();
    sim.set_fail_allocations_after(Some(0));
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(matches!(error, MemError::OutOfMemory { .. }), "{error}");
    assert_names(&error, &["'y'", "free", "device held by 'solver'"]);
}

#[test]
fn cap_limited_message_names_the_proportion_and_the_fix() {
    // 1% of a 1 GiB device is a cap of about 10 MiB; 256 MiB are free.
    let mgr = MemoryManager::new(SimBackend::new(GIB).with_free(256 << 20));
    mgr.set_limit_mode(LimitMode::Active);
    let small = mgr.register(queuing().proportion(0.01)).unwrap();
    mgr.queue_request(&small, [("table", unchunkable(20 << 20))])
        .unwrap();
    let error = mgr.allocate_queue(&small).unwrap_err();
    assert!(matches!(error, MemError::CapLimited { .. }), "{error}");
    assert_names(
        &error,
        &[
            "proportion 0.01 gives",
            "caps of",
            "set_manual_proportion",
            "LimitMode::Passive",
        ],
    );

    // A tiny cap prints its proportion readably: floor(1e-6 * 2^30) = 1073 B.
    let (mgr, _) = manager(GIB, GIB);
    mgr.set_limit_mode(LimitMode::Active);
    let solver = mgr.register(queuing().proportion(1e-6)).unwrap();
    mgr.queue_request(&solver, [("state", runs_request(8000, 10))])
        .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert_names(
        &error,
        &["its members' proportion 1e-6 gives caps of 1073 B (1.05 KiB)"],
    );

    // A cap of zero: a manual proportion whose share rounds to no bytes.
    let mgr = MemoryManager::with_config(
        SimBackend::new(100).with_free(100),
        ManagerConfig {
            allocation_granule_bytes: 0,
            limit_mode: LimitMode::Active,
            ..Default::default()
        },
    );
    let zero = mgr.register(queuing().proportion(0.001)).unwrap();
    mgr.queue_request(&zero, [("x", runs_request(8, 4))])
        .unwrap();
    let error = mgr.allocate_queue(&zero).unwrap_err();
    assert!(matches!(error, MemError::CapLimited { .. }), "{error}");
    assert!(!error.to_string().contains("need 0 B"), "{error}");
}

#[test]
fn manual_pool_overflow_message_names_the_sum_and_the_most_allowed() {
    let error = MemError::ManualPoolOverflow {
        requested: 0.5,
        manual_sum: 0.6,
    };
    assert_names(
        &error,
        &["0.6 already assigned + 0.5 requested > 1; lower this proportion to at most 0.4"],
    );
}

#[test]
fn auto_pool_starved_message_prints_proportions_readably() {
    let (mgr, _) = manager(GIB, GIB);
    let _auto = mgr.register(Registration::new()).unwrap();
    let error = mgr
        .register(Registration::new().proportion(0.97))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "manual pool would leave 0.03 of memory to 1 auto-pool instance(s), below the minimum auto \
         pool of 0.05; lower the proportion (0 assigned + 0.97 requested) or move the auto instances \
         to manual shares"
    );
}

#[test]
fn no_invalidate_hook_message_names_the_instance_and_the_call() {
    let (mgr, _) = manager(GIB, 1000);
    let hookless = mgr
        .register(Registration::new().name("rk45-outputs"))
        .unwrap();
    let error = mgr
        .queue_request(&hookless, [("x", runs_request(8, 4))])
        .unwrap_err();
    assert!(
        matches!(error, MemError::NoInvalidateHook { .. }),
        "{error}"
    );
    assert_names(
        &error,
        &["'rk45-outputs'", "Registration::on_invalidate(..)"],
    );
}

#[test]
fn duplicate_label_message_names_the_label_and_that_nothing_was_queued() {
    let error = MemError::DuplicateLabel {
        label: "state".into(),
        instance: "'solver' (instance 1)".into(),
    };
    assert_names(
        &error,
        &[
            "'solver' (instance 1)",
            "'state' twice",
            "nothing was queued",
        ],
    );
}

#[test]
fn already_taken_message_names_the_label() {
    let error = MemError::AlreadyTaken {
        label: "state".into(),
    };
    assert_names(&error, &["'state'", "already taken"]);
}

#[test]
fn unknown_label_message_names_the_labels_held() {
    let error = MemError::UnknownLabel {
        label: "nope".into(),
        available: "state, status".into(),
    };
    assert_names(&error, &["'nope'", "state, status"]);
}

#[test]
fn wrong_array_type_message_names_both_types() {
    let error = MemError::WrongArrayType {
        label: "state".into(),
        requested: "DeviceArray<f32>".into(),
        found: "DeviceArray<f64>".into(),
    };
    assert_names(&error, &["'state'", "DeviceArray<f32>", "DeviceArray<f64>"]);
}

#[test]
fn dtype_mismatch_message_names_both_types() {
    let error = MemError::DTypeMismatch {
        expected: DType::F32,
        found: DType::F64,
    };
    assert_names(&error, &["f32", "f64"]);
}

#[test]
fn released_message_names_the_array() {
    let error = MemError::Released {
        label: "x".into(),
        reason: ReleaseReason::Freed,
    };
    assert_names(&error, &["'x' is no longer valid", "request it again"]);
}

#[test]
fn out_of_bounds_message_names_the_range() {
    let error = MemError::OutOfBounds {
        offset: 8,
        end: 16,
        size: 12,
    };
    assert_names(&error, &["out of bounds", "8..16", "12 bytes"]);
}

#[test]
fn host_out_of_memory_message_names_spilling() {
    let error = MemError::HostOutOfMemory {
        requested: Bytes(1 << 60),
        what: "a pageable host array",
    };
    assert_names(
        &error,
        &[
            "a pageable host array",
            "spill",
            "ManagerConfig::host_spill_threshold",
        ],
    );
}

#[test]
fn set_out_of_range_message_names_the_set_and_the_depth() {
    let error = MemError::SetOutOfRange {
        label: "state".into(),
        set: 2,
        buffer_sets: 2,
    };
    assert_names(&error, &["buffer set 2", "'state'", "pipeline_depth"]);
}

#[test]
fn chunk_out_of_range_message_names_the_valid_range() {
    let error = MemError::ChunkOutOfRange {
        chunk: 3,
        chunks: 3,
    };
    assert_names(&error, &["chunk 3", "0..3"]);
}

#[test]
fn no_run_axis_message_names_the_along_call() {
    let error = MemError::NoRunAxis {
        label: "cols".into(),
    };
    assert_names(&error, &["'cols'", ".along(axis)"]);
}

#[test]
fn no_buffer_sets_message_asks_for_a_set() {
    assert_names(&MemError::NoBufferSets, &["at least one buffer set"]);
}

#[test]
fn device_failed_message_names_the_device() {
    let error = MemError::DeviceFailed {
        device: 1,
        source: Box::new(MemError::NoBufferSets),
        saved: vec![0..4, 10..12],
    };
    assert_names(&error, &["device 1", "[0..4, 10..12]"]);
}

#[test]
fn shard_message_names_the_variables_and_the_reason() {
    let reason = ShardError::PmiWithoutLocalRanks;
    let error = MemError::Shard {
        variables: vec![("PMI_RANK", "4".into()), ("PMI_SIZE", "4".into())],
        reason: reason.clone(),
    };
    assert_eq!(
        error.to_string(),
        format!("cannot place this process in its job (PMI_RANK=4, PMI_SIZE=4): {reason}")
    );
    // Shard::new's figures, by argument name.
    let error = Shard::new(2, 2, 0, 1).unwrap_err();
    let MemError::Shard { reason, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        error.to_string(),
        format!(
            "cannot place this process in its job (rank=2, size=2, local_rank=0, local_size=1): \
             {reason}"
        )
    );
}

#[test]
fn chunk_shape_mismatch_message_says_where_the_runs_are() {
    let (mgr, _) = manager(GIB, GIB);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    let request = ArrayRequest::of::<f64>([5, 4, 1000])
        .chunk_axis(2)
        .total_runs(1000);
    let state = common::allocate_f64(&mgr, &solver, "state", request);
    let host = mgr
        .create_host_array::<f64>([5, 4, 1000], HostMemoryKind::Pageable, None, &solver)
        .unwrap();

    // A host array bound on the wrong axis: the message names the right one.
    let one_chunk = ChunkPlan::new(1000, 1, 1000).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &one_chunk).unwrap();
    let error = streamer.copy_in(&host, &state, 1, 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "host array bound to 'state' has shape [5, 4, 1000]: its axis 1 has 4 entries, but the \
         batch has 1000 runs; the runs lie on axis 2: bind it along axis 2"
    );

    // The device array holds the whole batch, but a chunk is 500 runs.
    let halves = ChunkPlan::new(1000, 2, 500).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &halves).unwrap();
    let error = streamer.copy_in(&host, &state, 2, 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "device array 'state' has shape [5, 4, 1000]: one chunk (500 runs along axis 2 of the host \
         array) has shape [5, 4, 500]; allocate it at the plan's chunked shape"
    );

    // A host array made for other dims than the device array's.
    let error = MemError::ChunkShapeMismatch {
        label: "state".into(),
        side: ArraySide::Host,
        found: vec![10, 3, 100],
        expected: vec![10, 4, 100],
        axis: 2,
        total_runs: 100,
        chunk_length: 25,
        runs_axis: None,
    };
    assert_eq!(
        error.to_string(),
        "host array bound to 'state' has shape [10, 3, 100]: the device array bound with it has \
         shape [10, 4, 25] (one chunk of 25 runs along axis 2), so the host array must have shape \
         [10, 4, 100]; make the host array from the dims the device array was allocated for"
    );
}
