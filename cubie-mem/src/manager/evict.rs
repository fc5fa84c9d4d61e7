//! Eviction: finding the idle owners a batch could evict (for the
//! decision's snapshot), and evicting those it chose.

use super::Inner;
use super::decide::{Candidate, Eviction};
use super::freed::Freed;
use super::hooks::Hooks;
use super::state::State;
use crate::Bytes;
use crate::array::ReleaseReason;
use crate::ids::OwnerId;

impl Inner {
    /// The idle owners other than `protected` holding memory a batch with
    /// `pinned_requested` bytes of pinned arrays could count (device
    /// bytes, and pinned bytes up to its pinned arrays), in the order the
    /// manager keeps them, with what evicting each frees at once and holds
    /// in `group`. Owners that are busy, or whose last completion events
    /// have not fired, are not candidates (fired events are destroyed).
    /// Evicts no one.
    pub(super) fn candidates(
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
    pub(super) fn idle_bytes(&self, s: &mut State, protected: OwnerId) -> u64 {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        owners.into_iter().fold(0u64, |idle, owner| {
            if owner != protected && s.owner_idle(owner) {
                idle.saturating_add(s.owner_held(owner).device)
            } else {
                idle
            }
        })
    }
}
