//! Gathering what the decision for one `allocate_queue` call reads
//! ([`Snapshot`]), under the manager's lock: the batch's sizes, the free
//! memory, the buffers its participants hold, its group's caps, its
//! owner's remembered partition and, under physical pressure, the idle
//! owners eviction could release ([`Inner::candidates`]). Everything after
//! works on the snapshot.

use rustc_hash::FxHashSet;

use super::Inner;
use super::batch::{Batch, PlacedRequest};
use super::decide::{Candidate, Comparison, GroupCaps, Held, Snapshot};
use super::report::Attempt;
use super::state::State;
use crate::backend::BackendResult;
use crate::config::LimitMode;
use crate::ids::{InstanceId, OwnerId};
use crate::plan::{BatchSizes, OVERSIZE_WARNING_FACTOR, SetSizes};
use crate::{Bytes, MemError};

impl Inner {
    /// What the decision for `batch` reads: its sizes (an invalid request
    /// fails here), the free memory (measured only when it requests any
    /// bytes), the buffers its participants hold, its group's caps in
    /// active mode, its owner's remembered partition and, when it does not
    /// fit the free memory, the idle owners eviction could release.
    pub(super) fn snapshot<'b>(
        &self,
        s: &mut State,
        batch: &'b Batch,
        attempt: &mut Attempt,
    ) -> Result<Snapshot<'b>, MemError> {
        let sets = batch.taken.iter().map(|(_, queued)| &queued.sizes);
        let sizes = match SetSizes::batch(sets.clone()) {
            Some(sizes) => sizes,
            None => BatchSizes::measure(batch.requests())?,
        };
        attempt.sizes = Some(sizes);
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

    /// The idle owners other than `protected` holding memory a batch with
    /// `pinned_requested` bytes of pinned arrays could count (device
    /// bytes, and pinned bytes up to its pinned arrays), in the order the
    /// manager keeps them, with what evicting each frees at once and holds
    /// in `group`. Owners that are busy, or whose last completion events
    /// have not fired, are not candidates (fired events are destroyed).
    /// Evicts no one.
    fn candidates(
        &self,
        s: &mut State,
        pinned_requested: u64,
        protected: OwnerId,
        group: &str,
    ) -> Vec<Candidate> {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        let mut candidates = Vec::new();
        for owner in owners {
            let held = s.owner_held(owner);
            if owner == protected || held.credit(pinned_requested) == 0 {
                continue;
            }
            if s.owner_idle(owner) {
                let in_group = s.owner_group(owner).is_some_and(|g| **g == *group);
                candidates.push(Candidate {
                    owner,
                    last_used: s.owners.get(&owner).map_or(0, |o| o.last_used),
                    releasable: s.owner_releasable(owner),
                    in_group,
                    group_held: if in_group {
                        held.device.saturating_add(held.pinned)
                    } else {
                        0
                    },
                });
            }
        }
        candidates
    }
}

impl Held {
    /// The buffers `batch`'s participants hold under the labels they
    /// request, in the lists kept in `s`'s scratch.
    fn look_up(s: &mut State, batch: &Batch) -> Held {
        let mut held = Held {
            buffers: std::mem::take(&mut s.scratch.held),
            requests: std::mem::take(&mut s.scratch.requests),
        };
        held.buffers.clear();
        held.requests.clear();
        for (id, queued) in &batch.taken {
            let allocations = s.instances.get(id).map(|i| &i.allocations);
            for (position, (label, request)) in queued.set.iter().enumerate() {
                let entry = allocations.and_then(|a| a.find_near(label, position));
                let sets = entry
                    .and_then(|entry| allocations?.sets_at(entry))
                    .map_or(&[][..], |sets| sets.as_slice());
                for buffer in sets {
                    held.buffers.push(Comparison::compare(buffer, request));
                }
                held.requests.push(PlacedRequest {
                    held: sets.len(),
                    entry: entry.unwrap_or(0),
                });
            }
        }
        held
    }
}

impl GroupCaps {
    /// The caps of `group` as `s` has them, on a device of `total` bytes.
    fn of(s: &State, group: &str, total: u64) -> Self {
        let (caps, held) = s.group_caps_and_use(group, total);
        let proportion = s
            .groups
            .get(group)
            .map(|g| g.members().filter_map(|m| s.shares.proportion(m)).sum())
            .unwrap_or(0.0);
        GroupCaps {
            caps,
            held,
            proportion,
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
