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
use crate::array::slot::{Memory, Slot};
use crate::config::LimitMode;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{BatchSizes, Budget, ChunkPlan, OVERSIZE_WARNING_FACTOR, plan_chunks};
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

/// Where one requested array comes from.
enum Placement {
    /// The array held under the label has the same type and shape: kept,
    /// and its handles stay valid.
    Keep(Arc<Slot>),
    /// The buffer held under the label is large enough: reused in place.
    Reuse {
        old: Arc<Slot>,
        memory: Memory,
        dtype: DType,
        shape: Box<[usize]>,
    },
    /// New memory, replacing what the label held (if anything) on commit.
    Fresh {
        slot: Arc<Slot>,
        replaces: Option<Arc<Slot>>,
    },
}

/// A placement for one label of one participant.
struct Placed {
    instance: InstanceId,
    placement: Placement,
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
    ) -> Result<(ChunkPlan, Vec<Placed>), MemError> {
        let sizes = BatchSizes::measure(batch.requests())?;
        let requested = sizes.total_bytes();
        let (free, replaced) = if requested == 0 {
            (0, 0)
        } else {
            (self.backend.mem_info()?.free, replaced_bytes(s, batch))
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
        let placed = self.place(s, batch, &plan, &stream, free)?;
        Ok((plan, placed))
    }

    /// Decides where every requested array comes from and allocates the new
    /// ones. All or nothing: on failure the new memory is freed (dropped).
    fn place(
        &self,
        s: &mut State,
        batch: &Batch,
        plan: &ChunkPlan,
        stream: &Arc<OwnedStream>,
        free_before: u64,
    ) -> Result<Vec<Placed>, MemError> {
        let mut placed = Vec::with_capacity(batch.requests().count());
        for (id, queued) in &batch.taken {
            for (label, request) in queued.set.iter() {
                let bytes = plan.chunked_bytes(request);
                let old = s
                    .instances
                    .get(id)
                    .and_then(|i| i.allocations.get(label))
                    .cloned();
                let same_kind = |old: &Slot| old.kind() == request.memory_kind();
                let placement = match old {
                    Some(old)
                        if same_kind(&old)
                            && old.dtype() == request.dtype()
                            && request
                                .chunked_dims(plan.chunk_length)
                                .eq(old.shape().iter().copied()) =>
                    {
                        Placement::Keep(old)
                    }
                    Some(old) if same_kind(&old) && old.bytes() >= bytes => match old.memory() {
                        Ok(memory) => Placement::Reuse {
                            old,
                            memory,
                            dtype: request.dtype(),
                            shape: plan.chunked_shape(request).into_boxed_slice(),
                        },
                        Err(_) => self.fresh(
                            s,
                            label,
                            request,
                            bytes,
                            plan,
                            stream,
                            Some(old),
                            free_before,
                        )?,
                    },
                    old => self.fresh(s, label, request, bytes, plan, stream, old, free_before)?,
                };
                placed.push(Placed {
                    instance: *id,
                    placement,
                });
            }
        }
        Ok(placed)
    }

    /// New memory for one request.
    #[allow(clippy::too_many_arguments)]
    fn fresh(
        &self,
        s: &mut State,
        label: &str,
        request: &ArrayRequest,
        bytes: u64,
        plan: &ChunkPlan,
        stream: &Arc<OwnedStream>,
        replaces: Option<Arc<Slot>>,
        free_before: u64,
    ) -> Result<Placement, MemError> {
        let slot = Slot::allocate(
            &self.backend,
            Arc::from(label),
            request.dtype(),
            request.memory_kind(),
            bytes,
            plan.chunked_shape(request).into_boxed_slice(),
            stream,
        )
        .map_err(|error| self.explain_failure(s, error, label, bytes, plan, free_before))?;
        Ok(Placement::Fresh { slot, replaces })
    }

    /// Applies the placements and builds every participant's response.
    fn commit(
        &self,
        s: &mut State,
        batch: Batch,
        plan: ChunkPlan,
        placed: Vec<Placed>,
        want_response: bool,
        hooks: &mut Hooks,
    ) -> ArrayResponse {
        let group = &batch.group;
        let mut responses: Vec<(InstanceId, ArrayResponse)> = batch
            .participants
            .iter()
            .map(|&id| (id, ArrayResponse::new(plan)))
            .collect();
        for Placed {
            instance,
            placement,
        } in placed
        {
            let slot = match placement {
                Placement::Keep(slot) => slot,
                Placement::Reuse {
                    old,
                    memory,
                    dtype,
                    shape,
                } => {
                    let new = old.reuse(memory, dtype, shape);
                    s.count_free(instance, group, &old, false);
                    s.count_allocation(instance, group, &new);
                    self.hold(s, instance, &new);
                    new
                }
                Placement::Fresh { slot, replaces } => {
                    if let Some(old) = replaces {
                        if let Err(error) =
                            s.release_slot(instance, group, &old, ReleaseReason::Replaced)
                        {
                            tracing::warn!(label = %old.label(), %error, "freeing a replaced array failed");
                        }
                    }
                    s.count_allocation(instance, group, &slot);
                    self.hold(s, instance, &slot);
                    slot
                }
            };
            if let Some((_, response)) = responses.iter_mut().find(|(id, _)| *id == instance) {
                response.insert(slot);
            }
        }
        if let Some(g) = s.groups.get_mut(group) {
            g.partitions
                .insert(batch.owner, (plan.chunk_length, plan.chunks));
        }
        if plan.is_chunked() {
            for (id, _) in &batch.taken {
                if let Some(i) = s.instances.get_mut(id) {
                    i.usage.chunked();
                }
                s.update_group_usage(group, |u| u.chunked());
                s.total_usage.chunked();
            }
        }
        if s.limit_mode == LimitMode::Active {
            self.warn_cap_usage(s, group);
        }
        let mut own = ArrayResponse::default();
        for (id, response) in responses {
            let hook = s.instances.get(&id).and_then(|i| i.on_ready.clone());
            match hook {
                Some(hook) => {
                    if want_response && id == batch.trigger {
                        own = response.clone();
                    }
                    hooks.ready(s.named(id), hook, response);
                }
                None if id == batch.trigger => own = response,
                None => {}
            }
        }
        own
    }

    /// Records `slot` as held by `instance` under its label.
    fn hold(&self, s: &mut State, instance: InstanceId, slot: &Arc<Slot>) {
        if let Some(i) = s.instances.get_mut(&instance) {
            i.allocations
                .insert(Arc::clone(slot.label()), Arc::clone(slot));
        }
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

/// Device bytes the participants hold under the labels they request: the
/// arrays about to be replaced.
fn replaced_bytes(s: &State, batch: &Batch) -> u64 {
    batch.taken.iter().fold(0u64, |sum, (id, queued)| {
        let Some(state) = s.instances.get(id) else {
            return sum;
        };
        queued
            .set
            .labels()
            .filter_map(|label| state.allocations.get(label))
            .filter(|slot| slot.kind() == MemoryKind::Device)
            .fold(sum, |sum, slot| sum.saturating_add(slot.bytes()))
    })
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
