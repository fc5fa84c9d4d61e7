//! The RAII handles of a registration ([`Instance`]) and of an eviction unit
//! ([`Owner`]).

use std::fmt;
use std::sync::{Arc, Weak};

use super::Inner;
use crate::SpillSettings;
use crate::config::check_spill_directory;
use crate::ids::{InstanceId, OwnerId};
use crate::registration::{AsOwner, sealed};

/// A registered instance. Dropping it deregisters it: its share, group
/// membership, queued requests and allocations go.
///
/// Its id is unique in the process, so a manager given another manager's
/// instance answers with `MemError::UnknownInstance` (or a neutral value
/// where the call cannot fail).
pub struct Instance {
    pub(crate) id: InstanceId,
    pub(crate) owner: OwnerId,
    pub(crate) name: Option<Arc<str>>,
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
            super::pending::warn_dropped_unserved(&s, self.id);
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
    pub(crate) id: OwnerId,
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
