//! A recorded backend event that destroys itself when dropped: how the
//! chunk pipeline and asynchronous copies order streams and know when a
//! copy is done.

use std::sync::Arc;

use crate::MemError;
use crate::backend::{Backend, BackendResult, EventHandle, StreamHandle};

/// A recorded event; destroyed when dropped.
pub(crate) struct Event {
    backend: Arc<dyn Backend>,
    handle: EventHandle,
}

impl Event {
    /// Records an event after the work queued so far on `stream`.
    pub(crate) fn record(
        backend: &Arc<dyn Backend>,
        stream: StreamHandle,
    ) -> Result<Self, MemError> {
        Ok(Event {
            handle: backend.record_event(stream).on(&**backend)?,
            backend: Arc::clone(backend),
        })
    }

    /// Takes ownership of `handle`, an event recorded on `backend`: it is
    /// destroyed when the returned value drops.
    pub(crate) fn owning(backend: &Arc<dyn Backend>, handle: EventHandle) -> Self {
        Event {
            backend: Arc::clone(backend),
            handle,
        }
    }

    /// Makes later work on `stream` wait for this event.
    pub(crate) fn order(&self, stream: StreamHandle) -> Result<(), MemError> {
        self.backend
            .wait_event(stream, self.handle)
            .on(&*self.backend)
    }

    /// Whether the work before the event is done (does not block).
    pub(crate) fn is_complete(&self) -> Result<bool, MemError> {
        self.backend.event_complete(self.handle).on(&*self.backend)
    }

    /// Blocks the host until the work before the event is done.
    pub(crate) fn wait(&self) -> Result<(), MemError> {
        self.backend
            .synchronize_event(self.handle)
            .on(&*self.backend)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Err(error) = self.backend.destroy_event(self.handle) {
            tracing::warn!(%error, "destroying an event failed");
        }
    }
}
