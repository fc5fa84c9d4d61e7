//! The CUDA device, through the driver API (the `cust` crate).
//!
//! - **Context**: the primary context of one device (ordinal 0 by default),
//!   retained when the backend is created (which [`default_memmgr`] does on
//!   first use) and made current on whichever thread calls, for the duration
//!   of the call.
//! - **Device memory**: stream-ordered `cuMemAllocAsync` / `cuMemFreeAsync`
//!   on the group's stream, drawn from the device's default memory pool. The
//!   pool's release threshold ([`CudaConfig::release_threshold`], unlimited
//!   by default) keeps freed memory cached, so repeated batches do not give
//!   memory back to the driver between solves; the free memory reported to
//!   the planner counts what the pool holds idle.
//! - **Pinned host memory**: page-locked blocks (cust's `LockedBuffer`),
//!   released blocks cached for reuse up to [`CudaConfig::pinned_cache_bytes`].
//! - **Streams and events**: non-blocking streams (never the null stream) and
//!   events without timing for completion tracking.
//! - **Copies**: asynchronous on the stream, then the stream is synchronised,
//!   so the host slice is free to reuse when the call returns.
//!
//! Without a device (or driver), [`CudaBackend::new`] fails with
//! [`MemError::NoDevice`] naming the cause.
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

mod driver;
mod kernels;
mod pinned;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

pub use cust;
pub use driver::PoolUsage;
pub use kernels::{CudaModule, EULER_DECAY_PTX, EulerDecay};

use cust::sys as cu;
use driver::{DeviceContext, NAME, RawEvent, RawStream, check, failure, is_out_of_memory};
use pinned::PinnedPool;

use super::{Backend, DevicePtr, EventHandle, MemInfo, PinnedBlock, StreamHandle};
use crate::{Bytes, MemError};

/// Settings of the CUDA backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// Idle bytes the device's memory pool keeps when a stream synchronises,
    /// instead of returning them to the driver. `u64::MAX` (the default)
    /// keeps everything, so a batch reuses the memory of the one before;
    /// lower it to share the device with other processes. The pool is the
    /// device's default pool, shared with any other user of stream-ordered
    /// allocation in this process.
    pub release_threshold: u64,
    /// Most bytes of released pinned blocks kept for reuse (1 GiB by
    /// default); blocks beyond it are unpinned and freed.
    pub pinned_cache_bytes: u64,
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            release_threshold: u64::MAX,
            pinned_cache_bytes: crate::DEFAULT_PINNED_MAX_BYTES,
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
    pinned: Arc<PinnedPool>,
    context: Arc<DeviceContext>,
}

#[derive(Default)]
struct Handles {
    streams: HashMap<u64, Arc<RawStream>>,
    events: HashMap<u64, Arc<RawEvent>>,
    /// Live device allocations by address.
    allocations: HashMap<u64, Allocation>,
    next_stream: u64,
    next_event: u64,
}

/// A live device allocation.
#[derive(Clone, Copy)]
struct Allocation {
    bytes: u64,
    /// The stream it was allocated on: the memory is usable in that
    /// stream's order.
    stream: u64,
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
        let context = DeviceContext::open(ordinal)?;
        context.set_release_threshold(config.release_threshold)?;
        Ok(CudaBackend {
            shared: Arc::new(Shared {
                handles: Mutex::new(Handles {
                    next_stream: 1,
                    next_event: 1,
                    ..Handles::default()
                }),
                pinned: PinnedPool::new(Arc::clone(&context), config.pinned_cache_bytes),
                context,
            }),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.shared.context.ordinal()
    }

    /// The device's name, as the driver reports it.
    pub fn device_name(&self) -> &str {
        self.shared.context.name()
    }

    /// The cust device, for queries cust offers (attributes, compute capability).
    pub fn device(&self) -> cust::device::Device {
        self.shared.context.device()
    }

    /// Makes the backend's primary context current on this thread (and
    /// leaves it so), for code that calls cust directly.
    pub fn make_current(&self) -> Result<(), MemError> {
        self.shared.context.make_current()
    }

    /// Free and total device memory as the driver reports them: unlike
    /// [`Backend::mem_info`], memory the pool holds idle counts as used.
    pub fn driver_mem_info(&self) -> Result<MemInfo, MemError> {
        let (free, total) = self.shared.context.raw_mem_info()?;
        Ok(MemInfo { free, total })
    }

    /// The memory pool's reserved and used bytes.
    pub fn pool_usage(&self) -> Result<PoolUsage, MemError> {
        self.shared.context.pool_usage()
    }

    /// Sets the pool's release threshold (see [`CudaConfig::release_threshold`]).
    pub fn set_release_threshold(&self, bytes: u64) -> Result<(), MemError> {
        self.shared.context.set_release_threshold(bytes)
    }

    /// Gives idle pool memory back to the driver until at most `keep_bytes`
    /// stay reserved.
    pub fn trim_pool(&self, keep_bytes: u64) -> Result<(), MemError> {
        self.shared.context.trim_pool(keep_bytes)
    }

    /// Bytes of released pinned blocks kept for reuse.
    pub fn pinned_cached_bytes(&self) -> u64 {
        self.shared.pinned.cached_bytes()
    }

    /// Unpins and frees the cached pinned blocks.
    pub fn clear_pinned_cache(&self) {
        self.shared.pinned.clear();
    }

    /// Blocks until all work on the device's primary context completed.
    pub fn synchronize_device(&self) -> Result<(), MemError> {
        self.shared.context.synchronize()
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
    ) -> Result<Arc<RawStream>, MemError> {
        self.handles()
            .streams
            .get(&handle.0)
            .cloned()
            .ok_or_else(|| {
                MemError::backend(
                    NAME,
                    operation,
                    format!("stream {} does not exist", handle.0),
                )
            })
    }

    /// The live allocation at `ptr`, checked to hold `len` bytes from
    /// `offset`; returns the address to copy at and the allocation.
    fn checked_range(
        &self,
        ptr: DevicePtr,
        offset: u64,
        len: usize,
        operation: &'static str,
    ) -> Result<(u64, Allocation), MemError> {
        let allocation = self
            .handles()
            .allocations
            .get(&ptr.0)
            .copied()
            .ok_or_else(|| {
                MemError::backend(NAME, operation, format!("{ptr} is not a live allocation"))
            })?;
        super::byte_range(offset, len, allocation.bytes)?;
        Ok((ptr.0 + offset, allocation))
    }

    /// Makes work queued next on `stream` wait for the work queued so far on
    /// the stream `allocation` was made on, when that is another live stream
    /// (the memory may not exist yet, or be in use, in `stream`'s order).
    fn order_after(
        &self,
        allocation: Allocation,
        stream_id: StreamHandle,
        stream: &RawStream,
    ) -> Result<(), MemError> {
        if allocation.stream == stream_id.0 {
            return Ok(());
        }
        let origin = self.handles().streams.get(&allocation.stream).cloned();
        match origin {
            Some(origin) => RawEvent::record(&origin)?.make_wait(stream),
            None => Ok(()),
        }
    }

    /// Waits for every stream of this backend, so that memory freed on any of
    /// them returns to the pool.
    fn synchronize_all_streams(&self) {
        let streams: Vec<Arc<RawStream>> = self.handles().streams.values().cloned().collect();
        for stream in streams {
            if let Err(error) = stream.synchronize() {
                tracing::warn!(%error, "synchronising a stream to reclaim freed memory failed");
            }
        }
    }

    fn try_alloc(&self, bytes: usize, stream: &RawStream) -> Result<u64, cu::CUresult> {
        let mut address: cu::CUdeviceptr = 0;
        // SAFETY: the out-pointer is a live CUdeviceptr; the stream is live
        // and the caller made its context current.
        match unsafe { cu::cuMemAllocAsync(&mut address, bytes, stream.raw()) } {
            cu::CUresult::CUDA_SUCCESS => Ok(address),
            error => Err(error),
        }
    }

    fn out_of_memory(&self, bytes: u64) -> MemError {
        let free = self.mem_info().map_or(0, |info| info.free);
        MemError::OutOfMemory {
            label: String::new(),
            requested: Bytes(bytes),
            free: Bytes(free),
            idle_held: Bytes(0),
            limit: Bytes(free),
        }
    }
}

impl Shared {
    fn handles(&self) -> MutexGuard<'_, Handles> {
        // The maps are consistent after every statement.
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let handles = std::mem::take(&mut *self.handles());
        if handles.allocations.is_empty() {
            return;
        }
        tracing::debug!(
            count = handles.allocations.len(),
            "freeing device allocations left when the CUDA backend was dropped"
        );
        for stream in handles.streams.values() {
            if let Err(error) = stream.synchronize() {
                tracing::warn!(%error, "synchronising a stream at shutdown failed");
            }
        }
        let Ok(_guard) = self.context.enter() else {
            return;
        };
        for &address in handles.allocations.keys() {
            // SAFETY: the address is a live allocation of this context, its
            // streams have finished, and nothing uses it after this point.
            let result = unsafe { cu::cuMemFree_v2(address) };
            if let Err(error) = check(result, "free at shutdown") {
                tracing::warn!(%error, "freeing a leftover device allocation failed");
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

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Driver free memory plus what the pool holds idle, and the total.
    fn mem_info(&self) -> Result<MemInfo, MemError> {
        let (free, total) = self.shared.context.raw_mem_info()?;
        let idle = self.pool_usage()?.idle();
        Ok(MemInfo {
            free: free.saturating_add(idle).min(total),
            total,
        })
    }

    fn create_stream(&self) -> Result<StreamHandle, MemError> {
        let stream = Arc::new(RawStream::create(&self.shared.context)?);
        let mut h = self.handles();
        let id = h.next_stream;
        h.next_stream += 1;
        h.streams.insert(id, stream);
        Ok(StreamHandle(id))
    }

    fn destroy_stream(&self, stream: StreamHandle) -> Result<(), MemError> {
        let removed = self.handles().streams.remove(&stream.0);
        match removed {
            // Dropped outside the lock; the driver finishes pending work first.
            Some(raw) => {
                drop(raw);
                Ok(())
            }
            None => Err(MemError::backend(
                NAME,
                "destroy stream",
                format!("stream {} does not exist", stream.0),
            )),
        }
    }

    fn synchronize(&self, stream: StreamHandle) -> Result<(), MemError> {
        self.stream(stream, "synchronize")?.synchronize()
    }

    fn record_event(&self, stream: StreamHandle) -> Result<EventHandle, MemError> {
        let raw = self.stream(stream, "record event")?;
        let event = Arc::new(RawEvent::record(&raw)?);
        let mut h = self.handles();
        let id = h.next_event;
        h.next_event += 1;
        h.events.insert(id, event);
        Ok(EventHandle(id))
    }

    fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<(), MemError> {
        let raw_stream = self.stream(stream, "order streams")?;
        let raw_event = self.handles().events.get(&event.0).cloned();
        match raw_event {
            Some(raw_event) => raw_event.make_wait(&raw_stream),
            None => Err(MemError::backend(
                NAME,
                "order streams",
                format!("event {} does not exist", event.0),
            )),
        }
    }

    fn event_complete(&self, event: EventHandle) -> Result<bool, MemError> {
        let raw = self.handles().events.get(&event.0).cloned();
        match raw {
            Some(raw) => raw.complete(),
            None => Err(MemError::backend(
                NAME,
                "query event",
                format!("event {} does not exist", event.0),
            )),
        }
    }

    fn destroy_event(&self, event: EventHandle) -> Result<(), MemError> {
        let removed = self.handles().events.remove(&event.0);
        drop(removed);
        Ok(())
    }

    /// `cuMemAllocAsync` from the device's pool; when the pool cannot grow,
    /// every stream is synchronised once (memory freed on another stream then
    /// becomes reusable) before reporting out of memory.
    fn alloc_device(&self, bytes: u64, stream: StreamHandle) -> Result<DevicePtr, MemError> {
        let raw = self.stream(stream, "allocate")?;
        let Ok(size) = usize::try_from(bytes.max(1)) else {
            return Err(self.out_of_memory(bytes));
        };
        let address = {
            let _guard = self.shared.context.enter()?;
            match self.try_alloc(size, &raw) {
                Err(error) if is_out_of_memory(error) => {
                    self.synchronize_all_streams();
                    self.try_alloc(size, &raw)
                }
                other => other,
            }
        };
        match address {
            Ok(address) => {
                self.handles().allocations.insert(
                    address,
                    Allocation {
                        bytes,
                        stream: stream.0,
                    },
                );
                Ok(DevicePtr(address))
            }
            Err(error) if is_out_of_memory(error) => Err(self.out_of_memory(bytes)),
            Err(error) => Err(failure("allocate", error)),
        }
    }

    /// `cuMemFreeAsync` on `stream`: the memory returns to the pool once the
    /// work queued before it completed, on `stream` and on the stream it was
    /// allocated on.
    fn free_device(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<(), MemError> {
        let raw = self.stream(stream, "free")?;
        let Some(allocation) = self.handles().allocations.remove(&ptr.0) else {
            return Err(MemError::backend(
                NAME,
                "free",
                format!("{ptr} is not a live allocation"),
            ));
        };
        let freed = self.order_after(allocation, stream, &raw).and_then(|()| {
            let _guard = self.shared.context.enter()?;
            // SAFETY: the address is a live allocation of this backend,
            // removed from the map so that it is freed once; the stream is
            // live and ordered after the allocation's own stream.
            check(unsafe { cu::cuMemFreeAsync(ptr.0, raw.raw()) }, "free")
        });
        if freed.is_err() {
            self.handles().allocations.insert(ptr.0, allocation);
        }
        freed
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, MemError> {
        self.shared.pinned.allocate(bytes)
    }

    fn copy_to_device(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: &[u8],
        stream: StreamHandle,
    ) -> Result<(), MemError> {
        let raw = self.stream(stream, "copy to device")?;
        let (address, allocation) = self.checked_range(dst, offset, src.len(), "copy to device")?;
        if src.is_empty() {
            return Ok(());
        }
        self.order_after(allocation, stream, &raw)?;
        let _guard = self.shared.context.enter()?;
        // SAFETY: `src` is a live host slice of `src.len()` bytes and the
        // device range was checked to lie inside a live allocation; the
        // stream is synchronised below, before `src` can be released.
        check(
            unsafe { cu::cuMemcpyHtoDAsync_v2(address, src.as_ptr().cast(), src.len(), raw.raw()) },
            "copy to device",
        )?;
        raw.synchronize()
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), MemError> {
        let raw = self.stream(stream, "copy from device")?;
        let (address, allocation) =
            self.checked_range(src, offset, dst.len(), "copy from device")?;
        if dst.is_empty() {
            return Ok(());
        }
        self.order_after(allocation, stream, &raw)?;
        let _guard = self.shared.context.enter()?;
        // SAFETY: `dst` is a live, exclusively borrowed host slice of
        // `dst.len()` bytes and the device range lies inside a live
        // allocation; the stream is synchronised below, before `dst` can be
        // used or released.
        check(
            unsafe {
                cu::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), address, dst.len(), raw.raw())
            },
            "copy from device",
        )?;
        raw.synchronize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_keeps_freed_memory_cached() {
        let config = CudaConfig::default();
        assert_eq!(config.release_threshold, u64::MAX);
        assert_eq!(config.pinned_cache_bytes, crate::DEFAULT_PINNED_MAX_BYTES);
    }

    #[test]
    fn the_backend_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<CudaBackend>();
        assert_send_sync::<EulerDecay>();
    }
}
