//! The CUDA device, through the driver API.
//!
//! - **Driver library**: `libcuda.so.1` (`nvcuda.dll` on Windows) is loaded
//!   at run time, on first use: building needs no CUDA toolkit, and a
//!   program built with the feature starts on a machine without the NVIDIA
//!   driver, where [`CudaBackend::new`] says what is missing (and
//!   [`default_memmgr`] falls back to the simulated device).
//! - **Context**: the primary context of one device (ordinal 0 by default),
//!   retained when the backend is created (which [`default_memmgr`] does on
//!   first use) and made current on whichever thread calls, for the duration
//!   of the call.
//! - **Driver calls**: every call goes through the backend's own
//!   declarations of the driver API, whose results are plain integers, so a
//!   code newer than this build is reported by number instead of being
//!   undefined behaviour. A failure that leaves the context unusable (a
//!   kernel fault, an assert, a contained error) is remembered, and every
//!   later call fails with [`BackendError::ContextLost`] naming it.
//! - **Device memory**: stream-ordered `cuMemAllocFromPoolAsync` /
//!   `cuMemFreeAsync` on the group's stream, from a memory pool the backend
//!   creates and owns, so the pool it measures is the pool it allocates
//!   from, and its settings touch no other library's memory. The pool's
//!   release threshold ([`CudaConfig::release_threshold`], unlimited by
//!   default) keeps freed memory cached, so repeated batches do not give
//!   memory back to the driver between solves; the free memory reported to
//!   the planner counts what the pool holds idle, and an allocation that
//!   fails for want of memory synchronises, trims the pool and tries once
//!   more.
//! - **Pinned host memory**: page-locked blocks (`cuMemHostAlloc`), released
//!   blocks cached for reuse up to [`CudaConfig::pinned_cache_bytes`].
//! - **Streams and events**: non-blocking streams (never the null stream) and
//!   events without timing for completion tracking, reused from a pool.
//! - **Ordering across streams**: an allocation records an event on its
//!   stream right after it; another stream waits for that event only (never
//!   for later work on the allocating stream), once, before its first use.
//!   Uses cost no driver call (each stream counts its own); the free waits
//!   for the last use on every other stream through one marker event per
//!   stream, shared by the allocations it used.
//! - **Copies**: from and to pageable slices, asynchronous on the stream and
//!   then the stream is synchronised, so the host slice is free to reuse when
//!   the call returns; from and to page-locked blocks
//!   ([`Backend::copy_to_device_async`], [`Backend::copy_from_device_async`]),
//!   queued on the stream and returned at once, done when an event recorded
//!   after them fires.
//! - **Kernels**: the manager's host kernels
//!   ([`KernelBody::Host`](super::KernelBody::Host)) run only on the
//!   simulated device; load your CUDA kernels with [`PtxModule`] and launch
//!   them on a stream group's [`GroupStream`] with a [`LaunchBuilder`],
//!   passing the arrays as [`DeviceView`]s and scalars by type.
//!
//! Without a device (or driver), [`CudaBackend::new`] fails with
//! [`MemError::NoDevice`] naming the cause. The [`Backend`] methods report
//! [`BackendError`]s; the inherent methods, public API of this backend,
//! report [`MemError`]s.
//!
//! ```
//! use cubie_mem::backend::cuda::CudaBackend;
//! use cubie_mem::{MemError, MemoryManager};
//!
//! match CudaBackend::new(0) {
//!     Ok(cuda) => {
//!         let mgr = MemoryManager::new(cuda);
//!         assert_eq!(mgr.stats().backend, "cuda");
//!     }
//!     Err(MemError::NoDevice { cause }) => println!("running without a GPU: {cause}"),
//!     Err(other) => return Err(other),
//! }
//! # Ok::<(), MemError>(())
//! ```
//!
//! [`default_memmgr`]: crate::default_memmgr

mod allocation;
mod calls;
mod context;
mod device;
mod driver;
mod external;
mod interop;
mod launch_dims;
mod launch_limits;
mod module;
mod pinned;
mod ptx;
mod record;
mod stream;
mod strided;
mod sys;
mod wait;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// The backend pool's figures ([`CudaBackend::pool_usage`]).
pub use crate::backend::PoolUsage;
pub use calls::DriverCalls;
pub use external::BoundStream;
#[cfg(feature = "cudarc")]
pub use external::CudarcStream;
pub use interop::{DeviceView, GroupStream, LaunchArg, LaunchBuilder};
pub use launch_dims::LaunchDims;
pub use module::{PtxFunction, PtxModule};
pub use wait::HostWait;

use allocation::{Allocation, PreparedUse};
use context::DeviceContext;
use driver::{NAME, describe, mem_error};
use pinned::PinnedCache;
use record::Recorder;
use stream::{RawEvent, RawStream};
use sys::CuResult;

use super::{
    Backend, BackendError, DevicePtr, EventHandle, HandleKind, MemInfo, MemorySpace, StreamHandle,
    byte_range,
};
use crate::{Bytes, MemError};

/// Settings of the CUDA backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// Idle bytes the backend's memory pool keeps when a stream
    /// synchronises, instead of returning them to the driver. `u64::MAX`
    /// (the default) keeps everything, so a batch reuses the memory of the
    /// one before; lower it to share the device with other processes. The
    /// pool is the backend's own: the device's default pool, which other
    /// libraries allocate from, is left as it is.
    pub release_threshold: u64,
    /// Most bytes of released pinned blocks kept for reuse (1 GiB by
    /// default); blocks beyond it are unpinned and freed.
    pub pinned_cache_bytes: u64,
    /// How the host's threads wait for the device: spin, yield or sleep
    /// ([`HostWait`]; by default the primary context's flags as they are).
    pub host_wait: HostWait,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            release_threshold: u64::MAX,
            pinned_cache_bytes: crate::ManagerConfig::DEFAULT_PINNED_MAX_BYTES,
            host_wait: HostWait::Driver,
        }
    }
}

/// A CUDA device as a [`Backend`]. Cloning gives another handle to the same
/// device state, so a program can keep one (to launch kernels, read pool
/// figures) while the manager owns another.
#[derive(Clone)]
pub struct CudaBackend {
    shared: Arc<Shared>,
}

struct Shared {
    handles: Mutex<Handles>,
    recorder: Recorder,
    pinned: Arc<PinnedCache>,
    context: Arc<DeviceContext>,
}

#[derive(Default)]
struct Handles {
    streams: HashMap<u64, Arc<RawStream>>,
    events: HashMap<u64, Arc<RawEvent>>,
    /// Live device allocations by address.
    allocations: HashMap<u64, Arc<Allocation>>,
    next_stream: u64,
    next_event: u64,
}

impl CudaBackend {
    /// The backend on device `ordinal` with the default [`CudaConfig`].
    ///
    /// Fails with [`MemError::NoDevice`] naming the cause when the driver
    /// cannot be initialised, the device does not exist or lacks memory
    /// pools, or its primary context does not answer.
    pub fn new(ordinal: u32) -> Result<Self, MemError> {
        Self::with_config(ordinal, CudaConfig::default())
    }

    /// The backend on device `ordinal` with `config`.
    pub fn with_config(ordinal: u32, config: CudaConfig) -> Result<Self, MemError> {
        let context = DeviceContext::open(ordinal, config.host_wait)?;
        context
            .set_release_threshold(config.release_threshold)
            .map_err(mem_error)?;
        Ok(CudaBackend {
            shared: Arc::new(Shared {
                handles: Mutex::new(Handles {
                    next_stream: 1,
                    next_event: 1,
                    ..Handles::default()
                }),
                recorder: Recorder::default(),
                pinned: PinnedCache::new(Arc::clone(&context), config.pinned_cache_bytes),
                context,
            }),
        })
    }

    /// The number of CUDA devices the driver lists: the visible ones,
    /// numbered from 0 (the driver honours `CUDA_VISIBLE_DEVICES`). No
    /// driver is [`MemError::NoDevice`].
    pub fn device_count() -> Result<u32, MemError> {
        DeviceContext::count()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.shared.context.ordinal()
    }

    /// The device's name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        self.shared.context.name()
    }

    /// Makes the backend's primary context current on this thread (and
    /// leaves it so), for code that calls the driver directly.
    pub fn make_current(&self) -> Result<(), MemError> {
        self.shared.context.make_current().map_err(mem_error)
    }

    /// Free and total device memory as the driver reports them: unlike
    /// [`Backend::mem_info`], memory the pool holds idle counts as used.
    pub fn driver_mem_info(&self) -> Result<MemInfo, MemError> {
        let (free, total) = self.shared.context.raw_mem_info().map_err(mem_error)?;
        Ok(MemInfo { free, total })
    }

    /// The memory pool's reserved and used bytes.
    pub fn pool_usage(&self) -> Result<PoolUsage, MemError> {
        self.shared.context.pool_usage().map_err(mem_error)
    }

    /// Sets the pool's release threshold (see [`CudaConfig::release_threshold`]).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<(), MemError> {
        self.shared
            .context
            .set_release_threshold(bytes)
            .map_err(mem_error)
    }

    /// Gives idle pool memory back to the driver, keeping at least
    /// `keep_bytes` reserved (memory in use is never released).
    pub fn trim_pool(&self, keep_bytes: u64) -> Result<(), MemError> {
        self.shared.context.trim_pool(keep_bytes).map_err(mem_error)
    }

    /// Bytes of released pinned blocks kept for reuse.
    pub fn pinned_cached_bytes(&self) -> u64 {
        self.shared.pinned.cached_bytes()
    }

    /// Unpins and frees the cached pinned blocks.
    pub fn clear_pinned_cache(&self) {
        self.shared.pinned.clear();
    }

    /// Starts recording a timeline of the device's work (from empty), or
    /// stops: every copy, kernel launched through a [`GroupStream`],
    /// allocation and free gets timed events around it on its stream, which
    /// costs a little per operation; off by default.
    pub fn record_timeline(&self, on: bool) {
        self.shared.recorder.set(on);
    }

    /// Keeps at most `spans` recorded spans (the most recent; the default
    /// is [`DEFAULT_TIMELINE_CAPACITY`](crate::timeline::DEFAULT_TIMELINE_CAPACITY)):
    /// each holds two CUDA events until it is dropped.
    pub fn set_timeline_capacity(&self, spans: usize) {
        self.shared.recorder.set_capacity(spans);
    }

    /// The timeline recorded since [`record_timeline`](Self::record_timeline)
    /// was turned on, in the format the simulated device gives (waits for
    /// the device to reach the last recorded event). Spans start at 0.
    pub fn timeline(&self) -> Result<crate::timeline::Timeline, MemError> {
        self.shared.recorder.timeline().map_err(mem_error)
    }

    /// The CUDA version the driver supports, as `major * 1000 + minor * 10`
    /// (12080 for CUDA 12.8).
    pub fn driver_version(&self) -> u32 {
        self.shared.context.driver_version()
    }

    /// Blocks until all work on the device's primary context completed.
    pub fn synchronize_device(&self) -> Result<(), MemError> {
        self.shared.context.synchronize().map_err(mem_error)
    }

    fn context(&self) -> &Arc<DeviceContext> {
        &self.shared.context
    }

    fn handles(&self) -> MutexGuard<'_, Handles> {
        self.shared.handles()
    }

    /// The stream behind `handle`, kept alive for the caller's use.
    fn stream(
        &self,
        handle: StreamHandle,
        operation: &'static str,
    ) -> Result<Arc<RawStream>, BackendError> {
        self.handles().stream(handle, operation)
    }

    /// The stream behind `stream` and the event behind `event`, looked up
    /// under one lock.
    fn stream_and_event(
        &self,
        stream: StreamHandle,
        event: EventHandle,
        operation: &'static str,
    ) -> Result<(Arc<RawStream>, Arc<RawEvent>), BackendError> {
        let handles = self.handles();
        Ok((
            handles.stream(stream, operation)?,
            handles.event(event, operation)?,
        ))
    }

    /// The event behind `handle`, kept alive for the caller's use.
    fn event(
        &self,
        handle: EventHandle,
        operation: &'static str,
    ) -> Result<Arc<RawEvent>, BackendError> {
        self.handles().event(handle, operation)
    }

    /// The live allocation at `ptr` (for a view taken for a kernel, which
    /// keeps it for the launch to note its use in).
    fn allocation(
        &self,
        ptr: DevicePtr,
        operation: &'static str,
    ) -> Result<Arc<Allocation>, BackendError> {
        self.handles().allocation(ptr, operation)
    }

    /// Checks a use of `len` bytes at `ptr + offset` on `stream` and orders
    /// `stream` after the allocation, or `None` when there is nothing to
    /// touch. The stream and the allocation are looked up under one lock,
    /// once: the caller notes the use in the allocation it gets back.
    fn prepare_use(
        &self,
        ptr: DevicePtr,
        offset: u64,
        len: usize,
        stream: StreamHandle,
        operation: &'static str,
    ) -> Result<Option<PreparedUse>, BackendError> {
        let (raw, allocation) = {
            let handles = self.handles();
            (
                handles.stream(stream, operation)?,
                handles.allocation(ptr, operation)?,
            )
        };
        let range = byte_range(operation, offset, len, allocation.bytes)?;
        if len == 0 {
            return Ok(None);
        }
        allocation.order_use(&raw)?;
        Ok(Some(PreparedUse {
            stream: raw,
            address: ptr.0 + range.start,
            allocation,
        }))
    }

    /// One `cuMemAllocFromPoolAsync` of `bytes` from the backend's pool on
    /// `stream`: the address, or the driver's code.
    fn try_alloc(
        &self,
        bytes: usize,
        stream: &RawStream,
    ) -> Result<Result<u64, CuResult>, BackendError> {
        let context = &self.shared.context;
        let _guard = context.enter("allocate")?;
        let mut address: sys::CuDevicePtr = 0;
        // SAFETY: the out-pointer is a live CUdeviceptr; the pool and the
        // stream are live handles of this context, which is current.
        let result = unsafe {
            sys::cuMemAllocFromPoolAsync(&mut address, bytes, context.pool(), stream.raw())
        };
        Ok(if result == CuResult::SUCCESS {
            Ok(address)
        } else {
            Err(result)
        })
    }

    /// Out of device memory for `bytes`, with the free memory when the
    /// driver still answers.
    fn out_of_memory(&self, bytes: u64) -> BackendError {
        BackendError::OutOfMemory {
            space: MemorySpace::Device,
            requested: Bytes(bytes),
            free: self.mem_info().ok().map(|info| Bytes(info.free)),
        }
    }
}

/// An address that is not a live allocation of this backend.
fn unknown_allocation(operation: &'static str, ptr: DevicePtr) -> BackendError {
    BackendError::UnknownHandle {
        operation,
        kind: HandleKind::Allocation,
        handle: ptr.0,
    }
}

/// Why a launch of `kernel` with a host body cannot run on this backend.
fn host_kernel_unsupported(kernel: &str) -> BackendError {
    BackendError::Unsupported {
        operation: "launch",
        reason: format!(
            "kernel '{kernel}' is a host kernel, which only the simulated device runs; on the cuda \
             backend load your CUDA kernel with PtxModule and launch it on the group's stream \
             (GroupStream::of) with a LaunchBuilder (see docs/cuda.md)"
        ),
    }
}

impl Handles {
    /// The stream behind `handle`.
    fn stream(
        &self,
        handle: StreamHandle,
        operation: &'static str,
    ) -> Result<Arc<RawStream>, BackendError> {
        self.streams
            .get(&handle.0)
            .cloned()
            .ok_or_else(|| BackendError::unknown_stream(operation, handle))
    }

    /// The event behind `handle`.
    fn event(
        &self,
        handle: EventHandle,
        operation: &'static str,
    ) -> Result<Arc<RawEvent>, BackendError> {
        self.events
            .get(&handle.0)
            .cloned()
            .ok_or(BackendError::UnknownHandle {
                operation,
                kind: HandleKind::Event,
                handle: handle.0,
            })
    }

    /// The live allocation at `ptr`.
    fn allocation(
        &self,
        ptr: DevicePtr,
        operation: &'static str,
    ) -> Result<Arc<Allocation>, BackendError> {
        self.allocations
            .get(&ptr.0)
            .cloned()
            .ok_or_else(|| unknown_allocation(operation, ptr))
    }
}

impl Shared {
    fn handles(&self) -> MutexGuard<'_, Handles> {
        // The maps are consistent after every statement.
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Shared {
    /// Waits for all work of the context (streams whose handles were
    /// destroyed may still use memory: `cuMemFree` does not wait for
    /// stream-ordered work), then frees what is left. Memory that cannot
    /// be freed keeps the pool from being destroyed under it.
    fn drop(&mut self) {
        let handles = std::mem::take(&mut *self.handles());
        if handles.allocations.is_empty() {
            return;
        }
        tracing::debug!(
            count = handles.allocations.len(),
            "freeing device allocations left when the CUDA backend was dropped"
        );
        if let Err(error) = self.context.synchronize() {
            tracing::warn!(%error, "synchronising the device at shutdown failed; leftover memory is left to the driver");
            self.context.keep_pool();
            return;
        }
        let Ok(_guard) = self.context.enter("free at shutdown") else {
            self.context.keep_pool();
            return;
        };
        for &address in handles.allocations.keys() {
            // SAFETY: the address is a live allocation of this context, all
            // its work has finished, and nothing uses it after this point.
            let result = unsafe { sys::cuMemFree(address) };
            if result != CuResult::SUCCESS {
                tracing::warn!(error = %describe(result), "freeing a leftover device allocation failed");
                self.context.keep_pool();
            }
        }
    }
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.handles();
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal())
            .field("device", &self.device_name())
            .field("live_allocations", &h.allocations.len())
            .field("streams", &h.streams.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::driver::NAME;
    use super::*;

    #[test]
    fn default_config_keeps_freed_memory_cached() {
        let config = CudaConfig::default();
        assert_eq!(config.release_threshold, u64::MAX);
        assert_eq!(
            config.pinned_cache_bytes,
            crate::ManagerConfig::DEFAULT_PINNED_MAX_BYTES
        );
    }

    #[test]
    fn a_host_kernel_is_refused_with_the_way_to_launch_a_cuda_kernel() {
        let error = host_kernel_unsupported("decay");
        let BackendError::Unsupported { operation, reason } = &error else {
            panic!("expected Unsupported, got {error:?}");
        };
        assert_eq!(*operation, "launch");
        assert!(reason.contains("'decay'"), "{reason}");
        assert!(
            reason.contains("(GroupStream::of) with a LaunchBuilder")
                && reason.contains("docs/cuda.md"),
            "{reason}"
        );
        let message = MemError::backend(NAME, error).to_string();
        assert!(
            message.starts_with("cuda backend: launch is not supported: kernel 'decay'"),
            "{message}"
        );
    }

    #[test]
    fn an_unknown_address_is_named_as_an_allocation() {
        assert_eq!(
            unknown_allocation("free", DevicePtr(0x7f00)).to_string(),
            "free: allocation 0x7f00 does not exist on this backend"
        );
    }

    #[test]
    fn the_backend_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<CudaBackend>();
        assert_send_sync::<PtxModule>();
        assert_send_sync::<GroupStream>();
    }
}
