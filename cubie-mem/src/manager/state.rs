//! The manager's state and the rules that keep it consistent: registering,
//! deregistering, moving between stream groups, caps, and owners'
//! idleness (releasing and counting are in `accounting`), with the lists
//! serving a batch reuses ([`Scratch`]).
//!
//! Every method here runs under the manager's lock and never calls user code
//! or waits on a handle; failing methods change nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::batch::{PlacedRequest, Placement, Queued, Receiver};
use super::decide::Comparison;
use super::held::{HeldArrays, Labels};
use crate::array::ReleaseReason;
use crate::backend::Backend;
use crate::config::LimitMode;
use crate::ids::{InstanceId, Named, OwnerId};
use crate::pools::{ShareWarning, Shares};
use crate::registration::{InvalidateHook, ReadyHook, SpillSettings};
use crate::resource::Event;
use crate::stats::UsageStats;
use crate::streams::{DEFAULT_STREAM_GROUP, StreamGroups};
use crate::{MemError, MemoryKind, Registration};

/// One registered instance.
pub(crate) struct InstanceState {
    /// Its owner.
    pub(crate) owner: OwnerId,
    /// The name it registered with.
    pub(crate) name: Option<Arc<str>>,
    /// The arrays held, by label.
    pub(crate) allocations: HeldArrays,
    /// The request set waiting for `allocate_queue`.
    pub(crate) queued: Option<Queued>,
    /// Called when its arrays are evicted or invalidated.
    pub(crate) on_invalidate: Option<InvalidateHook>,
    /// Called with its response when a batch is served.
    pub(crate) on_ready: Option<ReadyHook>,
    /// Its own spill settings.
    pub(crate) spill: SpillSettings,
    /// Its usage counters.
    pub(crate) usage: UsageStats,
}

impl InstanceState {
    /// Bytes of device memory held: the buffers' bytes (an array in a
    /// larger buffer it reused holds the whole buffer).
    pub(crate) fn device_bytes(&self) -> u64 {
        self.allocations
            .buffers()
            .filter(|s| s.kind() == MemoryKind::Device)
            .fold(0, |sum, s| sum.saturating_add(s.capacity()))
    }

    /// Bytes held, device and pinned, by the buffers (not the arrays in
    /// them): what counts against the instance's cap, as in cubie.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.allocations
            .buffers()
            .fold(0, |sum, s| sum.saturating_add(s.capacity()))
    }
}

/// One eviction unit.
pub(crate) struct OwnerState {
    /// Its registrations, in the order they were made.
    pub(crate) instances: BTreeSet<InstanceId>,
    /// The name of the registration that is this owner, if named.
    pub(crate) name: Option<Arc<str>>,
    /// Live [`Owner`](crate::Owner) handles.
    pub(crate) handles: usize,
    /// Live [`Work`](crate::Work) handles.
    pub(crate) busy: usize,
    /// When it last began work, on the usage clock.
    pub(crate) last_used: u64,
    /// The newest completion event per stream.
    pub(crate) pending: Vec<(u64, Event)>,
    /// The spill settings its registrations inherit.
    pub(crate) spill: SpillSettings,
}

impl OwnerState {
    /// An owner with no registrations yet and `handles` live handles.
    fn new(name: Option<Arc<str>>, handles: usize, spill: SpillSettings) -> Self {
        OwnerState {
            instances: BTreeSet::new(),
            name,
            handles,
            busy: 0,
            last_used: 0,
            pending: Vec::new(),
            spill,
        }
    }
}

/// Lists that serving a batch fills and empties again, kept between calls
/// (empty, with their room) so that a batch of many instances does not ask
/// the allocator for large ones each time.
#[derive(Default)]
pub(crate) struct Scratch {
    /// The held buffers compared with their requests.
    pub(super) held: Vec<Comparison>,
    /// The placed requests.
    pub(super) requests: Vec<PlacedRequest>,
    /// The placements.
    pub(super) placements: Vec<Placement>,
    /// The receivers of the responses.
    pub(super) receivers: Vec<Receiver>,
    /// The participants.
    pub(super) participants: Vec<InstanceId>,
    /// The queued sets taken.
    pub(super) taken: Vec<(InstanceId, Queued)>,
}

impl Scratch {
    /// Keeps a batch's lists of participants and of the sets it took (both
    /// emptied) for the next call.
    pub(super) fn keep_batch_lists(
        &mut self,
        mut participants: Vec<InstanceId>,
        mut taken: Vec<(InstanceId, Queued)>,
    ) {
        participants.clear();
        taken.clear();
        self.participants = participants;
        self.taken = taken;
    }
}

/// Everything the manager knows, behind its one mutex.
pub(crate) struct State {
    /// Whether the groups' caps bind.
    pub(crate) limit_mode: LimitMode,
    /// The VRAM shares.
    pub(crate) shares: Shares,
    /// The stream groups.
    pub(crate) groups: StreamGroups,
    /// The registered instances.
    pub(crate) instances: FxHashMap<InstanceId, InstanceState>,
    /// The eviction units.
    pub(crate) owners: FxHashMap<OwnerId, OwnerState>,
    /// The usage clock `begin_work` stamps owners with.
    pub(crate) clock: u64,
    /// The order of the next queued request set.
    pub(crate) queue_order: u64,
    /// The manager's usage counters.
    pub(crate) total_usage: UsageStats,
    /// Each stream group's usage counters.
    pub(crate) group_usage: FxHashMap<Arc<str>, UsageStats>,
    /// Lists serving a batch reuses.
    pub(crate) scratch: Scratch,
    /// The labels of held arrays, one string each.
    pub(crate) labels: Labels,
}

impl State {
    /// An empty state in `limit_mode`.
    pub(crate) fn new(limit_mode: LimitMode) -> Self {
        State {
            limit_mode,
            shares: Shares::default(),
            groups: StreamGroups::default(),
            instances: FxHashMap::default(),
            owners: FxHashMap::default(),
            clock: 0,
            queue_order: 0,
            total_usage: UsageStats::default(),
            group_usage: FxHashMap::default(),
            scratch: Scratch::default(),
            labels: Labels::default(),
        }
    }

    /// The instance, or `UnknownInstance` (deregistered, or another manager's).
    pub(crate) fn instance(&self, id: InstanceId) -> Result<&InstanceState, MemError> {
        self.instances
            .get(&id)
            .ok_or_else(|| MemError::UnknownInstance {
                instance: id.to_string(),
            })
    }

    /// The instance, writable.
    pub(crate) fn instance_mut(&mut self, id: InstanceId) -> Result<&mut InstanceState, MemError> {
        self.instances
            .get_mut(&id)
            .ok_or_else(|| MemError::UnknownInstance {
                instance: id.to_string(),
            })
    }

    /// The name of the group `id` is in.
    pub(crate) fn group_of(&self, id: InstanceId) -> Result<Arc<str>, MemError> {
        self.groups
            .group_of(id)
            .cloned()
            .ok_or_else(|| MemError::UnknownInstance {
                instance: id.to_string(),
            })
    }

    /// The stream group of `owner`'s registrations (they share one).
    pub(crate) fn owner_group(&self, owner: OwnerId) -> Option<&Arc<str>> {
        let first = self.owners.get(&owner)?.instances.first()?;
        self.groups.group_of(*first)
    }

    /// `id` with its name, for messages.
    pub(crate) fn named(&self, id: InstanceId) -> Named<InstanceId> {
        Named {
            id,
            name: self.instances.get(&id).and_then(|i| i.name.clone()),
        }
    }

    /// `owner` with its name, for messages.
    pub(crate) fn named_owner(&self, owner: OwnerId) -> Named<OwnerId> {
        Named {
            id: owner,
            name: self.owners.get(&owner).and_then(|o| o.name.clone()),
        }
    }

    /// Registers `registration` as `id`. On error nothing changes.
    pub(crate) fn register(
        &mut self,
        id: InstanceId,
        registration: Registration,
    ) -> Result<(OwnerId, Option<ShareWarning>), MemError> {
        let Registration {
            name,
            proportion,
            stream_group,
            owner,
            on_invalidate,
            on_allocation_ready,
            spill,
        } = registration;
        if let Some(owner) = owner
            && !self.owners.contains_key(&owner)
        {
            return Err(MemError::UnknownOwner {
                owner: owner.to_string(),
            });
        }
        let warning = self.shares.add(id, proportion)?;
        let name: Option<Arc<str>> = name.map(Arc::from);
        let owner = owner.unwrap_or_else(|| {
            let own = id.as_own_owner();
            self.owners
                .insert(own, OwnerState::new(name.clone(), 0, spill.clone()));
            own
        });
        if let Some(o) = self.owners.get_mut(&owner) {
            o.instances.insert(id);
        }
        let group = stream_group.as_deref().unwrap_or(DEFAULT_STREAM_GROUP);
        self.groups.add(id, owner, group);
        self.instances.insert(
            id,
            InstanceState {
                owner,
                name,
                allocations: HeldArrays::default(),
                queued: None,
                on_invalidate,
                on_ready: on_allocation_ready,
                spill,
                usage: UsageStats::default(),
            },
        );
        Ok((owner, warning))
    }

    /// A new owner with one live `Owner` handle.
    pub(crate) fn add_owner(&mut self, id: OwnerId, spill: SpillSettings) {
        self.owners.insert(id, OwnerState::new(None, 1, spill));
    }

    /// Removes `id`: its allocations, share, group membership, queued set.
    pub(crate) fn deregister(&mut self, id: InstanceId) {
        self.release_all(id, ReleaseReason::Deregistered);
        let Some(instance) = self.instances.remove(&id) else {
            return;
        };
        self.shares.remove(id);
        self.groups.remove(id);
        if let Some(owner) = self.owners.get_mut(&instance.owner) {
            owner.instances.remove(&id);
        }
        self.drop_owner_if_unused(instance.owner);
    }

    /// Moves `id` and the other members of its owner in its group to
    /// `group`: their queued sets go with them, the owner's remembered
    /// partition too, and their arrays are ordered on the new group's
    /// stream (created before anything moves, so a failure changes
    /// nothing).
    pub(crate) fn change_group(
        &mut self,
        id: InstanceId,
        group: &str,
        backend: &Arc<dyn Backend>,
    ) -> Result<(), MemError> {
        let old = self.group_of(id)?;
        if &*old == group {
            return Ok(());
        }
        let owner = self.instance(id)?.owner;
        let (members, partition) = match self.groups.get(&old) {
            Some(g) => (
                g.members_of(owner).collect::<Vec<_>>(),
                g.partitions.get(&owner).copied(),
            ),
            None => (vec![id], None),
        };
        let needs_stream = members.iter().any(|member| {
            self.instances
                .get(member)
                .is_some_and(|i| !i.allocations.is_empty())
        });
        // The first move creates the group's stream if need be: the only
        // step that can fail, before anything moved; the others reuse it.
        for member in members {
            let stream = self
                .groups
                .move_to(member, owner, group, needs_stream, backend)?;
            let instance = self.instance(member)?;
            if let Some(stream) = &stream {
                instance
                    .allocations
                    .slots()
                    .for_each(|slot| slot.set_stream(stream));
            }
            let usage = instance.usage;
            let new = self.group_of(member)?;
            self.update_group_usage(&old, |u| u.transfer_current(&usage));
            self.update_group_usage(&new, |u| u.receive_current(&usage));
        }
        if let (Some(partition), Some(g)) = (partition, self.groups.get_mut(group)) {
            g.partitions.insert(owner, partition);
        }
        Ok(())
    }

    /// Forgets `owner` once nothing refers to it: no registrations, no
    /// handles, no work in flight.
    pub(crate) fn drop_owner_if_unused(&mut self, owner: OwnerId) {
        let unused = self
            .owners
            .get(&owner)
            .is_some_and(|o| o.instances.is_empty() && o.handles == 0 && o.busy == 0);
        if !unused {
            return;
        }
        // Its completion events destroy themselves.
        self.owners.remove(&owner);
    }

    /// Cap of `instance`: `floor(proportion * total)`.
    pub(crate) fn cap(&self, instance: InstanceId, total: u64) -> u64 {
        let proportion = self.shares.proportion(instance).unwrap_or(0.0);
        // `as` saturates, so a rounding just above `total` stays in range.
        (proportion * total as f64).floor() as u64
    }

    /// Sum of the caps and of the bytes (device and pinned) held by
    /// `group`'s members.
    pub(crate) fn group_caps_and_use(&self, group: &str, total: u64) -> (u64, u64) {
        let Some(group) = self.groups.get(group) else {
            return (0, 0);
        };
        group.members().fold((0u64, 0u64), |(caps, held), m| {
            let bytes = self.instances.get(&m).map_or(0, InstanceState::held_bytes);
            (
                caps.saturating_add(self.cap(m, total)),
                held.saturating_add(bytes),
            )
        })
    }

    /// `H`: what the caps of `group`'s members still allow, counting
    /// `replaced` bytes (about to be replaced) as available.
    pub(crate) fn cap_headroom(&self, group: &str, total: u64, replaced: u64) -> u64 {
        let (caps, held) = self.group_caps_and_use(group, total);
        caps.saturating_sub(held.saturating_sub(replaced))
    }

    /// Whether `owner` is idle: not busy, and its last completion events
    /// fired. Fired events are destroyed.
    pub(crate) fn owner_idle(&mut self, owner: OwnerId) -> bool {
        let Some(o) = self.owners.get_mut(&owner) else {
            return true;
        };
        if o.busy > 0 {
            return false;
        }
        let mut idle = true;
        // A fired event is dropped, which destroys it.
        o.pending.retain(|(_, event)| match event.is_complete() {
            Ok(true) => false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestSet, SimBackend};

    fn backend() -> Arc<dyn Backend> {
        Arc::new(SimBackend::new(1 << 20))
    }

    #[test]
    fn a_failed_registration_changes_nothing() {
        let mut s = State::new(LimitMode::Passive);
        let a = InstanceId::fresh();
        s.register(a, Registration::new().proportion(0.6)).unwrap();
        let b = InstanceId::fresh();
        let err = s.register(b, Registration::new().proportion(0.6).stream_group("g"));
        assert!(matches!(err, Err(MemError::ManualPoolOverflow { .. })));
        assert_eq!(s.instances.len(), 1);
        assert_eq!(s.owners.len(), 1);
        assert!(s.groups.get("g").is_none());

        let foreign = OwnerId::fresh();
        let err = s.register(b, Registration::new().owner(&ForeignOwner(foreign)));
        assert!(matches!(err, Err(MemError::UnknownOwner { .. })));
        assert_eq!(s.instances.len(), 1);
    }

    struct ForeignOwner(OwnerId);
    impl crate::registration::sealed::Sealed for ForeignOwner {}
    impl crate::AsOwner for ForeignOwner {
        fn owner_id(&self) -> OwnerId {
            self.0
        }
    }

    #[test]
    fn registrations_join_their_owner_and_group() {
        let mut s = State::new(LimitMode::Passive);
        let a = InstanceId::fresh();
        let (owner, _) = s.register(a, Registration::new().name("a")).unwrap();
        assert_eq!(owner, a.as_own_owner());
        let b = InstanceId::fresh();
        s.register(b, Registration::new().owner(&ForeignOwner(owner)))
            .unwrap();
        assert!(s.owners[&owner].instances.iter().eq(&[a, b]));
        assert_eq!(s.named_owner(owner).to_string(), format!("'a' ({owner})"));
        let members: Vec<_> = s
            .groups
            .get(DEFAULT_STREAM_GROUP)
            .unwrap()
            .members_of(owner)
            .collect();
        assert_eq!(members, [a, b]);
    }

    #[test]
    fn deregistering_the_last_registration_forgets_the_owner() {
        let mut s = State::new(LimitMode::Passive);
        let a = InstanceId::fresh();
        let (owner, _) = s.register(a, Registration::new()).unwrap();
        let b = InstanceId::fresh();
        s.register(b, Registration::new().owner(&ForeignOwner(owner)))
            .unwrap();
        s.deregister(a);
        assert!(s.owners.contains_key(&owner), "b still belongs to it");
        s.deregister(b);
        assert!(s.owners.is_empty());
        assert!(s.instances.is_empty());
        assert!(s.groups.get(DEFAULT_STREAM_GROUP).is_none());
        assert_eq!(s.shares.manual_sum(), 0.0);
    }

    #[test]
    fn changing_group_keeps_the_queued_set() {
        let backend = backend();
        let mut s = State::new(LimitMode::Passive);
        let a = InstanceId::fresh();
        s.register(a, Registration::new()).unwrap();
        s.instance_mut(a).unwrap().queued = Some(Queued {
            order: 0,
            set: RequestSet::new(),
            sizes: crate::plan::SetSizes::default(),
            passed_over: 0,
        });
        s.change_group(a, "g", &backend).unwrap();
        assert_eq!(&*s.group_of(a).unwrap(), "g");
        assert!(s.instance(a).unwrap().queued.is_some());
        assert!(
            s.groups.get(DEFAULT_STREAM_GROUP).is_none(),
            "the emptied group went"
        );
    }

    #[test]
    fn caps_sum_without_overflow() {
        let mut s = State::new(LimitMode::Active);
        for _ in 0..3 {
            s.register(
                InstanceId::fresh(),
                Registration::new().proportion(1.0 / 3.0),
            )
            .unwrap();
        }
        let (caps, held) = s.group_caps_and_use(DEFAULT_STREAM_GROUP, u64::MAX);
        assert!(caps >= u64::MAX - (1 << 12), "{caps}: f64 rounding only");
        assert_eq!(held, 0);
        assert_eq!(
            s.cap_headroom(DEFAULT_STREAM_GROUP, u64::MAX, u64::MAX),
            caps
        );
    }
}
