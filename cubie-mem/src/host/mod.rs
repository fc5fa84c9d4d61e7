//! Host memory: a batch's inputs and results on the host, and what moves
//! them to and from the device without staging.
//!
//! - [`HostArray`]: a batch's inputs or results in host memory, pinned,
//!   pageable, or spilled to a memory-mapped temporary file
//!   ([`MemoryManager::create_host_array`](crate::MemoryManager::create_host_array),
//!   [`choose_host_memory_kind`](crate::MemoryManager::choose_host_memory_kind)),
//!   of a [`HostMemoryKind`] chosen by the RAM policy ([`SystemMemory`]).
//! - [`PendingCopy`]: an asynchronous copy between a page-locked host array
//!   and a device array ([`DeviceArray::upload_async`](crate::DeviceArray::upload_async),
//!   [`download_async`](crate::DeviceArray::download_async)), holding the
//!   host array until the copy is done.
//! - [`StagingPool`]: pinned buffers that pageable and spilled arrays pass
//!   through, reused by (label, shape, element type) and bounded by RAM.
//!
//! Chunk streaming, which moves a batch through the device chunk by chunk,
//! is [`streaming`](crate::streaming). The guide page
//! [host memory](crate::guide::host_memory) walks through a whole batch.

mod array;
mod kind;
mod pending_copy;
mod ram;
mod spill;
mod staging_pool;
mod tally;

pub use array::{AnyHostArray, HostArray};
pub use kind::HostMemoryKind;
pub use pending_copy::{AsyncCopyError, PendingCopy};
pub use ram::SystemMemory;
pub(crate) use spill::SPILL_FILE_PREFIX;
pub(crate) use staging_pool::STAGING_BYTES_PER_TRANSFER;
pub use staging_pool::{StagingBuffer, StagingKey, StagingPool};
pub(crate) use tally::{PinnedTally, PinnedUse};
