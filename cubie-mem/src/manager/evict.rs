//! Eviction: releasing idle owners' memory under physical pressure.

use super::Inner;
use super::accounting::Freed;
use super::hooks::Hooks;
use super::state::State;
use crate::Bytes;
use crate::array::ReleaseReason;
use crate::ids::OwnerId;

/// The owners chosen to be evicted for a batch, before anyone is: what
/// evicting them would give the batch decides whether they are.
#[derive(Debug, Default)]
pub(super) struct Victims {
    /// The owners, least recently used first.
    pub(super) owners: Vec<OwnerId>,
    /// The bytes the batch could count: device bytes, and pinned bytes up
    /// to its own pinned arrays.
    pub(super) credit: u64,
    /// The bytes (device and pinned) they hold in the batch's stream
    /// group, which its members' caps see again (`H`).
    pub(super) in_group: u64,
}

impl Inner {
    /// Chooses idle owners other than `protected`, least recently used
    /// first (ties in registration order) and whole owners at a time, until
    /// evicting them would free `needed` bytes the batch can obtain: device
    /// bytes, and pinned bytes up to the batch's own pinned arrays
    /// (`pinned_requested`), since pinned arrays count wherever device
    /// arrays do, as in cubie, but a device allocation cannot obtain
    /// page-locked host memory. Owners that are busy, whose last completion
    /// events have not fired, or whose memory the batch could not use are
    /// not candidates. Memory an access holds is freed only when the access
    /// ends, so it does not count. Evicts no one.
    pub(super) fn choose_victims(
        &self,
        s: &mut State,
        needed: u64,
        pinned_requested: u64,
        protected: OwnerId,
        group: &str,
    ) -> Victims {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        let mut candidates: Vec<(u64, OwnerId)> = Vec::new();
        for owner in owners {
            if owner == protected || s.owner_held(owner).credit(pinned_requested) == 0 {
                continue;
            }
            if s.owner_idle(owner, &*self.backend) {
                let last_used = s.owners.get(&owner).map_or(0, |o| o.last_used);
                candidates.push((last_used, owner));
            }
        }
        candidates.sort_unstable();
        let mut victims = Victims::default();
        let mut released = Freed::default();
        for (_, owner) in candidates {
            if released.credit(pinned_requested) >= needed {
                break;
            }
            let held = s.owner_releasable(owner);
            released = released.plus(held);
            if s.owner_group(owner).is_some_and(|g| **g == *group) {
                victims.in_group = victims
                    .in_group
                    .saturating_add(held.device.saturating_add(held.pinned));
            }
            victims.owners.push(owner);
        }
        victims.credit = released.credit(pinned_requested);
        victims
    }

    /// Evicts `victims` for `protected`'s batch (which needed `needed`
    /// bytes): schedules every evicted registration's invalidate hook and
    /// returns the bytes the batch can count (bytes an access still holds
    /// are freed later and not counted).
    pub(super) fn evict(
        &self,
        s: &mut State,
        victims: Victims,
        needed: u64,
        pinned_requested: u64,
        protected: OwnerId,
        hooks: &mut Hooks,
    ) -> u64 {
        let mut released = Freed::default();
        for owner in victims.owners {
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
                needed = %Bytes(needed),
                "evicted an idle owner (no work in flight, least recently used first) to make room \
                 for a batch that does not fit the free memory"
            );
        }
        released.credit(pinned_requested)
    }

    /// Device bytes held by idle owners other than `protected` (the
    /// requester's, never evicted for its own batch): what eviction could
    /// release for a device allocation, for out-of-memory messages.
    pub(super) fn idle_bytes(&self, s: &mut State, protected: OwnerId) -> u64 {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        owners.into_iter().fold(0u64, |idle, owner| {
            if owner != protected && s.owner_idle(owner, &*self.backend) {
                idle.saturating_add(s.owner_held(owner).device)
            } else {
                idle
            }
        })
    }
}
