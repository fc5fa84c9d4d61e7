//! The CUDA driver as the backend uses it: result codes turned into
//! [`BackendError`]s (or, while the device is being opened,
//! [`MemError::NoDevice`]s that name the cause), the device with its primary
//! context and memory pool, the per-call context guard, and non-blocking
//! streams and events.
//!
//! cust's own `Stream` drops the non-blocking flag (cust issue #15) and its
//! `Event` cannot be recorded on a stream it did not create, so streams and
//! events are created here through `cust::sys` and destroyed by their `Drop`.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use cust::context::Context;
use cust::device::Device;
use cust::error::CudaError;
use cust::sys as cu;

use crate::MemError;
use crate::backend::BackendError;

/// The backend's name in messages.
pub(super) const NAME: &str = "cuda";

/// A failure code from the driver, either straight from `cust::sys` or
/// through one of cust's safe types.
pub(super) trait DriverCode {
    /// The numeric `CUresult`.
    fn code(&self) -> u32;
    /// The symbolic name (`CUDA_ERROR_NO_DEVICE`, or cust's `NoDevice`).
    fn name(&self) -> String;
}

impl DriverCode for cu::CUresult {
    fn code(&self) -> u32 {
        *self as u32
    }
    fn name(&self) -> String {
        format!("{self:?}")
    }
}

impl DriverCode for CudaError {
    fn code(&self) -> u32 {
        *self as u32
    }
    fn name(&self) -> String {
        // Debug, not Display: cust's Display asks the driver for the text and
        // fails when the driver library cannot answer.
        format!("{self:?}")
    }
}

/// What a code means for the user, for the codes that explain a setup problem.
fn hint(code: u32) -> Option<&'static str> {
    Some(match code {
        2 => "the device is out of memory",
        3 | 4 => "the CUDA driver is not initialised",
        34 => {
            "the loaded libcuda is a stub library, not the NVIDIA driver; install the driver or put its libcuda.so.1 first on the library path"
        }
        35 => {
            "the installed NVIDIA driver is older than this CUDA version needs; update the driver"
        }
        100 => {
            "no CUDA-capable device is detected; check that the NVIDIA driver is loaded and CUDA_VISIBLE_DEVICES"
        }
        101 => "the device ordinal is invalid",
        201 => "the context is invalid",
        709 => "the context was destroyed",
        802 => "the system is not ready (is the fabric manager running?)",
        803 => {
            "the driver library does not match the loaded kernel module; reload the driver or reboot"
        }
        804 => "forward compatibility is not supported on this device",
        999 => "the driver reported an unknown error",
        _ => return None,
    })
}

/// `NAME (code N): what it means`.
pub(super) fn describe(error: &impl DriverCode) -> String {
    let code = error.code();
    match hint(code) {
        Some(hint) => format!("{} (code {code}): {hint}", error.name()),
        None => format!("{} (code {code})", error.name()),
    }
}

/// A failed driver call after the device was opened: the operation, the
/// driver's result code and its name.
pub(super) fn failure(operation: &'static str, error: impl DriverCode) -> BackendError {
    BackendError::Driver {
        operation,
        code: error.code(),
        message: error.name(),
    }
}

/// A backend failure as the public API of the CUDA backend reports it.
pub(super) fn mem_error(error: BackendError) -> MemError {
    MemError::backend(NAME, error)
}

/// A failure while opening the device: it cannot be used at all.
pub(super) fn unusable(step: impl std::fmt::Display, error: impl DriverCode) -> MemError {
    MemError::NoDevice {
        cause: format!("{step} failed: {}", describe(&error)),
    }
}

/// Turns a raw driver result into `Ok` or a backend error.
pub(super) fn check(result: cu::CUresult, operation: &'static str) -> Result<(), BackendError> {
    match result {
        cu::CUresult::CUDA_SUCCESS => Ok(()),
        error => Err(failure(operation, error)),
    }
}

/// Whether a raw result is `CUDA_ERROR_OUT_OF_MEMORY`.
pub(super) fn is_out_of_memory(result: cu::CUresult) -> bool {
    result == cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

/// Figures of the device's default memory pool, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    /// Device memory the pool holds from the driver (in use or idle).
    pub reserved: u64,
    /// Of that, memory handed out to live allocations.
    pub used: u64,
}

impl PoolUsage {
    /// Memory the pool holds idle: reusable without asking the driver.
    pub fn idle(&self) -> u64 {
        self.reserved.saturating_sub(self.used)
    }
}

/// An opened device: the retained primary context and the default memory pool.
pub(super) struct DeviceContext {
    ordinal: u32,
    name: String,
    device: Device,
    pool: cu::CUmemoryPool,
    context: Context,
}

// SAFETY: the pool handle is an opaque driver handle; the driver API is
// thread-safe for pools, and every call made with it goes through `enter`,
// which makes the owning context current on the calling thread.
unsafe impl Send for DeviceContext {}
// SAFETY: as for Send; the struct has no interior mutability of its own.
unsafe impl Sync for DeviceContext {}

impl DeviceContext {
    /// Initialises the driver, finds device `ordinal`, checks that it
    /// supports stream-ordered allocation, retains its primary context and
    /// checks that the context answers. Every failure is
    /// [`MemError::NoDevice`] naming the step and the driver's reason.
    pub(super) fn open(ordinal: u32) -> Result<Arc<Self>, MemError> {
        cust::init(cust::CudaFlags::empty())
            .map_err(|e| unusable("initialising the CUDA driver (cuInit)", e))?;
        let count = Device::num_devices().map_err(|e| unusable("counting CUDA devices", e))?;
        if ordinal >= count {
            return Err(MemError::NoDevice {
                cause: format!(
                    "device {ordinal} was requested but the driver reports {count} device(s); \
                     choose an ordinal below {count} or check CUDA_VISIBLE_DEVICES"
                ),
            });
        }
        let device = Device::get_device(ordinal)
            .map_err(|e| unusable(format_args!("opening device {ordinal}"), e))?;
        let name = device
            .name()
            .unwrap_or_else(|_| format!("device {ordinal}"));
        let mut pools_supported: i32 = 0;
        // SAFETY: the out-pointer is a live i32 and the device handle came from the driver.
        let result = unsafe {
            cu::cuDeviceGetAttribute(
                &mut pools_supported,
                cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                device.as_raw(),
            )
        };
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(unusable(
                format_args!("querying memory pool support of device {ordinal} ({name})"),
                result,
            ));
        }
        if pools_supported == 0 {
            return Err(MemError::NoDevice {
                cause: format!(
                    "device {ordinal} ({name}) does not support stream-ordered allocation \
                     (memory pools); the cuda backend needs a device and driver with CUDA 11.2 or later"
                ),
            });
        }
        let mut previous: cu::CUcontext = ptr::null_mut();
        // SAFETY: the out-pointer is a live context handle slot.
        let result = unsafe { cu::cuCtxGetCurrent(&mut previous) };
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(unusable("querying the current context", result));
        }
        // Retaining makes the primary context current on this thread; the
        // guard gives a different context that was current back afterwards.
        let _restore = ContextGuard {
            restore: (!previous.is_null()).then_some(previous),
        };
        let context = Context::new(device).map_err(|e| {
            unusable(
                format_args!("retaining the primary context of device {ordinal} ({name})"),
                e,
            )
        })?;
        let mut pool: cu::CUmemoryPool = ptr::null_mut();
        // SAFETY: the out-pointer is a live pool handle slot; the device is valid.
        let result = unsafe { cu::cuDeviceGetDefaultMemPool(&mut pool, device.as_raw()) };
        if result != cu::CUresult::CUDA_SUCCESS {
            return Err(unusable(
                format_args!("getting the memory pool of device {ordinal} ({name})"),
                result,
            ));
        }
        let opened = Arc::new(DeviceContext {
            ordinal,
            name,
            device,
            pool,
            context,
        });
        opened.raw_mem_info().map_err(|error| MemError::NoDevice {
            cause: format!(
                "the primary context of device {ordinal} ({}) does not answer: {error}",
                opened.name
            ),
        })?;
        Ok(opened)
    }

    /// The device ordinal.
    pub(super) fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The device's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Makes the primary context current on this thread until the guard
    /// drops; a different context that was current is restored then.
    pub(super) fn enter(&self) -> Result<ContextGuard, BackendError> {
        let ours = self.context.as_raw();
        let mut current: cu::CUcontext = ptr::null_mut();
        // SAFETY: the out-pointer is a live context handle slot.
        check(
            unsafe { cu::cuCtxGetCurrent(&mut current) },
            "query the current context",
        )?;
        if current == ours {
            return Ok(ContextGuard { restore: None });
        }
        // SAFETY: `ours` is the primary context this struct retains.
        check(
            unsafe { cu::cuCtxSetCurrent(ours) },
            "make the device context current",
        )?;
        Ok(ContextGuard {
            restore: (!current.is_null()).then_some(current),
        })
    }

    /// Makes the primary context current on this thread and leaves it so.
    pub(super) fn make_current(&self) -> Result<(), BackendError> {
        // SAFETY: the context is the primary context this struct retains.
        check(
            unsafe { cu::cuCtxSetCurrent(self.context.as_raw()) },
            "make the device context current",
        )
    }

    /// Free and total device memory as the driver reports them (memory the
    /// pool holds idle counts as used here).
    pub(super) fn raw_mem_info(&self) -> Result<(u64, u64), BackendError> {
        let _guard = self.enter()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are live usizes; the context is current.
        check(
            unsafe { cu::cuMemGetInfo_v2(&mut free, &mut total) },
            "query free memory",
        )?;
        Ok((free as u64, total as u64))
    }

    /// The pool's reserved and used bytes.
    pub(super) fn pool_usage(&self) -> Result<PoolUsage, BackendError> {
        Ok(PoolUsage {
            reserved: self
                .pool_attribute(cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            used: self.pool_attribute(cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        })
    }

    fn pool_attribute(&self, attribute: cu::CUmemPool_attribute) -> Result<u64, BackendError> {
        let mut value: u64 = 0;
        // SAFETY: the reserved/used attributes are cuuint64_t values, so the
        // out-pointer to a live u64 has the size the driver writes.
        check(
            unsafe {
                cu::cuMemPoolGetAttribute(
                    self.pool,
                    attribute,
                    (&mut value as *mut u64).cast::<c_void>(),
                )
            },
            "query the memory pool",
        )?;
        Ok(value)
    }

    /// Sets how many idle bytes the pool keeps when a stream synchronises.
    pub(super) fn set_release_threshold(&self, bytes: u64) -> Result<(), BackendError> {
        let mut value: u64 = bytes;
        // SAFETY: the release threshold is a cuuint64_t attribute; the
        // pointer is to a live u64 the driver only reads.
        check(
            unsafe {
                cu::cuMemPoolSetAttribute(
                    self.pool,
                    cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut value as *mut u64).cast::<c_void>(),
                )
            },
            "set the memory pool's release threshold",
        )
    }

    /// Returns idle pool memory to the driver until at most `keep` bytes are
    /// reserved.
    pub(super) fn trim_pool(&self, keep: u64) -> Result<(), BackendError> {
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        // SAFETY: the pool handle is the device's default pool.
        check(
            unsafe { cu::cuMemPoolTrimTo(self.pool, keep) },
            "trim the memory pool",
        )
    }

    /// Blocks until all work on the device's primary context completed.
    pub(super) fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.enter()?;
        // SAFETY: the context is current on this thread.
        check(unsafe { cu::cuCtxSynchronize() }, "synchronize the device")
    }

    /// The cust device.
    pub(super) fn device(&self) -> Device {
        self.device
    }
}

/// The primary context bound to this thread for the duration of one call.
pub(super) struct ContextGuard {
    restore: Option<cu::CUcontext>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.restore {
            // SAFETY: `previous` was current on this thread when the guard
            // was made; the caller that made it current keeps it alive.
            let result = unsafe { cu::cuCtxSetCurrent(previous) };
            if result != cu::CUresult::CUDA_SUCCESS {
                tracing::debug!(error = %describe(&result), "restoring the previous CUDA context failed");
            }
        }
    }
}

/// A stream that does not synchronise with the null stream.
pub(super) struct RawStream {
    raw: cu::CUstream,
    context: Arc<DeviceContext>,
}

// SAFETY: a CUstream is an opaque handle the driver lets any thread use once
// its context is current, which every use here arranges through `enter`.
unsafe impl Send for RawStream {}
// SAFETY: as for Send; the handle is never mutated after creation.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// Creates a non-blocking stream on the device.
    pub(super) fn create(context: &Arc<DeviceContext>) -> Result<Self, BackendError> {
        let _guard = context.enter()?;
        let mut raw: cu::CUstream = ptr::null_mut();
        // SAFETY: the out-pointer is a live stream slot; the context is current.
        check(
            unsafe {
                cu::cuStreamCreate(&mut raw, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
            },
            "create stream",
        )?;
        Ok(RawStream {
            raw,
            context: Arc::clone(context),
        })
    }

    /// The driver handle, valid while `self` lives.
    pub(super) fn raw(&self) -> cu::CUstream {
        self.raw
    }

    /// Blocks until all work queued on the stream completed.
    pub(super) fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.context.enter()?;
        // SAFETY: the stream is live while `self` is.
        check(unsafe { cu::cuStreamSynchronize(self.raw) }, "synchronize")
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        let _guard = self.context.enter();
        // SAFETY: the stream was created by this struct and is destroyed once;
        // the driver finishes its pending work before releasing it.
        let result = unsafe { cu::cuStreamDestroy_v2(self.raw) };
        if result != cu::CUresult::CUDA_SUCCESS {
            tracing::debug!(error = %describe(&result), "destroying a CUDA stream failed");
        }
    }
}

/// An event without timing, recorded on a [`RawStream`].
pub(super) struct RawEvent {
    raw: cu::CUevent,
    context: Arc<DeviceContext>,
}

// SAFETY: a CUevent is an opaque handle usable from any thread with its
// context current, which every use here arranges through `enter`.
unsafe impl Send for RawEvent {}
// SAFETY: as for Send; the handle is never mutated after creation.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// Creates an event and records it after the work queued on `stream`.
    pub(super) fn record(stream: &RawStream) -> Result<Self, BackendError> {
        let _guard = stream.context.enter()?;
        let mut raw: cu::CUevent = ptr::null_mut();
        // SAFETY: the out-pointer is a live event slot; the context is current.
        check(
            unsafe {
                cu::cuEventCreate(&mut raw, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
            },
            "create event",
        )?;
        let event = RawEvent {
            raw,
            context: Arc::clone(&stream.context),
        };
        // SAFETY: both handles are live; the context is current.
        check(
            unsafe { cu::cuEventRecord(event.raw, stream.raw()) },
            "record event",
        )?;
        Ok(event)
    }

    /// Makes work queued next on `stream` wait until the event completed.
    pub(super) fn make_wait(&self, stream: &RawStream) -> Result<(), BackendError> {
        let _guard = self.context.enter()?;
        // SAFETY: both handles are live; the context is current. The driver
        // keeps the dependency when the event is destroyed afterwards.
        check(
            unsafe { cu::cuStreamWaitEvent(stream.raw(), self.raw, 0) },
            "order streams",
        )
    }

    /// Whether the work before the event completed.
    pub(super) fn complete(&self) -> Result<bool, BackendError> {
        let _guard = self.context.enter()?;
        // SAFETY: the event is live while `self` is.
        match unsafe { cu::cuEventQuery(self.raw) } {
            cu::CUresult::CUDA_SUCCESS => Ok(true),
            cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            error => Err(failure("query event", error)),
        }
    }

    /// Blocks until the work before the event completed (`cuEventSynchronize`).
    pub(super) fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.context.enter()?;
        // SAFETY: the event is live while `self` is; the context is current.
        check(
            unsafe { cu::cuEventSynchronize(self.raw) },
            "wait for event",
        )
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        let _guard = self.context.enter();
        // SAFETY: the event was created by this struct and is destroyed once.
        let result = unsafe { cu::cuEventDestroy_v2(self.raw) };
        if result != cu::CUresult::CUDA_SUCCESS {
            tracing::debug!(error = %describe(&result), "destroying a CUDA event failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_device_is_named_with_its_code_and_advice() {
        let text = describe(&cu::CUresult::CUDA_ERROR_NO_DEVICE);
        assert_eq!(
            text,
            "CUDA_ERROR_NO_DEVICE (code 100): no CUDA-capable device is detected; \
             check that the NVIDIA driver is loaded and CUDA_VISIBLE_DEVICES"
        );
        let error = unusable("initialising the CUDA driver (cuInit)", CudaError::NoDevice);
        assert_eq!(
            error.to_string(),
            "no CUDA device available: initialising the CUDA driver (cuInit) failed: NoDevice (code 100): \
             no CUDA-capable device is detected; check that the NVIDIA driver is loaded and CUDA_VISIBLE_DEVICES"
        );
    }

    #[test]
    fn codes_without_advice_still_name_the_error() {
        assert_eq!(
            describe(&cu::CUresult::CUDA_ERROR_INVALID_VALUE),
            "CUDA_ERROR_INVALID_VALUE (code 1)"
        );
        let error = failure("free", cu::CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            error,
            BackendError::Driver {
                operation: "free",
                code: 1,
                message: "CUDA_ERROR_INVALID_VALUE".to_owned(),
            }
        );
        assert_eq!(
            MemError::backend(NAME, error).to_string(),
            "cuda backend: free failed: CUDA_ERROR_INVALID_VALUE (code 1)"
        );
        assert_eq!(
            failure("allocate", CudaError::OutOfMemory),
            BackendError::Driver {
                operation: "allocate",
                code: 2,
                message: "OutOfMemory".to_owned(),
            }
        );
    }

    #[test]
    fn success_checks_out_and_out_of_memory_is_recognised() {
        assert!(check(cu::CUresult::CUDA_SUCCESS, "anything").is_ok());
        assert!(check(cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY, "allocate").is_err());
        assert!(is_out_of_memory(cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!is_out_of_memory(cu::CUresult::CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn pool_idle_memory_is_reserved_minus_used() {
        let usage = PoolUsage {
            reserved: 10 << 20,
            used: 4 << 20,
        };
        assert_eq!(usage.idle(), 6 << 20);
        assert_eq!(
            PoolUsage {
                reserved: 1,
                used: 2
            }
            .idle(),
            0
        );
    }
}
