//! A recorded event, released when dropped: how the chunk pipeline and
//! asynchronous copies order streams and know when a copy is done.

use super::OwnedStream;
use crate::MemError;
use crate::backend::{self, BackendError};

/// A recorded event; released when dropped.
pub(crate) struct Event {
    event: Box<dyn backend::Event>,
    /// The backend's name, for errors.
    backend: &'static str,
}

impl Event {
    /// Records an event after the work queued so far on `stream`.
    pub(crate) fn record(stream: &OwnedStream) -> Result<Self, MemError> {
        Self::record_raw(stream).map_err(|error| MemError::backend(stream.backend_name(), error))
    }

    /// [`record`](Self::record) with the backend's own error, for a caller
    /// that explains it in its own terms.
    pub(crate) fn record_raw(stream: &OwnedStream) -> Result<Self, BackendError> {
        Ok(Event {
            event: stream.stream().record()?,
            backend: stream.backend_name(),
        })
    }

    /// Makes later work on `stream` wait for this event.
    pub(crate) fn order(&self, stream: &OwnedStream) -> Result<(), MemError> {
        stream
            .stream()
            .wait(&*self.event)
            .map_err(|error| self.error(error))
    }

    /// Whether the work before the event is done (does not block).
    pub(crate) fn is_complete(&self) -> Result<bool, MemError> {
        self.event.is_complete().map_err(|error| self.error(error))
    }

    /// Blocks the host until the work before the event is done.
    pub(crate) fn wait(&self) -> Result<(), MemError> {
        self.event.synchronize().map_err(|error| self.error(error))
    }

    fn error(&self, error: BackendError) -> MemError {
        MemError::backend(self.backend, error)
    }
}
