//! `allocate_queue`: taking the owner's queued sets, evicting idle owners
//! under physical pressure, planning, allocating all or nothing, and
//! committing.
//!
//! The call runs in two steps under the manager's lock. [`Inner::prepare`]
//! may fail and then changes nothing: it evicts idle owners only for a
//! batch that the planner says fits once they are gone (granule, caps and
//! reserve included), and allocates only new memory, beside the arrays the
//! participants hold. Only an allocation the device then refuses (a fault,
//! another process taking the memory) fails after an eviction, whose hooks
//! are delivered all the same. [`Inner::commit`] cannot fail: it retires replaced
//! arrays, hands reused buffers to their new arrays and builds the responses.
//!
//! A chunkable array has a buffer in each of the plan's buffer sets, an
//! unchunkable one a single buffer; arrays are matched with what the
//! participant holds by (label, set).

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::Inner;
use super::hooks::Hooks;
use super::place::{FreeBefore, Held, Placed, forget_released, sets_of};
use super::report::Attempt;
use super::state::{Queued, State};
use crate::ChunkPlan;
use crate::backend::BackendResult;
use crate::config::LimitMode;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{
    BatchSizes, Budget, OVERSIZE_WARNING_FACTOR, name_unchunkable, plan_chunks, plan_partition,
};
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
    /// physically) and allocates its new memory. On error, what it allocated
    /// is freed and every array the participants hold is untouched.
    /// `attempt` keeps what the plan was made with, for the error's report.
    fn prepare(
        &self,
        s: &mut State,
        batch: &Batch,
        hooks: &mut Hooks,
        attempt: &mut Attempt,
    ) -> Result<(ChunkPlan, Placed), MemError> {
        let sizes = BatchSizes::measure(batch.requests())?;
        attempt.sizes = Some(sizes);
        warn_misaxed(batch.requests());
        let requested = sizes.total_bytes();
        let held = Held::look_up(s, batch);
        let (free, replaced) = if requested == 0 {
            (0, 0)
        } else {
            (
                self.backend.mem_info().on(&*self.backend)?.free,
                held.replaced_bytes(),
            )
        };
        if requested > free.saturating_mul(OVERSIZE_WARNING_FACTOR) {
            tracing::warn!(
                requested = %Bytes(requested),
                free = %Bytes(free),
                "batch is over {OVERSIZE_WARNING_FACTOR}x the free device memory; it will run in many chunks"
            );
        }
        let headroom = match s.limit_mode {
            LimitMode::Passive => None,
            LimitMode::Active => {
                Some(s.cap_headroom(&batch.group, self.total, held.replaced_cap_bytes()))
            }
        };
        let mut budget = Budget {
            effective_free: free.saturating_add(replaced),
            cap_headroom: headroom,
            granule: self.config.allocation_granule_bytes,
        };
        attempt.budget = Some(budget);
        // Eviction frees memory: the figure measured above is then stale.
        let mut free_unchanged = requested > 0;
        if let Some(needed) = budget.shortfall(requested) {
            let pinned_requested = batch
                .requests()
                .filter(|(_, request)| request.memory_kind() == crate::MemoryKind::Pinned)
                .fold(0u64, |sum, (_, request)| {
                    sum.saturating_add(request.nbytes().unwrap_or(u64::MAX))
                });
            let victims =
                self.choose_victims(s, needed, pinned_requested, batch.owner, &batch.group);
            if !victims.owners.is_empty() {
                // Eviction belongs to a batch that will succeed: planned
                // as it would be after it, the batch must fit (granule,
                // caps and reserve included), else no one is evicted.
                let after = Budget {
                    effective_free: budget.effective_free.saturating_add(victims.credit),
                    cap_headroom: headroom.map(|h| h.saturating_add(victims.in_group)),
                    ..budget
                };
                // Its error says what stays in the way once eviction is
                // counted; its report, what holds the memory now.
                let planned = self.plan_batch(s, batch, &sizes, &after)?;
                // A remembered partition is not planned: it may still not
                // fit, and then fails to allocate with no one evicted.
                if device_footprint(batch, &planned) <= after.effective_free {
                    let released =
                        self.evict(s, victims, needed, pinned_requested, batch.owner, hooks);
                    free_unchanged = released == 0;
                    budget.effective_free = budget.effective_free.saturating_add(released);
                    if headroom.is_some() {
                        budget.cap_headroom = Some(s.cap_headroom(
                            &batch.group,
                            self.total,
                            held.replaced_cap_bytes(),
                        ));
                    }
                    attempt.budget = Some(budget);
                }
            }
        }
        let plan = self.plan_batch(s, batch, &sizes, &budget)?;
        tracing::debug!(
            group = %batch.group,
            owner = %s.named_owner(batch.owner),
            requested = %Bytes(requested),
            chunkable = %Bytes(sizes.chunkable_bytes),
            unchunkable = %Bytes(sizes.unchunkable_bytes),
            total_runs = sizes.total_runs,
            depth = sizes.depth,
            free = %Bytes(free),
            replaced = %Bytes(replaced),
            effective_free = %Bytes(budget.effective_free),
            cap_headroom = %OrNone(headroom.map(Bytes)),
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
        let free = FreeBefore {
            bytes: free,
            current: free_unchanged,
        };
        let placed = self.place(s, batch, held, &plan, &stream, free)?;
        Ok((plan, placed))
    }
}

impl Inner {
    /// The plan of `batch` under `budget`: the remembered partition a
    /// notary's arrays are laid out for comes first, as in cubie (after the
    /// rule that an empty batch is one chunk); otherwise the batch is
    /// planned. An error names the unchunkable requests and, where the caps
    /// bind, the caps.
    fn plan_batch(
        &self,
        s: &State,
        batch: &Batch,
        sizes: &BatchSizes,
        budget: &Budget,
    ) -> Result<ChunkPlan, MemError> {
        let reused = remembered_partition(s, batch)
            .filter(|_| sizes.total_bytes() > 0)
            .and_then(|(length, chunks)| plan_partition(sizes, budget, length, chunks));
        match reused {
            Some(plan) => Ok(plan),
            None => plan_chunks(sizes, budget)
                .map_err(|error| name_unchunkable(error, batch.requests(), sizes.total_runs))
                .map_err(|error| self.explain_caps(s, error, &batch.group, sizes, budget)),
        }
    }
}

/// The device bytes `batch` takes under `plan`: each device request's
/// chunked bytes in each of its buffer sets.
fn device_footprint(batch: &Batch, plan: &ChunkPlan) -> u64 {
    batch
        .requests()
        .filter(|(_, request)| request.memory_kind() == crate::MemoryKind::Device)
        .fold(0u64, |sum, (_, request)| {
            let sets = u64::try_from(sets_of(plan, request)).unwrap_or(u64::MAX);
            sum.saturating_add(plan.chunked_bytes(request).saturating_mul(sets))
        })
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

/// The remembered partition `(chunk_length, chunks)` of the owner in this
/// group, when one of its notaries (participants that queued nothing) holds
/// arrays, which are laid out for it.
fn remembered_partition(s: &State, batch: &Batch) -> Option<(usize, usize)> {
    let notary_holds = batch.participants.len() > batch.taken.len() && {
        let queued: FxHashSet<InstanceId> = batch.taken.iter().map(|(id, _)| *id).collect();
        batch.participants.iter().any(|id| {
            !queued.contains(id)
                && s.instances
                    .get(id)
                    .is_some_and(|i| !i.allocations.is_empty())
        })
    };
    if !notary_holds {
        return None;
    }
    s.groups
        .get(&batch.group)
        .and_then(|g| g.partitions.get(&batch.owner))
        .copied()
}
