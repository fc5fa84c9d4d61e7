//! Busy owners: work in flight that protects an owner from eviction.

use std::sync::{Arc, Weak};

use super::Inner;
use crate::ids::OwnerId;
use crate::registration::AsOwner;
use crate::resource::{Event, OwnedStream};
use crate::{MemError, MemoryManager};

/// Work in flight for an owner, from [`MemoryManager::begin_work`]. While it
/// lives the owner is busy and cannot be evicted; finishing (or dropping) it
/// records a completion event on the owner's streams, and the owner becomes
/// idle once those events fire.
#[must_use = "the owner is busy until the Work is finished or dropped"]
pub struct Work {
    manager: Weak<Inner>,
    owner: OwnerId,
    finished: bool,
}

impl Work {
    /// Records the completion events now, reporting any backend failure.
    pub fn finish(mut self) -> Result<(), MemError> {
        self.finished = true;
        match self.manager.upgrade() {
            Some(inner) => inner.finish_work(self.owner),
            None => Ok(()),
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Some(inner) = self.manager.upgrade()
            && let Err(error) = inner.finish_work(self.owner)
        {
            tracing::warn!(owner = %self.owner, %error, "recording work completion failed");
        }
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work").field("owner", &self.owner).finish()
    }
}

impl Inner {
    /// Ends one piece of `owner`'s work: records a completion event on each
    /// stream its registrations' groups have, keeping only the newest event
    /// per stream (the older ones are ordered before it).
    fn finish_work(&self, owner: OwnerId) -> Result<(), MemError> {
        let mut s = self.lock();
        let mut streams: Vec<Arc<OwnedStream>> = Vec::new();
        if let Some(o) = s.owners.get(&owner) {
            for &id in &o.instances {
                let stream = s
                    .groups
                    .group_of_instance(id)
                    .and_then(|g| g.existing_stream());
                if let Some(stream) =
                    stream.filter(|st| !streams.iter().any(|s| Arc::ptr_eq(s, st)))
                {
                    streams.push(Arc::clone(stream));
                }
            }
        }
        let mut result = Ok(());
        let mut recorded = Vec::with_capacity(streams.len());
        for stream in streams {
            match Event::record(&stream) {
                Ok(event) => recorded.push((stream.id(), event)),
                Err(error) => result = Err(error),
            }
        }
        if let Some(o) = s.owners.get_mut(&owner) {
            o.busy = o.busy.saturating_sub(1);
            for (stream, event) in recorded {
                match o.pending.iter_mut().find(|(st, _)| *st == stream) {
                    // The superseded event is dropped, which destroys it.
                    Some(entry) => entry.1 = event,
                    None => o.pending.push((stream, event)),
                }
            }
        }
        s.drop_owner_if_unused(owner);
        result
    }
}

impl MemoryManager {
    /// Marks the owner of `x` busy and stamps it on the usage clock.
    pub fn begin_work(&self, x: &impl AsOwner) -> Result<Work, MemError> {
        self.begin_work_for(x.owner_id())
    }

    /// [`MemoryManager::begin_work`] for `owner`.
    pub(crate) fn begin_work_for(&self, owner: OwnerId) -> Result<Work, MemError> {
        let mut s = self.inner.lock();
        let clock = s.clock.saturating_add(1);
        let o = s
            .owners
            .get_mut(&owner)
            .ok_or_else(|| MemError::UnknownOwner {
                owner: owner.to_string(),
            })?;
        o.busy = o.busy.saturating_add(1);
        o.last_used = clock;
        s.clock = clock;
        Ok(Work {
            manager: Arc::downgrade(&self.inner),
            owner,
            finished: false,
        })
    }
}
