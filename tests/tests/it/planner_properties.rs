//! Properties of the pure planner over random batches and budgets.

use crate::common::{edge_u64, edge_usize};
use cubie_mem::plan::{BatchSizes, Budget, plan_chunks};
use cubie_mem::{ArrayRequest, ChunkPlan, DType, MemError};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn plans_cover_every_run_and_fit_the_budget(
        total_runs in 1usize..100_000,
        bytes_per_run in 1u64..10_000,
        unchunkable in 0u64..1_000_000,
        free in 0u64..2_000_000_000,
        granule in prop_oneof![Just(0u64), 1u64..1_000_000],
        depth in prop_oneof![Just(1usize), 1usize..5],
    ) {
        let sizes = BatchSizes {
            total_runs,
            chunkable_bytes: bytes_per_run * total_runs as u64,
            unchunkable_bytes: unchunkable,
            depth,
        };
        let budget = Budget::passive(free).with_granule(granule);
        match plan_chunks(&sizes, &budget) {
            Ok(plan) => {
                prop_assert!(plan.chunks() >= 1 && plan.chunk_length() >= 1);
                prop_assert!(plan.chunk_length() * plan.chunks() >= total_runs, "every run is covered");
                prop_assert!(plan.chunk_length() * (plan.chunks() - 1) < total_runs, "no empty chunk");
                prop_assert_eq!(plan.iter_chunks().map(|c| c.len()).sum::<usize>(), total_runs);
                if plan.chunks() > 1 {
                    // One chunk's arrays in each of the d sets fit in what may be allocated.
                    let chunk_bytes = depth as u64 * bytes_per_run * plan.chunk_length() as u64 + unchunkable;
                    prop_assert!(chunk_bytes <= plan.allocatable(), "{chunk_bytes} > {}", plan.allocatable());
                    prop_assert_eq!(plan.buffer_sets(), depth.min(plan.chunks()));
                } else {
                    prop_assert!(sizes.total_bytes() <= plan.allocatable());
                    prop_assert_eq!(plan.buffer_sets(), 1);
                }
                prop_assert_eq!(plan.allocatable() + plan.withheld(), free);
            }
            Err(MemError::BelowGranule { .. }) => prop_assert!(free < granule),
            Err(MemError::UnchunkableTooLarge { .. }) => {
                let (alloc, _) = budget.allocatable().unwrap();
                prop_assert!(alloc <= unchunkable);
            }
            Err(MemError::SingleRunTooLarge { depth: d, .. }) => {
                let (alloc, _) = budget.allocatable().unwrap();
                prop_assert_eq!(d, depth);
                prop_assert!(alloc - unchunkable < depth as u64 * bytes_per_run);
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    #[test]
    fn more_memory_never_fails_a_plan_or_adds_chunks(
        total_runs in 1usize..50_000,
        bytes_per_run in 1u64..4_000,
        unchunkable in prop_oneof![Just(0u64), 0u64..1_000_000],
        free in prop_oneof![0u64..500_000_000, edge_u64()],
        extra in prop_oneof![Just(1u64), 0u64..500_000_000, edge_u64()],
        granule in prop_oneof![Just(0u64), 1u64..1_000_000],
        headroom in prop::option::of(prop_oneof![0u64..1_000_000_000, edge_u64()]),
        depth in 1usize..5,
    ) {
        let sizes = BatchSizes {
            total_runs,
            chunkable_bytes: bytes_per_run * total_runs as u64,
            unchunkable_bytes: unchunkable,
            depth,
        };
        // The caps stay as they are; only the free memory grows.
        let budget = |effective_free| Budget { effective_free, cap_headroom: headroom, granule };
        let more = free.saturating_add(extra);
        match (plan_chunks(&sizes, &budget(free)), plan_chunks(&sizes, &budget(more))) {
            (Ok(small), Ok(large)) => prop_assert!(
                large.chunks() <= small.chunks(),
                "{} chunks with {free} B free, {} with {more} B", small.chunks(), large.chunks()
            ),
            (Ok(small), Err(error)) => prop_assert!(
                false,
                "{} chunks with {free} B free, but {more} B fails: {error}", small.chunks()
            ),
            (Err(_), _) => {}
        }
    }

    #[test]
    fn a_deeper_pipeline_never_means_longer_chunks(
        total_runs in 1usize..50_000,
        bytes_per_run in 1u64..4_000,
        unchunkable in 0u64..100_000,
        free in 1_000u64..500_000_000,
        depth in 1usize..6,
    ) {
        let sizes = |depth| BatchSizes {
            total_runs,
            chunkable_bytes: bytes_per_run * total_runs as u64,
            unchunkable_bytes: unchunkable,
            depth,
        };
        let budget = Budget::passive(free).with_granule(0);
        let shallow = plan_chunks(&sizes(depth), &budget);
        let deep = plan_chunks(&sizes(depth + 1), &budget);
        match (shallow, deep) {
            (Ok(shallow), Ok(deep)) => {
                prop_assert!(deep.chunk_length() <= shallow.chunk_length());
                prop_assert!(deep.buffer_sets() >= shallow.buffer_sets());
                prop_assert!(deep.buffer_sets() <= depth + 1);
            }
            // What does not fit shallower does not fit deeper.
            (Err(_), deep) => prop_assert!(deep.is_err()),
            (Ok(_), Err(error)) => {
                let is_single_run = matches!(error, MemError::SingleRunTooLarge { .. });
                prop_assert!(is_single_run, "{error}");
            }
        }
    }
}

fn edge_budget() -> impl Strategy<Value = Budget> {
    (edge_u64(), prop::option::of(edge_u64()), edge_u64()).prop_map(|(free, headroom, granule)| {
        Budget {
            effective_free: free,
            cap_headroom: headroom,
            granule,
        }
    })
}

fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        Just(DType::U8),
        Just(DType::I32),
        Just(DType::F32),
        Just(DType::F64),
        Just(DType::U64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn extreme_figures_never_panic_and_plans_are_valid(
        total_runs in edge_usize(),
        c in edge_u64(),
        u in edge_u64(),
        budget in edge_budget(),
        depth in prop_oneof![Just(1usize), edge_usize()],
    ) {
        let sizes = BatchSizes { total_runs, chunkable_bytes: c, unchunkable_bytes: u, depth };
        let r = u128::from(c) + u128::from(u);
        let runs = total_runs as u128;
        let d = depth as u128;
        match plan_chunks(&sizes, &budget) {
            Ok(plan) => {
                prop_assert_eq!(plan.validate(), Ok(()));
                prop_assert_eq!(plan.total_runs(), total_runs);
                prop_assert_eq!((plan.chunkable_bytes(), plan.unchunkable_bytes()), (c, u));
                prop_assert_eq!(plan.allocatable().checked_add(plan.withheld()), Some(budget.limit()));
                // Every run is covered, and a fresh plan has no empty chunk.
                let (chunks, length) = (plan.chunks() as u128, plan.chunk_length() as u128);
                prop_assert!(chunks * length >= runs);
                prop_assert!((chunks - 1) * length < runs);
                prop_assert_eq!(plan.chunk_runs(0).map(|r| r.start), Some(0));
                prop_assert_eq!(plan.chunk_runs(plan.chunks() - 1).map(|r| r.end), Some(total_runs));
                let last = plan.iter_chunks().next_back().unwrap();
                prop_assert!(!last.is_empty() && last.runs.end == total_runs);
                // One chunk's chunkable bytes in each set plus U fit in alloc:
                // s * C * chunk_length / total_runs <= alloc - U, exactly.
                let alloc = u128::from(plan.allocatable());
                let sets = plan.buffer_sets() as u128;
                prop_assert!(plan.buffer_sets() >= 1 && plan.buffer_sets() <= depth.min(plan.chunks()));
                if plan.chunks() == 1 {
                    prop_assert_eq!(plan.buffer_sets(), 1);
                } else {
                    prop_assert_eq!(plan.buffer_sets(), depth.min(plan.chunks()));
                }
                if r == 0 {
                    prop_assert_eq!(plan.chunks(), 1);
                } else if plan.chunks() == 1 {
                    prop_assert!(u128::from(u) <= alloc);
                    prop_assert!(u128::from(c) * length <= runs * (alloc - u128::from(u)));
                } else {
                    // A split plan budgets all d sets, of which it keeps s <= d.
                    prop_assert!(u128::from(u) <= alloc);
                    let room = runs * (alloc - u128::from(u));
                    let per_set = u128::from(c) * length;
                    prop_assert!(per_set.checked_mul(d).is_some_and(|all| all <= room));
                    prop_assert!(per_set.checked_mul(sets).is_some_and(|used| used <= room));
                }
            }
            Err(MemError::ZeroRuns { .. }) => prop_assert_eq!(total_runs, 0),
            Err(MemError::ZeroDepth { .. }) => prop_assert!(total_runs > 0 && depth == 0),
            Err(error) => {
                prop_assert!(total_runs > 0 && r > 0, "{error}");
                match budget.allocatable() {
                    Err(below) => {
                        prop_assert!(budget.effective_free < budget.granule);
                        prop_assert_eq!(error, below);
                    }
                    Ok((alloc, _)) => {
                        let alloc = u128::from(alloc);
                        prop_assert!(r >= alloc, "{error}");
                        match error {
                            MemError::AllUnchunkable { .. } => prop_assert_eq!(c, 0),
                            MemError::UnchunkableTooLarge { .. } => {
                                prop_assert!(c > 0 && u > 0 && alloc <= u128::from(u));
                            }
                            MemError::SingleRunTooLarge { room, depth: e, .. } => {
                                let room = u128::from(room.0);
                                prop_assert_eq!(e, depth);
                                prop_assert_eq!(room, alloc - u128::from(u).min(alloc));
                                // d * C < 2^128: exact.
                                prop_assert!(c > 0 && runs * room < d * u128::from(c));
                            }
                            other => prop_assert!(false, "unexpected error {other}"),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn budget_thresholds_hold_for_extreme_figures(
        budget in edge_budget(),
        requested in edge_u64(),
    ) {
        match budget.allocatable() {
            Ok((alloc, withheld)) => {
                prop_assert!(budget.granule <= budget.effective_free);
                prop_assert_eq!(alloc.checked_add(withheld), Some(budget.limit()));
                prop_assert!(alloc <= budget.effective_free - budget.granule);
                prop_assert!(withheld >= budget.limit() / 50);
            }
            Err(MemError::BelowGranule { .. }) => {
                prop_assert!(budget.effective_free < budget.granule);
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
        let caps_forbid = budget.cap_headroom.is_some_and(|h| requested >= h);
        let expected = (requested > 0 && requested >= budget.effective_free && !caps_forbid).then(|| {
            let short = u128::from(requested) - u128::from(budget.effective_free) + 1;
            u64::try_from(short).unwrap_or(u64::MAX)
        });
        prop_assert_eq!(budget.shortfall(requested), expected);
    }

    #[test]
    fn hand_made_plans_validate_and_iterate_without_panicking(
        total_runs in edge_usize(),
        chunks in edge_usize(),
        chunk_length in edge_usize(),
        index in edge_usize(),
    ) {
        let (t, n, l) = (total_runs as u128, chunks as u128, chunk_length as u128);
        let consistent = t >= 1 && n >= 1 && l >= 1 && n <= t && l <= t && n * l >= t;
        let plan = match ChunkPlan::new(total_runs, chunks, chunk_length) {
            Ok(plan) => {
                prop_assert!(consistent);
                prop_assert_eq!(plan.validate(), Ok(()));
                plan
            }
            Err(MemError::InvalidPlan { total_runs: a, chunks: b, chunk_length: c, .. }) => {
                prop_assert!(!consistent);
                prop_assert_eq!((a, b, c), (total_runs, chunks, chunk_length));
                return Ok(());
            }
            Err(other) => return Err(TestCaseError::fail(format!("unexpected error {other}"))),
        };
        match plan.chunk_runs(index) {
            Some(runs) => {
                prop_assert!(index < chunks);
                prop_assert!(runs.start <= runs.end && runs.end <= total_runs);
                prop_assert!(runs.len() <= chunk_length);
            }
            None => prop_assert!(index >= chunks),
        }
        let first = plan.iter_chunks().next();
        prop_assert_eq!(first.is_some(), chunks > 0);
        let last = plan.iter_chunks().next_back();
        if consistent {
            prop_assert_eq!(first.map(|c| c.runs.start), Some(0));
            prop_assert_eq!(last.map(|c| c.runs.end), Some(total_runs));
            prop_assert_eq!(plan.iter_chunks().len(), chunks);
        }
    }

    #[test]
    fn chunked_bytes_saturate_for_extreme_shapes(
        shape in prop::collection::vec(edge_usize(), 0..5),
        axis in prop::option::of(0usize..6),
        chunk_length in edge_usize(),
        dtype in dtype(),
    ) {
        let request = ArrayRequest::new(dtype, shape.clone()).chunk_axis(axis);
        let chunk_length = chunk_length.max(1);
        let plan = ChunkPlan::new(chunk_length, 1, chunk_length).unwrap();
        let in_use = request.axis().filter(|_| request.is_chunkable());
        let exact = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if Some(i) == in_use { chunk_length } else { d })
            .chain([dtype.size_bytes()])
            .try_fold(1u128, |n, d| {
                // Once past u64::MAX the result saturates, unless a zero follows.
                if d == 0 { Some(0) } else { n.checked_mul(d as u128).map(|p| p.min(1u128 << 64)) }
            })
            .unwrap();
        let expected = u64::try_from(exact).unwrap_or(u64::MAX);
        prop_assert_eq!(plan.chunked_bytes(&request), expected);
    }
}
