//! How a binding borrows its host array: read only (an input), wholly
//! (an output or inout binding of one device), or its runs only (a binding
//! of one device of a [`DeviceSet`](crate::DeviceSet), beside the others);
//! and the element ranges, row addresses and scatter targets of a chunk
//! that each kind of borrow gives.

use std::ops::Range;
use std::ptr::NonNull;

use super::layout::ChunkLayout;
use super::runs_access::RunsAccess;
use super::staging_threads::ScatterTarget;
use crate::host::HostArray;
use crate::{Element, MemError};

/// How the host side of a binding is borrowed.
pub(crate) enum HostRef<'p, T: Element> {
    /// Read only: an input.
    Shared(&'p HostArray<T>),
    /// Read and written: the whole array is the pipeline's.
    Exclusive(&'p mut HostArray<T>),
    /// Read and written, its runs only: other devices of a set stream the
    /// array's other runs at the same time.
    Runs(RunsAccess<'p, T>),
}

impl<T: Element> HostRef<'_, T> {
    /// The array, for its shape, kind and retirement.
    pub(super) fn get(&self) -> &HostArray<T> {
        match self {
            HostRef::Shared(host) => host,
            HostRef::Exclusive(host) => host,
            HostRef::Runs(access) => access.array(),
        }
    }

    /// The contiguous elements `range` that hold chunk `runs` (an error
    /// naming `label` when they lie outside the array).
    pub(super) fn range(
        &self,
        label: &str,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: Range<usize>,
    ) -> Result<&[T], MemError> {
        let whole = match self {
            HostRef::Shared(host) => host.as_slice(),
            HostRef::Exclusive(host) => host.as_slice(),
            HostRef::Runs(access) => return access.range(label, layout, runs, range),
        };
        whole
            .get(range.clone())
            .ok_or_else(|| host_range_error(label, &range, whole.len()))
    }

    /// The contiguous elements `range` that hold chunk `runs`, writable;
    /// `None` for an input's array.
    pub(super) fn range_mut(
        &mut self,
        label: &str,
        layout: &ChunkLayout,
        runs: &Range<usize>,
        range: Range<usize>,
    ) -> Result<Option<&mut [T]>, MemError> {
        let whole = match self {
            HostRef::Shared(_) => return Ok(None),
            HostRef::Exclusive(host) => host.as_mut_slice(),
            HostRef::Runs(access) => {
                return access.range_mut(label, layout, runs, range).map(Some);
            }
        };
        let len = whole.len();
        whole
            .get_mut(range.clone())
            .map(Some)
            .ok_or_else(|| host_range_error(label, &range, len))
    }

    /// The address of element `first`, where the rows of a strided copy of
    /// chunk `runs` start, writable (through the address): an output's
    /// array, whose runs the pipeline borrows exclusively; `None` for an
    /// input's.
    pub(super) fn rows_start_mut(
        &mut self,
        label: &str,
        runs: &Range<usize>,
        first: usize,
    ) -> Result<Option<NonNull<T>>, MemError> {
        let whole = match self {
            HostRef::Shared(_) => return Ok(None),
            HostRef::Exclusive(host) => host.as_mut_slice(),
            HostRef::Runs(access) => return access.rows_start(label, runs, first).map(Some),
        };
        let len = whole.len();
        whole
            .get_mut(first..)
            .map(|start| Some(NonNull::from(start).cast()))
            .ok_or_else(|| host_range_error(label, &(first..first.saturating_add(1)), len))
    }

    /// The address of element `first`, where the rows of a strided copy of
    /// chunk `runs` start, read-only: no slice of an array other devices
    /// write is made.
    pub(super) fn rows_address(
        &self,
        label: &str,
        runs: &Range<usize>,
        first: usize,
    ) -> Result<NonNull<T>, MemError> {
        let whole = match self {
            HostRef::Shared(host) => host.as_slice(),
            HostRef::Exclusive(host) => host.as_slice(),
            HostRef::Runs(access) => return access.rows_start(label, runs, first),
        };
        whole
            .get(first..)
            .map(|start| NonNull::from(start).cast())
            .ok_or_else(|| host_range_error(label, &(first..first.saturating_add(1)), whole.len()))
    }

    /// Gathers chunk `runs` into `part`, the device window from `start`.
    pub(super) fn gather(
        &self,
        layout: &ChunkLayout,
        runs: Range<usize>,
        start: usize,
        part: &mut [T],
    ) -> Result<(), MemError> {
        match self {
            HostRef::Shared(host) => layout.gather(host.as_slice(), runs, start, part),
            HostRef::Exclusive(host) => layout.gather(host.as_slice(), runs, start, part),
            HostRef::Runs(access) => access.gather(layout, runs, start, part),
        }
    }

    /// Chunk `runs` of the array, for staging threads to scatter into;
    /// `None` for an input's array.
    pub(super) fn target(
        &mut self,
        runs: Range<usize>,
    ) -> Result<Option<ScatterTarget<'_, T>>, MemError> {
        match self {
            HostRef::Shared(_) => Ok(None),
            HostRef::Exclusive(host) => Ok(Some(ScatterTarget::new(host.as_mut_slice(), runs))),
            HostRef::Runs(access) => access.target(runs).map(Some),
        }
    }
}

fn host_range_error(label: &str, range: &Range<usize>, len: usize) -> MemError {
    MemError::LengthMismatch {
        label: label.to_owned(),
        expected: range.end,
        found: len,
    }
}
