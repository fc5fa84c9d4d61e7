//! The host side of a binding: the runs of a host array it reads and
//! writes, reached through the array's address, as bytes.

use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::NonNull;

use super::layout::ChunkLayout;
use crate::host::HostArray;
use crate::{Element, MemError};

/// Runs of a host array, read (and written, when writable) as bytes
/// through the array's address, a block at a time: no access holds a slice of the
/// whole array, so several can share one array, each reaching its own
/// runs (the devices of a set), or its own window of a chunk (the staging
/// threads).
pub(crate) struct HostRuns<'a> {
    /// The array's first byte.
    data: NonNull<u8>,
    /// Its length in bytes.
    len: usize,
    /// The runs this access reaches.
    runs: Range<usize>,
    writable: bool,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: an access reaches only the bytes of its own runs, which no
// other access writes (see `HostRuns::new`).
unsafe impl Send for HostRuns<'_> {}
// SAFETY: as for Send; a shared access reads, or writes through `scatter`,
// whose callers give each thread bytes of its own.
unsafe impl Sync for HostRuns<'_> {}

impl<'a> HostRuns<'a> {
    /// The runs `runs` of the `len` bytes at `data`.
    ///
    /// # Safety
    ///
    /// `data` points to `len` bytes, valid for reads (and, when
    /// `writable`, writes) for `'a`. While the access lives, nothing else
    /// writes the bytes of `runs` (on the run axis of every layout it is
    /// used with), and nothing else reads them when `writable`, but other
    /// accesses of disjoint runs made from the same address.
    pub(crate) unsafe fn new(
        data: NonNull<u8>,
        len: usize,
        runs: Range<usize>,
        writable: bool,
    ) -> Self {
        HostRuns {
            data,
            len,
            runs,
            writable,
            _borrow: PhantomData,
        }
    }

    /// Every run of `host`, read only.
    pub(crate) fn reading(host: &'a [u8]) -> Self {
        // SAFETY: the shared borrow keeps the bytes alive and unwritten
        // for 'a, and the access only reads.
        unsafe { Self::new(NonNull::from(host).cast(), host.len(), 0..usize::MAX, false) }
    }

    /// Every run of `host`, read and written.
    pub(crate) fn writing(host: &'a mut [u8]) -> Self {
        let len = host.len();
        // SAFETY: the exclusive borrow makes the access the bytes' only
        // user for 'a.
        unsafe { Self::new(NonNull::from(host).cast(), len, 0..usize::MAX, true) }
    }

    /// Every run of the array `host`, read only, and the array.
    pub(crate) fn input<T: Element>(host: &'a HostArray<T>) -> (&'a HostArray<T>, Self) {
        (host, Self::reading(bytemuck::cast_slice(host.as_slice())))
    }

    /// Every run of the array `host`, read and written through the
    /// array's own pointer (which the backend's writes into page-locked
    /// memory leave valid), and the array, for its shape, kind and
    /// retirement.
    pub(crate) fn output<T: Element>(host: &'a mut HostArray<T>) -> (&'a HostArray<T>, Self) {
        let len = size_of_val(host.as_slice());
        let data = host.as_mut_ptr().cast();
        // SAFETY: `data` holds the array's `len` bytes, borrowed exclusively
        // for 'a, and the array is only read through the shared borrow
        // returned beside (never its elements).
        (host, unsafe { Self::new(data, len, 0..usize::MAX, true) })
    }

    /// The runs `runs` of the same array.
    ///
    /// # Safety
    ///
    /// As for [`new`](Self::new): while the new access lives, the runs it
    /// writes are reached by no other access (this one included).
    pub(crate) unsafe fn narrow(&self, runs: Range<usize>) -> Self {
        // SAFETY: the caller's promise.
        unsafe { Self::new(self.data, self.len, runs, self.writable) }
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

    /// `range` lies outside the array.
    fn outside(&self, range: &Range<usize>) -> MemError {
        out_of(range, self.len)
    }

    /// The first of the bytes `range` holding chunk `runs`, when `runs` are
    /// this access's and `range` lies in their one block of `layout` (of
    /// bytes, as every layout an access is used with).
    fn block(
        &self,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: &Range<usize>,
    ) -> Result<NonNull<u8>, MemError> {
        self.check(runs)?;
        let inside = range.start <= range.end
            && range.end <= self.len
            && layout
                .contiguous_range(runs)
                .is_some_and(|block| block.start <= range.start && range.end <= block.end);
        // SAFETY: `range.start <= len`: the offset stays inside (or one past)
        // the array.
        inside
            .then(|| unsafe { self.data.add(range.start) })
            .ok_or_else(|| self.outside(range))
    }

    /// The contiguous bytes `range` holding chunk `runs`.
    pub(crate) fn range(
        &self,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: Range<usize>,
    ) -> Result<&[u8], MemError> {
        let start = self.block(layout, runs, &range)?;
        // SAFETY: the bytes lie inside the array and hold only runs of
        // this access, which no other access writes; `&self` lends them.
        Ok(unsafe { std::slice::from_raw_parts(start.as_ptr(), range.len()) })
    }

    /// The contiguous bytes `range` holding chunk `runs`, writable;
    /// `None` when the access only reads.
    pub(crate) fn range_mut(
        &mut self,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: Range<usize>,
    ) -> Result<Option<&mut [u8]>, MemError> {
        let start = self.block(layout, runs, &range)?;
        // SAFETY: as in `range`; the access writes, and `&mut self` makes
        // this the only borrow through it.
        Ok(self
            .writable
            .then(|| unsafe { std::slice::from_raw_parts_mut(start.as_ptr(), range.len()) }))
    }

    /// The address of byte `first`, where the first row of a strided
    /// copy of chunk `runs` starts ([`ChunkLayout::strided_rows`]: its rows
    /// hold runs of this access only).
    pub(crate) fn rows_start(
        &self,
        runs: &Range<usize>,
        first: usize,
    ) -> Result<NonNull<u8>, MemError> {
        self.check(runs)?;
        if first >= self.len {
            return Err(self.outside(&(first..first.saturating_add(1))));
        }
        // SAFETY: `first < len`: the offset stays inside the array.
        Ok(unsafe { self.data.add(first) })
    }

    /// [`rows_start`](Self::rows_start), for a copy that writes the rows;
    /// `None` when the access only reads.
    pub(crate) fn rows_start_mut(
        &mut self,
        runs: &Range<usize>,
        first: usize,
    ) -> Result<Option<NonNull<u8>>, MemError> {
        let start = self.rows_start(runs, first)?;
        Ok(self.writable.then_some(start))
    }

    /// Checks a gather or scatter of chunk `runs` through the device window
    /// of `window_len` bytes from `window_start`, then calls
    /// `copy(staging_range, host_block)` for each of its blocks: the bytes
    /// `staging_range` of the window lie at `host_block` in the array.
    fn blocks(
        &self,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        window_start: usize,
        window_len: usize,
        mut copy: impl FnMut(Range<usize>, NonNull<u8>) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        self.check(runs)?;
        layout.blocks(
            self.len,
            runs,
            window_start,
            window_len,
            |staged, hosted| {
                if hosted.end > self.len || hosted.len() != staged.len() {
                    return Err(self.outside(&hosted));
                }
                // SAFETY: `hosted` lies inside the array (checked).
                copy(staged, unsafe { self.data.add(hosted.start) })
            },
        )
    }

    /// [`ChunkLayout::gather`] of chunk `runs` into `staging`, the device
    /// bytes from `window_start`.
    pub(crate) fn gather(
        &self,
        layout: &ChunkLayout,
        runs: Range<usize>,
        window_start: usize,
        staging: &mut [u8],
    ) -> Result<(), MemError> {
        let size = staging.len();
        self.blocks(layout, &runs, window_start, size, |staged, host| {
            let dst = staging
                .get_mut(staged.clone())
                .ok_or_else(|| out_of(&staged, size))?;
            // SAFETY: the block lies inside the array and holds runs of this
            // access only (the layout maps `runs` to it).
            dst.copy_from_slice(unsafe { std::slice::from_raw_parts(host.as_ptr(), dst.len()) });
            Ok(())
        })
    }

    /// [`ChunkLayout::scatter`] of `staging`, the device bytes of chunk
    /// `runs` from `window_start`, into their places; nothing when the
    /// access only reads.
    ///
    /// # Safety
    ///
    /// No other thread scatters a window of the chunk overlapping
    /// `window_start..window_start + staging.len()` through this access at
    /// the same time.
    pub(crate) unsafe fn scatter(
        &self,
        layout: &ChunkLayout,
        runs: Range<usize>,
        staging: &[u8],
        window_start: usize,
    ) -> Result<(), MemError> {
        if !self.writable {
            return self.check(&runs);
        }
        let size = staging.len();
        self.blocks(layout, &runs, window_start, size, |staged, host| {
            let src = staging
                .get(staged.clone())
                .ok_or_else(|| out_of(&staged, size))?;
            // SAFETY: the block lies inside the array and holds bytes of this
            // window of a chunk of this access only, which no other thread
            // touches (the caller's promise).
            let dst = unsafe { std::slice::from_raw_parts_mut(host.as_ptr(), src.len()) };
            dst.copy_from_slice(src);
            Ok(())
        })
    }
}

/// The bytes `range` lie outside `size` bytes.
fn out_of(range: &Range<usize>, size: usize) -> MemError {
    MemError::OutOfBounds {
        offset: range.start as u64,
        end: range.end as u64,
        size: size as u64,
    }
}
