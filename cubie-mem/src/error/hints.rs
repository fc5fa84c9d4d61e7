//! Parts of the error messages that depend on the figures.

/// Which array of a host-device pair an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArraySide {
    /// The host array (the whole batch).
    Host,
    /// The device array (one chunk).
    Device,
}

impl std::fmt::Display for ArraySide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArraySide::Host => "host",
            ArraySide::Device => "device",
        })
    }
}

impl ArraySide {
    /// How a message names the array of a binding labelled `label`.
    pub(super) fn naming(self, label: &str) -> String {
        match self {
            ArraySide::Host => format!("bound to '{label}'"),
            ArraySide::Device => format!("'{label}'"),
        }
    }
}

/// `n` entries, in the singular for one.
fn entries(n: usize) -> String {
    format!("{n} entr{}", if n == 1 { "y" } else { "ies" })
}

/// What is wrong with the shape, and the fix, for `ChunkShapeMismatch`.
pub(super) fn shape_problem(
    side: ArraySide,
    found: &[usize],
    expected: &[usize],
    axis: usize,
    total_runs: usize,
    chunk_length: usize,
    runs_axis: Option<usize>,
) -> String {
    match side {
        ArraySide::Host if is_transpose(found, expected) => format!(
            "the transpose of the {expected:?} it needs, whose runs lie on axis {axis}; make the \
             host array with shape {expected:?} (transpose it) and bind along axis {axis}"
        ),
        ArraySide::Host if found.get(axis) == Some(&total_runs) => {
            let device: Vec<usize> = expected
                .iter()
                .enumerate()
                .map(|(a, &d)| if a == axis { chunk_length } else { d })
                .collect();
            format!(
                "the device array bound with it has shape {device:?} (one chunk of {chunk_length} runs \
                 along axis {axis}), so the host array must have shape {expected:?}; make the host array \
                 from the dims the device array was allocated for"
            )
        }
        ArraySide::Host => {
            let bound = match found.get(axis) {
                Some(&n) => format!("its axis {axis} has {}", entries(n)),
                None => format!("it has no axis {axis}"),
            };
            let fix = match runs_axis {
                Some(runs) => format!("the runs lie on axis {runs}: bind it along axis {runs}"),
                None => format!(
                    "a host array holds the whole batch: give the axis that holds the runs \
                     {total_runs} entries and bind along it"
                ),
            };
            format!("{bound}, but the batch has {total_runs} runs; {fix}")
        }
        ArraySide::Device => {
            let fix = match runs_axis {
                Some(runs) => format!(
                    "its axis {runs} has the chunk's {chunk_length} runs: if the runs lie there, bind along \
                     axis {runs}"
                ),
                None => "allocate it at the plan's chunked shape".to_owned(),
            };
            format!(
                "one chunk ({chunk_length} runs along axis {axis} of the host array) has shape {expected:?}; {fix}"
            )
        }
    }
}

/// Whether `found` holds the lengths of `expected` in another order.
fn is_transpose(found: &[usize], expected: &[usize]) -> bool {
    let sorted = |shape: &[usize]| {
        let mut sorted = shape.to_vec();
        sorted.sort_unstable();
        sorted
    };
    found != expected && sorted(found) == sorted(expected)
}

/// What a run needs beyond one buffer set, for `SingleRunTooLarge`.
pub(super) fn depth_need(depth: usize) -> String {
    if depth > 1 {
        format!(" in each of {depth} buffer sets (pipeline depth {depth})")
    } else {
        String::new()
    }
}

/// The fix a depth above 1 offers, for `SingleRunTooLarge`.
pub(super) fn depth_fix(depth: usize) -> &'static str {
    if depth > 1 {
        ", or lower the pipeline depth (ArrayRequest::pipeline_depth)"
    } else {
        ""
    }
}

/// The summary of a request that does not fit, from its report.
pub(super) fn fit_hint(report: &Option<Box<crate::report::FitReport>>) -> String {
    report
        .as_ref()
        .map_or_else(String::new, |report| format!("; {}", report.summary()))
}
