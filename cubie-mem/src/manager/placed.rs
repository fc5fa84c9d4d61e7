//! A batch as placed, handed from placing to committing: where each
//! requested array's buffer in each set comes from ([`Placement`]), and
//! per request how many sets it held ([`Placed`]).

use std::sync::Arc;

use super::decide::PlacedRequest;
use crate::array::slot::Slot;

/// Where one requested array's buffer in one set comes from. Placements
/// follow the order of the taken requests, and each request's sets in order.
pub(super) enum Placement {
    /// The array held under the (label, set) has the same type and shape:
    /// kept, and its handles stay valid.
    Keep,
    /// The buffer held under the (label, set) is large enough: reused for
    /// the new type and shape.
    Reuse,
    /// New memory, replacing what the (label, set) held (if anything) on
    /// commit.
    Fresh(Arc<Slot>),
}

/// Where each requested array's buffers come from, and per request how
/// many sets it held (more than the plan has: the extra ones are retired).
pub(super) struct Placed {
    pub(super) placements: Vec<Placement>,
    pub(super) requests: Vec<PlacedRequest>,
}
