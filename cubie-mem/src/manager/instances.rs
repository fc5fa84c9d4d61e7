//! The public API of instances and owners: registering them, their VRAM
//! shares, caps and limit modes, their stream groups and streams, and
//! marking an owner busy.

use std::sync::Arc;

use super::Inner;
use super::handles::{Instance, Owner, Work};
use crate::backend::{BackendError, BackendResult, Stream};
use crate::config::{LimitMode, check_spill_directory};
use crate::ids::{InstanceId, OwnerId};
use crate::pools::{MIN_AUTOPOOL_SIZE, Proportion, ShareWarning};
use crate::registration::AsOwner;
use crate::resource::OwnedStream;
use crate::streams::{CurrentStream, DEFAULT_STREAM_GROUP};
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

    /// The instance's share of device memory (0 for an instance this manager
    /// does not know).
    pub fn proportion(&self, instance: &Instance) -> f64 {
        self.inner
            .lock()
            .shares
            .proportion(instance.id)
            .unwrap_or(0.0)
    }

    /// The instance's cap: `floor(proportion * total device memory)` bytes
    /// (0 for an instance this manager does not know).
    pub fn cap(&self, instance: &Instance) -> u64 {
        self.inner.lock().cap(instance.id, self.inner.total)
    }

    /// Sum of the manual pool's proportions.
    pub fn manual_pool_proportion(&self) -> f64 {
        self.inner.lock().shares.manual_sum()
    }

    /// The fraction of memory the auto pool shares.
    pub fn auto_pool_proportion(&self) -> f64 {
        self.inner.lock().shares.auto_sum()
    }

    /// Moves `instance` (from either pool) to the manual pool with `proportion`.
    pub fn set_manual_proportion(
        &self,
        instance: &Instance,
        proportion: f64,
    ) -> Result<(), MemError> {
        self.move_to_manual(instance, proportion, true)
    }

    /// Moves an auto-pool `instance` to the manual pool; a no-op when it is
    /// already manual.
    pub fn set_manual_limit_mode(
        &self,
        instance: &Instance,
        proportion: f64,
    ) -> Result<(), MemError> {
        self.move_to_manual(instance, proportion, false)
    }

    /// Gives `instance` the manual `proportion`; a manual member keeps its
    /// proportion unless `from_either_pool`. On error nothing changes.
    fn move_to_manual(
        &self,
        instance: &Instance,
        proportion: f64,
        from_either_pool: bool,
    ) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        s.instance(instance.id)?;
        if !from_either_pool && s.shares.is_manual(instance.id) {
            return Ok(());
        }
        warn_share(s.shares.set_manual(instance.id, proportion)?);
        Ok(())
    }

    /// Moves a manual-pool `instance` to the auto pool; a no-op when it is
    /// already auto.
    pub fn set_auto_limit_mode(&self, instance: &Instance) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        s.instance(instance.id)?;
        if !s.shares.is_manual(instance.id) {
            return Ok(());
        }
        s.shares.set_auto(instance.id)
    }

    /// Sets the limit mode for every group.
    pub fn set_limit_mode(&self, mode: LimitMode) {
        self.inner.lock().limit_mode = mode;
    }

    /// The memory the instance's group may use now: the device's free memory
    /// (passive), or `min(sum of caps - bytes allocated, free)` (active).
    pub fn available_memory(&self, instance: &Instance) -> Result<u64, MemError> {
        let free = self.inner.backend.mem_info().on(&*self.inner.backend)?.free;
        let s = self.inner.lock();
        let group = s.group_of(instance.id)?;
        Ok(match s.limit_mode {
            LimitMode::Passive => free,
            LimitMode::Active => free.min(s.cap_headroom(&group, self.inner.total, 0)),
        })
    }

    /// The instance's stream group (empty for an instance this manager does
    /// not know).
    pub fn stream_group(&self, instance: &Instance) -> String {
        self.inner
            .lock()
            .groups
            .group_of(instance.id)
            .map_or_else(String::new, |g| g.to_string())
    }

    /// Moves `instance` to `group` together with every other member of its
    /// owner in its group (an owner's work shares one stream), with their
    /// queued requests and the owner's remembered partition; their arrays
    /// are ordered on the new group's stream from now on. On error nothing
    /// moves.
    pub fn change_stream_group(&self, instance: &Instance, group: &str) -> Result<(), MemError> {
        self.inner
            .lock()
            .change_group(instance.id, group, &self.inner.backend)
    }

    /// Whether the instance shares its stream with others: false in "default",
    /// in a group of one, and for an instance this manager does not know.
    pub fn is_grouped(&self, instance: &Instance) -> bool {
        let s = self.inner.lock();
        match s.groups.group_of(instance.id) {
            Some(name) if &**name != DEFAULT_STREAM_GROUP => {
                s.groups.get(name).is_some_and(|g| g.len() > 1)
            }
            _ => false,
        }
    }

    /// The stream of the instance's group (created on first use; cubie's
    /// `get_stream`), for queuing work of one's own on it.
    pub fn stream(&self, instance: &Instance) -> Result<Arc<dyn Stream>, MemError> {
        Ok(Arc::clone(self.group_stream(instance)?.shared()))
    }

    /// The stream of the instance's group, kept alive by the result.
    pub(crate) fn group_stream(&self, instance: &Instance) -> Result<Arc<OwnedStream>, MemError> {
        self.inner
            .lock()
            .groups
            .stream_of(instance.id, &self.inner.backend)
    }

    /// Binds a stream as this thread's current stream until the guard drops
    /// (cubie's `current_cupy_stream`): device allocations and copies
    /// through array handles inside the scope are ordered on it. The guard
    /// keeps the stream alive. `stream` is either
    ///
    /// - `&instance`: its group's stream; or
    /// - an `Arc<dyn Stream>` of this manager's backend that the manager did
    ///   not create (made with [`Backend::create_stream`](crate::backend::Backend::create_stream) on
    ///   [`backend`](Self::backend)). An array allocated inside the scope is
    ///   freed on its group's stream, ordered after this stream's work. The
    ///   manager never queues work on the stream after the guard dropped: the
    ///   guard records an event as it drops, and later frees and copies wait
    ///   for that event instead. Refused, binding nothing, when the stream
    ///   belongs to another backend. (A CUDA stream of another library is
    ///   bound through `cubie_mem::cuda`, feature `cuda`.)
    pub fn bind_stream(&self, stream: impl StreamToBind) -> Result<CurrentStream, MemError> {
        stream.bind_on(self)
    }

    /// Blocks until the work queued on the instance's group stream completed.
    pub fn synchronize(&self, instance: &Instance) -> Result<(), MemError> {
        let stream = self.group_stream(instance)?;
        stream.stream().synchronize().on(&*self.inner.backend)
    }

    /// Gives every group a new stream (after a context reset); existing arrays
    /// follow their group onto the new stream. The old streams are destroyed
    /// once nothing holds them. On error no group changes stream.
    pub fn reinit_streams(&self) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        let replaced = s.groups.reinit(&self.inner.backend)?;
        for name in replaced {
            let Some(group) = s.groups.get(&name) else {
                continue;
            };
            let Some(stream) = group.existing_stream().cloned() else {
                continue;
            };
            for member in group.members() {
                if let Some(state) = s.instances.get(&member) {
                    state
                        .allocations
                        .slots()
                        .for_each(|slot| slot.set_stream(&stream));
                }
            }
        }
        Ok(())
    }

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

impl Inner {
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

/// Logs the warning an accepted share change raised.
fn warn_share(warning: Option<ShareWarning>) {
    if let Some(ShareWarning::AutoPoolBelowMinimum { remaining }) = warning {
        tracing::warn!(
            remaining = %Proportion(remaining),
            minimum = %Proportion(MIN_AUTOPOOL_SIZE),
            "the manual pool leaves {} to the auto pool, below the minimum auto pool of {}; later auto \
             registrations will fail: lower the manual proportions to leave room for them",
            Proportion(remaining),
            Proportion(MIN_AUTOPOOL_SIZE)
        );
    }
}

/// What [`MemoryManager::bind_stream`] binds: an instance's group stream
/// (`&Instance`), or a stream of the manager's backend that the manager did
/// not create (`Arc<dyn Stream>`).
pub trait StreamToBind: sealed::Sealed {}

impl StreamToBind for &Instance {}
impl StreamToBind for Arc<dyn Stream> {}

/// The binding behind [`StreamToBind`], out of callers' reach.
mod sealed {
    use super::*;

    /// Binds the stream a [`StreamToBind`] names.
    pub trait Sealed {
        /// Binds the stream on `mgr` as this thread's current stream.
        fn bind_on(self, mgr: &MemoryManager) -> Result<CurrentStream, MemError>;
    }

    impl Sealed for &Instance {
        fn bind_on(self, mgr: &MemoryManager) -> Result<CurrentStream, MemError> {
            Ok(CurrentStream::bind(mgr.group_stream(self)?))
        }
    }

    impl Sealed for Arc<dyn Stream> {
        fn bind_on(self, mgr: &MemoryManager) -> Result<CurrentStream, MemError> {
            let backend = &mgr.inner.backend;
            // A stream of this backend waits for the stream's event: refused
            // for another backend's stream.
            let probe = self
                .record()
                .and_then(|event| backend.create_stream()?.wait(&*event));
            probe.map_err(|error| {
                MemError::backend(
                    backend.name(),
                    BackendError::Unsupported {
                        operation: "bind an external stream",
                        reason: format!(
                            "stream {} is not a stream of this backend ({error}); bind a \
                             stream created with Backend::create_stream on \
                             MemoryManager::backend",
                            self.id()
                        ),
                    },
                )
            })?;
            Ok(CurrentStream::bind(OwnedStream::external(
                backend, self, None,
            )))
        }
    }
}
