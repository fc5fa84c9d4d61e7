//! The split of a batch across simulated devices: memory decides only who
//! takes part, the modelled engines decide the shares.

use std::time::Duration;

use cubie_mem::backend::{Backend, Calibration};
use cubie_mem::plan::split::{DeviceCapacity, Skip, Workload, split, weights};
use cubie_mem::plan::{BatchSizes, Budget};
use cubie_mem::timeline::Activity;
use cubie_mem::{ArrayRequest, HostKernel, MemoryManager, Registration, SimBackend};

const GIB: u64 = 1 << 30;
const RUNS: usize = 1_000_000;

/// A batch of a million runs: 8 doubles in and out per run, and a table of
/// 1 MiB every run reads.
fn batch() -> BatchSizes {
    let requests = [
        (
            "state",
            ArrayRequest::of::<f64>([8, RUNS])
                .chunk_axis(1)
                .total_runs(RUNS),
        ),
        (
            "output",
            ArrayRequest::of::<f64>([8, RUNS])
                .chunk_axis(1)
                .total_runs(RUNS),
        ),
        ("table", ArrayRequest::of::<f64>([1 << 17]).unchunkable()),
    ];
    BatchSizes::measure(requests.iter().map(|(label, r)| (*label, r))).unwrap()
}

/// One run's work: its state up, its output down, 1 µs of kernels.
fn workload() -> Workload {
    Workload {
        upload_bytes: 64,
        download_bytes: 64,
        host_bytes: 0,
        compute: Duration::from_micros(1),
    }
}

/// The devices as the split sees them: what each can allocate now, and its
/// weight from its modelled engines.
fn capacities(devices: &[SimBackend]) -> Vec<DeviceCapacity> {
    let rates: Vec<_> = devices.iter().map(|d| d.engine_rates()).collect();
    devices
        .iter()
        .zip(weights(&workload(), &rates))
        .map(|(device, weight)| {
            let free = device.mem_info().unwrap().free;
            // Below the allocation granule nothing can be allocated.
            let allocatable = Budget::passive(free).allocatable().map_or(0, |(a, _)| a);
            DeviceCapacity {
                allocatable,
                weight,
            }
        })
        .collect()
}

#[test]
fn equal_engines_take_equal_shares_whatever_their_free_memory() {
    // A split by free memory would give 1:3, and take 0.75 of one device's
    // time instead of 0.5.
    let devices = [
        SimBackend::new(8 * GIB).with_free(GIB),
        SimBackend::new(8 * GIB).with_free(3 * GIB),
    ];
    let split = split(&batch(), &capacities(&devices)).unwrap();
    assert_eq!(split.ranges(), [0..RUNS / 2, RUNS / 2..RUNS]);
}

#[test]
fn engines_twice_as_fast_take_two_thirds() {
    let fast = SimBackend::new(8 * GIB)
        .with_free(2 * GIB)
        .with_copy_bandwidth(
            2 * SimBackend::DEFAULT_COPY_BANDWIDTH,
            2 * SimBackend::DEFAULT_COPY_BANDWIDTH,
        )
        .with_calibration(&Calibration {
            memcpy_by_threads: vec![2 * Calibration::fixed().memcpy_bandwidth(1)],
            ..Calibration::fixed()
        })
        .with_compute_speed(200);
    let slow = SimBackend::new(8 * GIB).with_free(2 * GIB);
    let per_run = |d: &SimBackend| workload().time_on(&d.engine_rates().unwrap());
    assert_eq!(per_run(&slow), 2 * per_run(&fast));
    let split = split(&batch(), &capacities(&[slow, fast])).unwrap();
    // 1,000,000 / 3 = 333,333.33: the larger remainder takes the last run.
    assert_eq!(split.ranges(), [0..333_333, 333_333..RUNS]);
    // The finishing times, per run times runs, differ by under one run.
    assert_eq!(2 * split.ranges()[0].len(), split.ranges()[1].len() - 1);
}

#[test]
fn a_device_that_cannot_hold_the_table_is_skipped_and_says_why() {
    let devices = [
        SimBackend::new(8 * GIB).with_free(GIB),
        SimBackend::new(8 * GIB).with_free(1 << 20),
        SimBackend::new(8 * GIB).with_free(GIB),
    ];
    let split = split(&batch(), &capacities(&devices)).unwrap();
    assert_eq!(
        split.ranges(),
        [0..RUNS / 2, RUNS / 2..RUNS / 2, RUNS / 2..RUNS]
    );
    assert!(matches!(
        split.skip(1),
        Some(Skip::CannotHoldUnchunkable { .. })
    ));
    assert!(
        split
            .to_string()
            .contains("device 1: no runs: cannot hold the unchunkable arrays"),
        "{split}"
    );
}

#[test]
fn a_host_kernel_on_a_device_twice_as_fast_takes_half_its_declared_time() {
    let sim = SimBackend::new(GIB).with_compute_speed(200);
    let mgr = MemoryManager::new(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    mgr.queue_request(&solver, [("x", ArrayRequest::of::<f64>([4]))])
        .unwrap();
    let x = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("x")
        .unwrap();
    HostKernel::new("step", Duration::from_micros(10))
        .writes(&x)
        .launch(|args| {
            args.write(&x)?.fill(1.0);
            Ok(())
        })
        .unwrap();
    assert_eq!(x.to_vec().unwrap(), [1.0; 4]);
    let timeline = sim.timeline();
    let kernel = timeline
        .spans()
        .iter()
        .find(|s| s.activity == Activity::Kernel)
        .unwrap();
    assert_eq!(kernel.end_ns - kernel.start_ns, 5_000);
}
