//! Unit tests and properties of the split: exact shares, reasons, the
//! planner's participation rule, and weights from engine rates.

use std::time::Duration;

use proptest::prelude::*;

use super::rates::{Workload, weights};
use super::*;
use crate::backend::EngineRates;
use crate::plan::{Budget, plan_chunks};

fn sizes(total_runs: usize, chunkable: u64, unchunkable: u64, depth: usize) -> BatchSizes {
    BatchSizes {
        total_runs,
        chunkable_bytes: chunkable,
        unchunkable_bytes: unchunkable,
        depth,
    }
}

fn device(allocatable: u64, weight: u64) -> DeviceCapacity {
    DeviceCapacity {
        allocatable,
        weight,
    }
}

const GIB: u64 = 1 << 30;

#[test]
fn memory_decides_only_who_takes_part_not_the_shares() {
    // 1 MiB per run, 64 MiB unchunkable: both devices hold many runs.
    let batch = sizes(10_000, 10_000 << 20, 64 << 20, 2);
    let split = split(&batch, &[device(GIB, 1), device(3 * GIB, 1)]).unwrap();
    assert_eq!(split.ranges(), [0..5000, 5000..10_000]);
    // Engines 2x apart: 2:1, whatever the memory.
    let split = split_of(&batch, &[device(GIB, 2), device(3 * GIB, 1)]);
    assert_eq!(split.ranges(), [0..6667, 6667..10_000]);
    let split = split_of(&sizes(3000, 3000, 0, 1), &[device(GIB, 1), device(GIB, 2)]);
    assert_eq!(split.ranges(), [0..1000, 1000..3000]);
}

fn split_of(sizes: &BatchSizes, devices: &[DeviceCapacity]) -> Split {
    split(sizes, devices).unwrap()
}

#[test]
fn left_over_runs_go_to_the_largest_remainders_ties_to_the_lower_index() {
    let batch = sizes(10, 10, 0, 1);
    assert_eq!(
        split_of(&batch, &[device(GIB, 1); 3]).ranges(),
        [0..4, 4..7, 7..10]
    );
    // Exact shares 10*1/6, 10*2/6, 10*3/6 = 1.67, 3.33, 5: the 0.67 wins.
    assert_eq!(
        split_of(&batch, &[device(GIB, 1), device(GIB, 2), device(GIB, 3)]).ranges(),
        [0..2, 2..5, 5..10]
    );
    // Two runs left over, equal remainders: the lower indices take them.
    let batch = sizes(5, 5, 0, 1);
    assert_eq!(
        split_of(&batch, &[device(GIB, 1); 3]).ranges(),
        [0..2, 2..4, 4..5]
    );
    // Fewer runs than devices.
    assert_eq!(
        split_of(&sizes(1, 1, 0, 1), &[device(GIB, 1); 4]).ranges(),
        [0..1, 1..1, 1..1, 1..1]
    );
}

#[test]
fn one_device_takes_every_run_whatever_its_memory_and_weight() {
    for capacity in [device(0, 0), device(GIB, 7), device(1, 1)] {
        let split = split_of(&sizes(123, 1 << 40, 1 << 40, 3), &[capacity]);
        assert_eq!(split.range(0), Some(0..123));
        assert_eq!(split.devices(), 1);
        assert_eq!(split.skip(0), None);
    }
}

#[test]
fn devices_that_cannot_hold_a_run_or_the_unchunkable_arrays_are_skipped() {
    // 100 runs of 10 bytes, 50 bytes unchunkable, depth 2: a run needs
    // 50 + 2 * 10 = 70 bytes.
    let batch = sizes(100, 1000, 50, 2);
    let devices = [
        device(50, 1),
        device(69, 1),
        device(70, 1),
        device(1051, 0),
        device(1051, 1),
    ];
    let split = split_of(&batch, &devices);
    assert_eq!(
        split.skip(0),
        Some(&Skip::CannotHoldUnchunkable {
            unchunkable: Bytes(50),
            allocatable: Bytes(50)
        })
    );
    assert_eq!(
        split.skip(1),
        Some(&Skip::CannotHoldOneRun {
            needed: Bytes(70),
            allocatable: Bytes(69)
        })
    );
    assert_eq!(split.skip(2), None);
    assert_eq!(split.skip(3), Some(&Skip::ZeroWeight));
    assert_eq!(split.skip(4), None);
    assert_eq!(split.ranges(), [0..0, 0..0, 0..50, 50..50, 50..100]);
    assert_eq!(
        split.participants().collect::<Vec<_>>(),
        [(2, 0..50), (4, 50..100)]
    );
    // A run that does not divide evenly: 3 runs of 10/3 bytes each, depth 1,
    // need ceil(10/3) = 4 beside the unchunkable arrays.
    let batch = sizes(3, 10, 0, 1);
    let skip = skip_reason(&batch, 3);
    assert_eq!(
        skip,
        Some(Skip::CannotHoldOneRun {
            needed: Bytes(4),
            allocatable: Bytes(3)
        })
    );
    // 3 * 4 >= 10: a run fits (the planner's floor(3 * 4 / 10) = 1).
    assert_eq!(skip_reason(&batch, 4), None);
}

#[test]
fn a_batch_that_fits_whole_or_is_empty_takes_part_everywhere() {
    assert_eq!(skip_reason(&sizes(10, 0, 0, 1), 0), None);
    // Below allocatable, in one chunk: the depth does not count.
    assert_eq!(skip_reason(&sizes(1, 100, 10, 8), 111), None);
    assert!(skip_reason(&sizes(1, 100, 10, 8), 110).is_some());
    // Nothing to allocate beside no unchunkable arrays: no run fits.
    assert_eq!(
        skip_reason(&sizes(4, 10, 0, 1), 0),
        Some(Skip::CannotHoldOneRun {
            needed: Bytes(3),
            allocatable: Bytes(0)
        })
    );
    // All unchunkable: it fits, or it does not.
    assert_eq!(skip_reason(&sizes(5, 0, 10, 1), 11), None);
    assert!(matches!(
        skip_reason(&sizes(5, 0, 10, 1), 10),
        Some(Skip::CannotHoldUnchunkable { .. })
    ));
}

#[test]
fn no_device_taking_part_is_an_error_naming_each_reason() {
    let batch = sizes(100, 1000, 50, 2);
    let err = split(&batch, &[device(10, 1), device(60, 1), device(GIB, 0)]).unwrap_err();
    let MemError::NoDeviceTakesPart { reasons } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(reasons.len(), 3);
    assert_eq!(reasons[2], Skip::ZeroWeight);
    assert_eq!(
        reasons[..2],
        [
            Skip::CannotHoldUnchunkable {
                unchunkable: Bytes(50),
                allocatable: Bytes(10)
            },
            Skip::CannotHoldOneRun {
                needed: Bytes(70),
                allocatable: Bytes(60)
            }
        ]
    );
    let weightless = split(&batch, &[device(GIB, 0), device(GIB, 0)]).unwrap_err();
    assert_eq!(
        weightless,
        MemError::NoDeviceTakesPart {
            reasons: vec![Skip::ZeroWeight, Skip::ZeroWeight]
        }
    );
    let none = split(&batch, &[]).unwrap_err();
    assert_eq!(none, MemError::NoDeviceTakesPart { reasons: vec![] });
}

#[test]
fn sizes_without_runs_or_depth_are_the_planners_errors() {
    let two = [device(GIB, 1); 2];
    assert!(matches!(
        split(&sizes(0, 0, 0, 1), &two),
        Err(MemError::ZeroRuns { .. })
    ));
    assert!(matches!(
        split(&sizes(1, 0, 0, 0), &[device(GIB, 1)]),
        Err(MemError::ZeroDepth { .. })
    ));
}

#[test]
fn a_split_reads_and_prints_per_device() {
    let split = split_of(
        &sizes(3000, 3000, 100, 1),
        &[device(GIB, 2), device(100, 1)],
    );
    assert_eq!(split.devices(), 2);
    assert_eq!(split.total_runs(), 3000);
    assert_eq!(split.range(0), Some(0..3000));
    assert_eq!(split.range(2), None);
    assert_eq!(split.skip(2), None);
    assert_eq!(
        split.to_string(),
        "device 0: runs 0..3000 (3,000 runs)\ndevice 1: no runs: cannot hold the unchunkable \
         arrays: needs more than 100 B, can allocate 100 B"
    );
    let one = split_of(&sizes(1, 1, 0, 1), &[device(GIB, 1)]);
    assert_eq!(one.to_string(), "device 0: runs 0..1 (1 run)");
    assert_eq!(
        Skip::CannotHoldOneRun {
            needed: Bytes(2048),
            allocatable: Bytes(1000)
        }
        .to_string(),
        "cannot hold one run in each buffer set beside the unchunkable arrays: needs 2048 B \
         (2.00 KiB), can allocate 1000 B"
    );
}

#[test]
fn extreme_figures_neither_overflow_nor_lose_a_run() {
    let batch = sizes(usize::MAX, u64::MAX, 0, usize::MAX);
    let split = split_of(&batch, &[device(u64::MAX, u64::MAX); 3]);
    assert_eq!(split.total_runs(), usize::MAX);
    // usize::MAX = 3 * (usize::MAX / 3): equal thirds.
    let third = usize::MAX / 3;
    assert_eq!(
        split.ranges(),
        [0..third, third..2 * third, 2 * third..usize::MAX]
    );
    assert_eq!(
        skip_reason(&sizes(1, u64::MAX, u64::MAX, usize::MAX), u64::MAX),
        Some(Skip::CannotHoldUnchunkable {
            unchunkable: Bytes(u64::MAX),
            allocatable: Bytes(u64::MAX)
        })
    );
    assert_eq!(
        skip_reason(&sizes(1, u64::MAX, 0, usize::MAX), u64::MAX),
        Some(Skip::CannotHoldOneRun {
            needed: Bytes(u64::MAX),
            allocatable: Bytes(u64::MAX)
        })
    );
}

fn rates(bandwidth: u64, percent: u32) -> Option<EngineRates> {
    Some(EngineRates::new(bandwidth, bandwidth, bandwidth, percent))
}

#[test]
fn weights_follow_the_slowest_engine_exactly() {
    let work = Workload {
        upload_bytes: 1000,
        download_bytes: 500,
        host_bytes: 0,
        compute: Duration::from_micros(1),
    };
    // 1 GB/s: 1 µs up, 0.5 µs down, 1 µs compute: 1 µs a run.
    let base = rates(1_000_000_000, 100);
    assert_eq!(weights(&work, &[base, base]), [FAST; 2]);
    // Twice as fast on every engine: twice the weight.
    let w = weights(&work, &[rates(2_000_000_000, 200), base]);
    assert_eq!(w, [FAST, FAST / 2]);
    // Faster compute alone does not help a device bound by its uploads.
    assert_eq!(
        weights(&work, &[rates(1_000_000_000, 400), base]),
        [FAST; 2]
    );
    // A third as fast: floor(2^62 / 3).
    let w = weights(&work, &[rates(3_000_000_000, 300), base]);
    assert_eq!(w, [FAST, FAST / 3]);
    // The host's staging is an engine too.
    let staged = Workload {
        host_bytes: 4000,
        ..work
    };
    let slow_host = Some(EngineRates::new(
        1_000_000_000,
        1_000_000_000,
        2_000_000_000,
        100,
    ));
    // 2 µs of staging against 4 µs.
    assert_eq!(weights(&staged, &[slow_host, base]), [FAST, FAST / 2]);
    assert_eq!(
        staged.time_on(&EngineRates::new(1, 1, 2_000_000_000, 100)),
        Duration::from_secs(1000)
    );
}

const FAST: u64 = 1 << 62;

#[test]
fn unknown_rates_or_empty_work_weigh_devices_equally() {
    let work = Workload {
        compute: Duration::from_micros(1),
        ..Workload::default()
    };
    assert_eq!(weights(&work, &[rates(1, 100), None]), [EQUAL_WEIGHT; 2]);
    assert_eq!(
        weights(&Workload::default(), &[rates(1, 100), rates(7, 3)]),
        [EQUAL_WEIGHT; 2]
    );
    assert_eq!(weights(&work, &[]), Vec::<u64>::new());
    // Over 2^62 times slower: weight 0.
    // 1 s against 2^64 - 1 s.
    let huge = Workload {
        upload_bytes: u64::MAX,
        ..Workload::default()
    };
    assert_eq!(
        weights(&huge, &[rates(u64::MAX, 100), rates(1, 100)]),
        [FAST, 0]
    );
}

#[test]
fn the_time_on_a_device_is_its_slowest_engine_rounded_up() {
    let work = Workload {
        upload_bytes: 1,
        download_bytes: 0,
        host_bytes: 0,
        compute: Duration::from_nanos(10),
    };
    // 1 byte at 3 B/s: a third of a second, rounded up.
    let slow_copies = EngineRates::new(3, 3, 3, 100);
    assert_eq!(
        work.time_on(&slow_copies),
        Duration::from_nanos(333_333_334)
    );
    // 10 ns at 300%: 3.33 ns, rounded up.
    let fast = EngineRates::new(u64::MAX, u64::MAX, u64::MAX, 300);
    assert_eq!(work.time_on(&fast), Duration::from_nanos(4));
    let endless = Workload {
        compute: Duration::MAX,
        ..work
    };
    assert_eq!(
        endless.time_on(&EngineRates::new(1, 1, 1, 1)),
        Duration::from_nanos(u64::MAX)
    );
}

/// Checks every property of a split of `batch` across `devices`.
fn check_split(batch: &BatchSizes, devices: &[DeviceCapacity]) -> Result<(), TestCaseError> {
    let result = split(batch, devices);
    prop_assert_eq!(&result, &split(batch, devices), "deterministic");
    let expected: Vec<Option<Skip>> = devices
        .iter()
        .map(|d| skip_reason(batch, d.allocatable).or((d.weight == 0).then_some(Skip::ZeroWeight)))
        .collect();
    let total_weight: u128 = devices
        .iter()
        .zip(&expected)
        .filter(|(_, skip)| skip.is_none())
        .map(|(d, _)| u128::from(d.weight))
        .sum();
    let split = match result {
        Err(MemError::NoDeviceTakesPart { reasons }) => {
            prop_assert!(devices.len() != 1 && total_weight == 0);
            let expected: Vec<Skip> = expected.into_iter().flatten().collect();
            prop_assert_eq!(reasons, expected);
            return Ok(());
        }
        other => other.map_err(|e| TestCaseError::fail(e.to_string()))?,
    };
    prop_assert_eq!(split.devices(), devices.len());
    if devices.len() == 1 {
        prop_assert_eq!(split.range(0), Some(0..batch.total_runs));
        return Ok(());
    }
    let mut next = 0;
    for (i, runs) in split.ranges().iter().enumerate() {
        prop_assert_eq!(runs.start, next, "contiguous, in device order");
        prop_assert!(runs.start <= runs.end);
        next = runs.end;
        prop_assert_eq!(split.skip(i), expected[i].as_ref());
        if expected[i].is_some() {
            prop_assert!(runs.is_empty());
            continue;
        }
        // |len - total * w / W| < 1: the floor or, with a remainder, one more.
        let exact = batch.total_runs as u128 * u128::from(devices[i].weight);
        let (floor, remainder) = (exact / total_weight, exact % total_weight);
        let len = runs.len() as u128;
        prop_assert!(
            len == floor || (remainder > 0 && len == floor + 1),
            "device {} has {} runs, exact share {}/{}",
            i,
            len,
            exact,
            total_weight
        );
    }
    prop_assert_eq!(next, batch.total_runs, "every run once");
    Ok(())
}

fn any_runs() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..1000, 1usize..=usize::MAX, Just(usize::MAX)]
}

fn any_bytes() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0u64..100_000, any::<u64>(), Just(u64::MAX)]
}

fn any_device() -> impl Strategy<Value = DeviceCapacity> {
    let weight = prop_oneof![Just(0u64), 1u64..10, any::<u64>(), Just(u64::MAX)];
    (any_bytes(), weight).prop_map(|(allocatable, weight)| device(allocatable, weight))
}

proptest! {
    #![proptest_config(crate::proptest_cases(2000))]

    #[test]
    fn splits_are_exact_contiguous_and_explained(
        total_runs in any_runs(),
        per_run in 0u64..1000,
        unchunkable in any_bytes(),
        depth in 1usize..4,
        devices in prop::collection::vec(any_device(), 1..8),
    ) {
        let chunkable = per_run.saturating_mul(u64::try_from(total_runs).unwrap_or(u64::MAX));
        check_split(&sizes(total_runs, chunkable, unchunkable, depth), &devices)?;
    }

    #[test]
    fn devices_take_part_exactly_when_their_planner_can_plan_the_batch(
        total_runs in 1usize..100_000,
        per_run in 0u64..10_000,
        unchunkable in prop_oneof![Just(0u64), 0u64..1_000_000],
        free in 0u64..2_000_000_000,
        depth in 1usize..5,
    ) {
        let batch = sizes(total_runs, per_run * total_runs as u64, unchunkable, depth);
        let (allocatable, _) = Budget::passive(free).with_granule(0).allocatable().unwrap();
        let planned = plan_chunks(&batch, &Budget::passive(free).with_granule(0));
        match (skip_reason(&batch, allocatable), planned) {
            (None, Ok(_)) => {}
            (Some(Skip::CannotHoldUnchunkable { .. }),
             Err(MemError::UnchunkableTooLarge { .. } | MemError::AllUnchunkable { .. })) => {}
            (Some(Skip::CannotHoldOneRun { needed, .. }),
             Err(MemError::SingleRunTooLarge { .. })) => {
                prop_assert!(needed.0 > allocatable);
            }
            (skip, plan) => prop_assert!(false, "{skip:?} but the planner gives {plan:?}"),
        }
    }

    #[test]
    fn identical_devices_get_equal_weights_and_faster_ones_more(
        upload in any_bytes(),
        download in any_bytes(),
        compute in any::<u64>(),
        bandwidth in 1u64..=u64::MAX,
        percent in 1u32..=u32::MAX,
        count in 1usize..8,
    ) {
        let work = Workload {
            upload_bytes: upload,
            download_bytes: download,
            host_bytes: 0,
            compute: Duration::from_nanos(compute),
        };
        let same = weights(&work, &vec![rates(bandwidth, percent); count]);
        prop_assert!(same.iter().all(|&w| w == same[0]));
        let faster = rates(bandwidth.saturating_mul(2), percent.saturating_mul(2));
        let w = weights(&work, &[faster, rates(bandwidth, percent)]);
        prop_assert!(w[0] >= w[1]);
        let fastest = if work == Workload::default() { EQUAL_WEIGHT } else { FAST };
        prop_assert_eq!(w.iter().max(), Some(&fastest));
    }
}
