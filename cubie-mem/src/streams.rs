//! Stream groups: instances that share one CUDA stream, so that their work is
//! ordered together; and the scoped guard that binds a stream as the current
//! one on this thread.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::MemError;
use crate::backend::{Backend, StreamHandle};

/// The group an instance joins when none is named.
pub const DEFAULT_STREAM_GROUP: &str = "default";

#[derive(Default)]
struct Group {
    members: Vec<u64>,
    stream: Option<StreamHandle>,
}

/// Which instance is in which group, and each group's stream.
#[derive(Default)]
pub(crate) struct StreamGroups {
    groups: BTreeMap<String, Group>,
    membership: FxHashMap<u64, String>,
}

impl StreamGroups {
    /// Puts `instance` into `group` (creating the group; its stream comes later).
    pub(crate) fn add(&mut self, instance: u64, group: &str) {
        self.remove(instance);
        self.groups
            .entry(group.to_owned())
            .or_default()
            .members
            .push(instance);
        self.membership.insert(instance, group.to_owned());
    }

    /// Takes `instance` out of its group.
    pub(crate) fn remove(&mut self, instance: u64) {
        if let Some(name) = self.membership.remove(&instance) {
            if let Some(group) = self.groups.get_mut(&name) {
                group.members.retain(|&m| m != instance);
            }
        }
    }

    /// The group `instance` is in.
    pub(crate) fn group_of(&self, instance: u64) -> Option<&str> {
        self.membership.get(&instance).map(String::as_str)
    }

    /// The members of `group`, in the order they joined.
    pub(crate) fn members(&self, group: &str) -> &[u64] {
        self.groups.get(group).map_or(&[], |g| &g.members)
    }

    /// The stream of `group`, created on first use.
    pub(crate) fn stream(
        &mut self,
        group: &str,
        backend: &dyn Backend,
    ) -> Result<StreamHandle, MemError> {
        if let Some(stream) = self.groups.get(group).and_then(|g| g.stream) {
            return Ok(stream);
        }
        let stream = backend.create_stream()?;
        self.groups.entry(group.to_owned()).or_default().stream = Some(stream);
        Ok(stream)
    }

    /// Gives every group that had a stream a new one; returns `(group, old, new)`.
    pub(crate) fn reinit(
        &mut self,
        backend: &dyn Backend,
    ) -> Result<Vec<(String, StreamHandle, StreamHandle)>, MemError> {
        let mut replaced = Vec::new();
        for (name, group) in &mut self.groups {
            if let Some(old) = group.stream {
                let new = backend.create_stream()?;
                group.stream = Some(new);
                replaced.push((name.clone(), old, new));
            }
        }
        Ok(replaced)
    }

    /// Every stream created, for teardown.
    pub(crate) fn streams(&self) -> impl Iterator<Item = StreamHandle> + '_ {
        self.groups.values().filter_map(|g| g.stream)
    }
}

thread_local! {
    static CURRENT: RefCell<Vec<(usize, StreamHandle)>> = const { RefCell::new(Vec::new()) };
}

fn backend_key(backend: &Arc<dyn Backend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
}

/// The stream bound on this thread for `backend`, if any.
pub(crate) fn current_stream_for(backend: &Arc<dyn Backend>) -> Option<StreamHandle> {
    let key = backend_key(backend);
    CURRENT.with(|c| {
        c.borrow()
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| *s)
    })
}

/// Binds a stream as the current one on this thread until dropped: copies
/// through array handles of the same backend made inside the scope are ordered
/// on it. Guards nest; the innermost wins. Not `Send`: it belongs to the
/// thread that made it.
#[must_use = "the stream is current only while the guard lives"]
pub struct CurrentStream {
    key: usize,
    stream: StreamHandle,
    _not_send: PhantomData<*const ()>,
}

impl CurrentStream {
    pub(crate) fn bind(backend: &Arc<dyn Backend>, stream: StreamHandle) -> Self {
        let key = backend_key(backend);
        CURRENT.with(|c| c.borrow_mut().push((key, stream)));
        CurrentStream {
            key,
            stream,
            _not_send: PhantomData,
        }
    }

    /// The bound stream.
    pub fn stream(&self) -> StreamHandle {
        self.stream
    }
}

impl Drop for CurrentStream {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut stack = c.borrow_mut();
            if let Some(i) = stack.iter().rposition(|e| *e == (self.key, self.stream)) {
                stack.remove(i);
            }
        });
    }
}

impl std::fmt::Debug for CurrentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurrentStream")
            .field("stream", &self.stream)
            .finish()
    }
}
