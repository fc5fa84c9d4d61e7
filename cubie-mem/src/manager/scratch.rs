//! The lists serving a batch fills and empties again ([`Scratch`]), kept
//! in the manager's state between calls.

use super::batch::Receiver;
use super::decide::{Comparison, PlacedRequest};
use super::placed::Placement;

/// Lists that serving a batch fills and empties again, kept between calls
/// (empty, with their room) so that a batch of many instances does not ask
/// the allocator for large ones each time.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(super) held: Vec<Comparison>,
    pub(super) requests: Vec<PlacedRequest>,
    pub(super) placements: Vec<Placement>,
    pub(super) receivers: Vec<Receiver>,
}
