//! Host memory and chunked streaming: the path a batch larger than the
//! device takes.
//!
//! - [`HostArray`]: a batch's inputs or results in host memory, pinned,
//!   pageable, or spilled to a memory-mapped temporary file
//!   ([`MemoryManager::create_host_array`](crate::MemoryManager::create_host_array),
//!   [`choose_host_memory_kind`](crate::MemoryManager::choose_host_memory_kind)).
//! - [`PendingCopy`]: an asynchronous copy between a page-locked host array
//!   and a device array ([`DeviceArray::upload_async`](crate::DeviceArray::upload_async),
//!   [`download_async`](crate::DeviceArray::download_async)), holding the
//!   host array until the copy is done.
//! - [`StagingPool`]: pinned buffers that pageable and spilled arrays pass
//!   through, reused by (label, shape, element type) and bounded by RAM.
//! - [`ChunkStreamer`]: copies one chunk of a host array to a device array
//!   of one chunk, and results back, along any chunk axis; its
//!   [`ChunkPipeline`] runs the whole batch with the next chunk staged while
//!   the current one computes.
//!
//! The guide page [host memory](crate::guide::host_memory) walks through a
//! whole batch.

mod array;
mod choose;
mod failure;
mod host_ref;
mod lane;
mod layout;
mod pending;
mod pipeline;
mod ram;
mod schedule;
mod set_pipeline;
mod shared;
mod spill;
mod stage;
mod staging;
mod staging_ring;
mod tally;
mod target;
mod threads;
mod transfer;

pub use array::{AnyHostArray, HostArray};
pub use choose::HostMemoryKind;
pub use failure::BatchError;
pub use layout::ChunkLayout;
pub use pending::{AsyncCopyError, PendingCopy};
pub use pipeline::ChunkPipeline;
pub use ram::SystemMemory;
pub use set_pipeline::{SetError, SetPipeline, SetRun};
pub(crate) use spill::SPILL_FILE_PREFIX;
pub use staging::{StagingBuffer, StagingKey, StagingPool};
pub(crate) use tally::{PinnedTally, PinnedUse};
pub use target::ChunkTarget;
pub use threads::StagingThreads;
pub use transfer::ChunkStreamer;
