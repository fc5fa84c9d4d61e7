//! Stream groups and their streams.

use super::handles::Instance;
use super::state::State;
use crate::backend::{Backend, BackendError, BackendResult, Stream};
use crate::ids::InstanceId;
use std::sync::Arc;

use crate::resource::OwnedStream;
use crate::streams::{CurrentStream, DEFAULT_STREAM_GROUP};
use crate::{MemError, MemoryManager};

impl MemoryManager {
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
    ///   not create (made with [`Backend::create_stream`] on
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
}

/// What [`MemoryManager::bind_stream`] binds: an instance's group stream
/// (`&Instance`), or a stream of the manager's backend that the manager did
/// not create (`Arc<dyn Stream>`).
pub trait StreamToBind: sealed::Sealed {}

impl StreamToBind for &Instance {}
impl StreamToBind for Arc<dyn Stream> {}

mod sealed {
    use super::*;

    /// Binds the stream a [`StreamToBind`] names.
    pub trait Sealed {
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

impl State {
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
}
