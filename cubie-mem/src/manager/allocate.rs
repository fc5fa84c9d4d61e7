//! `allocate_queue`: taking the owner's queued sets, evicting idle owners
//! under physical pressure, planning, allocating all or nothing, and
//! committing.
//!
//! The call runs in two steps under the manager's lock. [`Inner::prepare`]
//! reads the figures into a snapshot ([`Inner::snapshot`]), lets the pure
//! [`decide`] say who is evicted, the plan and each placement, and applies
//! that (evicting, then placing). It may fail and then changes nothing: it
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

use std::sync::Arc;

use super::Inner;
use super::decide::{GroupCaps, Held, Planned, Snapshot, decide, finish, remembered_partition};
use super::hooks::Hooks;
use super::place::{Placed, forget_released};
use super::report::Attempt;
use super::state::{Queued, State};
use crate::ChunkPlan;
use crate::backend::BackendResult;
use crate::config::LimitMode;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{BatchSizes, OVERSIZE_WARNING_FACTOR};
use crate::{ArrayRequest, ArrayResponse, Bytes, MemError};

/// What a call produced: hooks to run (always), and the trigger's response.
pub(crate) struct Outcome {
    pub(crate) hooks: Hooks,
    pub(crate) result: Result<ArrayResponse, MemError>,
}

/// The participants of one call and the sets they queued.
pub(super) struct Batch {
    pub(super) trigger: InstanceId,
    pub(super) group: Arc<str>,
    pub(super) owner: OwnerId,
    /// The group's members of the trigger's owner, in the order they joined.
    pub(super) participants: Vec<InstanceId>,
    /// The queued sets taken, in queue order.
    pub(super) taken: Vec<(InstanceId, Queued)>,
}

impl Batch {
    pub(super) fn requests(&self) -> impl Iterator<Item = (&str, &ArrayRequest)> + Clone {
        self.taken.iter().flat_map(|(_, q)| q.set.iter())
    }
}

/// Warns (through tracing) about the requests of a batch of several runs
/// left unchunkable only by a chunk axis beyond their shape; an error that
/// follows names them ([`crate::UnchunkableArray`]).
fn warn_misaxed<'a>(requests: impl Iterator<Item = (&'a str, &'a ArrayRequest)>) {
    requests.for_each(|(label, request)| {
        if let Some(axis) = request.axis_out_of_range() {
            tracing::warn!(
                label,
                shape = ?request.shape(),
                axis,
                total_runs = request.runs(),
                "request '{label}' is unchunkable only because its chunk axis {axis} lies beyond its \
                 {} dimensions; set ArrayRequest::chunk_axis to the axis that holds the runs",
                request.shape().len()
            );
        }
    });
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
        let participants: Vec<InstanceId> = s
            .groups
            .get(&group)
            .map(|g| g.members_of(owner).collect())
            .unwrap_or_default();
        super::pending::note_passed_over(s, &group, owner, trigger);
        let mut taken: Vec<(InstanceId, Queued)> = participants
            .iter()
            .filter_map(|&id| Some((id, s.instances.get_mut(&id)?.queued.take()?)))
            .collect();
        if taken.is_empty() {
            return Ok(ArrayResponse::default());
        }
        taken.sort_by_key(|(_, queued)| queued.order);
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
                for (id, queued) in batch.taken {
                    if let Some(instance) = s.instances.get_mut(&id) {
                        instance.queued = Some(queued);
                    }
                }
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
        let replaced = snapshot.replaced();
        let budget = decision.budget;
        let sizes = snapshot.sizes;
        let Held { buffers, requests } = snapshot.held;
        tracing::debug!(
            group = %batch.group,
            owner = %s.named_owner(batch.owner),
            requested = %Bytes(sizes.total_bytes()),
            chunkable = %Bytes(sizes.chunkable_bytes),
            unchunkable = %Bytes(sizes.unchunkable_bytes),
            total_runs = sizes.total_runs,
            depth = sizes.depth,
            free = %Bytes(free),
            replaced = %Bytes(replaced),
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

    /// What the decision for `batch` reads: its sizes (an invalid request
    /// fails here), the free memory (measured only when it requests any
    /// bytes), the buffers its participants hold, its group's caps in
    /// active mode, its owner's remembered partition and, when it does not
    /// fit the free memory, the idle owners eviction could release.
    fn snapshot<'b>(
        &self,
        s: &mut State,
        batch: &'b Batch,
        attempt: &mut Attempt,
    ) -> Result<Snapshot<'b>, MemError> {
        let sizes = BatchSizes::measure(batch.requests())?;
        attempt.sizes = Some(sizes);
        warn_misaxed(batch.requests());
        let requested = sizes.total_bytes();
        let held = Held::look_up(s, batch);
        let free = if requested == 0 {
            None
        } else {
            Some(self.backend.mem_info().on(&*self.backend)?.free)
        };
        let free_bytes = free.unwrap_or(0);
        if requested > free_bytes.saturating_mul(OVERSIZE_WARNING_FACTOR) {
            tracing::warn!(
                requested = %Bytes(requested),
                free = %Bytes(free_bytes),
                "batch is over {OVERSIZE_WARNING_FACTOR}x the free device memory; it will run in many chunks"
            );
        }
        let caps = match s.limit_mode {
            LimitMode::Passive => None,
            LimitMode::Active => Some(GroupCaps::of(s, &batch.group, self.total)),
        };
        let mut snapshot = Snapshot {
            batch,
            sizes,
            free,
            held,
            caps,
            granule: self.config.allocation_granule_bytes,
            remembered: remembered_partition(s, batch),
            candidates: Vec::new(),
        };
        if snapshot.shortfall().is_some() {
            let pinned_requested = snapshot.pinned_requested();
            snapshot.candidates = self.candidates(s, pinned_requested, batch.owner, &batch.group);
        }
        Ok(snapshot)
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
