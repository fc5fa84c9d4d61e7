//! Fault injection: every allocation inside one `allocate_queue` made to fail
//! in turn. The error is clear, nothing stays allocated, the queue is intact,
//! and the same call succeeds once the fault is lifted.

use crate::common;
use crate::common::{Inbox, manager, queuing, runs_request};
use cubie_mem::{ArrayRequest, Bytes, MemError, MemoryKind};

/// Two participants, five arrays (device and pinned) in one group.
const ALLOCATIONS_PER_CALL: usize = 5;

#[test]
fn every_allocation_of_a_call_can_fail_cleanly() {
    for failing in 0..ALLOCATIONS_PER_CALL {
        let (mgr, sim) = manager(1 << 30, 1 << 20);
        let inbox = Inbox::default();
        let a = mgr
            .register(
                queuing()
                    .stream_group("g")
                    .on_allocation_ready(inbox.hook()),
            )
            .unwrap();
        let b = mgr
            .register(
                queuing()
                    .owner(&a)
                    .stream_group("g")
                    .on_allocation_ready(inbox.hook()),
            )
            .unwrap();
        mgr.queue_request(
            &a,
            [
                ("state", runs_request(64, 100)),
                (
                    "status",
                    ArrayRequest::of::<i32>([100])
                        .chunk_axis(0)
                        .total_runs(100)
                        .memory(MemoryKind::Pinned),
                ),
                ("init", ArrayRequest::of::<f64>([8]).unchunkable()),
            ],
        )
        .unwrap();
        mgr.queue_request(
            &b,
            [
                ("obs", runs_request(16, 100)),
                ("params", runs_request(8, 100)),
            ],
        )
        .unwrap();
        let free_before = sim.free_bytes();

        sim.set_fail_allocations_after(Some(failing));
        let err = mgr.allocate_queue(&a).unwrap_err();
        match &err {
            MemError::OutOfMemory {
                label, requested, ..
            } => {
                assert!(!label.is_empty(), "the error names the array");
                assert!(requested.0 > 0);
            }
            other => panic!("allocation {failing}: expected out of memory, got {other}"),
        }
        assert_eq!(
            sim.free_bytes(),
            free_before,
            "allocation {failing}: memory leaked"
        );
        assert_eq!(sim.live_allocations(), 0);
        assert!(inbox.take().is_empty(), "no hook runs on failure");
        assert!(
            a.has_queued() && b.has_queued(),
            "the queue is left as it was"
        );
        assert_eq!(mgr.memory_report().total.current_count, 0);

        sim.set_fail_allocations_after(None);
        mgr.allocate_queue(&a).unwrap();
        assert_eq!(inbox.take().len(), 2);
        assert_eq!(
            sim.live_allocations(),
            ALLOCATIONS_PER_CALL - 1,
            "one of them is pinned"
        );
        assert_eq!(
            mgr.memory_report().total.current_count,
            ALLOCATIONS_PER_CALL as u64
        );
    }
}

/// Queues `x` and `y` for `a`, allocates them, writes `x`, and returns the handles.
fn hold_two(
    mgr: &cubie_mem::MemoryManager,
    a: &cubie_mem::Instance,
    bytes_per_run: usize,
) -> (cubie_mem::DeviceArray<f64>, cubie_mem::DeviceArray<f64>) {
    mgr.queue_request(
        a,
        [
            ("x", runs_request(bytes_per_run, 10)),
            ("y", runs_request(bytes_per_run, 10)),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(a).unwrap();
    let x = response.take::<f64>("x").unwrap();
    let y = response.take::<f64>("y").unwrap();
    x.copy_from_host(&vec![7.0; x.len()]).unwrap();
    (x, y)
}

#[test]
fn a_failed_call_leaves_a_reused_buffer_intact() {
    // x shrinks (its buffer would be reused in place), y grows (new memory),
    // and y's allocation fails: x must keep its memory, data and handles.
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let invalidated = common::Counter::default();
    let a = mgr
        .register(cubie_mem::Registration::new().on_invalidate(invalidated.hook()))
        .unwrap();
    let (x, y) = hold_two(&mgr, &a, 16);
    let free_before = sim.free_bytes();
    mgr.queue_request(
        &a,
        [("x", runs_request(8, 10)), ("y", runs_request(32, 10))],
    )
    .unwrap();
    sim.set_fail_allocations_after(Some(0));
    assert!(mgr.allocate_queue(&a).unwrap_err().is_out_of_memory());

    assert_eq!(
        x.release_reason(),
        None,
        "x is not replaced by a failed call"
    );
    assert_eq!(y.release_reason(), None);
    assert_eq!(x.to_vec().unwrap(), vec![7.0; 20]);
    assert_eq!(x.shape(), [2, 10]);
    assert_eq!(sim.free_bytes(), free_before);
    assert_eq!(sim.live_allocations(), 2);
    assert_eq!(a.allocated_bytes(), 320);
    assert_eq!(invalidated.get(), 0);
    assert!(a.has_queued());
    let stats = mgr.memory_report().total;
    assert_eq!((stats.current_count, stats.current_bytes), (2, 320));

    // Once the fault is lifted the same queue is served: x reused, y new.
    sim.set_fail_allocations_after(None);
    let mut response = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!(response.chunked_shapes["x"], [1, 10]);
    assert_eq!(response.chunked_shapes["y"], [4, 10]);
    assert_eq!(x.release_reason(), Some(cubie_mem::ReleaseReason::Replaced));
    assert_eq!(y.release_reason(), Some(cubie_mem::ReleaseReason::Replaced));
    assert_eq!(sim.live_allocations(), 2);
    let x = response.take::<f64>("x").unwrap();
    assert_eq!(
        (x.nbytes(), x.capacity_bytes()),
        (80, 160),
        "x keeps its 160-byte buffer"
    );
    assert_eq!(a.allocated_bytes(), 160 + 320, "a holds x's whole buffer");
}

#[test]
fn a_failure_while_growing_leaves_the_old_arrays_and_no_leak() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    let (x, y) = hold_two(&mgr, &a, 8);
    // Larger arrays are allocated beside the old ones; the second fails.
    mgr.queue_request(
        &a,
        [("x", runs_request(16, 10)), ("y", runs_request(16, 10))],
    )
    .unwrap();
    sim.set_fail_allocations_after(Some(1));
    assert!(mgr.allocate_queue(&a).is_err());
    assert_eq!(sim.live_allocations(), 2, "the new x was freed again");
    assert_eq!(sim.free_bytes(), (1 << 20) - 160);
    assert_eq!(a.allocated_bytes(), 160);
    assert!(x.is_valid() && y.is_valid());
    assert_eq!(x.to_vec().unwrap(), vec![7.0; 10]);
    sim.set_fail_allocations_after(None);
    mgr.allocate_queue(&a).unwrap();
    assert_eq!(a.allocated_bytes(), 320);
    assert_eq!(sim.live_allocations(), 2);
    assert!(!x.is_valid());
}

#[test]
fn out_of_memory_counts_the_bytes_idle_owners_hold() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let idle = mgr.register(queuing().stream_group("idle")).unwrap();
    let _cache = common::allocate_f64(&mgr, &idle, "cache", runs_request(64, 10));
    let busy = mgr.register(queuing().stream_group("busy")).unwrap();
    let _scratch = common::allocate_f64(&mgr, &busy, "scratch", runs_request(8, 10));
    let _work = mgr.begin_work(&busy).unwrap();
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    mgr.queue_request(&a, [("state", runs_request(16, 10))])
        .unwrap();
    // The batch fits the free memory, so nothing is evicted; the device
    // refuses the allocation all the same.
    sim.set_fail_allocations_after(Some(0));
    let err = mgr.allocate_queue(&a).unwrap_err();
    match err {
        MemError::OutOfMemory {
            label,
            requested,
            idle_held,
            ..
        } => {
            assert_eq!(label, "state");
            assert_eq!(requested, Bytes(160));
            assert_eq!(
                idle_held,
                Bytes(640),
                "the idle cache's bytes, not the busy owner's"
            );
        }
        other => panic!("expected out of memory, got {other}"),
    }
}
