//! One-line summaries a user can print: a chunk plan, and each row of the
//! memory report (an instance's figures, a group's or the total counters).

use cubie_mem::{ArrayRequest, ChunkPlan, LimitMode, MemoryKind, Registration};

use crate::common;

#[test]
fn a_planned_batch_prints_its_runs_chunks_sets_and_budget() {
    // 300,000 f64 runs (2,400,000 bytes) on 1,000,000 bytes free, no
    // granule: alloc = 1,000,000 - 2% = 980,000; max_chunk =
    // floor(300,000 * 980,000 / 2,400,000) = 122,500; 3 chunks of 100,000.
    let (mgr, _) = common::manager(1 << 30, 1_000_000);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let request = ArrayRequest::of::<f64>([300_000])
        .chunk_axis(0)
        .total_runs(300_000);
    mgr.queue_request(&solver, [("state", request)]).unwrap();
    let response = mgr.allocate_queue_for(&solver).unwrap();
    let plan = response.plan();
    assert_eq!((plan.chunks(), plan.chunk_length()), (3, 100_000));
    assert_eq!(
        plan.to_string(),
        "300,000 runs in 3 chunks of 100,000, 1 buffer set, 980000 B (957.03 KiB) allocatable \
         (limited by free device memory)"
    );

    // A batch in one chunk was limited by nothing.
    mgr.queue_request(
        &solver,
        [("state", ArrayRequest::of::<f64>([10]).unchunkable())],
    )
    .unwrap();
    let whole = mgr.allocate_queue_for(&solver).unwrap();
    assert_eq!(
        whole.plan().to_string(),
        "1 run in 1 chunk of 1, 1 buffer set, 980000 B (957.03 KiB) allocatable"
    );
}

#[test]
fn counts_are_grouped_and_singular_where_one() {
    let one = ChunkPlan::default();
    assert_eq!(one.to_string(), "1 run in 1 chunk of 1, 1 buffer set");
    let large = ChunkPlan::new(1_234_567_890, 1_000, 1_234_568)
        .unwrap()
        .with_buffer_sets(3)
        .unwrap();
    assert_eq!(
        large.to_string(),
        "1,234,567,890 runs in 1,000 chunks of 1,234,568, 3 buffer sets"
    );
    assert_eq!(
        ChunkPlan::new(999, 1, 999).unwrap().to_string(),
        "999 runs in 1 chunk of 999, 1 buffer set"
    );
}

#[test]
fn the_report_rows_print_as_one_line_each() {
    let (mgr, _) = common::manager(1 << 30, 1 << 30);
    mgr.set_limit_mode(LimitMode::Active);
    let solver = mgr
        .register(
            Registration::new()
                .name("rk45-outputs")
                .proportion(0.25)
                .stream_group("integrators")
                .on_invalidate(|| {}),
        )
        .unwrap();
    mgr.queue_request(
        &solver,
        [
            ("state", ArrayRequest::of::<f32>([1 << 20]).unchunkable()),
            (
                "status",
                ArrayRequest::of::<i32>([1024])
                    .unchunkable()
                    .memory(MemoryKind::Pinned),
            ),
        ],
    )
    .unwrap();
    mgr.allocate_queue(&solver).unwrap();
    let stats = mgr.memory_report();

    let usage = "device 4194304 B (4.00 MiB), pinned 4096 B (4.00 KiB), \
                 held 4198400 B (4.00 MiB), peak 4198400 B (4.00 MiB); 2 arrays (peak 2); \
                 2 allocations, 0 frees, 0 evictions, 0 chunked requests";
    assert_eq!(stats.total.to_string(), usage);
    assert_eq!(stats.groups["integrators"].to_string(), usage);
    let row = stats.instances[0].to_string();
    assert_eq!(
        row,
        format!(
            "rk45-outputs (group integrators): share 25%, cap 268435456 B (256.00 MiB); {usage}"
        )
    );
}
