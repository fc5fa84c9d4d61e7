//! A stream with one owner above the backend: the backend's stream object,
//! released with its last reference, or, for an external stream (one the
//! manager did not create), ended with an event after its work and then
//! left alone.
//!
//! A group holds a counted reference to its stream, and so does every
//! device allocation whose free is ordered on it and every
//! [`CurrentStream`](crate::CurrentStream) guard binding it.

use std::any::Any;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Event;
use crate::MemError;
use crate::backend::{Backend, BackendResult, Stream};

/// A backend stream, and whether it is external.
pub(crate) struct OwnedStream {
    stream: Arc<dyn Stream>,
    backend: Arc<dyn Backend>,
    external: Option<External>,
}

/// What the manager keeps of an external stream, bound by one guard.
struct External {
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
            stream: backend.create_stream().on(&**backend)?,
            backend: Arc::clone(backend),
            external: None,
        }))
    }

    /// A stream of `backend` the manager did not create, which it never
    /// queues work on once the binding ended; `keep` keeps it alive
    /// meanwhile.
    pub(crate) fn external(
        backend: &Arc<dyn Backend>,
        stream: Arc<dyn Stream>,
        keep: Option<Box<dyn Any + Send + Sync>>,
    ) -> Arc<Self> {
        Arc::new(OwnedStream {
            stream,
            backend: Arc::clone(backend),
            external: Some(External {
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
    /// work, for ordering later work after it without touching the stream.
    /// Nothing for a stream the manager created, or one already ended.
    pub(crate) fn end(&self) {
        let Some(external) = &self.external else {
            return;
        };
        let mut ended = external.ended.lock();
        if ended.is_some() {
            return;
        }
        let event = Event::record_raw(self)
            .inspect_err(|error| {
                tracing::warn!(stream = self.id(), %error, "recording the final event of an external stream failed; later work is not ordered after its work");
            })
            .ok();
        *ended = Some(event);
    }

    /// Makes work queued next on `self` wait for the work queued so far on
    /// `before` (on an external stream whose binding ended: for the work
    /// queued until it ended).
    pub(crate) fn wait_for(&self, before: &OwnedStream) -> Result<(), MemError> {
        let ended = before.external.as_ref().map(|e| e.ended.lock());
        if let Some(Some(event)) = ended.as_deref() {
            return match event {
                Some(event) => event.order(self),
                None => Ok(()),
            };
        }
        // An external stream's lock is held while recording, so that its
        // binding cannot end (and its owner destroy it) meanwhile. The
        // event is released as it drops, once the wait is queued.
        Event::record(before)?.order(self)
    }

    /// The backend's stream.
    pub(crate) fn stream(&self) -> &dyn Stream {
        &*self.stream
    }

    /// The backend's stream, shared, for a caller that queues its own work.
    pub(crate) fn shared(&self) -> &Arc<dyn Stream> {
        &self.stream
    }

    /// The stream's number (see [`Stream::id`]).
    pub(crate) fn id(&self) -> u64 {
        self.stream.id()
    }

    /// The backend the stream belongs to.
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The backend's name, for errors.
    pub(crate) fn backend_name(&self) -> &'static str {
        self.backend.name()
    }
}

impl Drop for OwnedStream {
    /// Ends an external stream's binding; a stream the manager created is
    /// released with the backend's object.
    fn drop(&mut self) {
        self.end();
    }
}
