//! Streams and events as objects a backend hands out: each releases itself
//! when its last reference drops, so nothing is looked up by handle and
//! nothing can be used after it was released.
//!
//! A stream carries the work queued on it: copies, waits, events. Work on
//! one stream runs in order; work on two streams is ordered only by an
//! event recorded on one and waited for on the other. The backend does not
//! order anything by itself: its caller orders its streams (the manager's
//! owning layer does, for every allocation it holds).

use std::any::Any;

use super::{BackendError, DevicePtr, StridedRows};

/// A stream of a backend (CUDA `CUstream`, never the null stream). Dropping
/// the last reference destroys it without waiting: its queued work still
/// runs, and stays ordered before work that waited for its events.
pub trait Stream: Send + Sync {
    /// A number naming the stream in timelines, hazards and logs; two
    /// streams with one number are one device stream (an external stream
    /// bound twice).
    fn id(&self) -> u64;

    /// Blocks until all work queued on the stream completed.
    fn synchronize(&self) -> Result<(), BackendError>;

    /// Records an event after the work queued so far.
    fn record(&self) -> Result<Box<dyn Event>, BackendError>;

    /// Makes work queued after this call wait until the work before
    /// `event` completed (`cuStreamWaitEvent`). An event of another device
    /// is refused.
    fn wait(&self, event: &dyn Event) -> Result<(), BackendError>;

    /// Copies the pageable slice `src` into device memory at `dst + offset`
    /// after the work queued so far; returns once `src` may be reused (the
    /// host waits for the copy).
    fn copy_to_device(&self, dst: DevicePtr, offset: u64, src: &[u8]) -> Result<(), BackendError>;

    /// Copies device memory at `src + offset` into the pageable slice `dst`
    /// after the work queued so far; returns once `dst` holds it.
    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError>;

    /// Queues a copy of the `len` page-locked bytes at `src` into device
    /// memory at `dst + offset`, and returns at once (`cuMemcpyHtoDAsync`).
    /// Record an event after it to know when it is done.
    ///
    /// Host memory that is not a [`PinnedBlock`](super::PinnedBlock) of this
    /// backend is refused with [`BackendError::NotPageLocked`] before
    /// anything is queued.
    ///
    /// # Safety
    ///
    /// `src..src + len` must be readable now and stay allocated and
    /// unwritten until the copy completed: until an event recorded after it
    /// has fired (polled true or waited for), or the stream was
    /// synchronised.
    unsafe fn copy_to_device_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), BackendError>;

    /// Queues a copy of device memory at `src + offset` into the `len`
    /// page-locked bytes at `dst`, and returns at once
    /// (`cuMemcpyDtoHAsync`); refused as
    /// [`copy_to_device_async`](Self::copy_to_device_async) is.
    ///
    /// # Safety
    ///
    /// `dst..dst + len` must stay allocated, and be neither read nor written
    /// by anyone else until the copy completed.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        len: usize,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError>;

    /// Queues a strided copy of page-locked host rows into device memory,
    /// and returns at once (`cuMemcpy2DAsync`): `rows.rows` rows of
    /// `rows.row_bytes` bytes, the first at `src` and each `rows.host_pitch`
    /// bytes after the last, into device memory from `dst + offset`,
    /// `rows.device_pitch` bytes apart. The copy engine moves them, with no
    /// staging and no host work.
    ///
    /// Refused before anything is queued: figures that do not describe rows
    /// ([`BackendError::BadStride`]), device rows outside the allocation
    /// ([`BackendError::OutOfBounds`]), host rows that are not page-locked
    /// memory of this backend ([`BackendError::NotPageLocked`]).
    ///
    /// # Safety
    ///
    /// As for [`copy_to_device_async`](Self::copy_to_device_async), for the
    /// bytes of every row (the bytes between rows are not touched).
    unsafe fn copy_to_device_strided_async(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        rows: StridedRows,
    ) -> Result<(), BackendError>;

    /// Queues a strided copy of device memory from `src + offset`,
    /// `rows.device_pitch` bytes apart, into page-locked host rows from
    /// `dst`, `rows.host_pitch` bytes apart, and returns at once; refused as
    /// [`copy_to_device_strided_async`](Self::copy_to_device_strided_async) is.
    ///
    /// # Safety
    ///
    /// As for [`copy_from_device_async`](Self::copy_from_device_async), for
    /// the bytes of every row.
    unsafe fn copy_from_device_strided_async(
        &self,
        dst: *mut u8,
        rows: StridedRows,
        src: DevicePtr,
        offset: u64,
    ) -> Result<(), BackendError>;

    /// The stream as its backend's own type, so that the backend recognises
    /// its streams when they come back (an allocation, a launch, a wait). A
    /// decorator returns the stream it wraps.
    fn as_any(&self) -> &dyn Any;
}

impl std::fmt::Debug for dyn Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("id", &self.id()).finish()
    }
}

/// An event recorded on a [`Stream`] (CUDA `CUevent`); released when
/// dropped.
pub trait Event: Send + Sync {
    /// Whether the work before the event completed (does not block).
    fn is_complete(&self) -> Result<bool, BackendError>;

    /// Blocks until the work before the event completed
    /// (`cuEventSynchronize`).
    fn synchronize(&self) -> Result<(), BackendError>;

    /// The event as its backend's own type (see [`Stream::as_any`]).
    fn as_any(&self) -> &dyn Any;
}

/// `stream` as the backend's own type `S`, or [`BackendError::Unsupported`]
/// naming `operation` when it belongs to another backend.
pub(crate) fn own<'a, S: 'static>(
    any: &'a dyn Any,
    operation: &'static str,
    what: &str,
) -> Result<&'a S, BackendError> {
    any.downcast_ref::<S>()
        .ok_or_else(|| BackendError::Unsupported {
            operation,
            reason: format!("the {what} belongs to another backend; use one made by this one"),
        })
}
