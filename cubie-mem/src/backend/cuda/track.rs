//! How far each stream's work on device memory has been queued, and the
//! marker events that let another stream wait for it.
//!
//! Recording an event after every copy or kernel that touches an
//! allocation (so that its free can wait for the last use) costs a driver
//! call per use, and an event per allocation and stream that lives as long
//! as the allocation. Instead a stream counts its uses on the host
//! ([`StreamTrack::note_use`], no driver call), and an event is recorded
//! only when a free on another stream needs one: the stream's latest
//! marker, shared by every allocation it used, answers for all uses queued
//! before it. A stream that ends with uses after its latest marker records
//! a final one as it is destroyed, so a free queued later still finds an
//! event covering them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::stream::{RawEvent, RawStream};
use crate::backend::BackendError;

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
