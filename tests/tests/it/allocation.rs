//! `queue_request` and `allocate_queue`: participants, sizes, the planner's
//! rules as the manager applies them, notaries and remembered partitions.

use crate::common::{Counter, Inbox, capture_logs, manager, queuing, runs_request};
use cubie_mem::{
    ArrayRequest, Bytes, DType, LimitMode, ManagerConfig, MemError, MemoryKind, MemoryManager,
    Registration, ReleaseReason, SimBackend,
};

#[test]
fn an_instance_without_an_invalidate_hook_cannot_queue() {
    let (mgr, _) = manager(1 << 20, 1 << 20);
    let i = mgr.register(Registration::new()).unwrap();
    let err = mgr
        .queue_request(&i, [("x", ArrayRequest::of::<f32>([4]))])
        .unwrap_err();
    assert!(matches!(err, MemError::NoInvalidateHook { .. }), "{err}");
    assert!(!i.has_queued());
}

#[test]
fn invalid_requests_are_rejected_when_queued() {
    let (mgr, _) = manager(1 << 20, 1 << 20);
    let i = mgr.register(queuing()).unwrap();
    let err = mgr
        .queue_request(&i, [("x", ArrayRequest::of::<f32>([4]).total_runs(0))])
        .unwrap_err();
    assert!(
        matches!(err, MemError::InvalidRequest { ref label, .. } if label == "x"),
        "{err}"
    );
}

#[test]
fn nothing_queued_returns_without_calling_hooks() {
    let (mgr, _) = manager(1 << 20, 1 << 20);
    let inbox = Inbox::default();
    let i = mgr
        .register(queuing().on_allocation_ready(inbox.hook()))
        .unwrap();
    mgr.allocate_queue(&i).unwrap();
    assert!(inbox.take().is_empty());
}

#[test]
fn a_batch_that_fits_is_one_chunk_at_full_shape() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let inbox = Inbox::default();
    let i = mgr
        .register(queuing().on_allocation_ready(inbox.hook()))
        .unwrap();
    let state = ArrayRequest::new(DType::F64, [10, 3, 100]).total_runs(100);
    let init = ArrayRequest::of::<f32>([3]).unchunkable();
    mgr.queue_request(&i, [("state", state), ("init", init)])
        .unwrap();
    mgr.allocate_queue(&i).unwrap();
    let mut responses = inbox.take();
    assert_eq!(responses.len(), 1);
    let r = &mut responses[0];
    assert_eq!((r.chunks, r.chunk_length), (1, 100));
    assert_eq!(r.chunked_shapes["state"], [10, 3, 100]);
    assert_eq!(r.chunked_shapes["init"], [3]);
    let state = r.take::<f64>("state").unwrap();
    assert_eq!(state.len(), 3000);
    assert_eq!(sim.free_bytes(), (1 << 20) - 3000 * 8 - 12);
    assert!(!i.has_queued(), "served requests leave the queue");
}

#[test]
fn exact_integer_arithmetic_keeps_the_seventh_run() {
    // 58 runs of 8000 bytes (464000 chunkable bytes); 57142 free gives
    // alloc = 57142 - floor(0.02 * 57142) = 56000, so 58 * 56000 / 464000 = 7.
    let (mgr, _) = manager(1 << 30, 57_142);
    let i = mgr.register(queuing()).unwrap();
    mgr.queue_request(&i, [("state", runs_request(8000, 58))])
        .unwrap();
    let r = mgr.allocate_queue_for(&i).unwrap();
    assert_eq!(r.chunk_length, 7);
    assert_eq!(r.chunks, 9);
    assert_eq!(r.chunked_shapes["state"], [1000, 7]);
}

#[test]
fn chunked_shapes_replace_only_the_chunk_axis() {
    // 100 runs of 800 bytes (80000) + 1000 unchunkable bytes, 20000 free:
    // alloc = 19600, max_chunk = 100 * 18600 / 80000 = 23, chunks 5, length 20.
    let (mgr, _) = manager(1 << 30, 20_000);
    let i = mgr.register(queuing()).unwrap();
    let outer = ArrayRequest::new(DType::F64, [100, 5, 2])
        .chunk_axis(0)
        .total_runs(100);
    let middle = ArrayRequest::new(DType::U8, [10, 100, 10])
        .chunk_axis(1)
        .total_runs(100);
    let inner = ArrayRequest::new(DType::U64, [20, 100])
        .chunk_axis(1)
        .total_runs(100);
    let fixed = ArrayRequest::new(DType::U8, [1000]).unchunkable();
    let length_one = ArrayRequest::new(DType::I32, [4, 1]).chunk_axis(1);
    mgr.queue_request(
        &i,
        [
            ("outer", outer),
            ("middle", middle),
            ("inner", inner),
            ("fixed", fixed),
            ("one", length_one),
        ],
    )
    .unwrap();
    let r = mgr.allocate_queue_for(&i).unwrap();
    // C = 100 * (80 + 100 + 160) = 34000 ... plus 16 bytes of "one" (not chunkable).
    assert_eq!(r.plan().chunkable_bytes(), 34_000);
    assert_eq!(r.plan().unchunkable_bytes(), 1016);
    // alloc = 19600: R = 35016 >= alloc; max_chunk = 100 * 18584 / 34000 = 54
    assert_eq!((r.chunks, r.chunk_length), (2, 50));
    assert_eq!(r.chunked_shapes["outer"], [50, 5, 2]);
    assert_eq!(r.chunked_shapes["middle"], [10, 50, 10]);
    assert_eq!(r.chunked_shapes["inner"], [20, 50]);
    assert_eq!(r.chunked_shapes["fixed"], [1000]);
    assert_eq!(r.chunked_shapes["one"], [4, 1]);
}

#[test]
fn total_runs_is_the_largest_among_requests_and_must_match_chunk_axes() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let i = mgr.register(queuing()).unwrap();
    let a = ArrayRequest::new(DType::F32, [2, 50])
        .chunk_axis(1)
        .total_runs(50);
    let b = ArrayRequest::new(DType::F32, [2, 40]).chunk_axis(1);
    mgr.queue_request(&i, [("a", a.clone()), ("b", b)]).unwrap();
    let err = mgr.allocate_queue(&i).unwrap_err();
    assert!(
        matches!(err, MemError::RunCountMismatch { ref label, axis: 1, axis_length: 40, total_runs: 50 } if label == "b"),
        "{err}"
    );
    assert!(
        i.has_queued(),
        "a failed allocation leaves the queue as it was"
    );

    let b = ArrayRequest::new(DType::F32, [2, 50]).chunk_axis(1);
    mgr.queue_request(&i, [("a", a), ("b", b)]).unwrap();
    let r = mgr.allocate_queue_for(&i).unwrap();
    assert_eq!(r.plan().total_runs(), 50);
}

#[test]
fn pinned_requests_count_toward_the_budget() {
    // Device part alone (800 bytes) fits in alloc 980, with 800 pinned bytes it does not.
    let (mgr, sim) = manager(1 << 30, 1000);
    let i = mgr.register(queuing()).unwrap();
    let device = runs_request(8, 100);
    let pinned = runs_request(8, 100).memory(MemoryKind::Pinned);
    mgr.queue_request(&i, [("device", device), ("pinned", pinned)])
        .unwrap();
    let mut r = mgr.allocate_queue_for(&i).unwrap();
    // max_chunk = 100 * 980 / 1600 = 61 -> 2 chunks of 50
    assert_eq!((r.chunks, r.chunk_length), (2, 50));
    let pinned = r.take_pinned::<f64>("pinned").unwrap();
    assert_eq!(pinned.shape(), [1, 50]);
    assert_eq!(
        sim.free_bytes(),
        1000 - 400,
        "pinned memory does not use device memory"
    );
}

#[test]
fn participants_are_the_triggers_owner_in_the_triggers_group() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let inboxes: [Inbox; 4] = Default::default();
    let a = mgr
        .register(
            queuing()
                .stream_group("solvers")
                .on_allocation_ready(inboxes[0].hook()),
        )
        .unwrap();
    // Same owner and group as a: served with it.
    let partner = mgr
        .register(
            queuing()
                .owner(&a)
                .stream_group("solvers")
                .on_allocation_ready(inboxes[1].hook()),
        )
        .unwrap();
    // Same group, another owner: neither served nor notified.
    let stranger = mgr
        .register(
            queuing()
                .stream_group("solvers")
                .on_allocation_ready(inboxes[2].hook()),
        )
        .unwrap();
    // Same owner, another group: not served either.
    let elsewhere = mgr
        .register(
            queuing()
                .owner(&a)
                .stream_group("other")
                .on_allocation_ready(inboxes[3].hook()),
        )
        .unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    mgr.queue_request(&partner, [("y", runs_request(16, 10))])
        .unwrap();
    mgr.queue_request(&stranger, [("z", runs_request(8, 20))])
        .unwrap();
    mgr.queue_request(&elsewhere, [("w", runs_request(8, 10))])
        .unwrap();
    mgr.allocate_queue(&a).unwrap();
    let [ra, rp, rs, re] = inboxes.clone().map(|i| i.take());
    assert_eq!(ra.len(), 1);
    assert_eq!(rp.len(), 1);
    assert_eq!(ra[0].chunked_shapes["x"], [1, 10]);
    assert_eq!(rp[0].chunked_shapes["y"], [2, 10]);
    assert!(rs.is_empty(), "another owner's member is not notified");
    assert!(
        re.is_empty(),
        "the owner's member in another group is not served"
    );
    assert!(!a.has_queued() && !partner.has_queued());
    assert!(stranger.has_queued() && elsewhere.has_queued());
    assert_eq!(stranger.allocated_bytes(), 0);

    // The stranger's set waits for its own trigger, with its own run count.
    let r = mgr.allocate_queue_for(&stranger).unwrap();
    assert_eq!(r.chunked_shapes["z"], [1, 20]);
    assert_eq!(inboxes[2].take().len(), 1);
    assert!(inboxes[0].take().is_empty() && inboxes[1].take().is_empty());
}

#[test]
fn a_later_queue_call_replaces_the_earlier_set() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    mgr.queue_request(&a, [("y", runs_request(8, 10))]).unwrap();
    let r = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!(r.labels().collect::<Vec<_>>(), ["y"]);
}

#[test]
fn the_group_shares_one_plan_and_notaries_get_it_empty() {
    // 10 runs: a 8000 bytes/run + b 2000 bytes/run = 100000 bytes; 50000 free:
    // alloc 49000, max_chunk = 10 * 49000 / 100000 = 4 -> 3 chunks of 4.
    let (mgr, _) = manager(1 << 30, 50_000);
    let (ia, ib, ic) = (Inbox::default(), Inbox::default(), Inbox::default());
    let a = mgr
        .register(queuing().stream_group("g").on_allocation_ready(ia.hook()))
        .unwrap();
    let b = mgr
        .register(
            queuing()
                .owner(&a)
                .stream_group("g")
                .on_allocation_ready(ib.hook()),
        )
        .unwrap();
    let _notary = mgr
        .register(
            queuing()
                .owner(&a)
                .stream_group("g")
                .on_allocation_ready(ic.hook()),
        )
        .unwrap();
    mgr.queue_request(&a, [("x", runs_request(8000, 10))])
        .unwrap();
    mgr.queue_request(&b, [("y", runs_request(2000, 10))])
        .unwrap();
    mgr.allocate_queue(&b).unwrap();
    let (ra, rb, rc) = (ia.take(), ib.take(), ic.take());
    for r in [&ra[0], &rb[0], &rc[0]] {
        assert_eq!((r.chunks, r.chunk_length), (3, 4));
    }
    assert_eq!(ra[0].chunked_shapes["x"], [1000, 4]);
    assert_eq!(rb[0].chunked_shapes["y"], [250, 4]);
    assert!(rc[0].is_empty() && rc[0].chunked_shapes.is_empty());
}

#[test]
fn a_notary_holding_arrays_keeps_its_partition() {
    // First batch: 10 runs * 8000 = 80000 bytes, 50000 free -> alloc 49000,
    // max_chunk 6 -> 2 chunks of 5. The notary keeps arrays laid out for (5, 2).
    let (mgr, sim) = manager(1 << 30, 50_000);
    let holder = mgr.register(queuing().stream_group("g")).unwrap();
    let other = mgr
        .register(queuing().owner(&holder).stream_group("g"))
        .unwrap();
    mgr.queue_request(&holder, [("x", runs_request(8000, 10))])
        .unwrap();
    let r = mgr.allocate_queue_for(&holder).unwrap();
    assert_eq!((r.chunk_length, r.chunks), (5, 2));
    assert_eq!(sim.free_bytes(), 10_000);

    // A small batch of the same 10 runs would fit whole, but the holder's
    // partition still covers it, so it is reused.
    mgr.queue_request(&other, [("y", runs_request(8, 10))])
        .unwrap();
    let r = mgr.allocate_queue_for(&other).unwrap();
    assert_eq!((r.chunk_length, r.chunks), (5, 2));
    assert_eq!(r.chunked_shapes["y"], [1, 5]);

    // A batch of 7 runs is not covered by (5, 2): ceil(7 / 2) = 4.
    mgr.queue_request(&other, [("y", runs_request(8, 7))])
        .unwrap();
    let r = mgr.allocate_queue_for(&other).unwrap();
    assert_eq!((r.chunk_length, r.chunks), (7, 1));
}

#[test]
fn memory_the_participants_hold_counts_as_free_and_is_replaced() {
    let (mgr, sim) = manager(1 << 30, 1000);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 75))]).unwrap();
    let mut first = mgr.allocate_queue_for(&a).unwrap();
    let old = first.take::<f64>("x").unwrap();
    assert_eq!(sim.free_bytes(), 400);
    // 600 bytes again with only 400 free: the old 600 are replaced, Fe = 1000.
    mgr.queue_request(&a, [("x", runs_request(8, 75))]).unwrap();
    let mut second = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!(second.chunks, 1);
    let new = second.take::<f64>("x").unwrap();
    old.copy_from_host(&[5.0; 75]).unwrap();
    assert!(
        old.is_valid(),
        "the same type and shape keeps the array and its handles"
    );
    assert_eq!(new.to_vec().unwrap(), vec![5.0; 75]);
    assert_eq!(sim.free_bytes(), 400);
    assert_eq!(
        sim.live_allocations(),
        1,
        "the buffer was kept, not reallocated"
    );
    assert_eq!(a.allocated_bytes(), 600);

    // Another shape in the same buffer is a new array: old handles report it.
    mgr.queue_request(&a, [("x", runs_request(8, 70))]).unwrap();
    let third = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!(third.chunked_shapes["x"], [1, 70]);
    assert_eq!(old.release_reason(), Some(ReleaseReason::Replaced));
    assert_eq!(sim.live_allocations(), 1);
}

#[test]
fn a_smaller_replacement_reuses_and_a_larger_one_reallocates() {
    let (mgr, sim) = manager(1 << 30, 10_000);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 100))])
        .unwrap();
    mgr.allocate_queue(&a).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 50))]).unwrap();
    mgr.allocate_queue(&a).unwrap();
    assert_eq!(
        sim.free_bytes(),
        10_000 - 800,
        "the 800-byte buffer is reused for 400 bytes"
    );
    mgr.queue_request(&a, [("x", runs_request(8, 200))])
        .unwrap();
    mgr.allocate_queue(&a).unwrap();
    assert_eq!(sim.free_bytes(), 10_000 - 1600);
    assert_eq!(sim.live_allocations(), 1);
}

#[test]
fn the_granule_is_withheld_and_below_it_nothing_is_allocated() {
    let sim = SimBackend::new(1 << 30).with_free(10 << 20);
    let mgr = MemoryManager::new(sim); // default granule: 32 MiB
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    let err = mgr.allocate_queue(&a).unwrap_err();
    assert!(
        matches!(
            err,
            MemError::BelowGranule {
                free: Bytes(10_485_760),
                granule: Bytes(33_554_432),
                ..
            }
        ),
        "{err}"
    );

    let sim = SimBackend::new(1 << 30).with_free(100 << 20);
    let mgr = MemoryManager::with_config(
        sim,
        ManagerConfig {
            allocation_granule_bytes: 50 << 20,
            ..Default::default()
        },
    );
    let a = mgr.register(queuing()).unwrap();
    // 60 MiB of 100 MiB free: the 50 MiB granule leaves 50 MiB, so two chunks.
    mgr.queue_request(&a, [("x", runs_request(6 << 20, 10))])
        .unwrap();
    let r = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!(r.plan().allocatable(), 50 << 20);
    assert_eq!((r.chunks, r.chunk_length), (2, 5));
}

#[test]
fn a_request_unchunkable_only_by_its_axis_is_named_with_where_its_runs_lie() {
    let (mgr, _) = manager(1 << 30, 1000);
    let a = mgr.register(queuing()).unwrap();
    // 2-D, 100 runs, left on the default axis 2 (cubie's 3-D layout).
    let state = ArrayRequest::of::<u8>([20, 100]).total_runs(100);
    mgr.queue_request(&a, [("state", state)]).unwrap();
    let error = mgr.allocate_queue(&a).unwrap_err();
    assert!(
        matches!(&error, MemError::AllUnchunkable { arrays, .. }
            if arrays.len() == 1 && arrays[0].label == "state" && arrays[0].shape == [20, 100]
                && arrays[0].bytes == Bytes(2000) && arrays[0].reason
                == cubie_mem::UnchunkableReason::AxisBeyondShape { axis: 2, rank: 2, runs_axis: Some(1) }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("set ArrayRequest::chunk_axis(1)"),
        "{error}"
    );
}

#[test]
fn planner_errors_reach_the_caller_with_figures() {
    let (mgr, _) = manager(1 << 30, 1000);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", ArrayRequest::of::<u8>([2000]).unchunkable())])
        .unwrap();
    let err = mgr.allocate_queue(&a).unwrap_err();
    assert!(
        matches!(
            err,
            MemError::AllUnchunkable {
                requested: Bytes(2000),
                available: Bytes(980),
                ..
            }
        ),
        "{err}"
    );

    let fixed = ArrayRequest::of::<u8>([990]).unchunkable();
    mgr.queue_request(&a, [("fixed", fixed), ("x", runs_request(8, 10))])
        .unwrap();
    let err = mgr.allocate_queue(&a).unwrap_err();
    assert!(matches!(err, MemError::UnchunkableTooLarge { .. }), "{err}");

    mgr.queue_request(&a, [("x", runs_request(2000, 10))])
        .unwrap();
    let err = mgr.allocate_queue(&a).unwrap_err();
    assert!(
        matches!(
            err,
            MemError::SingleRunTooLarge {
                per_run: Bytes(2000),
                depth: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(a.has_queued());
}

#[test]
fn a_request_over_twenty_times_free_memory_warns() {
    let (mgr, _) = manager(1 << 30, 1000);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 3000))])
        .unwrap();
    let (result, logs) = capture_logs(|| mgr.allocate_queue_for(&a));
    let r = result.unwrap();
    assert!(r.chunks > 20);
    assert!(logs.contains("WARN") && logs.contains("20x"), "{logs}");
}

#[test]
fn active_mode_limits_a_group_to_its_caps() {
    // Total 10 MB, a holds 10% (cap 1 MB); 10 MB free. 2 MB of runs:
    // A = min(Fe, H) = 1_000_000, alloc 980_000, max_chunk = 1000 * 980000 / 2000000 = 490.
    let (mgr, _) = manager(10_000_000, 10_000_000);
    mgr.set_limit_mode(LimitMode::Active);
    let a = mgr.register(queuing().proportion(0.1)).unwrap();
    assert_eq!(mgr.available_memory(&a).unwrap(), 1_000_000);
    mgr.queue_request(&a, [("x", runs_request(2000, 1000))])
        .unwrap();
    let r = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!((r.chunks, r.chunk_length), (3, 334));
    assert_eq!(mgr.available_memory(&a).unwrap(), 1_000_000 - 668_000);

    mgr.set_limit_mode(LimitMode::Passive);
    assert_eq!(mgr.available_memory(&a).unwrap(), 10_000_000 - 668_000);
}

#[test]
fn active_mode_warns_past_95_percent_of_caps() {
    let (mgr, _) = manager(10_000_000, 10_000_000);
    mgr.set_limit_mode(LimitMode::Active);
    let a = mgr.register(queuing().proportion(0.1)).unwrap();
    // 960 runs of 1000 bytes = 960000 < alloc 980000: one chunk, 96% of the cap.
    mgr.queue_request(&a, [("x", runs_request(1000, 960))])
        .unwrap();
    let (result, logs) = capture_logs(|| mgr.allocate_queue(&a));
    result.unwrap();
    assert!(logs.contains("over 95% of its caps"), "{logs}");
}

#[test]
fn responses_check_labels_and_types() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    let pinned = ArrayRequest::of::<i32>([10])
        .memory(MemoryKind::Pinned)
        .unchunkable();
    mgr.queue_request(&a, [("state", runs_request(8, 10)), ("status", pinned)])
        .unwrap();
    let mut r = mgr.allocate_queue_for(&a).unwrap();
    let err = r.take::<f32>("state").unwrap_err();
    assert!(
        matches!(&err, MemError::WrongArrayType { label, requested, found }
            if label == "state" && requested == "DeviceArray<f32>" && found == "DeviceArray<f64>"),
        "{err}"
    );
    let err = r.take::<i32>("status").unwrap_err();
    assert!(
        matches!(&err, MemError::WrongArrayType { label, requested, found }
            if label == "status" && requested == "DeviceArray<i32>" && found == "PinnedArray<i32>"),
        "{err}"
    );
    let err = r.take::<f64>("nope").unwrap_err();
    assert!(
        matches!(&err, MemError::UnknownLabel { label, available }
            if label == "nope" && available == "state, status"),
        "{err}"
    );
    r.take::<f64>("state").unwrap();
    r.take_pinned::<i32>("status").unwrap();
    assert!(r.is_empty());
}

#[test]
fn hooks_may_call_back_into_the_manager() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let seen = Counter::default();
    let mut bump = seen.hook();
    let inner = mgr.clone();
    let a = mgr
        .register(queuing().on_allocation_ready(move |mut r| {
            let x = r.take::<f64>("x").unwrap();
            // Re-entering the manager from a hook must not deadlock.
            assert_eq!(inner.memory_report().total.current_count, 1);
            assert!(x.is_valid());
            bump();
        }))
        .unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    mgr.allocate_queue(&a).unwrap();
    assert_eq!(seen.get(), 1);
}
