//! The batch one `allocate_queue` call serves, as it passes from step to
//! step: the request sets waiting for it ([`Queued`]), the participants
//! with the sets it took ([`Batch`]), each request as its buffers are
//! placed ([`PlacedRequest`], [`Placement`], [`Placed`]), and each
//! participant as its response is delivered ([`Receiver`]).
//!
//! Plain types only: the decision and the state both import them.

use std::sync::Arc;

use crate::array::slot::Slot;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::SetSizes;
use crate::registration::ReadyHook;
use crate::{ArrayRequest, ArrayResponse, RequestSet};

/// A request set waiting for `allocate_queue`, stamped with its queue order.
pub(crate) struct Queued {
    /// Its place in the queue.
    pub(crate) order: u64,
    /// The requests.
    pub(crate) set: RequestSet,
    /// The set's share of a batch's sizes, taken as it was queued.
    pub(crate) sizes: SetSizes,
    /// `allocate_queue` calls in the group that served another owner
    /// while this set waited ([`super::serve`]).
    pub(crate) passed_over: usize,
}

/// The participants of one call and the sets they queued.
pub(super) struct Batch {
    /// The instance whose call it is.
    pub(super) trigger: InstanceId,
    /// The trigger's stream group.
    pub(super) group: Arc<str>,
    /// The trigger's owner, the one served.
    pub(super) owner: OwnerId,
    /// The group's members of the trigger's owner, in the order they joined.
    pub(super) participants: Vec<InstanceId>,
    /// The queued sets taken, in queue order.
    pub(super) taken: Vec<(InstanceId, Queued)>,
}

impl Batch {
    /// Every request taken, labelled, in queue order.
    pub(super) fn requests(&self) -> impl Iterator<Item = (&str, &ArrayRequest)> + Clone {
        self.taken.iter().flat_map(|(_, q)| q.set.iter())
    }
}

/// A participant and the response it receives (if anyone receives one).
pub(super) struct Receiver {
    /// Its place in the group, the order hooks are called in.
    pub(super) position: usize,
    /// The participant.
    pub(super) id: InstanceId,
    /// Its ready hook, which receives its response.
    pub(super) hook: Option<ReadyHook>,
    /// Its response, built when the caller or a hook receives it.
    pub(super) response: Option<ArrayResponse>,
}

/// One request of a batch as its buffers are placed.
pub(super) struct PlacedRequest {
    /// How many buffer sets it held before.
    pub(super) held: usize,
    /// Where its participant's list of held arrays has them (when it held
    /// any): found once, read again by placing and committing.
    pub(super) entry: usize,
}

/// Where one requested array's buffer in one set comes from. Placements
/// follow the order of the taken requests, and each request's sets in order.
pub(super) enum Placement {
    /// The array held under the (label, set) has the same type and shape:
    /// kept, and its handles stay valid.
    Keep,
    /// The buffer held under the (label, set) is large enough: reused for
    /// the new type and shape.
    Reuse,
    /// New memory, replacing what the (label, set) held (if anything) on
    /// commit.
    Fresh(Arc<Slot>),
}

/// Where each requested array's buffers come from, and per request how
/// many sets it held (more than the plan has: the extra ones are retired).
pub(super) struct Placed {
    /// Each buffer's placement, request by request and set by set.
    pub(super) placements: Vec<Placement>,
    /// Each request, in order.
    pub(super) requests: Vec<PlacedRequest>,
}
