//! The staging threads: a dedicated pool of host threads that gather chunks
//! into staging buffers and scatter them out; see
//! [staging threads](crate::guide::host_memory#staging-threads).

use std::fmt;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use super::ChunkLayout;
use super::binding_host::HostRuns;
use crate::backend::{Backend, HostWork, MAX_DEFAULT_STAGING_LANES, default_staging_lanes};
use crate::{Element, MemError};

/// The host threads a [`ChunkStreamer`](crate::ChunkStreamer) gathers and
/// scatters staged chunks with: pageable and spilled arrays, and rows of
/// page-locked arrays too narrow for a strided copy.
///
/// A staging window of `B` bytes is cut into at most
/// [`threads`](Self::threads) contiguous pieces of at least
/// [`MIN_PIECE_BYTES`](Self::MIN_PIECE_BYTES) each, copied at the same
/// time; the simulated device times the work as `B / (pieces x host
/// bandwidth)` ([`Backend::host_work`](crate::backend::Backend::host_work)).
/// Clones share the same threads. With one thread the caller's thread
/// does the work and no thread is started.
///
/// ```
/// use cubie_mem::{MemError, StagingThreads};
///
/// let two = StagingThreads::new(2)?;
/// assert_eq!(two.threads(), 2);
/// assert!(StagingThreads::default_count() <= StagingThreads::MAX_DEFAULT_THREADS);
/// assert!(matches!(StagingThreads::new(0), Err(MemError::Config { .. })));
/// assert!(matches!(StagingThreads::new(usize::MAX), Err(MemError::Config { .. })));
/// # Ok::<(), MemError>(())
/// ```
#[derive(Clone)]
pub struct StagingThreads {
    threads: NonZeroUsize,
    /// `None` for one thread: the caller's.
    workers: Option<Arc<rayon::ThreadPool>>,
}

impl StagingThreads {
    /// The most threads the default takes: 8. A memcpy thread moves 10 to
    /// 15 GB/s; about 8 of them saturate a socket's memory bandwidth and
    /// reach a PCIe Gen5 x16 link's 50 GB/s with room to spare, and more
    /// would take cores from the user's own work for nothing.
    pub const MAX_DEFAULT_THREADS: usize = MAX_DEFAULT_STAGING_LANES;

    /// The most threads [`new`](Self::new) starts: 1,024. Staging saturates
    /// a node's memory bandwidth with a few dozen threads; a larger count is
    /// a mistaken figure, refused before any thread starts.
    pub const MAX_THREADS: usize = 1024;

    /// The smallest piece one thread is given, in bytes: 256 KiB, about
    /// 20 µs of memcpy, well above a hand-off to a staging thread (a few µs).
    /// A window of fewer than `2 x` this is copied by one thread.
    pub const MIN_PIECE_BYTES: usize = 256 << 10;

    /// The default thread count: the machine's available parallelism,
    /// at most [`MAX_DEFAULT_THREADS`](Self::MAX_DEFAULT_THREADS) (1 where
    /// it cannot be read).
    pub fn default_count() -> usize {
        default_staging_lanes()
    }

    /// `threads` staging threads (1: the caller's thread alone). 0
    /// threads, more than [`MAX_THREADS`](Self::MAX_THREADS), or threads
    /// the system refuses to start, is [`MemError::Config`] naming the
    /// count and the fix.
    pub fn new(threads: usize) -> Result<Self, MemError> {
        let refused = |reason: String| MemError::Config {
            name: "StagingThreads::new".to_owned(),
            value: threads.to_string(),
            reason,
        };
        let count = NonZeroUsize::new(threads).ok_or_else(|| {
            refused(format!(
                "there must be at least 1 staging thread: pass 1 to stage on the caller's \
                 thread, or StagingThreads::default_count() ({}) for the machine's cores",
                Self::default_count()
            ))
        })?;
        if count.get() > Self::MAX_THREADS {
            return Err(refused(format!(
                "at most {} staging threads start: a few dozen saturate a node's memory \
                 bandwidth; pass StagingThreads::default_count() ({}) for the machine's cores",
                Self::MAX_THREADS,
                Self::default_count()
            )));
        }
        if count.get() == 1 {
            return Ok(StagingThreads {
                threads: count,
                workers: None,
            });
        }
        let workers = rayon::ThreadPoolBuilder::new()
            .num_threads(count.get())
            .thread_name(|index| format!("cubie-mem-staging-{index}"))
            .build()
            .map_err(|error| {
                refused(format!(
                    "the system did not start {threads} threads ({error}): ask for fewer"
                ))
            })?;
        Ok(StagingThreads {
            threads: count,
            workers: Some(Arc::new(workers)),
        })
    }

    /// [`default_count`](Self::default_count) staging threads (the
    /// caller's thread alone where the system refuses to start them).
    pub fn with_default_count() -> Self {
        Self::new(Self::default_count()).unwrap_or(StagingThreads {
            threads: NonZeroUsize::MIN,
            workers: None,
        })
    }

    /// How many threads gather and scatter at most.
    pub fn threads(&self) -> usize {
        self.threads.get()
    }

    /// How many pieces a window of `bytes` is cut into: one per
    /// [`MIN_PIECE_BYTES`](Self::MIN_PIECE_BYTES), at most
    /// [`threads`](Self::threads), at least one.
    pub fn lanes_for(&self, bytes: usize) -> usize {
        (bytes / Self::MIN_PIECE_BYTES).clamp(1, self.threads.get())
    }

    /// [`ChunkLayout::gather`] on the staging threads: the runs `runs` of
    /// `host` (the whole array) into `staging`, the device elements from
    /// `window_start`, each thread a piece of `staging`.
    ///
    /// ```
    /// use cubie_mem::{ChunkLayout, MemError, StagingThreads};
    ///
    /// let layout = ChunkLayout::new(&[4, 6], 1, 3)?;
    /// let host: Vec<u32> = (0..24).collect();
    /// let mut staging = vec![0; 12];
    /// StagingThreads::new(2)?.gather_chunk(&layout, &host, 3..6, 0, &mut staging)?;
    /// assert_eq!(staging[..6], [3, 4, 5, 9, 10, 11]);
    /// # Ok::<(), MemError>(())
    /// ```
    pub fn gather_chunk<T: Element>(
        &self,
        layout: &ChunkLayout,
        host: &[T],
        runs: Range<usize>,
        window_start: usize,
        staging: &mut [T],
    ) -> Result<(), MemError> {
        self.fill(staging, |offset, piece| {
            layout.gather(
                host,
                runs.clone(),
                window_start.saturating_add(offset),
                piece,
            )
        })
        .map(drop)
    }

    /// [`ChunkLayout::scatter`] on the staging threads: the device elements
    /// from `window_start` held in `staging` into their places in `host`
    /// (the whole array), each thread a piece of `staging`.
    pub fn scatter_chunk<T: Element>(
        &self,
        layout: &ChunkLayout,
        staging: &[T],
        window_start: usize,
        runs: Range<usize>,
        host: &mut [T],
    ) -> Result<(), MemError> {
        // Refused as `ChunkLayout::scatter` refuses it, in elements.
        layout.blocks(
            host.len(),
            &runs,
            window_start,
            staging.len(),
            |_, _| Ok(()),
        )?;
        let bytes = layout.of_bytes(size_of::<T>())?;
        let window_start = window_start.saturating_mul(size_of::<T>());
        let target = HostRuns::writing(bytemuck::cast_slice_mut(host));
        self.drain(bytemuck::cast_slice(staging), |offset, piece| {
            let start = window_start.saturating_add(offset);
            // SAFETY: the pieces are disjoint windows of the chunk, which
            // the layout maps to disjoint bytes of `host`.
            unsafe { target.scatter(&bytes, runs.clone(), piece, start) }
        })
        .map(drop)
    }

    /// Fills `part` piece by piece at the same time on the staging threads,
    /// `fill(offset, piece)` for each piece (`offset` its first element in
    /// `part`), and reports the gather of `rows` host rows to `backend` with
    /// its pieces as lanes; the first error is returned.
    pub(crate) fn gather<T, F>(
        &self,
        backend: &dyn Backend,
        part: &mut [T],
        rows: u64,
        fill: F,
    ) -> Result<(), MemError>
    where
        T: Send,
        F: Fn(usize, &mut [T]) -> Result<(), MemError> + Sync,
    {
        let bytes = size_of_val(part) as u64;
        let lanes = self.fill(part, fill)?;
        backend.host_work(HostWork::Gather { rows }, bytes, lanes);
        Ok(())
    }

    /// Reads `part` piece by piece at the same time on the staging threads,
    /// `drain(offset, piece)` for each piece, and reports the scatter of
    /// `rows` host rows to `backend`, as [`gather`](Self::gather).
    pub(crate) fn scatter<T, F>(
        &self,
        backend: &dyn Backend,
        part: &[T],
        rows: u64,
        drain: F,
    ) -> Result<(), MemError>
    where
        T: Sync,
        F: Fn(usize, &[T]) -> Result<(), MemError> + Sync,
    {
        let lanes = self.drain(part, drain)?;
        let bytes = size_of_val(part) as u64;
        backend.host_work(HostWork::Scatter { rows }, bytes, lanes);
        Ok(())
    }

    /// `fill(offset, piece)` on each piece of `part` at once; the pieces.
    fn fill<T, F>(&self, part: &mut [T], fill: F) -> Result<usize, MemError>
    where
        T: Send,
        F: Fn(usize, &mut [T]) -> Result<(), MemError> + Sync,
    {
        let Some((workers, piece)) = self.pieces(part.len(), size_of_val(part)) else {
            return fill(0, part).map(|()| 1);
        };
        workers.install(|| {
            part.par_chunks_mut(piece)
                .enumerate()
                .try_for_each(|(index, chunk)| fill(index.saturating_mul(piece), chunk))
        })?;
        Ok(part.len().div_ceil(piece))
    }

    /// `drain(offset, piece)` on each piece of `part` at once; the pieces.
    fn drain<T, F>(&self, part: &[T], drain: F) -> Result<usize, MemError>
    where
        T: Sync,
        F: Fn(usize, &[T]) -> Result<(), MemError> + Sync,
    {
        let Some((workers, piece)) = self.pieces(part.len(), size_of_val(part)) else {
            return drain(0, part).map(|()| 1);
        };
        workers.install(|| {
            part.par_chunks(piece)
                .enumerate()
                .try_for_each(|(index, chunk)| drain(index.saturating_mul(piece), chunk))
        })?;
        Ok(part.len().div_ceil(piece))
    }

    /// The threads and the elements of each piece of a window of `len`
    /// elements and `bytes` bytes; `None` when one thread copies it.
    fn pieces(&self, len: usize, bytes: usize) -> Option<(&rayon::ThreadPool, usize)> {
        let lanes = self.lanes_for(bytes);
        match &self.workers {
            Some(workers) if lanes > 1 && len > 1 => Some((workers, len.div_ceil(lanes))),
            _ => None,
        }
    }
}

impl fmt::Debug for StagingThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagingThreads")
            .field("threads", &self.threads)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_and_scatter_chunk_on_three_threads_match_one_thread_along_each_axis() {
        // 3 MiB of u64: every quarter-axis window holds 768 KiB, three pieces.
        let shape = [8, 16, 3072];
        let host: Vec<u64> = (0..shape.iter().product::<usize>() as u64).collect();
        let (one, three) = (
            StagingThreads::new(1).unwrap(),
            StagingThreads::new(3).unwrap(),
        );
        for axis in 0..3 {
            let chunk_length = shape[axis] / 4;
            let layout = ChunkLayout::new(&shape, axis, chunk_length).unwrap();
            let runs = chunk_length..2 * chunk_length;
            let bytes = layout.chunk_elements() * size_of::<u64>();
            assert_eq!(three.lanes_for(bytes), 3, "axis {axis}");
            let mut expected = vec![0; layout.chunk_elements()];
            let mut staged = vec![0; layout.chunk_elements()];
            layout
                .gather(&host, runs.clone(), 0, &mut expected)
                .unwrap();
            three
                .gather_chunk(&layout, &host, runs.clone(), 0, &mut staged)
                .unwrap();
            assert!(staged == expected, "gather along axis {axis}");
            let (mut by_one, mut by_three) = (vec![0; host.len()], vec![0; host.len()]);
            one.scatter_chunk(&layout, &staged, 0, runs.clone(), &mut by_one)
                .unwrap();
            three
                .scatter_chunk(&layout, &staged, 0, runs, &mut by_three)
                .unwrap();
            assert!(by_three == by_one, "scatter along axis {axis}");
        }
    }

    #[test]
    fn windows_are_cut_into_pieces_of_at_least_256_kib_up_to_the_thread_count() {
        let four = StagingThreads::new(4).unwrap();
        let piece = StagingThreads::MIN_PIECE_BYTES;
        assert_eq!(four.lanes_for(0), 1);
        assert_eq!(four.lanes_for(2 * piece - 1), 1);
        assert_eq!(four.lanes_for(2 * piece), 2);
        assert_eq!(four.lanes_for(100 * piece), 4);
        assert_eq!(StagingThreads::new(1).unwrap().lanes_for(100 * piece), 1);
    }
}
