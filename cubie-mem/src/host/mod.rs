//! Host memory: a batch's inputs and results on the host ([`HostArray`]:
//! pinned, pageable, or spilled to a file, by the RAM policy of
//! [`SystemMemory`]), asynchronous copies of whole page-locked arrays
//! ([`PendingCopy`]), and the [`StagingPool`] that other arrays pass
//! through. The guide page [host memory](crate::guide::host_memory) walks
//! through a whole batch.

mod array;
mod kind;
mod pending_copy;
mod probe;
mod ram;
mod spill;
mod staging_pool;
mod tally;

pub use array::HostArray;
pub use kind::HostMemoryKind;
pub use pending_copy::{AsyncCopyError, PendingCopy};
pub use ram::SystemMemory;
pub(crate) use spill::SPILL_FILE_PREFIX;
pub(crate) use staging_pool::StagingBuffer;
pub use staging_pool::StagingPool;
pub(crate) use tally::{PinnedTally, PinnedUse};
