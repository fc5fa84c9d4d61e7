//! `allocate_queue`: taking the owner's queued sets, evicting idle owners
//! under physical pressure, planning, allocating all or nothing, and
//! committing.
//!
//! The call runs in two steps under the manager's lock. [`Inner::prepare`]
//! may fail and changes nothing but evictions (whose hooks are delivered
//! whatever happens after): it allocates only new memory, beside the arrays
//! the participants hold. [`Inner::commit`] cannot fail: it retires replaced
//! arrays, hands reused buffers to their new arrays and builds the responses.
//!
//! A chunkable array has a buffer in each of the plan's buffer sets, an
//! unchunkable one a single buffer; arrays are matched with what the
//! participant holds by (label, set).

use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::Inner;
use super::hooks::Hooks;
use super::place::{Held, Placed, Placement, forget_released, sets_of};
use super::state::{Queued, State};
use crate::ChunkPlan;
use crate::array::ReleaseReason;
use crate::array::SetSlots;
use crate::array::slot::{Shape, Slot};
use crate::backend::BackendResult;
use crate::config::LimitMode;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{BatchSizes, Budget, OVERSIZE_WARNING_FACTOR, plan_chunks, plan_partition};
use crate::registration::ReadyHook;
use crate::stats::UsageStats;
use crate::{ArrayRequest, ArrayResponse, Bytes, DType, MemError};

/// What a call produced: hooks to run (always), and the trigger's response.
pub(crate) struct Outcome {
    pub(crate) hooks: Hooks,
    pub(crate) result: Result<ArrayResponse, MemError>,
}

/// The participants of one call and the sets they queued.
pub(super) struct Batch {
    trigger: InstanceId,
    group: Arc<str>,
    pub(super) owner: OwnerId,
    /// The group's members of the trigger's owner, in the order they joined.
    participants: Vec<InstanceId>,
    /// The queued sets taken, in queue order.
    pub(super) taken: Vec<(InstanceId, Queued)>,
}

impl Batch {
    pub(super) fn requests(&self) -> impl Iterator<Item = (&str, &ArrayRequest)> + Clone {
        self.taken.iter().flat_map(|(_, q)| q.set.iter())
    }
}

/// The requests of a batch of several runs left unchunkable only by a
/// chunk axis beyond their shape, each warned about (through tracing) and
/// described for the error that may follow.
fn misaxed_requests<'a>(
    requests: impl Iterator<Item = (&'a str, &'a ArrayRequest)>,
) -> Vec<String> {
    requests
        .filter_map(|(label, request)| {
            let axis = request.axis_out_of_range()?;
            tracing::warn!(
                label,
                shape = ?request.shape(),
                axis,
                total_runs = request.runs(),
                "request '{label}' is unchunkable only because its chunk axis {axis} lies beyond its \
                 {} dimensions; set ArrayRequest::chunk_axis to the axis that holds the runs",
                request.shape().len()
            );
            Some(format!("'{label}' (shape {:?}, axis {axis})", request.shape()))
        })
        .collect()
}

/// Names the misaxed requests in an all-unchunkable error.
fn with_misaxed(error: MemError, misaxed: Vec<String>) -> MemError {
    match error {
        MemError::AllUnchunkable {
            requested,
            available,
            withheld,
            ..
        } => MemError::AllUnchunkable {
            requested,
            available,
            withheld,
            axis_out_of_range: misaxed,
        },
        other => other,
    }
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
        match self.prepare(s, &batch, hooks) {
            Ok((plan, placed)) => Ok(self.commit(s, batch, plan, placed, want_response, hooks)),
            Err(error) => {
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
    fn prepare(
        &self,
        s: &mut State,
        batch: &Batch,
        hooks: &mut Hooks,
    ) -> Result<(ChunkPlan, Placed), MemError> {
        let sizes = BatchSizes::measure(batch.requests())?;
        let misaxed = misaxed_requests(batch.requests());
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
        if let Some(needed) = budget.shortfall(requested) {
            let pinned_requested = batch
                .requests()
                .filter(|(_, request)| request.memory_kind() == crate::MemoryKind::Pinned)
                .fold(0u64, |sum, (_, request)| {
                    sum.saturating_add(request.nbytes().unwrap_or(u64::MAX))
                });
            let released = self.evict(s, needed, pinned_requested, batch.owner, hooks);
            budget.effective_free = budget.effective_free.saturating_add(released);
        }
        // A remembered partition a notary's arrays are laid out for comes
        // first, as in cubie (after the rule that an empty batch is one
        // chunk); otherwise the batch is planned.
        let reused = remembered_partition(s, batch)
            .filter(|_| requested > 0)
            .and_then(|(length, chunks)| plan_partition(&sizes, &budget, length, chunks));
        let plan = match reused {
            Some(plan) => plan,
            None => plan_chunks(&sizes, &budget)
                .map_err(|error| with_misaxed(error, misaxed))
                .map_err(|error| self.explain_caps(s, error, &batch.group, &sizes, &budget))?,
        };
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
        let placed = self.place(s, batch, held, &plan, &stream, free)?;
        Ok((plan, placed))
    }

    fn commit(
        &self,
        s: &mut State,
        batch: Batch,
        plan: ChunkPlan,
        placed: Placed,
        want_response: bool,
        hooks: &mut Hooks,
    ) -> ArrayResponse {
        let Batch {
            trigger,
            group,
            owner,
            participants,
            taken,
        } = batch;
        let Placed {
            mut placements,
            mut requests,
        } = placed;
        // Responses are built only for those who receive them: the caller
        // (the trigger's) and participants with a ready hook. Sorted by
        // instance to be found, then put back in join order for the hooks.
        let mut responses = std::mem::take(&mut s.scratch.receivers);
        responses.clear();
        responses.extend(participants.iter().enumerate().map(|(position, &id)| {
            let hook = s.instances.get(&id).and_then(|i| i.on_ready.clone());
            let wanted = hook.is_some() || (want_response && id == trigger);
            Receiver {
                position,
                id,
                hook,
                response: wanted.then(|| ArrayResponse::new(plan)),
            }
        }));
        responses.sort_unstable_by_key(|receiver| receiver.id);
        s.with_group_usage(&group, |s, usage| {
            let mut placements = placements.drain(..);
            let mut requests = requests.drain(..);
            for (instance, queued) in taken {
                if plan.is_chunked() {
                    if let Some(i) = s.instances.get_mut(&instance) {
                        i.usage.chunked();
                    }
                    usage.chunked();
                    s.total_usage.chunked();
                }
                let mut response = responses
                    .binary_search_by_key(&instance, |receiver| receiver.id)
                    .ok()
                    .and_then(|index| responses[index].response.as_mut());
                let mut shapes = response.as_deref_mut().map(|response| {
                    response.reserve_arrays(queued.set.len());
                    Vec::with_capacity(queued.set.len())
                });
                for (label, request) in queued.set {
                    let (dtype, axis) = (request.dtype(), request.run_axis());
                    let sets = sets_of(&plan, &request);
                    let shape = request.into_chunked_shape(plan.chunk_length);
                    let held = requests.next().map_or(0, |placed| placed.held);
                    let mut slots = response.is_some().then(SetSlots::new);
                    for (set, placement) in placements.by_ref().take(sets).enumerate() {
                        let at = At {
                            instance,
                            label: &label,
                            set,
                        };
                        let slot = apply(s, usage, at, (dtype, &shape, axis), placement);
                        if let Some(slots) = slots.as_mut() {
                            slots.push(slot);
                        }
                    }
                    if held > sets {
                        retire_sets_from(s, usage, instance, &label, sets);
                    }
                    if let (Some(response), Some(slots), Some(shapes)) =
                        (response.as_deref_mut(), slots, shapes.as_mut())
                    {
                        response.insert(slots);
                        shapes.push((label, shape));
                    }
                }
                if let (Some(response), Some(shapes)) = (response, shapes) {
                    response.set_shapes(shapes);
                }
            }
        });
        if let Some(g) = s.groups.get_mut(&group) {
            g.partitions.insert(owner, (plan.chunk_length, plan.chunks));
        }
        if s.limit_mode == LimitMode::Active {
            self.warn_cap_usage(s, &group);
        }
        s.scratch.placements = placements;
        s.scratch.requests = requests;
        responses.sort_unstable_by_key(|receiver| receiver.position);
        hooks.reserve_ready(responses.iter().filter(|r| r.hook.is_some()).count());
        let mut own = ArrayResponse::default();
        for Receiver {
            id, hook, response, ..
        } in responses.drain(..)
        {
            let Some(response) = response else { continue };
            match hook {
                Some(hook) => {
                    if want_response && id == trigger {
                        own = response.clone();
                    }
                    hooks.ready(s.named(id), hook, response);
                }
                None => own = response,
            }
        }
        s.scratch.receivers = responses;
        own
    }
}

/// A participant and the response it receives (if anyone receives one).
pub(super) struct Receiver {
    /// Its place in the group, the order hooks are called in.
    position: usize,
    id: InstanceId,
    hook: Option<ReadyHook>,
    response: Option<ArrayResponse>,
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

/// Which buffer a placement is for: `instance`'s array `label` in buffer
/// set `set`.
struct At<'a> {
    instance: InstanceId,
    label: &'a str,
    set: usize,
}

/// Applies one placement at `at` of an array of `(dtype, shape,
/// chunk_axis)`, counting it in `usage` (its group's counters); returns the
/// array it holds now.
fn apply(
    s: &mut State,
    usage: &mut UsageStats,
    at: At,
    (dtype, shape, chunk_axis): (DType, &[usize], Option<usize>),
    placement: Placement,
) -> Option<Arc<Slot>> {
    let At {
        instance,
        label,
        set,
    } = at;
    match placement {
        Placement::Keep(slot) => Some(slot),
        Placement::Reuse => {
            let instance_state = s.instances.get_mut(&instance)?;
            let entry = instance_state.allocations.get_mut(label)?.get_mut(set)?;
            let before = entry.bytes();
            let new = match Arc::get_mut(entry) {
                // No handle refers to the array: reshape it where it is.
                Some(unique) => {
                    unique.reshape(dtype, shape, chunk_axis);
                    Arc::clone(entry)
                }
                None => {
                    let new = entry.reuse(dtype, Shape::from_slice(shape), chunk_axis);
                    *entry = Arc::clone(&new);
                    new
                }
            };
            s.count_reuse(instance, usage, before, &new);
            Some(new)
        }
        Placement::Fresh(slot) => {
            let allocations = &mut s.instances.get_mut(&instance)?.allocations;
            let sets = allocations.sets_for(slot.label());
            // Sets are placed in order, so a new set comes right after the last.
            let old = match sets.get_mut(set) {
                Some(held) => Some(std::mem::replace(held, Arc::clone(&slot))),
                None => {
                    sets.push(Arc::clone(&slot));
                    None
                }
            };
            s.count_allocation(instance, usage, &slot);
            if let Some(old) = old
                && let Err(error) = s.release_slot(instance, usage, &old, ReleaseReason::Replaced)
            {
                tracing::warn!(label = %old.label(), %error, "freeing a replaced array failed");
            }
            Some(slot)
        }
    }
}

/// Releases the buffers `instance` holds under `label` in sets `keep` and
/// above: a plan with fewer sets replaced them.
fn retire_sets_from(
    s: &mut State,
    usage: &mut UsageStats,
    instance: InstanceId,
    label: &str,
    keep: usize,
) {
    let Some(sets) = s
        .instances
        .get_mut(&instance)
        .and_then(|i| i.allocations.get_mut(label))
    else {
        return;
    };
    let keep = keep.min(sets.len());
    let retired: Vec<Arc<Slot>> = sets.drain(keep..).collect();
    for old in retired {
        if let Err(error) = s.release_slot(instance, usage, &old, ReleaseReason::Replaced) {
            tracing::warn!(label = %old.label(), %error, "freeing a replaced buffer set failed");
        }
    }
}
