//! A live device allocation of the CUDA backend and what orders work on it
//! across streams: the event recorded right after it, and the last use on
//! each stream, which its free waits for.

use std::sync::{Arc, Mutex, MutexGuard};

use super::stream::{RawEvent, RawStream};
use crate::backend::{BackendError, StreamHandle};

/// A live device allocation and what orders work on it across streams.
///
/// Another stream waits only for the allocation itself (`ready`), never for
/// work queued on the allocating stream after it, so that a pipeline's
/// copies on their own streams overlap the kernels on the group's stream.
/// The free waits for the last use on every other stream (`uses`), as
/// cudarc's slices keep an event per access.
pub(super) struct Allocation {
    pub(super) bytes: u64,
    /// The handle of the stream it was allocated on.
    stream: u64,
    /// Recorded on that stream right after the allocation.
    ready: RawEvent,
    /// Per stream that used the memory, an event after its last use there.
    uses: Mutex<Vec<StreamUse>>,
}

/// A use of device memory checked and ordered, about to be queued.
pub(super) struct PreparedUse {
    /// The stream it goes to, kept alive for the call.
    pub(super) stream: Arc<RawStream>,
    /// The device address it touches.
    pub(super) address: u64,
    /// The allocation, for noting the use once queued.
    pub(super) allocation: Arc<Allocation>,
}

/// The last use of an allocation on one stream.
struct StreamUse {
    stream: u64,
    event: RawEvent,
}

impl Allocation {
    /// An allocation of `bytes` made on the stream `stream`, ready after `ready`.
    pub(super) fn new(bytes: u64, stream: StreamHandle, ready: RawEvent) -> Self {
        Allocation {
            bytes,
            stream: stream.0,
            ready,
            uses: Mutex::new(Vec::new()),
        }
    }

    fn uses(&self) -> MutexGuard<'_, Vec<StreamUse>> {
        // The list is consistent after every statement.
        self.uses.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Orders work queued next on `stream` after the allocation, when it
    /// was made on another stream.
    pub(super) fn order_use(
        &self,
        stream_id: StreamHandle,
        stream: &RawStream,
    ) -> Result<(), BackendError> {
        if self.stream == stream_id.0 {
            return Ok(());
        }
        self.ready.make_wait(stream)
    }

    /// Notes that work was just queued on `stream` using the memory, so
    /// that the free waits for it.
    pub(super) fn note_use(
        &self,
        stream_id: StreamHandle,
        stream: &RawStream,
    ) -> Result<(), BackendError> {
        let mut uses = self.uses();
        match uses.iter().find(|used| used.stream == stream_id.0) {
            Some(used) => used.event.rerecord(stream),
            None => {
                let event = RawEvent::record(stream)?;
                uses.push(StreamUse {
                    stream: stream_id.0,
                    event,
                });
                Ok(())
            }
        }
    }

    /// Orders a free queued next on `stream` after the allocation and
    /// after its last use on every other stream.
    pub(super) fn order_free(
        &self,
        stream_id: StreamHandle,
        stream: &RawStream,
    ) -> Result<(), BackendError> {
        self.order_use(stream_id, stream)?;
        for used in self.uses().iter() {
            if used.stream != stream_id.0 {
                used.event.make_wait(stream)?;
            }
        }
        Ok(())
    }
}
