//! A kernel's read of device memory nothing wrote: the simulated device's
//! initcheck, as compute-sanitizer's.

use std::fmt;
use std::ops::Range;

use crate::Bytes;

/// A kernel declared it reads an array (`reads` or `updates`) whose bytes
/// were not all written: an upload forgotten. Refused before the kernel
/// runs; [`SimBackend::with_initcheck`](crate::SimBackend::with_initcheck)
/// turns the check off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnwrittenRead {
    /// The kernel's name.
    pub kernel: String,
    /// The array's label.
    pub label: String,
    /// The bytes of the array the kernel reads.
    pub read: Bytes,
    /// The first range of those bytes that nothing wrote.
    pub first_unwritten: Range<u64>,
    /// How many of those bytes nothing wrote.
    pub unwritten: Bytes,
}

impl fmt::Display for UnwrittenRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let UnwrittenRead {
            kernel,
            label,
            read,
            first_unwritten,
            unwritten,
        } = self;
        write!(
            f,
            "kernel '{kernel}' reads '{label}', but nothing wrote its bytes {}..{} ({unwritten} of \
             the {read} it reads never written: poison on the simulated device, garbage on a \
             GPU); upload the array before the launch (copy_from_host, or bind it as an input of \
             the chunk pipeline so that each chunk uploads it), or declare the kernel writes(..) \
             it if the kernel does not read what it held; a device that reads poison on purpose \
             turns the check off with SimBackend::with_initcheck(false)",
            first_unwritten.start, first_unwritten.end
        )
    }
}
