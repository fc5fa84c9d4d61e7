//! The device boundary: what the manager needs from a GPU, modelled on the
//! CUDA driver API.
//!
//! The manager only talks to `dyn Backend`, so the simulated device, the
//! CUDA device and your own backend are interchangeable. Streams, events and
//! page-locked blocks are objects that release themselves ([`Stream`],
//! [`Event`], [`PinnedBlock`]); device memory is addressed by pointer.
//!
//! The contract is CUDA's: work on one stream runs in order, and work on two
//! streams is ordered only by events. The backend orders nothing itself:
//! its callers order their streams.

use std::fmt;
use std::sync::Arc;

pub(crate) mod error;
mod kernel;
pub(crate) mod page_locked;
mod rates;
pub(crate) mod sim;
mod stream;
mod strided;

pub use error::{BackendError, HazardMemory, MemorySpace};
pub use kernel::{Access, HostKernelFn, KernelArg, KernelBody, KernelLaunch};
pub use rates::EngineRates;
pub(crate) use rates::{MAX_DEFAULT_STAGING_LANES, default_staging_lanes};
pub use sim::{Calibration, CallCosts};
pub(crate) use stream::own;
pub use stream::{Event, Stream};
pub use strided::StridedRows;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

/// Free and total device memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes the device can still allocate, with what its pool holds idle.
    pub free: u64,
    /// Bytes of device memory in all.
    pub total: u64,
}

/// What a backend's stream-ordered memory pool holds: bytes reserved, bytes
/// in use, and the largest block one allocation could get, where known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Bytes the device pool has reserved from the device (in use and idle).
    pub reserved: u64,
    /// Bytes of them live allocations use.
    pub used: u64,
    /// The largest block one allocation could get now, where known.
    pub largest_free_block: Option<u64>,
}

impl PoolUsage {
    /// Memory the device pool holds idle: reusable without asking the device.
    pub fn idle(&self) -> u64 {
        self.reserved.saturating_sub(self.used)
    }
}

/// A device address (CUDA `CUdeviceptr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The byte range `offset..offset + len` of an allocation of `size` bytes,
/// or [`BackendError::OutOfBounds`].
pub(crate) fn byte_range(
    operation: &'static str,
    offset: u64,
    len: usize,
    size: u64,
) -> Result<std::ops::Range<u64>, BackendError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(offset..end),
        _ => Err(BackendError::OutOfBounds {
            operation,
            offset,
            end: offset.saturating_add(len as u64),
            size,
        }),
    }
}

/// Work the host does for the device, which a modelled device times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostWork {
    /// Gathering a chunk's runs from a host array into a staging buffer:
    /// `rows` contiguous blocks of the host array.
    Gather {
        /// The blocks copied, each its own memcpy.
        rows: u64,
    },
    /// Scattering a chunk's results from a staging buffer into a host
    /// array: `rows` contiguous blocks of it.
    Scatter {
        /// The blocks copied, each its own memcpy.
        rows: u64,
    },
    /// Touching fresh host memory for the first time (a new spill file).
    FirstTouch,
}

impl HostWork {
    /// `gather`, `scatter` or `first touch`, for timelines and logs.
    pub fn name(self) -> &'static str {
        match self {
            HostWork::Gather { .. } => "gather",
            HostWork::Scatter { .. } => "scatter",
            HostWork::FirstTouch => "first touch",
        }
    }
}

/// A block of page-locked host memory, at least 64-byte aligned; freed when
/// dropped.
///
/// # Safety
///
/// [`base`](Self::base) points to the block's `bytes().len()` bytes, valid
/// for reads and writes while the block lives. It is taken without going
/// through a reference (as `Vec::as_mut_ptr` is), so it stays valid after
/// any borrow has ended. [`bytes`](Self::bytes) and
/// [`bytes_mut`](Self::bytes_mut) start there.
pub unsafe trait PinnedBlock: Send + Sync {
    /// The block's first byte, the one pointer every access derives from.
    fn base(&self) -> std::ptr::NonNull<u8>;
    /// The block's bytes.
    fn bytes(&self) -> &[u8];
    /// The block's bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// A device the manager can allocate on, copy to and from, and launch
/// kernels on. Seven methods are required; the rest have safe defaults, so
/// a decorator forwards only what it changes.
pub trait Backend: Send + Sync + 'static {
    /// Short name for messages (`"simulated"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// Free and total device memory.
    fn mem_info(&self) -> Result<MemInfo, BackendError>;

    /// Creates a stream that does not synchronise with the null stream.
    fn create_stream(&self) -> Result<std::sync::Arc<dyn Stream>, BackendError>;

    /// Allocates `bytes` of device memory ordered on `stream`: work on
    /// another stream may use it once ordered after `stream`.
    fn alloc_device(&self, bytes: u64, stream: &dyn Stream) -> Result<DevicePtr, BackendError>;

    /// Frees the `bytes` of device memory at `ptr`, ordered on `stream`.
    /// The caller orders other streams' work before it.
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError>;

    /// Allocates `bytes` of page-locked host memory, zero-filled.
    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError>;

    /// Allocates `bytes` of page-locked host memory whose contents are
    /// unspecified, for a caller that writes before it reads. The default
    /// calls [`alloc_pinned`](Self::alloc_pinned).
    fn alloc_pinned_for_overwrite(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.alloc_pinned(bytes)
    }

    /// The device pool's figures, for reports; `None` (the default) when unknown.
    fn pool_usage(&self) -> Option<PoolUsage> {
        None
    }

    /// Whether the `len` bytes at `ptr` lie in one live [`PinnedBlock`] of
    /// this backend, so that an asynchronous copy may use them. The default,
    /// `false`, is safe: such memory is staged.
    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        let _ = (ptr, len);
        false
    }

    /// Queues a kernel on `stream`, or reports [`BackendError::Unsupported`]
    /// for a kind of body it cannot run.
    fn launch(&self, launch: KernelLaunch<'_>, stream: &dyn Stream) -> Result<(), BackendError>;

    /// The host has just done `work` on `bytes` with `lanes` threads, for a
    /// modelled device to time. A real device ignores it (the default).
    fn host_work(&self, work: HostWork, bytes: u64, lanes: usize) {
        let _ = (work, bytes, lanes);
    }

    /// A chunk pipeline filled the first `bytes` of the allocation at `ptr`:
    /// the bytes no upload wrote there are padding past a short chunk's
    /// runs, which a kernel over the whole array may read and whose results
    /// are never downloaded. A device that refuses reads of never-written
    /// memory counts them as written; a real device ignores it (the
    /// default). A decorator forwards it, as it forwards `host_work`.
    fn mark_padding(&self, ptr: DevicePtr, bytes: u64) {
        let _ = (ptr, bytes);
    }

    /// How fast the device's engines work, for splitting a batch across
    /// devices ([`plan::split::weights`](crate::plan::split::weights)).
    /// `None` (the default): unknown.
    fn engine_rates(&self) -> Option<EngineRates> {
        None
    }

    /// Accepts `peer`'s page-locked memory for asynchronous copies, as the
    /// devices of a [`DeviceSet`](crate::DeviceSet) do. Returns whether it can.
    fn accept_page_locked(&self, peer: &dyn Backend) -> bool {
        let _ = peer;
        false
    }

    /// The backend as [`Any`](std::any::Any), so its own API can recognise
    /// what it made. `None`, the default, opts out.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// What a manager is built on: any [`Backend`], or one already shared
/// (`Arc<dyn Backend>`, such as another manager's
/// [`MemoryManager::backend`](crate::MemoryManager::backend)). Managers on
/// one shared backend share its current-stream bindings.
pub trait IntoBackend {
    /// The backend, behind a shared pointer.
    fn into_backend(self) -> Arc<dyn Backend>;
}

impl<B: Backend> IntoBackend for B {
    fn into_backend(self) -> Arc<dyn Backend> {
        Arc::new(self)
    }
}

impl IntoBackend for Arc<dyn Backend> {
    fn into_backend(self) -> Arc<dyn Backend> {
        self
    }
}

/// Turns a backend's results into the crate's errors.
pub(crate) trait BackendResult<T> {
    /// A failure not tied to an array.
    fn on(self, backend: &dyn Backend) -> Result<T, crate::MemError>;
    /// A failure while working on the array `label`.
    fn for_array(self, backend: &dyn Backend, label: &str) -> Result<T, crate::MemError>;
}

impl<T> BackendResult<T> for Result<T, BackendError> {
    fn on(self, backend: &dyn Backend) -> Result<T, crate::MemError> {
        self.map_err(|error| crate::MemError::backend(backend.name(), error))
    }

    fn for_array(self, backend: &dyn Backend, label: &str) -> Result<T, crate::MemError> {
        self.map_err(|error| error.for_array(backend.name(), label))
    }
}
