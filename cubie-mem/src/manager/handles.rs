//! The RAII handles of a registration ([`Instance`]), of an eviction unit
//! ([`Owner`]) and of work in flight that keeps an owner from eviction
//! ([`Work`]).

use std::fmt;
use std::sync::{Arc, Weak};

use super::Inner;
use super::state::State;
use crate::config::check_spill_directory;
use crate::ids::{InstanceId, OwnerId};
use crate::registration::{AsOwner, sealed};
use crate::resource::{Event, OwnedStream};
use crate::{MemError, SpillSettings};

/// A registered instance. Dropping it deregisters it: its share, group
/// membership, queued requests and allocations go.
///
/// Its id is unique in the process, so a manager given another manager's
/// instance answers with `MemError::UnknownInstance` (or a neutral value
/// where the call cannot fail).
pub struct Instance {
    /// Its id.
    pub(crate) id: InstanceId,
    /// The owner it is evicted and served with.
    pub(crate) owner: OwnerId,
    /// The name it registered with.
    pub(crate) name: Option<Arc<str>>,
    /// The manager, while it lives.
    pub(crate) manager: Weak<Inner>,
}

impl Instance {
    /// The instance's id (unique in the process).
    pub fn id(&self) -> InstanceId {
        self.id
    }

    /// Whether the instance has requests queued.
    pub fn has_queued(&self) -> bool {
        self.manager.upgrade().is_some_and(|inner| {
            inner
                .lock()
                .instances
                .get(&self.id)
                .is_some_and(|i| i.queued.is_some())
        })
    }

    /// Bytes (device and pinned) the instance holds: its buffers' bytes,
    /// as cubie counts them (an array placed in a larger buffer it reused
    /// holds the whole buffer), what counts against its cap and what
    /// evicting it releases. The arrays' own sizes are
    /// [`UsageStats::current_bytes`](crate::stats::UsageStats::current_bytes)
    /// in the manager's [memory report](crate::MemoryManager::memory_report).
    pub fn allocated_bytes(&self) -> u64 {
        self.manager.upgrade().map_or(0, |inner| {
            inner
                .lock()
                .instances
                .get(&self.id)
                .map_or(0, |i| i.held_bytes())
        })
    }

    /// The spill settings that apply to the instance: its own, else its
    /// owner's ([`Owner::with_spill`]), else the manager's (`None` where
    /// nothing is set at any level).
    pub fn spill_settings(&self) -> SpillSettings {
        self.manager
            .upgrade()
            .map_or_else(SpillSettings::default, |inner| {
                inner.spill_settings(self.id)
            })
    }

    /// The owner this instance is evicted and served with.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// The name it registered with, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl sealed::Sealed for Instance {}

impl AsOwner for Instance {
    fn owner_id(&self) -> OwnerId {
        self.owner
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(inner) = self.manager.upgrade() {
            let mut s = inner.lock();
            // A request set it queued and no call served is warned about.
            warn_dropped_unserved(&s, self.id);
            s.deregister(self.id);
        }
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instance")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("name", &self.name)
            .finish()
    }
}

/// An eviction unit that need not register itself (from
/// [`MemoryManager::new_owner`](crate::MemoryManager::new_owner)).
pub struct Owner {
    /// Its id.
    pub(crate) id: OwnerId,
    /// The manager, while it lives.
    pub(crate) manager: Weak<Inner>,
}

impl Owner {
    /// The owner's id (unique in the process).
    pub fn id(&self) -> OwnerId {
        self.id
    }

    /// Gives the owner spill settings its registrations inherit where
    /// they set none of their own. A spill directory that is not an
    /// existing directory is reported through `tracing::warn!` here, and
    /// is an error when an array would spill there.
    pub fn with_spill(self, settings: SpillSettings) -> Self {
        if let Some(directory) = &settings.directory {
            let setting = format!("the spill directory of {}", self.id);
            if let Err(error) = check_spill_directory(setting, directory) {
                tracing::warn!(%error, "an owner's spill directory is unusable");
            }
        }
        if let Some(inner) = self.manager.upgrade()
            && let Some(owner) = inner.lock().owners.get_mut(&self.id)
        {
            owner.spill = settings;
        }
        self
    }
}

impl sealed::Sealed for Owner {}

impl AsOwner for Owner {
    fn owner_id(&self) -> OwnerId {
        self.id
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(inner) = self.manager.upgrade() {
            let mut state = inner.lock();
            if let Some(owner) = state.owners.get_mut(&self.id) {
                owner.handles = owner.handles.saturating_sub(1);
            }
            state.drop_owner_if_unused(self.id);
        }
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner").field("id", &self.id).finish()
    }
}

/// Work in flight for an owner, from
/// [`MemoryManager::begin_work`](crate::MemoryManager::begin_work). While it
/// lives the owner is busy and cannot be evicted; finishing (or dropping) it
/// records a completion event on the owner's streams, and the owner becomes
/// idle once those events fire.
#[must_use = "the owner is busy until the Work is finished or dropped"]
pub struct Work {
    /// The manager, while it lives.
    pub(super) manager: Weak<Inner>,
    /// The owner kept busy.
    pub(super) owner: OwnerId,
    /// Whether its completion events are recorded already.
    pub(super) finished: bool,
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

/// Warns that `id`, being deregistered, leaves a request set no call served.
fn warn_dropped_unserved(s: &State, id: InstanceId) {
    let Some(instance) = s.instances.get(&id) else {
        return;
    };
    let Some(queued) = &instance.queued else {
        return;
    };
    let labels: Vec<&str> = queued.set.labels().collect();
    let labels = labels.join(", ");
    tracing::warn!(
        instance = %s.named(id),
        labels,
        passed_over = queued.passed_over,
        "{} was dropped with [{labels}] queued and never served (passed over by {} allocate_queue \
         call(s) of other owners): call allocate_queue of an instance of its owner {}, or register it \
         with .owner(..) of the instance whose allocate_queue serves its group",
        s.named(id),
        queued.passed_over,
        s.named_owner(instance.owner),
    );
}
