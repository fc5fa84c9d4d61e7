//! Non-blocking streams and events, created and destroyed through the
//! driver.

use std::ptr;
use std::sync::Arc;

use super::context::DeviceContext;
use super::driver::describe;
use super::sys::{self, CuEvent, CuResult, CuStream};
use super::track::StreamTrack;
use crate::backend::BackendError;

/// A stream that does not synchronise with the null stream; destroyed when
/// dropped (the driver finishes its pending work first), after recording
/// a final marker when it used device memory since its last one. An
/// adopted stream (another library's) gets its final marker but is never
/// destroyed.
pub(super) struct RawStream {
    raw: CuStream,
    context: Arc<DeviceContext>,
    track: Arc<StreamTrack>,
    /// False for an adopted stream, which its owner destroys.
    owned: bool,
}

// SAFETY: a CUstream is an opaque handle the driver lets any thread use once
// its context is current, which every use here arranges through `enter`.
unsafe impl Send for RawStream {}
// SAFETY: as for Send; the handle is never changed after creation.
unsafe impl Sync for RawStream {}

impl RawStream {
    /// Creates a non-blocking stream on the device.
    pub(super) fn create(context: &Arc<DeviceContext>) -> Result<Arc<Self>, BackendError> {
        let _guard = context.enter("create stream")?;
        let mut raw: CuStream = ptr::null_mut();
        // SAFETY: the out-pointer is a live stream slot; the context is current.
        let result = unsafe { sys::cuStreamCreate(&mut raw, sys::STREAM_NON_BLOCKING) };
        context.check(result, "create stream")?;
        Ok(Self::wrap(context, raw, true))
    }

    /// Adopts `raw`, a stream of `context` created by someone else, which
    /// is never destroyed here.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `context` and stays so while the result
    /// (or a clone of it) lives.
    pub(super) unsafe fn adopt(context: &Arc<DeviceContext>, raw: CuStream) -> Arc<Self> {
        Self::wrap(context, raw, false)
    }

    fn wrap(context: &Arc<DeviceContext>, raw: CuStream, owned: bool) -> Arc<Self> {
        Arc::new_cyclic(|stream| RawStream {
            raw,
            context: Arc::clone(context),
            track: StreamTrack::new(stream.clone()),
            owned,
        })
    }

    /// What the stream queued on device memory, for ordering frees after it.
    pub(super) fn track(&self) -> &Arc<StreamTrack> {
        &self.track
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
        self.track.end(self);
        if !self.owned {
            return;
        }
        let _guard = self.context.enter("destroy stream");
        // SAFETY: the stream was created by this struct and is destroyed
        // once; the driver finishes its pending work before releasing it.
        let result = unsafe { sys::cuStreamDestroy(self.raw) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "destroying a CUDA stream failed");
        }
    }
}

/// An event recorded on a [`RawStream`], taken from the context's idle
/// events (timed or not) and given back there when dropped.
pub(super) struct RawEvent {
    raw: CuEvent,
    context: Arc<DeviceContext>,
    timed: bool,
}

// SAFETY: a CUevent is an opaque handle usable from any thread with its
// context current, which every use here arranges through `enter`.
unsafe impl Send for RawEvent {}
// SAFETY: as for Send; the handle is never changed after creation.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// An event without timing, recorded after the work queued on `stream`.
    pub(super) fn record(stream: &RawStream) -> Result<Self, BackendError> {
        let context = &stream.context;
        let _guard = context.enter("record event")?;
        let event = RawEvent {
            raw: context.take_event()?,
            context: Arc::clone(context),
            timed: false,
        };
        event.record_entered(stream)?;
        Ok(event)
    }

    /// An event that records its time, after the work queued on `stream`
    /// (for [`RawEvent::elapsed_ms`]).
    pub(super) fn record_timed(stream: &RawStream) -> Result<Self, BackendError> {
        let context = &stream.context;
        let _guard = context.enter("record event")?;
        let event = RawEvent {
            raw: context.take_timed_event()?,
            context: Arc::clone(context),
            timed: true,
        };
        event.record_entered(stream)?;
        Ok(event)
    }

    /// `cuEventRecord` with the context already current.
    fn record_entered(&self, stream: &RawStream) -> Result<(), BackendError> {
        // SAFETY: both handles are live and of this context, which is current.
        let result = unsafe { sys::cuEventRecord(self.raw, stream.raw()) };
        self.context.check(result, "record event")
    }

    /// Makes work queued next on `stream` wait until the event completed.
    pub(super) fn make_wait(&self, stream: &RawStream) -> Result<(), BackendError> {
        let _guard = self.context.enter("order streams")?;
        // SAFETY: both handles are live; the context is current. The driver
        // keeps the dependency when the event is recorded again or destroyed.
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
        self.context.recycle_event(self.raw, self.timed);
    }
}
