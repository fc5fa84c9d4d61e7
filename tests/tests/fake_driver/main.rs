//! The CUDA backend on the fake driver of `ci/fake-cuda`, for what only the
//! fake can show: that each misuse a GPU would punish is caught (through
//! the backend's API), that the backend's own teardown, retries and module
//! unloading never commit one, that events are reused, that memory lands
//! on the device it was asked of, that the overlapped pipeline's copies
//! are not ordered after the kernels they should overlap (from the fake's
//! order log), and that they never race with them on a buffer set's device
//! memory.
//!
//! Every test is ignored by default: `ci/cuda-check.sh` runs them with the
//! fake driver first on the loader's path (`--ignored`).
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod budget;
mod contexts;
#[cfg(feature = "cudarc")]
mod cudarc_interop;
mod devices;
mod external;
mod limits;
mod misuse;
mod ordering;
mod pinned_reuse;
mod pipeline;
mod races;
mod strided;

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::{Mutex, MutexGuard};

use cubie_mem::cuda::CudaBackend;
use cubie_mem::{ManagerConfig, MemoryManager};

#[path = "../cuda_errors/mod.rs"]
mod cuda_errors;
use cuda_errors::{driver_failure, refusal};

/// The reason every test here is ignored by default.
const NEEDS_FAKE: &str = "needs the fake driver of ci/fake-cuda on the loader's path";

/// The fake driver's state is process-wide: one test at a time.
static FAKE: Mutex<()> = Mutex::new(());

/// The fake driver's control entry points.
struct Fake {
    control: unsafe extern "C" fn(*const c_char) -> c_int,
    violations: unsafe extern "C" fn(*mut c_char, usize) -> u64,
    pointer_device: unsafe extern "C" fn(u64) -> c_int,
    calls: unsafe extern "C" fn(*const c_char) -> u64,
    _library: libloading::Library,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Fake {
    /// The loaded fake driver, reset (no sticky error, no fault knobs),
    /// held for the test.
    fn open() -> Fake {
        let guard = FAKE.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the fake driver's initialisers only read its knobs.
        let library = unsafe { libloading::Library::new("libcuda.so.1") }
            .unwrap_or_else(|error| panic!("{NEEDS_FAKE}: {error}"));
        // SAFETY: the types are the fake's exported prototypes.
        let fake = unsafe {
            Fake {
                control: *library.get(b"cubieFakeCudaControl").expect(NEEDS_FAKE),
                violations: *library.get(b"cubieFakeCudaViolations").expect(NEEDS_FAKE),
                pointer_device: *library
                    .get(b"cubieFakeCudaPointerDevice")
                    .expect(NEEDS_FAKE),
                calls: *library.get(b"cubieFakeCudaCalls").expect(NEEDS_FAKE),
                _library: library,
                _one_at_a_time: guard,
            }
        };
        fake.command("reset");
        fake
    }

    /// Runs a control command, which must be accepted.
    fn command(&self, command: &str) {
        let command = CString::new(command).unwrap();
        // SAFETY: a NUL-terminated string the call only reads.
        let status = unsafe { (self.control)(command.as_ptr()) };
        assert_eq!(status, 0, "the fake refused {command:?}");
    }

    /// The number of violations so far and the last one's message.
    fn violations(&self) -> (u64, String) {
        let mut buffer = vec![0 as c_char; 1024];
        // SAFETY: the buffer is live and its length passed.
        let count = unsafe { (self.violations)(buffer.as_mut_ptr(), buffer.len()) };
        // SAFETY: the fake wrote a NUL-terminated message into the buffer.
        let last = unsafe { CStr::from_ptr(buffer.as_ptr()) };
        (count, last.to_string_lossy().into_owned())
    }

    /// Checks that no violation happened.
    fn assert_clean(&self) {
        let (count, last) = self.violations();
        assert_eq!(
            count, 0,
            "the fake driver saw {count} violation(s), the last: {last}"
        );
    }

    /// Checks that exactly one violation happened, saying `what`, and clears it.
    fn assert_caught(&self, what: &str) {
        let (count, last) = self.violations();
        assert_eq!(
            count, 1,
            "expected one violation saying '{what}', saw {count}: {last}"
        );
        assert!(last.contains(what), "expected '{what}' in: {last}");
        self.command("reset");
    }

    /// The device whose live allocation holds `ptr`.
    fn device_of(&self, ptr: u64) -> Option<u32> {
        // SAFETY: a plain query.
        u32::try_from(unsafe { (self.pointer_device)(ptr) }).ok()
    }

    /// How many times the driver function `name` was called so far.
    fn calls(&self, name: &str) -> u64 {
        let name = CString::new(name).unwrap();
        // SAFETY: a NUL-terminated string the call only reads.
        unsafe { (self.calls)(name.as_ptr()) }
    }
}

impl Drop for Fake {
    /// Checks that the test left no violation behind (one it caught on
    /// purpose was cleared), then resets the fake for the next test.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        self.assert_clean();
        self.command("reset");
    }
}

/// A manager on `cuda` (without an allocation granule), an instance of it,
/// and one unchunkable f64 device array `y` of `len` elements it holds.
fn one_array(
    cuda: &CudaBackend,
    len: usize,
) -> (
    MemoryManager,
    cubie_mem::Instance,
    cubie_mem::DeviceArray<f64>,
) {
    let mgr = manager(cuda);
    let solver = mgr
        .register(cubie_mem::Registration::new().on_invalidate(|| {}))
        .unwrap();
    mgr.queue_request(
        &solver,
        [("y", cubie_mem::ArrayRequest::of::<f64>([len]).unchunkable())],
    )
    .unwrap();
    let y = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("y")
        .unwrap();
    (mgr, solver, y)
}

/// The CUDA backend of each manager of `set`, by device.
fn set_backends(set: &cubie_mem::DeviceSet) -> Vec<CudaBackend> {
    set.managers()
        .iter()
        .map(|m| {
            let backend = m.backend().as_any().and_then(|a| a.downcast_ref());
            backend.cloned().unwrap()
        })
        .collect()
}

/// The Euler kernel loaded on each device of `set`, and the stream of each
/// share of `buffers`, by device.
fn set_kernels<B: cubie_mem::GpuBuffers>(
    set: &cubie_mem::DeviceSet,
    buffers: &cubie_mem::DeviceSetBuffers<'_, B>,
) -> (
    Vec<cubie_mem_examples::euler_decay::EulerDecay>,
    Vec<cubie_mem::cuda::GroupStream>,
) {
    let kernels = set_backends(set)
        .iter()
        .map(|cuda| cubie_mem_examples::euler_decay::EulerDecay::load(cuda).unwrap())
        .collect();
    let streams = buffers
        .portions()
        .iter()
        .map(|share| {
            let manager = &set.managers()[share.device()];
            cubie_mem::cuda::GroupStream::of(manager, share.instance()).unwrap()
        })
        .collect();
    (kernels, streams)
}

/// A manager on `cuda` without an allocation granule.
fn manager(cuda: &CudaBackend) -> MemoryManager {
    MemoryManager::with_config(
        cuda.clone(),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

/// The initial states and decay rates of `runs` runs of the Euler kernel.
fn euler_inputs(runs: usize) -> (Vec<f64>, Vec<f64>) {
    (
        (0..runs).map(|i| 1.0 + (i % 97) as f64 / 97.0).collect(),
        (0..runs).map(|i| 0.1 + (i % 13) as f64 * 0.7).collect(),
    )
}

/// Checks that `y` holds one Euler step of `dt` from `y0` at `rates`,
/// rounded as the kernel rounds.
fn assert_one_euler_step(y: &[f64], y0: &[f64], rates: &[f64], dt: f64) {
    assert_eq!(y.len(), y0.len());
    for (run, (got, (y0, rate))) in y.iter().zip(y0.iter().zip(rates)).enumerate() {
        assert_eq!(*got, y0 + dt * -(rate * y0), "run {run}");
    }
}
