//! Behaviours where cubie-mem follows cubie to the figure: an owner's
//! members move between stream groups together, a notary's remembered
//! partition is reused before anything is planned, a chunk axis of length 0
//! is a run-count mismatch, and manual proportions are summed in the order
//! cubie sums them. `X(r)` is `f64 [r, 1000]`, chunk axis 1, 1,000 runs.

use crate::common::{manager, queuing};
use cubie_mem::backend::Backend;
use cubie_mem::{ArrayRequest, MemError, MemoryManager, Registration, SimBackend};

const GIB: u64 = 1 << 30;

fn x(rows: usize) -> ArrayRequest {
    ArrayRequest::of::<f64>([rows, 1000])
        .chunk_axis(1)
        .total_runs(1000)
}

#[test]
fn moving_an_instance_moves_its_owners_members_and_partition() {
    let (mgr, _) = manager(8 * GIB, 4_008_000);
    let a = mgr.register(queuing().stream_group("g1")).unwrap();
    let b = mgr
        .register(queuing().stream_group("g1").owner(&a))
        .unwrap();
    let other = mgr.register(queuing().stream_group("g1")).unwrap();
    mgr.queue_request(&b, [("p", x(1))]).unwrap();
    assert_eq!(mgr.allocate_queue_for(&b).unwrap().chunks, 1);

    mgr.change_stream_group(&b, "g2").unwrap();
    assert_eq!(mgr.stream_group(&a), "g2", "a moved with b");
    assert_eq!(mgr.stream_group(&b), "g2");
    assert_eq!(mgr.stream_group(&other), "g1", "another owner stays");
    assert_eq!(mgr.stream(&a).unwrap().id(), mgr.stream(&b).unwrap().id());

    // The partition b's p is laid out for came along: a's batch of exactly
    // the free 4,000,000 bytes reuses it (one chunk) in g2.
    mgr.queue_request(&a, [("x", x(500))]).unwrap();
    let response = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!((response.chunks, response.chunk_length), (1, 1000));
}

#[test]
fn a_notarys_partition_is_reused_even_where_planning_would_chunk() {
    // b's p is laid out for one chunk of 1,000 runs; then 4,000,000 bytes
    // are free and a asks for X(500), 4,000,000 bytes: planned, it would
    // take 2 chunks of 500, and b's p would no longer fit the batch.
    let (mgr, sim) = manager(8 * GIB, 4_008_000);
    let a = mgr.register(queuing()).unwrap();
    let b = mgr.register(queuing().owner(&a)).unwrap();
    mgr.queue_request(&b, [("p", x(1))]).unwrap();
    mgr.allocate_queue_for(&b).unwrap();
    assert_eq!(sim.free_bytes(), 4_000_000);
    mgr.queue_request(&a, [("x", x(500))]).unwrap();
    let mut response = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!((response.chunks, response.chunk_length), (1, 1000));
    assert_eq!(response.take::<f64>("x").unwrap().nbytes(), 4_000_000);
}

#[test]
fn the_reuse_rule_comes_before_the_granule() {
    // The default 32 MiB granule; 16 MiB free when a asks for X(1).
    let sim = SimBackend::new(8 * GIB).with_free(GIB);
    let mgr = MemoryManager::new(sim.clone());
    let a = mgr.register(queuing()).unwrap();
    let b = mgr.register(queuing().owner(&a)).unwrap();
    mgr.queue_request(&b, [("p", x(1))]).unwrap();
    mgr.allocate_queue_for(&b).unwrap();
    // Memory taken on the device outside the manager (another process).
    let stream = sim.create_stream().unwrap();
    sim.alloc_device(GIB - 8000 - (16 << 20), &*stream).unwrap();
    assert_eq!(sim.free_bytes(), 16 << 20);

    mgr.queue_request(&a, [("x", x(1))]).unwrap();
    let response = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!((response.chunks, response.chunk_length), (1, 1000));

    // Without a notary holding arrays, the same batch is below the granule.
    let c = mgr.register(queuing()).unwrap();
    mgr.queue_request(&c, [("x", x(1))]).unwrap();
    assert!(matches!(
        mgr.allocate_queue_for(&c),
        Err(MemError::BelowGranule { .. })
    ));
}

#[test]
fn a_chunk_axis_of_length_zero_is_a_run_count_mismatch() {
    let (mgr, _) = manager(GIB, GIB);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &a,
        [("empty", ArrayRequest::of::<f64>([2, 0]).chunk_axis(1))],
    )
    .unwrap();
    let error = mgr.allocate_queue_for(&a).unwrap_err();
    assert!(
        matches!(
            &error,
            MemError::RunCountMismatch { label, axis: 1, axis_length: 0, total_runs: 1 }
                if label == "empty"
        ),
        "{error}"
    );
    // Flagged unchunkable, it is an array of no elements.
    mgr.queue_request(
        &a,
        [(
            "empty",
            ArrayRequest::of::<f64>([2, 0]).chunk_axis(1).unchunkable(),
        )],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!(response.take::<f64>("empty").unwrap().nbytes(), 0);
}

#[test]
fn manual_proportions_sum_in_cubies_order() {
    let (mgr, _) = manager(GIB, GIB);
    let manual = |p: f64| mgr.register(Registration::new().proportion(p)).unwrap();
    let (a, _b, _c) = (manual(0.1), manual(0.2), manual(0.3));
    let auto = mgr.register(Registration::new()).unwrap();
    assert_eq!(mgr.proportion(&auto), 1.0 - (0.1 + 0.2 + 0.3));
    mgr.set_manual_proportion(&a, 0.1).unwrap();
    assert_eq!(mgr.proportion(&auto), 0.4);
}

#[test]
fn pinned_arrays_count_against_the_caps() {
    let (mgr, _) = manager(GIB, GIB);
    mgr.set_limit_mode(cubie_mem::LimitMode::Active);
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    let b = mgr.register(queuing().stream_group("g")).unwrap();
    let pinned = ArrayRequest::of::<u8>([8 << 20])
        .unchunkable()
        .memory(cubie_mem::MemoryKind::Pinned);
    mgr.queue_request(&b, [("pinned", pinned)]).unwrap();
    mgr.allocate_queue_for(&b).unwrap();
    // H = 1 GiB of caps - 8 MiB held: 1,048,576,000 bytes no longer fit
    // in one chunk once the 2% reserve is withheld.
    let batch = ArrayRequest::of::<u8>([1_024_000, 1024])
        .chunk_axis(1)
        .total_runs(1024);
    mgr.queue_request(&a, [("x", batch)]).unwrap();
    let response = mgr.allocate_queue_for(&a).unwrap();
    assert_eq!((response.chunks, response.chunk_length), (2, 512));
}

#[test]
fn a_reused_larger_buffer_is_held_whole() {
    // cubie's buffer_reuse_keeps_larger_allocation: a 100 x 100 x 1,000
    // f64 array, then the same label at 10 runs, which reuses its buffer:
    // cubie reports the 80,000,000 bytes the buffer holds.
    let (mgr, sim) = manager(8 * GIB, GIB);
    let solver = mgr.register(queuing()).unwrap();
    let request = |runs: usize| ArrayRequest::of::<f64>([100, 100, runs]).total_runs(runs);
    mgr.queue_request(&solver, [("x", request(1000))]).unwrap();
    mgr.allocate_queue(&solver).unwrap();
    mgr.queue_request(&solver, [("x", request(10))]).unwrap();
    let x = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("x")
        .unwrap();
    assert_eq!(x.nbytes(), 800_000);
    assert_eq!(solver.allocated_bytes(), 80_000_000);
    assert_eq!(sim.free_bytes(), GIB - 80_000_000);
}
