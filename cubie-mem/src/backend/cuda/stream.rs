//! The CUDA backend's streams and events.
//!
//! A [`CudaStream`] is a non-blocking stream (never the null stream): one
//! the backend created, destroyed when its last reference drops, or one of
//! another library adopted for a binding, never destroyed here. A
//! [`CudaEvent`] is taken from the context's idle events and given back
//! when dropped. Copies check the device range against the backend's live
//! allocations before the driver sees them. Nothing here orders one stream
//! after another: callers do, with events.

use std::any::Any;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;

use super::CudaBackend;
use super::context::DeviceContext;
use super::driver::describe;
use super::sys::{self, CuEvent, CuResult, CuStream};
use crate::backend::{BackendError, DevicePtr, Event, Stream, StridedRows, own};
use crate::timeline::Activity;

/// A stream of a [`CudaBackend`]; the stream a
/// [`Backend::create_stream`](crate::backend::Backend::create_stream) of it
/// hands out.
pub(crate) struct CudaStream {
    raw: CuStream,
    id: u64,
    backend: CudaBackend,
    /// False for an adopted stream, which its owner destroys.
    owned: bool,
}

// SAFETY: a CUstream is an opaque handle the driver lets any thread use once
// its context is current, which every use here arranges through `enter`.
unsafe impl Send for CudaStream {}
// SAFETY: as for Send; the handle is never changed after creation.
unsafe impl Sync for CudaStream {}

/// The host end of a copy: the bytes read from, or written into.
#[derive(Clone, Copy)]
pub(super) enum HostSide {
    /// Host to device, from here.
    Source(*const u8),
    /// Device to host, into here.
    Target(*mut u8),
}

impl HostSide {
    /// The host address.
    pub(super) fn address(self) -> usize {
        match self {
            HostSide::Source(src) => src.addr(),
            HostSide::Target(dst) => dst.addr(),
        }
    }

    /// What the copy is on a timeline.
    pub(super) fn activity(self) -> Activity {
        match self {
            HostSide::Source(_) => Activity::HostToDevice,
            HostSide::Target(_) => Activity::DeviceToHost,
        }
    }
}

impl CudaStream {
    /// Creates a non-blocking stream on `backend`'s device.
    pub(super) fn create(backend: &CudaBackend) -> Result<Self, BackendError> {
        let context = backend.context();
        let _guard = context.enter("create stream")?;
        let mut raw: CuStream = ptr::null_mut();
        // SAFETY: the out-pointer is a live stream slot; the context is current.
        let result = unsafe { sys::cuStreamCreate(&mut raw, sys::STREAM_NON_BLOCKING) };
        context.check(result, "create stream")?;
        Ok(Self::wrap(backend, raw, true))
    }

    /// Adopts `raw`, a stream of `backend`'s context created by someone
    /// else, which is never destroyed here.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of the context and stays so while work is
    /// queued on the result.
    pub(super) unsafe fn adopt(backend: &CudaBackend, raw: CuStream) -> Self {
        Self::wrap(backend, raw, false)
    }

    fn wrap(backend: &CudaBackend, raw: CuStream, owned: bool) -> Self {
        CudaStream {
            raw,
            id: backend.next_stream_id(),
            backend: backend.clone(),
            owned,
        }
    }

    /// The driver handle (`CUstream`), valid while `self` lives.
    pub(crate) fn raw_stream(&self) -> *mut c_void {
        self.raw
    }

    /// The backend the stream belongs to.
    pub(crate) fn backend(&self) -> &CudaBackend {
        &self.backend
    }

    /// The device context of the stream.
    pub(super) fn context(&self) -> &Arc<DeviceContext> {
        self.backend.context()
    }

    /// Checks a copy of `len` bytes between `host` and `device + offset`
    /// and queues it (timed when the timeline records); whether there was
    /// anything to copy.
    ///
    /// # Safety
    ///
    /// `host..host + len` stays allocated until the copy completed, and
    /// nothing else writes it (for a download: reads or writes it) until
    /// then.
    unsafe fn queue_copy(
        &self,
        device: DevicePtr,
        offset: u64,
        host: HostSide,
        len: usize,
        operation: &'static str,
    ) -> Result<bool, BackendError> {
        let address = self
            .backend
            .device_address(device, offset, len, operation)?;
        if len == 0 {
            return Ok(false);
        }
        let context = self.context();
        let _guard = context.enter(operation)?;
        let recorder = self.backend.recorder();
        let started = recorder.start(self);
        // SAFETY: the device range lies inside a live allocation (checked
        // above); the caller keeps the host range valid, and the driver
        // keeps no reference to it after the copy.
        let result = unsafe {
            match host {
                HostSide::Source(src) => sys::cuMemcpyHtoDAsync(address, src.cast(), len, self.raw),
                HostSide::Target(dst) => sys::cuMemcpyDtoHAsync(dst.cast(), address, len, self.raw),
            }
        };
        let queued = context.check(result, operation);
        let activity = host.activity();
        recorder.finish(started, self, activity, activity.category(), len as u64);
        queued.map(|()| true)
    }
}

impl Stream for CudaStream {
    fn id(&self) -> u64 {
        self.id
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        let context = self.context();
        let _guard = context.enter("synchronize")?;
        // SAFETY: the stream is live while `self` is.
        let result = unsafe { sys::cuStreamSynchronize(self.raw) };
        context.check(result, "synchronize")
    }

    fn record(&self) -> Result<Box<dyn Event>, BackendError> {
        Ok(Box::new(CudaEvent::record(self, false)?))
    }

    /// `cuStreamWaitEvent`; refused for an event of another backend kind
    /// or another device.
    fn wait(&self, event: &dyn Event) -> Result<(), BackendError> {
        const OPERATION: &str = "order streams";
        let event = own::<CudaEvent>(event.as_any(), OPERATION, "event")?;
        let context = self.context();
        if event.context.raw_context() != context.raw_context() {
            return Err(BackendError::Unsupported {
                operation: OPERATION,
                reason: format!(
                    "the event was recorded on device {}, the stream is on device {}",
                    event.context.ordinal(),
                    context.ordinal()
                ),
            });
        }
        let _guard = context.enter(OPERATION)?;
        // SAFETY: both handles are live; the context is current. The driver
        // keeps the dependency when the event is recorded again or destroyed.
        let result = unsafe { sys::cuStreamWaitEvent(self.raw, event.raw, 0) };
        context.check(result, OPERATION)
    }

    /// Queues the copy, then synchronises the stream, so that `src` is free
    /// to reuse when the call returns.
    fn copy_to_device(&self, dst: DevicePtr, offset: u64, src: &[u8]) -> Result<(), BackendError> {
        let host = HostSide::Source(src.as_ptr());
        // SAFETY: `src` is a live host slice of `src.len()` bytes, borrowed
        // until the stream is synchronised below.
        if unsafe { self.queue_copy(dst, offset, host, src.len(), "copy to device")? } {
            self.synchronize()?;
        }
        Ok(())
    }

    /// Queues the copy, then synchronises the stream.
    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        let host = HostSide::Target(dst.as_mut_ptr());
        // SAFETY: `dst` is a live host slice of `dst.len()` bytes, borrowed
        // exclusively until the stream is synchronised below.
        if unsafe { self.queue_copy(src, offset, host, dst.len(), "copy from device")? } {
            self.synchronize()?;
        }
        Ok(())
    }

    /// `cuMemcpyHtoDAsync`; returns once queued.
    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous copy to device";
        self.backend
            .pinned()
            .check_page_locked(OPERATION, src.addr(), len)?;
        // SAFETY: page-locked memory of this backend, which the caller
        // keeps allocated and unwritten until the copy completed.
        unsafe { self.queue_copy(dst, offset, HostSide::Source(src), len, OPERATION) }.map(drop)
    }

    /// `cuMemcpyDtoHAsync`; returns once queued.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        len: usize,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous copy from device";
        self.backend
            .pinned()
            .check_page_locked(OPERATION, dst.addr(), len)?;
        // SAFETY: page-locked memory of this backend, which the caller
        // keeps allocated and untouched until the copy completed.
        unsafe { self.queue_copy(src, offset, HostSide::Target(dst), len, OPERATION) }.map(drop)
    }

    /// `cuMemcpy2DAsync_v2`; returns once queued. Every host row must be
    /// page-locked memory of this backend (or of a peer it accepts).
    unsafe fn copy_to_device_strided_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        rows: StridedRows,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous strided copy to device";
        // SAFETY: passed on from the caller.
        unsafe { self.queue_strided(dst, offset, HostSide::Source(src), rows, OPERATION) }
    }

    /// `cuMemcpy2DAsync_v2`; returns once queued.
    unsafe fn copy_from_device_strided_async(
        &self,
        dst: *mut u8,
        rows: StridedRows,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous strided copy from device";
        // SAFETY: passed on from the caller.
        unsafe { self.queue_strided(src, offset, HostSide::Target(dst), rows, OPERATION) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CudaStream {
    /// Destroys a stream the backend created (the driver finishes its
    /// queued work first); an adopted one is left to its owner.
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let context = self.context();
        let _guard = context.enter("destroy stream");
        // SAFETY: the stream was created by this struct and is destroyed
        // once.
        let result = unsafe { sys::cuStreamDestroy(self.raw) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "destroying a CUDA stream failed");
        }
    }
}

/// An event recorded on a [`CudaStream`], taken from the context's idle
/// events (timed or not) and given back there when dropped.
pub(crate) struct CudaEvent {
    raw: CuEvent,
    context: Arc<DeviceContext>,
    timed: bool,
}

// SAFETY: a CUevent is an opaque handle usable from any thread with its
// context current, which every use here arranges through `enter`.
unsafe impl Send for CudaEvent {}
// SAFETY: as for Send; the handle is never changed after creation.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    /// An event recorded after the work queued on `stream`; `timed` records
    /// its time too (for [`CudaEvent::elapsed_ms`]).
    pub(super) fn record(stream: &CudaStream, timed: bool) -> Result<Self, BackendError> {
        let context = stream.context();
        let _guard = context.enter("record event")?;
        let raw = if timed {
            context.take_timed_event()?
        } else {
            context.take_event()?
        };
        let event = CudaEvent {
            raw,
            context: Arc::clone(context),
            timed,
        };
        // SAFETY: both handles are live and of this context, which is current.
        let result = unsafe { sys::cuEventRecord(event.raw, stream.raw) };
        context.check(result, "record event")?;
        Ok(event)
    }

    /// Milliseconds between `start` and this event, both timed and complete.
    pub(super) fn elapsed_ms(&self, start: &CudaEvent) -> Result<f32, BackendError> {
        let _guard = self.context.enter("time events")?;
        let mut milliseconds = 0f32;
        // SAFETY: both events are live and were recorded; the out-pointer is
        // a live f32.
        let result = unsafe { sys::cuEventElapsedTime(&mut milliseconds, start.raw, self.raw) };
        self.context.check(result, "time events")?;
        Ok(milliseconds)
    }
}

impl Event for CudaEvent {
    fn is_complete(&self) -> Result<bool, BackendError> {
        let _guard = self.context.enter("query event")?;
        // SAFETY: the event is live while `self` is.
        let result = unsafe { sys::cuEventQuery(self.raw) };
        if result == CuResult::NOT_READY {
            return Ok(false);
        }
        self.context.check(result, "query event").map(|()| true)
    }

    /// `cuEventSynchronize`: blocks this thread (not the streams).
    fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.context.enter("wait for event")?;
        // SAFETY: the event is live while `self` is; the context is current.
        let result = unsafe { sys::cuEventSynchronize(self.raw) };
        self.context.check(result, "wait for event")
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        self.context.recycle_event(self.raw, self.timed);
    }
}
