//! Properties of the pure planner over random batches and budgets.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cubie_mem::MemError;
use cubie_mem::plan::{BatchSizes, Budget, plan_chunks};
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
    ) {
        let sizes = BatchSizes {
            total_runs,
            chunkable_bytes: bytes_per_run * total_runs as u64,
            unchunkable_bytes: unchunkable,
        };
        let budget = Budget::passive(free).with_granule(granule);
        match plan_chunks(&sizes, &budget) {
            Ok(plan) => {
                prop_assert!(plan.chunks >= 1 && plan.chunk_length >= 1);
                prop_assert!(plan.chunk_length * plan.chunks >= total_runs, "every run is covered");
                prop_assert!(plan.chunk_length * (plan.chunks - 1) < total_runs, "no empty chunk");
                prop_assert_eq!(plan.chunk_ranges().map(|r| r.len()).sum::<usize>(), total_runs);
                if plan.chunks > 1 {
                    // One chunk's arrays fit in what may be allocated.
                    let chunk_bytes = bytes_per_run * plan.chunk_length as u64 + unchunkable;
                    prop_assert!(chunk_bytes <= plan.allocatable, "{chunk_bytes} > {}", plan.allocatable);
                } else {
                    prop_assert!(sizes.total_bytes() <= plan.allocatable);
                }
                prop_assert_eq!(plan.allocatable + plan.withheld, free);
            }
            Err(MemError::BelowGranule { .. }) => prop_assert!(free < granule),
            Err(MemError::UnchunkableTooLarge { .. }) => {
                let (alloc, _) = budget.allocatable().unwrap();
                prop_assert!(alloc <= unchunkable);
            }
            Err(MemError::SingleRunTooLarge { .. }) => {
                let (alloc, _) = budget.allocatable().unwrap();
                prop_assert!(alloc - unchunkable < bytes_per_run);
            }
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    #[test]
    fn more_memory_never_means_more_chunks(
        total_runs in 1usize..50_000,
        bytes_per_run in 1u64..4_000,
        free in 1_000u64..500_000_000,
        extra in 0u64..500_000_000,
    ) {
        let sizes = BatchSizes { total_runs, chunkable_bytes: bytes_per_run * total_runs as u64, unchunkable_bytes: 0 };
        let small = plan_chunks(&sizes, &Budget::passive(free).with_granule(0));
        let large = plan_chunks(&sizes, &Budget::passive(free + extra).with_granule(0));
        if let (Ok(small), Ok(large)) = (small, large) {
            prop_assert!(large.chunks <= small.chunks);
        }
    }
}
