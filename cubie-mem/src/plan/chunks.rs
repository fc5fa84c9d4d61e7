//! The one way to walk a plan: its chunks, each with its index and runs.

use std::ops::Range;

use super::ChunkPlan;
use crate::MemError;

/// One chunk of a plan: its index and the runs it covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// The chunk's index, from 0.
    pub index: usize,
    /// The runs of the batch it covers; the last chunk may have fewer than
    /// the chunk length.
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
pub struct Chunks {
    plan: ChunkPlan,
    next: usize,
    end: usize,
}

impl Iterator for Chunks {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        if self.next >= self.end {
            return None;
        }
        let index = self.next;
        self.next += 1;
        self.plan
            .chunk_runs(index)
            .map(|runs| Chunk { index, runs })
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
        self.plan.chunk_runs(self.end).map(|runs| Chunk {
            index: self.end,
            runs,
        })
    }
}

impl ExactSizeIterator for Chunks {}

impl ChunkPlan {
    /// The plan's chunks with their run ranges.
    ///
    /// ```
    /// use cubie_mem::ChunkPlan;
    ///
    /// let plan = ChunkPlan { total_runs: 10, chunks: 3, chunk_length: 4, ..Default::default() };
    /// let runs: Vec<_> = plan.iter_chunks().map(|c| c.runs).collect();
    /// assert_eq!(runs, [0..4, 4..8, 8..10]);
    /// ```
    pub fn iter_chunks(&self) -> Chunks {
        Chunks {
            plan: *self,
            next: 0,
            end: self.chunks,
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
