//! Parts of the error messages: which array a shape error is about, and the
//! hints that depend on the figures.

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

/// The axis to bind instead, for `ChunkShapeMismatch`.
pub(super) fn runs_axis_hint(runs_axis: Option<usize>, total_runs: usize) -> String {
    match runs_axis {
        Some(axis) => format!(
            " (axis {axis} holds the batch's {total_runs} runs: bind the array with chunk axis {axis})"
        ),
        None => String::new(),
    }
}

/// The fix for requests left unchunkable by their chunk axis, for `AllUnchunkable`.
pub(super) fn misaxed_hint(requests: &[String]) -> String {
    if requests.is_empty() {
        return String::new();
    }
    format!(
        "; {} would be chunkable but the chunk axis lies beyond the shape (the default axis {} is \
         cubie's 3-D layout): set ArrayRequest::chunk_axis to the axis that holds the runs",
        requests.join(", "),
        crate::ArrayRequest::DEFAULT_CHUNK_AXIS
    )
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
