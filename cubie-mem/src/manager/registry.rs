//! Registering instances and owners, and the settings they carry.

use std::sync::Arc;

use super::handles::{Instance, Owner};
use super::shares::warn_share;
use crate::config::check_spill_directory;
use crate::ids::{InstanceId, OwnerId};
use crate::{MemError, MemoryManager, Registration, SpillSettings};

impl MemoryManager {
    /// Registers an instance. On error nothing is registered; a spill
    /// directory ([`Registration::spill_directory`]) that is not an existing
    /// directory is such an error, naming the registration and the path.
    pub fn register(&self, registration: Registration) -> Result<Instance, MemError> {
        if let Some(directory) = &registration.spill.directory {
            let of = match &registration.name {
                Some(name) => format!("'{name}'"),
                None => "an unnamed registration".to_owned(),
            };
            check_spill_directory(format!("Registration::spill_directory of {of}"), directory)?;
        }
        let id = InstanceId::fresh();
        let name = registration.name.as_deref().map(Arc::from);
        let (owner, warning, named_owner) = {
            let mut s = self.inner.lock();
            let (owner, warning) = s.register(id, registration)?;
            (owner, warning, s.named_owner(owner))
        };
        warn_share(warning);
        tracing::debug!(
            instance = %crate::ids::Named { id, name: name.clone() },
            owner = %named_owner,
            "registered"
        );
        Ok(Instance {
            id,
            owner,
            name,
            manager: Arc::downgrade(&self.inner),
        })
    }

    /// A new eviction unit, for registrations that should be evicted (and
    /// served by `allocate_queue`) together without the owner registering
    /// itself. [`Owner::with_spill`] gives it spill settings its
    /// registrations inherit.
    pub fn new_owner(&self) -> Owner {
        let id = OwnerId::fresh();
        self.inner.lock().add_owner(id, SpillSettings::default());
        Owner {
            id,
            manager: Arc::downgrade(&self.inner),
        }
    }

    /// `UnknownInstance` unless `instance` is registered with this manager.
    pub(crate) fn check_registered(&self, instance: &Instance) -> Result<(), MemError> {
        self.inner.lock().instance(instance.id).map(drop)
    }
}

impl super::Inner {
    /// The spill settings that apply to `instance`: its own, else its
    /// owner's, else the manager's (`None` where nothing is set at any
    /// level, or for an instance this manager does not know).
    pub(crate) fn spill_settings(&self, instance: InstanceId) -> SpillSettings {
        let s = self.lock();
        let Some(own) = s.instances.get(&instance) else {
            return SpillSettings::default();
        };
        let owner = s.owners.get(&own.owner).map(|o| &o.spill);
        let config = &self.config;
        SpillSettings {
            threshold: own
                .spill
                .threshold
                .or(owner.and_then(|o| o.threshold))
                .or(config.host_spill_threshold),
            directory: own
                .spill
                .directory
                .clone()
                .or_else(|| owner.and_then(|o| o.directory.clone()))
                .or_else(|| config.spill_directory.clone()),
        }
    }
}
