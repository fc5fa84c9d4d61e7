//! Typed handles to allocated memory, and the response that delivers them.
//!
//! The manager owns every allocation (a slot); handles are shared views of
//! it. When the manager frees, evicts or replaces an allocation, every handle
//! to it stops working: each later use returns [`MemError::Released`](crate::MemError::Released),
//! never touching freed memory.
//!
//! Releasing never waits for a handle. An access in progress (a copy, a
//! [`DeviceArray::with_device_ptr`] closure, a [`PinnedRef`] or [`PinnedMut`]
//! guard) holds the memory itself, so the memory is freed when the last such
//! access ends; until then it is not counted as released. This is also how
//! an asynchronous copy will keep its pinned block until its completion
//! event fires.

mod handles;
pub(crate) mod queued;
mod response;
pub(crate) mod slot;

use std::fmt;

pub use handles::{DeviceArray, PinnedArray, PinnedMut, PinnedRef};
pub use response::ArrayResponse;
pub(crate) use response::{ResponseArrays, SetSlots, per_set};

/// Why a handle's memory is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReason {
    /// Evicted to make room for another owner's batch.
    Evicted,
    /// Freed explicitly (`free`, `free_all`, `invalidate_all`).
    Freed,
    /// Replaced by a later allocation of the same label.
    Replaced,
    /// Its instance was deregistered.
    Deregistered,
}

impl fmt::Display for ReleaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReleaseReason::Evicted => "evicted to make room for another batch",
            ReleaseReason::Freed => "freed",
            ReleaseReason::Replaced => "replaced by a newer allocation of the same label",
            ReleaseReason::Deregistered => "released when its instance was dropped",
        })
    }
}
