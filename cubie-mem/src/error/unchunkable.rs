//! Which arrays of a batch the planner could not split, and why.

use std::fmt;

use crate::{ArrayRequest, Bytes};

/// An array the planner could not split, with its size and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnchunkableArray {
    /// The request's label.
    pub label: String,
    /// The request's shape.
    pub shape: Vec<usize>,
    /// The bytes it takes, whole, in every chunk.
    pub bytes: Bytes,
    /// Why it cannot be split.
    pub reason: UnchunkableReason,
}

/// Why an array cannot be split along the run axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnchunkableReason {
    /// Flagged unchunkable: meant to be whole in every chunk.
    Flagged,
    /// No chunk axis (`ArrayRequest::chunk_axis(None)`).
    NoChunkAxis,
    /// An empty shape: a scalar has no axis to split.
    EmptyShape,
    /// The chunk axis lies beyond the shape. `runs_axis` is the axis with the
    /// batch's run count, where the runs likely lie.
    AxisBeyondShape {
        /// The chunk axis set.
        axis: usize,
        /// The request's number of dimensions.
        rank: usize,
        /// The one axis with the batch's run count, if any.
        runs_axis: Option<usize>,
    },
    /// The chunk axis has length 1: one run, nothing to split.
    SingleRun {
        /// The chunk axis.
        axis: usize,
    },
}

impl UnchunkableArray {
    /// Describes `request` when the planner cannot split it; else `None`.
    pub(crate) fn of(label: &str, request: &ArrayRequest, total_runs: usize) -> Option<Self> {
        if request.is_chunkable() {
            return None;
        }
        let shape = request.shape();
        let reason = if request.is_flagged_unchunkable() {
            UnchunkableReason::Flagged
        } else if shape.is_empty() {
            UnchunkableReason::EmptyShape
        } else {
            match request.axis() {
                None => UnchunkableReason::NoChunkAxis,
                Some(axis) if axis >= shape.len() => {
                    let mut matching = (0..shape.len()).filter(|&a| shape[a] == total_runs);
                    let runs_axis = matching.next().filter(|_| matching.next().is_none());
                    UnchunkableReason::AxisBeyondShape {
                        axis,
                        rank: shape.len(),
                        runs_axis: runs_axis.filter(|_| total_runs > 1),
                    }
                }
                Some(axis) => UnchunkableReason::SingleRun { axis },
            }
        };
        Some(UnchunkableArray {
            label: label.to_owned(),
            shape: shape.to_vec(),
            bytes: Bytes(request.nbytes().unwrap_or(u64::MAX)),
            reason,
        })
    }

    /// The unchunkable arrays among `requests`, largest first.
    pub(crate) fn among<'a>(
        requests: impl IntoIterator<Item = (&'a str, &'a ArrayRequest)>,
        total_runs: usize,
    ) -> Vec<Self> {
        let mut arrays: Vec<Self> = requests
            .into_iter()
            .filter_map(|(label, request)| Self::of(label, request, total_runs))
            .collect();
        arrays.sort_by_key(|array| std::cmp::Reverse(array.bytes));
        arrays
    }
}

impl fmt::Display for UnchunkableArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' (shape {:?}, {}) {}",
            self.label, self.shape, self.bytes, self.reason
        )
    }
}

impl fmt::Display for UnchunkableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            UnchunkableReason::Flagged => f.write_str("is flagged unchunkable"),
            UnchunkableReason::NoChunkAxis => f.write_str("has no chunk axis"),
            UnchunkableReason::EmptyShape => f.write_str("has an empty shape"),
            UnchunkableReason::AxisBeyondShape {
                axis,
                rank,
                runs_axis,
            } => {
                write!(
                    f,
                    "has its chunk axis {axis} beyond its {rank} dimension(s) (the default axis {} is \
                     cubie's 3-D layout)",
                    ArrayRequest::DEFAULT_CHUNK_AXIS
                )?;
                match runs_axis {
                    Some(runs) => write!(
                        f,
                        ": its axis {runs} has the batch's runs, set ArrayRequest::chunk_axis({runs})"
                    ),
                    None => f.write_str(
                        ": set ArrayRequest::chunk_axis to the axis that holds the runs",
                    ),
                }
            }
            UnchunkableReason::SingleRun { axis } => {
                write!(f, "has length 1 on its chunk axis {axis}")
            }
        }
    }
}

/// The hint that names the unchunkable arrays.
pub(super) fn unchunkable_hint(arrays: &[UnchunkableArray]) -> String {
    if arrays.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = arrays.iter().map(ToString::to_string).collect();
    format!("; unchunkable: {}", listed.join(", "))
}
