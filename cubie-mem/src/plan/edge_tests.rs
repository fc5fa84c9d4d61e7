//! The planner at its edges: each comparison of the limit a split blames,
//! of a reused partition and of a chunk's runs at its boundary, and the
//! figures a plan reports, checked directly, so that a changed comparison
//! or a lost figure fails a test of its own.

use super::chunks::Chunks;
use super::limit::of_split;
use super::tests::sizes;
use super::*;

#[test]
fn the_default_granule_is_cubie_s_32_mib() {
    assert_eq!(DEFAULT_ALLOCATION_GRANULE, 32 * 1024 * 1024);
    assert_eq!(Budget::passive(0).granule, DEFAULT_ALLOCATION_GRANULE);
}

#[test]
fn a_partition_that_does_not_cover_the_batch_or_has_no_chunk_is_not_reused() {
    let budget = Budget::passive(1 << 20).with_granule(0);
    let runs = sizes(100, 800, 0);
    assert!(plan_partition(&runs, &budget, 25, 4).is_some());
    assert_eq!(
        plan_partition(&runs, &budget, 30, 3),
        None,
        "34 runs a chunk"
    );
    assert_eq!(plan_partition(&runs, &budget, 10, 0), None);
    assert_eq!(plan_partition(&runs, &budget, 0, 0), None);
}

#[test]
fn plan_measures_the_requests_and_reports_every_figure() {
    let state = ArrayRequest::of::<f64>([100]).chunk_axis(0).total_runs(100);
    let params = ArrayRequest::of::<u8>([40]).unchunkable();
    let budget = Budget::passive(10_000).with_granule(0);
    let plan = plan([("state", &state), ("params", &params)], &budget).unwrap();
    assert_eq!((plan.chunks(), plan.chunk_length()), (1, 100));
    assert_eq!(plan.chunkable_bytes(), 800);
    assert_eq!(plan.unchunkable_bytes(), 40);
    assert_eq!(plan.allocatable(), 9_800);
    assert_eq!(plan.withheld(), 200);
}

#[test]
fn the_last_chunk_has_runs_and_the_one_past_it_none() {
    let plan = ChunkPlan {
        total_runs: 10,
        chunks: 3,
        chunk_length: 4,
        buffer_sets: 1,
        ..ChunkPlan::default()
    };
    assert_eq!(plan.chunk_runs(2), Some(8..10));
    assert_eq!(plan.chunk_runs(3), None);
}

#[test]
fn a_request_is_allocated_with_its_run_axis_cut_to_the_chunk_length() {
    let plan = ChunkPlan {
        total_runs: 100,
        chunks: 4,
        chunk_length: 25,
        buffer_sets: 1,
        ..ChunkPlan::default()
    };
    let saves = ArrayRequest::of::<f64>([7, 3, 100])
        .chunk_axis(2)
        .total_runs(100);
    assert_eq!(plan.chunked_shape(&saves), [7, 3, 25]);
}

#[test]
fn a_finer_partition_keeps_the_sets_that_fit_and_a_coarser_one_is_refused() {
    let plan = ChunkPlan {
        total_runs: 100,
        chunks: 4,
        chunk_length: 25,
        buffer_sets: 2,
        ..ChunkPlan::default()
    };
    let finer = plan.with_partition(10, 10).unwrap();
    assert_eq!(
        (finer.chunks, finer.chunk_length, finer.buffer_sets),
        (10, 10, 2)
    );
    assert_eq!(finer.limited_by, Some(Limit::ReusedPartition));
    let same = plan.with_partition(25, 4).unwrap();
    assert_eq!(same.buffer_sets, 2);
    assert_eq!(plan.with_partition(50, 2), None, "coarser than 25 runs");
    let one = plan.with_partition(100, 1);
    assert_eq!(one, None, "one chunk of 100 runs is coarser too");
}

#[test]
fn depth_one_never_blames_the_pipeline_depth() {
    let budget = Budget::passive(1_000).with_granule(0);
    let limit = of_split(&sizes(10, 900, 0), &budget, 980);
    assert_ne!(limit, Limit::PipelineDepth);
}

#[test]
fn a_granule_bound_equal_to_the_reserve_bound_blames_the_memory() {
    // A = Fe = 10,000: the reserve leaves 9,800, and so does the granule.
    let budget = Budget::passive(10_000).with_granule(200);
    let limit = of_split(&sizes(100, 20_000, 0), &budget, 9_800);
    assert_eq!(limit, Limit::FreeMemory);
    let tighter = Budget::passive(10_000).with_granule(201);
    assert_eq!(
        of_split(&sizes(100, 20_000, 0), &tighter, 9_799),
        Limit::Granule
    );
}

#[test]
fn a_batch_of_exactly_the_available_memory_is_limited_by_it_not_the_reserve() {
    let budget = Budget::passive(10_000).with_granule(0);
    assert_eq!(
        of_split(&sizes(100, 10_000, 0), &budget, 9_800),
        Limit::FreeMemory
    );
    assert_eq!(
        of_split(&sizes(100, 9_999, 0), &budget, 9_800),
        Limit::Reserve
    );
}

#[test]
fn caps_exactly_at_the_free_memory_are_not_blamed() {
    let at = Budget::active(10_000, 10_000).with_granule(0);
    assert_eq!(
        of_split(&sizes(100, 20_000, 0), &at, 9_800),
        Limit::FreeMemory
    );
    let below = Budget::active(10_000, 9_999).with_granule(0);
    assert_eq!(of_split(&sizes(100, 20_000, 0), &below, 9_799), Limit::Caps);
}

/// A plan of 10 runs in 3 chunks of 4 runs.
fn three_chunks() -> ChunkPlan {
    ChunkPlan {
        total_runs: 10,
        chunks: 3,
        chunk_length: 4,
        buffer_sets: 1,
        ..ChunkPlan::default()
    }
}

#[test]
fn chunks_run_from_both_ends_and_count_what_is_left() {
    let mut chunks = three_chunks().iter_chunks();
    assert_eq!(chunks.len(), 3);
    let last = chunks.next_back().unwrap();
    assert_eq!((last.index, last.runs), (2, 8..10));
    assert_eq!(chunks.size_hint(), (2, Some(2)));
    assert_eq!(chunks.next().map(|chunk| chunk.index), Some(0));
    assert_eq!(chunks.next_back().map(|chunk| chunk.index), Some(1));
    assert_eq!(chunks.len(), 0);
    assert!(chunks.next_back().is_none());
    assert!(chunks.next().is_none());
}

#[test]
fn a_range_of_chunks_is_taken_only_within_those_left() {
    let indices = |chunks: Chunks| chunks.map(|chunk| chunk.index).collect::<Vec<_>>();
    let plan = three_chunks();
    assert_eq!(indices(plan.chunk_iter().within(0..3).unwrap()), [0, 1, 2]);
    assert_eq!(indices(plan.chunk_iter().within(1..2).unwrap()), [1]);
    assert_eq!(indices(plan.chunk_iter().within(3..3).unwrap()), [0; 0]);
    assert!(plan.chunk_iter().within(0..4).is_none(), "past the last");
    let reversed = std::ops::Range { start: 2, end: 1 };
    assert!(plan.chunk_iter().within(reversed).is_none());
    let mut started = plan.chunk_iter();
    started.next();
    assert_eq!(indices(started.clone().within(1..3).unwrap()), [1, 2]);
    assert!(started.within(0..2).is_none(), "before the next chunk");
}

#[test]
fn a_plan_prints_its_allocatable_bytes_once_it_has_any_figure() {
    let unplanned = three_chunks();
    assert!(
        !unplanned.to_string().contains("allocatable"),
        "{unplanned}"
    );
    for planned in [
        ChunkPlan {
            allocatable: 1,
            ..three_chunks()
        },
        ChunkPlan {
            chunkable_bytes: 1,
            ..three_chunks()
        },
        ChunkPlan {
            unchunkable_bytes: 1,
            ..three_chunks()
        },
    ] {
        assert!(planned.to_string().contains("allocatable"), "{planned}");
    }
}
