//! The owning layer: each device resource the manager, the chunk pipeline
//! and the CUDA interop use has exactly one owner here, which releases it
//! when dropped.
//!
//! The [`Backend`](crate::backend::Backend) hands out streams, events and
//! page-locked blocks that release themselves, and orders nothing across
//! streams. This layer adds what the manager needs on top, and is where
//! every use of device memory is ordered across streams, once:
//!
//! - [`OwnedStream`]: a backend stream, or an external one that is ended
//!   with an event when its binding ends;
//! - [`Event`]: a recorded event, with the backend's name for errors;
//! - [`DeviceMemory`]: a device allocation, which orders each use after its
//!   last use on another stream, and is freed on its group's stream after
//!   its last use when its last reference drops;
//! - [`PinnedMemory`]: a page-locked block behind a read/write lock.
//!
//! No `free_device` call is made outside this module and the backends.

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
