//! The CUDA device, through the driver API, and your own kernels on the
//! manager's memory.
//!
//! - **Driver library**: `libcuda.so.1` (`nvcuda.dll` on Windows) is loaded
//!   at run time, on first use: building needs no CUDA toolkit, and a
//!   program built with the feature starts on a machine without the NVIDIA
//!   driver, where [`CudaBackend::new`] says what is missing (and
//!   [`default_memmgr`] falls back to the simulated device).
//! - **Context**: the primary context of one device (ordinal 0 by default),
//!   retained when the backend is created (which [`default_memmgr`] does on
//!   first use) and made current on whichever thread calls, for the duration
//!   of the call.
//! - **Driver calls**: every call goes through the backend's own
//!   declarations of the driver API, whose results are plain integers, so a
//!   code newer than this build is reported by number instead of being
//!   undefined behaviour. A failure that leaves the context unusable (a
//!   kernel fault, an assert, a contained error) is remembered, and every
//!   later call fails with [`BackendError::ContextLost`](crate::backend::BackendError::ContextLost) naming it.
//! - **Device memory**: stream-ordered `cuMemAllocFromPoolAsync` /
//!   `cuMemFreeAsync` on the stream given, from a memory pool the backend
//!   creates and owns, so the pool it measures is the pool it allocates
//!   from, and its settings touch no other library's memory. The pool's
//!   release threshold ([`CudaConfig::release_threshold`], unlimited by
//!   default) keeps freed memory cached, so repeated batches do not give
//!   memory back to the driver between solves; the free memory reported to
//!   the planner counts what the pool holds idle, and an allocation that
//!   fails for want of memory synchronises, trims the pool and tries once
//!   more. Allocations are addressed by pointer; the backend keeps their
//!   sizes, to check every copy's range.
//! - **Pinned host memory**: page-locked blocks (`cuMemHostAlloc`), released
//!   blocks cached for reuse up to [`CudaConfig::pinned_cache_bytes`].
//! - **Streams and events**: objects, released with their last reference:
//!   non-blocking streams (never the null stream), and events without
//!   timing, reused from a pool.
//! - **Ordering across streams**: none. Work on one stream runs in order;
//!   the caller orders two streams with an event (the manager does, for
//!   everything it allocates).
//! - **Copies**: from and to pageable slices, queued on the stream, which
//!   is then synchronised, so the host slice is free to reuse when the call
//!   returns; from and to page-locked blocks
//!   ([`Stream::copy_to_device_async`](crate::backend::Stream::copy_to_device_async),
//!   [`Stream::copy_from_device_async`](crate::backend::Stream::copy_from_device_async)),
//!   queued and returned at once, done when an event recorded after them
//!   fires.
//! - **Kernels**: the manager's host kernels
//!   ([`KernelBody::Host`](crate::backend::KernelBody::Host)) run only on the
//!   simulated device; load your CUDA kernels with [`PtxModule`] and launch
//!   them on a stream group's [`GroupStream`] with a [`LaunchBuilder`],
//!   passing the arrays as [`DeviceView`]s and scalars by type. Streams of
//!   other libraries bind as the current stream
//!   ([`bind_raw_stream`]).
//!
//! Without a device (or driver), [`CudaBackend::new`] fails with
//! [`MemError::NoDevice`](crate::MemError::NoDevice) naming the cause. The
//! [`Backend`](crate::backend::Backend) methods report
//! [`BackendError`](crate::backend::BackendError)s; the inherent methods,
//! public API of this backend, report [`MemError`](crate::MemError)s.
//!
//! ```
//! use cubie_mem::cuda::CudaBackend;
//! use cubie_mem::{MemError, MemoryManager};
//!
//! match CudaBackend::new(0) {
//!     Ok(cuda) => {
//!         let mgr = MemoryManager::new(cuda);
//!         assert_eq!(mgr.memory_report().backend, "cuda");
//!     }
//!     Err(MemError::NoDevice { cause }) => println!("running without a GPU: {cause}"),
//!     Err(other) => return Err(other),
//! }
//! # Ok::<(), MemError>(())
//! ```
//!
//! [`default_memmgr`]: crate::default_memmgr

#[cfg(feature = "cudarc")]
mod cudarc_stream;
mod external;
mod interop;

pub use crate::backend::cuda::{
    CudaBackend, CudaConfig, DriverCalls, HostWait, LaunchDims, PtxFunction, PtxModule,
};
#[cfg(feature = "cudarc")]
pub use cudarc_stream::{CudarcStream, bind_cudarc_stream};
#[cfg(feature = "cust")]
pub use external::with_cust_stream;
pub use external::{BoundStream, bind_raw_stream};
pub use interop::{DeviceView, GroupStream, LaunchArg, LaunchBuilder};
