//! The owning layer: each device resource the manager, the chunk pipeline
//! and the CUDA interop use has exactly one owner here, which releases it
//! when dropped.
//!
//! The [`Backend`](crate::backend::Backend) trait is the driver-level layer:
//! it passes plain handles (`StreamHandle`, `EventHandle`, `DevicePtr`), so
//! that the simulated device, the CUDA backend and a user's own backend fit
//! one narrow interface. Above it, everything holds these values instead of
//! handles:
//!
//! - [`OwnedStream`]: a stream, destroyed with its last reference (an
//!   external stream is ended with an event instead, never destroyed);
//! - [`Event`]: a recorded event, destroyed when dropped;
//! - [`DeviceMemory`]: a device allocation, freed on its group's stream
//!   after its last use when its last reference drops;
//! - [`PinnedMemory`]: a page-locked block, which the backend hands out as
//!   a [`PinnedBlock`] that releases itself.
//!
//! No `destroy_stream`, `destroy_event` or `free_device` call is made
//! outside this module and the backends.

mod device_memory;
mod event;
mod stream;

use parking_lot::RwLock;

pub(crate) use device_memory::DeviceMemory;
pub(crate) use event::Event;
pub(crate) use stream::OwnedStream;

use crate::backend::PinnedBlock;

/// Page-locked host memory of a pinned array; readers and writers take its
/// lock, and the block is released when the last reference to it drops.
pub(crate) type PinnedMemory = RwLock<Box<dyn PinnedBlock>>;
