//! Chunk streaming: a batch larger than the device moved through it chunk
//! by chunk.
//!
//! - [`ChunkStreamer`] (`streamer`): copies one chunk of a host array to a
//!   device array of one chunk, and results back, along any chunk axis
//!   ([`ChunkLayout`], `layout`), staged through the staging pool by the
//!   [`StagingThreads`] (`staging_threads`) when the host array is not
//!   page-locked.
//! - [`ChunkPipeline`] (`pipeline`): the whole batch with the next chunk's
//!   upload and the last one's download overlapping the current one's
//!   computation; its bindings (`binding`, the host side `binding_host` and
//!   `runs_access`, the device side [`ChunkTarget`] in `target`), their
//!   staging buffers (`stage`, `staging_ring`), and the order of the work
//!   (`schedule`); what a failure leaves ([`BatchError`], `batch_error`).
//! - [`DeviceSetPipeline`] (`device_set_pipeline`): one batch over the devices of
//!   a [`DeviceSet`](crate::DeviceSet), each device a pipeline of its own.

mod batch_error;
mod binding;
mod binding_host;
mod device_set_pipeline;
mod layout;
mod pipeline;
mod runs_access;
mod schedule;
mod stage;
mod staging_ring;
mod staging_threads;
mod streamer;
mod target;

pub use batch_error::BatchError;
pub use device_set_pipeline::{DeviceSetError, DeviceSetPipeline, DeviceSetRun};
pub use layout::ChunkLayout;
pub use pipeline::ChunkPipeline;
pub use staging_threads::StagingThreads;
pub use streamer::ChunkStreamer;
pub use target::ChunkTarget;
