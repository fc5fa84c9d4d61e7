//! Inputs a valid program may give that the manager must not pass on to
//! the backend as they are: a page-locked host array of another manager
//! (not this backend's page-locked memory) for an asynchronous copy, also
//! through a decorator that does not say which memory is page-locked, and a
//! kernel whose duration overflows the modelled clock.

use crate::common::{manager, queuing};
use std::sync::Arc;
use std::time::Duration;

use cubie_mem::backend::{
    Backend, BackendError, DevicePtr, KernelLaunch, MemInfo, PinnedBlock, Stream,
};

use cubie_mem::{
    ArrayRequest, ChunkPlan, HostKernel, HostMemoryKind, ManagerConfig, MemError, MemoryManager,
    SimBackend,
};

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
    let (mgr, sim) = manager(1 << 30, 1 << 30);
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("y", ArrayRequest::of::<f64>([8]))])
        .unwrap();
    let y = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("y")
        .unwrap();
    y.copy_from_host(&[1.0; 8]).unwrap();
    let last_span = || sim.timeline().spans().last().cloned().unwrap();
    let upload = last_span();
    // Longer than any operation the clock takes (about 13 days), within
    // 64 bits of nanoseconds, or past them: each refused, naming the
    // kernel, with nothing run.
    for (name, duration) in [
        ("forever", Duration::MAX),
        ("nearly forever", Duration::from_nanos(u64::MAX)),
        (
            "a day too long",
            SimBackend::LONGEST_OPERATION + Duration::from_secs(86_400),
        ),
    ] {
        let mut ran = false;
        let error = HostKernel::new(name, duration)
            .updates(&y)
            .launch(|_| {
                ran = true;
                Ok(())
            })
            .unwrap_err();
        assert!(!ran, "{name} ran");
        assert!(
            matches!(&error, MemError::Kernel { kernel, .. } if kernel == name),
            "{error:?}"
        );
    }
    // The device goes on: a copy after the refused launches works, starts
    // where the device was and takes what the same copy took before.
    assert_eq!(y.to_vec().unwrap(), [1.0; 8]);
    let clock = sim.now();
    y.copy_from_host(&[2.0; 8]).unwrap();
    let again = last_span();
    assert_eq!(again.name, upload.name);
    assert_eq!(
        again.end_ns - again.start_ns,
        upload.end_ns - upload.start_ns
    );
    assert_eq!(again.start_ns, clock.as_nanos() as u64);
    assert_eq!(y.to_vec().unwrap(), [2.0; 8]);
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

/// A decorator of the simulated device that forwards the methods a backend
/// must have, and none of those with defaults: it does not say which host
/// memory is page-locked. The simulated streams it hands out refuse an
/// asynchronous copy of host memory that is not the device's own
/// page-locked memory, so handing one such memory fails the copy.
struct Forgetful {
    sim: SimBackend,
}

impl Backend for Forgetful {
    fn name(&self) -> &'static str {
        "forgetful"
    }
    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        self.sim.mem_info()
    }
    fn create_stream(&self) -> Result<Arc<dyn Stream>, BackendError> {
        self.sim.create_stream()
    }
    fn alloc_device(&self, bytes: u64, stream: &dyn Stream) -> Result<DevicePtr, BackendError> {
        self.sim.alloc_device(bytes, stream)
    }
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError> {
        self.sim.free_device(ptr, bytes, stream)
    }
    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.sim.alloc_pinned(bytes)
    }
    fn launch(&self, launch: KernelLaunch<'_>, stream: &dyn Stream) -> Result<(), BackendError> {
        self.sim.launch(launch, stream)
    }
}

#[test]
fn a_decorator_that_does_not_say_what_is_page_locked_gets_host_arrays_staged() {
    let forgetful = Forgetful {
        sim: SimBackend::new(1 << 30),
    };
    let mgr = MemoryManager::with_config(forgetful, ManagerConfig::default().granule(0));
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(
        &solver,
        [
            ("y", ArrayRequest::of::<u32>([2, 10]).unchunkable()),
            ("chunk", ArrayRequest::of::<u32>([2, 4]).unchunkable()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let (y, chunk) = (
        response.take::<u32>("y").unwrap(),
        response.take::<u32>("chunk").unwrap(),
    );
    // Page-locked host memory of another device, and of this one: the
    // decorator does not say which is which, so both are staged.
    let (other, _) = manager(1 << 30, 1 << 30);
    let elsewhere = other.register(queuing()).unwrap();
    let data: Vec<u32> = (0..20).collect();
    let foreign = other
        .create_host_array([2, 10], HostMemoryKind::Pinned, Some(&data), &elsewhere)
        .unwrap();
    let own = mgr
        .create_host_array::<u32>([2, 10], HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    y.upload_async(foreign).unwrap().wait().unwrap();
    let mut own = y.download_async(own).unwrap().wait().unwrap();
    assert_eq!(own.as_slice(), data);
    // A pipeline takes them through the staging buffers too, its kernel
    // doubling each run.
    let plan = ChunkPlan::new(10, 3, 4).unwrap();
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline()
        .inout(&mut own, chunk.along(1))
        .run(|_, _| {
            let values = chunk.to_vec()?;
            chunk.copy_from_host(&values.iter().map(|v| v * 2).collect::<Vec<_>>())
        })
        .unwrap();
    let doubled: Vec<u32> = data.iter().map(|v| v * 2).collect();
    assert_eq!(own.as_slice(), doubled);
}
