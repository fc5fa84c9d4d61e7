//! Applying a decision, the step of `allocate_queue` that may fail:
//! evicting the owners it chose ([`Inner::evict`]), then placing the
//! batch ([`Inner::place`]): the replaced arrays freed first where the
//! device cannot hold both, and the new memory allocated, all or nothing.
//! A refused allocation's error is filled with the manager's figures
//! ([`Inner::explain_failure`]), and a failed call forgets the arrays it
//! freed first ([`forget_released`]).

use std::sync::Arc;

use super::Inner;
use super::batch::{Batch, Placement};
use super::decide::{Choice, Eviction, FreeFirst, Placements, Replaced, Room};
use super::held::{Freed, HeldBuffer};
use super::hooks::Hooks;
use super::state::State;
use crate::array::ReleaseReason;
use crate::array::slot::Slot;
use crate::backend::BackendResult;
use crate::ids::{InstanceId, OwnerId};
use crate::resource::OwnedStream;
use crate::{ArrayRequest, Bytes, ChunkPlan, MemError};

/// The slot of `old`, a buffer still held.
fn slot_of<'s>(s: &'s State, old: &Replaced<'_>) -> Option<&'s Arc<Slot>> {
    let allocations = &s.instances.get(&old.instance)?.allocations;
    let held = allocations.sets_at(allocations.find_near(old.label, old.entry)?)?;
    held.get(old.set).map(HeldBuffer::slot)
}

impl Inner {
    /// Evicts the owners `eviction` chose for `protected`'s batch:
    /// schedules every evicted registration's invalidate hook and returns
    /// the bytes the batch can count (bytes an access still holds are
    /// freed later and not counted).
    pub(super) fn evict(
        &self,
        s: &mut State,
        eviction: &Eviction,
        protected: OwnerId,
        hooks: &mut Hooks,
    ) -> u64 {
        let mut released = Freed::default();
        for &owner in &eviction.victims.owners {
            let instances = s
                .owners
                .get(&owner)
                .map(|o| o.instances.clone())
                .unwrap_or_default();
            let mut freed = Freed::default();
            for id in instances {
                freed = freed.plus(s.release_all(id, ReleaseReason::Evicted));
                if let Some(hook) = s.instances.get(&id).and_then(|i| i.on_invalidate.clone()) {
                    hooks.invalidate(s.named(id), hook);
                }
            }
            released = released.plus(freed);
            tracing::info!(
                owner = %s.named_owner(owner),
                for_owner = %s.named_owner(protected),
                freed_device = %Bytes(freed.device),
                freed_pinned = %Bytes(freed.pinned),
                needed = %Bytes(eviction.needed),
                "evicted an idle owner (no work in flight, least recently used first) to make room \
                 for a batch that does not fit the free memory"
            );
        }
        released.credit(eviction.pinned_requested)
    }

    /// Device bytes held by idle owners other than `protected` (the
    /// requester's, never evicted for its own batch): what eviction could
    /// release for a device allocation, for out-of-memory messages.
    fn idle_bytes(&self, s: &mut State, protected: OwnerId) -> u64 {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        owners.into_iter().fold(0u64, |idle, owner| {
            if owner != protected && s.owner_idle(owner) {
                idle.saturating_add(s.owner_held(owner).device)
            } else {
                idle
            }
        })
    }

    /// Applies the decided `placements` of `batch` under `plan`: frees the
    /// replaced device arrays first where `room` says so (decided now with
    /// the free memory measured again when it went stale), and allocates
    /// the new buffers. All or nothing: on failure the new memory is freed
    /// (dropped), and the held arrays are intact unless they had to be
    /// freed first to make room for their successors. `free_before`: the
    /// free memory measured for the batch, for error messages.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place(
        &self,
        s: &mut State,
        batch: &Batch,
        mut placements: Placements<'_>,
        room: Room,
        stream: &Arc<OwnedStream>,
        plan: &ChunkPlan,
        free_before: u64,
    ) -> Result<Vec<Placement>, MemError> {
        let free_first = match room {
            Room::Decided(free_first) => free_first,
            Room::Remeasure if placements.new_device_bytes() == 0 => None,
            Room::Remeasure => {
                let free = self.backend.mem_info().on(&*self.backend)?.free;
                placements.make_room(free)
            }
        };
        if let Some(FreeFirst {
            new,
            free,
            replaced,
        }) = free_first
        {
            tracing::debug!(
                new = %Bytes(new),
                free = %Bytes(free),
                replaced = %Bytes(replaced),
                "the device cannot hold the new arrays beside those they replace: freeing those first"
            );
            // Released, not yet removed: commit retires them as it would have,
            // and a failed call removes them ([`forget_released`]).
            for slot in placements
                .replaced_device()
                .filter_map(|old| slot_of(s, old))
            {
                if let Err(error) = slot.release(ReleaseReason::Replaced) {
                    tracing::warn!(label = %slot.label(), %error, "freeing a replaced array failed");
                }
            }
        }
        let mut applied = std::mem::take(&mut s.scratch.placements);
        applied.clear();
        applied.reserve(placements.choices.len());
        // New buffers of one request share one label, made when needed.
        let mut fresh_label: Option<(&str, Arc<str>)> = None;
        for choice in placements.choices {
            let (label, bytes) = choice.label_and_bytes();
            let placement = match choice {
                Choice::Keep { .. } => Placement::Keep,
                Choice::Reuse { .. } => Placement::Reuse,
                Choice::Fresh {
                    label,
                    request,
                    bytes,
                } => {
                    let shared = match &fresh_label {
                        Some((made_for, shared)) if *made_for == label => Arc::clone(shared),
                        _ => {
                            let shared = s.labels.intern(label);
                            fresh_label = Some((label, Arc::clone(&shared)));
                            shared
                        }
                    };
                    let fresh = self.fresh(
                        s,
                        batch.owner,
                        shared,
                        request,
                        bytes,
                        plan,
                        stream,
                        free_before,
                    );
                    match fresh {
                        Ok(placement) => placement,
                        Err(error) => {
                            // What was allocated is freed with its slots.
                            applied.clear();
                            s.scratch.placements = applied;
                            return Err(error);
                        }
                    }
                }
            };
            tracing::debug!(
                label,
                bytes = %Bytes(bytes),
                memory = match placement {
                    Placement::Keep => "kept",
                    Placement::Reuse => "reused",
                    Placement::Fresh(_) => "allocated",
                },
                "placed an array"
            );
            applied.push(placement);
        }
        Ok(applied)
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
            request.chunked_dims(plan.chunk_length).collect(),
            request.run_axis(),
            stream,
        )
        .map(Placement::Fresh)
        .map_err(|error| self.explain_failure(s, error, &label, bytes, plan, free_before, owner))
    }

    /// Fills an out-of-memory error with the label, the idle bytes this
    /// manager holds and the limit that applied.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn explain_failure(
        &self,
        s: &mut State,
        error: MemError,
        label: &str,
        bytes: u64,
        plan: &ChunkPlan,
        free_before: u64,
        requester: OwnerId,
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
                idle_held: Bytes(self.idle_bytes(s, requester)),
                limit: Bytes(plan.allocatable.saturating_add(plan.withheld)),
                report: None,
            },
            other => other,
        }
    }
}

/// After a failed call: removes from `participants` the arrays freed to
/// make room for successors that were never made, counting them freed.
pub(super) fn forget_released(s: &mut State, participants: &[InstanceId]) {
    for &instance in participants {
        let Ok(group) = s.group_of(instance) else {
            continue;
        };
        let Some(state) = s.instances.get_mut(&instance) else {
            continue;
        };
        let mut released = Vec::new();
        state.allocations.retain(|sets| {
            sets.retain(|held| {
                let live = held.slot().is_live();
                if !live {
                    released.push(Arc::clone(held.slot()));
                }
                live
            });
            !sets.is_empty()
        });
        if released.is_empty() {
            continue;
        }
        s.with_group_usage(&group, |s, usage| {
            for slot in &released {
                s.count_free(instance, usage, slot, false);
            }
        });
    }
}
