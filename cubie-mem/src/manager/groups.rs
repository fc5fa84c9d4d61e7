//! Stream groups and their streams.

use super::handles::Instance;
use crate::backend::{BackendResult, StreamHandle};
use std::sync::Arc;

use crate::streams::{CurrentStream, DEFAULT_STREAM_GROUP, OwnedStream};
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

    /// Moves `instance` to `group`, with its queued requests; its arrays are
    /// ordered on the new group's stream from now on. On error nothing moves.
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

    /// The stream of the instance's group (created on first use).
    pub fn stream(&self, instance: &Instance) -> Result<StreamHandle, MemError> {
        Ok(self.group_stream(instance)?.handle())
    }

    /// The stream of the instance's group, kept alive by the result.
    pub(crate) fn group_stream(&self, instance: &Instance) -> Result<Arc<OwnedStream>, MemError> {
        self.inner
            .lock()
            .groups
            .stream_of(instance.id, &self.inner.backend)
    }

    /// Binds the instance's group stream as this thread's current stream
    /// until the guard drops (cubie's `current_cupy_stream`). The guard keeps
    /// the stream alive.
    pub fn bind_stream(&self, instance: &Instance) -> Result<CurrentStream, MemError> {
        Ok(CurrentStream::bind(self.group_stream(instance)?))
    }

    /// Blocks until the work queued on the instance's group stream completed.
    pub fn synchronize(&self, instance: &Instance) -> Result<(), MemError> {
        let stream = self.group_stream(instance)?;
        let backend = &*self.inner.backend;
        backend.synchronize(stream.handle()).on(backend)
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
                        .values()
                        .flatten()
                        .for_each(|slot| slot.set_stream(&stream));
                }
            }
        }
        Ok(())
    }
}
