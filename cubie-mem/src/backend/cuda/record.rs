//! The CUDA backend's timeline: while recording is on, every copy, kernel,
//! allocation and free gets timed events around it on its stream, and
//! [`Recorder::timeline`] turns them into the same [`Timeline`] (and Chrome
//! trace) the simulated device gives.
//!
//! Recording is diagnostics: a failure to record an event is logged and
//! the span left out, never the operation's failure. The recorder keeps
//! the most recent spans up to its capacity (each holds two events), and
//! counts the ones it dropped; on a GPU the figures cover the spans kept. Event timestamps
//! have a resolution of about half a microsecond. Spans on
//! one engine may overlap (copies of several streams share an engine's
//! bandwidth on a GPU), so a busy time is the sum of its spans.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::stream::{CudaEvent, CudaStream};
use crate::backend::BackendError;
use crate::backend::{Event, Stream};
use crate::timeline::{Activity, Span, SpanLog, Timeline};

/// A span whose events the device has not necessarily reached yet.
#[derive(Clone)]
struct Pending {
    activity: Activity,
    name: String,
    stream: u64,
    bytes: u64,
    start: Arc<CudaEvent>,
    end: Arc<CudaEvent>,
}

/// The spans recorded: the most recent up to a capacity, and how many
/// older ones were dropped.
struct Recorded {
    spans: VecDeque<Pending>,
    capacity: usize,
    dropped: u64,
}

/// Collects timed spans while recording is on.
pub(super) struct Recorder {
    on: AtomicBool,
    spans: Mutex<Recorded>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            on: AtomicBool::new(false),
            spans: Mutex::new(Recorded {
                spans: VecDeque::new(),
                capacity: Timeline::DEFAULT_CAPACITY,
                dropped: 0,
            }),
        }
    }
}

/// The start of a span being recorded; [`Recorder::finish`] closes it.
pub(super) struct Started {
    start: Arc<CudaEvent>,
}

impl Recorder {
    fn spans(&self) -> MutexGuard<'_, Recorded> {
        // The list is consistent after every statement.
        self.spans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns recording on (from an empty timeline) or off.
    pub(super) fn set(&self, on: bool) {
        let mut recorded = self.spans();
        recorded.spans.clear();
        recorded.dropped = 0;
        self.on.store(on, Ordering::Relaxed);
    }

    /// Keeps at most `spans` spans from now on (dropping the oldest now).
    pub(super) fn set_capacity(&self, spans: usize) {
        let mut recorded = self.spans();
        recorded.capacity = spans;
        recorded.trim();
    }

    /// Records the start of a span on `stream`, when recording is on.
    pub(super) fn start(&self, stream: &CudaStream) -> Option<Started> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        match CudaEvent::record(stream, true) {
            Ok(event) => Some(Started {
                start: Arc::new(event),
            }),
            Err(error) => {
                tracing::warn!(%error, "recording a timeline event failed; the span is left out");
                None
            }
        }
    }

    /// Closes a span started on `stream` with [`Recorder::start`] after the
    /// work it times was queued.
    pub(super) fn finish(
        &self,
        started: Option<Started>,
        stream: &CudaStream,
        activity: Activity,
        name: impl Into<String>,
        bytes: u64,
    ) {
        let Some(Started { start }) = started else {
            return;
        };
        match CudaEvent::record(stream, true) {
            Ok(end) => {
                let mut recorded = self.spans();
                recorded.spans.push_back(Pending {
                    activity,
                    name: name.into(),
                    stream: stream.id(),
                    bytes,
                    start,
                    end: Arc::new(end),
                });
                recorded.trim();
            }
            Err(error) => {
                tracing::warn!(%error, "recording a timeline event failed; the span is left out");
            }
        }
    }

    /// Records an instant (an allocation or a free) on `stream`.
    pub(super) fn mark(&self, stream: &CudaStream, activity: Activity, bytes: u64) {
        let started = self.start(stream);
        self.finish(started, stream, activity, activity.category(), bytes);
    }

    /// The spans recorded so far, once the device reached them, in
    /// nanoseconds from the earliest start.
    pub(super) fn timeline(&self) -> Result<Timeline, BackendError> {
        // Cloned out, so that the waits below hold no lock.
        let (pending, dropped) = {
            let recorded = self.spans();
            (
                recorded.spans.iter().cloned().collect::<Vec<_>>(),
                recorded.dropped,
            )
        };
        let mut timeline = SpanLog::new(pending.len());
        timeline.note_dropped(dropped);
        let Some(origin) = pending.first().map(|p| Arc::clone(&p.start)) else {
            return Ok(timeline.timeline());
        };
        let mut timed = Vec::with_capacity(pending.len());
        for span in pending {
            span.end.synchronize()?;
            let from = f64::from(span.start.elapsed_ms(&origin)?) * 1e6;
            let to = f64::from(span.end.elapsed_ms(&origin)?) * 1e6;
            timed.push((span, from, to.max(from)));
        }
        let base = timed.iter().map(|t| t.1).fold(0f64, f64::min);
        for (span, from, to) in timed {
            timeline.push(Span {
                activity: span.activity,
                name: span.name,
                stream: span.stream,
                bytes: span.bytes,
                start_ns: (from - base).round() as u64,
                end_ns: (to - base).round() as u64,
            });
        }
        Ok(timeline.timeline())
    }
}

impl Recorded {
    /// Drops the oldest spans (and their events) past the capacity.
    fn trim(&mut self) {
        while self.spans.len() > self.capacity {
            self.spans.pop_front();
            self.dropped = self.dropped.saturating_add(1);
        }
    }
}
