//! Chunk streaming: a batch larger than the device moved through it chunk
//! by chunk ([`ChunkStreamer`]), with the copies of some chunks overlapping
//! the computation of another ([`ChunkPipeline`]), on one device or on
//! every device of a set ([`DeviceSetPipeline`]). The guide page
//! [host memory](crate::guide::host_memory#the-chunk-pipeline) walks
//! through it.

mod batch_error;
mod binding;
mod binding_host;
mod device_set_pipeline;
mod layout;
mod pipeline;
mod schedule;
mod staging_ring;
mod staging_threads;
mod streamer;
mod target;

pub use batch_error::BatchError;
pub use device_set_pipeline::DeviceSetPipeline;
pub use layout::ChunkLayout;
pub use pipeline::ChunkPipeline;
pub use staging_threads::StagingThreads;
pub use streamer::ChunkStreamer;
pub use target::ChunkTarget;
