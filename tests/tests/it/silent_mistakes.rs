//! Mistakes a new user makes that used to pass silently or blame the wrong
//! thing: a holder that no `allocate_queue` serves, a label given twice in
//! one call, an array of runs left whole by its axis, unchunkable arrays
//! that do not fit, a host array made for other dims or transposed, and
//! the guide's types at the crate root.

use crate::common::{Inbox, allocate_f64, capture_logs, manager, queuing, runs_request};
use cubie_mem::report::PendingRequests;
use cubie_mem::{
    ArrayRequest, ArraySide, Bytes, ChunkPlan, HostMemoryKind, MemError, Registration,
    UnchunkableArray, UnchunkableReason,
};

#[test]
fn a_holder_without_the_owner_is_warned_about_and_listed_as_pending() {
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let solver = mgr
        .register(queuing().name("solver").stream_group("solver"))
        .unwrap();
    let inputs_inbox = Inbox::default();
    let inputs = mgr
        .register(
            queuing()
                .name("inputs")
                .stream_group("solver")
                .owner(&solver)
                .on_allocation_ready(inputs_inbox.hook()),
        )
        .unwrap();
    let outputs_inbox = Inbox::default();
    // The mistake: no `.owner(&solver)`.
    let outputs = mgr
        .register(
            queuing()
                .name("outputs")
                .stream_group("solver")
                .on_allocation_ready(outputs_inbox.hook()),
        )
        .unwrap();
    mgr.queue_request(&inputs, [("initial", runs_request(16, 100))])
        .unwrap();
    mgr.queue_request(
        &outputs,
        [
            ("state", runs_request(32, 100)),
            ("status", runs_request(8, 100)),
        ],
    )
    .unwrap();

    let (result, logs) = capture_logs(|| mgr.allocate_queue(&solver));
    result.unwrap();
    assert_eq!(inputs_inbox.take().len(), 1);
    assert!(outputs_inbox.take().is_empty());
    assert!(logs.contains("WARN"), "{logs}");
    assert!(
        logs.contains("'outputs'")
            && logs.contains("[state, status]")
            && logs.contains(".owner(..)"),
        "{logs}"
    );
    let pending = mgr.memory_report().pending;
    assert_eq!(pending.len(), 1);
    let PendingRequests {
        instance,
        group,
        labels,
        passed_over,
        ..
    } = &pending[0];
    assert!(instance.contains("'outputs'"), "{instance}");
    assert_eq!(group, "solver");
    assert_eq!(labels, &["state", "status"]);
    assert_eq!(*passed_over, 1);

    // A second call passes it over again, without warning again.
    let (_, logs) = capture_logs(|| mgr.allocate_queue(&solver).unwrap());
    assert!(!logs.contains("WARN"), "{logs}");
    assert_eq!(mgr.memory_report().pending[0].passed_over, 2);

    // Its own owner's call serves it; nothing waits any more.
    mgr.allocate_queue(&outputs).unwrap();
    assert_eq!(outputs_inbox.take().len(), 1);
    assert!(mgr.memory_report().pending.is_empty());
}

#[test]
fn an_instance_dropped_with_requests_never_served_is_warned_about() {
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let stray = mgr.register(queuing().name("stray")).unwrap();
    mgr.queue_request(&stray, [("state", runs_request(8, 10))])
        .unwrap();
    let (_, logs) = capture_logs(|| drop(stray));
    assert!(
        logs.contains("WARN") && logs.contains("'stray'") && logs.contains("never served"),
        "{logs}"
    );
    assert!(mgr.memory_report().pending.is_empty());
}

#[test]
fn a_label_given_twice_in_one_call_is_refused_and_changes_nothing() {
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    mgr.queue_request(&solver, [("kept", runs_request(8, 10))])
        .unwrap();
    let error = mgr
        .queue_request(
            &solver,
            [
                ("state", ArrayRequest::of::<f64>([4, 10]).chunk_axis(1)),
                ("status", ArrayRequest::of::<i32>([10]).chunk_axis(0)),
                ("state", ArrayRequest::of::<i32>([10]).chunk_axis(0)),
            ],
        )
        .unwrap_err();
    assert_eq!(
        error,
        MemError::DuplicateLabel {
            label: "state".into(),
            instance: format!("'solver' ({})", solver.id()),
        }
    );
    // The earlier queue is as it was.
    let pending = mgr.memory_report().pending;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].labels, ["kept"]);
}

#[test]
fn a_request_of_runs_left_whole_beside_chunked_arrays_is_refused() {
    // 100 runs: a 2-D array of the runs left on the default axis 2 beside
    // a chunkable one. cubie allocates it whole, beside chunks of 25 runs.
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing().name("solver")).unwrap();
    let initial = ArrayRequest::of::<f64>([60, 100]).total_runs(100);
    mgr.queue_request(
        &solver,
        [
            ("per_run", runs_request(8, 100)),
            ("initial", initial.clone()),
        ],
    )
    .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert_eq!(
        error,
        MemError::RunsLeftWhole(UnchunkableArray {
            label: "initial".into(),
            shape: vec![60, 100],
            bytes: Bytes(48_000),
            reason: UnchunkableReason::AxisBeyondShape {
                axis: 2,
                rank: 2,
                runs_axis: Some(1),
            },
        })
    );
    let message = error.to_string();
    assert!(
        message.contains("set ArrayRequest::chunk_axis(1)")
            && message.contains("ArrayRequest::unchunkable()"),
        "{message}"
    );
    // The failed call left the queue as it was.
    assert_eq!(mgr.memory_report().pending[0].labels.len(), 2);

    // Alone, it is the whole batch and allocated whole, as in cubie; beside
    // chunked arrays, flagged unchunkable or on the runs' axis, it is meant.
    for requests in [
        vec![("initial", initial.clone())],
        vec![
            ("per_run", runs_request(8, 100)),
            ("initial", initial.clone().unchunkable()),
        ],
        vec![
            ("per_run", runs_request(8, 100)),
            ("initial", initial.clone().chunk_axis(1)),
        ],
    ] {
        mgr.queue_request(&solver, requests).unwrap();
        mgr.allocate_queue(&solver).unwrap();
    }
}

#[test]
fn unchunkable_arrays_that_do_not_fit_are_named_with_their_reasons() {
    // 100 runs: a flagged array and a scalar beside a chunkable one.
    let (mgr, _) = manager(1 << 30, 100_000);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            ("per_run", runs_request(8, 100)),
            (
                "coefficients",
                ArrayRequest::of::<f64>([14_000]).unchunkable(),
            ),
            ("scalar", ArrayRequest::of::<f64>([])),
        ],
    )
    .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    let MemError::UnchunkableTooLarge { arrays, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(
        arrays,
        &[
            UnchunkableArray {
                label: "coefficients".into(),
                shape: vec![14_000],
                bytes: Bytes(112_000),
                reason: UnchunkableReason::Flagged,
            },
            UnchunkableArray {
                label: "scalar".into(),
                shape: vec![],
                bytes: Bytes(8),
                reason: UnchunkableReason::EmptyShape,
            },
        ]
    );
    // The failed call left the queue as it was.
    assert_eq!(mgr.memory_report().pending[0].labels.len(), 3);

    // All unchunkable: the same list, with no chunk axis and one run named.
    mgr.queue_request(
        &solver,
        [
            ("whole", ArrayRequest::of::<u8>([200_000]).chunk_axis(None)),
            ("one", ArrayRequest::of::<u8>([4, 1])),
        ],
    )
    .unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    let MemError::AllUnchunkable { arrays, .. } = &error else {
        panic!("{error}");
    };
    let reasons: Vec<_> = arrays
        .iter()
        .map(|a| (a.label.as_str(), a.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("whole", UnchunkableReason::NoChunkAxis),
            (
                "one",
                UnchunkableReason::AxisBeyondShape {
                    axis: 2,
                    rank: 2,
                    runs_axis: None
                }
            ),
        ]
    );
}

#[test]
fn a_host_array_made_for_other_dims_is_named_as_the_host_side() {
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let plan = ChunkPlan::new(100, 4, 25).unwrap();
    // The device array holds one chunk of [10, 4, runs]; the host array
    // was made for 3 states.
    mgr.queue_request(
        &solver,
        [("state", ArrayRequest::of::<f32>([10, 4, 25]).unchunkable())],
    )
    .unwrap();
    let device = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f32>("state")
        .unwrap();
    let host = mgr
        .create_host_array::<f32>([10, 3, 100], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    let error = streamer.copy_in(&host, &device, 2, 0).unwrap_err();
    assert_eq!(
        error,
        MemError::ChunkShapeMismatch {
            label: "state".into(),
            side: ArraySide::Host,
            found: vec![10, 3, 100],
            expected: vec![10, 4, 100],
            axis: 2,
            total_runs: 100,
            chunk_length: 25,
            runs_axis: None,
        }
    );

    // A device array of another chunk length is still the device's fault.
    mgr.queue_request(
        &solver,
        [("other", ArrayRequest::of::<f32>([10, 4, 20]).unchunkable())],
    )
    .unwrap();
    let other = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f32>("other")
        .unwrap();
    let host = mgr
        .create_host_array::<f32>([10, 4, 100], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let error = streamer.copy_in(&host, &other, 2, 0).unwrap_err();
    assert!(
        matches!(&error, MemError::ChunkShapeMismatch { side: ArraySide::Device, found, expected, .. }
            if found == &[10, 4, 20] && expected == &[10, 4, 25]),
        "{error}"
    );
}

#[test]
fn a_transposed_host_array_is_named_whichever_axis_it_is_bound_along() {
    let (mgr, _) = manager(1 << 30, 1 << 30);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let plan = ChunkPlan::new(100, 4, 25).unwrap();
    // One chunk of [3 species, runs], chunked along axis 1.
    let request = ArrayRequest::of::<f64>([3, 25])
        .chunk_axis(1)
        .total_runs(25);
    let device = allocate_f64(&mgr, &solver, "traj", request);
    // The mistake: the host array is [runs, 3].
    let host = mgr
        .create_host_array::<f64>([100, 3], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    let transposed = MemError::ChunkShapeMismatch {
        label: "traj".into(),
        side: ArraySide::Host,
        found: vec![100, 3],
        expected: vec![3, 100],
        axis: 1,
        total_runs: 100,
        chunk_length: 25,
        runs_axis: None,
    };
    // Along the device array's own axis, and along the axis the host
    // array's runs lie on: the same error, never "bind along the other".
    for axis in [1, 0] {
        let error = streamer.copy_in(&host, &device, axis, 0).unwrap_err();
        assert_eq!(error, transposed, "bound along axis {axis}");
    }
    assert_eq!(
        transposed.to_string(),
        "host array bound to 'traj' has shape [100, 3]: the transpose of the [3, 100] it needs, \
         whose runs lie on axis 1; make the host array with shape [3, 100] (transpose it) and \
         bind along axis 1"
    );

    // A host array of the right shape bound along its runs is no transpose.
    let right = mgr
        .create_host_array::<f64>([3, 100], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    streamer.copy_in(&right, &device, 1, 0).unwrap();
}

#[test]
fn the_guides_types_are_at_the_crate_root() {
    // Throughput's variants' types sit beside it, and the planner's limit
    // and the split's reasons beside the types that return them.
    let work = cubie_mem::Workload::default();
    let _ = cubie_mem::Throughput::Modelled(work);
    let _ = cubie_mem::Throughput::Weights(vec![1]);
    let plan = ChunkPlan::new(10, 1, 10).unwrap();
    let _: Option<cubie_mem::plan::Limit> = plan.limited_by();
    let _: Option<&cubie_mem::Skip> = None;
}
