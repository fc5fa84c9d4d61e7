//! [`BackendError`]: what a backend reports; the manager turns it into a
//! [`MemError`] with the array's label.

use std::fmt;

use super::DevicePtr;
use crate::{Bytes, MemError};

/// The longest one operation may take on the simulated device's clock:
/// 2^50 ns, about 13 days. Longer is refused ([`BackendError::ClockOverflow`]).
pub(crate) const LONGEST_OPERATION_NS: u64 = 1 << 50;

/// Which memory ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySpace {
    /// Device memory.
    Device,
    /// Page-locked host memory.
    PageLocked,
}

impl fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemorySpace::Device => "device",
            MemorySpace::PageLocked => "page-locked host",
        })
    }
}

/// Memory two unordered operations touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HazardMemory {
    /// Device memory: the allocation's address.
    Device(DevicePtr),
    /// A page-locked host block: the address of the bytes in question.
    PageLocked(u64),
}

impl fmt::Display for HazardMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HazardMemory::Device(ptr) => write!(f, "device memory at {ptr}"),
            HazardMemory::PageLocked(address) => {
                write!(f, "the page-locked host block at {address:#x}")
            }
        }
    }
}

/// A failure reported by a [`Backend`](super::Backend).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The memory could not be provided.
    #[error("out of {space} memory: {requested} requested{}", free.map(|f| format!(", {f} free")).unwrap_or_default())]
    OutOfMemory {
        /// Which memory.
        space: MemorySpace,
        /// Bytes asked for.
        requested: Bytes,
        /// Free bytes, when the backend knows them.
        free: Option<Bytes>,
    },

    /// A driver call failed.
    #[error("{operation} failed: {message} (code {code})")]
    Driver {
        /// What was being done.
        operation: &'static str,
        /// The driver's result code.
        code: u32,
        /// The code's name or description.
        message: String,
    },

    /// An earlier failure left the device context unusable; only a new
    /// process can use the device again.
    #[error(
        "{operation} failed: the device context is unusable since {during} failed with {message} \
         (code {code}); every later call fails the same way: restart the process"
    )]
    ContextLost {
        /// What was being done now.
        operation: &'static str,
        /// The call whose failure made the context unusable.
        during: &'static str,
        /// The driver's result code then.
        code: u32,
        /// The code's name.
        message: String,
    },

    /// A device address that is not a live allocation of this backend.
    #[error("{operation}: no live allocation of this backend starts at {ptr}")]
    UnknownAllocation {
        /// What was being done.
        operation: &'static str,
        /// The address given.
        ptr: DevicePtr,
    },

    /// A byte range outside an allocation.
    #[error("{operation}: bytes {offset}..{end} lie outside the allocation of {size} bytes")]
    OutOfBounds {
        /// What was being done.
        operation: &'static str,
        /// Start of the range.
        offset: u64,
        /// End of the range.
        end: u64,
        /// The allocation's size.
        size: u64,
    },

    /// Two streams touched the same memory, one writing, with no event
    /// ordering them.
    #[error(
        "stream hazard: {operation} on stream {accessed_on} touches {memory}, {earlier} on stream {earlier_on} \
         with no event between; record an event after the earlier work and make stream {accessed_on} wait for it"
    )]
    StreamHazard {
        /// The later operation.
        operation: &'static str,
        /// The stream it was queued on.
        accessed_on: u64,
        /// The memory both touch.
        memory: HazardMemory,
        /// What the earlier operation did ("written by a copy", ...).
        earlier: &'static str,
        /// The stream of the earlier operation.
        earlier_on: u64,
    },

    /// The host touched page-locked memory that an unfinished asynchronous
    /// copy still uses. Reported at the next call.
    #[error(
        "host {access} of the page-locked host block at {address:#x} while it is {copy} on stream \
         {stream}; wait for an event recorded after the copy (or synchronise the stream) first"
    )]
    HostAccessInFlight {
        /// `"read"`, `"write"`, or `"free"` (the block dropped).
        access: &'static str,
        /// The address of the bytes in question.
        address: u64,
        /// What the copy in flight does to them.
        copy: &'static str,
        /// The copy's stream.
        stream: u64,
    },

    /// An asynchronous copy was given host memory that is not a page-locked
    /// block of this backend.
    #[error(
        "{operation}: the {len} host bytes at {address:#x} are not page-locked memory of this \
         backend; asynchronous copies take a PinnedBlock of the same backend (alloc_pinned), and \
         pageable memory goes through copy_to_device and copy_from_device"
    )]
    NotPageLocked {
        /// What was being done.
        operation: &'static str,
        /// The start of the host bytes.
        address: u64,
        /// Their length.
        len: usize,
    },

    /// Work whose modelled time does not fit the simulated device's clock
    /// ([`SimBackend::LONGEST_OPERATION`](crate::SimBackend::LONGEST_OPERATION)).
    /// Refused before anything changes.
    #[error(
        "{operation}: {} ns of modelled time starting at {start_ns} ns does not fit the \
         simulated clock: one operation takes at most {} ns (about 13 days), and all work \
         ends by {} ns; give the work a shorter modelled duration",
        duration.as_nanos(),
        LONGEST_OPERATION_NS,
        u64::MAX
    )]
    ClockOverflow {
        /// What was being done.
        operation: &'static str,
        /// When the work would start, in nanoseconds of the device's clock.
        start_ns: u64,
        /// Its modelled duration.
        duration: std::time::Duration,
    },

    /// A kernel declared it reads an allocation (`Access::Read` or
    /// `Access::ReadWrite`) whose bytes were not all written: the simulated
    /// device's initcheck, as compute-sanitizer's. Refused before anything
    /// runs or is timed.
    #[error(
        "launch: kernel '{kernel}' reads the allocation at {ptr}, but nothing wrote its bytes \
         {}..{} ({unwritten} of the {read} it reads never written); they read as poison on the \
         simulated device and as garbage on a GPU: write them first (a copy, or a kernel that \
         writes them), declare the argument Access::Write if the kernel does not read it, or turn \
         the check off with SimBackend::with_initcheck(false)",
        first_unwritten.start,
        first_unwritten.end
    )]
    UnwrittenRead {
        /// The kernel's name.
        kernel: String,
        /// The allocation read.
        ptr: DevicePtr,
        /// The bytes the kernel reads, from the allocation's start.
        read: Bytes,
        /// The first range of those bytes never written.
        first_unwritten: std::ops::Range<u64>,
        /// How many of those bytes were never written.
        unwritten: Bytes,
    },

    /// A strided copy's figures do not describe rows that can be copied.
    #[error("{operation}: {rows}: {reason}")]
    BadStride {
        /// What was being done.
        operation: &'static str,
        /// The figures given.
        rows: super::StridedRows,
        /// What is wrong, and what to change.
        reason: &'static str,
    },

    /// The backend cannot do this.
    #[error("{operation} is not supported: {reason}")]
    Unsupported {
        /// What was asked.
        operation: &'static str,
        /// Why not, and what to do instead.
        reason: String,
    },
}

impl BackendError {
    /// Whether the error means memory ran out.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, BackendError::OutOfMemory { .. })
    }

    /// The [`MemError`] for this failure while working on the array `label`.
    pub(crate) fn for_array(self, backend: &'static str, label: &str) -> MemError {
        match self {
            BackendError::OutOfMemory {
                requested, free, ..
            } => {
                let free = free.unwrap_or(Bytes(0));
                MemError::OutOfMemory {
                    label: label.to_owned(),
                    requested,
                    free,
                    idle_held: Bytes(0),
                    limit: free,
                    report: None,
                }
            }
            BackendError::OutOfBounds {
                offset, end, size, ..
            } => MemError::OutOfBounds { offset, end, size },
            BackendError::StreamHazard { .. } => MemError::StreamHazard {
                label: label.to_owned(),
                backend,
                error: self,
            },
            other => MemError::Backend {
                backend,
                error: other,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_figures() {
        let oom = BackendError::OutOfMemory {
            space: MemorySpace::Device,
            requested: Bytes(2048),
            free: Some(Bytes(100)),
        };
        assert_eq!(
            oom.to_string(),
            "out of device memory: 2048 B (2.00 KiB) requested, 100 B free"
        );
        let hazard = BackendError::StreamHazard {
            operation: "copy to device",
            accessed_on: 2,
            memory: HazardMemory::Device(DevicePtr(0x100)),
            earlier: "written by a kernel",
            earlier_on: 1,
        };
        let message = hazard.clone().for_array("simulated", "state").to_string();
        assert!(message.contains("'state'"), "{message}");
        assert!(message.contains("stream 2") && message.contains("stream 1"));
        assert!(matches!(
            oom.for_array("simulated", "x"),
            MemError::OutOfMemory {
                free: Bytes(100),
                ..
            }
        ));
    }
}
