//! Serving the queue: one `allocate_queue` call takes the owner's queued
//! sets, evicts idle owners under physical pressure, plans, allocates all
//! or nothing, and commits.
//!
//! Two steps under the manager's lock. [`Inner::prepare`] reads a snapshot
//! ([`Inner::snapshot`]), lets the pure [`decide`] choose evictions, plan
//! and placements, and applies them. It may fail and then changes
//! nothing: it evicts only for a batch the planner says fits once they are
//! gone, and allocates only new memory beside what the participants hold
//! (only a device refusing that allocation fails after an eviction, whose
//! hooks are delivered all the same). [`Inner::commit`] cannot fail: it
//! retires replaced arrays, hands reused buffers on and builds the
//! responses. Arrays match held buffers by (label, buffer set).
//!
//! A call serves only the trigger's owner. A holder registered without
//! `.owner(&solver)` waits for its own call (owners of one group may take
//! turns), so that is no error: the manager warns once per set it passes
//! over ([`note_passed_over`]) and when an instance drops with requests
//! unserved, and lists them in
//! [`MemoryReport::pending`](crate::report::MemoryReport::pending).

use super::Inner;
use super::apply::forget_released;
use super::batch::{Batch, Placed};
use super::decide::{Held, Planned, decide, finish};
use super::hooks::Hooks;
use super::report::Attempt;
use super::state::State;
use crate::ChunkPlan;
use crate::ids::{InstanceId, OwnerId};
use crate::{ArrayResponse, Bytes, MemError};

/// What a call produced: hooks to run (always), and the trigger's response.
pub(crate) struct Outcome {
    /// The hooks to run once the lock is released.
    pub(crate) hooks: Hooks,
    /// The trigger's response, or the call's error.
    pub(crate) result: Result<ArrayResponse, MemError>,
}

impl Inner {
    /// Serves `trigger`'s owner in its group. `want_response`: the caller
    /// takes the trigger's response.
    pub(crate) fn allocate_queue(&self, trigger: InstanceId, want_response: bool) -> Outcome {
        let mut hooks = Hooks::reusing(self.take_ready_list());
        let mut s = self.lock();
        let _span = tracing::debug_span!("allocate_queue", trigger = %s.named(trigger)).entered();
        let result = self.serve(&mut s, trigger, want_response, &mut hooks);
        Outcome { hooks, result }
    }

    /// Takes the batch, prepares and commits it; on failure puts the
    /// sets back in the queue.
    fn serve(
        &self,
        s: &mut State,
        trigger: InstanceId,
        want_response: bool,
        hooks: &mut Hooks,
    ) -> Result<ArrayResponse, MemError> {
        let owner = s.instance(trigger)?.owner;
        let group = s.group_of(trigger)?;
        // The lists of the last call, kept with their room.
        let mut participants = std::mem::take(&mut s.scratch.participants);
        participants.clear();
        if let Some(g) = s.groups.get(&group) {
            participants.extend(g.members_of(owner));
        }
        note_passed_over(s, &group, owner, trigger);
        let mut taken = std::mem::take(&mut s.scratch.taken);
        taken.clear();
        taken.extend(
            participants
                .iter()
                .filter_map(|&id| Some((id, s.instances.get_mut(&id)?.queued.take()?))),
        );
        if taken.is_empty() {
            s.scratch.keep_batch_lists(participants, taken);
            return Ok(ArrayResponse::default());
        }
        // Queue orders are distinct: an unstable sort orders them as a
        // stable one would, without a buffer.
        taken.sort_unstable_by_key(|(_, queued)| queued.order);
        let batch = Batch {
            trigger,
            group,
            owner,
            participants,
            taken,
        };
        let mut attempt = Attempt::default();
        match self.prepare(s, &batch, hooks, &mut attempt) {
            Ok((plan, placed)) => Ok(self.commit(s, batch, plan, placed, want_response, hooks)),
            Err(error) => {
                let error = self.fill_report(s, error, &batch, &attempt);
                forget_released(s, &batch.participants);
                let Batch {
                    participants,
                    mut taken,
                    ..
                } = batch;
                for (id, queued) in taken.drain(..) {
                    if let Some(instance) = s.instances.get_mut(&id) {
                        instance.queued = Some(queued);
                    }
                }
                s.scratch.keep_batch_lists(participants, taken);
                Err(error)
            }
        }
    }

    /// Plans the batch (evicting idle owners when it does not fit
    /// physically) and allocates its new memory: the figures are read
    /// ([`Inner::snapshot`]), the decision made ([`decide`]), then applied.
    /// On error, what it allocated is freed and every array the
    /// participants hold is untouched. `attempt` keeps what the plan was
    /// made with, for the error's report.
    fn prepare(
        &self,
        s: &mut State,
        batch: &Batch,
        hooks: &mut Hooks,
        attempt: &mut Attempt,
    ) -> Result<(ChunkPlan, Placed), MemError> {
        let snapshot = self.snapshot(s, batch, attempt)?;
        let mut decision = decide(&snapshot);
        attempt.budget = Some(decision.budget);
        let evicted = decision.eviction.as_ref().map(|eviction| {
            (
                self.evict(s, eviction, batch.owner, hooks),
                eviction.victims.credit,
            )
        });
        // An access that began meanwhile holds memory the decision counted
        // as freed: the rest is decided again with what was released.
        if let Some((released, counted)) = evicted
            && released != counted
        {
            decision = finish(
                &snapshot,
                decision.before,
                decision.eviction.take(),
                released,
            );
            attempt.budget = Some(decision.budget);
        }
        let Planned {
            plan,
            placements,
            room,
        } = decision.planned?;
        let free = snapshot.free.unwrap_or(0);
        let budget = decision.budget;
        let sizes = snapshot.sizes;
        tracing::debug!(
            group = %batch.group,
            owner = %s.named_owner(batch.owner),
            requested = %Bytes(sizes.total_bytes()),
            chunkable = %Bytes(sizes.chunkable_bytes),
            unchunkable = %Bytes(sizes.unchunkable_bytes),
            total_runs = sizes.total_runs,
            depth = sizes.depth,
            free = %Bytes(free),
            replaced = %Bytes(snapshot.replaced()),
            effective_free = %Bytes(budget.effective_free),
            cap_headroom = %OrNone(decision.before.cap_headroom.map(Bytes)),
            granule = %Bytes(budget.granule),
            allocatable = %Bytes(plan.allocatable),
            withheld = %Bytes(plan.withheld),
            chunks = plan.chunks,
            chunk_length = plan.chunk_length,
            buffer_sets = plan.buffer_sets,
            limited_by = %OrNone(plan.limited_by()),
            "planned a batch: {} chunk(s) of {} run(s)",
            plan.chunks,
            plan.chunk_length
        );
        let Held { buffers, requests } = snapshot.held;
        let stream = s.groups.stream_of(batch.trigger, &self.backend)?;
        let placements = self.place(s, batch, placements, room, &stream, &plan, free)?;
        s.scratch.held = buffers;
        Ok((
            plan,
            Placed {
                placements,
                requests,
            },
        ))
    }
}

/// An optional figure in a log: the figure, or `none`.
struct OrNone<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for OrNone<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(value) => value.fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// Counts a call of `trigger` (of `owner`, in `group`) against the sets
/// other owners queued in the group, and warns about each the first time
/// it is passed over.
fn note_passed_over(s: &mut State, group: &str, owner: OwnerId, trigger: InstanceId) {
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
