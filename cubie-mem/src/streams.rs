//! Stream groups: instances that share one CUDA stream, so that their work is
//! ordered together; and the scoped guard that binds a stream as the current
//! one on this thread.
//!
//! A group's stream is an [`OwnedStream`] of the owning layer
//! (`crate::resource`): it is destroyed when the last reference to it goes, when
//! the group empties or after `reinit_streams` once the arrays moved to the
//! new stream. An external stream (bound by `bind_stream` with a stream it did not create, and its
//! CUDA siblings) is never destroyed: its binding ends with its guard, after
//! an event recorded on it, which later work waits for instead of touching
//! the stream.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::MemError;
use crate::backend::{Backend, Stream};
use crate::ids::{InstanceId, OwnerId};
use crate::resource::OwnedStream;

/// The group an instance joins when none is named.
pub(crate) const DEFAULT_STREAM_GROUP: &str = "default";

/// A remembered partition `(chunk_length, chunks)`.
pub(crate) type Partition = (usize, usize);

/// A group's members in the order they joined, with their owners. Joining,
/// leaving and asking whether an owner still has a member cost the same
/// however many members the group has: a member who leaves leaves a gap,
/// and the gaps are closed once they are half the list.
#[derive(Default)]
struct Members {
    /// In the order they joined; `None` where a member left.
    list: Vec<Option<(InstanceId, OwnerId)>>,
    /// Each member's place in `list`.
    places: FxHashMap<InstanceId, usize>,
    /// How many members each owner has.
    per_owner: FxHashMap<OwnerId, usize>,
}

impl Members {
    fn push(&mut self, instance: InstanceId, owner: OwnerId) {
        self.places.insert(instance, self.list.len());
        self.list.push(Some((instance, owner)));
        *self.per_owner.entry(owner).or_default() += 1;
    }

    /// Takes `instance` out; its owner, and whether that owner has no
    /// member left.
    fn remove(&mut self, instance: InstanceId) -> Option<(OwnerId, bool)> {
        let place = self.places.remove(&instance)?;
        let (_, owner) = self.list.get_mut(place)?.take()?;
        let left = self.per_owner.get_mut(&owner).map_or(0, |count| {
            *count = count.saturating_sub(1);
            *count
        });
        if left == 0 {
            self.per_owner.remove(&owner);
        }
        if self.places.len() * 2 < self.list.len() {
            self.close_gaps();
        }
        Some((owner, left == 0))
    }

    fn close_gaps(&mut self) {
        self.list.retain(Option::is_some);
        for (place, (instance, _)) in self.list.iter().flatten().enumerate() {
            self.places.insert(*instance, place);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(InstanceId, OwnerId)> {
        self.list.iter().flatten()
    }

    fn len(&self) -> usize {
        self.places.len()
    }
}

/// One group: its members in the order they joined, with their owners.
#[derive(Default)]
pub(crate) struct Group {
    members: Members,
    stream: Option<Arc<OwnedStream>>,
    /// The last partition each owner was served with in this group.
    pub(crate) partitions: FxHashMap<OwnerId, Partition>,
    /// Whether the over-95%-of-caps warning was given (until usage drops).
    pub(crate) cap_warned: bool,
}

impl Group {
    /// The members, in the order they joined.
    pub(crate) fn members(&self) -> impl Iterator<Item = InstanceId> + '_ {
        self.members.iter().map(|&(id, _)| id)
    }

    /// The members of `owner`, in the order they joined.
    pub(crate) fn members_of(&self, owner: OwnerId) -> impl Iterator<Item = InstanceId> + '_ {
        self.members
            .iter()
            .filter(move |&&(_, o)| o == owner)
            .map(|&(id, _)| id)
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether every member belongs to `owner`.
    pub(crate) fn only_of(&self, owner: OwnerId) -> bool {
        self.members.per_owner.len() == 1 && self.members.per_owner.contains_key(&owner)
    }

    /// The stream, if one was created.
    pub(crate) fn existing_stream(&self) -> Option<&Arc<OwnedStream>> {
        self.stream.as_ref()
    }
}

/// Which instance is in which group, and each group's stream.
#[derive(Default)]
pub(crate) struct StreamGroups {
    groups: FxHashMap<Arc<str>, Group>,
    membership: FxHashMap<InstanceId, Arc<str>>,
}

impl StreamGroups {
    /// Puts `instance` of `owner` into `group` (creating the group; its
    /// stream comes later), taking it out of the group it was in.
    pub(crate) fn add(&mut self, instance: InstanceId, owner: OwnerId, group: &str) {
        self.remove(instance);
        let name: Arc<str> = match self.groups.get_key_value(group) {
            Some((name, _)) => Arc::clone(name),
            None => Arc::from(group),
        };
        self.groups
            .entry(Arc::clone(&name))
            .or_default()
            .members
            .push(instance, owner);
        self.membership.insert(instance, name);
    }

    /// Takes `instance` out of its group. A group left empty goes, with its
    /// stream (destroyed once nothing else holds it).
    pub(crate) fn remove(&mut self, instance: InstanceId) {
        let Some(name) = self.membership.remove(&instance) else {
            return;
        };
        let Some(group) = self.groups.get_mut(&name) else {
            return;
        };
        let Some((owner, owner_left)) = group.members.remove(instance) else {
            return;
        };
        if group.members.len() == 0 {
            self.groups.remove(&name);
        } else if owner_left {
            group.partitions.remove(&owner);
        }
    }

    /// Moves `instance` of `owner` to `group`. With `needs_stream`, returns
    /// the group's stream, created before anything moves so that a failure
    /// changes nothing.
    pub(crate) fn move_to(
        &mut self,
        instance: InstanceId,
        owner: OwnerId,
        group: &str,
        needs_stream: bool,
        backend: &Arc<dyn Backend>,
    ) -> Result<Option<Arc<OwnedStream>>, MemError> {
        let stream = if needs_stream {
            match self.groups.get(group).and_then(|g| g.stream.clone()) {
                Some(stream) => Some(stream),
                None => Some(OwnedStream::create(backend)?),
            }
        } else {
            None
        };
        self.add(instance, owner, group);
        if let (Some(stream), Some(g)) = (&stream, self.groups.get_mut(group)) {
            g.stream.get_or_insert_with(|| Arc::clone(stream));
        }
        Ok(stream)
    }

    /// The name of the group `instance` is in.
    pub(crate) fn group_of(&self, instance: InstanceId) -> Option<&Arc<str>> {
        self.membership.get(&instance)
    }

    /// The group named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Group> {
        self.groups.get(name)
    }

    /// The group named `name`, writable.
    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut Group> {
        self.groups.get_mut(name)
    }

    /// The group `instance` is in.
    pub(crate) fn group_of_instance(&self, instance: InstanceId) -> Option<&Group> {
        self.groups.get(self.membership.get(&instance)?)
    }

    /// The stream of `instance`'s group, created on first use.
    pub(crate) fn stream_of(
        &mut self,
        instance: InstanceId,
        backend: &Arc<dyn Backend>,
    ) -> Result<Arc<OwnedStream>, MemError> {
        let group = self
            .membership
            .get(&instance)
            .and_then(|name| self.groups.get_mut(name))
            .ok_or_else(|| MemError::UnknownInstance {
                instance: instance.to_string(),
            })?;
        if let Some(stream) = &group.stream {
            return Ok(Arc::clone(stream));
        }
        let stream = OwnedStream::create(backend)?;
        group.stream = Some(Arc::clone(&stream));
        Ok(stream)
    }

    /// Gives every group that has a stream a new one, all or nothing;
    /// returns the names of the groups whose stream changed.
    pub(crate) fn reinit(&mut self, backend: &Arc<dyn Backend>) -> Result<Vec<Arc<str>>, MemError> {
        let mut replaced = Vec::new();
        for (name, group) in &self.groups {
            if group.stream.is_some() {
                replaced.push((Arc::clone(name), OwnedStream::create(backend)?));
            }
        }
        let mut names = Vec::with_capacity(replaced.len());
        for (name, stream) in replaced {
            if let Some(group) = self.groups.get_mut(&name) {
                group.stream = Some(stream);
            }
            names.push(name);
        }
        Ok(names)
    }
}

thread_local! {
    /// The streams bound on this thread, innermost last, keyed by the
    /// address of the backend they belong to.
    static CURRENT: RefCell<Vec<(usize, Arc<OwnedStream>)>> = const { RefCell::new(Vec::new()) };
}

/// The identity of a backend for current-stream bindings: the address of its
/// shared allocation. Managers on one shared backend share
/// bindings. A binding's guard holds its stream, and the stream holds the
/// backend, so the address cannot be reused by another backend while any
/// binding to it exists.
fn backend_key(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}

/// The stream bound on this thread for `backend`, if any.
pub(crate) fn current_stream_for(backend: &Arc<dyn Backend>) -> Option<Arc<OwnedStream>> {
    let key = backend_key(backend);
    CURRENT.with(|c| {
        c.borrow()
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| Arc::clone(s))
    })
}

/// Binds a stream as the current one on this thread until dropped: copies
/// and allocations through the same backend made inside the scope are
/// ordered on it. Guards nest; the innermost wins. Not `Send`: it belongs to
/// the thread that made it. The guard keeps its stream alive.
#[must_use = "the stream is current only while the guard lives"]
pub struct CurrentStream {
    key: usize,
    stream: Arc<OwnedStream>,
    _not_send: PhantomData<*const ()>,
}

impl CurrentStream {
    pub(crate) fn bind(stream: Arc<OwnedStream>) -> Self {
        let key = backend_key(stream.backend());
        CURRENT.with(|c| c.borrow_mut().push((key, Arc::clone(&stream))));
        CurrentStream {
            key,
            stream,
            _not_send: PhantomData,
        }
    }

    /// The bound stream, for queuing work of one's own on it.
    pub fn stream(&self) -> &Arc<dyn Stream> {
        self.stream.shared()
    }

    /// The bound stream, shared.
    pub(crate) fn owned(&self) -> &Arc<OwnedStream> {
        &self.stream
    }
}

impl Drop for CurrentStream {
    fn drop(&mut self) {
        let removed = CURRENT.with(|c| {
            let mut stack = c.borrow_mut();
            stack
                .iter()
                .rposition(|(key, stream)| *key == self.key && Arc::ptr_eq(stream, &self.stream))
                .map(|i| stack.remove(i))
        });
        // Dropped outside the thread-local's borrow.
        drop(removed);
        // An external stream's binding ends with its guard.
        self.stream.end();
    }
}

impl std::fmt::Debug for CurrentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentStream")
            .field("stream", &self.stream.id())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;

    fn backend() -> (Arc<dyn Backend>, SimBackend) {
        let sim = SimBackend::new(1 << 20);
        (Arc::new(sim.clone()), sim)
    }

    #[test]
    fn an_emptied_group_goes_with_its_stream() {
        let (backend, sim) = backend();
        let mut groups = StreamGroups::default();
        let (a, b) = (InstanceId::fresh(), InstanceId::fresh());
        groups.add(a, a.as_own_owner(), "g");
        groups.add(b, b.as_own_owner(), "g");
        let stream = groups.stream_of(a, &backend).unwrap();
        assert!(Arc::ptr_eq(
            &stream,
            &groups.stream_of(b, &backend).unwrap()
        ));
        drop(stream);
        assert_eq!(sim.live_streams(), 1);
        groups.remove(a);
        assert_eq!(sim.live_streams(), 1, "b still uses it");
        groups.add(b, b.as_own_owner(), "elsewhere");
        assert!(groups.get("g").is_none());
        assert_eq!(
            sim.live_streams(),
            0,
            "the emptied group's stream is destroyed"
        );
    }

    #[test]
    fn a_held_stream_outlives_its_group() {
        let (backend, sim) = backend();
        let mut groups = StreamGroups::default();
        let a = InstanceId::fresh();
        groups.add(a, a.as_own_owner(), "g");
        let held = groups.stream_of(a, &backend).unwrap();
        groups.remove(a);
        assert_eq!(sim.live_streams(), 1);
        drop(held);
        assert_eq!(sim.live_streams(), 0);
    }

    #[test]
    fn partitions_go_with_the_owners_last_member() {
        let mut groups = StreamGroups::default();
        let (a, b) = (InstanceId::fresh(), InstanceId::fresh());
        let owner = a.as_own_owner();
        groups.add(a, owner, "g");
        groups.add(b, owner, "g");
        let other = InstanceId::fresh();
        groups.add(other, other.as_own_owner(), "g");
        groups
            .get_mut("g")
            .unwrap()
            .partitions
            .insert(owner, (5, 2));
        groups.remove(a);
        assert!(groups.get("g").unwrap().partitions.contains_key(&owner));
        groups.remove(b);
        assert!(!groups.get("g").unwrap().partitions.contains_key(&owner));
        let members: Vec<_> = groups.get("g").unwrap().members().collect();
        assert_eq!(members, [other]);
    }

    #[test]
    fn members_keep_the_order_they_joined_in_as_others_leave_and_rejoin() {
        let mut groups = StreamGroups::default();
        let ids: Vec<InstanceId> = (0..5).map(|_| InstanceId::fresh()).collect();
        for &id in &ids {
            groups.add(id, ids[0].as_own_owner(), "g");
        }
        groups.remove(ids[1]);
        groups.remove(ids[3]);
        // Rejoining puts a member last, as joining anew does.
        groups.add(ids[1], ids[0].as_own_owner(), "g");
        let members: Vec<_> = groups.get("g").unwrap().members().collect();
        assert_eq!(members, [ids[0], ids[2], ids[4], ids[1]]);
        assert_eq!(groups.get("g").unwrap().len(), 4);
        let of_owner: Vec<_> = groups
            .get("g")
            .unwrap()
            .members_of(ids[0].as_own_owner())
            .collect();
        assert_eq!(of_owner, members);
    }

    #[test]
    fn reinit_replaces_only_created_streams() {
        let (backend, sim) = backend();
        let mut groups = StreamGroups::default();
        let (a, b) = (InstanceId::fresh(), InstanceId::fresh());
        groups.add(a, a.as_own_owner(), "with");
        groups.add(b, b.as_own_owner(), "without");
        let old = groups.stream_of(a, &backend).unwrap();
        let replaced = groups.reinit(&backend).unwrap();
        assert_eq!(replaced.len(), 1);
        assert_eq!(&*replaced[0], "with");
        assert_ne!(old.id(), groups.stream_of(a, &backend).unwrap().id());
        drop((old, replaced));
        assert_eq!(sim.live_streams(), 1);
    }
}
