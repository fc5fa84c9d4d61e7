//! A binding's staging buffers for one direction, used in turn, and the
//! windows downloaded into them that the host has yet to scatter.

use std::collections::VecDeque;
use std::ops::Range;

use crate::host::{StagingBuffer, StagingPool};
use crate::{DType, MemError};

/// A window of a chunk downloaded into a staging buffer that the host has
/// yet to scatter into the host array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Landing {
    /// The buffer of the ring that holds it.
    pub(super) buffer: usize,
    /// The chunk's index in the run.
    pub(super) chunk: usize,
    /// The chunk's runs in the host array.
    pub(super) runs: Range<usize>,
    /// The window's first byte in the chunk's device buffer.
    pub(super) start: usize,
    /// The window's length in bytes.
    pub(super) len: usize,
}

/// One or two staging buffers of `shape` elements of `dtype` for `label`,
/// used in turn: while
/// a copy moves one, the host fills or empties the other. The second is
/// taken only when the pool gives it without waiting, so that a run never
/// waits for a buffer while holding another (no two pipelines can
/// deadlock over a pool); a buffer is only reused once the window it holds
/// is scattered.
pub(super) struct StagingRing {
    pool: StagingPool,
    label: String,
    shape: Vec<usize>,
    dtype: DType,
    buffers: Vec<StagingBuffer>,
    /// The buffer the next window takes.
    next: usize,
    /// The windows the host has yet to scatter, oldest first.
    landed: VecDeque<Landing>,
}

impl StagingRing {
    /// A ring of buffers from `pool`, taken when reserved (or first used).
    pub(super) fn new(pool: StagingPool, label: String, shape: Vec<usize>, dtype: DType) -> Self {
        StagingRing {
            pool,
            label,
            shape,
            dtype,
            buffers: Vec::new(),
            next: 0,
            landed: VecDeque::new(),
        }
    }

    /// Acquires the first buffer now (waiting for the pool if need be),
    /// then the second if the pool has one at once.
    pub(super) fn reserve(&mut self) -> Result<(), MemError> {
        if self.buffers.is_empty() {
            let first = self.pool.acquire(&self.label, &self.shape, self.dtype)?;
            self.buffers.push(first);
            self.reserve_second()?;
        }
        Ok(())
    }

    /// Acquires the buffers only if the pool has them at once; whether it
    /// had the first.
    pub(super) fn try_reserve(&mut self) -> Result<bool, MemError> {
        if self.buffers.is_empty() {
            match self
                .pool
                .try_acquire(&self.label, &self.shape, self.dtype)?
            {
                Some(first) => self.buffers.push(first),
                None => return Ok(false),
            }
            self.reserve_second()?;
        }
        Ok(true)
    }

    fn reserve_second(&mut self) -> Result<(), MemError> {
        if let Some(second) = self
            .pool
            .try_acquire(&self.label, &self.shape, self.dtype)?
        {
            self.buffers.push(second);
        }
        Ok(())
    }

    /// The bytes one window holds.
    pub(super) fn window(&self) -> usize {
        self.shape
            .iter()
            .fold(self.dtype.size_bytes(), |len: usize, &d| {
                len.saturating_mul(d)
            })
            .max(1)
    }

    /// The windows (first byte, length) that stage `extent` bytes: as few as
    /// the buffers allow, of one length in whole elements (the last may be
    /// shorter), so that each copy and the host's work on the window beside
    /// it take about as long.
    pub(super) fn windows(&self, extent: usize) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (window, element) = (self.window(), self.dtype.size_bytes().max(1));
        let count = extent.div_ceil(window).max(1);
        let len = extent
            .div_ceil(count)
            .checked_next_multiple_of(element)
            .map_or(window, |len| len.clamp(1, window));
        (0..extent)
            .step_by(len)
            .map(move |start| (start, len.min(extent - start)))
    }

    /// The buffer the next window takes and its index, emptied for it: the
    /// window it still holds, if any, handed to `scatter` first (see
    /// [`flush`](Self::flush)). The buffer after it comes next.
    pub(super) fn next_free(
        &mut self,
        scatter: impl FnOnce(&mut StagingBuffer, &Landing) -> Result<(), MemError>,
    ) -> Result<(usize, &mut StagingBuffer), MemError> {
        // A ring not reserved (no chunk at the run's ends was staged) takes
        // one buffer now.
        if self.buffers.is_empty() {
            self.buffers
                .push(self.pool.acquire(&self.label, &self.shape, self.dtype)?);
        }
        let id = self.next % self.buffers.len();
        self.next = id + 1;
        self.flush(id, scatter)?;
        Ok((id, &mut self.buffers[id]))
    }

    /// Notes that `landing` (in its buffer) is downloaded, for the host.
    pub(super) fn land(&mut self, landing: Landing) {
        self.landed.push_back(landing);
    }

    /// The buffer holding the oldest window of a chunk up to `chunk` that
    /// the host has yet to scatter.
    pub(super) fn oldest_through(&self, chunk: usize) -> Option<usize> {
        let oldest = self.landed.front()?;
        (oldest.chunk <= chunk).then_some(oldest.buffer)
    }

    /// Whether the copy that last used buffer `id` is done (does not block).
    pub(super) fn is_settled(&mut self, id: usize) -> Result<bool, MemError> {
        self.buffers
            .get_mut(id)
            .map_or(Ok(true), StagingBuffer::is_settled)
    }

    /// Empties buffer `id` for reuse: hands the window it holds, if any, to
    /// `scatter` with the buffer. The window is taken off the ring even
    /// when `scatter` fails: its results are then lost, and the error
    /// says so.
    pub(super) fn flush(
        &mut self,
        id: usize,
        scatter: impl FnOnce(&mut StagingBuffer, &Landing) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let held = self.landed.iter().position(|landing| landing.buffer == id);
        match (
            held.and_then(|at| self.landed.remove(at)),
            self.buffers.get_mut(id),
        ) {
            (Some(landing), Some(buffer)) => scatter(buffer, &landing),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::SimBackend;

    /// A ring of one-dimensional buffers of `window` elements of f64.
    fn ring(window: usize) -> StagingRing {
        let pool = StagingPool::new(Arc::new(SimBackend::new(1 << 20)));
        StagingRing::new(pool, "state".into(), vec![window], DType::F64)
    }

    #[test]
    fn windows_are_as_few_as_the_buffers_allow_and_of_one_length() {
        let windows = |window, extent| ring(window).windows(extent).collect::<Vec<_>>();
        // 352 bytes through 80-byte buffers: five windows of 72 bytes (nine
        // f64s each, the last eight), not four full ones and a sliver.
        assert_eq!(
            windows(10, 352),
            [(0, 72), (72, 72), (144, 72), (216, 72), (288, 64)]
        );
        assert_eq!(windows(10, 80), [(0, 80)]);
        assert_eq!(windows(10, 8), [(0, 8)]);
        assert_eq!(windows(10, 160), [(0, 80), (80, 80)]);
        assert!(windows(10, 0).is_empty());
        for extent in (0..2_000).step_by(8) {
            let all = windows(10, extent);
            assert_eq!(all.iter().map(|&(_, len)| len).sum::<usize>(), extent);
            assert!(all.iter().all(|&(start, len)| start % 8 == 0 && len <= 80));
            assert_eq!(all.len(), extent.div_ceil(80));
        }
    }
}
