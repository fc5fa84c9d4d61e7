//! Streams and events as objects a backend hands out: each releases itself
//! when its last reference drops, so none can be used after release.
//!
//! Work on one stream runs in order; work on two streams is ordered only by
//! events. The backend orders nothing itself: its caller does.

use std::any::Any;

use super::{BackendError, DevicePtr, StridedRows};

/// A stream of a backend (CUDA `CUstream`, never the null stream). Dropping
/// the last reference destroys it without waiting for its work.
pub trait Stream: Send + Sync {
    /// A number naming the stream in timelines, hazards and logs.
    fn id(&self) -> u64;

    /// Blocks until all work queued on the stream completed.
    fn synchronize(&self) -> Result<(), BackendError>;

    /// Records an event after the work queued so far.
    fn record(&self) -> Result<Box<dyn Event>, BackendError>;

    /// Makes later work wait for the work before `event`
    /// (`cuStreamWaitEvent`).
    fn wait(&self, event: &dyn Event) -> Result<(), BackendError>;

    /// Copies the pageable slice `src` into device memory at `dst + offset`;
    /// returns once `src` may be reused.
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
    /// memory at `dst + offset` (`cuMemcpyHtoDAsync`). Memory that is not a
    /// [`PinnedBlock`](super::PinnedBlock) of this backend is
    /// [`BackendError::NotPageLocked`].
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
    /// page-locked bytes at `dst` (`cuMemcpyDtoHAsync`).
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

    /// Queues a strided copy of page-locked host rows from `src` into device
    /// memory from `dst + offset` (`cuMemcpy2DAsync`), with no staging.
    /// Bad figures are refused before anything is queued.
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

    /// Queues a strided copy of device memory from `src + offset` into
    /// page-locked host rows from `dst`.
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

    /// The stream as its backend's own type; a decorator returns the one it wraps.
    fn as_any(&self) -> &dyn Any;
}

impl std::fmt::Debug for dyn Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("id", &self.id()).finish()
    }
}

/// An event recorded on a [`Stream`] (CUDA `CUevent`); released when dropped.
pub trait Event: Send + Sync {
    /// Whether the work before the event completed (does not block).
    fn is_complete(&self) -> Result<bool, BackendError>;

    /// Blocks until the work before the event completed
    /// (`cuEventSynchronize`).
    fn synchronize(&self) -> Result<(), BackendError>;

    /// The event as its backend's own type (see [`Stream::as_any`]).
    fn as_any(&self) -> &dyn Any;
}

/// `stream` as the backend's own type `S`, or [`BackendError::Unsupported`].
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
