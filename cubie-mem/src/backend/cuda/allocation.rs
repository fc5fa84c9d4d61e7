//! A live device allocation of the CUDA backend and what orders work on it
//! across streams: the event recorded right after it, which another stream
//! waits for once before its first use, and the streams that used it, with
//! their last use, which its free waits for.

use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::SmallVec;

use super::stream::{RawEvent, RawStream, StreamTrack};
use crate::backend::BackendError;

/// A live device allocation and what orders work on it across streams.
///
/// Another stream waits only for the allocation itself (`ready`), never for
/// work queued on the allocating stream after it, so that a pipeline's
/// copies on their own streams overlap the kernels on the group's stream;
/// it waits once, before its first use (a stream's own order covers the
/// rest). A use costs no driver call: the stream counts it
/// ([`StreamTrack::note_use`]). The free waits for the last use on every
/// other stream through that stream's marker event, which one free records
/// for every allocation the stream used.
///
/// The list of users stays as short as the streams that may still be
/// running work on the memory: a stream leaves it once it was destroyed
/// and its last use is seen complete (checked as another stream joins).
pub(super) struct Allocation {
    pub(super) bytes: u64,
    /// Recorded on the allocating stream right after the allocation.
    ready: RawEvent,
    /// The streams ordered after `ready` (the allocating one first), each
    /// with the number of its last use of the memory (0: none yet).
    users: Mutex<SmallVec<[User; 4]>>,
}

/// A stream ordered after an allocation, and its last use of it.
struct User {
    track: Arc<StreamTrack>,
    last_use: u64,
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

impl Allocation {
    /// An allocation of `bytes` made on `stream`, ready after `ready`.
    pub(super) fn new(bytes: u64, stream: &RawStream, ready: RawEvent) -> Self {
        let mut users = SmallVec::new();
        users.push(User {
            track: Arc::clone(stream.track()),
            last_use: 0,
        });
        Allocation {
            bytes,
            ready,
            users: Mutex::new(users),
        }
    }

    fn users(&self) -> MutexGuard<'_, SmallVec<[User; 4]>> {
        // The list is consistent after every statement.
        self.users.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Orders work queued next on `stream` after the allocation: one wait
    /// for its ready event the first time the stream uses it, nothing after.
    pub(super) fn order_use(&self, stream: &RawStream) -> Result<(), BackendError> {
        let mut users = self.users();
        if users
            .iter()
            .any(|user| Arc::ptr_eq(&user.track, stream.track()))
        {
            return Ok(());
        }
        self.ready.make_wait(stream)?;
        users.retain(|user| !user.track.retired_through(user.last_use));
        users.push(User {
            track: Arc::clone(stream.track()),
            last_use: 0,
        });
        Ok(())
    }

    /// Notes that work was just queued on `stream` (ordered by
    /// [`Allocation::order_use`]) using the memory, so that the free waits
    /// for it. No driver call.
    pub(super) fn note_use(&self, stream: &RawStream) {
        let use_number = stream.track().note_use();
        let mut users = self.users();
        match users
            .iter_mut()
            .find(|user| Arc::ptr_eq(&user.track, stream.track()))
        {
            Some(user) => user.last_use = use_number,
            None => users.push(User {
                track: Arc::clone(stream.track()),
                last_use: use_number,
            }),
        }
    }

    /// Orders a free queued next on `stream` after the allocation and
    /// after its last use on every other stream. When a stream's last use
    /// has no event to wait for (its final marker could not be recorded as
    /// it was destroyed), the whole device is synchronised instead.
    pub(super) fn order_free(&self, stream: &RawStream) -> Result<(), BackendError> {
        self.order_use(stream)?;
        // Cloned out, so that recording a marker holds no allocation lock.
        let others: SmallVec<[(Arc<StreamTrack>, u64); 4]> = self
            .users()
            .iter()
            .filter(|user| user.last_use > 0 && !Arc::ptr_eq(&user.track, stream.track()))
            .map(|user| (Arc::clone(&user.track), user.last_use))
            .collect();
        for (track, last_use) in others {
            match track.marker_after(last_use)? {
                Some(marker) => marker.order(stream)?,
                None => stream.context().synchronize()?,
            }
        }
        Ok(())
    }
}
