//! The [`Backend`] contract on the CUDA driver: the calls the manager makes.

use std::any::Any;
use std::sync::Arc;

use super::driver::NAME;
use super::stream::{RawEvent, RawStream};
use super::sys::{self, CuResult};
use super::{Allocation, CudaBackend, host_kernel_unsupported, unknown_allocation};
use crate::backend::{
    Backend, BackendError, DevicePtr, EventHandle, KernelBody, KernelLaunch, MemInfo, PinnedBlock,
    StreamHandle,
};
use crate::timeline::Activity;

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Driver free memory plus what the pool holds idle, and the total.
    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        let (free, total) = self.shared.context.raw_mem_info()?;
        let idle = self.shared.context.pool_usage()?.idle();
        Ok(MemInfo {
            free: free.saturating_add(idle).min(total),
            total,
        })
    }

    fn create_stream(&self) -> Result<StreamHandle, BackendError> {
        let stream = Arc::new(RawStream::create(&self.shared.context)?);
        let mut h = self.handles();
        let id = h.next_stream;
        h.next_stream += 1;
        h.streams.insert(id, stream);
        Ok(StreamHandle(id))
    }

    /// Forgets the stream. The driver stream itself lives on while a live
    /// allocation made on it holds it, so that work on other streams can
    /// still be ordered after it (`order_after`); the last holder destroys
    /// it, and the driver finishes its pending work first.
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
        let raw_stream = self.stream(stream, "order streams")?;
        self.event(event, "order streams")?.make_wait(&raw_stream)
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

    /// `cuMemAllocFromPoolAsync` from the backend's pool. When the pool
    /// cannot grow, every stream is synchronised (memory freed on another
    /// stream then returns to the pool) and the pool's idle memory is given
    /// back to the driver (`cuMemPoolTrimTo(pool, 0)`, for allocations the
    /// idle blocks cannot serve), then the allocation is tried once more
    /// before reporting out of memory.
    fn alloc_device(&self, bytes: u64, stream: StreamHandle) -> Result<DevicePtr, BackendError> {
        const OPERATION: &str = "allocate";
        let raw = self.stream(stream, OPERATION)?;
        let Ok(size) = usize::try_from(bytes.max(1)) else {
            return Err(self.out_of_memory(bytes));
        };
        let mut result = self.try_alloc(size, &raw)?;
        if result.is_err_and(|code| code == CuResult::OUT_OF_MEMORY) {
            self.synchronize_all_streams();
            if let Err(error) = self.shared.context.trim_pool(0) {
                tracing::warn!(%error, "trimming the memory pool before retrying an allocation failed");
            }
            result = self.try_alloc(size, &raw)?;
        }
        match result {
            Ok(address) => {
                self.shared
                    .recorder
                    .mark((stream.0, &raw), Activity::Alloc, bytes);
                self.handles().allocations.insert(
                    address,
                    Allocation {
                        bytes,
                        stream: stream.0,
                        origin: raw,
                    },
                );
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
        let raw = self.stream(stream, OPERATION)?;
        let allocation = {
            let mut h = self.handles();
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
            allocation
        };
        let freed = self.order_after(&allocation, stream, &raw).and_then(|()| {
            let context = &self.shared.context;
            let _guard = context.enter(OPERATION)?;
            // SAFETY: the address is a live allocation of this backend,
            // removed from the map so that it is freed once; the stream is
            // live and ordered after the allocation's own stream.
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
        self.shared.pinned.allocate(bytes)
    }

    fn copy_to_device(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: &[u8],
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "copy to device";
        let Some((raw, address)) = self.prepare_copy(dst, offset, src.len(), stream, OPERATION)?
        else {
            return Ok(());
        };
        let context = &self.shared.context;
        let _guard = context.enter(OPERATION)?;
        // SAFETY: `src` is a live host slice of `src.len()` bytes and the
        // device range was checked to lie inside a live allocation; the
        // stream is synchronised below, before `src` can be released.
        let started = self.shared.recorder.start(&raw);
        let queued = context.check(
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(address, src.as_ptr().cast(), src.len(), raw.raw())
            },
            OPERATION,
        );
        self.shared.recorder.finish(
            started,
            (stream.0, &raw),
            Activity::HostToDevice,
            Activity::HostToDevice.category(),
            src.len() as u64,
        );
        queued?;
        raw.synchronize()
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "copy from device";
        let Some((raw, address)) = self.prepare_copy(src, offset, dst.len(), stream, OPERATION)?
        else {
            return Ok(());
        };
        let context = &self.shared.context;
        let _guard = context.enter(OPERATION)?;
        // SAFETY: `dst` is a live, exclusively borrowed host slice of
        // `dst.len()` bytes and the device range lies inside a live
        // allocation; the stream is synchronised below, before `dst` can be
        // used or released.
        let started = self.shared.recorder.start(&raw);
        let queued = context.check(
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), address, dst.len(), raw.raw())
            },
            OPERATION,
        );
        self.shared.recorder.finish(
            started,
            (stream.0, &raw),
            Activity::DeviceToHost,
            Activity::DeviceToHost.category(),
            dst.len() as u64,
        );
        queued?;
        raw.synchronize()
    }

    /// `cuMemcpyHtoDAsync` on `stream`, after the allocation's own stream;
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
        let Some((raw, address)) = self.prepare_copy(dst, offset, len, stream, OPERATION)? else {
            return Ok(());
        };
        let context = &self.shared.context;
        let _guard = context.enter(OPERATION)?;
        // SAFETY: the device range was checked to lie inside a live
        // allocation, and the copy is queued after the allocation's stream,
        // so the memory exists in `stream`'s order; a later free on `stream`
        // runs after the copy, and `free_device`'s contract makes a free on
        // another stream wait for `stream`'s work first. The caller
        // guarantees that `src..src + len` is page-locked memory of this
        // backend, left allocated and unwritten until the copy completed; the
        // driver reads it only while the copy runs and keeps no reference
        // afterwards. `raw` keeps the stream alive for the call; destroyed
        // later, it still completes the queued copy.
        let started = self.shared.recorder.start(&raw);
        let queued = context.check(
            unsafe { sys::cuMemcpyHtoDAsync_v2(address, src.cast(), len, raw.raw()) },
            OPERATION,
        );
        self.shared.recorder.finish(
            started,
            (stream.0, &raw),
            Activity::HostToDevice,
            Activity::HostToDevice.category(),
            len as u64,
        );
        queued
    }

    /// `cuMemcpyDtoHAsync` on `stream`, after the allocation's own stream;
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
        let Some((raw, address)) = self.prepare_copy(src, offset, len, stream, OPERATION)? else {
            return Ok(());
        };
        let context = &self.shared.context;
        let _guard = context.enter(OPERATION)?;
        // SAFETY: the device range was checked to lie inside a live
        // allocation and the copy is ordered after its stream, as for
        // `copy_to_device_async`. The caller guarantees that `dst..dst + len`
        // is page-locked memory of this backend that stays allocated and that
        // nobody reads or writes until the copy completed, so the driver's
        // write into it races with nothing; no Rust reference to those bytes
        // is made here.
        let started = self.shared.recorder.start(&raw);
        let queued = context.check(
            unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), address, len, raw.raw()) },
            OPERATION,
        );
        self.shared.recorder.finish(
            started,
            (stream.0, &raw),
            Activity::DeviceToHost,
            Activity::DeviceToHost.category(),
            len as u64,
        );
        queued
    }

    /// Host kernels run only on the simulated device: always
    /// [`BackendError::Unsupported`], with nothing queued or checked. Launch
    /// CUDA kernels with [`CudaStream::launch`](super::CudaStream::launch)
    /// on the group's stream.
    fn launch(&self, launch: KernelLaunch<'_>, _stream: StreamHandle) -> Result<(), BackendError> {
        match launch.body {
            KernelBody::Host { .. } => Err(host_kernel_unsupported(launch.name)),
        }
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
