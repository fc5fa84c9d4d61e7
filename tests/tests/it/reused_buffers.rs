//! An array placed in an earlier, larger buffer of its label is its own
//! size everywhere it is reported or passed: its byte size, its length, the
//! elements a kernel sees, copies, the statistics' bytes in use. The
//! buffer's capacity is what the instance holds (`allocated_bytes`, the
//! statistics' held figures).

use crate::common::{manager, queuing};
use std::time::Duration;

use cubie_mem::timeline::Activity;
use cubie_mem::{ArrayRequest, HostKernel, MemError, MemoryKind, ReleaseReason};

#[test]
fn a_small_array_in_a_reused_buffer_is_its_own_size() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<u32>([200]))])
        .unwrap();
    let large = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u32>("x")
        .unwrap();
    assert_eq!(large.capacity_bytes(), 800);
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<u32>([10]))])
        .unwrap();
    let x = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<u32>("x")
        .unwrap();
    assert_eq!(large.release_reason(), Some(ReleaseReason::Replaced));
    assert_eq!(sim.free_bytes(), (1 << 20) - 800, "the buffer was reused");

    assert_eq!((x.len(), x.shape(), x.nbytes()), (10, &[10][..], 40));
    assert_eq!(x.capacity_bytes(), 800);
    assert_eq!(
        solver.allocated_bytes(),
        800,
        "the instance holds the buffer"
    );
    let stats = mgr.memory_report();
    assert_eq!(stats.total.current_bytes, 40);
    assert_eq!(stats.total.device_bytes, 40);
    assert_eq!(stats.total.held_device_bytes, 800);
    assert_eq!(stats.instances[0].usage.current_bytes, 40);
    assert_eq!(stats.total.current_count, 1);

    // A kernel sees the array's ten elements, not the buffer's 200.
    let mut seen = 0;
    HostKernel::new("count", Duration::from_nanos(10))
        .writes(&x)
        .launch(|args| {
            let elements = args.write(&x)?;
            seen = elements.len();
            elements.iter_mut().for_each(|v| *v = 7);
            Ok::<_, MemError>(())
        })
        .unwrap();
    assert_eq!(seen, 10);
    // The timeline's kernel span counts the array's own bytes, as the
    // guide says.
    let kernel = sim.timeline().spans().last().unwrap().clone();
    assert_eq!((kernel.activity, kernel.bytes), (Activity::Kernel, 40));
    assert_eq!(x.to_vec().unwrap(), [7; 10]);
    assert!(matches!(
        x.copy_from_host(&[0u32; 200]),
        Err(MemError::LengthMismatch { .. } | MemError::OutOfBounds { .. })
    ));

    // Freed, it gives back what it counted.
    mgr.free(&solver, "x").unwrap();
    let stats = mgr.memory_report();
    assert_eq!(stats.total.current_bytes, 0);
    assert_eq!(stats.total.current_count, 0);
    assert_eq!(sim.free_bytes(), 1 << 20);
}

#[test]
fn a_smaller_pinned_array_in_a_reused_block_reports_its_own_bytes() {
    let (mgr, _sim) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    let request = |runs: usize| {
        ArrayRequest::of::<f64>([runs, 1000])
            .chunk_axis(1)
            .total_runs(1000)
            .memory(MemoryKind::Pinned)
    };
    mgr.queue_request(&solver, [("p", request(10))]).unwrap();
    mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!(solver.allocated_bytes(), 80_000);
    mgr.queue_request(&solver, [("p", request(1))]).unwrap();
    let p = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take_pinned::<f64>("p")
        .unwrap();
    assert_eq!((p.nbytes(), p.capacity_bytes()), (8_000, 80_000));
    assert_eq!(p.read().unwrap().len(), 1000);
    assert_eq!(solver.allocated_bytes(), 80_000, "the block is held");
    assert_eq!(mgr.memory_report().total.pinned_bytes, 8_000);
    assert_eq!(mgr.memory_report().total.held_pinned_bytes, 80_000);
}

#[test]
fn the_reuse_decision_uses_the_buffers_capacity() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let solver = mgr.register(queuing()).unwrap();
    // After holding 10 elements, the buffer still takes 150: its capacity,
    // not the 40 bytes of the array it last held, decides.
    for (len, free_after) in [(200, 800), (10, 800), (150, 800), (201, 804)] {
        mgr.queue_request(&solver, [("x", ArrayRequest::of::<u32>([len]))])
            .unwrap();
        let x = mgr
            .allocate_queue_for(&solver)
            .unwrap()
            .take::<u32>("x")
            .unwrap();
        assert_eq!(x.nbytes(), 4 * len as u64);
        assert_eq!(
            sim.free_bytes(),
            (1 << 20) - free_after,
            "[{len}] after the 800-byte buffer"
        );
        assert_eq!(sim.live_allocations(), 1);
    }
}
