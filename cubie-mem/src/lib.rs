//! cubie-mem: a GPU memory manager for batch numerical solvers.
//!
//! Solver instances register with a [`MemoryManager`]. They queue
//! [`ArrayRequest`]s, and the manager budgets them against the memory
//! available. A batch that does not fit is split into chunks ([`plan`]).
//! Typed arrays come back in an [`ArrayResponse`].
//!
//! Without a GPU everything runs on [`SimBackend`], a device held in host
//! memory. The CUDA backend is behind the feature `cuda`. Decisions are
//! logged through `tracing` ([`guide::logging`]).
//!
//! ```
//! use cubie_mem::{ArrayRequest, DType, ManagerConfig, MemoryManager, Registration, SimBackend};
//!
//! // A device with 1 MiB free: a 4 MiB batch must run in chunks.
//! let sim = SimBackend::new(1 << 30).with_free(1 << 20);
//! let mgr = MemoryManager::with_config(sim, ManagerConfig::default().granule(0));
//! let solver = mgr.register(Registration::new().on_invalidate(|| {})).unwrap();
//! let runs = 4096;
//! mgr.queue_request(&solver, [("state", ArrayRequest::new(DType::F64, [16, 8, runs]).total_runs(runs))]).unwrap();
//! let response = mgr.allocate_queue_for(&solver).unwrap();
//! assert_eq!(response.chunks, 5);
//! assert_eq!(response.chunked_shapes["state"], [16, 8, 820]);
//! ```
//!
//! # Where names live
//!
//! Every item has one path. What solver code names is at the crate root.
//! The public modules hold the rest, which the root does not re-export:
//!
//! - [`backend`]: the device contract, for backend authors;
//! - `cuda` (feature `cuda`): the CUDA backend, and your kernels on its memory;
//! - [`plan`]: the chunk planner, and the split across devices;
//! - [`stats`] and [`report`]: usage statistics, and who holds the memory;
//! - [`timeline`]: the device's timeline;
//! - [`guide`]: the user guide.
//!
//! Constants are associated constants of what they configure
//! (`ArrayRequest::DEFAULT_CHUNK_AXIS`, `SimBackend::POISON`).

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod array;
pub mod backend;
mod block;
mod buffers;
mod bytes;
mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
mod default;
mod devices;
mod dtype;
mod error;
#[cfg(any(doc, doctest))]
pub mod guide;
mod host;
mod ids;
mod kernel;
mod manager;
#[cfg(feature = "ndarray")]
mod nd;
pub mod plan;
mod pools;
mod registration;
pub mod report;
mod request;
mod resource;
mod shard;
pub mod stats;
mod streaming;
mod streams;
pub mod timeline;

pub use array::{ArrayResponse, DeviceArray, PinnedArray, ReleaseReason};
pub use backend::sim::SimBackend;
pub use buffers::{Allocated, GpuBuffers, HostBuffers, SingleBufferSet};
pub use bytes::Bytes;
pub use config::{LimitMode, ManagerConfig};
pub use default::default_memmgr;
pub use devices::{DevicePortion, DeviceSet, DeviceSetBuffers, DeviceSetReport, Throughput};
pub use dtype::{DType, Element, Precision};
pub use error::{ArraySide, KernelArgument, MemError, UnchunkableArray, UnchunkableReason};
pub use host::{AsyncCopyError, HostArray, HostMemoryKind, PendingCopy, StagingPool, SystemMemory};
pub use ids::{InstanceId, OwnerId};
pub use kernel::{HostKernel, KernelArgs, KernelArray};
pub use manager::{Instance, MemoryManager, Owner, StreamToBind, Work};
#[cfg(feature = "ndarray")]
pub use nd::{RunsView, RunsViewMut, SplitRuns};
pub use plan::chunks::{Chunk, ChunkPlan};
pub use plan::split::{Skip, Workload};
pub use pools::MIN_AUTOPOOL_SIZE;
pub use registration::{AsOwner, Registration, SpillSettings};
pub use request::{ArrayRequest, MemoryKind, RequestSet};
pub use shard::{Launcher, Shard, ShardError};
pub use streaming::{
    BatchError, ChunkLayout, ChunkPipeline, ChunkStreamer, ChunkTarget, DeviceSetPipeline,
    StagingThreads,
};
pub use streams::CurrentStream;

#[cfg(feature = "derive")]
pub use cubie_mem_derive::GpuBuffers;

/// Proptest's configuration for `cases` cases; under Miri, where each case
/// takes a thousand times longer, a few of them, so that the properties
/// still run there.
#[cfg(test)]
pub(crate) fn proptest_cases(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config::with_cases(if cfg!(miri) { cases.min(4) } else { cases })
}

/// The crate README's example, run as a doctest.
#[cfg(all(doctest, feature = "derive"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
