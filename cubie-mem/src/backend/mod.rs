//! The device boundary: what the manager needs from a GPU, modelled on the
//! CUDA driver API (streams, events, stream-ordered allocation and free,
//! page-locked host memory, free/total queries).
//!
//! The manager only talks to `dyn Backend`, so the simulated device and the
//! CUDA device are interchangeable.

use std::fmt;

use crate::MemError;

pub mod sim;

#[cfg(feature = "cuda")]
pub mod cuda;

/// Free and total device memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes the device can still allocate (including memory a pool holds idle).
    pub free: u64,
    /// Bytes of device memory in all.
    pub total: u64,
}

/// A backend's stream (CUDA `CUstream`), never the null stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamHandle(pub u64);

/// A backend's event (CUDA `CUevent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventHandle(pub u64);

/// A device address (CUDA `CUdeviceptr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The byte range `offset..offset + len` of an allocation of `size` bytes,
/// or [`MemError::OutOfBounds`] when it does not lie inside it.
pub(crate) fn byte_range(
    offset: u64,
    len: usize,
    size: u64,
) -> Result<std::ops::Range<u64>, MemError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(offset..end),
        _ => Err(MemError::OutOfBounds {
            offset,
            end: offset.saturating_add(len as u64),
            size,
        }),
    }
}

/// A block of page-locked host memory; freed when dropped.
///
/// The bytes are at least 64-byte aligned, so they can be viewed as any
/// element type.
pub trait PinnedBlock: Send + Sync {
    /// The block's bytes.
    fn bytes(&self) -> &[u8];
    /// The block's bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// A device the manager can allocate on.
///
/// Copies between host slices and device memory complete, as far as the host
/// memory is concerned, before they return: the caller's slice may be reused
/// at once. They are ordered after earlier work on `stream`.
pub trait Backend: Send + Sync + 'static {
    /// Short name for messages (`"simulated"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// Free and total device memory.
    fn mem_info(&self) -> Result<MemInfo, MemError>;

    /// Creates a stream that does not synchronise with the null stream.
    fn create_stream(&self) -> Result<StreamHandle, MemError>;

    /// Destroys a stream once its pending work completes.
    fn destroy_stream(&self, stream: StreamHandle) -> Result<(), MemError>;

    /// Blocks until all work queued on `stream` completed.
    fn synchronize(&self, stream: StreamHandle) -> Result<(), MemError>;

    /// Records an event after the work queued so far on `stream`.
    fn record_event(&self, stream: StreamHandle) -> Result<EventHandle, MemError>;

    /// Makes work queued on `stream` after this call wait until the work
    /// before `event` completed (`cuStreamWaitEvent`): how work is ordered
    /// across streams.
    fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<(), MemError>;

    /// Whether the work before `event` completed.
    fn event_complete(&self, event: EventHandle) -> Result<bool, MemError>;

    /// Releases an event.
    fn destroy_event(&self, event: EventHandle) -> Result<(), MemError>;

    /// Allocates `bytes` of device memory ordered on `stream`.
    ///
    /// Out of memory is reported as [`MemError::OutOfMemory`].
    fn alloc_device(&self, bytes: u64, stream: StreamHandle) -> Result<DevicePtr, MemError>;

    /// Frees device memory ordered on `stream`.
    fn free_device(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<(), MemError>;

    /// Allocates `bytes` of page-locked host memory, zero-filled.
    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, MemError>;

    /// Copies `src` into device memory at `dst + offset`, ordered on `stream`.
    fn copy_to_device(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: &[u8],
        stream: StreamHandle,
    ) -> Result<(), MemError>;

    /// Copies device memory at `src + offset` into `dst`, ordered on `stream`.
    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), MemError>;
}
