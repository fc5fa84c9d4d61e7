//! A chunk's views split by runs over host threads: [`KernelArgs::read_runs`]
//! and [`KernelArgs::write_runs`] view arrays with their run (chunk) axes,
//! and [`KernelArgs::par_runs`] runs a body on rayon's pool over contiguous
//! parts of the chunk's runs, each part given the views cut to its runs.
//!
//! The views are split with `ndarray`'s `split_at`, which hands out
//! disjoint halves: no part can reach another's runs, and no `unsafe` is
//! needed here. An unchunkable array's read view goes whole to every part;
//! an unchunkable array cannot be written by parts (its elements are not
//! split by runs).

use std::ops::Range;
use std::sync::Arc;

use ndarray::{ArrayView, ArrayViewMut, Axis, Dimension};

use crate::MemError;
use crate::kernel::{KernelArgs, KernelArray};

/// A chunk's read view of one array and its run axis, made by
/// [`KernelArgs::read_runs`] for [`KernelArgs::par_runs`].
#[derive(Debug)]
pub struct RunsView<'k, T, D: Dimension> {
    label: Arc<str>,
    view: ArrayView<'k, T, D>,
    /// `None` for an unchunkable array, viewed whole by every part.
    axis: Option<usize>,
}

/// A chunk's writable view of one chunked array and its run axis, made by
/// [`KernelArgs::write_runs`] for [`KernelArgs::par_runs`].
#[derive(Debug)]
pub struct RunsViewMut<'k, T, D: Dimension> {
    label: Arc<str>,
    view: ArrayViewMut<'k, T, D>,
    axis: usize,
}

mod sealed {
    /// Implemented by the views of this module and tuples of them only.
    pub trait Sealed {}
}

/// Views [`KernelArgs::par_runs`] can split by runs: a [`RunsView`], a
/// [`RunsViewMut`], or a tuple of up to 12 of them.
pub trait SplitRuns: sealed::Sealed + Send + Sized {
    /// What a part's body gets: the plain `ndarray` views, in the same
    /// tuple.
    type Views;
    /// Each split view's label and runs, appended to `runs`.
    fn run_lengths<'s>(&'s self, runs: &mut Vec<(&'s str, usize)>);
    /// The views of the runs before `run`, and of the rest.
    fn split_at_run(self, run: usize) -> (Self, Self);
    /// The plain views.
    fn into_views(self) -> Self::Views;
}

impl<T, D: Dimension> sealed::Sealed for RunsView<'_, T, D> {}

impl<'k, T: Sync, D: Dimension> SplitRuns for RunsView<'k, T, D> {
    type Views = ArrayView<'k, T, D>;

    fn run_lengths<'s>(&'s self, runs: &mut Vec<(&'s str, usize)>) {
        if let Some(axis) = self.axis {
            runs.push((&self.label, self.view.len_of(Axis(axis))));
        }
    }

    fn split_at_run(self, run: usize) -> (Self, Self) {
        let RunsView { label, view, axis } = self;
        let (before, after) = match axis {
            Some(axis) => view.split_at(Axis(axis), run),
            None => (view.clone(), view),
        };
        let part = |view| RunsView {
            label: Arc::clone(&label),
            view,
            axis,
        };
        (part(before), part(after))
    }

    fn into_views(self) -> Self::Views {
        self.view
    }
}

impl<T, D: Dimension> sealed::Sealed for RunsViewMut<'_, T, D> {}

impl<'k, T: Send, D: Dimension> SplitRuns for RunsViewMut<'k, T, D> {
    type Views = ArrayViewMut<'k, T, D>;

    fn run_lengths<'s>(&'s self, runs: &mut Vec<(&'s str, usize)>) {
        runs.push((&self.label, self.view.len_of(Axis(self.axis))));
    }

    fn split_at_run(self, run: usize) -> (Self, Self) {
        let RunsViewMut { label, view, axis } = self;
        let (before, after) = view.split_at(Axis(axis), run);
        let part = |view| RunsViewMut {
            label: Arc::clone(&label),
            view,
            axis,
        };
        (part(before), part(after))
    }

    fn into_views(self) -> Self::Views {
        self.view
    }
}

/// `SplitRuns` for a tuple of the views named.
macro_rules! tuple_split_runs {
    ($($view:ident)+) => {
        impl<$($view: SplitRuns),+> sealed::Sealed for ($($view,)+) {}

        #[allow(non_snake_case)]
        impl<$($view: SplitRuns),+> SplitRuns for ($($view,)+) {
            type Views = ($($view::Views,)+);

            fn run_lengths<'s>(&'s self, runs: &mut Vec<(&'s str, usize)>) {
                let ($($view,)+) = self;
                $($view.run_lengths(runs);)+
            }

            fn split_at_run(self, run: usize) -> (Self, Self) {
                let ($($view,)+) = self;
                $(let $view = $view.split_at_run(run);)+
                (($($view.0,)+), ($($view.1,)+))
            }

            fn into_views(self) -> Self::Views {
                let ($($view,)+) = self;
                ($($view.into_views(),)+)
            }
        }
    };
}

tuple_split_runs!(A);
tuple_split_runs!(A B);
tuple_split_runs!(A B C);
tuple_split_runs!(A B C E);
tuple_split_runs!(A B C E F);
tuple_split_runs!(A B C E F G);
tuple_split_runs!(A B C E F G H);
tuple_split_runs!(A B C E F G H I);
tuple_split_runs!(A B C E F G H I J);
tuple_split_runs!(A B C E F G H I J K);
tuple_split_runs!(A B C E F G H I J K L);
tuple_split_runs!(A B C E F G H I J K L M);

impl<'k> KernelArgs<'k> {
    /// [`read_nd_runs_as`](Self::read_nd_runs_as) for
    /// [`par_runs`](Self::par_runs): the view and its run axis. An
    /// unchunkable array goes whole to every part.
    pub fn read_runs<D: Dimension, A: KernelArray>(
        &mut self,
        array: &A,
        runs: usize,
    ) -> Result<RunsView<'k, A::Element, D>, MemError> {
        Ok(RunsView {
            label: Arc::from(array.label()),
            view: self.read_nd_runs_as(array, runs)?,
            axis: array.chunk_axis(),
        })
    }

    /// [`write_nd_runs_as`](Self::write_nd_runs_as) for
    /// [`par_runs`](Self::par_runs). An unchunkable array is refused
    /// ([`MemError::Kernel`]) before it is borrowed: its elements are not
    /// split by runs, so parts cannot write it.
    pub fn write_runs<D: Dimension, A: KernelArray>(
        &mut self,
        array: &A,
        runs: usize,
    ) -> Result<RunsViewMut<'k, A::Element, D>, MemError> {
        let Some(axis) = array.chunk_axis() else {
            return Err(self.runs_error(format!(
                "'{}' is unchunkable, so parts of the runs cannot write it: write it with \
                 write_nd outside par_runs",
                array.label()
            )));
        };
        Ok(RunsViewMut {
            label: Arc::from(array.label()),
            view: self.write_nd_runs_as(array, runs)?,
            axis,
        })
    }

    /// Runs `body` on rayon's pool over contiguous parts of the chunk's
    /// runs, about one per thread, each part given its runs (`start..end`,
    /// of the chunk) and `views` cut to them along each array's run axis,
    /// indexed from 0. The parts write disjoint runs. The first error by
    /// run order is returned, after every part has finished; views that
    /// disagree on their runs are [`MemError::Kernel`] and nothing runs.
    ///
    /// The body runs on pool threads, with no current stream: it computes
    /// on its views, and launches or waits for nothing (see the guide's
    /// `kernels` page).
    pub fn par_runs<V, F>(&self, views: V, body: F) -> Result<(), MemError>
    where
        V: SplitRuns,
        F: Fn(Range<usize>, V::Views) -> Result<(), MemError> + Sync,
    {
        let mut lengths = Vec::new();
        views.run_lengths(&mut lengths);
        let Some(&(first, runs)) = lengths.first() else {
            return Err(self.runs_error(
                "none of its views is split by runs (all are unchunkable); call the body \
                 directly"
                    .to_owned(),
            ));
        };
        if let Some((other, length)) = lengths.iter().find(|(_, length)| *length != runs) {
            return Err(self.runs_error(format!(
                "its views disagree on the chunk's runs: '{first}' holds {runs}, '{other}' \
                 {length}; view every array with the chunk's runs"
            )));
        }
        let part = runs.div_ceil(rayon::current_num_threads().max(1)).max(1);
        split(views, 0..runs, part, &body)
    }

    /// A [`MemError::Kernel`] of this kernel.
    fn runs_error(&self, reason: String) -> MemError {
        MemError::Kernel {
            kernel: self.kernel_name().to_owned(),
            reason,
        }
    }
}

/// `body` over `runs` in parts of at most `part` runs, halves joined on
/// rayon's pool; the first half's error first.
fn split<V, F>(views: V, runs: Range<usize>, part: usize, body: &F) -> Result<(), MemError>
where
    V: SplitRuns,
    F: Fn(Range<usize>, V::Views) -> Result<(), MemError> + Sync,
{
    let length = runs.len();
    if length <= part {
        return body(runs, views.into_views());
    }
    // Whole parts before the cut, so that every part but the last is full.
    let at = length.div_ceil(part) / 2 * part;
    let (before, after) = views.split_at_run(at);
    let middle = runs.start + at;
    let (first, second) = rayon::join(
        || split(before, runs.start..middle, part, body),
        || split(after, middle..runs.end, part, body),
    );
    first.and(second)
}
