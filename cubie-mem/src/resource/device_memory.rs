//! Device memory with one owner: freed, ordered on its group's stream after
//! its last use, when the last reference to it drops.

use std::sync::Arc;

use parking_lot::Mutex;

use super::OwnedStream;
use crate::MemError;
use crate::backend::{Backend, BackendResult, DevicePtr};

/// Device memory, freed (ordered on its stream) when the last reference to
/// it drops.
///
/// It remembers the stream of its last use: work queued on another stream
/// is first ordered after it (an event), as cudarc's slices do, so that an
/// allocation made under one current stream and used under another, or
/// freed on its group's stream after a copy on another, never races.
pub(crate) struct DeviceMemory {
    ptr: DevicePtr,
    bytes: u64,
    /// The stream the free is ordered on: the owning group's stream.
    stream: Mutex<Arc<OwnedStream>>,
    /// The stream of the last allocation, copy, kernel or pipeline run.
    last_use: Mutex<Arc<OwnedStream>>,
    /// False once freed through [`DeviceMemory::free`].
    live: bool,
}

impl DeviceMemory {
    /// Allocates `bytes` of device memory for the array `label`, ordered
    /// on `order`; its free is ordered on `group_stream`.
    pub(crate) fn allocate(
        backend: &Arc<dyn Backend>,
        bytes: u64,
        label: &str,
        group_stream: &Arc<OwnedStream>,
        order: Arc<OwnedStream>,
    ) -> Result<Self, MemError> {
        Ok(DeviceMemory {
            ptr: backend
                .alloc_device(bytes, order.stream())
                .for_array(&**backend, label)?,
            bytes,
            stream: Mutex::new(Arc::clone(group_stream)),
            last_use: Mutex::new(order),
            live: true,
        })
    }

    /// The device address.
    pub(crate) fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The stream of the owning group.
    pub(crate) fn group_stream(&self) -> Arc<OwnedStream> {
        Arc::clone(&self.stream.lock())
    }

    /// Orders work about to be queued on `stream` after the last use of the
    /// memory on another stream, and makes `stream` the last.
    pub(crate) fn use_on(&self, stream: &Arc<OwnedStream>) -> Result<(), MemError> {
        let mut last = self.last_use.lock();
        if Arc::ptr_eq(&last, stream) {
            return Ok(());
        }
        // The same stream bound anew as external needs no event.
        if last.id() != stream.id() || last.ended() {
            stream.wait_for(&last)?;
        }
        *last = Arc::clone(stream);
        Ok(())
    }

    /// Orders the free and later copies on `stream` (the instance moved
    /// group, or the group got a new stream).
    pub(crate) fn set_group_stream(&self, stream: &Arc<OwnedStream>) {
        *self.stream.lock() = Arc::clone(stream);
    }

    /// Frees now, reporting a backend failure.
    pub(crate) fn free(mut self) -> Result<(), MemError> {
        self.live = false;
        self.release()
    }

    /// Frees on the group's stream, ordered after the last use.
    fn release(&self) -> Result<(), MemError> {
        let stream = self.group_stream();
        self.use_on(&stream)?;
        let backend = stream.backend();
        backend
            .free_device(self.ptr, self.bytes, stream.stream())
            .on(&**backend)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        if let Err(error) = self.release() {
            tracing::warn!(ptr = %self.ptr, %error, "freeing device memory failed");
        }
    }
}
