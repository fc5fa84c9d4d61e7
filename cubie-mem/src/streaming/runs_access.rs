//! A host array shared by run range: the devices of a set stream disjoint
//! run ranges of one host array at once, each reading and writing only its
//! own runs.
//!
//! The runs of one range are not one block of memory when the run axis is
//! not the outermost, so no thread may hold a slice of the whole array
//! while others write: each reaches its runs block by block, through the
//! array's address, and a block is borrowed only for one copy.

use std::ops::Range;
use std::ptr::NonNull;

use super::layout::ChunkLayout;
use super::staging_threads::ScatterTarget;
use crate::host::HostArray;
use crate::{Element, MemError};

/// Access to the runs `runs` of a host array whose other runs other threads
/// access at the same time, through accesses of their own.
pub(crate) struct RunsAccess<'p, T: Element> {
    /// The array, for its shape, kind and retirement (never its elements).
    array: &'p HostArray<T>,
    /// The array's first element.
    data: NonNull<T>,
    /// Its element count.
    len: usize,
    /// The runs this access may read and write.
    runs: Range<usize>,
}

// SAFETY: an access reads and writes only the elements of its own runs,
// which no other access covers (see `RunsAccess::new`); `T` is plain data.
unsafe impl<T: Element> Send for RunsAccess<'_, T> {}
// SAFETY: as for Send; shared use only reads the array's description.
unsafe impl<T: Element> Sync for RunsAccess<'_, T> {}

impl<'p, T: Element> RunsAccess<'p, T> {
    /// Access to `runs` of the array whose elements start at `data`.
    ///
    /// # Safety
    ///
    /// `data` points to `array`'s `array.len()` elements, valid for reads
    /// and writes for `'p`; while the access lives, no other access to
    /// those elements exists but accesses made by this function for run
    /// ranges disjoint from `runs`, on the same run axis.
    pub(crate) unsafe fn new(
        array: &'p HostArray<T>,
        data: NonNull<T>,
        runs: Range<usize>,
    ) -> Self {
        RunsAccess {
            array,
            data,
            len: array.len(),
            runs,
        }
    }

    /// The array.
    pub(crate) fn array(&self) -> &'p HostArray<T> {
        self.array
    }

    /// Refuses runs outside this access's.
    fn check(&self, runs: &Range<usize>) -> Result<(), MemError> {
        if runs.start >= self.runs.start && runs.end <= self.runs.end && runs.start <= runs.end {
            Ok(())
        } else {
            Err(MemError::RunRange {
                start: runs.start,
                end: runs.end,
                plan_runs: self.runs.len(),
                batch_runs: self.runs.end,
            })
        }
    }

    /// The elements `range`, inside this access's runs of `layout`.
    fn block(
        &self,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: &Range<usize>,
    ) -> Option<NonNull<T>> {
        let inside = range.start <= range.end
            && range.end <= self.len
            && layout
                .contiguous_range(runs)
                .is_some_and(|block| block.start <= range.start && range.end <= block.end);
        // SAFETY: `range.start <= len`, so the offset stays inside (or one
        // past) the array's allocation.
        inside.then(|| unsafe { self.data.add(range.start) })
    }

    /// The contiguous elements `range` holding `runs`, read-only, when
    /// `runs` are this access's and lie in one block of `layout`.
    pub(crate) fn range(
        &self,
        label: &str,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: Range<usize>,
    ) -> Result<&[T], MemError> {
        self.check(runs)?;
        let start = self
            .block(layout, runs, &range)
            .ok_or_else(|| self.outside(label, &range))?;
        // SAFETY: the elements lie inside the array and hold only runs of
        // this access, which no other access writes; `&self` lends them.
        Ok(unsafe { std::slice::from_raw_parts(start.as_ptr(), range.len()) })
    }

    /// The contiguous elements `range` holding `runs`, writable.
    pub(crate) fn range_mut(
        &mut self,
        label: &str,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: Range<usize>,
    ) -> Result<&mut [T], MemError> {
        self.check(runs)?;
        let start = self
            .block(layout, runs, &range)
            .ok_or_else(|| self.outside(label, &range))?;
        // SAFETY: as in `range`; `&mut self` makes this the only borrow
        // through this access.
        Ok(unsafe { std::slice::from_raw_parts_mut(start.as_ptr(), range.len()) })
    }

    /// The address of element `first` of the array, where the first row of
    /// a strided copy of `runs` starts, when `runs` are this access's and
    /// `first` lies in the array. The rows of chunk `runs`
    /// ([`ChunkLayout::strided_rows`]) hold this access's runs only.
    pub(crate) fn rows_start(
        &self,
        label: &str,
        runs: &Range<usize>,
        first: usize,
    ) -> Result<NonNull<T>, MemError> {
        self.check(runs)?;
        if first >= self.len {
            return Err(self.outside(label, &(first..first.saturating_add(1))));
        }
        // SAFETY: `first < len`: the offset stays inside the allocation.
        Ok(unsafe { self.data.add(first) })
    }

    /// `range` lies outside the array of `label`.
    fn outside(&self, label: &str, range: &Range<usize>) -> MemError {
        MemError::LengthMismatch {
            label: label.to_owned(),
            expected: range.end,
            found: self.len,
        }
    }

    /// [`ChunkLayout::gather`] of `runs`, which must be this access's.
    pub(crate) fn gather(
        &self,
        layout: &ChunkLayout,
        runs: Range<usize>,
        window_start: usize,
        staging: &mut [T],
    ) -> Result<(), MemError> {
        self.check(&runs)?;
        let window_len = staging.len();
        layout.blocks(
            self.len,
            &runs,
            window_start,
            window_len,
            |staged, hosted| {
                let dst = staging
                    .get_mut(staged)
                    .ok_or_else(|| self.outside("host", &hosted))?;
                if hosted.end > self.len || hosted.len() != dst.len() {
                    return Err(self.outside("host", &hosted));
                }
                // SAFETY: `hosted` lies inside the array (checked) and holds
                // runs of this access only (the layout maps `runs` to it).
                let src = unsafe {
                    std::slice::from_raw_parts(self.data.add(hosted.start).as_ptr(), hosted.len())
                };
                dst.copy_from_slice(src);
                Ok(())
            },
        )
    }

    /// Chunk `runs`, which must be this access's, for staging threads to
    /// scatter into.
    pub(crate) fn target(&mut self, runs: Range<usize>) -> Result<ScatterTarget<'_, T>, MemError> {
        self.check(&runs)?;
        // SAFETY: the elements of `runs` are this access's alone, and
        // `&mut self` makes the target their only borrow through it.
        Ok(unsafe { ScatterTarget::from_raw(self.data, self.len, runs) })
    }
}
