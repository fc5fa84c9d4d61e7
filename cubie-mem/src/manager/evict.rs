//! Eviction: releasing idle owners' device memory under physical pressure.

use super::Inner;
use super::hooks::Hooks;
use super::state::State;
use crate::Bytes;
use crate::array::ReleaseReason;
use crate::ids::OwnerId;

impl Inner {
    /// Evicts idle owners other than `protected`, least recently used first
    /// (ties in registration order) and whole owners at a time, until
    /// `needed` device bytes are freed. Owners that are busy, whose last
    /// completion events have not fired, or that hold no device memory are
    /// not candidates. Schedules every evicted registration's invalidate
    /// hook and returns the bytes freed now (bytes an access still holds are
    /// freed later and not counted).
    pub(super) fn evict(
        &self,
        s: &mut State,
        needed: u64,
        protected: OwnerId,
        hooks: &mut Hooks,
    ) -> u64 {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        let mut candidates: Vec<(u64, OwnerId)> = Vec::new();
        for owner in owners {
            if owner == protected || s.owner_device_bytes(owner) == 0 {
                continue;
            }
            if s.owner_idle(owner, &*self.backend) {
                let last_used = s.owners.get(&owner).map_or(0, |o| o.last_used);
                candidates.push((last_used, owner));
            }
        }
        candidates.sort_unstable();
        let mut released = 0u64;
        for (_, owner) in candidates {
            if released >= needed {
                break;
            }
            let instances = s
                .owners
                .get(&owner)
                .map(|o| o.instances.clone())
                .unwrap_or_default();
            let mut freed = 0u64;
            for id in instances {
                freed = freed.saturating_add(s.release_all(id, ReleaseReason::Evicted));
                if let Some(hook) = s.instances.get(&id).and_then(|i| i.on_invalidate.clone()) {
                    hooks.invalidate(s.named(id), hook);
                }
            }
            released = released.saturating_add(freed);
            tracing::info!(
                owner = %s.named_owner(owner),
                for_owner = %s.named_owner(protected),
                freed = %Bytes(freed),
                needed = %Bytes(needed),
                "evicted an idle owner (no work in flight, least recently used first) to make room \
                 for a batch that does not fit the free memory"
            );
        }
        released
    }

    /// Device bytes held by idle owners other than `protected` (the
    /// requester's, never evicted for its own batch): what eviction could
    /// release, for out-of-memory messages.
    pub(super) fn idle_bytes(&self, s: &mut State, protected: OwnerId) -> u64 {
        let owners: Vec<OwnerId> = s.owners.keys().copied().collect();
        owners.into_iter().fold(0u64, |idle, owner| {
            if owner != protected && s.owner_idle(owner, &*self.backend) {
                idle.saturating_add(s.owner_device_bytes(owner))
            } else {
                idle
            }
        })
    }
}
