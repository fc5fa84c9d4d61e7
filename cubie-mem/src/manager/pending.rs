//! Requests that wait in the queue: what `allocate_queue` of another owner
//! passed over, said through a warning and queryable at any time.
//!
//! `allocate_queue(trigger)` serves only the trigger's owner. A holder
//! registered without `.owner(&solver)` is an owner of its own: an
//! `allocate_queue` of the solver never serves it, and its ready hook
//! never fires. That is not an error (the holder's own `allocate_queue`
//! serves it, and two owners of one group may queue and allocate in
//! turn), so the manager warns once per queued set the first time a call
//! in its group passes it over, warns when an instance is dropped with
//! requests never served, and lists what waits in
//! [`MemoryReport::pending`](crate::report::MemoryReport::pending).

use super::batch::Queued;
use super::state::State;
use crate::ids::{InstanceId, OwnerId};
use crate::report::PendingRequests;

impl super::Inner {
    /// Every request set waiting in the queue, in the order queued.
    pub(super) fn pending_requests(s: &State) -> Vec<PendingRequests> {
        let mut queued: Vec<(u64, PendingRequests)> = s
            .instances
            .iter()
            .filter_map(|(&id, instance)| {
                let queued = instance.queued.as_ref()?;
                Some((queued.order, describe(s, id, instance.owner, queued)))
            })
            .collect();
        queued.sort_by_key(|(order, _)| *order);
        queued.into_iter().map(|(_, pending)| pending).collect()
    }
}

/// The pending set `queued` of `id`.
fn describe(s: &State, id: InstanceId, owner: OwnerId, queued: &Queued) -> PendingRequests {
    PendingRequests {
        instance: s.named(id).to_string(),
        owner: s.named_owner(owner).to_string(),
        group: s.group_of(id).map(|g| g.to_string()).unwrap_or_default(),
        labels: queued.set.labels().map(str::to_owned).collect(),
        passed_over: queued.passed_over,
    }
}

/// Counts a call of `trigger` (of `owner`, in `group`) against the sets
/// other owners queued in the group, and warns about each the first time
/// it is passed over.
pub(super) fn note_passed_over(s: &mut State, group: &str, owner: OwnerId, trigger: InstanceId) {
    // A group of one owner has no one else to pass over.
    if s.groups.get(group).is_none_or(|g| g.only_of(owner)) {
        return;
    }
    let waiting: Vec<InstanceId> = s
        .groups
        .get(group)
        .map(|g| {
            g.members()
                .filter(|id| {
                    s.instances
                        .get(id)
                        .is_some_and(|i| i.owner != owner && i.queued.is_some())
                })
                .collect()
        })
        .unwrap_or_default();
    for id in waiting {
        let Some(queued) = s.instances.get_mut(&id).and_then(|i| i.queued.as_mut()) else {
            continue;
        };
        queued.passed_over = queued.passed_over.saturating_add(1);
        if queued.passed_over > 1 {
            continue;
        }
        let labels: Vec<&str> = queued.set.labels().collect();
        let labels = labels.join(", ");
        let waiting_owner = s.instances.get(&id).map(|i| i.owner).unwrap_or(owner);
        tracing::warn!(
            instance = %s.named(id),
            group,
            labels,
            "{} queued [{labels}] in stream group '{group}', and allocate_queue of {} served its owner {} \
             without it: only allocate_queue of an instance of {} serves it, and its ready hook fires \
             then; register it with .owner(..) of {} to be served with it \
             (MemoryManager::memory_report().pending lists what waits)",
            s.named(id),
            s.named(trigger),
            s.named_owner(owner),
            s.named_owner(waiting_owner),
            s.named(trigger),
        );
    }
}

/// Warns that `id`, being deregistered, leaves a request set no call served.
pub(super) fn warn_dropped_unserved(s: &State, id: InstanceId) {
    let Some(instance) = s.instances.get(&id) else {
        return;
    };
    let Some(queued) = &instance.queued else {
        return;
    };
    let labels: Vec<&str> = queued.set.labels().collect();
    let labels = labels.join(", ");
    tracing::warn!(
        instance = %s.named(id),
        labels,
        passed_over = queued.passed_over,
        "{} was dropped with [{labels}] queued and never served (passed over by {} allocate_queue \
         call(s) of other owners): call allocate_queue of an instance of its owner {}, or register it \
         with .owner(..) of the instance whose allocate_queue serves its group",
        s.named(id),
        queued.passed_over,
        s.named_owner(instance.owner),
    );
}
