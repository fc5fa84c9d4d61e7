//! The CUDA device as a [`Backend`], through the driver API: contexts,
//! the device pool, streams and events, copies, pinned blocks, PTX modules
//! and kernel launches. Its public items are re-exported, and documented,
//! as `cubie_mem::cuda`; the kernel interop built on them lives there.

mod calls;
mod context;
mod device;
mod driver;
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
use std::ffi::c_void;
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use calls::DriverCalls;
pub use launch_dims::LaunchDims;
pub use module::{PtxFunction, PtxModule};
pub(crate) use stream::CudaStream;
pub use wait::HostWait;

use context::DeviceContext;
use driver::{describe, mem_error};
use pinned::PinnedCache;
use record::Recorder;
use sys::{CuContext, CuResult};

use super::{
    Backend, BackendError, DevicePtr, MemInfo, MemorySpace, PoolUsage, Stream, byte_range,
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
    /// The sizes of the live device allocations, by address.
    allocations: Mutex<HashMap<u64, u64>>,
    /// The number the next stream gets ([`Stream::id`]).
    next_stream: AtomicU64,
    recorder: Recorder,
    pinned: Arc<PinnedCache>,
    context: Arc<DeviceContext>,
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
                allocations: Mutex::default(),
                next_stream: AtomicU64::new(1),
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
    /// stops: every copy, kernel launched through a
    /// [`GroupStream`](crate::cuda::GroupStream),
    /// allocation and free gets timed events around it on its stream, which
    /// costs a little per operation; off by default.
    pub fn record_timeline(&self, on: bool) {
        self.shared.recorder.set(on);
    }

    /// Keeps at most `spans` recorded spans (the most recent; the default
    /// is [`Timeline::DEFAULT_CAPACITY`](crate::timeline::Timeline::DEFAULT_CAPACITY)):
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

    /// The driver handle of the backend's context (`CUcontext`: the
    /// device's primary context), for libraries that launch on the
    /// backend's streams. It stays valid while the backend lives.
    pub fn raw_context(&self) -> *mut c_void {
        self.shared.context.raw_context()
    }

    /// Adopts `raw`, a `CUstream` created by someone else on this backend's
    /// context, as a stream of the backend, which works as one from
    /// [`create_stream`](Backend::create_stream) and is never destroyed
    /// here. Refused for a stream of another context and for the null,
    /// legacy and per-thread default streams.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream, and stays so while work is queued on the
    /// result.
    pub unsafe fn adopt_stream(&self, raw: *mut c_void) -> Result<Arc<dyn Stream>, MemError> {
        const OPERATION: &str = "bind an external stream";
        let refused = |reason| {
            mem_error(BackendError::Unsupported {
                operation: OPERATION,
                reason,
            })
        };
        let context = &self.shared.context;
        // CU_STREAM_LEGACY is 0x1 and CU_STREAM_PER_THREAD 0x2 (cuda.h).
        if raw.addr() <= 2 {
            return Err(refused(format!(
                "stream {raw:p} is a default stream (null, CU_STREAM_LEGACY or \
                 CU_STREAM_PER_THREAD), which synchronises with other streams; bind a stream \
                 created with cuStreamCreate"
            )));
        }
        let owner = {
            let _guard = context.enter(OPERATION).map_err(mem_error)?;
            let mut owner: CuContext = ptr::null_mut();
            // SAFETY: the caller guarantees a live stream; the out-pointer
            // is a live context slot.
            let result = unsafe { sys::cuStreamGetCtx(raw, &mut owner) };
            context.check(result, OPERATION).map_err(mem_error)?;
            owner
        };
        if owner != context.raw_context() {
            return Err(refused(format!(
                "stream {raw:p} belongs to CUDA context {owner:p}, not to this backend's (the \
                 primary context {:p} of device {}); create the stream on that context \
                 (CudaBackend::make_current, then cuStreamCreate) or bind it to a manager of its \
                 own device",
                context.raw_context(),
                context.ordinal()
            )));
        }
        // SAFETY: a live stream of this context (checked above), alive
        // while used (the caller's promise).
        Ok(Arc::new(unsafe { CudaStream::adopt(self, raw) }))
    }

    /// Whether `other` is this backend (a clone of it).
    pub(crate) fn same_backend(&self, other: &CudaBackend) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn context(&self) -> &Arc<DeviceContext> {
        &self.shared.context
    }

    fn recorder(&self) -> &Recorder {
        &self.shared.recorder
    }

    fn pinned(&self) -> &Arc<PinnedCache> {
        &self.shared.pinned
    }

    fn allocations(&self) -> MutexGuard<'_, HashMap<u64, u64>> {
        // The map is consistent after every statement.
        self.shared
            .allocations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The number of a new stream.
    fn next_stream_id(&self) -> u64 {
        self.shared.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    /// `stream` as a stream of this backend, or why it is not one.
    fn own_stream<'s>(
        &self,
        stream: &'s dyn Stream,
        operation: &'static str,
    ) -> Result<&'s CudaStream, BackendError> {
        let cuda = super::own::<CudaStream>(stream.as_any(), operation, "stream")?;
        if self.same_backend(cuda.backend()) {
            return Ok(cuda);
        }
        Err(BackendError::Unsupported {
            operation,
            reason: format!(
                "the stream belongs to another CUDA backend (device {}) than this one (device {})",
                cuda.backend().ordinal(),
                self.ordinal()
            ),
        })
    }

    /// The device address of the `len` bytes at `ptr + offset`, which must
    /// lie inside one live allocation of this backend.
    fn device_address(
        &self,
        ptr: DevicePtr,
        offset: u64,
        len: usize,
        operation: &'static str,
    ) -> Result<u64, BackendError> {
        let size = self.allocations().get(&ptr.0).copied();
        let size = size.ok_or(BackendError::UnknownAllocation { operation, ptr })?;
        let range = byte_range(operation, offset, len, size)?;
        Ok(ptr.0 + range.start)
    }

    /// One `cuMemAllocFromPoolAsync` of `bytes` from the backend's pool on
    /// `stream`: the address, or the driver's code.
    fn try_alloc(
        &self,
        bytes: usize,
        stream: &CudaStream,
    ) -> Result<Result<u64, CuResult>, BackendError> {
        let context = &self.shared.context;
        let _guard = context.enter("allocate")?;
        let mut address: sys::CuDevicePtr = 0;
        // SAFETY: the out-pointer is a live CUdeviceptr; the pool and the
        // stream are live handles of this context, which is current.
        let result = unsafe {
            sys::cuMemAllocFromPoolAsync(&mut address, bytes, context.pool(), stream.raw_stream())
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

impl Drop for Shared {
    /// Waits for all work of the context (destroyed streams' work may
    /// still use memory: `cuMemFree` does not wait for stream-ordered
    /// work), then frees what is left. Memory that cannot
    /// be freed keeps the pool from being destroyed under it.
    fn drop(&mut self) {
        let allocations =
            std::mem::take(&mut *self.allocations.lock().unwrap_or_else(|p| p.into_inner()));
        if allocations.is_empty() {
            return;
        }
        tracing::debug!(
            count = allocations.len(),
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
        for &address in allocations.keys() {
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
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal())
            .field("device", &self.device_name())
            .field("live_allocations", &self.allocations().len())
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
    fn the_backend_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<CudaBackend>();
        assert_send_sync::<PtxModule>();
        assert_send_sync::<CudaStream>();
    }
}
