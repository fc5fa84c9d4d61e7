//! The memory manager: registrations, VRAM shares, stream groups, the request
//! queue, allocation and eviction.
//!
//! Four rooms:
//!
//! - The public API: [`MemoryManager`] and its construction here,
//!   [`instances`] (registering, owners, shares, stream groups, busy
//!   owners) and [`memory`] (queueing, serving, freeing, what is held),
//!   with the handles ([`handles`]) and the user hooks ([`hooks`]).
//! - Serving a queue: [`serve`] runs one `allocate_queue` on a [`batch`].
//!   It reads a snapshot ([`gather`]), lets the pure [`decide`] choose,
//!   applies the choice ([`apply`]: evict, then place) and commits it
//!   ([`commit`]).
//! - The state: [`state`] and its rules, [`accounting`] (counting and
//!   releasing), and [`held`] (the arrays each instance holds).
//! - The report: [`report`] (who holds the memory, and what would make a
//!   batch fit).
//!
//! The lock order, and what a failed call leaves, are on the architecture
//! page ([locks and failed calls](crate::guide::architecture#locks-and-failed-calls)).

mod accounting;
mod apply;
mod batch;
mod commit;
mod decide;
mod gather;
mod handles;
mod held;
mod hooks;
mod instances;
mod memory;
mod report;
mod serve;
mod state;

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::backend::{Backend, IntoBackend};
use crate::config::ManagerConfig;

pub use handles::{Instance, Owner, Work};
pub use instances::StreamToBind;

use state::State;

/// The manager. Cheap to clone (clones share one manager); `Send + Sync`.
///
/// ```
/// use cubie_mem::{ArrayRequest, DType, ManagerConfig, MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::with_config(SimBackend::new(1 << 30), ManagerConfig::default().granule(0));
/// let solver = mgr.register(Registration::new().on_invalidate(|| {})).unwrap();
/// mgr.queue_request(&solver, [("state", ArrayRequest::new(DType::F32, [4, 2, 100]).total_runs(100))]).unwrap();
/// let mut response = mgr.allocate_queue_for(&solver).unwrap();
/// let state = response.take::<f32>("state").unwrap();
/// assert_eq!(state.shape(), [4, 2, 100]);
/// ```
#[derive(Clone)]
pub struct MemoryManager {
    /// The shared part.
    pub(crate) inner: Arc<Inner>,
}

/// The shared part of a manager, which handles point back to.
pub(crate) struct Inner {
    /// The backend.
    pub(crate) backend: Arc<dyn Backend>,
    /// The device's total memory, read once.
    pub(crate) total: u64,
    /// The configuration.
    pub(crate) config: ManagerConfig,
    /// The state, behind the manager's one mutex.
    state: Mutex<State>,
    /// Page-locked host memory the manager's host arrays and staging pools
    /// hold now (counted without the manager's lock).
    pub(crate) pinned_host: Arc<crate::host::PinnedTally>,
    /// The list of the last call's ready hooks, emptied, kept with its
    /// room for the next call: freed after every call, a large list makes
    /// glibc's allocator consolidate every small block freed since. Its own
    /// lock, taken only without the manager's.
    spare_ready: Mutex<hooks::ReadyList>,
    /// The staging threads of the manager's streamers, started on first use.
    staging_threads: std::sync::OnceLock<crate::StagingThreads>,
    /// The staging pool of the manager's streamers, made on first use and
    /// kept, so that later batches reuse the page-locked buffers.
    staging_pool: std::sync::OnceLock<crate::StagingPool>,
}

impl Inner {
    /// Takes the manager's mutex.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The kept ready list (empty), or a new one.
    fn take_ready_list(&self) -> hooks::ReadyList {
        std::mem::take(&mut *self.spare_ready.lock())
    }

    /// Keeps `ready` (emptied) for the next call.
    pub(crate) fn keep_ready_list(&self, ready: hooks::ReadyList) {
        *self.spare_ready.lock() = ready;
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        let ids: Vec<_> = state.instances.keys().copied().collect();
        for id in ids {
            state.release_all(id, crate::ReleaseReason::Freed);
        }
        // The owners' completion events destroy themselves as the state
        // drops.
    }
}

impl MemoryManager {
    /// A manager on `backend` with the default configuration.
    pub fn new(backend: impl IntoBackend) -> Self {
        Self::with_config(backend, ManagerConfig::default())
    }

    /// A manager on `backend` with `config`. The backend may be one already
    /// shared (`Arc<dyn Backend>`, such as another manager's
    /// [`backend`](Self::backend)): managers on one backend share its
    /// current-stream bindings. A setting that [`ManagerConfig::validate`]
    /// refuses (a spill directory that does not exist) is reported through
    /// `tracing::warn!` here, and is an error where it is used (the first
    /// array that spills). Call `config.validate()?` first to refuse it at
    /// once.
    ///
    /// ```
    /// use cubie_mem::{ManagerConfig, MemError, MemoryManager, SimBackend};
    ///
    /// let config = ManagerConfig::default().granule(0).spill_directory("/no/such/spill/dir");
    /// let error = config.validate().unwrap_err();
    /// assert!(matches!(error, MemError::Config { .. }));
    /// assert!(error.to_string().contains("/no/such/spill/dir"));
    /// let mgr = MemoryManager::with_config(SimBackend::new(1 << 30), ManagerConfig::default());
    /// let sharing = MemoryManager::new(mgr.backend().clone());
    /// assert!(std::sync::Arc::ptr_eq(mgr.backend(), sharing.backend()));
    /// ```
    pub fn with_config(backend: impl IntoBackend, config: ManagerConfig) -> Self {
        if let Err(error) = config.validate() {
            tracing::warn!(
                %error,
                "the manager's configuration is unusable; arrays that need the setting will fail"
            );
        }
        Self::assemble(backend.into_backend(), config)
    }

    /// A manager on `backend` with `config`, already checked or warned about.
    fn assemble(backend: Arc<dyn Backend>, config: ManagerConfig) -> Self {
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
                state: Mutex::new(State::new(config.limit_mode)),
                pinned_host: Arc::default(),
                spare_ready: Mutex::new(Vec::new()),
                staging_threads: std::sync::OnceLock::new(),
                staging_pool: std::sync::OnceLock::new(),
                config,
            }),
        }
    }

    /// The threads that gather and scatter staged chunks for the manager's
    /// streamers: [`StagingThreads::default_count`](crate::StagingThreads::default_count)
    /// of them, started on first use and shared.
    pub(crate) fn staging_threads(&self) -> crate::StagingThreads {
        self.inner
            .staging_threads
            .get_or_init(crate::StagingThreads::with_default_count)
            .clone()
    }

    /// The staging pool of the manager's streamers: made on first use and
    /// kept for the manager's life, so a later batch reuses the page-locked
    /// buffers an earlier one made.
    pub(crate) fn staging_pool(&self) -> crate::StagingPool {
        self.inner
            .staging_pool
            .get_or_init(|| crate::StagingPool::for_manager(self))
            .clone()
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The configuration.
    pub fn config(&self) -> &ManagerConfig {
        &self.inner.config
    }
}

impl std::fmt::Debug for MemoryManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryManager")
            .field("backend", &self.inner.backend.name())
            .field("total", &self.inner.total)
            .field("instances", &self.inner.lock().instances.len())
            .finish()
    }
}
