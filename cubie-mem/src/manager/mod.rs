//! The memory manager: registrations, VRAM shares, stream groups, the request
//! queue, allocation and eviction.
//!
//! All state sits behind one mutex. Backend calls that allocate or free are
//! made under it (they are short); hooks never are: operations collect the
//! hooks to call and run them after the lock is released, so a hook may call
//! back into the manager.

mod allocate;

use std::collections::{BTreeMap, HashSet};

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::array::{ReleaseReason, Slot};
use crate::backend::{Backend, EventHandle, MemInfo, StreamHandle};
use crate::config::{LimitMode, ManagerConfig};
use crate::pools::{ShareWarning, Shares};
use crate::registration::{AsOwner, InvalidateHook, OwnerKey, ReadyHook, SpillSettings};
use crate::stats::{InstanceStats, MemoryStats, UsageStats};
use crate::streams::{CurrentStream, DEFAULT_STREAM_GROUP, StreamGroups};
use crate::{ArrayRequest, Instance, MemError, MemoryKind, Owner, Registration, RequestSet};

/// The manager. Cheap to clone (clones share one manager); `Send + Sync`.
///
/// ```
/// use cubie_mem::{ArrayRequest, DType, ManagerConfig, MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::with_config(
///     SimBackend::new(1 << 30),
///     ManagerConfig { allocation_granule_bytes: 0, ..Default::default() },
/// );
/// let solver = mgr.register(Registration::new().on_invalidate(|| {})).unwrap();
/// mgr.queue_request(&solver, [("state", ArrayRequest::new(DType::F32, [4, 2, 100]).total_runs(100))]).unwrap();
/// let mut response = mgr.allocate_queue_for(&solver).unwrap();
/// let state = response.take::<f32>("state").unwrap();
/// assert_eq!(state.shape(), [4, 2, 100]);
/// ```
#[derive(Clone)]
pub struct MemoryManager {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) total: u64,
    pub(crate) config: ManagerConfig,
    state: Mutex<State>,
}

pub(crate) struct InstanceState {
    pub(crate) owner: u64,
    pub(crate) allocations: BTreeMap<String, Arc<Slot>>,
    pub(crate) on_invalidate: Option<InvalidateHook>,
    pub(crate) on_ready: Option<ReadyHook>,
    pub(crate) spill: SpillSettings,
    pub(crate) usage: UsageStats,
}

impl InstanceState {
    /// Device bytes held (pinned memory does not count against VRAM).
    pub(crate) fn device_bytes(&self) -> u64 {
        self.allocations
            .values()
            .filter(|s| s.kind() == MemoryKind::Device)
            .map(|s| s.bytes())
            .sum()
    }
}

pub(crate) struct OwnerState {
    pub(crate) instances: Vec<u64>,
    pub(crate) handles: usize,
    pub(crate) busy: usize,
    pub(crate) last_used: u64,
    pub(crate) pending: Vec<EventHandle>,
    pub(crate) spill: SpillSettings,
}

pub(crate) struct State {
    pub(crate) limit_mode: LimitMode,
    pub(crate) shares: Shares,
    pub(crate) groups: StreamGroups,
    pub(crate) instances: FxHashMap<u64, InstanceState>,
    pub(crate) owners: FxHashMap<u64, OwnerState>,
    /// Queued request sets per group, in the order they were queued.
    pub(crate) queue: FxHashMap<String, Vec<(u64, RequestSet)>>,
    /// Remembered partitions `(chunk_length, chunks)` per instance, for the
    /// group it is in (forgotten when it changes group).
    pub(crate) partitions: FxHashMap<u64, (usize, usize)>,
    pub(crate) clock: u64,
    pub(crate) next_id: u64,
    pub(crate) total_usage: UsageStats,
    pub(crate) group_usage: BTreeMap<String, UsageStats>,
    pub(crate) cap_warned: HashSet<String>,
}

impl State {
    pub(crate) fn instance(&self, id: u64) -> Result<&InstanceState, MemError> {
        self.instances
            .get(&id)
            .ok_or(MemError::UnknownInstance { instance: id })
    }

    pub(crate) fn group_of(&self, id: u64) -> Result<String, MemError> {
        self.groups
            .group_of(id)
            .map(str::to_owned)
            .ok_or(MemError::UnknownInstance { instance: id })
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Updates the counters of `group` (created on first use, without
    /// allocating a key on the hot path).
    pub(crate) fn update_group_usage(&mut self, group: &str, update: impl FnOnce(&mut UsageStats)) {
        match self.group_usage.get_mut(group) {
            Some(usage) => update(usage),
            None => {
                let mut usage = UsageStats::default();
                update(&mut usage);
                self.group_usage.insert(group.to_owned(), usage);
            }
        }
    }

    /// Records a release of `bytes` for `instance` in every scope.
    pub(crate) fn count_free(&mut self, instance: u64, group: &str, bytes: u64, evicted: bool) {
        if let Some(i) = self.instances.get_mut(&instance) {
            i.usage.freed(bytes, evicted);
        }
        self.update_group_usage(group, |u| u.freed(bytes, evicted));
        self.total_usage.freed(bytes, evicted);
    }

    /// Records an allocation of `bytes` for `instance` in every scope.
    pub(crate) fn count_allocation(&mut self, instance: u64, group: &str, bytes: u64) {
        if let Some(i) = self.instances.get_mut(&instance) {
            i.usage.allocated(bytes);
        }
        self.update_group_usage(group, |u| u.allocated(bytes));
        self.total_usage.allocated(bytes);
    }

    /// Releases every allocation of `instance`; returns the device bytes freed.
    pub(crate) fn release_all(&mut self, instance: u64, reason: ReleaseReason) -> u64 {
        let Some(state) = self.instances.get_mut(&instance) else {
            return 0;
        };
        let slots = std::mem::take(&mut state.allocations);
        let group = self
            .groups
            .group_of(instance)
            .unwrap_or(DEFAULT_STREAM_GROUP)
            .to_owned();
        let mut device_bytes = 0;
        for (label, slot) in slots {
            match slot.release(reason) {
                Ok(bytes) => {
                    if slot.kind() == MemoryKind::Device {
                        device_bytes += bytes;
                    }
                }
                Err(error) => tracing::warn!(instance, %label, %error, "freeing failed"),
            }
            self.count_free(
                instance,
                &group,
                slot.bytes(),
                reason == ReleaseReason::Evicted,
            );
        }
        device_bytes
    }

    /// Cap of `instance`: `floor(proportion * total)`.
    pub(crate) fn cap(&self, instance: u64, total: u64) -> u64 {
        let proportion = self.shares.proportion(instance).unwrap_or(0.0);
        (proportion * total as f64).floor() as u64
    }

    /// Whether `owner` is idle: not busy, and its last completion events fired.
    /// Completed events are dropped.
    pub(crate) fn owner_idle(&mut self, owner: u64, backend: &dyn Backend) -> bool {
        let Some(o) = self.owners.get_mut(&owner) else {
            return true;
        };
        if o.busy > 0 {
            return false;
        }
        let mut idle = true;
        o.pending.retain(|&event| match backend.event_complete(event) {
            Ok(true) => {
                if let Err(error) = backend.destroy_event(event) {
                    tracing::debug!(%error, "destroying a completed event failed");
                }
                false
            }
            Ok(false) => {
                idle = false;
                true
            }
            Err(error) => {
                tracing::warn!(%error, "querying a completion event failed; treating it as complete");
                false
            }
        });
        idle
    }
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Every operation leaves the state consistent before it can panic
        // (backend code is the only foreign code run under the lock).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes an instance: share, group, queue, partitions, allocations.
    pub(crate) fn deregister(&self, id: u64) {
        let mut s = self.lock();
        s.release_all(id, ReleaseReason::Deregistered);
        let Some(instance) = s.instances.remove(&id) else {
            return;
        };
        s.shares.remove(id);
        if let Some(group) = s.groups.group_of(id).map(str::to_owned) {
            if let Some(q) = s.queue.get_mut(&group) {
                q.retain(|(i, _)| *i != id);
            }
            s.partitions.remove(&id);
        }
        s.groups.remove(id);
        if let Some(owner) = s.owners.get_mut(&instance.owner) {
            owner.instances.retain(|&i| i != id);
        }
        self.drop_owner_if_unused(&mut s, instance.owner);
    }

    pub(crate) fn release_owner_handle(&self, owner: u64) {
        let mut s = self.lock();
        if let Some(o) = s.owners.get_mut(&owner) {
            o.handles = o.handles.saturating_sub(1);
        }
        self.drop_owner_if_unused(&mut s, owner);
    }

    fn drop_owner_if_unused(&self, s: &mut State, owner: u64) {
        let unused = s
            .owners
            .get(&owner)
            .is_some_and(|o| o.instances.is_empty() && o.handles == 0 && o.busy == 0);
        if unused {
            if let Some(o) = s.owners.remove(&owner) {
                for event in o.pending {
                    if let Err(error) = self.backend.destroy_event(event) {
                        tracing::debug!(%error, "destroying an event failed");
                    }
                }
            }
        }
    }

    /// Records completion events for `owner` on the streams of its groups.
    fn finish_work(&self, owner: u64) -> Result<(), MemError> {
        let mut s = self.lock();
        let groups: Vec<String> = s
            .owners
            .get(&owner)
            .map(|o| {
                o.instances
                    .iter()
                    .filter_map(|&i| s.groups.group_of(i).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut streams: Vec<StreamHandle> = Vec::new();
        let mut result = Ok(());
        for group in groups {
            match s.groups.stream(&group, &*self.backend) {
                Ok(stream) if !streams.contains(&stream) => streams.push(stream),
                Ok(_) => {}
                Err(e) => result = Err(e),
            }
        }
        let mut events = Vec::new();
        for stream in streams {
            match self.backend.record_event(stream) {
                Ok(event) => events.push(event),
                Err(e) => result = Err(e),
            }
        }
        if let Some(o) = s.owners.get_mut(&owner) {
            o.busy = o.busy.saturating_sub(1);
            o.pending.extend(events);
        }
        self.drop_owner_if_unused(&mut s, owner);
        result
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for instance in s.instances.values_mut() {
            for slot in std::mem::take(&mut instance.allocations).into_values() {
                if let Err(error) = slot.release(ReleaseReason::Freed) {
                    tracing::warn!(%error, "freeing at manager shutdown failed");
                }
            }
        }
        for owner in s.owners.values_mut() {
            for event in owner.pending.drain(..) {
                let _ = self.backend.destroy_event(event);
            }
        }
        for stream in s.groups.streams().collect::<Vec<_>>() {
            if let Err(error) = self.backend.destroy_stream(stream) {
                tracing::debug!(%error, "destroying a stream at shutdown failed");
            }
        }
    }
}

/// Work in flight for an owner, from [`MemoryManager::begin_work`]. While it
/// lives the owner is busy and cannot be evicted; finishing (or dropping) it
/// records a completion event on the owner's streams, and the owner becomes
/// idle once those events fire.
#[must_use = "the owner is busy until the Work is finished or dropped"]
pub struct Work {
    manager: Weak<Inner>,
    owner: u64,
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
        if !self.finished {
            if let Some(inner) = self.manager.upgrade() {
                if let Err(error) = inner.finish_work(self.owner) {
                    tracing::warn!(owner = self.owner, %error, "recording work completion failed");
                }
            }
        }
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work").field("owner", &self.owner).finish()
    }
}

fn warn_share(warning: Option<ShareWarning>) {
    if let Some(ShareWarning::AutoPoolBelowMinimum { remaining }) = warning {
        tracing::warn!(
            remaining,
            minimum = crate::pools::MIN_AUTOPOOL_SIZE,
            "the manual pool leaves less than the minimum auto pool; later auto registrations will fail"
        );
    }
}

impl MemoryManager {
    /// A manager on `backend` with the default configuration.
    pub fn new(backend: impl Backend) -> Self {
        Self::with_config(backend, ManagerConfig::default())
    }

    /// A manager on `backend` with `config`.
    pub fn with_config(backend: impl Backend, config: ManagerConfig) -> Self {
        Self::from_shared(Arc::new(backend), config)
    }

    /// A manager on a shared backend.
    pub fn from_shared(backend: Arc<dyn Backend>, config: ManagerConfig) -> Self {
        let total = match backend.mem_info() {
            Ok(info) => info.total,
            Err(error) => {
                tracing::warn!(%error, "cannot read total device memory; caps will be 0");
                0
            }
        };
        MemoryManager {
            inner: Arc::new(Inner {
                backend,
                total,
                state: Mutex::new(State {
                    limit_mode: config.limit_mode,
                    shares: Shares::default(),
                    groups: StreamGroups::default(),
                    instances: FxHashMap::default(),
                    owners: FxHashMap::default(),
                    queue: FxHashMap::default(),
                    partitions: FxHashMap::default(),
                    clock: 0,
                    next_id: 0,
                    total_usage: UsageStats::default(),
                    group_usage: BTreeMap::new(),
                    cap_warned: HashSet::new(),
                }),
                config,
            }),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The configuration.
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }

    fn check_owner_key(&self, key: &OwnerKey) -> Result<u64, MemError> {
        if Weak::ptr_eq(&key.manager, &Arc::downgrade(&self.inner)) {
            Ok(key.owner)
        } else {
            Err(MemError::UnknownOwner { owner: key.owner })
        }
    }

    fn check_instance(&self, instance: &Instance) -> Result<u64, MemError> {
        if Weak::ptr_eq(&instance.manager, &Arc::downgrade(&self.inner)) {
            Ok(instance.id)
        } else {
            Err(MemError::UnknownInstance {
                instance: instance.id,
            })
        }
    }

    /// Registers an instance. On error nothing is registered.
    pub fn register(&self, registration: Registration) -> Result<Instance, MemError> {
        let Registration {
            proportion,
            stream_group,
            owner,
            on_invalidate,
            on_allocation_ready,
            spill,
        } = registration;
        let owner = owner.map(|key| self.check_owner_key(&key)).transpose()?;
        let mut s = self.inner.lock();
        if let Some(owner) = owner {
            if !s.owners.contains_key(&owner) {
                return Err(MemError::UnknownOwner { owner });
            }
        }
        let id = s.next_id();
        let warning = s.shares.add(id, proportion)?;
        warn_share(warning);
        let group = stream_group.unwrap_or_else(|| DEFAULT_STREAM_GROUP.to_owned());
        s.groups.add(id, &group);
        let owner = match owner {
            Some(owner) => owner,
            None => {
                s.owners.insert(
                    id,
                    OwnerState {
                        instances: Vec::new(),
                        handles: 0,
                        busy: 0,
                        last_used: 0,
                        pending: Vec::new(),
                        spill: spill.clone(),
                    },
                );
                id
            }
        };
        if let Some(o) = s.owners.get_mut(&owner) {
            o.instances.push(id);
        }
        s.instances.insert(
            id,
            InstanceState {
                owner,
                allocations: BTreeMap::new(),
                on_invalidate,
                on_ready: on_allocation_ready,
                spill,
                usage: UsageStats::default(),
            },
        );
        Ok(Instance {
            id,
            owner,
            manager: Arc::downgrade(&self.inner),
        })
    }

    /// A new eviction unit, for registrations that should be evicted together
    /// without the owner registering itself.
    pub fn new_owner(&self) -> Owner {
        self.new_owner_with_spill(None, None)
    }

    /// [`MemoryManager::new_owner`] with spill settings its registrations inherit.
    pub fn new_owner_with_spill(
        &self,
        host_spill_threshold: Option<u64>,
        spill_directory: Option<std::path::PathBuf>,
    ) -> Owner {
        let mut s = self.inner.lock();
        let id = s.next_id();
        s.owners.insert(
            id,
            OwnerState {
                instances: Vec::new(),
                handles: 1,
                busy: 0,
                last_used: 0,
                pending: Vec::new(),
                spill: SpillSettings {
                    threshold: host_spill_threshold,
                    directory: spill_directory,
                },
            },
        );
        Owner {
            id,
            manager: Arc::downgrade(&self.inner),
        }
    }

    /// Number of registered instances.
    pub fn instance_count(&self) -> usize {
        self.inner.lock().instances.len()
    }

    /// The instance's share of device memory (0 for an unknown instance).
    pub fn proportion(&self, instance: &Instance) -> f64 {
        self.inner
            .lock()
            .shares
            .proportion(instance.id)
            .unwrap_or(0.0)
    }

    /// The instance's cap: `floor(proportion * total device memory)` bytes.
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
        let id = self.check_instance(instance)?;
        let mut s = self.inner.lock();
        s.instance(id)?;
        warn_share(s.shares.set_manual(id, proportion)?);
        Ok(())
    }

    /// Moves an auto-pool `instance` to the manual pool; a no-op when it is
    /// already manual.
    pub fn set_manual_limit_mode(
        &self,
        instance: &Instance,
        proportion: f64,
    ) -> Result<(), MemError> {
        let id = self.check_instance(instance)?;
        let mut s = self.inner.lock();
        s.instance(id)?;
        if s.shares.is_manual(id) {
            return Ok(());
        }
        warn_share(s.shares.set_manual(id, proportion)?);
        Ok(())
    }

    /// Moves a manual-pool `instance` to the auto pool; a no-op when it is
    /// already auto.
    pub fn set_auto_limit_mode(&self, instance: &Instance) -> Result<(), MemError> {
        let id = self.check_instance(instance)?;
        let mut s = self.inner.lock();
        s.instance(id)?;
        if !s.shares.is_manual(id) {
            return Ok(());
        }
        s.shares.set_auto(id)
    }

    /// Sets the limit mode for every group.
    pub fn set_limit_mode(&self, mode: LimitMode) {
        self.inner.lock().limit_mode = mode;
    }

    /// The limit mode.
    pub fn limit_mode(&self) -> LimitMode {
        self.inner.lock().limit_mode
    }

    /// The instance's stream group.
    pub fn stream_group(&self, instance: &Instance) -> String {
        self.inner
            .lock()
            .groups
            .group_of(instance.id)
            .unwrap_or(DEFAULT_STREAM_GROUP)
            .to_owned()
    }

    /// Moves `instance` to `group`, with its queued requests; its arrays are
    /// ordered on the new group's stream from now on.
    pub fn change_stream_group(&self, instance: &Instance, group: &str) -> Result<(), MemError> {
        let id = self.check_instance(instance)?;
        let mut s = self.inner.lock();
        let old = s.group_of(id)?;
        if old == group {
            return Ok(());
        }
        let stream = if s.instance(id)?.allocations.is_empty() {
            None
        } else {
            Some(s.groups.stream(group, &*self.inner.backend)?)
        };
        s.groups.add(id, group);
        let moved = s.queue.get_mut(&old).and_then(|q| {
            let i = q.iter().position(|(i, _)| *i == id)?;
            Some(q.remove(i))
        });
        if let Some(entry) = moved {
            s.queue.entry(group.to_owned()).or_default().push(entry);
        }
        s.partitions.remove(&id);
        let (bytes, count) = {
            let state = s.instance(id)?;
            if let Some(stream) = stream {
                state
                    .allocations
                    .values()
                    .for_each(|slot| slot.set_stream(stream));
            }
            (state.usage.current_bytes, state.usage.current_count)
        };
        s.update_group_usage(&old, |u| u.transfer_current(bytes, count));
        s.update_group_usage(group, |u| u.receive_current(bytes, count));
        Ok(())
    }

    /// Whether the instance shares its stream with others: false in "default"
    /// and in a group of one.
    pub fn is_grouped(&self, instance: &Instance) -> bool {
        let s = self.inner.lock();
        match s.groups.group_of(instance.id) {
            Some(group) if group != DEFAULT_STREAM_GROUP => s.groups.members(group).len() > 1,
            _ => false,
        }
    }

    /// The stream of the instance's group (created on first use).
    pub fn stream(&self, instance: &Instance) -> Result<StreamHandle, MemError> {
        let id = self.check_instance(instance)?;
        let mut s = self.inner.lock();
        let group = s.group_of(id)?;
        s.groups.stream(&group, &*self.inner.backend)
    }

    /// Binds the instance's group stream as this thread's current stream
    /// until the guard drops (cubie's `current_cupy_stream`).
    pub fn bind_stream(&self, instance: &Instance) -> Result<CurrentStream, MemError> {
        let stream = self.stream(instance)?;
        Ok(CurrentStream::bind(&self.inner.backend, stream))
    }

    /// Blocks until the work queued on the instance's group stream completed.
    pub fn synchronize(&self, instance: &Instance) -> Result<(), MemError> {
        let stream = self.stream(instance)?;
        self.inner.backend.synchronize(stream)
    }

    /// Gives every group a new stream (after a context reset); existing arrays
    /// follow their group onto the new stream.
    pub fn reinit_streams(&self) -> Result<(), MemError> {
        let mut s = self.inner.lock();
        let replaced = s.groups.reinit(&*self.inner.backend)?;
        for (group, old, new) in replaced {
            for &member in s.groups.members(&group) {
                if let Some(state) = s.instances.get(&member) {
                    state
                        .allocations
                        .values()
                        .for_each(|slot| slot.set_stream(new));
                }
            }
            if let Err(error) = self.inner.backend.destroy_stream(old) {
                tracing::debug!(%group, %error, "destroying a replaced stream failed");
            }
        }
        Ok(())
    }

    /// Marks the owner of `x` busy and stamps it on the usage clock.
    pub fn begin_work(&self, x: &impl AsOwner) -> Result<Work, MemError> {
        let owner = self.check_owner_key(&x.owner_key())?;
        let mut s = self.inner.lock();
        s.clock += 1;
        let clock = s.clock;
        let o = s
            .owners
            .get_mut(&owner)
            .ok_or(MemError::UnknownOwner { owner })?;
        o.busy += 1;
        o.last_used = clock;
        Ok(Work {
            manager: Arc::downgrade(&self.inner),
            owner,
            finished: false,
        })
    }

    /// Queues `requests` for `instance` under its stream group, replacing what
    /// it queued before. The instance must have an invalidate hook.
    pub fn queue_request<L: Into<String>>(
        &self,
        instance: &Instance,
        requests: impl IntoIterator<Item = (L, ArrayRequest)>,
    ) -> Result<(), MemError> {
        let id = self.check_instance(instance)?;
        let set: RequestSet = requests.into_iter().collect();
        set.validate()?;
        let mut s = self.inner.lock();
        if s.instance(id)?.on_invalidate.is_none() {
            return Err(MemError::NoInvalidateHook { instance: id });
        }
        let group = s.group_of(id)?;
        let queue = s.queue.entry(group).or_default();
        match queue.iter_mut().find(|(i, _)| *i == id) {
            Some(entry) => entry.1 = set,
            None => queue.push((id, set)),
        }
        Ok(())
    }

    /// Whether `instance` has requests queued.
    pub fn has_queued(&self, instance: &Instance) -> bool {
        let s = self.inner.lock();
        let Some(group) = s.groups.group_of(instance.id) else {
            return false;
        };
        s.queue
            .get(group)
            .is_some_and(|q| q.iter().any(|(i, _)| *i == instance.id))
    }

    /// Allocates the queued requests of the trigger's stream group (see the
    /// crate docs for the rules) and delivers each participant's response to
    /// its `on_allocation_ready` hook. With nothing queued, returns at once.
    pub fn allocate_queue(&self, trigger: &Instance) -> Result<(), MemError> {
        let id = self.check_instance(trigger)?;
        let delivery = self.inner.allocate_queue(id)?;
        delivery.run_hooks();
        Ok(())
    }

    /// [`MemoryManager::allocate_queue`], also returning the trigger's own
    /// response (empty when it queued nothing).
    pub fn allocate_queue_for(&self, trigger: &Instance) -> Result<crate::ArrayResponse, MemError> {
        let id = self.check_instance(trigger)?;
        let mut delivery = self.inner.allocate_queue(id)?;
        let response = delivery.response_for(id);
        delivery.run_hooks();
        Ok(response)
    }

    /// Frees the instance's array `label`; returns whether it existed.
    pub fn free(&self, instance: &Instance, label: &str) -> Result<bool, MemError> {
        let id = self.check_instance(instance)?;
        let mut s = self.inner.lock();
        let group = s.group_of(id)?;
        let slot = s
            .instances
            .get_mut(&id)
            .and_then(|i| i.allocations.remove(label));
        let Some(slot) = slot else {
            return Ok(false);
        };
        slot.release(ReleaseReason::Freed)?;
        s.count_free(id, &group, slot.bytes(), false);
        Ok(true)
    }

    /// Frees every allocation of every instance.
    pub fn free_all(&self) {
        let mut s = self.inner.lock();
        let ids: Vec<u64> = s.instances.keys().copied().collect();
        for id in ids {
            s.release_all(id, ReleaseReason::Freed);
        }
    }

    /// Frees every allocation and calls every invalidate hook (after the
    /// memory is gone, with no lock held).
    pub fn invalidate_all(&self) {
        let hooks: Vec<InvalidateHook> = {
            let mut s = self.inner.lock();
            let ids: Vec<u64> = s.instances.keys().copied().collect();
            for &id in &ids {
                s.release_all(id, ReleaseReason::Freed);
            }
            ids.iter()
                .filter_map(|id| s.instances.get(id).and_then(|i| i.on_invalidate.clone()))
                .collect()
        };
        allocate::call_invalidate_hooks(&hooks);
    }

    /// Free and total device memory.
    pub fn get_memory_info(&self) -> Result<MemInfo, MemError> {
        self.inner.backend.mem_info()
    }

    /// The memory the instance's group may use now: the device's free memory
    /// (passive), or `min(sum of caps - bytes allocated, free)` (active).
    pub fn available_memory(&self, instance: &Instance) -> Result<u64, MemError> {
        let id = self.check_instance(instance)?;
        let free = self.inner.backend.mem_info()?.free;
        let s = self.inner.lock();
        let group = s.group_of(id)?;
        Ok(match s.limit_mode {
            LimitMode::Passive => free,
            LimitMode::Active => free.min(allocate::cap_headroom(&s, &group, self.inner.total, 0)),
        })
    }

    /// Bytes (device and pinned) the instance holds.
    pub fn allocated_bytes(&self, instance: &Instance) -> u64 {
        self.inner
            .lock()
            .instances
            .get(&instance.id)
            .map_or(0, |i| i.allocations.values().map(|s| s.bytes()).sum())
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> MemoryStats {
        let device = self.inner.backend.mem_info().unwrap_or(MemInfo {
            free: 0,
            total: self.inner.total,
        });
        let s = self.inner.lock();
        let mut instances: Vec<InstanceStats> = s
            .instances
            .iter()
            .map(|(&id, i)| InstanceStats {
                instance: id,
                group: s
                    .groups
                    .group_of(id)
                    .unwrap_or(DEFAULT_STREAM_GROUP)
                    .to_owned(),
                proportion: s.shares.proportion(id).unwrap_or(0.0),
                cap: s.cap(id, self.inner.total),
                usage: i.usage,
            })
            .collect();
        instances.sort_by_key(|i| i.instance);
        MemoryStats {
            backend: self.inner.backend.name(),
            device,
            limit_mode: s.limit_mode,
            total: s.total_usage,
            groups: s.group_usage.clone(),
            instances,
        }
    }

    /// The spill settings that apply to `instance`: its own, else its owner's,
    /// else the manager's (`None` where nothing is set at any level).
    pub fn spill_settings(&self, instance: &Instance) -> (Option<u64>, Option<std::path::PathBuf>) {
        let s = self.inner.lock();
        let own = s
            .instances
            .get(&instance.id)
            .map(|i| i.spill.clone())
            .unwrap_or_default();
        let owner = s
            .instances
            .get(&instance.id)
            .and_then(|i| s.owners.get(&i.owner))
            .map(|o| o.spill.clone())
            .unwrap_or_default();
        (
            own.threshold
                .or(owner.threshold)
                .or(self.inner.config.host_spill_threshold),
            own.directory
                .or(owner.directory)
                .or_else(|| self.inner.config.spill_directory.clone()),
        )
    }
}

impl std::fmt::Debug for MemoryManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryManager")
            .field("backend", &self.inner.backend.name())
            .field("total", &self.inner.total)
            .field("instances", &self.instance_count())
            .finish()
    }
}
