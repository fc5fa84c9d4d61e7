//! What a host kernel cannot do with an argument as it declared it: read
//! device memory nothing wrote (the simulated device's initcheck, as
//! compute-sanitizer's), or view an array with another rank than its own.

use std::fmt;
use std::ops::Range;

use crate::Bytes;

/// A host kernel's argument that it cannot use as declared. Nothing ran
/// and nothing was borrowed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelArgument {
    /// The kernel declared it reads an array (`reads` or `updates`) whose
    /// bytes were not all written: an upload forgotten. Refused before the
    /// kernel runs; [`SimBackend::with_initcheck`](crate::SimBackend::with_initcheck)
    /// turns the check off.
    UnwrittenRead {
        /// The kernel's name.
        kernel: String,
        /// The array's label.
        label: String,
        /// The bytes of the array the kernel reads.
        read: Bytes,
        /// The first range of those bytes that nothing wrote.
        first_unwritten: Range<u64>,
        /// How many of those bytes nothing wrote.
        unwritten: Bytes,
    },
    /// The kernel asked for a view of an array with a rank (its number of
    /// axes) that is not the array's: `read_nd_as::<Ix2>` of a 3-d array.
    /// Ask for the array's own rank, or for `IxDyn`.
    RankMismatch {
        /// The kernel's name.
        kernel: String,
        /// The array's label.
        label: String,
        /// The array's rank: the length of its shape.
        rank: usize,
        /// The rank the view was asked with.
        asked: usize,
    },
}

impl fmt::Display for KernelArgument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelArgument::UnwrittenRead {
                kernel,
                label,
                read,
                first_unwritten,
                unwritten,
            } => write!(
                f,
                "kernel '{kernel}' reads '{label}', but nothing wrote its bytes {}..{} ({unwritten} of \
             the {read} it reads never written: poison on the simulated device, garbage on a \
             GPU); upload the array before the launch (copy_from_host, or bind it as an input of \
             the chunk pipeline so that each chunk uploads it), or declare the kernel writes(..) \
             it if the kernel does not read what it held; a device that reads poison on purpose \
             turns the check off with SimBackend::with_initcheck(false)",
                first_unwritten.start, first_unwritten.end
            ),
            KernelArgument::RankMismatch {
                kernel,
                label,
                rank,
                asked,
            } => write!(
                f,
                "kernel '{kernel}': '{label}' has {rank} axes, but a view of {asked} was asked; ask \
             for Ix{rank} (its declared shape's length), or IxDyn for any rank"
            ),
        }
    }
}
