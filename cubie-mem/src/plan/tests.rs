//! Unit tests of the planner: thresholds, exact arithmetic, errors and
//! extreme figures.

use super::*;
use crate::{DType, MemoryKind};
use proptest::prelude::*;

/// Hand-made sizes at depth 1.
pub(super) fn sizes(total_runs: usize, c: u64, u: u64) -> BatchSizes {
    BatchSizes {
        total_runs,
        chunkable_bytes: c,
        unchunkable_bytes: u,
        depth: 1,
    }
}

#[test]
fn exact_arithmetic_keeps_the_seventh_run() {
    // alloc = 57142 - floor(0.02 * 57142) = 57142 - 1142 = 56000
    let budget = Budget::passive(57_142).with_granule(0);
    assert_eq!(budget.allocatable().unwrap(), (56_000, 1_142));
    let plan = plan_chunks(&sizes(58, 464_000, 0), &budget).unwrap();
    // 58 * 56000 / 464000 = 7 exactly; float division gives 6.999...
    assert_eq!(plan.chunks, 9);
    assert_eq!(plan.chunk_length, 7);
}

#[test]
fn fits_in_one_chunk_when_strictly_below_alloc() {
    let budget = Budget::passive(1000).with_granule(0); // alloc 980
    let p = plan_chunks(&sizes(10, 900, 79), &budget).unwrap();
    assert_eq!((p.chunks, p.chunk_length), (1, 10));
    // R == alloc takes the split path, which still fits all 10 runs.
    let p = plan_chunks(&sizes(10, 900, 80), &budget).unwrap();
    assert_eq!((p.chunks, p.chunk_length), (1, 10));
    let p = plan_chunks(&sizes(10, 901, 80), &budget).unwrap();
    assert_eq!((p.chunks, p.chunk_length), (2, 5));
}

#[test]
fn even_split() {
    // alloc 980, U=0, C=10_000 over 100 runs: max_chunk = 100*980/10000 = 9
    let p = plan_chunks(
        &sizes(100, 10_000, 0),
        &Budget::passive(1000).with_granule(0),
    )
    .unwrap();
    assert_eq!(p.chunks, 12); // ceil(100/9)
    assert_eq!(p.chunk_length, 9); // ceil(100/12)
    let lens: Vec<_> = p.iter_chunks().map(|c| c.len()).collect();
    assert_eq!(lens.iter().sum::<usize>(), 100);
    assert_eq!(lens.last(), Some(&1));
}

#[test]
fn granule_is_left_free() {
    let budget = Budget::passive(1000).with_granule(100);
    assert_eq!(budget.allocatable().unwrap(), (900, 100));
    let budget = Budget::passive(99).with_granule(100);
    assert!(matches!(
        budget.allocatable(),
        Err(MemError::BelowGranule { .. })
    ));
}

#[test]
fn active_limit_uses_headroom() {
    let budget = Budget::active(10_000, 1_000).with_granule(0);
    assert_eq!(budget.allocatable().unwrap(), (980, 20));
}

#[test]
fn error_cases() {
    let b = Budget::passive(1000).with_granule(0);
    assert!(matches!(
        plan_chunks(&sizes(1, 0, 5000), &b),
        Err(MemError::AllUnchunkable { .. })
    ));
    assert!(matches!(
        plan_chunks(&sizes(10, 100, 980), &b),
        Err(MemError::UnchunkableTooLarge { .. })
    ));
    assert!(matches!(
        plan_chunks(&sizes(10, 100_000, 0), &b),
        Err(MemError::SingleRunTooLarge { .. })
    ));
}

#[test]
fn measure_checks_run_counts_and_counts_pinned() {
    let state = ArrayRequest::new(DType::F64, [2, 3, 50]).total_runs(50);
    let status = ArrayRequest::of::<i32>([50])
        .chunk_axis(0)
        .memory(MemoryKind::Pinned);
    let init = ArrayRequest::of::<f32>([3]).unchunkable();
    let reqs = [("state", &state), ("status", &status), ("init", &init)];
    let s = BatchSizes::measure(reqs.iter().copied()).unwrap();
    assert_eq!(s.total_runs, 50);
    assert_eq!(s.chunkable_bytes, 2 * 3 * 50 * 8 + 50 * 4);
    assert_eq!(s.unchunkable_bytes, 12);

    let short = ArrayRequest::of::<i32>([49]).chunk_axis(0);
    let reqs = [("state", &state), ("short", &short)];
    assert!(matches!(
        BatchSizes::measure(reqs.iter().copied()),
        Err(MemError::RunCountMismatch {
            axis_length: 49,
            total_runs: 50,
            ..
        })
    ));
}

#[test]
fn reused_partition_must_cover_and_fit() {
    let p = plan_chunks(
        &sizes(100, 10_000, 0),
        &Budget::passive(1000).with_granule(0),
    )
    .unwrap();
    assert_eq!((p.chunk_length, p.chunks), (9, 12));
    assert!(p.with_partition(5, 20).is_some());
    assert!(
        p.with_partition(6, 20).is_none(),
        "does not cover: ceil(100/20) = 5"
    );
    assert!(p.with_partition(10, 10).is_none(), "coarser than what fits");
}

#[test]
fn shortfall_is_the_physical_shortage_the_caps_allow() {
    let passive = Budget::passive(1000).with_granule(0);
    assert_eq!(passive.shortfall(0), None, "nothing requested");
    assert_eq!(passive.shortfall(999), None, "R < Fe");
    assert_eq!(passive.shortfall(1000), Some(1), "R == Fe: one byte short");
    assert_eq!(passive.shortfall(1500), Some(501));
    assert_eq!(Budget::passive(0).shortfall(u64::MAX), Some(u64::MAX));
    assert_eq!(Budget::passive(0).shortfall(1), Some(2));

    let active = Budget::active(1000, 2000).with_granule(0);
    assert_eq!(
        active.shortfall(1500),
        Some(501),
        "R < H: the caps allow it"
    );
    assert_eq!(active.shortfall(2000), None, "R >= H: the caps forbid it");
    assert_eq!(active.shortfall(u64::MAX), None);
    assert_eq!(Budget::active(1000, 0).shortfall(1000), None);
}

#[test]
fn batches_between_the_thresholds_are_chunked_without_eviction() {
    // Fe = 1000, alloc = 980: 980 <= R < 1000 plans in chunks, evicts nothing.
    let budget = Budget::passive(1000).with_granule(0);
    assert_eq!(budget.allocatable().unwrap(), (980, 20));
    for (runs, c, u, chunks, length) in [
        (99, 990, 0, 2, 50),    // max_chunk = 99 * 980 / 990 = 98
        (98, 980, 0, 1, 98),    // R == alloc: max_chunk = 98, still one chunk
        (10, 990, 9, 2, 5),     // max_chunk = 10 * 971 / 990 = 9
        (100, 500, 490, 2, 50), // max_chunk = 100 * 490 / 500 = 98
    ] {
        let s = sizes(runs, c, u);
        assert!(s.total_bytes() >= 980 && s.total_bytes() < 1000);
        assert_eq!(budget.shortfall(s.total_bytes()), None);
        let p = plan_chunks(&s, &budget).unwrap();
        assert_eq!((p.chunks, p.chunk_length), (chunks, length), "{s:?}");
        assert_eq!((p.allocatable, p.withheld), (980, 20));
    }
    // The granule lowers alloc, not Fe: 900 <= R < 1000 is chunked.
    let budget = Budget::passive(1000).with_granule(100);
    assert_eq!(budget.allocatable().unwrap(), (900, 100));
    assert_eq!(budget.shortfall(950), None);
    let p = plan_chunks(&sizes(95, 950, 0), &budget).unwrap();
    assert_eq!((p.chunks, p.chunk_length), (2, 48)); // max_chunk = 90
}

#[test]
fn nothing_requested_is_one_chunk_before_any_check() {
    for budget in [
        Budget::passive(0),                       // a full device, below the granule
        Budget::passive(10).with_granule(100),    // below the granule
        Budget::active(1000, 0).with_granule(0),  // no headroom
        Budget::passive(1000).with_granule(1000), // alloc == 0
    ] {
        let p = plan_chunks(&sizes(7, 0, 0), &budget).unwrap();
        assert_eq!((p.total_runs, p.chunks, p.chunk_length), (7, 1, 7));
        assert!(p.validate().is_ok());
        assert_eq!(p.allocatable + p.withheld, budget.limit());
    }
}

#[test]
fn no_room_and_no_unchunkable_bytes_is_a_single_run_error() {
    // Fe == granule: alloc == 0 with U == 0 is not "unchunkable arrays need 0 B".
    let budget = Budget::passive(100).with_granule(100);
    assert_eq!(budget.allocatable().unwrap(), (0, 100));
    let error = plan_chunks(&sizes(10, 50, 0), &budget).unwrap_err();
    assert_eq!(
        error,
        MemError::SingleRunTooLarge {
            per_run: Bytes(5),
            depth: 1,
            room: Bytes(0),
            unchunkable: Bytes(0),
            withheld: Bytes(100),
            report: None,
        }
    );
    // With unchunkable bytes it is their fault.
    assert!(matches!(
        plan_chunks(&sizes(10, 50, 1), &budget),
        Err(MemError::UnchunkableTooLarge {
            unchunkable: Bytes(1),
            available: Bytes(0),
            ..
        })
    ));
}

#[test]
fn extreme_figures_plan_without_overflow() {
    let huge = Budget::passive(u64::MAX).with_granule(0);
    let (alloc, withheld) = huge.allocatable().unwrap();
    assert_eq!(withheld, u64::MAX / 50); // floor(0.02 * A)
    assert_eq!(alloc, u64::MAX - u64::MAX / 50);

    // R saturates: C + U overflows 64 bits.
    let s = sizes(usize::MAX, u64::MAX, u64::MAX);
    assert_eq!(s.total_bytes(), u64::MAX);
    assert!(matches!(
        plan_chunks(&s, &huge),
        Err(MemError::UnchunkableTooLarge { .. })
    ));

    // usize::MAX runs of u64::MAX bytes: max_chunk = runs * alloc / C.
    let p = plan_chunks(&sizes(usize::MAX, u64::MAX, 0), &huge).unwrap();
    assert!(p.validate().is_ok());
    assert_eq!(p.chunk_length, usize::MAX.div_ceil(p.chunks));
    assert_eq!(p.chunks, 2); // max_chunk = floor(0.98.. * usize::MAX)

    // One run of u64::MAX bytes does not fit: per run is the whole C.
    assert!(matches!(
        plan_chunks(&sizes(1, u64::MAX, 0), &huge),
        Err(MemError::SingleRunTooLarge {
            per_run: Bytes(u64::MAX),
            ..
        })
    ));
    // usize::MAX runs of 1 byte in all: per run rounds up to 1 byte.
    let p = plan_chunks(
        &sizes(usize::MAX, 1, 0),
        &Budget::passive(1).with_granule(0),
    )
    .unwrap();
    assert_eq!((p.chunks, p.chunk_length), (1, usize::MAX));
}

#[test]
fn zero_runs_are_an_error() {
    for s in [sizes(0, 0, 0), sizes(0, 10, 5)] {
        let error = plan_chunks(&s, &Budget::passive(1 << 30)).unwrap_err();
        assert_eq!(
            error,
            MemError::ZeroRuns {
                chunkable: Bytes(s.chunkable_bytes),
                unchunkable: Bytes(s.unchunkable_bytes),
            }
        );
    }
}

#[test]
fn the_default_plan_is_one_chunk_of_one_run() {
    let p = ChunkPlan::default();
    assert_eq!((p.total_runs, p.chunks, p.chunk_length), (1, 1, 1));
    assert_eq!(
        (
            p.chunkable_bytes,
            p.unchunkable_bytes,
            p.allocatable,
            p.withheld,
            p.buffer_sets
        ),
        (0, 0, 0, 0, 1)
    );
    assert!(p.validate().is_ok());
    assert!(p.iter_chunks().map(|c| c.runs).eq(std::iter::once(0..1)));
}

/// A hand-made plan of `chunks` chunks of `chunk_length` runs.
pub(super) fn partition(total_runs: usize, chunks: usize, chunk_length: usize) -> ChunkPlan {
    ChunkPlan {
        total_runs,
        chunks,
        chunk_length,
        ..ChunkPlan::default()
    }
}

#[test]
fn validate_accepts_consistent_plans() {
    for (total, chunks, length) in [
        (1, 1, 1),
        (10, 3, 4),
        (10, 6, 2), // a reused partition ending with an empty chunk
        (10, 10, 1),
        (10, 1, 10),
        (usize::MAX, 2, usize::MAX / 2 + 1),
        (usize::MAX, usize::MAX, usize::MAX), // the product overflows: covers
    ] {
        assert_eq!(partition(total, chunks, length).validate(), Ok(()));
    }
}

#[test]
fn validate_names_what_is_inconsistent() {
    for (total, chunks, length, reason) in [
        (0, 1, 1, "a batch has at least one run"),
        (10, 0, 10, "a plan has at least one chunk"),
        (10, 1, 0, "a chunk holds at least one run"),
        (10, 11, 1, "there are more chunks than runs"),
        (10, 1, 11, "a chunk is longer than the batch"),
        (10, 3, 3, "the chunks do not cover every run"),
        (
            usize::MAX,
            2,
            usize::MAX / 2,
            "the chunks do not cover every run",
        ),
    ] {
        let error = partition(total, chunks, length).validate().unwrap_err();
        assert_eq!(
            error,
            MemError::InvalidPlan {
                total_runs: total,
                chunks,
                chunk_length: length,
                reason,
            }
        );
    }
}

#[test]
fn reused_one_run_partitions_are_capped_at_the_run_count() {
    let p = plan_chunks(&sizes(10, 1000, 0), &Budget::passive(200).with_granule(0)).unwrap();
    assert_eq!((p.chunks, p.chunk_length), (10, 1));
    // Remembered from a batch of 20 runs in chunks of 1.
    let reused = p.with_partition(1, 20).unwrap();
    assert_eq!((reused.chunks, reused.chunk_length), (10, 1));
    assert!(reused.validate().is_ok());
    let reused = p.with_partition(1, 10).unwrap();
    assert_eq!((reused.chunks, reused.chunk_length), (10, 1));
}

#[test]
fn chunked_bytes_and_total_bytes_saturate() {
    let request = ArrayRequest::new(DType::F64, [usize::MAX, 2, 1000]).total_runs(1000);
    let p = partition(1000, 1, 1000);
    assert_eq!(p.chunked_bytes(&request), u64::MAX);
    let p = partition(1000, 1000, 1);
    assert_eq!(p.chunked_bytes(&request), u64::MAX);
    let empty = ArrayRequest::new(DType::F64, [usize::MAX, 0, 1000]).total_runs(1000);
    assert_eq!(p.chunked_bytes(&empty), 0);
    let small = ArrayRequest::new(DType::F32, [3, 4, 1000]).total_runs(1000);
    assert_eq!(
        partition(1000, 100, 10).chunked_bytes(&small),
        3 * 4 * 10 * 4
    );
    assert_eq!(sizes(1, u64::MAX, 1).total_bytes(), u64::MAX);
}

#[test]
fn a_partition_of_any_figures_is_a_valid_plan_or_none() {
    let p = ChunkPlan::new(100, 4, 25).unwrap();
    for chunks in [0, 1, 3, 4, 5, 99, 100, 101, usize::MAX] {
        for chunk_length in [0, 1, 24, 25, 26, 100, usize::MAX] {
            if let Some(reused) = p.with_partition(chunk_length, chunks) {
                assert!(reused.validate().is_ok(), "({chunk_length}, {chunks})");
                assert_eq!(reused.chunk_length(), chunk_length);
            }
        }
    }
    assert_eq!(p.with_partition(0, 0), None);
    assert_eq!(p.with_partition(1, 0), None);
    // The partition the plan has is accepted (as fine as itself), a
    // coarser one is not.
    assert_eq!(p.with_partition(25, 4), Some(p));
    assert_eq!(p.with_partition(50, 2), None);
    assert_eq!(p.with_partition(100, 1), None);
}

#[test]
fn a_reused_partition_keeps_the_plans_buffer_sets() {
    let p = ChunkPlan::new(100, 4, 25)
        .unwrap()
        .with_buffer_sets(3)
        .unwrap();
    let reused = p.with_partition(10, 10).unwrap();
    assert_eq!(
        (reused.chunks(), reused.chunk_length(), reused.buffer_sets()),
        (10, 10, 3)
    );
    assert_eq!(reused.total_runs(), 100);
}

#[test]
fn with_buffer_sets_changes_only_the_sets() {
    let p = ChunkPlan::new(10, 5, 2).unwrap();
    let three = p.with_buffer_sets(3).unwrap();
    assert_eq!(three.buffer_sets(), 3);
    assert_eq!(
        (three.total_runs(), three.chunks(), three.chunk_length()),
        (10, 5, 2)
    );
    assert_ne!(three, ChunkPlan::default());
    assert_eq!(p.with_buffer_sets(5).unwrap().buffer_sets(), 5);
    assert!(p.with_buffer_sets(6).is_err());
    assert!(p.with_buffer_sets(0).is_err());
}

#[test]
fn a_chunk_past_the_batchs_end_is_empty() {
    // A reused partition: 10 runs in 6 chunks of 2, the last one empty.
    let p = ChunkPlan::new(10, 6, 2).unwrap();
    let chunks: Vec<_> = p.iter_chunks().collect();
    assert!(chunks[..5].iter().all(|c| !c.is_empty() && c.len() == 2));
    assert!(chunks[5].is_empty());
    assert_eq!(chunks[5].len(), 0);
    assert_eq!(chunks[5].runs, 10..10);
}

/// A request of `runs` runs on `axis` of `shape`, in a form picked by
/// `form`.
fn request(shape: Vec<usize>, axis: Option<usize>, runs: usize, form: u8) -> ArrayRequest {
    let request = ArrayRequest::new(DType::F64, shape)
        .chunk_axis(axis)
        .total_runs(runs)
        .pipeline_depth(usize::from(form % 4));
    match form / 4 % 3 {
        0 => request,
        1 => request.unchunkable(),
        _ => request.memory(MemoryKind::Pinned),
    }
}

fn requests() -> impl Strategy<Value = Vec<Vec<ArrayRequest>>> {
    let dim = prop_oneof![
        Just(0usize),
        Just(1),
        Just(3),
        Just(100),
        Just(usize::MAX / 4)
    ];
    let one = (
        prop::collection::vec(dim, 0..4),
        prop::option::of(0usize..4),
        prop_oneof![Just(0usize), Just(1), Just(3), Just(100)],
        any::<u8>(),
    )
        .prop_map(|(shape, axis, runs, form)| request(shape, axis, runs, form));
    prop::collection::vec(prop::collection::vec(one, 0..4), 1..4)
}

proptest! {
    /// The sets' sizes are the batch's whenever measuring its requests
    /// succeeds, and are refused whenever it fails.
    #[test]
    fn sets_add_up_to_the_measure_of_their_requests(sets in requests()) {
        let labelled: Vec<(&str, &ArrayRequest)> =
            sets.iter().flatten().map(|request| ("x", request)).collect();
        let measured = BatchSizes::measure(labelled.iter().copied()).ok();
        let summed: Vec<SetSizes> = sets.iter().map(SetSizes::of).collect();
        let added = SetSizes::batch(summed.iter());
        if added.is_some() {
            prop_assert_eq!(added, measured);
        }
        if measured.is_none() {
            prop_assert_eq!(added, None);
        }
    }
}

#[test]
fn a_plain_batch_is_summed_and_a_mismatch_measured_in_full() {
    let state = request(vec![8, 100], Some(1), 100, 1);
    let params = request(vec![16], None, 1, 5);
    let set = SetSizes::of([&state, &params]);
    let sizes = SetSizes::batch([set, set].iter()).unwrap();
    assert_eq!(
        sizes,
        BatchSizes::measure([("a", &state), ("b", &params), ("c", &state), ("d", &params)])
            .unwrap()
    );
    let longer = SetSizes::of([&request(vec![8, 200], Some(1), 200, 1)]);
    assert_eq!(SetSizes::batch([set, longer].iter()), None);
    assert!(!SetSizes::of([&request(vec![2, 0], Some(1), 1, 1)]).plain);
    assert!(!SetSizes::of([&request(vec![2, 100], Some(2), 100, 1)]).plain);
}
