//! Registration: how an instance asks to join a manager.
//!
//! The handles a registration returns ([`Instance`](crate::Instance),
//! [`Owner`](crate::Owner)) live with the manager; this module holds only the
//! builder and the hook types, so it depends on no manager internals.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::ArrayResponse;
use crate::ids::OwnerId;

/// A hook called when an instance's buffers are evicted or invalidated.
pub(crate) type InvalidateHook = Arc<Hook<dyn FnMut() + Send>>;
/// A hook called with an instance's response after `allocate_queue`.
pub(crate) type ReadyHook = Arc<Hook<dyn FnMut(ArrayResponse) + Send>>;

/// A user hook: called under its own lock, one call at a time, and never
/// re-entered by the thread already running it (a hook that triggers itself
/// would otherwise wait for itself forever).
pub(crate) struct Hook<F: ?Sized> {
    /// The token of the thread running the hook now; 0 when idle.
    running_on: AtomicU64,
    call: Mutex<Box<F>>,
}

thread_local! {
    /// This thread's token for [`Hook`]: unique, never 0.
    static THREAD_TOKEN: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed).max(1)
    };
}

/// Clears [`Hook::running_on`] when the call ends, also on unwind.
struct Running<'a>(&'a AtomicU64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

impl<F: ?Sized> Hook<F> {
    pub(crate) fn new(call: Box<F>) -> Arc<Self> {
        Arc::new(Hook {
            running_on: AtomicU64::new(0),
            call: Mutex::new(call),
        })
    }

    /// Runs `call` with the hook, waiting while another thread runs it; `None`
    /// when this thread is already inside it.
    pub(crate) fn with<R>(&self, call: impl FnOnce(&mut F) -> R) -> Option<R> {
        let me = THREAD_TOKEN.with(|token| *token);
        if self.running_on.load(Ordering::Acquire) == me {
            return None;
        }
        let mut guard = self.call.lock();
        self.running_on.store(me, Ordering::Release);
        let _running = Running(&self.running_on);
        Some(call(&mut **guard))
    }
}

/// Where host arrays spill to a file, and above what size: an instance's
/// or owner's own settings, or those that apply to an instance
/// ([`Instance::spill_settings`](crate::Instance::spill_settings)).
/// `None` where nothing is set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpillSettings {
    /// Host arrays above this many bytes spill.
    pub threshold: Option<u64>,
    /// The directory spill files go to.
    pub directory: Option<PathBuf>,
}

impl SpillSettings {
    /// Prefix of spill file names, so that stray files are recognisable.
    pub const FILE_PREFIX: &str = crate::host::SPILL_FILE_PREFIX;
}

pub(crate) mod sealed {
    /// Keeps [`AsOwner`](super::AsOwner) to the crate's handles.
    pub trait Sealed {}
}

/// Something that names an eviction unit: an [`Instance`](crate::Instance)
/// (its owner) or an [`Owner`](crate::Owner).
pub trait AsOwner: sealed::Sealed {
    /// The owner this stands for.
    fn owner_id(&self) -> OwnerId;
}

/// How to register an instance; pass to [`MemoryManager::register`](crate::MemoryManager::register).
///
/// ```
/// use cubie_mem::{MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
/// let solver = mgr
///     .register(
///         Registration::new()
///             .name("rk45-outputs")
///             .proportion(0.25)
///             .stream_group("integrators")
///             .on_invalidate(|| {}),
///     )
///     .unwrap();
/// assert_eq!(mgr.cap(&solver), 1 << 28);
/// assert_eq!(solver.name(), Some("rk45-outputs"));
/// ```
#[derive(Default)]
pub struct Registration {
    pub(crate) name: Option<String>,
    pub(crate) proportion: Option<f64>,
    pub(crate) stream_group: Option<String>,
    pub(crate) owner: Option<OwnerId>,
    pub(crate) on_invalidate: Option<InvalidateHook>,
    pub(crate) on_allocation_ready: Option<ReadyHook>,
    pub(crate) spill: SpillSettings,
}

impl Registration {
    /// The stream group an instance joins when none is named.
    pub const DEFAULT_STREAM_GROUP: &str = crate::streams::DEFAULT_STREAM_GROUP;

    /// A registration in the auto pool, the "default" stream group, owning itself.
    pub fn new() -> Self {
        Self::default()
    }

    /// A name shown in statistics, reports, errors and tracing instead of
    /// "instance 3".
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
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
    /// together with the owner's other registrations, is served with them by
    /// `allocate_queue`, and inherits the owner's spill settings.
    pub fn owner(mut self, owner: &impl AsOwner) -> Self {
        self.owner = Some(owner.owner_id());
        self
    }

    /// Called (with no manager lock held) when this instance's buffers are
    /// evicted or invalidated. Required before queueing requests.
    pub fn on_invalidate(mut self, hook: impl FnMut() + Send + 'static) -> Self {
        self.on_invalidate = Some(Hook::new(Box::new(hook)));
        self
    }

    /// Called (with no manager lock held) with this instance's response each
    /// time a batch is allocated for its owner in its stream group.
    pub fn on_allocation_ready(mut self, hook: impl FnMut(ArrayResponse) + Send + 'static) -> Self {
        self.on_allocation_ready = Some(Hook::new(Box::new(hook)));
        self
    }

    /// Host arrays of this instance above `bytes` spill to a file.
    pub fn host_spill_threshold(mut self, bytes: u64) -> Self {
        self.spill.threshold = Some(bytes);
        self
    }

    /// Directory for this instance's spill files. It must exist, and is
    /// never created: [`MemoryManager::register`](crate::MemoryManager::register)
    /// refuses a path that is not an existing directory, naming this
    /// registration and the path, rather than the first array that spills.
    pub fn spill_directory(mut self, directory: impl Into<PathBuf>) -> Self {
        self.spill.directory = Some(directory.into());
        self
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("proportion", &self.proportion)
            .field("stream_group", &self.stream_group)
            .field("owner", &self.owner)
            .field("on_invalidate", &self.on_invalidate.is_some())
            .field("on_allocation_ready", &self.on_allocation_ready.is_some())
            .field("spill", &self.spill)
            .finish()
    }
}
