//! Non-blocking streams and events, created and destroyed through the
//! driver directly (cust's `Stream` drops the non-blocking flag, and its
//! `Event` cannot be recorded on a stream it did not create).

use std::ptr;
use std::sync::Arc;

use super::context::DeviceContext;
use super::driver::describe;
use super::sys::{self, CuEvent, CuResult, CuStream};
use crate::backend::BackendError;

/// A stream that does not synchronise with the null stream; destroyed when
/// dropped (the driver finishes its pending work first).
pub(super) struct RawStream {
    raw: CuStream,
    context: Arc<DeviceContext>,
}

// SAFETY: a CUstream is an opaque handle the driver lets any thread use once
// its context is current, which every use here arranges through `enter`.
unsafe impl Send for RawStream {}
// SAFETY: as for Send; the handle is never changed after creation.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// Creates a non-blocking stream on the device.
    pub(super) fn create(context: &Arc<DeviceContext>) -> Result<Self, BackendError> {
        let _guard = context.enter("create stream")?;
        let mut raw: CuStream = ptr::null_mut();
        // SAFETY: the out-pointer is a live stream slot; the context is current.
        let result = unsafe { sys::cuStreamCreate(&mut raw, sys::STREAM_NON_BLOCKING) };
        context.check(result, "create stream")?;
        Ok(RawStream {
            raw,
            context: Arc::clone(context),
        })
    }

    /// The driver handle, valid while `self` lives.
    pub(super) fn raw(&self) -> CuStream {
        self.raw
    }

    /// The device context of the stream.
    pub(super) fn context(&self) -> &Arc<DeviceContext> {
        &self.context
    }

    /// Blocks until all work queued on the stream completed.
    pub(super) fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.context.enter("synchronize")?;
        // SAFETY: the stream is live while `self` is.
        let result = unsafe { sys::cuStreamSynchronize(self.raw) };
        self.context.check(result, "synchronize")
    }
}

impl Drop for RawStream {
    fn drop(&mut self) {
        let _guard = self.context.enter("destroy stream");
        // SAFETY: the stream was created by this struct and is destroyed
        // once; the driver finishes its pending work before releasing it.
        let result = unsafe { sys::cuStreamDestroy_v2(self.raw) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "destroying a CUDA stream failed");
        }
    }
}

/// An event recorded on a [`RawStream`]; destroyed when dropped.
pub(super) struct RawEvent {
    raw: CuEvent,
    context: Arc<DeviceContext>,
}

// SAFETY: a CUevent is an opaque handle usable from any thread with its
// context current, which every use here arranges through `enter`.
unsafe impl Send for RawEvent {}
// SAFETY: as for Send; the handle is never changed after creation.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// Creates an event without timing and records it after the work
    /// queued on `stream`.
    pub(super) fn record(stream: &RawStream) -> Result<Self, BackendError> {
        Self::record_with(stream, sys::EVENT_DISABLE_TIMING)
    }

    /// Creates an event that records its time, after the work queued on
    /// `stream` (for [`RawEvent::elapsed_ms`]).
    pub(super) fn record_timed(stream: &RawStream) -> Result<Self, BackendError> {
        Self::record_with(stream, sys::EVENT_DEFAULT)
    }

    fn record_with(stream: &RawStream, flags: u32) -> Result<Self, BackendError> {
        let context = &stream.context;
        let _guard = context.enter("record event")?;
        let mut raw: CuEvent = ptr::null_mut();
        // SAFETY: the out-pointer is a live event slot; the context is current.
        let result = unsafe { sys::cuEventCreate(&mut raw, flags) };
        context.check(result, "create event")?;
        let event = RawEvent {
            raw,
            context: Arc::clone(context),
        };
        // SAFETY: both handles are live; the context is current.
        let result = unsafe { sys::cuEventRecord(event.raw, stream.raw()) };
        context.check(result, "record event")?;
        Ok(event)
    }

    /// Makes work queued next on `stream` wait until the event completed.
    pub(super) fn make_wait(&self, stream: &RawStream) -> Result<(), BackendError> {
        let _guard = self.context.enter("order streams")?;
        // SAFETY: both handles are live; the context is current. The driver
        // keeps the dependency when the event is destroyed afterwards.
        let result = unsafe { sys::cuStreamWaitEvent(stream.raw(), self.raw, 0) };
        self.context.check(result, "order streams")
    }

    /// Whether the work before the event completed.
    pub(super) fn complete(&self) -> Result<bool, BackendError> {
        let _guard = self.context.enter("query event")?;
        // SAFETY: the event is live while `self` is.
        let result = unsafe { sys::cuEventQuery(self.raw) };
        if result == CuResult::NOT_READY {
            return Ok(false);
        }
        self.context.check(result, "query event").map(|()| true)
    }

    /// Blocks until the work before the event completed (`cuEventSynchronize`).
    pub(super) fn synchronize(&self) -> Result<(), BackendError> {
        let _guard = self.context.enter("wait for event")?;
        // SAFETY: the event is live while `self` is; the context is current.
        let result = unsafe { sys::cuEventSynchronize(self.raw) };
        self.context.check(result, "wait for event")
    }

    /// Milliseconds between `start` and this event, both timed and complete.
    pub(super) fn elapsed_ms(&self, start: &RawEvent) -> Result<f32, BackendError> {
        let _guard = self.context.enter("time events")?;
        let mut milliseconds = 0f32;
        // SAFETY: both events are live and were recorded; the out-pointer is
        // a live f32.
        let result = unsafe { sys::cuEventElapsedTime(&mut milliseconds, start.raw, self.raw) };
        self.context.check(result, "time events")?;
        Ok(milliseconds)
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        let _guard = self.context.enter("destroy event");
        // SAFETY: the event was created by this struct and is destroyed once.
        let result = unsafe { sys::cuEventDestroy_v2(self.raw) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "destroying a CUDA event failed");
        }
    }
}
