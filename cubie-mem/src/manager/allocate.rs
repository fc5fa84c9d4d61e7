//! `allocate_queue`: gathering a stream group's queue, evicting idle owners
//! under physical pressure, planning, allocating all-or-nothing, and
//! delivering responses.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Inner, State};
use crate::array::{ReleaseReason, Slot};
use crate::backend::StreamHandle;
use crate::config::LimitMode;
use crate::plan::{BatchSizes, Budget, ChunkPlan, OVERSIZE_WARNING_FACTOR, plan_chunks};
use crate::registration::{InvalidateHook, ReadyHook};
use crate::{ArrayResponse, Bytes, MemError, MemoryKind, RequestSet};

/// Fraction of a group's caps above which active mode warns.
const CAP_WARNING_FRACTION: f64 = 0.95;

/// The outcome of a successful `allocate_queue`, with the hooks still to call.
pub(crate) struct Delivery {
    responses: Vec<(u64, ArrayResponse, Option<ReadyHook>)>,
    invalidated: Vec<InvalidateHook>,
}

impl Delivery {
    fn empty() -> Self {
        Delivery {
            responses: Vec::new(),
            invalidated: Vec::new(),
        }
    }

    /// The response of `instance` (a copy when its hook will also get one).
    pub(crate) fn response_for(&mut self, instance: u64) -> ArrayResponse {
        match self.responses.iter_mut().find(|(i, _, _)| *i == instance) {
            Some((_, response, Some(_))) => response.clone(),
            Some((_, response, None)) => std::mem::take(response),
            None => ArrayResponse::default(),
        }
    }

    /// Calls the invalidate hooks of evicted instances, then every
    /// participant's ready hook. Runs with no manager lock held.
    pub(crate) fn run_hooks(self) {
        call_invalidate_hooks(&self.invalidated);
        for (_, response, hook) in self.responses {
            if let Some(hook) = hook {
                let mut hook = hook.lock().unwrap_or_else(|p| p.into_inner());
                (*hook)(response);
            }
        }
    }
}

/// Calls invalidate hooks, each at most once.
pub(crate) fn call_invalidate_hooks(hooks: &[InvalidateHook]) {
    for hook in hooks {
        let mut hook = hook.lock().unwrap_or_else(|p| p.into_inner());
        (*hook)();
    }
}

/// `H`: what the caps of `group`'s members still allow, counting `replaced`
/// bytes (about to be freed) as available.
pub(crate) fn cap_headroom(s: &State, group: &str, total: u64, replaced: u64) -> u64 {
    let members = s.groups.members(group);
    let caps: u64 = members.iter().map(|&m| s.cap(m, total)).sum();
    let held: u64 = members
        .iter()
        .filter_map(|m| s.instances.get(m))
        .map(|i| i.device_bytes())
        .sum();
    caps.saturating_sub(held.saturating_sub(replaced))
}

/// A new allocation made during the call, kept until commit or rollback.
struct Made {
    instance: u64,
    label: String,
    slot: Arc<Slot>,
    /// An existing array of the same label, type and shape, kept as it is
    /// (its handles stay valid).
    kept: bool,
}

impl Inner {
    pub(crate) fn allocate_queue(&self, trigger: u64) -> Result<Delivery, MemError> {
        let mut s = self.lock();
        let group = s.group_of(trigger)?;
        let members: Vec<u64> = s.groups.members(&group).to_vec();
        let Some(queue) = s.queue.get_mut(&group) else {
            return Ok(Delivery::empty());
        };
        // Participants: the group's members (the trigger is one of them).
        let mut taken: Vec<(u64, RequestSet)> = Vec::new();
        let mut kept: Vec<(u64, RequestSet)> = Vec::new();
        for entry in queue.drain(..) {
            if members.contains(&entry.0) {
                taken.push(entry);
            } else {
                kept.push(entry);
            }
        }
        *queue = kept;
        if taken.is_empty() {
            return Ok(Delivery::empty());
        }
        match self.serve(&mut s, &group, &members, &taken) {
            Ok(delivery) => Ok(delivery),
            Err(error) => {
                let queue = s.queue.entry(group).or_default();
                let later = std::mem::take(queue);
                *queue = taken;
                queue.extend(later);
                Err(error)
            }
        }
    }

    fn serve(
        &self,
        s: &mut State,
        group: &str,
        members: &[u64],
        taken: &[(u64, RequestSet)],
    ) -> Result<Delivery, MemError> {
        let sizes = BatchSizes::measure(taken.iter().flat_map(|(_, set)| set.iter()))?;
        let requested = sizes.total_bytes();
        let free = self.backend.mem_info()?.free;
        if requested > free.saturating_mul(OVERSIZE_WARNING_FACTOR) {
            tracing::warn!(
                requested = %Bytes(requested),
                free = %Bytes(free),
                "batch is over {OVERSIZE_WARNING_FACTOR}x the free device memory; it will run in many chunks"
            );
        }
        let replaced: u64 = taken
            .iter()
            .filter_map(|(id, set)| {
                let state = s.instances.get(id)?;
                Some(
                    set.labels()
                        .filter_map(|l| state.allocations.get(l))
                        .filter(|slot| slot.kind() == MemoryKind::Device)
                        .map(|slot| slot.bytes())
                        .sum::<u64>(),
                )
            })
            .sum();
        let mut effective_free = free.saturating_add(replaced);
        let headroom = match s.limit_mode {
            LimitMode::Passive => None,
            LimitMode::Active => Some(cap_headroom(s, group, self.total, replaced)),
        };

        let mut invalidated = Vec::new();
        let caps_allow = headroom.is_none_or(|h| requested < h);
        if requested >= effective_free && caps_allow {
            let protected: HashSet<u64> = taken
                .iter()
                .filter_map(|(id, _)| s.instances.get(id).map(|i| i.owner))
                .collect();
            let (released, hooks) = self.evict(s, requested - effective_free + 1, &protected);
            effective_free += released;
            invalidated = hooks;
        }

        let budget = Budget {
            effective_free,
            cap_headroom: headroom,
            granule: self.config.allocation_granule_bytes,
        };
        let mut plan = plan_chunks(&sizes, &budget)?;
        plan = self.reuse_partition(s, members, taken, plan);

        let stream = s.groups.stream(group, &*self.backend)?;
        let made = self.allocate_all(s, group, taken, &plan, stream, free)?;

        // Commit.
        let mut responses: Vec<(u64, ArrayResponse, Option<ReadyHook>)> = Vec::new();
        for &(id, _) in taken {
            s.partitions.insert(id, (plan.chunk_length, plan.chunks));
            if plan.is_chunked() {
                s.total_usage.chunked_requests += 1;
                s.update_group_usage(group, |u| u.chunked_requests += 1);
                if let Some(i) = s.instances.get_mut(&id) {
                    i.usage.chunked_requests += 1;
                }
            }
            let hook = s.instances.get(&id).and_then(|i| i.on_ready.clone());
            responses.push((id, ArrayResponse::new(plan), hook));
        }
        for Made {
            instance,
            label,
            slot,
            kept,
        } in made
        {
            let response = responses.iter_mut().find(|(i, _, _)| *i == instance);
            if kept {
                if let Some((_, response, _)) = response {
                    response.insert(label, slot);
                }
                continue;
            }
            s.count_allocation(instance, group, slot.bytes());
            if let Some((_, response, _)) = response {
                response.insert(label.clone(), Arc::clone(&slot));
            }
            if let Some(i) = s.instances.get_mut(&instance) {
                i.allocations.insert(label, slot);
            }
        }
        for &member in members {
            if !taken.iter().any(|(id, _)| *id == member) {
                let hook = s.instances.get(&member).and_then(|i| i.on_ready.clone());
                responses.push((member, ArrayResponse::new(plan), hook));
            }
        }
        if let Some(h) = headroom {
            self.warn_cap_usage(s, group, h);
        }
        Ok(Delivery {
            responses,
            invalidated,
        })
    }

    /// Keeps a notary's remembered partition when it still covers the batch
    /// and fits, so the notary's arrays stay valid.
    fn reuse_partition(
        &self,
        s: &State,
        members: &[u64],
        taken: &[(u64, RequestSet)],
        plan: ChunkPlan,
    ) -> ChunkPlan {
        for &member in members {
            let notary = !taken.iter().any(|(id, _)| *id == member);
            let holds = s
                .instances
                .get(&member)
                .is_some_and(|i| !i.allocations.is_empty());
            if !(notary && holds) {
                continue;
            }
            if let Some(&(length, chunks)) = s.partitions.get(&member) {
                if let Some(reused) = plan.with_partition(length, chunks) {
                    return reused;
                }
            }
        }
        plan
    }

    /// Allocates every taken request at its chunked shape, reusing a buffer of
    /// the same label and memory kind when it is large enough. All or nothing:
    /// on failure everything made here is freed.
    fn allocate_all(
        &self,
        s: &mut State,
        group: &str,
        taken: &[(u64, RequestSet)],
        plan: &ChunkPlan,
        stream: StreamHandle,
        free_before: u64,
    ) -> Result<Vec<Made>, MemError> {
        let mut made: Vec<Made> = Vec::with_capacity(taken.iter().map(|(_, set)| set.len()).sum());
        for (id, set) in taken {
            for (label, request) in set.iter() {
                let bytes = plan.chunked_bytes(request);
                let same = s
                    .instances
                    .get(id)
                    .and_then(|i| i.allocations.get(label))
                    .filter(|old| {
                        old.kind() == request.memory_kind()
                            && old.dtype() == request.dtype()
                            && request
                                .chunked_dims(plan.chunk_length)
                                .eq(old.shape().iter().copied())
                            && old.is_live()
                    });
                if let Some(old) = same {
                    made.push(Made {
                        instance: *id,
                        label: label.to_owned(),
                        slot: Arc::clone(old),
                        kept: true,
                    });
                    continue;
                }
                let shape = plan.chunked_shape(request);
                let (key, previous) = match s
                    .instances
                    .get_mut(id)
                    .and_then(|i| i.allocations.remove_entry(label))
                {
                    Some((key, old)) => (key, Some(old)),
                    None => (label.to_owned(), None),
                };
                let allocate = |shape| {
                    Slot::allocate(
                        &self.backend,
                        label,
                        request.dtype(),
                        request.memory_kind(),
                        bytes,
                        shape,
                        stream,
                    )
                };
                let slot = match previous {
                    Some(old) => {
                        s.count_free(*id, group, old.bytes(), false);
                        if old.kind() == request.memory_kind() && old.bytes() >= bytes {
                            old.reuse(request.dtype(), shape)
                        } else {
                            if let Err(error) = old.release(ReleaseReason::Replaced) {
                                tracing::warn!(%label, %error, "freeing a replaced array failed");
                            }
                            allocate(shape)
                        }
                    }
                    None => allocate(shape),
                };
                match slot {
                    Ok(slot) => made.push(Made {
                        instance: *id,
                        label: key,
                        slot,
                        kept: false,
                    }),
                    Err(error) => {
                        for m in made.iter().filter(|m| !m.kept) {
                            if let Err(e) = m.slot.release(ReleaseReason::Freed) {
                                tracing::warn!(label = %m.label, error = %e, "rollback free failed");
                            }
                        }
                        return Err(self.explain_failure(
                            s,
                            error,
                            label,
                            bytes,
                            plan,
                            free_before,
                        ));
                    }
                }
            }
        }
        Ok(made)
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
                limit: Bytes(plan.allocatable + plan.withheld),
            },
            other => other,
        }
    }

    /// Device bytes held by idle owners.
    fn idle_bytes(&self, s: &mut State) -> u64 {
        let owners: Vec<u64> = s.owners.keys().copied().collect();
        let mut idle = 0;
        for owner in owners {
            if s.owner_idle(owner, &*self.backend) {
                idle += owner_device_bytes(s, owner);
            }
        }
        idle
    }

    /// Evicts idle owners, least recently used first, whole owners at a time,
    /// until `needed` device bytes are released. Returns the bytes released and
    /// the invalidate hooks to call.
    fn evict(
        &self,
        s: &mut State,
        needed: u64,
        protected: &HashSet<u64>,
    ) -> (u64, Vec<InvalidateHook>) {
        let mut candidates: Vec<(u64, u64)> = Vec::new();
        let owners: Vec<u64> = s.owners.keys().copied().collect();
        for owner in owners {
            if protected.contains(&owner) || owner_device_bytes(s, owner) == 0 {
                continue;
            }
            if s.owner_idle(owner, &*self.backend) {
                let last_used = s.owners.get(&owner).map_or(0, |o| o.last_used);
                candidates.push((last_used, owner));
            }
        }
        candidates.sort_unstable();
        let mut released = 0;
        let mut hooks = Vec::new();
        for (_, owner) in candidates {
            if released >= needed {
                break;
            }
            let instances = s
                .owners
                .get(&owner)
                .map(|o| o.instances.clone())
                .unwrap_or_default();
            for id in instances {
                released += s.release_all(id, ReleaseReason::Evicted);
                if let Some(hook) = s.instances.get(&id).and_then(|i| i.on_invalidate.clone()) {
                    hooks.push(hook);
                }
            }
            tracing::info!(owner, released = %Bytes(released), "evicted an idle owner");
        }
        (released, hooks)
    }

    fn warn_cap_usage(&self, s: &mut State, group: &str, headroom_before: u64) {
        let members = s.groups.members(group);
        let caps: u64 = members.iter().map(|&m| s.cap(m, self.total)).sum();
        let used: u64 = members
            .iter()
            .filter_map(|m| s.instances.get(m))
            .map(|i| i.device_bytes())
            .sum();
        if caps > 0 && used as f64 > CAP_WARNING_FRACTION * caps as f64 {
            if s.cap_warned.insert(group.to_owned()) {
                tracing::warn!(
                    %group,
                    used = %Bytes(used),
                    caps = %Bytes(caps),
                    headroom_before = %Bytes(headroom_before),
                    "stream group has used over 95% of its caps"
                );
            }
        } else {
            s.cap_warned.remove(group);
        }
    }
}

fn owner_device_bytes(s: &State, owner: u64) -> u64 {
    s.owners.get(&owner).map_or(0, |o| {
        o.instances
            .iter()
            .filter_map(|i| s.instances.get(i))
            .map(|i| i.device_bytes())
            .sum()
    })
}
