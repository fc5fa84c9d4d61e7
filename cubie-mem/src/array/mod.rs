//! Typed handles to allocated memory, and the response that delivers them.
//!
//! The manager owns every allocation (a slot); handles are shared views.
//! Once it is released, each use of a handle returns
//! [`MemError::Released`](crate::MemError::Released). Releasing never waits:
//! an access in progress holds the memory until it ends.

mod handles;
pub(crate) mod queued;
mod response;
pub(crate) mod slot;

use std::fmt;

pub use handles::{DeviceArray, PinnedArray};
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
