//! The [`Backend`] contract on the CUDA driver: the calls the manager makes.

use std::any::Any;
use std::sync::Arc;

use super::driver::NAME;
use super::pinned::Contents;
use super::stream::{RawEvent, RawStream};
use super::strided::HostRows;
use super::sys::{self, CuResult};
use super::{Allocation, CudaBackend, PreparedUse, host_kernel_unsupported, unknown_allocation};
use crate::backend::{
    Backend, BackendError, DevicePtr, EventHandle, KernelBody, KernelLaunch, MemInfo, PinnedBlock,
    PoolUsage, StreamHandle, StridedRows,
};
use crate::timeline::Activity;

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Driver free memory plus what the pool holds idle, and the total.
    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        // One entry for the three queries below.
        let _guard = self.shared.context.enter("query free memory")?;
        let (free, total) = self.shared.context.raw_mem_info()?;
        let idle = self.shared.context.pool_usage()?.idle();
        Ok(MemInfo {
            free: free.saturating_add(idle).min(total),
            total,
        })
    }

    /// The pool's reserved and used bytes (`CU_MEMPOOL_ATTR_*_MEM_CURRENT`);
    /// CUDA does not tell the largest free block.
    fn pool_usage(&self) -> Option<PoolUsage> {
        self.shared.context.pool_usage().ok()
    }

    fn create_stream(&self) -> Result<StreamHandle, BackendError> {
        let stream = RawStream::create(&self.shared.context)?;
        let mut h = self.handles();
        let id = h.next_stream;
        h.next_stream += 1;
        h.streams.insert(id, stream);
        Ok(StreamHandle(id))
    }

    /// Forgets the stream and destroys it (`cuStreamDestroy`, once no
    /// other call holds it): its queued work still completes, and work on
    /// other streams stays ordered after the allocations made on it through
    /// their events. A stream adopted with [`CudaBackend::adopt_stream`] is
    /// forgotten only, never destroyed.
    fn destroy_stream(&self, stream: StreamHandle) -> Result<(), BackendError> {
        let removed = self.handles().streams.remove(&stream.0);
        match removed {
            // Dropped outside the lock.
            Some(raw) => {
                drop(raw);
                Ok(())
            }
            None => Err(BackendError::unknown_stream("destroy stream", stream)),
        }
    }

    fn synchronize(&self, stream: StreamHandle) -> Result<(), BackendError> {
        self.stream(stream, "synchronize")?.synchronize()
    }

    fn record_event(&self, stream: StreamHandle) -> Result<EventHandle, BackendError> {
        let raw = self.stream(stream, "record event")?;
        let event = Arc::new(RawEvent::record(&raw)?);
        let mut h = self.handles();
        let id = h.next_event;
        h.next_event += 1;
        h.events.insert(id, event);
        Ok(EventHandle(id))
    }

    fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<(), BackendError> {
        let (raw_stream, raw_event) = self.stream_and_event(stream, event, "order streams")?;
        raw_event.make_wait(&raw_stream)
    }

    fn event_complete(&self, event: EventHandle) -> Result<bool, BackendError> {
        self.event(event, "query event")?.complete()
    }

    /// `cuEventSynchronize`: blocks this thread (not the streams) until the
    /// work before the event completed.
    fn synchronize_event(&self, event: EventHandle) -> Result<(), BackendError> {
        self.event(event, "wait for event")?.synchronize()
    }

    fn destroy_event(&self, event: EventHandle) -> Result<(), BackendError> {
        let removed = self.handles().events.remove(&event.0);
        drop(removed);
        Ok(())
    }

    /// `cuMemAllocFromPoolAsync` from the backend's pool, then an event on
    /// `stream` that other streams wait for before using the memory. When
    /// the pool cannot grow, the whole context is synchronised (memory freed
    /// on any stream, destroyed ones included, then returns to the pool) and
    /// the pool's idle memory is given back to the driver
    /// (`cuMemPoolTrimTo(pool, 0)`, for allocations the idle blocks cannot
    /// serve), then the allocation is tried once more before reporting out
    /// of memory.
    fn alloc_device(&self, bytes: u64, stream: StreamHandle) -> Result<DevicePtr, BackendError> {
        const OPERATION: &str = "allocate";
        let raw = self.stream(stream, OPERATION)?;
        let Ok(size) = usize::try_from(bytes.max(1)) else {
            return Err(self.out_of_memory(bytes));
        };
        // One entry for the allocation and its ready event.
        let _guard = self.shared.context.enter(OPERATION)?;
        let mut result = self.try_alloc(size, &raw)?;
        if result.is_err_and(|code| code == CuResult::OUT_OF_MEMORY) {
            self.shared.context.reclaim_idle_memory(OPERATION);
            result = self.try_alloc(size, &raw)?;
        }
        match result {
            Ok(address) => {
                let ready = match RawEvent::record(&raw) {
                    Ok(ready) => ready,
                    Err(error) => {
                        self.free_unrecorded(address, &raw);
                        return Err(error);
                    }
                };
                self.shared
                    .recorder
                    .mark((stream.0, &raw), Activity::Alloc, bytes);
                self.handles()
                    .allocations
                    .insert(address, Arc::new(Allocation::new(bytes, &raw, ready)));
                Ok(DevicePtr(address))
            }
            Err(CuResult::OUT_OF_MEMORY) => Err(self.out_of_memory(bytes)),
            Err(code) => self
                .shared
                .context
                .check(code, OPERATION)
                .and(Err(self.out_of_memory(bytes))),
        }
    }

    /// `cuMemFreeAsync` on `stream`: the memory returns to the pool once the
    /// work queued before it completed, on `stream` and on the stream it was
    /// allocated on. The driver does not need `bytes`; it is checked against
    /// the size allocated, and a mismatch frees nothing.
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "free";
        let (raw, allocation) = {
            let mut h = self.handles();
            let raw = h.stream(stream, OPERATION)?;
            let Some(allocation) = h.allocations.get(&ptr.0).cloned() else {
                return Err(unknown_allocation(OPERATION, ptr));
            };
            if allocation.bytes != bytes {
                return Err(BackendError::OutOfBounds {
                    operation: OPERATION,
                    offset: 0,
                    end: bytes,
                    size: allocation.bytes,
                });
            }
            h.allocations.remove(&ptr.0);
            (raw, allocation)
        };
        let freed = allocation.order_free(&raw).and_then(|()| {
            let context = &self.shared.context;
            let _guard = context.enter(OPERATION)?;
            // SAFETY: the address is a live allocation of this backend,
            // removed from the map so that it is freed once; the stream is
            // live and ordered after the allocation and its uses elsewhere.
            context.check(unsafe { sys::cuMemFreeAsync(ptr.0, raw.raw()) }, OPERATION)?;
            self.shared
                .recorder
                .mark((stream.0, &raw), Activity::Free, bytes);
            Ok(())
        });
        if freed.is_err() {
            self.handles().allocations.insert(ptr.0, allocation);
        }
        freed
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.shared.pinned.allocate(bytes, Contents::Zeroed)
    }

    fn alloc_pinned_for_overwrite(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.shared.pinned.allocate(bytes, Contents::Overwritten)
    }

    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        self.shared
            .pinned
            .check_page_locked("", ptr.addr(), len)
            .is_ok()
    }

    fn copy_to_device(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: &[u8],
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        let host = HostSide::Source(src.as_ptr());
        // SAFETY: `src` is a live host slice of `src.len()` bytes, borrowed
        // until the stream is synchronised below.
        let queued =
            unsafe { self.queue_copy(dst, offset, host, src.len(), stream, "copy to device") };
        queued?.map_or(Ok(()), |raw| raw.synchronize())
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        let host = HostSide::Target(dst.as_mut_ptr());
        // SAFETY: `dst` is a live host slice of `dst.len()` bytes, borrowed
        // exclusively until the stream is synchronised below.
        let queued =
            unsafe { self.queue_copy(src, offset, host, dst.len(), stream, "copy from device") };
        queued?.map_or(Ok(()), |raw| raw.synchronize())
    }

    /// `cuMemcpyHtoDAsync` on `stream`, after the allocation;
    /// returns once queued, without synchronising.
    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous copy to device";
        self.shared
            .pinned
            .check_page_locked(OPERATION, src.addr(), len)?;
        // SAFETY: the caller guarantees that `src..src + len` is page-locked
        // memory of this backend, left allocated and unwritten until the
        // copy completed.
        unsafe { self.queue_copy(dst, offset, HostSide::Source(src), len, stream, OPERATION) }
            .map(drop)
    }

    /// `cuMemcpyDtoHAsync` on `stream`, after the allocation;
    /// returns once queued, without synchronising.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        len: usize,
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous copy from device";
        self.shared
            .pinned
            .check_page_locked(OPERATION, dst.addr(), len)?;
        // SAFETY: the caller guarantees that `dst..dst + len` is page-locked
        // memory of this backend that stays allocated and that nobody reads
        // or writes until the copy completed.
        unsafe { self.queue_copy(src, offset, HostSide::Target(dst), len, stream, OPERATION) }
            .map(drop)
    }

    /// `cuMemcpy2DAsync_v2` on `stream`, after the allocation; returns once
    /// queued. Every host row must be page-locked memory of this backend
    /// (or of a peer it accepts).
    unsafe fn copy_to_device_strided_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        rows: StridedRows,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous strided copy to device";
        // SAFETY: passed on from the caller.
        unsafe { self.queue_strided(dst, offset, HostRows::Source(src), rows, stream, OPERATION) }
    }

    /// `cuMemcpy2DAsync_v2` on `stream`, after the allocation; returns once
    /// queued.
    unsafe fn copy_from_device_strided_async(
        &self,
        dst: *mut u8,
        rows: StridedRows,
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous strided copy from device";
        // SAFETY: passed on from the caller.
        unsafe { self.queue_strided(src, offset, HostRows::Target(dst), rows, stream, OPERATION) }
    }

    /// Host kernels run only on the simulated device: always
    /// [`BackendError::Unsupported`], with nothing queued or checked. Launch
    /// CUDA kernels with a [`LaunchBuilder`](super::LaunchBuilder) on the
    /// group's [`GroupStream`](super::GroupStream).
    fn launch(&self, launch: KernelLaunch<'_>, _stream: StreamHandle) -> Result<(), BackendError> {
        match launch.body {
            KernelBody::Host { .. } => Err(host_kernel_unsupported(launch.name)),
        }
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }

    fn accept_page_locked(&self, peer: &dyn Backend) -> bool {
        match peer
            .as_any()
            .and_then(|any| any.downcast_ref::<CudaBackend>())
        {
            Some(peer) => {
                self.shared.pinned.accept(&peer.shared.pinned);
                true
            }
            None => false,
        }
    }
}

/// The host end of a copy: the bytes read from, or written into.
enum HostSide {
    /// Host to device, from here.
    Source(*const u8),
    /// Device to host, into here.
    Target(*mut u8),
}

impl CudaBackend {
    /// Frees an allocation the caller never saw (its ready event could not
    /// be recorded), on the stream it was made on.
    fn free_unrecorded(&self, address: u64, stream: &RawStream) {
        let context = &self.shared.context;
        let Ok(_guard) = context.enter("free") else {
            return;
        };
        // SAFETY: the address was just allocated on `stream` and is known
        // to nobody else.
        let result = unsafe { sys::cuMemFreeAsync(address, stream.raw()) };
        if let Err(error) = context.check(result, "free") {
            tracing::warn!(%error, "freeing an allocation whose ordering event failed");
        }
    }

    /// Checks a copy of `len` bytes between `host` and `device + offset`,
    /// orders `stream` after the allocation and queues the copy there (timed when the timeline records); the stream, or `None`
    /// when there was nothing to copy.
    ///
    /// # Safety
    ///
    /// `host..host + len` stays allocated until the copy completed, and
    /// nothing else writes it (for a download: reads or writes it) until
    /// then. From page-locked memory of this backend the copy runs
    /// asynchronously; from pageable memory the driver may stage it.
    unsafe fn queue_copy(
        &self,
        device: DevicePtr,
        offset: u64,
        host: HostSide,
        len: usize,
        stream: StreamHandle,
        operation: &'static str,
    ) -> Result<Option<Arc<RawStream>>, BackendError> {
        let Some(PreparedUse {
            stream: raw,
            address,
            allocation,
        }) = self.prepare_use(device, offset, len, stream, operation)?
        else {
            return Ok(None);
        };
        let context = &self.shared.context;
        let _guard = context.enter(operation)?;
        let started = self.shared.recorder.start(&raw);
        // SAFETY: the device range was checked to lie inside a live
        // allocation, and the copy is queued after the allocation, so the
        // memory exists in `stream`'s order; the free waits for the copy
        // (`note_use` below, `Allocation::order_free`). The host range is the
        // caller's to keep valid; the driver keeps no reference to it after
        // the copy. `raw` keeps the stream alive for the call.
        let (activity, result) = match host {
            HostSide::Source(src) => (Activity::HostToDevice, unsafe {
                sys::cuMemcpyHtoDAsync(address, src.cast(), len, raw.raw())
            }),
            HostSide::Target(dst) => (Activity::DeviceToHost, unsafe {
                sys::cuMemcpyDtoHAsync(dst.cast(), address, len, raw.raw())
            }),
        };
        let queued = context.check(result, operation);
        if queued.is_ok() {
            allocation.note_use(&raw);
        }
        self.shared.recorder.finish(
            started,
            (stream.0, &raw),
            activity,
            activity.category(),
            len as u64,
        );
        queued.map(|()| Some(raw))
    }
}
