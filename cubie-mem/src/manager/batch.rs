//! The batch one `allocate_queue` call serves: the request sets waiting
//! for it ([`Queued`]), the participants of the call with the sets it took
//! ([`Batch`]), and each participant as its response is delivered
//! ([`Receiver`]).

use std::sync::Arc;

use crate::ids::{InstanceId, OwnerId};
use crate::plan::SetSizes;
use crate::registration::ReadyHook;
use crate::{ArrayRequest, ArrayResponse, RequestSet};

/// A request set waiting for `allocate_queue`, stamped with its queue order.
pub(crate) struct Queued {
    pub(crate) order: u64,
    pub(crate) set: RequestSet,
    /// The set's share of a batch's sizes, taken as it was queued.
    pub(crate) sizes: SetSizes,
    /// `allocate_queue` calls in the group that served another owner
    /// while this set waited ([`super::pending`]).
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
