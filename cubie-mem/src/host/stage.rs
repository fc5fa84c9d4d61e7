//! What keeps page-locked memory safe while asynchronous copies use it.
//!
//! [`queue_upload`] and [`queue_download`] queue the copies themselves. An
//! [`Event`] is a recorded backend event, destroyed when dropped. A
//! [`Stage`] is a staging buffer with the event of the last copy that used
//! it: the host waits for that event before touching the buffer again, and
//! before the buffer goes back to its pool, so neither the host nor the next
//! user of the buffer can see (or spoil) bytes a copy is still moving.

use std::ptr::NonNull;
use std::sync::Arc;

use super::transfer::Stager;
use crate::array::slot::DeviceMemory;
use crate::backend::{Backend, BackendResult, EventHandle, StreamHandle, StridedRows};
use crate::{Element, MemError};

/// Queues a copy of `src` into `device` at element `offset`.
///
/// # Safety
///
/// `src` is page-locked memory of `backend` that stays allocated and
/// unwritten until the work queued on `stream` is done.
pub(super) unsafe fn queue_upload<T: Element>(
    backend: &dyn Backend,
    device: &DeviceMemory,
    label: &str,
    offset: usize,
    src: &[T],
    stream: StreamHandle,
) -> Result<(), MemError> {
    let bytes: &[u8] = bytemuck::cast_slice(src);
    let offset = (offset as u64).saturating_mul(size_of::<T>() as u64);
    // SAFETY: passed on from the caller.
    unsafe {
        backend.copy_to_device_async(device.ptr(), offset, bytes.as_ptr(), bytes.len(), stream)
    }
    .for_array(backend, label)
}

/// Queues a copy of `device` at element `offset` into `dst`.
///
/// # Safety
///
/// `dst` is page-locked memory of `backend` that stays allocated and that
/// no one reads or writes until the work queued on `stream` is done.
pub(super) unsafe fn queue_download<T: Element>(
    backend: &dyn Backend,
    device: &DeviceMemory,
    label: &str,
    offset: usize,
    dst: &mut [T],
    stream: StreamHandle,
) -> Result<(), MemError> {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
    let offset = (offset as u64).saturating_mul(size_of::<T>() as u64);
    let len = bytes.len();
    // SAFETY: passed on from the caller.
    unsafe { backend.copy_from_device_async(bytes.as_mut_ptr(), len, device.ptr(), offset, stream) }
        .for_array(backend, label)
}

/// Queues a strided copy of the host rows from `src` into `device` (from
/// its first element).
///
/// # Safety
///
/// Every row of `rows` from `src` is page-locked memory of `backend` that
/// stays allocated and unwritten until the work queued on `stream` is done.
pub(super) unsafe fn queue_upload_strided<T: Element>(
    backend: &dyn Backend,
    device: &DeviceMemory,
    label: &str,
    src: NonNull<T>,
    rows: StridedRows,
    stream: StreamHandle,
) -> Result<(), MemError> {
    let src = src.as_ptr().cast::<u8>().cast_const();
    // SAFETY: passed on from the caller.
    unsafe { backend.copy_to_device_strided_async(device.ptr(), 0, src, rows, stream) }
        .for_array(backend, label)
}

/// Queues a strided copy of `device` (from its first element) into the
/// host rows from `dst`.
///
/// # Safety
///
/// Every row of `rows` from `dst` is page-locked memory of `backend` that
/// stays allocated and that no one reads or writes until the work queued on
/// `stream` is done.
pub(super) unsafe fn queue_download_strided<T: Element>(
    backend: &dyn Backend,
    device: &DeviceMemory,
    label: &str,
    dst: NonNull<T>,
    rows: StridedRows,
    stream: StreamHandle,
) -> Result<(), MemError> {
    let dst = dst.as_ptr().cast::<u8>();
    // SAFETY: passed on from the caller.
    unsafe { backend.copy_from_device_strided_async(dst, rows, device.ptr(), 0, stream) }
        .for_array(backend, label)
}

/// A recorded event; destroyed when dropped.
pub(super) struct Event {
    backend: Arc<dyn Backend>,
    handle: EventHandle,
}

impl Event {
    /// Records an event after the work queued so far on `stream`.
    pub(super) fn record(
        backend: &Arc<dyn Backend>,
        stream: StreamHandle,
    ) -> Result<Self, MemError> {
        Ok(Event {
            handle: backend.record_event(stream).on(&**backend)?,
            backend: Arc::clone(backend),
        })
    }

    /// Makes later work on `stream` wait for this event.
    pub(super) fn order(&self, stream: StreamHandle) -> Result<(), MemError> {
        self.backend
            .wait_event(stream, self.handle)
            .on(&*self.backend)
    }

    /// Whether the work before the event is done (does not block).
    pub(super) fn is_complete(&self) -> Result<bool, MemError> {
        self.backend.event_complete(self.handle).on(&*self.backend)
    }

    /// Blocks the host until the work before the event is done.
    pub(super) fn wait(&self) -> Result<(), MemError> {
        self.backend
            .synchronize_event(self.handle)
            .on(&*self.backend)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Err(error) = self.backend.destroy_event(self.handle) {
            tracing::warn!(%error, "destroying an event failed");
        }
    }
}

/// A staging buffer and the event of the last asynchronous copy using it.
pub(super) struct Stage<T: Element> {
    stager: Stager<T>,
    pending: Option<Event>,
}

impl<T: Element> Stage<T> {
    pub(super) fn new(stager: Stager<T>) -> Self {
        Stage {
            stager,
            pending: None,
        }
    }

    /// Waits for the last copy that used the buffer. A wait that fails
    /// leaves the copy pending, so the buffer is retired when dropped.
    pub(super) fn settle(&mut self) -> Result<(), MemError> {
        if let Some(event) = &self.pending {
            event.wait()?;
        }
        self.pending = None;
        Ok(())
    }

    /// Whether the last copy that used the buffer is done (does not block).
    pub(super) fn is_settled(&mut self) -> Result<bool, MemError> {
        let settled = match &self.pending {
            Some(event) => event.is_complete()?,
            None => true,
        };
        if settled {
            self.pending = None;
        }
        Ok(settled)
    }

    /// The elements the buffer holds.
    pub(super) fn capacity(&self) -> usize {
        self.stager.len()
    }

    /// Acquires the buffer now (waiting for the pool if need be).
    pub(super) fn reserve(&mut self) -> Result<(), MemError> {
        self.stager.reserve()
    }

    /// Acquires the buffer if the pool has one without waiting; whether it did.
    pub(super) fn try_reserve(&mut self) -> Result<bool, MemError> {
        Ok(self.stager.try_buffer()?.is_some())
    }

    /// The buffer for the host, once no copy uses it.
    pub(super) fn host(&mut self) -> Result<&mut [T], MemError> {
        self.settle()?;
        self.stager.buffer()
    }

    /// Hands the buffer to an asynchronous copy queued by `queue` on
    /// `stream`: it gets the buffer's first `len` elements, and the buffer
    /// is not touched again until an event recorded after the copy fired.
    ///
    /// # Safety
    ///
    /// `queue` must only queue copies on `stream` that use the slice it is
    /// given, and nothing else may keep its address.
    pub(super) unsafe fn lend(
        &mut self,
        backend: &Arc<dyn Backend>,
        stream: StreamHandle,
        len: usize,
        queue: impl FnOnce(&mut [T]) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let buffer = self.host()?;
        let len = len.min(buffer.len());
        let window = buffer.get_mut(..len).unwrap_or(&mut []);
        let queued = queue(window);
        // Even a failed call may have queued part of its work: wait for it
        // before anyone touches the buffer again.
        self.pending = Some(Event::record(backend, stream)?);
        queued
    }
}

impl<T: Element> Drop for Stage<T> {
    fn drop(&mut self) {
        // The buffer goes back to the pool only once no copy uses it; when
        // that cannot be known, it is never reused.
        if let Err(error) = self.settle() {
            tracing::error!(%error, "waiting for a staging copy failed; its buffer is retired");
            self.stager.retire();
        }
    }
}
