//! Host memory prepared once: streamers use the manager's staging pool, so
//! a second batch reuses the page-locked buffers the first one made and the
//! modelled host pays page-locking once; a new spill file costs the host
//! its pages' first touch once, when it is made.

use crate::common;
use std::time::Duration;

use cubie_mem::backend::Calibration;
use cubie_mem::timeline::Activity;
use cubie_mem::{
    ArrayRequest, ChunkPlan, HostKernel, HostMemoryKind, MemError, Registration, SimBackend,
};

#[test]
fn a_second_batch_reuses_the_first_batchs_staging_buffers() {
    let sim = SimBackend::new(1 << 30);
    let mgr = common::manager_on(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    mgr.queue_request(
        &solver,
        [("x", ArrayRequest::of::<f64>([2, 100]).unchunkable())],
    )
    .unwrap();
    let x = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("x")
        .unwrap();
    let runs = 1000;
    let data: Vec<f64> = (0..2 * runs).map(|i| i as f64).collect();
    let mut host = mgr
        .create_host_array([2, runs], HostMemoryKind::Pageable, Some(&data), &solver)
        .unwrap();
    let plan = ChunkPlan::new(runs, 10, 100).unwrap();
    let batch = |host: &mut cubie_mem::HostArray<f64>| {
        sim.clear_timeline();
        mgr.chunk_streamer(&solver, &plan)
            .unwrap()
            .pipeline()
            .inout(host, x.along(1))
            .run(|_, _| {
                HostKernel::new("add one", Duration::from_micros(1))
                    .updates(&x)
                    .launch(|args| {
                        args.write(&x)?.iter_mut().for_each(|v| *v += 1.0);
                        Ok::<_, MemError>(())
                    })
            })
            .unwrap();
        sim.timeline()
    };
    let first = batch(&mut host);
    let pool = mgr.chunk_streamer(&solver, &plan).unwrap().pool().clone();
    let allocations = pool.pinned_allocations();
    // An inout binding stages both ways: two buffers each way, 1,600
    // bytes each, page-locked once.
    assert_eq!(allocations, 4);
    assert_eq!(first.busy_ns(Activity::PageLock), 4 * 360);
    let second = batch(&mut host);
    assert_eq!(second.busy_ns(Activity::PageLock), 0, "nothing page-locked");
    assert_eq!(pool.pinned_allocations(), allocations);
    assert_eq!(
        second.busy_ns(Activity::HostStaging),
        first.busy_ns(Activity::HostStaging)
    );
    let twice: Vec<f64> = data.iter().map(|v| v + 2.0).collect();
    assert_eq!(host.as_slice(), twice);
    pool.clear();
    assert_eq!(pool.idle_buffers(), 0);
}

#[test]
fn a_new_spill_file_costs_the_host_its_first_touch_once() {
    // A page a microsecond: 4 GB/s.
    let sim = SimBackend::new(1 << 30).with_calibration(&Calibration {
        first_touch: 4_000_000_000,
        ..Calibration::fixed()
    });
    let mgr = common::manager_on(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let mut spilled = mgr
        .create_host_array::<f64>([1000, 50], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    let timeline = sim.timeline();
    // 400,000 bytes at 4 GB/s.
    assert_eq!(timeline.busy_ns(Activity::FirstTouch), 100_000);
    assert_eq!(sim.now(), Duration::from_micros(100), "the host was busy");
    spilled.as_mut_slice().fill(1.0);
    let pageable = mgr
        .create_host_array::<f64>([1000, 50], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    assert_eq!(
        sim.timeline().busy_ns(Activity::FirstTouch),
        100_000,
        "only a spill file is pre-faulted"
    );
    drop((spilled, pageable));
}
