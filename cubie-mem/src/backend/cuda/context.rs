//! An opened device: the driver initialised, the device's retained primary
//! context, the memory pool the backend owns, and the guard that makes the
//! context current for the length of one call.
//!
//! The backend allocates from a pool of its own (`cuMemPoolCreate`), not
//! from the device's default pool: the pool it measures (free memory, idle
//! bytes) is the pool it allocates from (`cuMemAllocFromPoolAsync`), and its
//! release threshold and trims touch no other library's memory.
//!
//! The pool never makes one stream wait for another to reuse memory: the
//! driver's default (`CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`)
//! lets an allocation take bytes freed on another stream, not yet ordered
//! before it, by making its stream wait for that free, which silently
//! queues one stream group behind another group's kernels. The backend
//! switches it off: memory freed on one stream serves another once the free
//! completed (or an event orders them), and otherwise the pool grows, or an
//! allocation that finds no memory synchronises, trims and retries.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::driver::{Health, describe, unusable};
use super::sys::{self, CuContext, CuDevice, CuEvent, CuMemPoolAttribute, CuMemoryPool, CuResult};
use super::wait::HostWait;
use crate::MemError;
use crate::backend::{BackendError, PoolUsage};

/// Idle events of each kind kept for reuse (creating and destroying one
/// each time an event is needed costs two driver calls).
const IDLE_EVENTS: usize = 64;

/// An opened device: the retained primary context and the backend's pool.
pub(super) struct DeviceContext {
    ordinal: u32,
    name: String,
    device: CuDevice,
    context: CuContext,
    pool: CuMemoryPool,
    driver_version: u32,
    /// How the host waits: the flags of the events it creates.
    wait: HostWait,
    health: Health,
    /// Events without timing, created on this context and idle.
    idle_events: Mutex<Vec<CuEvent>>,
    /// Timed events (the timeline's), created on this context and idle.
    idle_timed_events: Mutex<Vec<CuEvent>>,
    /// Set when device memory of the pool could not be freed at teardown:
    /// the pool is then left to the driver instead of destroyed under live
    /// allocations.
    pool_in_use: AtomicBool,
}

// SAFETY: the context and pool are opaque driver handles; the driver API is
// thread-safe, and every call that needs the context current goes through
// `enter`, which makes it current on the calling thread.
unsafe impl Send for DeviceContext {}
// SAFETY: as for Send; the handles are never changed after `open`, and
// `Health` is a `OnceLock`.
unsafe impl Sync for DeviceContext {}

impl DeviceContext {
    /// Loads and initialises the driver and counts the devices it lists
    /// (the visible ones: the driver honours `CUDA_VISIBLE_DEVICES`).
    /// Every failure is [`MemError::NoDevice`] naming the step.
    pub(super) fn count() -> Result<u32, MemError> {
        sys::load().map_err(|cause| MemError::NoDevice { cause })?;
        // SAFETY: cuInit takes flags (0) and may be called any number of times.
        let result = unsafe { sys::cuInit(0) };
        opening(result, "initialising the CUDA driver (cuInit)")?;
        let mut count: c_int = 0;
        // SAFETY: the out-pointer is a live c_int.
        opening(
            unsafe { sys::cuDeviceGetCount(&mut count) },
            "counting CUDA devices",
        )?;
        Ok(u32::try_from(count).unwrap_or(0))
    }

    /// Initialises the driver, finds device `ordinal`, checks that it
    /// supports stream-ordered allocation, sets the primary context's
    /// scheduling flags of the host's `wait` policy, retains the context,
    /// creates the backend's memory pool and checks that the context
    /// answers. Every failure is [`MemError::NoDevice`] naming the step and
    /// the driver's real code.
    pub(super) fn open(ordinal: u32, wait: HostWait) -> Result<Arc<Self>, MemError> {
        let count = Self::count()?;
        let mut version: c_int = 0;
        // SAFETY: the out-pointer is a live c_int.
        let result = unsafe { sys::cuDriverGetVersion(&mut version) };
        opening(result, "querying the driver's CUDA version")?;
        if ordinal >= count {
            return Err(MemError::NoDevice {
                cause: format!(
                    "device {ordinal} was requested but the driver reports {count} device(s); \
                     choose an ordinal below {count} or check CUDA_VISIBLE_DEVICES"
                ),
            });
        }
        let mut device: CuDevice = 0;
        // SAFETY: the out-pointer is a live CUdevice; the ordinal is below the count.
        let result = unsafe { sys::cuDeviceGet(&mut device, ordinal as c_int) };
        opening(result, format_args!("opening device {ordinal}"))?;
        let name = device_name(device).unwrap_or_else(|| format!("device {ordinal}"));
        let mut pools: c_int = 0;
        // SAFETY: the out-pointer is a live c_int; the device came from the driver.
        let result = unsafe {
            sys::cuDeviceGetAttribute(
                &mut pools,
                sys::DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                device,
            )
        };
        opening(
            result,
            format_args!("querying memory pool support of device {ordinal} ({name})"),
        )?;
        if pools == 0 {
            return Err(MemError::NoDevice {
                cause: format!(
                    "device {ordinal} ({name}) does not support stream-ordered allocation \
                     (memory pools); the cuda backend needs a device and driver with CUDA 11.2 or later"
                ),
            });
        }
        wait.apply(device, ordinal, &name)?;
        let mut context: CuContext = ptr::null_mut();
        // SAFETY: the out-pointer is a live context slot; the device is valid.
        let result = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
        opening(
            result,
            format_args!("retaining the primary context of device {ordinal} ({name})"),
        )?;
        // From here on, dropping `opened` releases the context (and the pool).
        let mut opened = DeviceContext {
            ordinal,
            name,
            device,
            context,
            pool: ptr::null_mut(),
            driver_version: u32::try_from(version).unwrap_or(0),
            wait,
            health: Health::default(),
            idle_events: Mutex::new(Vec::new()),
            idle_timed_events: Mutex::new(Vec::new()),
            pool_in_use: AtomicBool::new(false),
        };
        opened.pool = opened.create_pool().map_err(|error| MemError::NoDevice {
            cause: format!(
                "creating a memory pool on device {ordinal} ({}) failed: {error}",
                opened.name
            ),
        })?;
        opened.raw_mem_info().map_err(|error| MemError::NoDevice {
            cause: format!(
                "the primary context of device {ordinal} ({}) does not answer: {error}",
                opened.name
            ),
        })?;
        Ok(Arc::new(opened))
    }

    fn create_pool(&self) -> Result<CuMemoryPool, BackendError> {
        let _guard = self.enter("create the memory pool")?;
        let props = sys::CuMemPoolProps {
            alloc_type: sys::MEM_ALLOCATION_TYPE_PINNED,
            handle_types: sys::MEM_HANDLE_TYPE_NONE,
            location: sys::CuMemLocation {
                kind: sys::MEM_LOCATION_TYPE_DEVICE,
                id: self.device,
            },
            win32_security_attributes: ptr::null_mut(),
            max_size: 0,
            usage: 0,
            tail: [0; 54],
        };
        let mut pool: CuMemoryPool = ptr::null_mut();
        // SAFETY: both pointers are live; the properties are fully initialised.
        let result = unsafe { sys::cuMemPoolCreate(&mut pool, &props) };
        self.check(result, "create the memory pool")?;
        // No allocation waits for a free on another stream (module doc).
        let mut off: c_int = 0;
        // SAFETY: the attribute is an int; the pointer is to a live c_int
        // the driver only reads; the pool was just created on this context.
        let result = unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                (&raw mut off).cast::<c_void>(),
            )
        };
        if let Err(error) = self.check(result, "configure the memory pool's reuse") {
            // SAFETY: the pool was created above and has no allocations.
            unsafe { sys::cuMemPoolDestroy(pool) };
            return Err(error);
        }
        Ok(pool)
    }

    /// The device ordinal.
    pub(super) fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The driver's handle of the primary context.
    pub(super) fn raw_context(&self) -> CuContext {
        self.context
    }

    /// The driver's handle of the device.
    pub(super) fn device(&self) -> CuDevice {
        self.device
    }

    /// The device's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The CUDA version the driver supports (`major * 1000 + minor * 10`).
    pub(super) fn driver_version(&self) -> u32 {
        self.driver_version
    }

    /// The backend's memory pool.
    pub(super) fn pool(&self) -> CuMemoryPool {
        self.pool
    }

    /// `Ok` for success, else the failure of `operation`; a failure that
    /// leaves the context unusable is remembered and refuses later calls.
    pub(super) fn check(
        &self,
        result: CuResult,
        operation: &'static str,
    ) -> Result<(), BackendError> {
        self.health.check(result, operation)
    }

    /// Makes the primary context current on this thread until the guard
    /// drops (a different context that was current is restored then), or
    /// refuses `operation` when the context is unusable. Inside another
    /// guard of the same context on this thread it costs no driver call.
    pub(super) fn enter(&self, operation: &'static str) -> Result<ContextGuard, BackendError> {
        self.health.usable(operation)?;
        let outer = ENTERED.get();
        if outer.context == self.context && outer.depth > 0 {
            ENTERED.set(Entered {
                depth: outer.depth + 1,
                ..outer
            });
            return Ok(ContextGuard {
                restore: None,
                outer: None,
            });
        }
        let mut current: CuContext = ptr::null_mut();
        // SAFETY: the out-pointer is a live context slot.
        let result = unsafe { sys::cuCtxGetCurrent(&mut current) };
        self.check(result, "query the current context")?;
        let restore = if current == self.context {
            None
        } else {
            // SAFETY: the context is the primary context this struct retains.
            let result = unsafe { sys::cuCtxSetCurrent(self.context) };
            self.check(result, "make the device context current")?;
            (!current.is_null()).then_some(current)
        };
        ENTERED.set(Entered {
            context: self.context,
            depth: 1,
        });
        Ok(ContextGuard {
            restore,
            outer: Some(outer),
        })
    }

    /// Makes the primary context current on this thread and leaves it so.
    pub(super) fn make_current(&self) -> Result<(), BackendError> {
        self.health.usable("make the device context current")?;
        // SAFETY: the context is the primary context this struct retains.
        let result = unsafe { sys::cuCtxSetCurrent(self.context) };
        self.check(result, "make the device context current")
    }

    /// Free and total device memory as the driver reports them (memory the
    /// pool holds idle counts as used here).
    pub(super) fn raw_mem_info(&self) -> Result<(u64, u64), BackendError> {
        let _guard = self.enter("query free memory")?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are live usizes; the context is current.
        let result = unsafe { sys::cuMemGetInfo(&mut free, &mut total) };
        self.check(result, "query free memory")?;
        Ok((free as u64, total as u64))
    }

    /// The pool's reserved and used bytes (the driver does not tell the
    /// largest block one allocation could get).
    pub(super) fn pool_usage(&self) -> Result<PoolUsage, BackendError> {
        let _guard = self.enter("query the memory pool")?;
        Ok(PoolUsage {
            reserved: self.pool_attribute(sys::MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            used: self.pool_attribute(sys::MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            largest_free_block: None,
        })
    }

    fn pool_attribute(&self, attribute: CuMemPoolAttribute) -> Result<u64, BackendError> {
        let _guard = self.enter("query the memory pool")?;
        let mut value: u64 = 0;
        // SAFETY: the reserved/used attributes are cuuint64_t values, so the
        // out-pointer to a live u64 has the size the driver writes; the
        // pool is this context's.
        let result = unsafe {
            sys::cuMemPoolGetAttribute(self.pool, attribute, (&raw mut value).cast::<c_void>())
        };
        self.check(result, "query the memory pool")?;
        Ok(value)
    }

    /// Sets how many idle bytes the pool keeps when a stream synchronises.
    pub(super) fn set_release_threshold(&self, bytes: u64) -> Result<(), BackendError> {
        let _guard = self.enter("set the memory pool's release threshold")?;
        let mut value: u64 = bytes;
        // SAFETY: the release threshold is a cuuint64_t attribute; the
        // pointer is to a live u64 the driver only reads.
        let result = unsafe {
            sys::cuMemPoolSetAttribute(
                self.pool,
                sys::MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&raw mut value).cast::<c_void>(),
            )
        };
        self.check(result, "set the memory pool's release threshold")
    }

    /// Returns idle pool memory to the driver, keeping at least `keep` bytes
    /// reserved (memory in use is never released).
    pub(super) fn trim_pool(&self, keep: u64) -> Result<(), BackendError> {
        let _guard = self.enter("trim the memory pool")?;
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        // SAFETY: the pool is this context's, and the context is current.
        let result = unsafe { sys::cuMemPoolTrimTo(self.pool, keep) };
        self.check(result, "trim the memory pool")
    }

    /// Waits for the context's work (frees in flight, on any stream,
    /// destroyed ones included, return to the pool) and gives the pool's
    /// idle memory back to the driver, for a retry of `operation` that ran
    /// out of device memory while the pool held some idle. Failures are
    /// logged: the retry reports what still fails.
    pub(super) fn reclaim_idle_memory(&self, operation: &'static str) {
        if let Err(error) = self.synchronize() {
            tracing::warn!(%error, operation, "synchronising the device before a retry failed");
        }
        if let Err(error) = self.trim_pool(0) {
            tracing::warn!(%error, operation, "trimming the memory pool before a retry failed");
        }
    }

    /// Blocks until all work on the device's primary context completed.
    pub(super) fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.enter("synchronize the device")?;
        // SAFETY: the context is current on this thread.
        let result = unsafe { sys::cuCtxSynchronize() };
        self.check(result, "synchronize the device")
    }
}

impl DeviceContext {
    /// An event without timing, idle (reused when one is), for ordering
    /// and completion. The context must be current.
    pub(super) fn take_event(&self) -> Result<CuEvent, BackendError> {
        self.take(false)
    }

    /// An event that records its time (for the timeline), idle (reused
    /// when one is). The context must be current.
    pub(super) fn take_timed_event(&self) -> Result<CuEvent, BackendError> {
        self.take(true)
    }

    fn take(&self, timed: bool) -> Result<CuEvent, BackendError> {
        if let Some(event) = self.idle_events(timed).pop() {
            return Ok(event);
        }
        let flags = if timed {
            sys::EVENT_DEFAULT
        } else {
            sys::EVENT_DISABLE_TIMING
        } | self.wait.event_flags();
        let mut event: CuEvent = ptr::null_mut();
        // SAFETY: the out-pointer is a live event slot; the caller made the
        // context current.
        let result = unsafe { sys::cuEventCreate(&mut event, flags) };
        self.check(result, "create event")?;
        Ok(event)
    }

    /// Takes back an event of [`take_event`](Self::take_event) or
    /// [`take_timed_event`](Self::take_timed_event) for reuse (an event may
    /// be recorded again while earlier waits on it stand), destroying it
    /// when enough are idle.
    pub(super) fn recycle_event(&self, event: CuEvent, timed: bool) {
        let mut idle = self.idle_events(timed);
        if idle.len() < IDLE_EVENTS {
            idle.push(event);
            return;
        }
        drop(idle);
        destroy_event(self, event);
    }

    fn idle_events(&self, timed: bool) -> std::sync::MutexGuard<'_, Vec<CuEvent>> {
        let idle = if timed {
            &self.idle_timed_events
        } else {
            &self.idle_events
        };
        // The list is consistent after every statement.
        idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Leaves the pool to the driver at teardown: memory of it is still
    /// allocated, and destroying a pool under live allocations is an error.
    pub(super) fn keep_pool(&self) {
        self.pool_in_use.store(true, Ordering::Relaxed);
    }
}

/// Destroys an event of `context`.
fn destroy_event(context: &DeviceContext, event: CuEvent) {
    let _guard = context.enter("destroy event");
    // SAFETY: the event was created on this context and is destroyed once.
    let result = unsafe { sys::cuEventDestroy(event) };
    if result != CuResult::SUCCESS {
        tracing::debug!(error = %describe(result), "destroying a CUDA event failed");
    }
}

impl Drop for DeviceContext {
    fn drop(&mut self) {
        for timed in [false, true] {
            for event in std::mem::take(&mut *self.idle_events(timed)) {
                destroy_event(self, event);
            }
        }
        if !self.pool.is_null()
            && !self.pool_in_use.load(Ordering::Relaxed)
            && let Ok(_guard) = self.enter("destroy the memory pool")
        {
            // SAFETY: the pool is this context's and is destroyed once;
            // allocations still out are released by the driver when
            // they are freed.
            let result = unsafe { sys::cuMemPoolDestroy(self.pool) };
            if result != CuResult::SUCCESS {
                tracing::debug!(error = %describe(result), "destroying the memory pool failed");
            }
        }
        // SAFETY: the primary context was retained once by `open`.
        let result = unsafe { sys::cuDevicePrimaryCtxRelease(self.device) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "releasing the primary context failed");
        }
    }
}

/// `Ok` for success, else a [`MemError::NoDevice`] naming `step`.
fn opening(result: CuResult, step: impl std::fmt::Display) -> Result<(), MemError> {
    if result == CuResult::SUCCESS {
        Ok(())
    } else {
        Err(unusable(step, result))
    }
}

/// The device's name, when the driver gives one.
fn device_name(device: CuDevice) -> Option<String> {
    let mut buffer = [0 as c_char; 256];
    // SAFETY: the buffer is live and its length is passed; the driver
    // writes a NUL-terminated name into it.
    let result = unsafe { sys::cuDeviceGetName(buffer.as_mut_ptr(), 256, device) };
    if result != CuResult::SUCCESS {
        return None;
    }
    let bytes: Vec<u8> = buffer
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The context a [`ContextGuard`] made current on this thread, and how
/// many guards of it are open (nested calls enter it for free).
#[derive(Clone, Copy)]
struct Entered {
    context: CuContext,
    depth: usize,
}

thread_local! {
    static ENTERED: std::cell::Cell<Entered> = const {
        std::cell::Cell::new(Entered {
            context: ptr::null_mut(),
            depth: 0,
        })
    };
}

/// The primary context bound to this thread for the duration of one call.
pub(super) struct ContextGuard {
    restore: Option<CuContext>,
    /// What was entered before this guard (`None` for a nested guard).
    outer: Option<Entered>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        let Some(outer) = self.outer else {
            let entered = ENTERED.get();
            ENTERED.set(Entered {
                depth: entered.depth.saturating_sub(1),
                ..entered
            });
            return;
        };
        ENTERED.set(outer);
        if let Some(previous) = self.restore {
            // SAFETY: `previous` was current on this thread when the guard
            // was made; the code that made it current keeps it alive.
            let result = unsafe { sys::cuCtxSetCurrent(previous) };
            if result != CuResult::SUCCESS {
                tracing::debug!(error = %describe(result), "restoring the previous CUDA context failed");
            }
        }
    }
}
