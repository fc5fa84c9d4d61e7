//! `allocate_queue`: taking the owner's queued sets, evicting idle owners
//! under physical pressure, planning, allocating all or nothing, and
//! committing.
//!
//! The call runs in two steps under the manager's lock. [`Inner::prepare`]
//! reads the figures into a snapshot ([`Inner::snapshot`], in `gather`),
//! lets the pure [`decide`] say who is evicted, the plan and each
//! placement, and applies that (evicting, then placing). It may fail and then changes nothing: it
//! evicts idle owners only for a batch that the planner says fits once
//! they are gone (granule, caps and reserve included), and allocates only
//! new memory, beside the arrays the participants hold. Only an allocation
//! the device then refuses (a fault, another process taking the memory)
//! fails after an eviction, whose hooks are delivered all the same.
//! [`Inner::commit`] cannot fail: it retires replaced arrays, hands reused
//! buffers to their new arrays and builds the responses.
//!
//! A chunkable array has a buffer in each of the plan's buffer sets, an
//! unchunkable one a single buffer; arrays are matched with what the
//! participant holds by (label, set).

use super::Inner;
use super::batch::Batch;
use super::decide::{Held, Planned, decide, finish};
use super::hooks::Hooks;
use super::place::forget_released;
use super::placed::Placed;
use super::report::Attempt;
use super::state::State;
use crate::ChunkPlan;
use crate::ids::InstanceId;
use crate::{ArrayResponse, Bytes, MemError};

/// What a call produced: hooks to run (always), and the trigger's response.
pub(crate) struct Outcome {
    pub(crate) hooks: Hooks,
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
        super::pending::note_passed_over(s, &group, owner, trigger);
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
