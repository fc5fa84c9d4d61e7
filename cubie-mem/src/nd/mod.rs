//! `ndarray` views (feature `ndarray`): a host kernel's arguments and host
//! arrays as n-dimensional views of their shapes, so that a kernel over
//! `[saves, states, runs]` buffers reads `state[[save, v, run]]` as the
//! buffers are declared, instead of computing flat offsets by hand.
//!
//! A device array of a chunked batch has the plan's chunked shape: its
//! chunk axis holds the chunk length, of which the last chunk uses its own
//! runs only. The `_runs` views cut the chunk axis to a chunk's runs, so
//! the padding after them is not in the view; the plain views include it.
//! The `_as` views have a fixed rank (`Ix3`), checked once
//! ([`KernelArgument::RankMismatch`]) instead of at every index; `runs` splits a
//! chunk's views by runs over host threads ([`KernelArgs::par_runs`]).
//!
//! ```
//! use std::time::Duration;
//! use cubie_mem::{ArrayRequest, HostKernel, MemoryManager, Registration, SimBackend};
//!
//! let mgr = MemoryManager::new(SimBackend::new(1 << 30));
//! let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
//! let request = ArrayRequest::of::<f64>([2, 3, 8]).chunk_axis(2).total_runs(8);
//! mgr.queue_request(&solver, [("state", request)])?;
//! let state = mgr.allocate_queue_for(&solver)?.take::<f64>("state")?;
//! // A chunk of 5 runs in an array 8 runs wide.
//! HostKernel::new("fill", Duration::from_micros(1)).writes(&state).launch(|args| {
//!     let mut view = args.write_nd_runs(&state, 5)?;
//!     assert_eq!(view.shape(), [2, 3, 5]);
//!     for ((save, v, run), y) in view.indexed_iter_mut().map(|(i, y)| ((i[0], i[1], i[2]), y)) {
//!         *y = (100 * save + 10 * v + run) as f64;
//!     }
//!     Ok::<_, cubie_mem::MemError>(())
//! })?;
//! let host = state.to_vec()?;
//! assert_eq!(host[(3 + 2) * 8 + 4], 124.0); // save 1, state 2, run 4
//! # Ok::<(), cubie_mem::MemError>(())
//! ```

mod runs;

pub use runs::{RunsView, RunsViewMut, SplitRuns};

use ndarray::{ArrayView, ArrayViewD, ArrayViewMut, ArrayViewMutD, Axis, Dimension, IxDyn, Slice};

use crate::kernel::{KernelArgs, KernelArray};
use crate::{Element, HostArray, KernelArgument, MemError};

/// The error of a view that cannot be made: `reason` says why.
fn view_error(kernel: &str, label: &str, reason: impl std::fmt::Display) -> MemError {
    MemError::Kernel {
        kernel: kernel.to_owned(),
        reason: format!("'{label}' cannot be viewed as an n-dimensional array: {reason}"),
    }
}

/// The chunk axis of `shape` cut to `runs`: the axis and its new length,
/// or why not (more runs than the axis holds).
fn runs_axis(shape: &[usize], axis: Option<usize>, runs: usize) -> Result<Option<usize>, String> {
    let Some(axis) = axis else {
        return Ok(None);
    };
    match shape.get(axis) {
        Some(&length) if runs <= length => Ok(Some(axis)),
        Some(&length) => Err(format!(
            "{runs} runs asked along its chunk axis {axis}, which holds {length}: pass the chunk's \
             runs (`chunk.len()`), at most the chunk length"
        )),
        None => Err(format!(
            "its chunk axis {axis} is outside its shape {shape:?}"
        )),
    }
}

impl<'k> KernelArgs<'k> {
    /// The [`KernelArgument::RankMismatch`] of a fixed rank `D` that is not `array`'s,
    /// checked before anything is borrowed.
    fn check_rank<D: Dimension, A: KernelArray>(&self, array: &A) -> Result<(), MemError> {
        let rank = array.shape().len();
        match D::NDIM {
            Some(asked) if asked != rank => {
                Err(MemError::KernelArgument(KernelArgument::RankMismatch {
                    kernel: self.kernel_name().to_owned(),
                    label: array.label().to_owned(),
                    rank,
                    asked,
                }))
            }
            _ => Ok(()),
        }
    }

    /// The elements of `array` (listed with `reads` or `updates`) as a view
    /// of its shape, the chunk axis whole (a short last chunk's padding
    /// included).
    pub fn read_nd<A: KernelArray>(
        &mut self,
        array: &A,
    ) -> Result<ArrayViewD<'k, A::Element>, MemError> {
        self.read_nd_as(array)
    }

    /// The elements of `array` (listed with `writes` or `updates`) as a
    /// writable view of its shape, the chunk axis whole.
    pub fn write_nd<A: KernelArray>(
        &mut self,
        array: &A,
    ) -> Result<ArrayViewMutD<'k, A::Element>, MemError> {
        self.write_nd_as(array)
    }

    /// [`read_nd`](Self::read_nd) with the rank `D` (`Ix3` for a
    /// `[saves, states, runs]` array): indexed without a rank check per
    /// index. Another rank than the array's is [`KernelArgument::RankMismatch`].
    pub fn read_nd_as<D: Dimension, A: KernelArray>(
        &mut self,
        array: &A,
    ) -> Result<ArrayView<'k, A::Element, D>, MemError> {
        self.check_rank::<D, A>(array)?;
        let kernel = self.kernel_name();
        let elements = self.read(array)?;
        ArrayViewD::from_shape(IxDyn(array.shape()), elements)
            .and_then(ArrayView::into_dimensionality)
            .map_err(|error| view_error(kernel, array.label(), error))
    }

    /// [`write_nd`](Self::write_nd) with the rank `D`, as
    /// [`read_nd_as`](Self::read_nd_as).
    pub fn write_nd_as<D: Dimension, A: KernelArray>(
        &mut self,
        array: &A,
    ) -> Result<ArrayViewMut<'k, A::Element, D>, MemError> {
        self.check_rank::<D, A>(array)?;
        let kernel = self.kernel_name();
        let elements = self.write(array)?;
        ArrayViewMutD::from_shape(IxDyn(array.shape()), elements)
            .and_then(ArrayViewMut::into_dimensionality)
            .map_err(|error| view_error(kernel, array.label(), error))
    }

    /// [`read_nd`](Self::read_nd), the chunk axis cut to its first `runs`
    /// (a chunk's runs, `chunk.len()`): a short last chunk's padding is not
    /// in the view. An unchunkable array is viewed whole.
    pub fn read_nd_runs<A: KernelArray>(
        &mut self,
        array: &A,
        runs: usize,
    ) -> Result<ArrayViewD<'k, A::Element>, MemError> {
        self.read_nd_runs_as(array, runs)
    }

    /// [`write_nd`](Self::write_nd), the chunk axis cut to its first `runs`.
    pub fn write_nd_runs<A: KernelArray>(
        &mut self,
        array: &A,
        runs: usize,
    ) -> Result<ArrayViewMutD<'k, A::Element>, MemError> {
        self.write_nd_runs_as(array, runs)
    }

    /// [`read_nd_runs`](Self::read_nd_runs) with the rank `D`, as
    /// [`read_nd_as`](Self::read_nd_as).
    pub fn read_nd_runs_as<D: Dimension, A: KernelArray>(
        &mut self,
        array: &A,
        runs: usize,
    ) -> Result<ArrayView<'k, A::Element, D>, MemError> {
        let axis = self.runs_axis(array, runs)?;
        let view = self.read_nd_as(array)?;
        Ok(match axis {
            Some(axis) => view.slice_axis_move(Axis(axis), Slice::from(..runs)),
            None => view,
        })
    }

    /// [`write_nd_runs`](Self::write_nd_runs) with the rank `D`, as
    /// [`read_nd_as`](Self::read_nd_as).
    pub fn write_nd_runs_as<D: Dimension, A: KernelArray>(
        &mut self,
        array: &A,
        runs: usize,
    ) -> Result<ArrayViewMut<'k, A::Element, D>, MemError> {
        let axis = self.runs_axis(array, runs)?;
        let view = self.write_nd_as(array)?;
        Ok(match axis {
            Some(axis) => view.slice_axis_move(Axis(axis), Slice::from(..runs)),
            None => view,
        })
    }

    /// `array`'s chunk axis, checked to hold `runs`.
    fn runs_axis<A: KernelArray>(&self, array: &A, runs: usize) -> Result<Option<usize>, MemError> {
        runs_axis(array.shape(), array.chunk_axis(), runs)
            .map_err(|reason| view_error(self.kernel_name(), array.label(), reason))
    }
}

impl<T: Element> HostArray<T> {
    /// The array as a view of its shape (the whole batch).
    pub fn view(&self) -> ArrayViewD<'_, T> {
        let elements = self.as_slice();
        debug_assert_eq!(self.shape().iter().product::<usize>(), elements.len());
        // SAFETY: a host array holds exactly its shape's product of
        // elements, contiguous and aligned for `T` (`as_slice`), borrowed
        // for the view's life; the standard (row-major) layout of the shape
        // addresses each of them once.
        unsafe { ArrayViewD::from_shape_ptr(IxDyn(self.shape()), elements.as_ptr()) }
    }

    /// The array as a writable view of its shape.
    pub fn view_mut(&mut self) -> ArrayViewMutD<'_, T> {
        let shape = IxDyn(self.shape());
        let elements = self.as_mut_slice();
        debug_assert_eq!(shape.size(), elements.len());
        // SAFETY: as for `view`, the elements borrowed mutably for the
        // view's life.
        unsafe { ArrayViewMutD::from_shape_ptr(shape, elements.as_mut_ptr()) }
    }
}
