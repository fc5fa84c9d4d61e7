//! Where each requested array's buffer in each set comes from, decided
//! before anything is allocated: the held array kept, a held buffer
//! reused, or new memory; and whether the arrays the new memory replaces
//! must be freed first to make room for it.
//!
//! The plan credits the bytes of the arrays the call replaces (`Fe`), so
//! the allocation must be able to obtain them: when the device cannot hold
//! the new arrays beside the arrays they replace, the replaced arrays are
//! freed first (their handles report `Replaced`). Only then; a call that
//! could not fit even so fails with every held array intact.

use super::super::batch::Batch;
use super::snapshot::{Comparison, Held};
use crate::ids::InstanceId;
use crate::{ArrayRequest, ChunkPlan, MemoryKind};

/// The buffers `request` has under `plan`: one per buffer set when it is
/// chunkable, else one shared by every set.
pub(in crate::manager) fn sets_of(plan: &ChunkPlan, request: &ArrayRequest) -> usize {
    if request.is_chunkable() {
        plan.buffer_sets.max(1)
    } else {
        1
    }
}

/// The device bytes `batch` takes under `plan`: each device request's
/// chunked bytes in each of its buffer sets.
pub(in crate::manager) fn device_footprint(batch: &Batch, plan: &ChunkPlan) -> u64 {
    batch
        .requests()
        .filter(|(_, request)| request.memory_kind() == MemoryKind::Device)
        .fold(0u64, |sum, (_, request)| {
            let sets = u64::try_from(sets_of(plan, request)).unwrap_or(u64::MAX);
            sum.saturating_add(plan.chunked_bytes(request).saturating_mul(sets))
        })
}

/// Where one requested array's buffer in one set comes from. Choices
/// follow the order of the taken requests, and each request's sets in order.
#[derive(Clone, Copy, Debug)]
pub(in crate::manager) enum Choice<'b> {
    /// The held array of `bytes`, kept under `label`.
    Keep {
        /// The held array's bytes.
        bytes: u64,
        /// Its label.
        label: &'b str,
    },
    /// The held buffer `held`, reused for `bytes` of `request` under
    /// `label`.
    Reuse {
        /// The label.
        label: &'b str,
        /// The request it is reused for.
        request: &'b ArrayRequest,
        /// The new array's bytes.
        bytes: u64,
        /// The buffer reused.
        held: Replaced<'b>,
    },
    /// New memory of `bytes` for `request` under `label`, replacing what
    /// the (label, set) held (if anything) on commit.
    Fresh {
        /// The label.
        label: &'b str,
        /// The request.
        request: &'b ArrayRequest,
        /// The new array's bytes.
        bytes: u64,
    },
}

impl Choice<'_> {
    /// The label and the bytes of the array placed.
    pub(in crate::manager) fn label_and_bytes(&self) -> (&str, u64) {
        match self {
            Choice::Keep { label, bytes } => (label, *bytes),
            Choice::Reuse { label, bytes, .. } | Choice::Fresh { label, bytes, .. } => {
                (label, *bytes)
            }
        }
    }
}

/// A held buffer the batch replaces with new memory (or drops, with a plan
/// of fewer sets), or reuses: `instance`'s buffer in set `set` of `label`,
/// at `entry` in its list of held arrays.
#[derive(Clone, Copy, Debug)]
pub(in crate::manager) struct Replaced<'b> {
    /// The instance holding it.
    pub(in crate::manager) instance: InstanceId,
    /// Its label.
    pub(in crate::manager) label: &'b str,
    /// Where the instance's list of held arrays has the label.
    pub(in crate::manager) entry: usize,
    /// Its buffer set.
    pub(in crate::manager) set: usize,
    /// Its memory kind.
    pub(in crate::manager) kind: MemoryKind,
    /// The bytes of its buffer: what freeing it gives back.
    pub(in crate::manager) capacity: u64,
}

/// Every placement of a batch, and the held buffers it replaces.
pub(in crate::manager) struct Placements<'b> {
    /// One per requested array and set, in order.
    pub(in crate::manager) choices: Vec<Choice<'b>>,
    /// The held buffers replaced by new memory or dropped.
    pub(in crate::manager) replaced: Vec<Replaced<'b>>,
}

/// The decision to free the replaced device arrays before allocating, and
/// the figures it was made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::manager) struct FreeFirst {
    /// The new device bytes to allocate.
    pub(in crate::manager) new: u64,
    /// The device's free memory.
    pub(in crate::manager) free: u64,
    /// The device bytes of the replaced arrays, freed first.
    pub(in crate::manager) replaced: u64,
}

impl<'b> Placements<'b> {
    /// Chooses where every requested array's buffer in every set of
    /// `batch` comes from under `plan`, given the buffers `held` under the
    /// requested labels: kept when it is what the request asks for, reused
    /// when large enough, else new memory.
    pub(in crate::manager) fn choose(batch: &'b Batch, held: &Held, plan: &ChunkPlan) -> Self {
        let mut choices = Vec::with_capacity(held.buffers.len());
        let mut replaced: Vec<Replaced<'b>> = Vec::new();
        // The held buffers' comparisons are read in request order.
        let mut old = held.buffers.as_slice();
        let mut placed = held.requests.iter();
        for (instance, queued) in &batch.taken {
            for (label, request) in queued.set.iter() {
                let (count, entry) = placed
                    .next()
                    .map_or((0, 0), |placed| (placed.held, placed.entry));
                let (old_sets, rest) = old.split_at(count.min(old.len()));
                old = rest;
                let sets = sets_of(plan, request);
                let bytes = plan.chunked_bytes(request);
                let at = |set, old: &Comparison| Replaced {
                    instance: *instance,
                    label,
                    entry,
                    set,
                    kind: old.kind,
                    capacity: old.capacity,
                };
                for set in 0..sets {
                    let old = old_sets.get(set).filter(|old| old.same_kind);
                    choices.push(match old {
                        Some(old) if old.keeps(request, plan.chunk_length) => Choice::Keep {
                            bytes: old.bytes,
                            label,
                        },
                        Some(old) if old.capacity >= bytes => Choice::Reuse {
                            label,
                            request,
                            bytes,
                            held: at(set, old),
                        },
                        other => {
                            if let Some(old) = other {
                                replaced.push(at(set, old));
                            }
                            Choice::Fresh {
                                label,
                                request,
                                bytes,
                            }
                        }
                    });
                }
                for (set, old) in old_sets.iter().enumerate().skip(sets) {
                    replaced.push(at(set, old));
                }
            }
        }
        Placements { choices, replaced }
    }

    /// The device bytes of the new memory.
    pub(in crate::manager) fn new_device_bytes(&self) -> u64 {
        self.choices
            .iter()
            .filter_map(|choice| match choice {
                Choice::Fresh { request, bytes, .. }
                    if request.memory_kind() == MemoryKind::Device =>
                {
                    Some(*bytes)
                }
                _ => None,
            })
            .fold(0u64, u64::saturating_add)
    }

    /// Decides, with `free` device bytes free, whether the device arrays
    /// the call replaces with new memory are freed before that memory is
    /// allocated: when the device cannot hold both and can hold the new
    /// arrays once they are gone (the plan counted their bytes as free).
    /// Otherwise they are left to be freed on commit, so that a failed
    /// call leaves them intact (`None`).
    ///
    /// A held buffer reused for a smaller array keeps its whole size, which
    /// the plan also counted as free: when the new arrays fit only without
    /// them, such buffers (the most oversized first) are replaced by new
    /// memory of their array's size instead of reused.
    pub(in crate::manager) fn make_room(&mut self, free: u64) -> Option<FreeFirst> {
        let mut new_bytes = self.new_device_bytes();
        if new_bytes == 0 || new_bytes <= free {
            return None;
        }
        let mut held_bytes = device_capacity(&self.replaced);
        if new_bytes > free.saturating_add(held_bytes) {
            let mut oversized: Vec<(usize, u64)> = self
                .choices
                .iter()
                .enumerate()
                .filter_map(|(index, choice)| match choice {
                    Choice::Reuse { bytes, held, .. } if held.kind == MemoryKind::Device => {
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
                return None;
            }
            oversized.sort_unstable_by_key(|&(_, spare)| std::cmp::Reverse(spare));
            for (index, _) in oversized {
                if new_bytes <= free.saturating_add(held_bytes) {
                    break;
                }
                let Some(choice) = self.choices.get_mut(index) else {
                    continue;
                };
                let Choice::Reuse {
                    label,
                    request,
                    bytes,
                    held,
                } = *choice
                else {
                    continue;
                };
                new_bytes = new_bytes.saturating_add(bytes);
                held_bytes = held_bytes.saturating_add(held.capacity);
                *choice = Choice::Fresh {
                    label,
                    request,
                    bytes,
                };
                self.replaced.push(held);
            }
        }
        if new_bytes > free.saturating_add(held_bytes) {
            return None;
        }
        Some(FreeFirst {
            new: new_bytes,
            free,
            replaced: held_bytes,
        })
    }

    /// The replaced device buffers: those freed first when room is made.
    pub(in crate::manager) fn replaced_device(&self) -> impl Iterator<Item = &Replaced<'b>> {
        self.replaced
            .iter()
            .filter(|old| old.kind == MemoryKind::Device)
    }
}

/// The bytes of the device buffers among `replaced`.
fn device_capacity(replaced: &[Replaced<'_>]) -> u64 {
    replaced
        .iter()
        .filter(|old| old.kind == MemoryKind::Device)
        .fold(0u64, |sum, old| sum.saturating_add(old.capacity))
}
