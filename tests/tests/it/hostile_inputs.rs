//! Inputs a valid program may give that the manager must not pass on to
//! the backend as they are: a page-locked host array of another manager
//! (not this backend's page-locked memory) for an asynchronous copy, and a
//! kernel whose duration overflows the modelled clock.

use crate::common::{manager, queuing};
use std::time::Duration;

use cubie_mem::{ArrayRequest, ChunkPlan, HostKernel, HostMemoryKind, MemError};

#[test]
fn another_managers_page_locked_array_is_staged_both_ways() {
    let (mgr, sim) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("y", ArrayRequest::of::<f64>([1000]))])
        .unwrap();
    let y = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("y")
        .unwrap();
    let (other, _) = manager(1 << 30, 1 << 30);
    let elsewhere = other.register(queuing()).unwrap();
    let data: Vec<f64> = (0..1000).map(f64::from).collect();
    let foreign = other
        .create_host_array([1000], HostMemoryKind::Pinned, Some(&data), &elsewhere)
        .unwrap();

    let foreign = y.upload_async(foreign).unwrap().wait().unwrap();
    assert_eq!(y.to_vec().unwrap(), data);
    let mut zeros = foreign;
    zeros.as_mut_slice().fill(0.0);
    let back = y.download_async(zeros).unwrap().wait().unwrap();
    assert_eq!(back.as_slice(), data);
    assert_eq!(sim.live_allocations(), 1);
}

#[test]
fn a_kernel_past_the_modelled_clock_is_refused_at_launch() {
    let (mgr, _sim) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("y", ArrayRequest::of::<f64>([8]))])
        .unwrap();
    let y = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("y")
        .unwrap();
    y.copy_from_host(&[1.0; 8]).unwrap();
    let mut ran = false;
    let error = HostKernel::new("forever", Duration::MAX)
        .updates(&y)
        .launch(|_| {
            ran = true;
            Ok(())
        })
        .unwrap_err();
    assert!(!ran);
    assert!(
        matches!(&error, MemError::Kernel { kernel, .. } if kernel == "forever"),
        "{error:?}"
    );
    // A duration within 64 bits of nanoseconds that the device's clock,
    // already past 0, cannot hold is refused by the device, named as well.
    let error = HostKernel::new("nearly forever", Duration::from_nanos(u64::MAX))
        .updates(&y)
        .launch(|_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(&error, MemError::Kernel { kernel, .. } if kernel == "nearly forever"),
        "{error:?}"
    );
    // The device goes on: a copy after the refused launches works.
    assert_eq!(y.to_vec().unwrap(), [1.0; 8]);
    y.copy_from_host(&[2.0; 8]).unwrap();
}

#[test]
fn another_managers_page_locked_arrays_bound_to_a_pipeline_are_staged() {
    let (mgr, _sim) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            ("in", ArrayRequest::of::<u32>([2, 4]).unchunkable()),
            ("out", ArrayRequest::of::<u32>([2, 4]).unchunkable()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let (device_in, device_out) = (
        response.take::<u32>("in").unwrap(),
        response.take::<u32>("out").unwrap(),
    );
    let (other, _) = manager(1 << 30, 1 << 30);
    let elsewhere = other.register(queuing()).unwrap();
    let data: Vec<u32> = (0..20).collect();
    let host_in = other
        .create_host_array([2, 10], HostMemoryKind::Pinned, Some(&data), &elsewhere)
        .unwrap();
    let mut host_out = other
        .create_host_array::<u32>([2, 10], HostMemoryKind::Pinned, None, &elsewhere)
        .unwrap();
    let plan = ChunkPlan::new(10, 3, 4).unwrap();
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline()
        .input(&host_in, device_in.along(1))
        .output(&mut host_out, device_out.along(1))
        .run(|_, _| {
            let values = device_in.to_vec()?;
            device_out.copy_from_host(&values.iter().map(|v| v * 2).collect::<Vec<_>>())
        })
        .unwrap();
    let doubled: Vec<u32> = data.iter().map(|v| v * 2).collect();
    assert_eq!(host_out.as_slice(), doubled);
}
