//! What the planner gives: [`ChunkPlan`], and its chunks in order.

use std::fmt;
use std::ops::Range;

use super::Limit;
use crate::ArrayRequest;
use crate::Bytes;
use crate::MemError;
use crate::stats::{Count, counted};

/// One chunk of a plan: its index and the runs it covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// The chunk's index, from 0.
    pub index: usize,
    /// The runs of the batch it covers; the last chunk may be shorter.
    pub runs: Range<usize>,
}

impl Chunk {
    /// Number of runs in the chunk.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether the chunk has no runs.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// The chunks of a plan, in order (from [`ChunkPlan::iter_chunks`]).
#[derive(Clone, Debug)]
pub(crate) struct Chunks {
    plan: ChunkPlan,
    next: usize,
    end: usize,
    /// Added to every chunk's runs: where the plan starts in a larger batch.
    first_run: usize,
}

impl Chunks {
    /// Chunk `index` of the plan, its runs shifted by `first_run`.
    fn shifted(&self, index: usize) -> Option<Chunk> {
        let runs = self.plan.chunk_runs(index)?;
        Some(Chunk {
            index,
            runs: runs.start.checked_add(self.first_run)?..runs.end.checked_add(self.first_run)?,
        })
    }

    /// The chunks `range` of these, or `None` when it is out of range.
    pub(crate) fn within(mut self, range: std::ops::Range<usize>) -> Option<Chunks> {
        if range.start > range.end || range.start < self.next || range.end > self.end {
            return None;
        }
        self.next = range.start;
        self.end = range.end;
        Some(self)
    }

    /// The same chunks with their runs shifted by `first_run`.
    pub(crate) fn starting_at(mut self, first_run: usize) -> Chunks {
        self.first_run = first_run;
        self
    }
}

impl Iterator for Chunks {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        if self.next >= self.end {
            return None;
        }
        let index = self.next;
        self.next += 1;
        self.shifted(index)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end.saturating_sub(self.next);
        (left, Some(left))
    }
}

impl DoubleEndedIterator for Chunks {
    fn next_back(&mut self) -> Option<Chunk> {
        if self.next >= self.end {
            return None;
        }
        self.end -= 1;
        self.shifted(self.end)
    }
}

impl ExactSizeIterator for Chunks {}

impl ChunkPlan {
    /// The plan's chunks with their run ranges, in order.
    pub fn iter_chunks(
        &self,
    ) -> impl DoubleEndedIterator<Item = Chunk> + ExactSizeIterator + Clone + fmt::Debug + use<>
    {
        self.chunk_iter()
    }

    /// [`iter_chunks`](Self::iter_chunks), as the type the streaming code
    /// narrows and shifts.
    pub(crate) fn chunk_iter(&self) -> Chunks {
        Chunks {
            plan: *self,
            next: 0,
            end: self.chunks,
            first_run: 0,
        }
    }

    /// Chunk `index`, or an error past the last chunk.
    pub fn chunk(&self, index: usize) -> Result<Chunk, MemError> {
        self.chunk_runs(index)
            .map(|runs| Chunk { index, runs })
            .ok_or(MemError::ChunkOutOfRange {
                chunk: index,
                chunks: self.chunks,
            })
    }
}

/// How a batch is split along its run axis: made by the planner, or by hand
/// with [`ChunkPlan::new`]. Every plan is [valid](Self::validate).
/// The default is one chunk of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkPlan {
    /// Runs in the whole batch.
    pub(crate) total_runs: usize,
    /// Number of chunks.
    pub(crate) chunks: usize,
    /// Runs per chunk (the last chunk may be shorter).
    pub(crate) chunk_length: usize,
    /// Bytes of the chunkable requests at full length.
    pub(crate) chunkable_bytes: u64,
    /// Bytes of the unchunkable requests.
    pub(crate) unchunkable_bytes: u64,
    /// Bytes the plan was allowed to allocate.
    pub(crate) allocatable: u64,
    /// Bytes withheld as reserve (fragmentation share and granule).
    pub(crate) withheld: u64,
    /// Buffer sets per chunkable array, one per chunk in flight.
    pub(crate) buffer_sets: usize,
    /// What bounded the chunk length of a split plan (see [`Limit`]).
    pub(crate) limited_by: Option<Limit>,
}

impl Default for ChunkPlan {
    fn default() -> Self {
        ChunkPlan {
            total_runs: 1,
            chunks: 1,
            chunk_length: 1,
            chunkable_bytes: 0,
            unchunkable_bytes: 0,
            allocatable: 0,
            withheld: 0,
            buffer_sets: 1,
            limited_by: None,
        }
    }
}

/// One line to print: runs, chunks, buffer sets, and for a planned split the
/// bytes allocatable and what [limited](ChunkPlan::limited_by) it.
///
/// ```
/// use cubie_mem::plan::{self, Budget, Limit};
/// use cubie_mem::{ArrayRequest, ChunkPlan};
///
/// let plan = ChunkPlan::new(300_000, 11, 27_273)?.with_buffer_sets(2)?;
/// assert_eq!(plan.to_string(), "300,000 runs in 11 chunks of 27,273, 2 buffer sets");
///
/// // 32000 B of runs; the caps leave 10000 B of 10 MB free.
/// let request = ArrayRequest::of::<f64>([4, 1000]).chunk_axis(1).total_runs(1000);
/// let capped = plan::plan([("state", &request)], &Budget::active(10_000_000, 10_000).with_granule(0))?;
/// assert_eq!(capped.limited_by(), Some(Limit::Caps));
/// assert_eq!(
///     capped.to_string(),
///     "1,000 runs in 4 chunks of 250, 1 buffer set, 9800 B (9.57 KiB) allocatable \
///      (limited by instance caps)"
/// );
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
impl fmt::Display for ChunkPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        write!(
            f,
            "{} in {} of {}, {}",
            counted(count(self.total_runs), "run"),
            counted(count(self.chunks), "chunk"),
            Count(count(self.chunk_length)),
            counted(count(self.buffer_sets), "buffer set"),
        )?;
        let planned =
            self.allocatable > 0 || self.chunkable_bytes > 0 || self.unchunkable_bytes > 0;
        if planned {
            write!(f, ", {} allocatable", Bytes(self.allocatable))?;
        }
        match self.limited_by {
            Some(limit) => write!(f, " (limited by {limit})"),
            None => Ok(()),
        }
    }
}

impl ChunkPlan {
    /// A plan of `total_runs` runs in `chunks` chunks of `chunk_length`, one
    /// buffer set: for streaming a batch the manager did not plan.
    ///
    /// ```
    /// use cubie_mem::{ChunkPlan, MemError};
    ///
    /// let plan = ChunkPlan::new(10, 3, 4)?;
    /// let runs: Vec<_> = plan.iter_chunks().map(|c| c.runs).collect();
    /// assert_eq!(runs, [0..4, 4..8, 8..10]);
    /// assert_eq!(plan.chunk_runs(2), Some(8..10));
    /// assert!(matches!(ChunkPlan::new(10, 2, 4), Err(MemError::InvalidPlan { .. })));
    /// # Ok::<(), MemError>(())
    /// ```
    pub fn new(total_runs: usize, chunks: usize, chunk_length: usize) -> Result<Self, MemError> {
        let plan = ChunkPlan {
            total_runs,
            chunks,
            chunk_length,
            ..ChunkPlan::default()
        };
        plan.validate().map(|()| plan)
    }

    /// This plan with `sets` buffer sets, between 1 and the chunk count.
    pub fn with_buffer_sets(self, sets: usize) -> Result<Self, MemError> {
        let plan = ChunkPlan {
            buffer_sets: sets,
            ..self
        };
        plan.validate().map(|()| plan)
    }

    /// Runs in the whole batch.
    pub fn total_runs(&self) -> usize {
        self.total_runs
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Runs per chunk (the last chunk may be shorter).
    pub fn chunk_length(&self) -> usize {
        self.chunk_length
    }

    /// Bytes of the chunkable requests at full length.
    pub fn chunkable_bytes(&self) -> u64 {
        self.chunkable_bytes
    }

    /// Bytes of the unchunkable requests.
    pub fn unchunkable_bytes(&self) -> u64 {
        self.unchunkable_bytes
    }

    /// Bytes the plan was allowed to allocate.
    pub fn allocatable(&self) -> u64 {
        self.allocatable
    }

    /// Bytes withheld as reserve (fragmentation share and granule).
    pub fn withheld(&self) -> u64 {
        self.withheld
    }

    /// Buffer sets per chunkable array, one per chunk in flight.
    pub fn buffer_sets(&self) -> usize {
        self.buffer_sets
    }

    /// What bounded the chunk length of a planned split ([`Limit`]).
    /// `None` for one chunk and for a plan made by hand.
    pub fn limited_by(&self) -> Option<Limit> {
        self.limited_by
    }

    /// Checks that the figures are consistent: the chunks cover every run,
    /// neither count exceeds the run count, and there are 1 to `chunks` sets.
    ///
    /// ```
    /// use cubie_mem::{ChunkPlan, MemError};
    ///
    /// let plan = ChunkPlan::new(10, 6, 2)?; // a reused partition: the last chunk is empty
    /// assert!(plan.validate().is_ok());
    /// assert!(matches!(ChunkPlan::new(10, 4, 2), Err(MemError::InvalidPlan { chunks: 4, .. })));
    /// assert!(plan.with_buffer_sets(2).is_ok());
    /// assert!(plan.with_buffer_sets(0).is_err());
    /// assert!(plan.with_buffer_sets(7).is_err()); // more sets than chunks
    /// # Ok::<(), MemError>(())
    /// ```
    pub fn validate(&self) -> Result<(), MemError> {
        let reason = if self.total_runs == 0 {
            "a batch has at least one run"
        } else if self.chunks == 0 {
            "a plan has at least one chunk"
        } else if self.chunk_length == 0 {
            "a chunk holds at least one run"
        } else if self.chunks > self.total_runs {
            "there are more chunks than runs"
        } else if self.chunk_length > self.total_runs {
            "a chunk is longer than the batch"
        } else if self
            .chunks
            .checked_mul(self.chunk_length)
            .is_some_and(|covered| covered < self.total_runs)
        {
            "the chunks do not cover every run"
        } else if self.buffer_sets == 0 {
            "a plan has at least one buffer set"
        } else if self.buffer_sets > self.chunks {
            "there are more buffer sets than chunks"
        } else {
            return Ok(());
        };
        Err(MemError::InvalidPlan {
            total_runs: self.total_runs,
            chunks: self.chunks,
            chunk_length: self.chunk_length,
            reason,
        })
    }

    /// Whether the batch is split into more than one chunk.
    pub fn is_chunked(&self) -> bool {
        self.chunks > 1
    }

    /// The runs of chunk `index`, or `None` past the last chunk.
    pub fn chunk_runs(&self, index: usize) -> Option<Range<usize>> {
        (index < self.chunks).then(|| self.runs_of(index))
    }

    fn runs_of(&self, index: usize) -> Range<usize> {
        let start = index.saturating_mul(self.chunk_length).min(self.total_runs);
        let end = start.saturating_add(self.chunk_length).min(self.total_runs);
        start..end
    }

    /// The shape a request is allocated with under this plan.
    pub fn chunked_shape(&self, request: &ArrayRequest) -> Vec<usize> {
        request.chunked_shape(self.chunk_length)
    }

    /// Bytes allocated for a request under this plan, saturating.
    pub fn chunked_bytes(&self, request: &ArrayRequest) -> u64 {
        let to_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        request
            .chunked_dims(self.chunk_length)
            .fold(1u64, |bytes, d| bytes.saturating_mul(to_u64(d)))
            .saturating_mul(to_u64(request.dtype().size_bytes()))
    }

    /// This plan with the partition `(chunk_length, chunks)` instead, when it
    /// covers the batch and is at least as fine as this plan's. It is then
    /// [limited by](Self::limited_by) [`Limit::ReusedPartition`].
    pub fn with_partition(&self, chunk_length: usize, chunks: usize) -> Option<ChunkPlan> {
        let covers = chunks > 0 && self.total_runs.div_ceil(chunks) == chunk_length;
        if !covers || chunk_length > self.chunk_length {
            return None;
        }
        let chunks = chunks.min(self.total_runs).max(1);
        let same = (chunks, chunk_length) == (self.chunks, self.chunk_length);
        let plan = ChunkPlan {
            chunks,
            chunk_length,
            buffer_sets: self.buffer_sets.min(chunks).max(1),
            limited_by: if same {
                self.limited_by
            } else {
                (chunks > 1).then_some(Limit::ReusedPartition)
            },
            ..*self
        };
        plan.validate().ok().map(|()| plan)
    }
}

impl ChunkPlan {
    /// This plan with the buffer sets a pipeline of `depth` gets:
    /// `min(depth, chunks)`, lowered to what fits, never below the sets it has.
    pub(crate) fn sets_for(self, depth: usize) -> ChunkPlan {
        let wanted = depth.min(self.chunks).max(1);
        let per_set = u128::from(self.chunkable_bytes) * self.chunk_length as u128;
        let room = self.total_runs as u128
            * u128::from(self.allocatable.saturating_sub(self.unchunkable_bytes));
        let fits = room
            .checked_div(per_set)
            .map_or(wanted, |n| usize::try_from(n).unwrap_or(usize::MAX));
        ChunkPlan {
            buffer_sets: wanted
                .min(fits)
                .max(self.buffer_sets.min(self.chunks))
                .max(1),
            ..self
        }
    }
}
