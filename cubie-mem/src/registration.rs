//! Registration: how an instance joins a manager, and the RAII handles that
//! keep it there.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use crate::ArrayResponse;
use crate::manager::Inner;

/// A hook called when an instance's buffers are evicted or invalidated.
pub(crate) type InvalidateHook = Arc<Mutex<Box<dyn FnMut() + Send>>>;
/// A hook called with an instance's response after `allocate_queue`.
pub(crate) type ReadyHook = Arc<Mutex<Box<dyn FnMut(ArrayResponse) + Send>>>;

/// Where host arrays of an instance or owner spill, when set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpillSettings {
    pub(crate) threshold: Option<u64>,
    pub(crate) directory: Option<PathBuf>,
}

/// Identifies an eviction unit within one manager.
#[derive(Clone, Debug)]
pub struct OwnerKey {
    pub(crate) manager: Weak<Inner>,
    pub(crate) owner: u64,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Instance {}
    impl Sealed for super::Owner {}
}

/// Something that names an eviction unit: an [`Instance`] (its owner) or an
/// [`Owner`].
pub trait AsOwner: sealed::Sealed {
    /// The owner this stands for.
    fn owner_key(&self) -> OwnerKey;
}

/// How to register an instance; pass to [`MemoryManager::register`](crate::MemoryManager::register).
///
/// ```
/// use cubie_mem::{MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
/// let solver = mgr
///     .register(Registration::new().proportion(0.25).stream_group("integrators").on_invalidate(|| {}))
///     .unwrap();
/// assert_eq!(mgr.cap(&solver), 1 << 28);
/// ```
#[derive(Default)]
pub struct Registration {
    pub(crate) proportion: Option<f64>,
    pub(crate) stream_group: Option<String>,
    pub(crate) owner: Option<OwnerKey>,
    pub(crate) on_invalidate: Option<InvalidateHook>,
    pub(crate) on_allocation_ready: Option<ReadyHook>,
    pub(crate) spill: SpillSettings,
}

impl Registration {
    /// A registration in the auto pool, the "default" stream group, owning itself.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fixed share of device memory (manual pool); 0 means the auto pool.
    pub fn proportion(mut self, proportion: f64) -> Self {
        self.proportion = Some(proportion);
        self
    }

    /// The stream group to join (default "default").
    pub fn stream_group(mut self, group: impl Into<String>) -> Self {
        self.stream_group = Some(group.into());
        self
    }

    /// Makes `owner` the eviction unit of this registration: it is evicted
    /// together with the owner's other registrations and inherits its spill
    /// settings.
    pub fn owner(mut self, owner: &impl AsOwner) -> Self {
        self.owner = Some(owner.owner_key());
        self
    }

    /// Called (with no manager lock held) when this instance's buffers are
    /// evicted or invalidated. Required before queueing requests.
    pub fn on_invalidate(mut self, hook: impl FnMut() + Send + 'static) -> Self {
        self.on_invalidate = Some(Arc::new(Mutex::new(Box::new(hook))));
        self
    }

    /// Called (with no manager lock held) with this instance's response each
    /// time a batch is allocated for its stream group.
    pub fn on_allocation_ready(mut self, hook: impl FnMut(ArrayResponse) + Send + 'static) -> Self {
        self.on_allocation_ready = Some(Arc::new(Mutex::new(Box::new(hook))));
        self
    }

    /// Host arrays of this instance above `bytes` spill to a file.
    pub fn host_spill_threshold(mut self, bytes: u64) -> Self {
        self.spill.threshold = Some(bytes);
        self
    }

    /// Directory for this instance's spill files (must exist).
    pub fn spill_directory(mut self, directory: impl Into<PathBuf>) -> Self {
        self.spill.directory = Some(directory.into());
        self
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("proportion", &self.proportion)
            .field("stream_group", &self.stream_group)
            .field("owner", &self.owner.as_ref().map(|o| o.owner))
            .field("on_invalidate", &self.on_invalidate.is_some())
            .field("on_allocation_ready", &self.on_allocation_ready.is_some())
            .field("spill", &self.spill)
            .finish()
    }
}

/// A registered instance. Dropping it deregisters it: its share, group
/// membership, queued requests and allocations go.
pub struct Instance {
    pub(crate) id: u64,
    pub(crate) owner: u64,
    pub(crate) manager: Weak<Inner>,
}

impl Instance {
    /// The instance's id (unique within its manager).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl AsOwner for Instance {
    fn owner_key(&self) -> OwnerKey {
        OwnerKey {
            manager: self.manager.clone(),
            owner: self.owner,
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(inner) = self.manager.upgrade() {
            inner.deregister(self.id);
        }
    }
}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instance")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .finish()
    }
}

/// An eviction unit that need not register itself (from
/// [`MemoryManager::new_owner`](crate::MemoryManager::new_owner)).
pub struct Owner {
    pub(crate) id: u64,
    pub(crate) manager: Weak<Inner>,
}

impl Owner {
    /// The owner's id.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl AsOwner for Owner {
    fn owner_key(&self) -> OwnerKey {
        OwnerKey {
            manager: self.manager.clone(),
            owner: self.id,
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(inner) = self.manager.upgrade() {
            inner.release_owner_handle(self.id);
        }
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner").field("id", &self.id).finish()
    }
}
