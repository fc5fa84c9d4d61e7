//! A recorded backend event that destroys itself when dropped: how the
//! chunk pipeline and asynchronous copies order streams and know when a
//! copy is done.

use std::sync::Arc;

use crate::MemError;
use crate::backend::{Backend, BackendError, BackendResult, EventHandle, StreamHandle};

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
        Self::record_raw(backend, stream).on(&**backend)
    }

    /// [`record`](Self::record) with the backend's own error, for a caller
    /// that explains it in its own terms.
    pub(crate) fn record_raw(
        backend: &Arc<dyn Backend>,
        stream: StreamHandle,
    ) -> Result<Self, BackendError> {
        Ok(Event {
            handle: backend.record_event(stream)?,
            backend: Arc::clone(backend),
        })
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
