//! Asynchronous copies between page-locked host memory and device memory,
//! queued on a stream: the chunk pipeline's and a
//! [`PendingCopy`](crate::PendingCopy)'s.

use std::ptr::NonNull;

use crate::backend::{BackendResult, StridedRows};
use crate::resource::{DeviceMemory, OwnedStream};
use crate::{Element, MemError};

/// Queues a copy of `src` into `device` at element `offset`.
///
/// # Safety
///
/// `src` is page-locked memory of the stream's backend that stays allocated and
/// unwritten until the work queued on `stream` is done.
pub(crate) unsafe fn queue_upload<T: Element>(
    device: &DeviceMemory,
    label: &str,
    offset: usize,
    src: &[T],
    stream: &OwnedStream,
) -> Result<(), MemError> {
    let bytes: &[u8] = bytemuck::cast_slice(src);
    let offset = (offset as u64).saturating_mul(size_of::<T>() as u64);
    // SAFETY: passed on from the caller.
    unsafe {
        stream
            .stream()
            .copy_to_device_async(device.ptr(), offset, bytes.as_ptr(), bytes.len())
    }
    .for_array(&**stream.backend(), label)
}

/// Queues a copy of `device` at element `offset` into `dst`.
///
/// # Safety
///
/// `dst` is page-locked memory of the stream's backend that stays allocated and that
/// no one reads or writes until the work queued on `stream` is done.
pub(crate) unsafe fn queue_download<T: Element>(
    device: &DeviceMemory,
    label: &str,
    offset: usize,
    dst: &mut [T],
    stream: &OwnedStream,
) -> Result<(), MemError> {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
    let offset = (offset as u64).saturating_mul(size_of::<T>() as u64);
    let len = bytes.len();
    // SAFETY: passed on from the caller.
    unsafe {
        stream
            .stream()
            .copy_from_device_async(bytes.as_mut_ptr(), len, device.ptr(), offset)
    }
    .for_array(&**stream.backend(), label)
}

/// Queues a strided copy of the host rows from `src` into `device`.
///
/// # Safety
///
/// Every row of `rows` from `src` is page-locked memory of the stream's backend that
/// stays allocated and unwritten until the work queued on `stream` is done.
pub(crate) unsafe fn queue_upload_strided<T: Element>(
    device: &DeviceMemory,
    label: &str,
    src: NonNull<T>,
    rows: StridedRows,
    stream: &OwnedStream,
) -> Result<(), MemError> {
    let src = src.as_ptr().cast::<u8>().cast_const();
    // SAFETY: passed on from the caller.
    unsafe {
        stream
            .stream()
            .copy_to_device_strided_async(device.ptr(), 0, src, rows)
    }
    .for_array(&**stream.backend(), label)
}

/// Queues a strided copy of `device` into the host rows from `dst`.
///
/// # Safety
///
/// Every row of `rows` from `dst` is page-locked memory of the stream's backend that
/// stays allocated and that no one reads or writes until the work queued on
/// `stream` is done.
pub(crate) unsafe fn queue_download_strided<T: Element>(
    device: &DeviceMemory,
    label: &str,
    dst: NonNull<T>,
    rows: StridedRows,
    stream: &OwnedStream,
) -> Result<(), MemError> {
    let dst = dst.as_ptr().cast::<u8>();
    // SAFETY: passed on from the caller.
    unsafe {
        stream
            .stream()
            .copy_from_device_strided_async(dst, rows, device.ptr(), 0)
    }
    .for_array(&**stream.backend(), label)
}
