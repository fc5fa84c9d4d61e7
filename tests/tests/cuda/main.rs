//! The CUDA backend, on whatever this machine has.
//!
//! Without a usable device (no driver library, no GPU, or the stub driver of
//! `ci/cuda-stub`) every test checks the no-device path: `CudaBackend::new` fails with
//! `MemError::NoDevice` naming the cause, and the default manager falls back
//! to the simulated device. With a device the same tests exercise it:
//! allocation and free on streams, copy round trips for every element type,
//! chunked allocation of a buffer struct, eviction of an idle owner, the
//! pool's reuse across batches, pinned block reuse, asynchronous copies
//! between page-locked blocks and the device ordered by events, the pool
//! given back under pressure, and the user's own kernel (the examples'
//! `EulerDecay`) on the manager's memory, ordered across groups, across
//! new streams and with a stream bound by its raw handle.
//!
//! `CUBIE_REQUIRE_GPU=1` makes the no-device path a failure (the GPU bundle
//! sets it, so that a device run cannot pass by skipping the device), and
//! `CUBIE_CUDA_STUB=1` (set by `ci/cuda-check.sh`) pins the exact message the
//! stub driver must produce.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod copies;
mod host;
mod kernels;
mod memory;

use std::error::Error;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cubie_mem::backend::{
    Access, Backend, BackendError, DevicePtr, KernelArg, KernelBody, KernelLaunch, PinnedBlock,
    Stream,
};
use cubie_mem::cuda::{CudaBackend, GroupStream, LaunchDims, PtxModule};
use cubie_mem::{
    ArrayRequest, ArrayResponse, DeviceArray, Element, GpuBuffers, HostMemoryKind, LimitMode,
    ManagerConfig, MemError, MemoryKind, MemoryManager, PinnedArray, Registration, ReleaseReason,
    RequestSet, SimBackend, default_memmgr,
};
use cubie_mem_examples::euler_decay::{EULER_DECAY_PTX, EulerDecay};

/// What a device test returns: the manager's errors and the backend's.
type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const REQUIRE_GPU_ENV: &str = "CUBIE_REQUIRE_GPU";
const STUB_ENV: &str = "CUBIE_CUDA_STUB";

/// The device's pool figures are process-wide: one device test at a time.
static DEVICE: Mutex<()> = Mutex::new(());

fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// Checks that `error` is the clear no-device error, and that no device was
/// required.
fn check_no_device(error: &MemError) {
    assert!(
        !env_flag(REQUIRE_GPU_ENV),
        "{REQUIRE_GPU_ENV}=1 but the CUDA device cannot be used: {error}"
    );
    let MemError::NoDevice { cause } = error else {
        panic!("expected MemError::NoDevice, got {error:?}");
    };
    assert!(
        cause.contains("failed") || cause.contains("could not be loaded"),
        "the cause names the failing step or the missing driver: {cause}"
    );
    if env_flag(STUB_ENV) {
        assert_eq!(
            cause,
            "initialising the CUDA driver (cuInit) failed: CUDA_ERROR_NO_DEVICE (code 100): no \
             CUDA-capable device is detected; check that the NVIDIA driver is loaded and \
             CUDA_VISIBLE_DEVICES"
        );
    }
}

#[path = "../cuda_errors/mod.rs"]
mod cuda_errors;
use cuda_errors::{driver_failure, refusal};

/// Runs `test` on device 0 when it answers; otherwise checks the no-device
/// error.
fn on_device(test: impl FnOnce(CudaBackend) -> TestResult) {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    match CudaBackend::new(0) {
        Ok(cuda) => test(cuda).unwrap(),
        Err(error) => check_no_device(&error),
    }
}

fn manager(cuda: &CudaBackend) -> MemoryManager {
    MemoryManager::with_config(
        cuda.clone(),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

/// Counts calls of an invalidate hook.
#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

impl Counter {
    fn hook(&self) -> impl FnMut() + Send + 'static {
        let count = Arc::clone(&self.0);
        move || {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn the_default_manager_uses_the_device_only_when_it_answers() {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let mgr = default_memmgr().unwrap();
    match CudaBackend::new(0) {
        Ok(cuda) => {
            assert_eq!(mgr.backend().name(), "cuda");
            assert_eq!(
                mgr.mem_info().unwrap().total,
                cuda.mem_info().unwrap().total
            );
            assert!(!cuda.device_name().is_empty());
        }
        Err(error) => {
            check_no_device(&error);
            assert_eq!(mgr.backend().name(), "simulated");
        }
    }
}

#[test]
fn a_missing_device_ordinal_is_a_clear_error() {
    let _one_at_a_time = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let error = CudaBackend::new(4096).unwrap_err();
    let MemError::NoDevice { cause } = &error else {
        panic!("expected MemError::NoDevice, got {error:?}");
    };
    if CudaBackend::new(0).is_ok() {
        assert!(
            cause.starts_with("device 4096 was requested but the driver reports "),
            "{cause}"
        );
    } else {
        check_no_device(&error);
    }
}
