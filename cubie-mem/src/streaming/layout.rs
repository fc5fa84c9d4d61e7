//! Where a chunk's runs sit in the host array of the whole batch and in the
//! device array of one chunk, and the gather and scatter between them; see
//! [chunked transfers](crate::guide::host_memory#chunked-transfers).

use std::ops::Range;

use crate::MemError;
use crate::backend::StridedRows;

/// The geometry of one chunked array: full shape, chunk axis, chunk length.
///
/// ```
/// use cubie_mem::ChunkLayout;
///
/// // 2 x 5 x 3, chunked along the middle axis in chunks of 2 runs.
/// let layout = ChunkLayout::new(&[2, 5, 3], 1, 2).unwrap();
/// assert_eq!(layout.chunk_shape(), [2, 2, 3]);
/// let host: Vec<u32> = (0..30).collect();
/// let mut chunk = vec![0; layout.chunk_elements()];
/// layout.gather(&host, 2..4, 0, &mut chunk).unwrap();
/// assert_eq!(chunk, [6, 7, 8, 9, 10, 11, 21, 22, 23, 24, 25, 26]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkLayout {
    shape: Vec<usize>,
    axis: usize,
    outer: usize,
    axis_length: usize,
    chunk_length: usize,
    inner: usize,
    elements: usize,
    chunk_elements: usize,
}

impl ChunkLayout {
    /// The layout of an array of full `shape` chunked along `axis` in chunks
    /// of `chunk_length` runs.
    pub fn new(shape: &[usize], axis: usize, chunk_length: usize) -> Result<Self, MemError> {
        let too_large = || MemError::HostArraySize {
            shape: shape.to_vec(),
            element_bytes: 1,
        };
        let (before, rest) = (shape.get(..axis), shape.get(axis..));
        let (Some(before), Some([axis_length, after @ ..])) = (before, rest) else {
            return Err(MemError::InvalidChunkAxis {
                axis,
                shape: shape.to_vec(),
            });
        };
        let product = |dims: &[usize]| dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let axis_length = *axis_length;
        let outer = product(before).ok_or_else(too_large)?;
        let inner = product(after).ok_or_else(too_large)?;
        let elements = product(&[outer, axis_length, inner]).ok_or_else(too_large)?;
        let chunk_elements = product(&[outer, chunk_length, inner]).ok_or_else(too_large)?;
        Ok(ChunkLayout {
            shape: shape.to_vec(),
            axis,
            outer,
            axis_length,
            chunk_length,
            inner,
            elements,
            chunk_elements,
        })
    }

    /// The full shape (the host array's).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The chunk axis.
    pub fn axis(&self) -> usize {
        self.axis
    }

    /// The shape of one chunk (the device array's): the full shape with the
    /// chunk axis set to the chunk length.
    pub fn chunk_shape(&self) -> Vec<usize> {
        let mut shape = self.shape.clone();
        if let Some(d) = shape.get_mut(self.axis) {
            *d = self.chunk_length;
        }
        shape
    }

    /// Elements of the full array.
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// Elements of one chunk.
    pub fn chunk_elements(&self) -> usize {
        self.chunk_elements
    }

    /// The device elements a chunk of `runs` runs spans: from the first
    /// element to the end of its last block. The unused runs after the last
    /// block are not part of it.
    pub fn chunk_extent(&self, runs: usize) -> usize {
        if runs == 0 || self.outer == 0 || self.inner == 0 {
            return 0;
        }
        // Both terms are at most chunk_elements, a checked product.
        let full_rows = (self.outer - 1)
            .saturating_mul(self.chunk_length)
            .saturating_mul(self.inner);
        full_rows.saturating_add(runs.min(self.chunk_length).saturating_mul(self.inner))
    }

    /// The host range holding the chunk `runs` as one block laid out as on
    /// the device, when there is one: every dimension before the axis is 1,
    /// or the chunk is the whole array. `None` for runs outside the axis.
    pub fn contiguous_range(&self, runs: &Range<usize>) -> Option<Range<usize>> {
        if runs.start > runs.end || runs.end > self.axis_length {
            None
        } else if self.outer <= 1 {
            Some(runs.start.checked_mul(self.inner)?..runs.end.checked_mul(self.inner)?)
        } else if runs.start == 0
            && runs.end == self.axis_length
            && self.chunk_length == self.axis_length
        {
            Some(0..self.elements)
        } else {
            None
        }
    }

    /// The layout of the bytes of this layout's elements of `element_bytes`
    /// each: an innermost axis of that length.
    pub(crate) fn of_bytes(&self, element_bytes: usize) -> Result<ChunkLayout, MemError> {
        let mut shape = self.shape.clone();
        shape.push(element_bytes);
        ChunkLayout::new(&shape, self.axis, self.chunk_length)
    }

    /// Chunk `runs` as the rows of one strided copy of elements of
    /// `element_bytes`: the host element where its first row starts, and
    /// `outer` rows of `runs x inner` elements, `axis_length x inner`
    /// elements apart in the host array and `chunk_length x inner` apart
    /// (packed) in the device array. `None` for runs outside the axis or
    /// longer than a chunk, and for figures that overflow.
    pub(crate) fn strided_rows(
        &self,
        runs: &Range<usize>,
        element_bytes: usize,
    ) -> Option<(usize, StridedRows)> {
        if runs.start > runs.end || runs.end > self.axis_length || runs.len() > self.chunk_length {
            return None;
        }
        let bytes = |elements: usize| elements.checked_mul(self.inner)?.checked_mul(element_bytes);
        let device_pitch = u64::try_from(bytes(self.chunk_length)?).ok()?;
        let rows = StridedRows::new(
            bytes(runs.len())?,
            self.outer,
            bytes(self.axis_length)?,
            device_pitch,
        );
        Some((runs.start.checked_mul(self.inner)?, rows))
    }

    /// Copies the runs `runs` of `host` (the whole array) into `staging`,
    /// which stands for the device elements `window_start..window_start +
    /// staging.len()` of one chunk. Elements of unused runs are left as they
    /// were.
    pub fn gather<T: Copy>(
        &self,
        host: &[T],
        runs: Range<usize>,
        window_start: usize,
        staging: &mut [T],
    ) -> Result<(), MemError> {
        let window_len = staging.len();
        self.blocks(
            host.len(),
            &runs,
            window_start,
            window_len,
            |staged, hosted| match (staging.get_mut(staged), host.get(hosted)) {
                (Some(dst), Some(src)) => {
                    dst.copy_from_slice(src);
                    Ok(())
                }
                _ => Err(self.window_error(window_start, window_len)),
            },
        )
    }

    /// The inverse of [`gather`](Self::gather): copies the valid runs of the
    /// device window held in `staging` into their places in `host`.
    pub fn scatter<T: Copy>(
        &self,
        staging: &[T],
        window_start: usize,
        runs: Range<usize>,
        host: &mut [T],
    ) -> Result<(), MemError> {
        let window_len = staging.len();
        self.blocks(
            host.len(),
            &runs,
            window_start,
            window_len,
            |staged, hosted| match (host.get_mut(hosted), staging.get(staged)) {
                (Some(dst), Some(src)) => {
                    dst.copy_from_slice(src);
                    Ok(())
                }
                _ => Err(self.window_error(window_start, window_len)),
            },
        )
    }

    /// How many contiguous host blocks (rows) a gather or scatter of `runs`
    /// runs through the device window `[window_start, +window_len)` copies,
    /// as [`blocks`](Self::blocks) visits them: for a modelled host's
    /// per-row cost.
    pub(crate) fn rows_in(&self, runs: usize, window_start: usize, window_len: usize) -> u64 {
        let row = self.chunk_length.saturating_mul(self.inner);
        let block = runs.min(self.chunk_length).saturating_mul(self.inner);
        let window_end = window_start.saturating_add(window_len);
        if row == 0 || block == 0 || window_len == 0 || self.outer == 0 {
            return 0;
        }
        // A row's block starts each `row` elements; the window's first
        // offset may lie in the gap after a block.
        let first = window_start / row + usize::from(window_start % row >= block);
        let last = ((window_end - 1) / row).min(self.outer - 1);
        last.checked_sub(first).map_or(0, |span| span as u64 + 1)
    }

    fn window_error(&self, start: usize, len: usize) -> MemError {
        MemError::StagingWindow {
            start,
            len,
            chunk_elements: self.chunk_elements,
        }
    }

    /// Checks a gather or scatter of `runs` through the device window
    /// `[window_start, +window_len)` against a host array of `host_len`
    /// elements, then calls `copy(staging_range, host_range)` for each of
    /// its contiguous blocks.
    pub(crate) fn blocks(
        &self,
        host_len: usize,
        runs: &Range<usize>,
        window_start: usize,
        window_len: usize,
        mut copy: impl FnMut(Range<usize>, Range<usize>) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        if host_len != self.elements {
            return Err(MemError::LengthMismatch {
                label: "host".into(),
                expected: self.elements,
                found: host_len,
            });
        }
        if runs.start > runs.end || runs.end > self.axis_length || runs.len() > self.chunk_length {
            return Err(MemError::InvalidChunkRuns {
                start: runs.start,
                end: runs.end,
                axis_length: self.axis_length,
                chunk_length: self.chunk_length,
            });
        }
        let window_end = match window_start.checked_add(window_len) {
            Some(end) if end <= self.chunk_elements => end,
            _ => return Err(self.window_error(window_start, window_len)),
        };
        if self.outer == 0 {
            return Ok(());
        }
        // With outer >= 1 these products are at most the checked element
        // counts (the runs and the window are bounded above).
        let product = |a: usize, b: usize| {
            a.checked_mul(b)
                .ok_or_else(|| self.window_error(window_start, window_len))
        };
        let row = product(self.chunk_length, self.inner)?;
        let block = product(runs.len(), self.inner)?;
        if row == 0 || block == 0 {
            return Ok(());
        }
        let host_row = product(self.axis_length, self.inner)?;
        let first_host = product(runs.start, self.inner)?;
        let mut outer = window_start / row;
        while outer < self.outer {
            let device_start = outer * row;
            if device_start >= window_end {
                break;
            }
            let start = device_start.max(window_start);
            let end = (device_start + block).min(window_end);
            if start < end {
                let host_start = outer * host_row + first_host + (start - device_start);
                copy(
                    start - window_start..end - window_start,
                    host_start..host_start + (end - start),
                )?;
            }
            outer += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Element-by-element reference of the device image of a chunk.
    fn reference(
        shape: &[usize],
        axis: usize,
        chunk_length: usize,
        runs: Range<usize>,
    ) -> Vec<Option<usize>> {
        let outer: usize = shape[..axis].iter().product();
        let inner: usize = shape[axis + 1..].iter().product();
        let mut out = vec![None; outer * chunk_length * inner];
        for o in 0..outer {
            for r in 0..runs.len() {
                for i in 0..inner {
                    let host = (o * shape[axis] + runs.start + r) * inner + i;
                    out[(o * chunk_length + r) * inner + i] = Some(host);
                }
            }
        }
        out
    }

    #[test]
    fn gather_matches_reference_for_every_axis_and_window() {
        let shape = [3, 7, 4];
        for axis in 0..3 {
            let total = shape[axis];
            let chunk_length = 3;
            let layout = ChunkLayout::new(&shape, axis, chunk_length).unwrap();
            let host: Vec<usize> = (0..layout.elements()).collect();
            for start in (0..total).step_by(chunk_length) {
                let runs = start..(start + chunk_length).min(total);
                let expected = reference(&shape, axis, chunk_length, runs.clone());
                for window in [1, 5, layout.chunk_elements()] {
                    let mut device = vec![usize::MAX; layout.chunk_elements()];
                    let extent = layout.chunk_extent(runs.len());
                    for w in (0..extent).step_by(window) {
                        let end = (w + window).min(extent);
                        layout
                            .gather(&host, runs.clone(), w, &mut device[w..end])
                            .unwrap();
                    }
                    for (got, want) in device.iter().zip(&expected) {
                        if let Some(want) = want {
                            assert_eq!(got, want, "axis {axis} runs {runs:?} window {window}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rows_in_counts_the_blocks_a_window_copies() {
        // Every window of every chunk; smaller under Miri, which is slow.
        let shape = if cfg!(miri) { [2, 3, 2] } else { [3, 7, 4] };
        for axis in 0..3 {
            for chunk_length in [1, 2, shape[axis]] {
                let layout = ChunkLayout::new(&shape, axis, chunk_length).unwrap();
                let chunk = layout.chunk_elements();
                for runs in 0..=chunk_length {
                    for start in 0..chunk {
                        for len in 0..=chunk - start {
                            let mut visited = 0;
                            layout
                                .blocks(layout.elements(), &(0..runs), start, len, |_, _| {
                                    visited += 1;
                                    Ok(())
                                })
                                .unwrap();
                            assert_eq!(
                                layout.rows_in(runs, start, len),
                                visited,
                                "axis {axis}, chunks of {chunk_length}, {runs} runs, \
                                 window {start}+{len}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(matches!(
            ChunkLayout::new(&[2, 3], 2, 1),
            Err(MemError::InvalidChunkAxis { axis: 2, .. })
        ));
        let layout = ChunkLayout::new(&[2, 3], 1, 2).unwrap();
        let host = [0u8; 6];
        let mut staging = [0u8; 4];
        assert!(matches!(
            layout.gather(&host, 1..4, 0, &mut staging),
            Err(MemError::InvalidChunkRuns { .. })
        ));
        assert!(matches!(
            layout.gather(&host, 0..3, 0, &mut staging),
            Err(MemError::InvalidChunkRuns { .. })
        ));
        assert!(matches!(
            layout.gather(&host, 0..2, 1, &mut staging),
            Err(MemError::StagingWindow { .. })
        ));
        assert!(matches!(
            layout.gather(&host[..5], 0..2, 0, &mut staging),
            Err(MemError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn a_chunk_is_outer_rows_of_its_runs_a_host_row_apart() {
        // [2, 10, 3] f32 chunked along axis 1 in chunks of 4: runs 8..10.
        let layout = ChunkLayout::new(&[2, 10, 3], 1, 4).unwrap();
        let (first, rows) = layout.strided_rows(&(8..10), 4).unwrap();
        assert_eq!(first, 24);
        assert_eq!(rows, StridedRows::new(2 * 3 * 4, 2, 10 * 3 * 4, 4 * 3 * 4));
        assert_eq!(layout.strided_rows(&(6..11), 4), None, "past the axis");
        assert_eq!(layout.strided_rows(&(0..5), 4), None, "longer than a chunk");
        let huge = ChunkLayout::new(&[2, 4, 1 << 40], 1, 2).unwrap();
        assert_eq!(huge.strided_rows(&(0..2), 1 << 30), None, "overflows");
    }

    #[test]
    fn contiguous_cases() {
        let layout = ChunkLayout::new(&[1, 10, 2], 1, 4).unwrap();
        assert_eq!(layout.contiguous_range(&(4..8)), Some(8..16));
        let layout = ChunkLayout::new(&[2, 10], 1, 4).unwrap();
        assert_eq!(layout.contiguous_range(&(4..8)), None);
        let whole = ChunkLayout::new(&[2, 10], 1, 10).unwrap();
        assert_eq!(whole.contiguous_range(&(0..10)), Some(0..20));
        let layout = ChunkLayout::new(&[1, 10, 2], 1, 4).unwrap();
        assert_eq!(layout.contiguous_range(&(8..11)), None, "past the axis");
        assert_eq!(layout.contiguous_range(&(usize::MAX - 1..usize::MAX)), None);
    }

    #[test]
    fn empty_arrays_with_huge_dimensions_do_not_overflow() {
        // No element, but chunk_length * inner overflows: nothing to copy.
        let layout = ChunkLayout::new(&[0, usize::MAX, 2], 1, usize::MAX).unwrap();
        assert_eq!((layout.elements(), layout.chunk_elements()), (0, 0));
        assert_eq!(layout.chunk_extent(usize::MAX), 0);
        let mut staging: [u8; 0] = [];
        layout.gather(&[], 0..usize::MAX, 0, &mut staging).unwrap();
        layout.scatter(&staging, 0, 5..10, &mut []).unwrap();
        assert!(matches!(
            ChunkLayout::new(&[2, usize::MAX, 2], 1, 1),
            Err(MemError::HostArraySize { .. })
        ));
    }
}
