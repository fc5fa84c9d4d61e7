//! Strided copies on the CUDA driver: one `cuMemcpy2DAsync_v2` per copy,
//! checked before the driver sees it: the figures, every host row
//! page-locked memory of this backend (or of a peer it accepts), and the
//! device rows inside one live allocation.

use std::ffi::c_void;

use super::stream::{CudaStream, HostSide};
use super::sys::{self, CuMemcpy2D, MEMORYTYPE_DEVICE, MEMORYTYPE_HOST};
use crate::backend::{BackendError, DevicePtr, StridedRows};

/// The largest pitch a 2D copy takes: `cuMemcpy2D` refuses a pitch above
/// the device's `CU_DEVICE_ATTRIBUTE_MAX_PITCH`, 2^31 - 1 bytes on every
/// GPU since compute capability 2.0. Rows further apart move by one
/// contiguous copy each.
const MAX_PITCH: usize = i32::MAX as usize;

impl CudaStream {
    /// Checks a strided copy between `host` and `device + offset` and
    /// queues it (timed when the timeline records).
    ///
    /// # Safety
    ///
    /// Every host row stays allocated until the copy completed, and nothing
    /// else writes it (for a download: reads or writes it) until then.
    pub(super) unsafe fn queue_strided(
        &self,
        device: DevicePtr,
        offset: u64,
        host: HostSide,
        rows: StridedRows,
        operation: &'static str,
    ) -> Result<(), BackendError> {
        let bytes = rows.check(operation)?;
        let pinned = self.backend().pinned();
        let span = rows.host_span().unwrap_or(usize::MAX);
        // One block holding every row is found at once; else each row is
        // checked, and the first outside one is reported.
        if pinned
            .check_page_locked(operation, host.address(), span)
            .is_err()
        {
            for (range, _) in rows.host_ranges(host.address() as u64) {
                let len = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
                pinned.check_page_locked(operation, range.start as usize, len)?;
            }
        }
        // `check` bounded the span; one past usize cannot lie in an allocation.
        let span = rows
            .device_span()
            .and_then(|span| usize::try_from(span).ok())
            .unwrap_or(usize::MAX);
        let address = self
            .backend()
            .device_address(device, offset, span, operation)?;
        if span == 0 || bytes == 0 {
            return Ok(());
        }
        let too_far = rows.host_pitch > MAX_PITCH || rows.device_pitch > MAX_PITCH as u64;
        let copies: Vec<CuMemcpy2D> = if too_far {
            (0..rows.rows)
                .map(|row| {
                    let one =
                        StridedRows::new(rows.row_bytes, 1, rows.row_bytes, rows.row_bytes as u64);
                    let host_at = row.saturating_mul(rows.host_pitch);
                    let device_at = (row as u64).saturating_mul(rows.device_pitch);
                    describe(host, host_at, address.saturating_add(device_at), one)
                })
                .collect()
        } else {
            vec![describe(host, 0, address, rows)]
        };
        let context = self.context();
        let _guard = context.enter(operation)?;
        let recorder = self.backend().recorder();
        let started = recorder.start(self);
        let mut queued = Ok(());
        for copy in &copies {
            // SAFETY: the device rows lie inside a live allocation (checked
            // above). The host rows are page-locked memory the caller keeps
            // valid until the copy completed; the driver keeps no reference
            // to `copy` after the call.
            let result = unsafe { sys::cuMemcpy2DAsync(copy, self.raw_stream()) };
            queued = context.check(result, operation);
            if queued.is_err() {
                break;
            }
        }
        let activity = host.activity();
        recorder.finish(started, self, activity, activity.category(), bytes);
        queued
    }
}

/// The `CUDA_MEMCPY2D` of `rows` between the host rows `host_at` bytes
/// after `host`'s address and the device rows at `device`.
fn describe(host: HostSide, host_at: usize, device: u64, rows: StridedRows) -> CuMemcpy2D {
    let mut copy = CuMemcpy2D {
        src_x_in_bytes: 0,
        src_y: 0,
        src_memory_type: MEMORYTYPE_DEVICE,
        src_host: std::ptr::null(),
        src_device: device,
        src_array: std::ptr::null_mut(),
        src_pitch: rows.device_pitch as usize,
        dst_x_in_bytes: 0,
        dst_y: 0,
        dst_memory_type: MEMORYTYPE_DEVICE,
        dst_host: std::ptr::null_mut(),
        dst_device: device,
        dst_array: std::ptr::null_mut(),
        dst_pitch: rows.device_pitch as usize,
        width_in_bytes: rows.row_bytes,
        height: rows.rows,
    };
    match host {
        HostSide::Source(src) => {
            copy.src_memory_type = MEMORYTYPE_HOST;
            copy.src_host = src.wrapping_add(host_at).cast::<c_void>();
            copy.src_device = 0;
            copy.src_pitch = rows.host_pitch;
        }
        HostSide::Target(dst) => {
            copy.dst_memory_type = MEMORYTYPE_HOST;
            copy.dst_host = dst.wrapping_add(host_at).cast::<c_void>();
            copy.dst_device = 0;
            copy.dst_pitch = rows.host_pitch;
        }
    }
    copy
}
