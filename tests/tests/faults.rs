//! Fault injection: every allocation inside one `allocate_queue` made to fail
//! in turn. The error is clear, nothing stays allocated, the queue is intact,
//! and the same call succeeds once the fault is lifted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Inbox, manager, queuing, runs_request};
use cubie_mem::{ArrayRequest, MemError, MemoryKind};

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
                let text = err.to_string();
                assert!(
                    text.contains(label.as_str()) && text.contains("free"),
                    "{text}"
                );
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
            mgr.has_queued(&a) && mgr.has_queued(&b),
            "the queue is left as it was"
        );
        assert_eq!(mgr.stats().total.current_count, 0);

        sim.set_fail_allocations_after(None);
        mgr.allocate_queue(&a).unwrap();
        assert_eq!(inbox.take().len(), 2);
        assert_eq!(
            sim.live_allocations(),
            ALLOCATIONS_PER_CALL - 1,
            "one of them is pinned"
        );
        assert_eq!(mgr.stats().total.current_count, ALLOCATIONS_PER_CALL as u64);
    }
}

#[test]
fn a_failure_while_replacing_leaves_no_leak() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10)), ("y", runs_request(8, 10))])
        .unwrap();
    mgr.allocate_queue(&a).unwrap();
    // Larger arrays cannot reuse the old buffers; the second allocation fails.
    mgr.queue_request(
        &a,
        [("x", runs_request(16, 10)), ("y", runs_request(16, 10))],
    )
    .unwrap();
    sim.set_fail_allocations_after(Some(1));
    assert!(mgr.allocate_queue(&a).is_err());
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(sim.free_bytes(), 1 << 20);
    assert_eq!(mgr.allocated_bytes(&a), 0);
    sim.set_fail_allocations_after(None);
    mgr.allocate_queue(&a).unwrap();
    assert_eq!(mgr.allocated_bytes(&a), 320);
}
