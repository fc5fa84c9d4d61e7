//! What belongs to one device's context, across the fake driver's two
//! devices: a fault on device 0 is sticky in device 0's context only (the
//! set stops device 1 cleanly, which stays usable); page-locked blocks of
//! one device are page-locked for the other's copies (portable); and the
//! host's wait policy reaches the primary context and the events.

use std::ffi::{c_int, c_uint};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cubie_mem::backend::{Backend, BackendError};
use cubie_mem::cuda::{CudaBackend, CudaConfig, GroupStream, HostWait, LaunchDims, PtxModule};
use cubie_mem::{
    ArrayRequest, DeviceArray, DeviceSet, DeviceSetBuffers, GpuBuffers, HostMemoryKind, LimitMode,
    ManagerConfig, MemError, Registration, Throughput,
};
use cubie_mem_examples::euler_decay::{EULER_DECAY_PTX, EulerDecay};

use super::*;
use cubie_mem_tests::ThreadExit;

pub struct Dims {
    pub n_runs: usize,
}

/// The state and the rates of the Euler kernel, two buffer sets.
#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Decay {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    y: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    k: DeviceArray<f64>,
}

const DT: f64 = 0.01;
const RUNS: usize = 200_000;

/// Both devices of the fake, each budgeted `budget` bytes, so that each
/// share of the batch goes in several chunks.
fn small_set(budget: u64) -> (DeviceSet, Vec<f64>) {
    let set = DeviceSet::cuda(ManagerConfig::default().granule(0)).unwrap();
    assert_eq!(set.len(), 2, "the fake lists two devices");
    let shares = set
        .managers()
        .iter()
        .map(|manager| {
            manager.set_limit_mode(LimitMode::Active);
            budget as f64 / manager.mem_info().unwrap().total as f64
        })
        .collect();
    (set, shares)
}

/// Waits (a minute at most) until `done`.
fn wait_for(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() && start.elapsed() < Duration::from_secs(60) {
        std::thread::yield_now();
    }
}

/// The batch over `set`, each device's share budgeted as `shares` says.
fn allocate<'s>(set: &'s DeviceSet, shares: &[f64]) -> DeviceSetBuffers<'s, Decay> {
    set.allocate::<Decay>(
        RUNS,
        &Throughput::Equal,
        |device| {
            Decay::registration()
                .proportion(shares[device])
                .on_invalidate(|| {})
        },
        |n_runs| Dims { n_runs },
    )
    .unwrap()
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn a_fault_on_device_0_stops_the_set_and_leaves_device_1_usable() {
    let fake = Fake::open();
    let (set, shares) = small_set(256 << 10);
    let cuda = set_backends(&set);
    let buffers = allocate(&set, &shares);
    let half = RUNS / 2;
    assert_eq!(buffers.split().ranges(), [0..half, half..RUNS]);
    let plan = *buffers.portions()[1].buffers().plan();
    assert!(plan.chunks() >= 4, "{plan:?}");
    let kernel = EulerDecay::load(&cuda[1]).unwrap();
    let module = PtxModule::from_ptx(&cuda[0], EULER_DECAY_PTX).unwrap();
    let faulty = module.function("euler_decay").unwrap();
    let streams: Vec<GroupStream> = buffers
        .portions()
        .iter()
        .map(|share| GroupStream::of(&set.managers()[share.device()], share.instance()).unwrap())
        .collect();
    let (y0, rates) = euler_inputs(RUNS);
    let first = &set.managers()[0];
    let holder = first.register(Registration::new()).unwrap();
    let mut y = first
        .create_host_array([RUNS], HostMemoryKind::Pageable, Some(&y0), &holder)
        .unwrap();
    let k = first
        .create_host_array([RUNS], HostMemoryKind::Pageable, Some(&rates), &holder)
        .unwrap();
    let launched_on_1 = AtomicUsize::new(0);
    let device_0_ended = ThreadExit::new();
    let failed = buffers
        .pipeline()
        .inout(&mut y, |set| &set.y)
        .input(&k, |set| &set.k)
        .run(|device, _, set| {
            if device == 1 {
                // From its third chunk on, device 1 waits until device 0's
                // thread has ended, after its fault stopped the set.
                if launched_on_1.load(Ordering::SeqCst) >= 2 {
                    device_0_ended.wait();
                }
                kernel.step(&streams[1], &set.y, &set.k, DT)?;
                launched_on_1.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            // Device 0 faults once device 1 computed two chunks: its kernel
            // runs past the end of its arrays (an illegal address).
            wait_for(|| launched_on_1.load(Ordering::SeqCst) >= 2);
            device_0_ended.arm();
            let stream = &streams[0];
            let (y, k) = (stream.view(&set.y)?, stream.view(&set.k)?);
            let (dt, past_the_end) = (DT, 2 * y.len() as u32);
            // SAFETY: deliberately unsound: `past_the_end` elements are
            // twice what the views hold; the fake driver reports the
            // kernel's range as an illegal address instead of running it.
            unsafe {
                stream
                    .launch_builder(&faulty)
                    .arg(&y)
                    .arg(&k)
                    .arg(&dt)
                    .arg(&past_the_end)
                    .launch(LaunchDims::for_elements(past_the_end, 256))
            }
        })
        .unwrap_err();
    assert_eq!(failed.device(), Some(0), "{failed}");
    assert!(
        matches!(
            failed.error(),
            MemError::Backend {
                error: BackendError::ContextLost { code: 700, .. },
                ..
            }
        ),
        "{failed}"
    );
    let saved = failed.saved_runs();
    assert_eq!(saved[0], 0..0, "device 0 computed nothing");
    assert_eq!(saved[1].start, half);
    assert!(
        saved[1].len() >= 2 * plan.chunk_length(),
        "device 1 saved the chunks it computed: {saved:?}"
    );
    assert!(saved[1].end < RUNS, "the set stopped device 1: {saved:?}");
    for run in saved[1].clone() {
        assert_eq!(
            y.as_slice()[run],
            y0[run] + DT * -(rates[run] * y0[run]),
            "run {run}"
        );
    }
    drop(buffers);

    // Device 0's context is lost; device 1's still allocates, copies and frees.
    let lost = cuda[0].mem_info().unwrap_err();
    assert!(
        matches!(lost, BackendError::ContextLost { code: 700, .. }),
        "{lost}"
    );
    let manager = &set.managers()[1];
    let solver = manager
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    manager
        .queue_request(
            &solver,
            [("after", ArrayRequest::of::<f64>([4096]).unchunkable())],
        )
        .unwrap();
    let after = manager
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("after")
        .unwrap();
    after.copy_from_host(&y0[..4096]).unwrap();
    assert_eq!(after.to_vec().unwrap(), y0[..4096]);
    drop(after);
    cuda[1].synchronize_device().unwrap();
    fake.assert_caught("illegal address");
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn pinned_host_arrays_of_device_0_are_page_locked_for_device_1s_copies() {
    let fake = Fake::open();
    let (set, shares) = small_set(1 << 20);
    let buffers = allocate(&set, &shares);
    let (kernels, streams) = set_kernels(&set, &buffers);
    let (y0, rates) = euler_inputs(RUNS);
    // Both arrays are page-locked by device 0's manager: device 1 copies
    // them directly, unstaged, which needs them portable.
    let first = &set.managers()[0];
    let holder = first.register(Registration::new()).unwrap();
    let mut y = first
        .create_host_array([RUNS], HostMemoryKind::Pinned, Some(&y0), &holder)
        .unwrap();
    let k = first
        .create_host_array([RUNS], HostMemoryKind::Pinned, Some(&rates), &holder)
        .unwrap();
    let copies = fake.calls("cuMemcpyHtoDAsync_v2");
    buffers
        .pipeline()
        .inout(&mut y, |set| &set.y)
        .input(&k, |set| &set.k)
        .run(|device, _, set| kernels[device].step(&streams[device], &set.y, &set.k, DT))
        .unwrap();
    fake.assert_clean();
    assert!(fake.calls("cuMemcpyHtoDAsync_v2") > copies);
    assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
    drop(buffers);
}

/// The fake driver's primary context and event queries.
struct Driver {
    get_state: unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> u32,
    set_flags: unsafe extern "C" fn(c_int, c_uint) -> u32,
    events: unsafe extern "C" fn(c_uint) -> u64,
    _library: libloading::Library,
}

impl Driver {
    fn open() -> Driver {
        // SAFETY: the fake driver's initialisers only read its knobs.
        let library = unsafe { libloading::Library::new("libcuda.so.1") }.expect(NEEDS_FAKE);
        // SAFETY: the types are the driver's prototypes and the fake's.
        unsafe {
            Driver {
                get_state: *library
                    .get(b"cuDevicePrimaryCtxGetState")
                    .expect(NEEDS_FAKE),
                set_flags: *library
                    .get(b"cuDevicePrimaryCtxSetFlags_v2")
                    .expect(NEEDS_FAKE),
                events: *library.get(b"cubieFakeCudaEvents").expect(NEEDS_FAKE),
                _library: library,
            }
        }
    }

    /// The primary context's flags of `device`.
    fn flags(&self, device: c_int) -> c_uint {
        let (mut flags, mut active) = (0, 0);
        // SAFETY: both out-pointers are live.
        assert_eq!(
            unsafe { (self.get_state)(device, &mut flags, &mut active) },
            0
        );
        flags
    }

    /// Sets them directly, as another library of the process could.
    fn set_flags(&self, device: c_int, flags: c_uint) {
        // SAFETY: a plain call.
        assert_eq!(unsafe { (self.set_flags)(device, flags) }, 0);
    }

    /// Live events created with exactly `flags`.
    fn events(&self, flags: c_uint) -> u64 {
        // SAFETY: a plain query.
        unsafe { (self.events)(flags) }
    }
}

/// An allocation on `cuda`, an event after it waited for, and its free.
fn allocate_and_free(cuda: &CudaBackend) {
    let stream = cuda.create_stream().unwrap();
    let ptr = cuda.alloc_device(4096, &*stream).unwrap();
    stream.record().unwrap().synchronize().unwrap();
    cuda.free_device(ptr, 4096, &*stream).unwrap();
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn the_host_wait_policy_reaches_the_primary_context_and_the_events() {
    let fake = Fake::open();
    let driver = Driver::open();
    let with = |host_wait| {
        CudaBackend::with_config(
            1,
            CudaConfig {
                host_wait,
                ..CudaConfig::default()
            },
        )
        .unwrap()
    };
    // Another user of the device set LMEM_RESIZE_TO_MAX (16) and yield.
    driver.set_flags(1, 16 | 2);
    let cuda = with(HostWait::Driver);
    assert_eq!(
        driver.flags(1),
        16 | 2,
        "Driver leaves the flags as they are"
    );
    let blocking = driver.events(1 | 2);
    allocate_and_free(&cuda);
    assert_eq!(driver.events(1 | 2), blocking, "Driver's events busy-wait");
    drop(cuda);

    for (host_wait, schedule) in [
        (HostWait::Spin, 1),
        (HostWait::Yield, 2),
        (HostWait::Block, 4),
    ] {
        let cuda = with(host_wait);
        assert_eq!(driver.flags(1), 16 | schedule, "{host_wait:?}");
        allocate_and_free(&cuda);
        let blocking_events = driver.events(1 | 2) > blocking;
        assert_eq!(
            blocking_events,
            host_wait == HostWait::Block,
            "{host_wait:?}"
        );
        drop(cuda);
    }

    // A driver that keeps the flags of an active context: a warning, and
    // the backend works (its events still block).
    driver.set_flags(1, 0);
    let tries = fake.calls("cuDevicePrimaryCtxSetFlags_v2");
    fake.command("fail=cuDevicePrimaryCtxSetFlags_v2:708");
    let cuda = with(HostWait::Block);
    fake.command("reset");
    assert_eq!(fake.calls("cuDevicePrimaryCtxSetFlags_v2"), tries + 1);
    assert_eq!(driver.flags(1), 0);
    let blocking = driver.events(1 | 2);
    allocate_and_free(&cuda);
    assert!(driver.events(1 | 2) > blocking);
    drop(cuda);
}
