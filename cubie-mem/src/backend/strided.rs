//! The shape of a strided (2D) asynchronous copy, as `cuMemcpy2DAsync` takes
//! it: rows of contiguous bytes, a pitch apart on each side. A chunk of a
//! host array along any axis is such a region.

use std::fmt;
use std::ops::Range;

use super::BackendError;

/// `rows` rows of `row_bytes` contiguous bytes, `host_pitch` bytes apart on
/// the host and `device_pitch` on the device. Each pitch is at least
/// `row_bytes`.
///
/// ```
/// use cubie_mem::backend::StridedRows;
///
/// // A chunk of runs 4..8 of a [3, 10] f64 array chunked along axis 1:
/// // 3 rows of 4 runs, 10 runs apart on the host, packed on the device.
/// let rows = StridedRows::new(4 * 8, 3, 10 * 8, 4 * 8);
/// assert_eq!(rows.check("copy").unwrap(), 96);
/// assert_eq!(rows.host_span(), Some(2 * 80 + 32));
/// assert!(StridedRows::new(32, 3, 16, 32).check("copy").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StridedRows {
    /// The contiguous bytes of each row.
    pub row_bytes: usize,
    /// The number of rows.
    pub rows: usize,
    /// Bytes from one row's start to the next in host memory.
    pub host_pitch: usize,
    /// Bytes from one row's start to the next in device memory.
    pub device_pitch: u64,
}

impl fmt::Display for StridedRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rows of {} bytes, {} bytes apart on the host and {} on the device",
            self.rows, self.row_bytes, self.host_pitch, self.device_pitch
        )
    }
}

/// The span of `rows` rows of `row_bytes`, `pitch` apart; `None` on overflow.
fn span(row_bytes: u64, rows: u64, pitch: u64) -> Option<u64> {
    match rows.checked_sub(1) {
        None => Some(0),
        Some(gaps) => gaps.checked_mul(pitch)?.checked_add(row_bytes),
    }
}

impl StridedRows {
    /// `rows` rows of `row_bytes`, with the two pitches.
    pub fn new(row_bytes: usize, rows: usize, host_pitch: usize, device_pitch: u64) -> Self {
        StridedRows {
            row_bytes,
            rows,
            host_pitch,
            device_pitch,
        }
    }

    /// The bytes the copy moves; `None` on overflow.
    pub fn bytes(&self) -> Option<u64> {
        (self.row_bytes as u64).checked_mul(self.rows as u64)
    }

    /// The host bytes from the first row's start to the last's end.
    pub fn host_span(&self) -> Option<usize> {
        let span = span(
            self.row_bytes as u64,
            self.rows as u64,
            self.host_pitch as u64,
        )?;
        usize::try_from(span).ok()
    }

    /// The device bytes from the first row's start to the last's end.
    pub fn device_span(&self) -> Option<u64> {
        span(self.row_bytes as u64, self.rows as u64, self.device_pitch)
    }

    /// Checks the figures for `operation` and returns the bytes moved, or
    /// [`BackendError::BadStride`].
    pub fn check(&self, operation: &'static str) -> Result<u64, BackendError> {
        let bad = |reason: &'static str| BackendError::BadStride {
            operation,
            rows: *self,
            reason,
        };
        let moves_bytes = self.rows > 0 && self.row_bytes > 0;
        if moves_bytes && (self.host_pitch < self.row_bytes) {
            return Err(bad(
                "the host pitch is smaller than a row, so rows would overlap; give a pitch of at least the row's bytes",
            ));
        }
        if moves_bytes && self.device_pitch < self.row_bytes as u64 {
            return Err(bad(
                "the device pitch is smaller than a row, so rows would overlap; give a pitch of at least the row's bytes",
            ));
        }
        let overflow =
            "the rows' extent overflows the address range; give fewer rows or smaller pitches";
        let bytes = self.bytes().ok_or_else(|| bad(overflow))?;
        self.host_span().ok_or_else(|| bad(overflow))?;
        self.device_span().ok_or_else(|| bad(overflow))?;
        Ok(bytes)
    }

    /// The host byte ranges of the rows from `start`, touching rows merged.
    pub(crate) fn host_ranges(&self, start: u64) -> Vec<(Range<u64>, usize)> {
        ranges(
            start,
            self.host_pitch as u64,
            self.row_bytes as u64,
            self.rows,
        )
    }

    /// The device byte ranges of the rows from `offset`, as
    /// [`host_ranges`](Self::host_ranges).
    pub(crate) fn device_ranges(&self, offset: u64) -> Vec<(Range<u64>, usize)> {
        ranges(offset, self.device_pitch, self.row_bytes as u64, self.rows)
    }
}

/// The byte ranges of `rows` rows of `row_bytes`, `pitch` apart from `start`.
fn ranges(start: u64, pitch: u64, row_bytes: u64, rows: usize) -> Vec<(Range<u64>, usize)> {
    if rows == 0 || row_bytes == 0 {
        return Vec::new();
    }
    if pitch == row_bytes {
        let end = start.saturating_add(row_bytes.saturating_mul(rows as u64));
        return vec![(start..end, rows)];
    }
    (0..rows as u64)
        .map(|row| {
            let first = start.saturating_add(row.saturating_mul(pitch));
            (first..first.saturating_add(row_bytes), 1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitches_smaller_than_a_row_are_refused_with_the_figures() {
        let error = StridedRows::new(64, 2, 32, 64).check("copy").unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("2 rows of 64 bytes, 32 bytes apart on the host"),
            "{message}"
        );
        assert!(message.contains("host pitch is smaller"), "{message}");
        let error = StridedRows::new(64, 2, 64, 63).check("copy").unwrap_err();
        assert!(error.to_string().contains("device pitch is smaller"));
        // Nothing moves: any pitch will do.
        assert_eq!(StridedRows::new(0, 5, 0, 0).check("copy"), Ok(0));
        assert_eq!(StridedRows::new(8, 0, 0, 0).check("copy"), Ok(0));
    }

    #[test]
    fn extents_that_overflow_are_refused() {
        for rows in [
            StridedRows::new(usize::MAX, 2, usize::MAX, u64::MAX),
            StridedRows::new(1, usize::MAX, usize::MAX, 1),
            StridedRows::new(1, usize::MAX, 1, u64::MAX),
        ] {
            let error = rows.check("copy").unwrap_err();
            assert!(
                matches!(error, BackendError::BadStride { .. })
                    && error.to_string().contains("overflows"),
                "{error}"
            );
        }
    }

    #[test]
    fn rows_merge_only_when_they_touch() {
        let rows = StridedRows::new(8, 3, 20, 8);
        assert_eq!(
            rows.host_ranges(100),
            vec![(100..108, 1), (120..128, 1), (140..148, 1)]
        );
        assert_eq!(rows.device_ranges(16), vec![(16..40, 3)]);
        assert_eq!(rows.host_span(), Some(48));
        assert_eq!(rows.device_span(), Some(24));
        assert!(StridedRows::new(0, 3, 0, 0).host_ranges(0).is_empty());
    }
}
