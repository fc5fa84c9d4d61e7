//! Counting allocations, reuses and releases in every scope's usage
//! statistics (the instance's, its group's, the manager's), and releasing
//! arrays with what they free.
//!
//! Every method here runs under the manager's lock and never calls user
//! code or waits on a handle.

use std::sync::Arc;

use super::held::Freed;
use super::state::State;
use crate::MemError;
use crate::array::ReleaseReason;
use crate::array::slot::{Release, Slot};
use crate::ids::{InstanceId, OwnerId};
use crate::stats::UsageStats;

impl State {
    /// Updates the counters of `group` (created on first use).
    pub(crate) fn update_group_usage(
        &mut self,
        group: &Arc<str>,
        update: impl FnOnce(&mut UsageStats),
    ) {
        match self.group_usage.get_mut(group) {
            Some(usage) => update(usage),
            None => {
                let mut usage = UsageStats::default();
                update(&mut usage);
                self.group_usage.insert(Arc::clone(group), usage);
            }
        }
    }

    /// Runs `f` with the counters of `group` taken out, so that a call
    /// counting many arrays looks the group up once.
    pub(crate) fn with_group_usage<R>(
        &mut self,
        group: &Arc<str>,
        f: impl FnOnce(&mut Self, &mut UsageStats) -> R,
    ) -> R {
        let mut usage = self.group_usage.get(group).copied().unwrap_or_default();
        let result = f(self, &mut usage);
        self.update_group_usage(group, |u| *u = usage);
        result
    }

    /// Records the release of `slot` by `instance` in every scope (`group`:
    /// the counters of its group).
    pub(crate) fn count_free(
        &mut self,
        instance: InstanceId,
        group: &mut UsageStats,
        slot: &Slot,
        evicted: bool,
    ) {
        let (bytes, held, kind) = (slot.bytes(), slot.capacity(), slot.kind());
        if let Some(i) = self.instances.get_mut(&instance) {
            i.usage.freed(bytes, held, kind, evicted);
        }
        group.freed(bytes, held, kind, evicted);
        self.total_usage.freed(bytes, held, kind, evicted);
    }

    /// Records an allocation of `slot` by `instance` in every scope.
    pub(crate) fn count_allocation(
        &mut self,
        instance: InstanceId,
        group: &mut UsageStats,
        slot: &Slot,
    ) {
        let (bytes, held, kind) = (slot.bytes(), slot.capacity(), slot.kind());
        if let Some(i) = self.instances.get_mut(&instance) {
            i.usage.allocated(bytes, held, kind);
        }
        group.allocated(bytes, held, kind);
        self.total_usage.allocated(bytes, held, kind);
    }

    /// Records that `instance` reused a buffer it held, whose array had
    /// `before` bytes, for the array `slot`.
    pub(crate) fn count_reuse(
        &mut self,
        instance: InstanceId,
        group: &mut UsageStats,
        before: u64,
        slot: &Slot,
    ) {
        let (after, held, kind) = (slot.bytes(), slot.capacity(), slot.kind());
        if let Some(i) = self.instances.get_mut(&instance) {
            i.usage.reused(before, after, held, kind);
        }
        group.reused(before, after, held, kind);
        self.total_usage.reused(before, after, held, kind);
    }

    /// Releases `slot`, held by `instance` until now, and counts it. Returns
    /// the bytes freed now, device or pinned: its buffer's bytes (none when
    /// an access defers the free).
    pub(crate) fn release_slot(
        &mut self,
        instance: InstanceId,
        group: &mut UsageStats,
        slot: &Slot,
        reason: ReleaseReason,
    ) -> Result<Freed, MemError> {
        self.count_free(instance, group, slot, reason == ReleaseReason::Evicted);
        let freed_now = matches!(slot.release(reason)?, Release::Freed);
        Ok(Freed::of(
            if freed_now { slot.capacity() } else { 0 },
            slot.kind(),
        ))
    }

    /// Releases `slots`, arrays `instance` held until now, and counts them
    /// in its group; every one is released even when one fails, and the
    /// first failure is returned.
    pub(crate) fn release_slots<'a>(
        &mut self,
        instance: InstanceId,
        slots: impl IntoIterator<Item = &'a Arc<Slot>>,
        reason: ReleaseReason,
    ) -> Result<(), MemError> {
        let group = self.group_of(instance)?;
        self.with_group_usage(&group, |s, usage| {
            let mut first_error = None;
            for slot in slots {
                if let Err(error) = s.release_slot(instance, usage, slot, reason) {
                    first_error.get_or_insert(error);
                }
            }
            first_error.map_or(Ok(()), Err)
        })
    }

    /// Releases every allocation of `instance`; returns the bytes freed
    /// now, device and pinned (as eviction counts them, as in cubie).
    /// Backend failures are logged: the arrays are gone either way.
    pub(crate) fn release_all(&mut self, instance: InstanceId, reason: ReleaseReason) -> Freed {
        let Some(state) = self.instances.get_mut(&instance) else {
            return Freed::default();
        };
        let slots = std::mem::take(&mut state.allocations);
        let Ok(group) = self.group_of(instance) else {
            return Freed::default();
        };
        self.with_group_usage(&group, |s, usage| {
            let mut freed = Freed::default();
            for slot in slots.slots() {
                match s.release_slot(instance, usage, slot, reason) {
                    Ok(bytes) => freed = freed.plus(bytes),
                    Err(error) => tracing::warn!(
                        instance = %s.named(instance),
                        label = %slot.label(),
                        %error,
                        "freeing failed"
                    ),
                }
            }
            freed
        })
    }

    /// Bytes held by `owner`'s registrations (their buffers' bytes): what
    /// evicting it releases.
    pub(crate) fn owner_held(&self, owner: OwnerId) -> Freed {
        self.owners.get(&owner).map_or(Freed::default(), |o| {
            o.instances
                .iter()
                .filter_map(|i| self.instances.get(i))
                .fold(Freed::default(), |sum, i| {
                    sum.plus(Freed {
                        device: i.device_bytes(),
                        pinned: i.held_bytes().saturating_sub(i.device_bytes()),
                    })
                })
        })
    }

    /// The bytes evicting `owner` would free at once: its buffers' bytes,
    /// but for memory an access still holds (freed when the access ends).
    pub(crate) fn owner_releasable(&self, owner: OwnerId) -> Freed {
        self.owners.get(&owner).map_or(Freed::default(), |o| {
            o.instances
                .iter()
                .filter_map(|i| self.instances.get(i))
                .flat_map(|i| i.allocations.buffers())
                .filter(|buffer| buffer.slot().frees_on_release())
                .fold(Freed::default(), |sum, buffer| {
                    sum.plus(Freed::of(buffer.capacity(), buffer.kind()))
                })
        })
    }
}
