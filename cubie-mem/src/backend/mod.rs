//! The device boundary: what the manager needs from a GPU, modelled on the
//! CUDA driver API: free and total memory, streams and events, stream-ordered
//! allocation and free, page-locked host memory, kernel launches, and the
//! hooks a modelled device times the host's work with.
//!
//! The manager only talks to `dyn Backend`, so the simulated device, the
//! CUDA device and a user's own backend are interchangeable. Streams,
//! events and page-locked blocks are objects the backend hands out, each
//! released when its last reference drops ([`Stream`], [`Event`],
//! [`PinnedBlock`]); device memory is addressed by pointer and freed with
//! [`Backend::free_device`]. Backends report [`BackendError`]s; the manager
//! turns them into [`MemError`](crate::MemError)s with the array's label
//! and its own figures.
//!
//! The contract is CUDA's: work on one stream runs in order, and work on
//! two streams is ordered only by events. The backend orders nothing by
//! itself: callers order their streams (the manager does, for everything it
//! allocates). A copy between device memory and a page-locked block returns
//! once queued, and the block belongs to the copy until the work is known
//! done; a copy of a pageable slice blocks until the slice is free again.

use std::fmt;

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
pub(crate) use stream::own;
pub use stream::{Event, Stream};
pub use strided::StridedRows;

#[cfg(feature = "cuda")]
pub(crate) mod cuda;

/// Free and total device memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes the device can still allocate (including memory the device pool
    /// holds idle).
    pub free: u64,
    /// Bytes of device memory in all.
    pub total: u64,
}

/// What a backend's device pool (its stream-ordered memory pool) holds,
/// where it keeps one: bytes
/// reserved from the device, the bytes of them live allocations use, and
/// the largest block one allocation could get now, where known. Out of
/// memory errors and [`MemoryManager::memory_report`](crate::MemoryManager::memory_report)
/// show them.
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
/// or [`BackendError::OutOfBounds`] when it does not lie inside it.
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

/// Work the host does on host memory for the device, which a modelled
/// device times on its host engine ([`Backend::host_work`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostWork {
    /// Gathering a chunk's runs from a host array into a staging buffer
    /// (from a spill file: reading it).
    Gather,
    /// Scattering a chunk's results from a staging buffer into a host array
    /// (into a spill file: writing it).
    Scatter,
    /// Touching fresh host memory for the first time (pre-faulting a new
    /// spill file's pages): the kernel allocates and zeroes each page, far
    /// slower than a warm write.
    FirstTouch,
}

impl HostWork {
    /// `gather`, `scatter` or `first touch`, for timelines and logs.
    pub fn name(self) -> &'static str {
        match self {
            HostWork::Gather => "gather",
            HostWork::Scatter => "scatter",
            HostWork::FirstTouch => "first touch",
        }
    }
}

/// A block of page-locked host memory; freed when dropped.
///
/// The bytes are at least 64-byte aligned, so they can be viewed as any
/// element type. Asynchronous copies take a block's address: see
/// [`Backend::copy_to_device_async`] for who may touch it meanwhile.
///
/// # Safety
///
/// [`base`](Self::base) points to the block's `bytes().len()` bytes, valid
/// for reads and writes while the block lives, and is taken from the
/// block's allocation without going through a reference (as
/// `Vec::as_mut_ptr` is), so that accesses through it stay valid after any
/// borrow of the bytes has ended; [`bytes`](Self::bytes) and
/// [`bytes_mut`](Self::bytes_mut) start there. Host arrays keep that one
/// pointer, and a backend that writes into its blocks itself (the
/// simulated device landing a download) goes through it too.
pub unsafe trait PinnedBlock: Send + Sync {
    /// The block's first byte, the one pointer every access derives from.
    fn base(&self) -> std::ptr::NonNull<u8>;
    /// The block's bytes.
    fn bytes(&self) -> &[u8];
    /// The block's bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// A device the manager can allocate on, copy to and from, and launch
/// kernels on, modelled on the CUDA driver API.
///
/// Seven methods are required; the rest have safe defaults, so that a
/// backend of one's own, or a decorator over another (counting, limiting,
/// logging), stays short: a decorator forwards what it changes, and its
/// streams' [`as_any`](Stream::as_any) returns the stream it wraps.
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

    /// Frees the `bytes` of device memory at `ptr`, ordered on `stream`
    /// (`cuMemFreeAsync`): work queued on `stream` before the free may still
    /// use it; work on other streams must be ordered before it by the
    /// caller.
    fn free_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &dyn Stream,
    ) -> Result<(), BackendError>;

    /// Allocates `bytes` of page-locked host memory, zero-filled.
    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError>;

    /// Allocates `bytes` of page-locked host memory for a caller that writes
    /// every byte before it reads any (the staging buffers that gathers fill
    /// and downloads land in): the contents are initialised but unspecified,
    /// so a backend may hand back a reused block as its last user left it
    /// instead of zero-filling it. The default allocates zero-filled memory
    /// with [`alloc_pinned`](Self::alloc_pinned).
    fn alloc_pinned_for_overwrite(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, BackendError> {
        self.alloc_pinned(bytes)
    }

    /// The device pool's figures (reserved, used, the largest block
    /// one allocation could get), for reports of who holds what; `None`
    /// (the default) where the backend does not know them.
    fn pool_usage(&self) -> Option<PoolUsage> {
        None
    }

    /// Whether the `len` bytes at `ptr` lie in one live [`PinnedBlock`] of
    /// this backend, so that an asynchronous copy may use them. Asked
    /// before a host array's copy is queued: the manager stages host memory
    /// the answer is `false` for, such as another backend's blocks.
    ///
    /// The default is the safe answer, `false`: a backend that keeps no
    /// record of its blocks, or a decorator (counting, limiting, logging)
    /// that does not forward this method, gets every host array staged
    /// through the staging buffers it allocated, never foreign memory in an
    /// asynchronous copy. A backend that knows its blocks answers for them.
    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        let _ = (ptr, len);
        false
    }

    /// Queues a kernel on `stream`: ordered after earlier work on the
    /// stream, reading and writing the arguments the launch lists. A backend
    /// that cannot run the launch's kind of body reports
    /// [`BackendError::Unsupported`].
    fn launch(&self, launch: KernelLaunch<'_>, stream: &dyn Stream) -> Result<(), BackendError>;

    /// The host has just done `work` on `bytes` of host memory for the
    /// device (a gather into a staging buffer, a scatter out of one), cut
    /// into `lanes` pieces copied at the same time by as many threads
    /// ([`StagingThreads`](crate::StagingThreads); 0 counts as 1), so that
    /// a modelled device can time it on the host's engine and clock. A real
    /// device ignores it (the default).
    fn host_work(&self, work: HostWork, bytes: u64, lanes: usize) {
        let _ = (work, bytes, lanes);
    }

    /// How fast the device's engines work, for splitting a batch across
    /// devices in proportion to their throughput
    /// ([`plan::split::weights`](crate::plan::split::weights)). Backends
    /// that model or know their rates return them (the simulated device
    /// its modelled bandwidths and compute speed). `None`, the default and
    /// the CUDA device's answer: the rates are unknown, so the devices of a
    /// set are treated as equal unless the user gives weights.
    fn engine_rates(&self) -> Option<EngineRates> {
        None
    }

    /// Accepts `peer`'s page-locked memory for this backend's asynchronous
    /// copies from now on, as its own: the devices of one
    /// [`DeviceSet`](crate::DeviceSet), whose page-locked allocations are
    /// portable, share the host arrays any of them made. Returns whether
    /// this backend can (a backend of another kind cannot; the default
    /// cannot, so such memory is staged).
    fn accept_page_locked(&self, peer: &dyn Backend) -> bool {
        let _ = peer;
        false
    }

    /// The backend as [`Any`](std::any::Any), so that a backend's own API
    /// can recognise the arrays and streams it made (the CUDA backend's
    /// kernel interop does). `None`, the default, opts out.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
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
