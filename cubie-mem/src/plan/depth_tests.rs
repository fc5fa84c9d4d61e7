//! Unit tests of the planner's pipeline depth: the budget shared by `d`
//! buffer sets, the sets a plan gets, and extreme depths.

use super::tests::{partition, sizes};
use super::*;
use crate::DType;

/// [`sizes`] with pipeline depth `depth`.
fn deep(total_runs: usize, c: u64, u: u64, depth: usize) -> BatchSizes {
    BatchSizes {
        depth,
        ..sizes(total_runs, c, u)
    }
}

#[test]
fn depth_one_plans_as_the_single_set_formula() {
    // alloc = free - floor(0.02 * free) without granule; max_chunk =
    // floor(runs * (alloc - U) / C); chunks = ceil(runs / max_chunk);
    // chunk_length = ceil(runs / chunks), all worked out by hand.
    for ((runs, c, u, free), (alloc, chunks, chunk_length)) in [
        // 100 * 980 / 10_000 = 9.8: 9 runs, 12 chunks, evened to 9.
        ((100, 10_000, 0, 1000), (980, 12, 9)),
        // 58 * 56_000 / 464_000 = 7 exactly: 9 chunks of 7.
        ((58, 464_000, 0, 57_142), (56_000, 9, 7)),
        // 10 * (980 - 9) / 990 = 9.8: 2 chunks of 5.
        ((10, 990, 9, 1000), (980, 2, 5)),
        // 1000 * (1_960_000 - 123_456) / 7_000_000 = 262.4: 4 chunks of 250.
        ((1000, 7_000_000, 123_456, 2_000_000), (1_960_000, 4, 250)),
        // 7 * 59 / 70 = 5.9: 2 chunks of 4.
        ((7, 70, 0, 60), (59, 2, 4)),
    ] {
        let budget = Budget::passive(free).with_granule(0);
        let p = plan_chunks(&deep(runs, c, u, 1), &budget).unwrap();
        let case = format!("{runs} runs, C {c}, U {u}, free {free}");
        assert_eq!(p.allocatable, alloc, "{case}");
        assert_eq!(p.withheld, free - alloc, "{case}");
        assert_eq!((p.chunks, p.chunk_length), (chunks, chunk_length), "{case}");
        assert_eq!(p.buffer_sets, 1, "{case}");
    }
}

#[test]
fn depth_two_halves_the_largest_chunk() {
    let budget = Budget::passive(1000).with_granule(0); // alloc 980
    // d = 1: max_chunk = 100 * 980 / 10_000 = 9; d = 2: 100 * 980 / 20_000 = 4.
    let one = plan_chunks(&deep(100, 10_000, 0, 1), &budget).unwrap();
    let two = plan_chunks(&deep(100, 10_000, 0, 2), &budget).unwrap();
    assert_eq!((one.chunks, one.chunk_length, one.buffer_sets), (12, 9, 1));
    assert_eq!((two.chunks, two.chunk_length, two.buffer_sets), (25, 4, 2));
    // Two sets of one chunk each, beside U, fit in alloc.
    let two_u = plan_chunks(&deep(100, 5_000, 80, 2), &budget).unwrap();
    // max_chunk = 100 * 900 / 10_000 = 9
    assert_eq!((two_u.chunks, two_u.chunk_length), (12, 9));
    assert!(2 * 5_000 * two_u.chunk_length as u64 / 100 + 80 <= two_u.allocatable);
    // floor(x / 2d) == floor(floor(x / d) / 2): the same halving for any figures.
    for (runs, c, u) in [(1000, 77_777, 12), (999, 400_000, 0), (64, 6400, 100)] {
        let a = plan_chunks(&deep(runs, c, u, 1), &budget).unwrap();
        let b = plan_chunks(&deep(runs, c, u, 2), &budget).unwrap();
        let room = (980 - u) as u128;
        let max1 = runs as u128 * room / c as u128;
        let max2 = runs as u128 * room / (2 * c as u128);
        assert_eq!(max2, max1 / 2);
        assert_eq!(a.chunks, runs.div_ceil(max1 as usize));
        assert_eq!(b.chunks, runs.div_ceil(max2 as usize));
    }
}

#[test]
fn buffer_sets_are_the_depth_capped_at_the_chunks() {
    let budget = Budget::passive(1000).with_granule(0); // alloc 980
    // Fits in one chunk: one set whatever the depth (R < alloc).
    let p = plan_chunks(&deep(10, 500, 0, 4), &budget).unwrap();
    assert_eq!((p.chunks, p.buffer_sets), (1, 1));
    // R >= alloc with d = 3: max_chunk = 10 * 980 / 3000 = 3, chunks 4, sets 3.
    let p = plan_chunks(&deep(10, 1000, 0, 3), &budget).unwrap();
    assert_eq!((p.chunks, p.chunk_length, p.buffer_sets), (4, 3, 3));
    // Fewer chunks than the depth: max_chunk = 100 * 980 / (8 * 1000) = 12, 9 chunks.
    let p = plan_chunks(&deep(100, 1000, 0, 8), &budget).unwrap();
    assert_eq!((p.chunks, p.buffer_sets), (9, 8));
    // The split path can still give one chunk: R == alloc with d = 1.
    let p = plan_chunks(&deep(98, 980, 0, 1), &budget).unwrap();
    assert_eq!((p.chunks, p.buffer_sets), (1, 1));
    // Nothing requested: one chunk, one set.
    let p = plan_chunks(&deep(5, 0, 0, 3), &Budget::passive(0)).unwrap();
    assert_eq!((p.chunks, p.buffer_sets), (1, 1));
    assert!(p.validate().is_ok());
}

#[test]
fn a_run_that_fits_one_set_but_not_all_names_the_depth() {
    let budget = Budget::passive(1000).with_granule(0); // alloc 980
    // One run needs 100 B per set; 11 sets need 1100 B > 980 B.
    assert!(plan_chunks(&deep(10, 1000, 0, 9), &budget).is_ok());
    let error = plan_chunks(&deep(10, 1000, 0, 11), &budget).unwrap_err();
    assert_eq!(
        error,
        MemError::SingleRunTooLarge {
            per_run: Bytes(100),
            depth: 11,
            room: Bytes(980),
            unchunkable: Bytes(0),
            withheld: Bytes(20),
            report: None,
        }
    );
    let single = plan_chunks(&sizes(10, 100_000, 0), &budget).unwrap_err();
    assert!(
        matches!(
            single,
            MemError::SingleRunTooLarge {
                per_run: Bytes(10_000),
                depth: 1,
                ..
            }
        ),
        "{single:?}"
    );
}

#[test]
fn deep_extremes_plan_without_overflow() {
    let huge = Budget::passive(u64::MAX).with_granule(0);
    // d * C is about 2^128: no overflow, and no run fits.
    assert!(matches!(
        plan_chunks(&deep(usize::MAX, u64::MAX, 0, usize::MAX), &huge),
        Err(MemError::SingleRunTooLarge {
            per_run: Bytes(1),
            depth: usize::MAX,
            ..
        })
    ));
    // A tiny batch fits in one chunk whatever the depth.
    let p = plan_chunks(&deep(usize::MAX, 1, 0, usize::MAX), &huge).unwrap();
    assert_eq!((p.chunks, p.buffer_sets), (1, 1));
    // usize::MAX runs of u64::MAX bytes at depth 2: max_chunk = runs * alloc / (2C).
    let p = plan_chunks(&deep(usize::MAX, u64::MAX, 0, 2), &huge).unwrap();
    assert!(p.validate().is_ok());
    assert_eq!((p.chunks, p.buffer_sets), (3, 2));
    // A batch that needs chunking cannot give usize::MAX sets a run each.
    let p = plan_chunks(
        &deep(4, 4000, 0, usize::MAX),
        &Budget::passive(1000).with_granule(0),
    );
    assert!(matches!(
        p,
        Err(MemError::SingleRunTooLarge {
            per_run: Bytes(1000),
            ..
        })
    ));
}

#[test]
fn zero_depth_is_an_error() {
    let error = plan_chunks(&deep(10, 100, 5, 0), &Budget::passive(1 << 30)).unwrap_err();
    assert_eq!(
        error,
        MemError::ZeroDepth {
            chunkable: Bytes(100),
            unchunkable: Bytes(5),
        }
    );
}

#[test]
fn measure_takes_the_largest_depth_of_the_chunkable_requests() {
    let state = ArrayRequest::new(DType::F64, [2, 50])
        .chunk_axis(1)
        .total_runs(50);
    let deep_state = state.clone().pipeline_depth(3);
    let init = ArrayRequest::of::<f32>([3]).unchunkable().pipeline_depth(5);
    let measure = |reqs: &[(&str, &ArrayRequest)]| BatchSizes::measure(reqs.iter().copied());
    assert_eq!(measure(&[("a", &state)]).unwrap().depth, 1);
    assert_eq!(
        measure(&[("a", &state), ("b", &deep_state)]).unwrap().depth,
        3
    );
    assert_eq!(
        measure(&[("a", &state), ("i", &init)]).unwrap().depth,
        1,
        "unchunkable"
    );
    assert_eq!(measure(&[("i", &init)]).unwrap().depth, 1, "none chunkable");
    assert!(matches!(
        measure(&[("z", &state.clone().pipeline_depth(0))]),
        Err(MemError::InvalidRequest { .. })
    ));
}

#[test]
fn reused_partitions_keep_a_valid_number_of_sets() {
    let budget = Budget::passive(1000).with_granule(0);
    let p = plan_chunks(&deep(100, 10_000, 0, 2), &budget).unwrap();
    assert_eq!((p.chunk_length, p.chunks, p.buffer_sets), (4, 25, 2));
    let finer = p.with_partition(2, 50).unwrap();
    assert_eq!(
        (finer.chunk_length, finer.chunks, finer.buffer_sets),
        (2, 50, 2)
    );
    assert!(finer.validate().is_ok());
    // A single-chunk plan keeps one set on a finer partition: only one set
    // of the full length was budgeted.
    let one = plan_chunks(&deep(100, 100, 0, 3), &budget).unwrap();
    assert_eq!((one.chunks, one.buffer_sets), (1, 1));
    let reused = one.with_partition(50, 2).unwrap();
    assert_eq!((reused.chunks, reused.buffer_sets), (2, 1));
    // Sets are capped at the (capped) chunk count.
    let hand = ChunkPlan {
        buffer_sets: 3,
        ..partition(2, 2, 1)
    };
    let capped = ChunkPlan {
        buffer_sets: 3,
        ..partition(3, 3, 1)
    }
    .with_partition(1, 5);
    assert_eq!(capped.map(|p| (p.chunks, p.buffer_sets)), Some((3, 3)));
    assert!(hand.validate().is_err(), "more sets than chunks");
}

#[test]
fn validate_checks_the_buffer_sets() {
    for (sets, reason) in [
        (0, "a plan has at least one buffer set"),
        (4, "there are more buffer sets than chunks"),
    ] {
        let plan = ChunkPlan {
            buffer_sets: sets,
            ..partition(10, 3, 4)
        };
        assert!(matches!(
            plan.validate(),
            Err(MemError::InvalidPlan { reason: r, .. }) if r == reason
        ));
    }
    for sets in 1..=3 {
        let plan = ChunkPlan {
            buffer_sets: sets,
            ..partition(10, 3, 4)
        };
        assert_eq!(plan.validate(), Ok(()));
    }
}

#[test]
fn a_reused_partition_gets_the_sets_of_the_depth_that_fit() {
    let budget = Budget::passive(1000).with_granule(0); // alloc 980
    // One chunk planned (R = 975 < alloc), reused as (4, 3) at depth 3:
    // 3 sets of 4 runs need 3 * 975 * 4 / 10 = 1170 B > 980 B, 2 fit.
    let one = plan_chunks(&deep(10, 975, 0, 3), &budget).unwrap();
    assert_eq!((one.chunks, one.buffer_sets), (1, 1));
    let reused = one.with_partition(4, 3).unwrap();
    assert_eq!((reused.chunks, reused.buffer_sets), (3, 1));
    let deep_reused = reused.sets_for(3);
    assert_eq!(deep_reused.buffer_sets, 2);
    assert!(deep_reused.validate().is_ok());
    // A small batch gets every set it asks for, capped at the chunks.
    let small = plan_chunks(&deep(10, 100, 0, 3), &budget)
        .unwrap()
        .with_partition(4, 3)
        .unwrap();
    assert_eq!(small.sets_for(3).buffer_sets, 3);
    assert_eq!(small.sets_for(8).buffer_sets, 3);
    assert_eq!(small.sets_for(1).buffer_sets, 1);
    assert_eq!(small.sets_for(0).buffer_sets, 1);
    // One chunk has one set; extreme figures do not overflow.
    assert_eq!(one.sets_for(usize::MAX).buffer_sets, 1);
    let huge = ChunkPlan {
        chunkable_bytes: u64::MAX,
        allocatable: u64::MAX,
        ..partition(usize::MAX, usize::MAX, 1)
    };
    assert_eq!(huge.sets_for(usize::MAX).buffer_sets, usize::MAX);
    let none_fit = ChunkPlan {
        chunkable_bytes: u64::MAX,
        allocatable: 1,
        ..partition(4, 2, 2)
    };
    assert_eq!(none_fit.sets_for(2).buffer_sets, 1, "never below 1");
}
