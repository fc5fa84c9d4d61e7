//! Placing a planned batch: where each requested array's buffer in each set
//! comes from (kept, a held buffer reused, or new memory), and the new
//! memory allocated, all or nothing.
//!
//! The plan credits the bytes of the arrays the call replaces (`Fe`), so
//! the allocation must be able to obtain them: when the device cannot hold
//! the new arrays beside the arrays they replace, the replaced arrays are
//! freed first (their handles report `Replaced`). Only then; a call that
//! could not fit even so fails with every held array intact.

use std::sync::Arc;

use super::Inner;
use super::allocate::Batch;
use super::commit::Receiver;
use super::held::HeldBuffer;
use super::state::State;
use crate::array::ReleaseReason;
use crate::array::slot::Slot;
use crate::backend::BackendResult;
use crate::ids::{InstanceId, OwnerId};
use crate::streams::OwnedStream;
use crate::{ArrayRequest, Bytes, ChunkPlan, MemError, MemoryKind};

/// Where one requested array's buffer in one set comes from. Placements
/// follow the order of the taken requests, and each request's sets in order.
pub(super) enum Placement {
    /// The array held under the (label, set) has the same type and shape:
    /// kept, and its handles stay valid.
    Keep,
    /// The buffer held under the (label, set) is large enough: reused for
    /// the new type and shape.
    Reuse,
    /// New memory, replacing what the (label, set) held (if anything) on
    /// commit.
    Fresh(Arc<Slot>),
}

/// A placement decided before anything is allocated.
enum Decision<'b> {
    /// The held array of `bytes`, kept under `label`.
    Keep { bytes: u64, label: &'b str },
    /// The held buffer `held`, reused for `bytes` of `request` under
    /// `label`.
    Reuse {
        label: &'b str,
        request: &'b ArrayRequest,
        bytes: u64,
        held: Replaced<'b>,
    },
    /// New memory of `bytes` for `request` under `label`.
    Fresh {
        label: &'b str,
        request: &'b ArrayRequest,
        bytes: u64,
    },
}

/// The buffers `request` has under `plan`: one per buffer set when it is
/// chunkable, else one shared by every set.
pub(super) fn sets_of(plan: &ChunkPlan, request: &ArrayRequest) -> usize {
    if request.is_chunkable() {
        plan.buffer_sets.max(1)
    } else {
        1
    }
}

/// The free device memory measured before placing a batch.
#[derive(Clone, Copy, Debug)]
pub(super) struct FreeBefore {
    /// The bytes measured.
    pub(super) bytes: u64,
    /// Whether nothing was freed since (an eviction makes it stale).
    pub(super) current: bool,
}

/// The buffers each participant holds under each label it requests (every
/// set held), looked up once for the whole call, in the order of the taken
/// requests.
pub(super) struct Held {
    buffers: Vec<Comparison>,
    /// Per request, in order: how many of `buffers` it has.
    requests: Vec<PlacedRequest>,
}

/// A held buffer compared with its request when the batch looks it up
/// (from the copy of its layout: no slot is read): every later step reads
/// this summary.
pub(super) struct Comparison {
    kind: MemoryKind,
    /// The request's memory kind.
    same_kind: bool,
    /// The same kind, element type and dimensions as the request, but
    /// perhaps for the run axis (of the request's chunk axis in use).
    same_but_runs: bool,
    /// The held length of that axis (0 without one).
    runs_held: usize,
    bytes: u64,
    capacity: u64,
}

impl Comparison {
    fn compare(held: &HeldBuffer, request: &ArrayRequest) -> Self {
        let axis = request.chunk_axis_in_use();
        let shape = held.shape();
        let same_kind = held.kind() == request.memory_kind();
        let same_but_runs = same_kind
            && held.dtype() == request.dtype()
            && shape.len() == request.shape().len()
            && shape
                .iter()
                .zip(request.shape())
                .enumerate()
                .all(|(i, (held, asked))| Some(i) == axis || held == asked);
        Comparison {
            kind: held.kind(),
            same_kind,
            same_but_runs,
            runs_held: axis.and_then(|axis| shape.get(axis)).copied().unwrap_or(0),
            bytes: held.bytes(),
            capacity: held.capacity(),
        }
    }

    /// Whether the held array is what `request` asks for under a plan of
    /// `chunk_length` runs per chunk: the same kind, element type and
    /// chunked shape.
    fn keeps(&self, request: &ArrayRequest, chunk_length: usize) -> bool {
        self.same_but_runs
            && request
                .chunk_axis_in_use()
                .is_none_or(|_| self.runs_held == chunk_length)
    }
}

/// Lists that serving a batch fills and empties again, kept between calls
/// (empty, with their room) so that a batch of many instances does not ask
/// the allocator for large ones each time.
#[derive(Default)]
pub(crate) struct Scratch {
    held: Vec<Comparison>,
    pub(super) requests: Vec<PlacedRequest>,
    pub(super) placements: Vec<Placement>,
    pub(super) receivers: Vec<Receiver>,
}

/// One request of a batch as its buffers are placed.
pub(super) struct PlacedRequest {
    /// How many buffer sets it held before.
    pub(super) held: usize,
}

impl Held {
    pub(super) fn look_up(s: &mut State, batch: &Batch) -> Held {
        let mut held = Held {
            buffers: std::mem::take(&mut s.scratch.held),
            requests: std::mem::take(&mut s.scratch.requests),
        };
        held.buffers.clear();
        held.requests.clear();
        for (id, queued) in &batch.taken {
            let allocations = s.instances.get(id).map(|i| &i.allocations);
            for (position, (label, request)) in queued.set.iter().enumerate() {
                let sets = allocations
                    .and_then(|a| a.get_near(label, position))
                    .map_or(&[][..], |sets| sets.as_slice());
                held.buffers.extend(
                    sets.iter()
                        .map(|buffer| Comparison::compare(buffer, request)),
                );
                held.requests.push(PlacedRequest { held: sets.len() });
            }
        }
        held
    }

    /// Device bytes of the held buffers, every set: those about to be
    /// replaced or reused, which count as free device memory (`Fe`) at
    /// what they hold (a buffer reused earlier for a smaller array counts
    /// whole), so that a batch plans the same whatever came before it.
    pub(super) fn replaced_bytes(&self) -> u64 {
        self.buffers
            .iter()
            .filter(|held| held.kind == MemoryKind::Device)
            .fold(0u64, |sum, held| sum.saturating_add(held.capacity))
    }

    /// Bytes of the held buffers, device and pinned: what the caps count
    /// as available again (`H`).
    pub(super) fn replaced_cap_bytes(&self) -> u64 {
        self.buffers
            .iter()
            .fold(0u64, |sum, held| sum.saturating_add(held.capacity))
    }
}

/// The bytes of the device buffers among `replaced`.
fn device_capacity(replaced: &[Replaced<'_>]) -> u64 {
    replaced
        .iter()
        .filter(|old| old.kind == MemoryKind::Device)
        .fold(0u64, |sum, old| sum.saturating_add(old.capacity))
}

/// Where each requested array's buffers come from, and per request how
/// many sets it held (more than the plan has: the extra ones are retired).
pub(super) struct Placed {
    pub(super) placements: Vec<Placement>,
    pub(super) requests: Vec<PlacedRequest>,
}

/// A held buffer the batch replaces with new memory (or drops, with a plan
/// of fewer sets): `instance`'s buffer in set `set` of `label`, the
/// `position`th label it requested.
#[derive(Clone, Copy)]
struct Replaced<'b> {
    instance: InstanceId,
    label: &'b str,
    position: usize,
    set: usize,
    kind: MemoryKind,
    /// The bytes of its buffer: what freeing it gives back.
    capacity: u64,
}

impl Replaced<'_> {
    /// Its slot, still held.
    fn slot<'s>(&self, s: &'s State) -> Option<&'s Arc<Slot>> {
        let held = s
            .instances
            .get(&self.instance)?
            .allocations
            .get_near(self.label, self.position)?;
        held.get(self.set).map(HeldBuffer::slot)
    }
}

impl Inner {
    /// Decides where every requested array's buffer in every set comes
    /// from, given the buffers `held` under the requested labels, and
    /// allocates the new ones. All or nothing: on failure the new memory is
    /// freed (dropped), and the held arrays are intact unless they had to
    /// be freed first to make room for their successors.
    pub(super) fn place(
        &self,
        s: &mut State,
        batch: &Batch,
        held: Held,
        plan: &ChunkPlan,
        stream: &Arc<OwnedStream>,
        free: FreeBefore,
    ) -> Result<Placed, MemError> {
        let free_before = free.bytes;
        let Held {
            mut buffers,
            requests,
        } = held;
        let mut decisions = Vec::with_capacity(buffers.len());
        let mut replaced: Vec<Replaced> = Vec::new();
        // The held buffers' comparisons are read in request order.
        let mut old = buffers.drain(..);
        let mut placed = requests.iter();
        for (instance, queued) in &batch.taken {
            for (position, (label, request)) in queued.set.iter().enumerate() {
                let held = placed.next().map_or(0, |placed| placed.held);
                let mut old_sets = old.by_ref().take(held).enumerate();
                let bytes = plan.chunked_bytes(request);
                let at = |set, old: &Comparison| Replaced {
                    instance: *instance,
                    label,
                    position,
                    set,
                    kind: old.kind,
                    capacity: old.capacity,
                };
                for _ in 0..sets_of(plan, request) {
                    let old = old_sets.next().filter(|(_, old)| old.same_kind);
                    decisions.push(match old {
                        Some((_, old)) if old.keeps(request, plan.chunk_length) => Decision::Keep {
                            bytes: old.bytes,
                            label,
                        },
                        Some((set, old)) if old.capacity >= bytes => Decision::Reuse {
                            label,
                            request,
                            bytes,
                            held: at(set, &old),
                        },
                        other => {
                            replaced.extend(other.map(|(set, old)| at(set, &old)));
                            Decision::Fresh {
                                label,
                                request,
                                bytes,
                            }
                        }
                    });
                }
                replaced.extend(old_sets.map(|(set, old)| at(set, &old)));
            }
        }
        drop(old);
        let free_now = free.current.then_some(free_before);
        self.make_room(s, &mut decisions, &mut replaced, free_now)?;
        let mut placements = std::mem::take(&mut s.scratch.placements);
        placements.clear();
        placements.reserve(decisions.len());
        // New buffers of one request share one label, made when needed.
        let mut fresh_label: Option<(&str, Arc<str>)> = None;
        for decision in decisions {
            let (label, bytes) = match &decision {
                Decision::Keep { label, bytes, .. }
                | Decision::Reuse { label, bytes, .. }
                | Decision::Fresh { label, bytes, .. } => (*label, *bytes),
            };
            let placement = match decision {
                Decision::Keep { .. } => Placement::Keep,
                Decision::Reuse { .. } => Placement::Reuse,
                Decision::Fresh {
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
                            placements.clear();
                            s.scratch.placements = placements;
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
            placements.push(placement);
        }
        s.scratch.held = buffers;
        Ok(Placed {
            placements,
            requests,
        })
    }

    /// Frees the device arrays the call replaces with new memory, before
    /// that memory is allocated, when the device cannot hold both and can
    /// hold the new arrays once they are gone: the plan counted their bytes
    /// as free. Otherwise leaves them to be freed on commit, so that a
    /// failed call leaves them intact.
    ///
    /// A held buffer reused for a smaller array keeps its whole size, which
    /// the plan also counted as free: when the new arrays fit only without
    /// them, such buffers (the most oversized first) are replaced by new
    /// memory of their array's size instead of reused.
    ///
    /// `free_now` is the free device memory when the caller still knows it
    /// (nothing was freed since it was measured); else it is asked again.
    fn make_room<'b>(
        &self,
        s: &State,
        decisions: &mut [Decision<'b>],
        replaced: &mut Vec<Replaced<'b>>,
        free_now: Option<u64>,
    ) -> Result<(), MemError> {
        let mut new_bytes = decisions
            .iter()
            .filter_map(|decision| match decision {
                Decision::Fresh { request, bytes, .. }
                    if request.memory_kind() == MemoryKind::Device =>
                {
                    Some(*bytes)
                }
                _ => None,
            })
            .fold(0u64, u64::saturating_add);
        if new_bytes == 0 {
            return Ok(());
        }
        let free = match free_now {
            Some(free) => free,
            None => self.backend.mem_info().on(&*self.backend)?.free,
        };
        if new_bytes <= free {
            return Ok(());
        }
        let mut held_bytes = device_capacity(replaced);
        if new_bytes > free.saturating_add(held_bytes) {
            let mut oversized: Vec<(usize, u64)> = decisions
                .iter()
                .enumerate()
                .filter_map(|(index, decision)| match decision {
                    Decision::Reuse { bytes, held, .. } if held.kind == MemoryKind::Device => {
                        Some((index, held.capacity.saturating_sub(*bytes)))
                    }
                    _ => None,
                })
                .filter(|&(_, spare)| spare > 0)
                .collect();
            let spare = oversized
                .iter()
                .fold(0u64, |sum, &(_, spare)| sum.saturating_add(spare));
            if new_bytes > free.saturating_add(held_bytes).saturating_add(spare) {
                // It cannot fit: the allocation fails with everything intact.
                return Ok(());
            }
            oversized.sort_unstable_by_key(|&(_, spare)| std::cmp::Reverse(spare));
            for (index, _) in oversized {
                if new_bytes <= free.saturating_add(held_bytes) {
                    break;
                }
                let Decision::Reuse {
                    label,
                    request,
                    bytes,
                    held,
                } = decisions[index]
                else {
                    continue;
                };
                new_bytes = new_bytes.saturating_add(bytes);
                held_bytes = held_bytes.saturating_add(held.capacity);
                decisions[index] = Decision::Fresh {
                    label,
                    request,
                    bytes,
                };
                replaced.push(held);
            }
        }
        if new_bytes > free.saturating_add(held_bytes) {
            return Ok(());
        }
        tracing::debug!(
            new = %Bytes(new_bytes),
            free = %Bytes(free),
            replaced = %Bytes(held_bytes),
            "the device cannot hold the new arrays beside those they replace: freeing those first"
        );
        // Released, not yet removed: commit retires them as it would have,
        // and a failed call removes them ([`forget_released`]).
        let device = replaced.iter().filter(|old| old.kind == MemoryKind::Device);
        for slot in device.filter_map(|old| old.slot(s)) {
            if let Err(error) = slot.release(ReleaseReason::Replaced) {
                tracing::warn!(label = %slot.label(), %error, "freeing a replaced array failed");
            }
        }
        Ok(())
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
