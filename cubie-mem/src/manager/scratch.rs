//! The lists serving a batch fills and empties again ([`Scratch`]), kept
//! in the manager's state between calls.

use super::batch::{Queued, Receiver};
use super::decide::{Comparison, PlacedRequest};
use super::placed::Placement;
use crate::ids::InstanceId;

/// Lists that serving a batch fills and empties again, kept between calls
/// (empty, with their room) so that a batch of many instances does not ask
/// the allocator for large ones each time.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(super) held: Vec<Comparison>,
    pub(super) requests: Vec<PlacedRequest>,
    pub(super) placements: Vec<Placement>,
    pub(super) receivers: Vec<Receiver>,
    pub(super) participants: Vec<InstanceId>,
    pub(super) taken: Vec<(InstanceId, Queued)>,
}

impl Scratch {
    /// Keeps a batch's lists of participants and of the sets it took (both
    /// emptied) for the next call.
    pub(super) fn keep_batch_lists(
        &mut self,
        mut participants: Vec<InstanceId>,
        mut taken: Vec<(InstanceId, Queued)>,
    ) {
        participants.clear();
        taken.clear();
        self.participants = participants;
        self.taken = taken;
    }
}
