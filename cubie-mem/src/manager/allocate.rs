//! `allocate_queue`: taking the owner's queued sets, evicting idle owners
//! under physical pressure, planning, allocating all or nothing, and
//! committing.
//!
//! The call runs in two steps under the manager's lock. [`Inner::prepare`]
//! may fail and changes nothing but evictions (whose hooks are delivered
//! whatever happens after): it allocates only new memory, beside the arrays
//! the participants hold. [`Inner::commit`] cannot fail: it retires replaced
//! arrays, hands reused buffers to their new arrays and builds the responses.

use std::sync::Arc;

use super::Inner;
use super::hooks::Hooks;
use super::state::{Queued, State};
use crate::array::ReleaseReason;
use crate::array::slot::Slot;
use crate::backend::BackendResult;
use crate::config::LimitMode;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{BatchSizes, Budget, ChunkPlan, OVERSIZE_WARNING_FACTOR, plan_chunks};
use crate::registration::ReadyHook;
use crate::stats::UsageStats;
use crate::streams::OwnedStream;
use crate::{ArrayRequest, ArrayResponse, Bytes, DType, MemError, MemoryKind};

/// Fraction of a group's caps above which active mode warns.
const CAP_WARNING_FRACTION: f64 = 0.95;

/// What a call produced: hooks to run (always), and the trigger's response.
pub(crate) struct Outcome {
    pub(crate) hooks: Hooks,
    pub(crate) result: Result<ArrayResponse, MemError>,
}

/// The participants of one call and the sets they queued.
struct Batch {
    trigger: InstanceId,
    group: Arc<str>,
    owner: OwnerId,
    /// The group's members of the trigger's owner, in the order they joined.
    participants: Vec<InstanceId>,
    /// The queued sets taken, in queue order.
    taken: Vec<(InstanceId, Queued)>,
}

impl Batch {
    fn requests(&self) -> impl Iterator<Item = (&str, &ArrayRequest)> + Clone {
        self.taken.iter().flat_map(|(_, q)| q.set.iter())
    }
}

/// Where one requested array comes from. Placements follow the order of
/// the taken requests.
enum Placement {
    /// The array held under the label has the same type and shape: kept,
    /// and its handles stay valid.
    Keep(Arc<Slot>),
    /// The buffer held under the label is large enough: reused for the new
    /// type and shape.
    Reuse,
    /// New memory, replacing what the label held (if anything) on commit.
    Fresh(Arc<Slot>),
}

impl Inner {
    /// Serves `trigger`'s owner in its group. `want_response`: the caller
    /// takes the trigger's response.
    pub(crate) fn allocate_queue(&self, trigger: InstanceId, want_response: bool) -> Outcome {
        let mut hooks = Hooks::default();
        let result = self.serve(&mut self.lock(), trigger, want_response, &mut hooks);
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
    ) -> Result<(ChunkPlan, Vec<Placement>), MemError> {
        let sizes = BatchSizes::measure(batch.requests())?;
        let requested = sizes.total_bytes();
        let held = held_arrays(s, batch);
        let (free, replaced) = if requested == 0 {
            (0, 0)
        } else {
            (
                self.backend.mem_info().on(&*self.backend)?.free,
                replaced_bytes(&held),
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
            LimitMode::Active => Some(s.cap_headroom(&batch.group, self.total, replaced)),
        };
        let mut budget = Budget {
            effective_free: free.saturating_add(replaced),
            cap_headroom: headroom,
            granule: self.config.allocation_granule_bytes,
        };
        if let Some(needed) = budget.shortfall(requested) {
            let released = self.evict(s, needed, batch.owner, hooks);
            budget.effective_free = budget.effective_free.saturating_add(released);
        }
        let plan = plan_chunks(&sizes, &budget)
            .map_err(|error| self.explain_caps(s, error, batch, &sizes, &budget))?;
        let plan = reuse_partition(s, batch, plan);
        tracing::debug!(
            group = %batch.group,
            owner = %s.named_owner(batch.owner),
            requested = %Bytes(requested),
            free = %Bytes(free),
            replaced = %Bytes(replaced),
            effective_free = %Bytes(budget.effective_free),
            cap_headroom = ?headroom.map(Bytes),
            chunks = plan.chunks,
            chunk_length = plan.chunk_length,
            "planned a batch"
        );
        let stream = s.groups.stream_of(batch.trigger, &self.backend)?;
        let placed = self.place(s, batch, held, &plan, &stream, free)?;
        Ok((plan, placed))
    }

    /// Decides where every requested array comes from, given the arrays
    /// `held` under the requested labels, and allocates the new ones. All or
    /// nothing: on failure the new memory is freed (dropped).
    fn place(
        &self,
        s: &mut State,
        batch: &Batch,
        held: Vec<Option<Arc<Slot>>>,
        plan: &ChunkPlan,
        stream: &Arc<OwnedStream>,
        free_before: u64,
    ) -> Result<Vec<Placement>, MemError> {
        let mut placed = Vec::with_capacity(held.len());
        for ((label, request), old) in batch.requests().zip(held) {
            let bytes = plan.chunked_bytes(request);
            let old = old.filter(|old| old.kind() == request.memory_kind());
            placed.push(match old {
                Some(old)
                    if old.dtype() == request.dtype()
                        && request
                            .chunked_dims(plan.chunk_length)
                            .eq(old.shape().iter().copied()) =>
                {
                    Placement::Keep(old)
                }
                Some(old) if old.bytes() >= bytes => Placement::Reuse,
                Some(old) => {
                    let label = Arc::clone(old.label());
                    self.fresh(
                        s,
                        batch.owner,
                        label,
                        request,
                        bytes,
                        plan,
                        stream,
                        free_before,
                    )?
                }
                None => self.fresh(
                    s,
                    batch.owner,
                    Arc::from(label),
                    request,
                    bytes,
                    plan,
                    stream,
                    free_before,
                )?,
            });
        }
        Ok(placed)
    }

    /// New memory for one request.
    #[allow(clippy::too_many_arguments)]
    fn fresh(
        &self,
        s: &mut State,
        owner: OwnerId,
        label: Arc<str>,
        request: &ArrayRequest,
        bytes: u64,
        plan: &ChunkPlan,
        stream: &Arc<OwnedStream>,
        free_before: u64,
    ) -> Result<Placement, MemError> {
        Slot::allocate(
            &self.backend,
            owner,
            Arc::clone(&label),
            request.dtype(),
            request.memory_kind(),
            bytes,
            plan.chunked_shape(request).into_boxed_slice(),
            stream,
        )
        .map(Placement::Fresh)
        .map_err(|error| self.explain_failure(s, error, &label, bytes, plan, free_before))
    }

    /// Applies the placements (in the order of the taken requests) and
    /// builds every participant's response, moving each request's label and
    /// shape into it.
    fn commit(
        &self,
        s: &mut State,
        batch: Batch,
        plan: ChunkPlan,
        placed: Vec<Placement>,
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
        // Responses are built only for those who receive them: the caller
        // (the trigger's) and participants with a ready hook.
        let mut responses: Vec<(InstanceId, Option<ReadyHook>, Option<ArrayResponse>)> =
            participants
                .iter()
                .map(|&id| {
                    let hook = s.instances.get(&id).and_then(|i| i.on_ready.clone());
                    let wanted = hook.is_some() || (want_response && id == trigger);
                    let response = wanted.then(|| {
                        let arrays = taken
                            .iter()
                            .find(|(t, _)| *t == id)
                            .map_or(0, |(_, q)| q.set.len());
                        ArrayResponse::with_capacity(plan, arrays)
                    });
                    (id, hook, response)
                })
                .collect();
        s.with_group_usage(&group, |s, usage| {
            let mut placed = placed.into_iter();
            for (instance, queued) in taken {
                if plan.is_chunked() {
                    if let Some(i) = s.instances.get_mut(&instance) {
                        i.usage.chunked();
                    }
                    usage.chunked();
                    s.total_usage.chunked();
                }
                let mut response = responses
                    .iter_mut()
                    .find(|(id, _, _)| *id == instance)
                    .and_then(|(_, _, response)| response.as_mut());
                for ((label, request), placement) in queued.set.into_iter().zip(placed.by_ref()) {
                    let dtype = request.dtype();
                    let shape = request.into_chunked_shape(plan.chunk_length);
                    let slot = apply(s, usage, instance, &label, dtype, &shape, placement);
                    if let (Some(response), Some(slot)) = (response.as_deref_mut(), slot) {
                        response.insert(label, shape, slot);
                    }
                }
            }
        });
        if let Some(g) = s.groups.get_mut(&group) {
            g.partitions.insert(owner, (plan.chunk_length, plan.chunks));
        }
        if s.limit_mode == LimitMode::Active {
            self.warn_cap_usage(s, &group);
        }
        let mut own = ArrayResponse::default();
        for (id, hook, response) in responses {
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
        own
    }

    /// Fills an out-of-memory error with the label, the idle bytes this
    /// manager holds and the limit that applied.
    fn explain_failure(
        &self,
        s: &mut State,
        error: MemError,
        label: &str,
        bytes: u64,
        plan: &ChunkPlan,
        free_before: u64,
    ) -> MemError {
        match error {
            MemError::OutOfMemory { free, .. } => MemError::OutOfMemory {
                label: label.to_owned(),
                requested: Bytes(bytes),
                free: if free.0 == 0 {
                    Bytes(free_before)
                } else {
                    free
                },
                idle_held: Bytes(self.idle_bytes(s)),
                limit: Bytes(plan.allocatable.saturating_add(plan.withheld)),
            },
            other => other,
        }
    }

    /// When active-mode caps, not the device, kept the batch from fitting,
    /// says so with the caps, the proportion and the fix.
    fn explain_caps(
        &self,
        s: &State,
        error: MemError,
        batch: &Batch,
        sizes: &BatchSizes,
        budget: &Budget,
    ) -> MemError {
        let caps_bind = budget
            .cap_headroom
            .is_some_and(|h| h < budget.effective_free);
        let planner_error = matches!(
            error,
            MemError::AllUnchunkable { .. }
                | MemError::UnchunkableTooLarge { .. }
                | MemError::SingleRunTooLarge { .. }
        );
        if !(caps_bind && planner_error) {
            return error;
        }
        let (caps, held) = s.group_caps_and_use(&batch.group, self.total);
        let proportion: f64 = s
            .groups
            .get(&batch.group)
            .map(|g| g.members().filter_map(|m| s.shares.proportion(m)).sum())
            .unwrap_or(0.0);
        let per_run = sizes
            .chunkable_bytes
            .div_ceil(u64::try_from(sizes.total_runs).unwrap_or(u64::MAX).max(1));
        MemError::CapLimited {
            group: batch.group.to_string(),
            proportion,
            caps: Bytes(caps),
            held: Bytes(held),
            allowed: Bytes(budget.allocatable().map_or(0, |(alloc, _)| alloc)),
            needed: Bytes(sizes.unchunkable_bytes.saturating_add(per_run)),
            free: Bytes(budget.effective_free),
        }
    }

    fn warn_cap_usage(&self, s: &mut State, group: &Arc<str>) {
        let (caps, used) = s.group_caps_and_use(group, self.total);
        let over = caps > 0 && used as f64 > CAP_WARNING_FRACTION * caps as f64;
        let Some(g) = s.groups.get_mut(group) else {
            return;
        };
        if over && !g.cap_warned {
            tracing::warn!(
                %group,
                used = %Bytes(used),
                caps = %Bytes(caps),
                "stream group has used over 95% of its caps"
            );
        }
        g.cap_warned = over;
    }
}

/// The array each participant holds under each label it requests (in the
/// order of the taken requests), looked up once for the whole call.
fn held_arrays(s: &State, batch: &Batch) -> Vec<Option<Arc<Slot>>> {
    let mut held = Vec::with_capacity(batch.requests().count());
    for (id, queued) in &batch.taken {
        let allocations = s.instances.get(id).map(|i| &i.allocations);
        held.extend(
            queued
                .set
                .labels()
                .map(|label| allocations.and_then(|a| a.get(label)).cloned()),
        );
    }
    held
}

/// Device bytes of the `held` arrays: those about to be replaced.
fn replaced_bytes(held: &[Option<Arc<Slot>>]) -> u64 {
    held.iter()
        .flatten()
        .filter(|slot| slot.kind() == MemoryKind::Device)
        .fold(0u64, |sum, slot| sum.saturating_add(slot.bytes()))
}

/// Keeps the remembered partition of the owner in this group when one of
/// its notaries holds arrays and the partition still covers the batch and
/// fits, so the notary's arrays stay valid.
fn reuse_partition(s: &State, batch: &Batch, plan: ChunkPlan) -> ChunkPlan {
    let notary_holds = batch.participants.iter().any(|id| {
        !batch.taken.iter().any(|(t, _)| t == id)
            && s.instances
                .get(id)
                .is_some_and(|i| !i.allocations.is_empty())
    });
    let remembered = s
        .groups
        .get(&batch.group)
        .and_then(|g| g.partitions.get(&batch.owner));
    match remembered {
        Some(&(length, chunks)) if notary_holds => {
            plan.with_partition(length, chunks).unwrap_or(plan)
        }
        _ => plan,
    }
}

/// Applies one placement for `instance`'s array `label`, counting it in
/// `usage` (its group's counters); returns the array it holds now.
fn apply(
    s: &mut State,
    usage: &mut UsageStats,
    instance: InstanceId,
    label: &str,
    dtype: DType,
    shape: &[usize],
    placement: Placement,
) -> Option<Arc<Slot>> {
    match placement {
        Placement::Keep(slot) => Some(slot),
        Placement::Reuse => {
            let instance_state = s.instances.get_mut(&instance)?;
            let entry = instance_state.allocations.get_mut(label)?;
            let new = match Arc::get_mut(entry) {
                // No handle refers to the array: reshape it where it is.
                Some(unique) => {
                    unique.reshape(dtype, shape);
                    Arc::clone(entry)
                }
                None => {
                    let new = entry.reuse(dtype, shape.into());
                    *entry = Arc::clone(&new);
                    new
                }
            };
            s.count_reuse(instance, usage);
            Some(new)
        }
        Placement::Fresh(slot) => {
            let allocations = &mut s.instances.get_mut(&instance)?.allocations;
            let old = allocations.insert(Arc::clone(slot.label()), Arc::clone(&slot));
            s.count_allocation(instance, usage, &slot);
            if let Some(old) = old {
                if let Err(error) = s.release_slot(instance, usage, &old, ReleaseReason::Replaced) {
                    tracing::warn!(label = %old.label(), %error, "freeing a replaced array failed");
                }
            }
            Some(slot)
        }
    }
}
