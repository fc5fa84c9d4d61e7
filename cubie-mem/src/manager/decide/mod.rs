//! The manager's decision for one `allocate_queue` call, made as the
//! planner is: from a [`Snapshot`] of the figures it reads, by pure
//! functions that call no backend and change no state. [`decide`] says
//! who is evicted, the plan, each placement (kept, reused or new memory)
//! and whether the arrays new memory replaces are freed first; the
//! caller (`serve`, `apply`, `commit`) applies it.
//!
//! Eviction belongs to a batch that will succeed: planned as it would be
//! after it, the batch must fit (granule, caps and reserve included), else
//! no one is evicted and the decision is the error the batch gets without
//! eviction. An eviction changes the figures only the device can tell
//! again (the free memory, and what an access still held): the caller
//! then finishes the decision with [`finish`] from what the eviction
//! released, and chooses where to make room with the free memory measured
//! again ([`Placements::make_room`]).

#[cfg(test)]
mod edge_tests;
mod placement;
#[cfg(test)]
mod properties;
mod snapshot;
#[cfg(test)]
mod tests;
mod victims;

pub(in crate::manager) use placement::{Choice, Placements, Replaced, device_footprint, sets_of};
pub(in crate::manager) use snapshot::{Candidate, Comparison, GroupCaps, Held, Snapshot};
pub(in crate::manager) use victims::{Victims, choose_victims};

pub(in crate::manager) use placement::FreeFirst;

use crate::plan::{BatchSizes, Budget, name_unchunkable, plan_chunks, plan_partition};
use crate::{Bytes, ChunkPlan, MemError};

/// What one call does, decided before anything is done.
pub(in crate::manager) struct Decision<'b> {
    /// The budget before eviction.
    pub(in crate::manager) before: Budget,
    /// The owners to evict first, when the batch fits only once they are.
    pub(in crate::manager) eviction: Option<Eviction>,
    /// The budget the plan is made against: the error's report reads it.
    pub(in crate::manager) budget: Budget,
    /// The plan and the placements, or the error the call returns. An
    /// error with an eviction is the rare batch whose caps, seen again once
    /// the victims are gone, allow less than the check counted: the owners
    /// are evicted and the call fails, as the manager has always done.
    pub(in crate::manager) planned: Result<Planned<'b>, MemError>,
}

/// The owners a batch evicts, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::manager) struct Eviction {
    /// The owners, least recently used first, with what they free.
    pub(in crate::manager) victims: Victims,
    /// The bytes the batch lacked.
    pub(in crate::manager) needed: u64,
    /// The bytes of the batch's pinned arrays, up to which released pinned
    /// memory counts.
    pub(in crate::manager) pinned_requested: u64,
}

/// A batch planned, its buffers placed.
pub(in crate::manager) struct Planned<'b> {
    /// The chunk plan.
    pub(in crate::manager) plan: ChunkPlan,
    /// Where each buffer comes from.
    pub(in crate::manager) placements: Placements<'b>,
    /// Whether the replaced device arrays are freed before allocating.
    pub(in crate::manager) room: Room,
}

/// Whether the replaced device arrays are freed before the new memory is
/// allocated ([`Placements::make_room`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::manager) enum Room {
    /// Decided with the free memory of the snapshot: freed first with
    /// these figures, or not (`None`).
    Decided(Option<FreeFirst>),
    /// The free memory went stale (an eviction released memory, or it was
    /// not measured): decided with the free memory measured again.
    Remeasure,
}

/// Decides the call `snapshot` describes: whether idle owners are evicted
/// (the least recently used that cover the shortfall, only when the batch
/// then fits), the plan, and each placement.
pub(in crate::manager) fn decide<'b>(snapshot: &Snapshot<'b>) -> Decision<'b> {
    let before = snapshot.budget();
    let Some(needed) = before.shortfall(snapshot.requested()) else {
        return finish(snapshot, before, None, 0);
    };
    let pinned_requested = snapshot.pinned_requested();
    let victims = choose_victims(&snapshot.candidates, needed, pinned_requested);
    if victims.owners.is_empty() {
        return finish(snapshot, before, None, 0);
    }
    let after = Budget {
        effective_free: before.effective_free.saturating_add(victims.credit),
        cap_headroom: before
            .cap_headroom
            .map(|h| h.saturating_add(victims.in_group)),
        ..before
    };
    // Its error says what stays in the way once eviction is counted; its
    // report, what holds the memory now.
    let planned = match plan_batch(snapshot, &after, 0) {
        Ok(plan) => plan,
        Err(error) => {
            return Decision {
                before,
                eviction: None,
                budget: before,
                planned: Err(error),
            };
        }
    };
    // A remembered partition is not planned: it may still not fit, and
    // then fails to allocate with no one evicted.
    if device_footprint(snapshot.batch, &planned) > after.effective_free {
        return finish(snapshot, before, None, 0);
    }
    let credit = victims.credit;
    let eviction = Eviction {
        victims,
        needed,
        pinned_requested,
    };
    finish(snapshot, before, Some(eviction), credit)
}

/// The decision once `eviction` (if any) released `released` bytes the
/// batch can count: the budget grown by them (the caps' headroom by what
/// the evicted owners held in the group), the plan and the placements.
pub(in crate::manager) fn finish<'b>(
    snapshot: &Snapshot<'b>,
    before: Budget,
    eviction: Option<Eviction>,
    released: u64,
) -> Decision<'b> {
    let mut budget = before;
    let evicted = eviction.as_ref().map_or(0, |e| e.victims.group_held);
    if eviction.is_some() {
        budget.effective_free = budget.effective_free.saturating_add(released);
        if budget.cap_headroom.is_some() {
            budget.cap_headroom = snapshot
                .caps
                .map(|caps| caps.headroom(snapshot.held.replaced_cap_bytes(), evicted));
        }
    }
    let free_current = snapshot.free.filter(|_| released == 0);
    let planned = plan_batch(snapshot, &budget, evicted).map(|plan| {
        let mut placements = Placements::choose(snapshot.batch, &snapshot.held, &plan);
        let room = match free_current {
            Some(free) => Room::Decided(placements.make_room(free)),
            None => Room::Remeasure,
        };
        Planned {
            plan,
            placements,
            room,
        }
    });
    Decision {
        before,
        eviction,
        budget,
        planned,
    }
}

/// The plan of the snapshot's batch under `budget`: the remembered
/// partition a notary's arrays are laid out for comes first, as in cubie
/// (after the rule that an empty batch is one chunk); otherwise the batch
/// is planned. An error names the unchunkable requests and, where the caps
/// bind, the caps (`evicted`: the bytes the group's evicted owners held).
fn plan_batch(snapshot: &Snapshot, budget: &Budget, evicted: u64) -> Result<ChunkPlan, MemError> {
    let sizes = &snapshot.sizes;
    let reused = snapshot
        .remembered
        .filter(|_| sizes.total_bytes() > 0)
        .and_then(|(length, chunks)| plan_partition(sizes, budget, length, chunks));
    match reused {
        Some(plan) => Ok(plan),
        None => plan_chunks(sizes, budget)
            .map_err(|error| name_unchunkable(error, snapshot.batch.requests(), sizes.total_runs))
            .map_err(|error| {
                explain_caps(
                    error,
                    &snapshot.batch.group,
                    snapshot.caps,
                    evicted,
                    sizes,
                    budget,
                )
            }),
    }
}

/// When active-mode caps, not the device, kept the batch from fitting,
/// says so with the caps, the proportion and the fix.
fn explain_caps(
    error: MemError,
    group: &str,
    caps: Option<GroupCaps>,
    evicted: u64,
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
    let Some(caps) = caps.filter(|_| caps_bind && planner_error) else {
        return error;
    };
    let per_run = sizes
        .chunkable_bytes
        .div_ceil(u64::try_from(sizes.total_runs).unwrap_or(u64::MAX).max(1))
        .saturating_mul(u64::try_from(sizes.depth).unwrap_or(u64::MAX));
    MemError::CapLimited {
        group: group.to_owned(),
        proportion: caps.proportion,
        caps: Bytes(caps.caps),
        held: Bytes(caps.held_after(evicted)),
        allowed: Bytes(budget.allocatable().map_or(0, |(alloc, _)| alloc)),
        needed: Bytes(sizes.unchunkable_bytes.saturating_add(per_run)),
        free: Bytes(budget.effective_free),
        report: None,
    }
}
