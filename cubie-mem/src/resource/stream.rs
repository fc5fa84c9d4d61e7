//! A backend stream with one owner: destroyed when the last reference to it
//! drops, or, for an external stream (one the manager did not create), ended with
//! an event after its work and never destroyed.
//!
//! A group holds a counted reference to its stream, and so does every
//! device allocation whose free is ordered on it and every
//! [`CurrentStream`](crate::CurrentStream) guard binding it.

use std::any::Any;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Event;
use crate::MemError;
use crate::backend::{Backend, BackendResult, StreamHandle};

/// A backend stream, destroyed when the last reference to it drops, unless it is
/// external: a stream the manager did not create, which it never destroys.
pub(crate) struct OwnedStream {
    handle: StreamHandle,
    backend: Arc<dyn Backend>,
    external: Option<External>,
}

/// What the manager keeps of an external stream, bound by one guard.
struct External {
    /// Whether the backend adopted the stream for the binding (a CUDA
    /// stream of another library): it forgets it through
    /// [`Backend::destroy_stream`], which does not destroy an adopted
    /// stream, when the binding ends.
    adopted: bool,
    /// Set when the binding ended: an event after the work queued on the
    /// stream so far (`None` when it could not be recorded). Later
    /// ordering waits for it instead of touching the stream, which its
    /// owner may have destroyed since.
    ended: Mutex<Option<Option<Event>>>,
    /// What keeps the stream alive while it is bound (a library's shared
    /// stream), if anything.
    _keep: Option<Box<dyn Any + Send + Sync>>,
}

impl OwnedStream {
    /// Creates a stream on `backend`.
    pub(crate) fn create(backend: &Arc<dyn Backend>) -> Result<Arc<Self>, MemError> {
        Ok(Arc::new(OwnedStream {
            handle: backend.create_stream().on(&**backend)?,
            backend: Arc::clone(backend),
            external: None,
        }))
    }

    /// A stream of `backend` the manager did not create, never destroyed
    /// by it: `adopted` when the backend adopted it for this binding (and
    /// forgets it when the binding ends); `keep` keeps it alive meanwhile.
    pub(crate) fn external(
        backend: &Arc<dyn Backend>,
        handle: StreamHandle,
        adopted: bool,
        keep: Option<Box<dyn Any + Send + Sync>>,
    ) -> Arc<Self> {
        Arc::new(OwnedStream {
            handle,
            backend: Arc::clone(backend),
            external: Some(External {
                adopted,
                ended: Mutex::new(None),
                _keep: keep,
            }),
        })
    }

    /// Whether the stream is external and its binding ended: nothing may
    /// be queued on it through the manager any more.
    pub(crate) fn ended(&self) -> bool {
        self.external
            .as_ref()
            .is_some_and(|external| external.ended.lock().is_some())
    }

    /// Ends the binding of an external stream: records an event after its
    /// work, for ordering later work after it without touching the stream,
    /// and has the backend forget an adopted stream. Nothing for a stream
    /// the manager created, or one already ended.
    pub(crate) fn end(&self) {
        let Some(external) = &self.external else {
            return;
        };
        let mut ended = external.ended.lock();
        if ended.is_some() {
            return;
        }
        let event = Event::record(&self.backend, self.handle)
            .inspect_err(|error| {
                tracing::warn!(stream = self.handle.0, %error, "recording the final event of an external stream failed; later work is not ordered after its work");
            })
            .ok();
        *ended = Some(event);
        if external.adopted
            && let Err(error) = self.backend.destroy_stream(self.handle)
        {
            tracing::debug!(stream = self.handle.0, %error, "forgetting an adopted stream failed");
        }
    }

    /// Makes work queued next on `self` wait for the work queued so far on
    /// `before` (on an external stream whose binding ended: for the work
    /// queued until it ended).
    pub(crate) fn wait_for(&self, before: &OwnedStream) -> Result<(), MemError> {
        let ended = before.external.as_ref().map(|e| e.ended.lock());
        if let Some(Some(event)) = ended.as_deref() {
            return match event {
                Some(event) => event.order(self.handle),
                None => Ok(()),
            };
        }
        // An external stream's lock is held while recording, so that its
        // binding cannot end (and its owner destroy it) meanwhile. The
        // event is destroyed as it drops, once the wait is queued.
        Event::record(&self.backend, before.handle)?.order(self.handle)
    }

    /// The backend's handle.
    pub(crate) fn handle(&self) -> StreamHandle {
        self.handle
    }

    /// The backend the stream belongs to.
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        if self.external.is_some() {
            // The final event is destroyed with the stream's record of it.
            self.end();
            return;
        }
        if let Err(error) = self.backend.destroy_stream(self.handle) {
            tracing::debug!(stream = self.handle.0, %error, "destroying a stream failed");
        }
    }
}
