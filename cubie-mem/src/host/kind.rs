//! Which kind of host memory an array gets, and where spill files go.

use std::fmt;
use std::path::PathBuf;

use super::SystemMemory;
use crate::{Instance, MemError, MemoryManager};

/// The kinds of host memory a [`HostArray`](super::HostArray) lives in: the
/// host side of the family whose device side is [`MemoryKind`](crate::MemoryKind)
/// (where a request's array is allocated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostMemoryKind {
    /// Page-locked memory from the backend: the device copies it directly.
    Pinned,
    /// Ordinary memory; it moves through pinned staging buffers.
    Pageable,
    /// A memory-mapped temporary file, for arrays larger than RAM should
    /// hold; it moves through pinned staging buffers.
    Spilled,
}

impl fmt::Display for HostMemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostMemoryKind::Pinned => "pinned",
            HostMemoryKind::Pageable => "pageable",
            HostMemoryKind::Spilled => "spilled",
        })
    }
}

impl MemoryManager {
    /// The size above which host arrays of `instance` spill to a file.
    ///
    /// Resolves the instance's setting, its owner's, the manager's, then 80%
    /// of total RAM. Where RAM cannot be measured and nothing is set, arrays
    /// never spill (`u64::MAX`).
    pub(crate) fn host_spill_threshold(&self, instance: &Instance) -> u64 {
        self.inner
            .spill_settings(instance.id)
            .threshold
            .or_else(|| SystemMemory::read().map(|ram| ram.default_spill_threshold()))
            .unwrap_or(u64::MAX)
    }

    /// The directory spill files of `instance` go to.
    ///
    /// Resolves the instance's setting, its owner's, the manager's, then the
    /// system temporary directory. The directory must exist: a missing one is
    /// an error (it is not created, so that a typo cannot scatter files).
    pub(crate) fn spill_directory(&self, instance: &Instance) -> Result<PathBuf, MemError> {
        self.check_registered(instance)?;
        let directory = self
            .inner
            .spill_settings(instance.id)
            .directory
            .unwrap_or_else(std::env::temp_dir);
        if directory.is_dir() {
            Ok(directory)
        } else {
            Err(MemError::Io {
                operation: "using spill directory",
                path: directory.display().to_string(),
                message: "it does not exist or is not a directory; create it, or set another with \
                          Registration::spill_directory, Owner::with_spill or \
                          ManagerConfig::spill_directory"
                    .into(),
            })
        }
    }

    /// The kind of host memory for an array of `nbytes` owned by `instance`:
    /// spilled above the spill threshold
    /// ([`host_spill_threshold`](Self::host_spill_threshold)); else pinned
    /// up to `pinned_max_bytes`; else pageable.
    pub(crate) fn choose_host_memory_kind(
        &self,
        nbytes: u64,
        instance: &Instance,
    ) -> HostMemoryKind {
        if nbytes > self.host_spill_threshold(instance) {
            HostMemoryKind::Spilled
        } else if nbytes <= self.config().pinned_max_bytes {
            HostMemoryKind::Pinned
        } else {
            HostMemoryKind::Pageable
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{MemoryManager, Registration, SimBackend, SystemMemory};

    #[test]
    fn the_default_spill_threshold_is_four_fifths_of_ram() {
        let mgr = MemoryManager::new(SimBackend::new(1 << 30));
        let solver = mgr.register(Registration::new()).unwrap();
        let expected = SystemMemory::read().map_or(u64::MAX, |ram| ram.default_spill_threshold());
        assert_eq!(mgr.host_spill_threshold(&solver), expected);
    }
}
