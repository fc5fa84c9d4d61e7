//! Non-blocking streams and events, created and destroyed through the
//! driver, and each stream's track of its work on device memory.
//!
//! A stream's track counts how far its work on device memory has been
//! queued; marker events let another stream wait for it. Recording an event after every copy or kernel that touches an
//! allocation (so that its free can wait for the last use) costs a driver
//! call per use, and an event per allocation and stream that lives as long
//! as the allocation. Instead a stream counts its uses on the host
//! ([`StreamTrack::note_use`], no driver call), and an event is recorded
//! only when a free on another stream needs one: the stream's latest
//! marker, shared by every allocation it used, answers for all uses queued
//! before it. A stream that ends with uses after its latest marker records
//! a final one as it is destroyed, so a free queued later still finds an
//! event covering them.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::context::DeviceContext;
use super::driver::describe;
use super::sys::{self, CuEvent, CuResult, CuStream};
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

/// An event recorded on a stream, standing for every use queued on it
/// before the event.
pub(super) struct Marker {
    event: RawEvent,
    /// The uses of the stream queued before the event (numbered from 1).
    covers: u64,
    /// Set once the event was seen complete: waiting for it is then moot.
    complete: AtomicBool,
}

impl Marker {
    /// Whether the work before the marker completed; asks the driver until
    /// it once answers yes.
    pub(super) fn complete(&self) -> Result<bool, BackendError> {
        if self.complete.load(Ordering::Acquire) {
            return Ok(true);
        }
        let done = self.event.complete()?;
        if done {
            self.complete.store(true, Ordering::Release);
        }
        Ok(done)
    }

    /// Makes work queued next on `stream` wait for the marker, unless it
    /// is known complete.
    pub(super) fn order(&self, stream: &RawStream) -> Result<(), BackendError> {
        if self.complete.load(Ordering::Acquire) {
            return Ok(());
        }
        self.event.make_wait(stream)
    }
}

/// The latest marker of a stream, and whether the stream has ended.
#[derive(Default)]
struct Markers {
    latest: Option<Arc<Marker>>,
    /// Set as the stream is destroyed, after its final marker (if it
    /// needed one) was recorded.
    ended: bool,
}

/// What one stream has queued on device memory, shared by the stream and
/// by the allocations it used (which outlive it).
pub(super) struct StreamTrack {
    stream: Weak<RawStream>,
    /// Uses of device memory queued on the stream so far.
    uses: AtomicU64,
    markers: Mutex<Markers>,
}

impl StreamTrack {
    /// The track of a stream being created (`Arc::new_cyclic`).
    pub(super) fn new(stream: Weak<RawStream>) -> Arc<Self> {
        Arc::new(StreamTrack {
            stream,
            uses: AtomicU64::new(0),
            markers: Mutex::new(Markers::default()),
        })
    }

    fn markers(&self) -> MutexGuard<'_, Markers> {
        // The markers are consistent after every statement.
        self.markers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a use of device memory just queued on the stream; returns
    /// its number, for [`StreamTrack::marker_after`].
    pub(super) fn note_use(&self) -> u64 {
        self.uses.fetch_add(1, Ordering::AcqRel).saturating_add(1)
    }

    /// A marker after the stream's use number `use_number`: the latest
    /// one when it covers that use, else one recorded now (covering every
    /// use queued so far). `None` only when the stream ended and its final
    /// marker could not be recorded: the caller must then order by other
    /// means.
    pub(super) fn marker_after(
        &self,
        use_number: u64,
    ) -> Result<Option<Arc<Marker>>, BackendError> {
        loop {
            let mut markers = self.markers();
            if let Some(latest) = markers.latest.as_ref()
                && latest.covers >= use_number
            {
                return Ok(Some(Arc::clone(latest)));
            }
            if let Some(stream) = self.stream.upgrade() {
                // Read before recording: every use counted is queued before
                // the event, so the marker never claims a later one.
                let covers = self.uses.load(Ordering::Acquire);
                let marker = Arc::new(Marker {
                    event: RawEvent::record(&stream)?,
                    covers,
                    complete: AtomicBool::new(false),
                });
                markers.latest = Some(Arc::clone(&marker));
                return Ok(Some(marker));
            }
            if markers.ended {
                // Its final marker covers every use, unless it was lost.
                return Ok(None);
            }
            // The stream is being destroyed and has not recorded its final
            // marker yet: it does so under this lock, at once.
            drop(markers);
            std::thread::yield_now();
        }
    }

    /// Records the final marker of `stream` (this track's, being
    /// destroyed) when uses were queued after its latest one.
    pub(super) fn end(&self, stream: &RawStream) {
        let mut markers = self.markers();
        let uses = self.uses.load(Ordering::Acquire);
        let covered = markers.latest.as_ref().map_or(0, |latest| latest.covers);
        if uses > covered {
            match RawEvent::record(stream) {
                Ok(event) => {
                    markers.latest = Some(Arc::new(Marker {
                        event,
                        covers: uses,
                        complete: AtomicBool::new(false),
                    }));
                }
                Err(error) => {
                    tracing::warn!(%error, "recording a destroyed stream's final event failed; frees after its work synchronise the device");
                }
            }
        }
        markers.ended = true;
    }

    /// Whether the stream ended and every use `use_number` and before is
    /// known complete: the stream no longer needs a place in an
    /// allocation's list of users.
    pub(super) fn retired_through(&self, use_number: u64) -> bool {
        let markers = self.markers();
        if !markers.ended {
            return false;
        }
        match markers.latest.as_ref() {
            Some(latest) if latest.covers >= use_number => {
                let latest = Arc::clone(latest);
                drop(markers);
                latest.complete().unwrap_or(false)
            }
            // No use at all, or only uses before a marker that was dropped:
            // nothing was ever counted for this allocation on the stream.
            None => use_number == 0,
            Some(_) => false,
        }
    }
}
