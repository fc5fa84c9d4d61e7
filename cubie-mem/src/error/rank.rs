//! A typed-rank view of an array of another rank.

use std::fmt;

/// A host kernel asked for a view of an array with a rank (its number of
/// axes) that is not the array's: `read_nd_as::<Ix2>` of a 3-d array.
/// Nothing is borrowed; ask for the array's own rank, or for `IxDyn`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankMismatch {
    /// The kernel's name.
    pub kernel: String,
    /// The array's label.
    pub label: String,
    /// The array's rank: the length of its shape.
    pub rank: usize,
    /// The rank the view was asked with.
    pub asked: usize,
}

impl fmt::Display for RankMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let RankMismatch {
            kernel,
            label,
            rank,
            asked,
        } = self;
        write!(
            f,
            "kernel '{kernel}': '{label}' has {rank} axes, but a view of {asked} was asked; ask \
             for Ix{rank} (its declared shape's length), or IxDyn for any rank"
        )
    }
}
