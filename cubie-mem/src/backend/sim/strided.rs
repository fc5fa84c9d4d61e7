//! Strided (2D) asynchronous copies on the simulated device, checked row by
//! row as strictly as contiguous ones, and timed with a cost per row
//! ([`DeviceClock::strided_copy_ns`](super::clock::DeviceClock::strided_copy_ns)).

use std::ops::Range;
use std::time::Duration;

use super::SimState;
use super::clock::{Engine, Work};
use crate::Bytes;
use crate::backend::{BackendError, DevicePtr, StridedRows};
use crate::timeline::Activity;

/// A strided copy whose figures were checked.
struct Checked {
    bytes: u64,
    host: Vec<(Range<u64>, usize)>,
    device: Vec<(Range<u64>, usize)>,
}

impl SimState {
    /// Checks everything a strided copy on `engine` needs before anything changes.
    #[allow(clippy::too_many_arguments)]
    fn check_strided(
        &mut self,
        operation: &'static str,
        engine: Engine,
        host: usize,
        ptr: DevicePtr,
        offset: u64,
        rows: StridedRows,
        stream: u64,
    ) -> Result<Checked, BackendError> {
        let bytes = rows.check(operation)?;
        let duration = self.clock.strided_copy_ns(engine, bytes, rows.rows as u64);
        self.clock
            .fits(operation, engine, stream, Duration::from_nanos(duration))?;
        let size = self.block(ptr, operation)?.len();
        // `check` bounded the span.
        let span = rows.device_span().unwrap_or(u64::MAX);
        match offset.checked_add(span) {
            Some(end) if end <= size => {}
            _ => {
                return Err(BackendError::OutOfBounds {
                    operation,
                    offset,
                    end: offset.saturating_add(span),
                    size,
                });
            }
        }
        let span = rows.host_span().unwrap_or(usize::MAX);
        let ranges = rows.host_ranges(host as u64);
        // One block holding every row is found at once; else each row is
        // checked, and the first outside one is reported.
        if self.check_page_locked(operation, host, span).is_err() {
            for (range, _) in &ranges {
                let len = usize::try_from(range.end - range.start).unwrap_or(usize::MAX);
                self.check_page_locked(operation, range.start as usize, len)?;
            }
        }
        Ok(Checked {
            bytes,
            host: ranges,
            device: rows.device_ranges(offset),
        })
    }

    /// Places a strided copy of `checked` on `engine`'s clock.
    fn timed_strided(&mut self, engine: Engine, stream: u64, checked: &Checked, rows: StridedRows) {
        let (activity, direction) = match engine {
            Engine::DeviceToHost => (Activity::DeviceToHost, "download"),
            Engine::HostToDevice | Engine::Compute | Engine::Host => {
                (Activity::HostToDevice, "upload")
            }
        };
        let duration = self
            .clock
            .strided_copy_ns(engine, checked.bytes, rows.rows as u64);
        let call = self.clock.calls().copy_ns;
        self.clock.call("copy call", call);
        self.clock.run(
            engine,
            duration,
            Work {
                activity,
                name: format!("{direction} {} in {} rows", Bytes(checked.bytes), rows.rows),
                stream,
                bytes: checked.bytes,
            },
        );
    }

    /// Checks and performs a strided copy of the page-locked rows from
    /// `src` into device memory from `dst + offset` on `stream`.
    ///
    /// # Safety
    ///
    /// Every row's bytes are readable, and left alone until the copy
    /// completes (the asynchronous copy's contract).
    pub(super) unsafe fn copy_in_strided(
        &mut self,
        dst: DevicePtr,
        offset: u64,
        src: *const u8,
        rows: StridedRows,
        stream: u64,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous strided copy to device";
        let engine = Engine::HostToDevice;
        let checked =
            self.check_strided(OPERATION, engine, src.addr(), dst, offset, rows, stream)?;
        let at = self.order.next(stream);
        for (range, _) in &checked.device {
            self.order.check_device(OPERATION, at, dst, range, true)?;
        }
        for (range, _) in &checked.host {
            self.order.check_pinned(OPERATION, at, range, false)?;
        }
        let block = self.block(dst, OPERATION)?;
        for row in 0..rows.rows {
            // Inside the spans `check` bounded.
            let host = row.saturating_mul(rows.host_pitch);
            let device = offset.saturating_add((row as u64).saturating_mul(rows.device_pitch));
            // SAFETY: the row lies in a live page-locked block of this
            // device or of a peer it accepts (checked above, under this
            // device's lock), and the caller leaves it alone meanwhile.
            let bytes = unsafe { std::slice::from_raw_parts(src.add(host), rows.row_bytes) };
            block.write(OPERATION, device, bytes)?;
        }
        for (range, _) in &checked.device {
            self.order
                .wrote_device(at, dst, range.clone(), "written by a copy");
        }
        for (range, _) in &checked.host {
            self.order.used_pinned(at, range.clone(), None);
        }
        self.timed_strided(engine, stream, &checked, rows);
        Ok(())
    }

    /// Checks and performs a strided copy of device memory from `src +
    /// offset` into the page-locked rows from `dst` on `stream`.
    pub(super) fn copy_out_strided(
        &mut self,
        dst: *mut u8,
        rows: StridedRows,
        src: DevicePtr,
        offset: u64,
        stream: u64,
    ) -> Result<(), BackendError> {
        const OPERATION: &str = "asynchronous strided copy from device";
        let engine = Engine::DeviceToHost;
        let checked =
            self.check_strided(OPERATION, engine, dst.addr(), src, offset, rows, stream)?;
        let at = self.order.next(stream);
        for (range, _) in &checked.device {
            self.order.check_device(OPERATION, at, src, range, false)?;
        }
        for (range, _) in &checked.host {
            self.order.check_pinned(OPERATION, at, range, true)?;
        }
        let len = usize::try_from(checked.bytes).unwrap_or(usize::MAX);
        let mut data = Vec::new();
        data.try_reserve_exact(len).map_err(|_| {
            self.out_of_memory(crate::backend::MemorySpace::PageLocked, checked.bytes)
        })?;
        data.resize(len, 0);
        let block = self.block(src, OPERATION)?;
        for (row, part) in data.chunks_exact_mut(rows.row_bytes.max(1)).enumerate() {
            let device = offset.saturating_add((row as u64).saturating_mul(rows.device_pitch));
            block.read(OPERATION, device, part)?;
        }
        let mut rest = data.as_slice();
        for (range, held) in &checked.host {
            let (landing, after) =
                rest.split_at(held.saturating_mul(rows.row_bytes).min(rest.len()));
            self.order
                .used_pinned(at, range.clone(), Some(landing.to_vec()));
            rest = after;
        }
        for (range, _) in &checked.device {
            self.order.read_device(at, src, range.clone());
        }
        self.timed_strided(engine, stream, &checked, rows);
        Ok(())
    }
}
