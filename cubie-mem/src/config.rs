//! Manager configuration, and parsing of sizes such as `512MiB`.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Bytes, MemError};

/// How the memory available to a stream group is limited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LimitMode {
    /// The group may use the device's free memory.
    #[default]
    Passive,
    /// The group may use `min(sum of its members' caps - bytes allocated, free)`.
    Active,
}

/// Default largest pinned host array: 1 GiB.
pub(crate) const DEFAULT_PINNED_MAX_BYTES: u64 = 1 << 30;

/// Settings of a [`MemoryManager`](crate::MemoryManager), changed by
/// chainable setters or struct update:
///
/// ```
/// use cubie_mem::{LimitMode, ManagerConfig};
///
/// let config = ManagerConfig::default().granule(0).limit_mode(LimitMode::Active);
/// let same = ManagerConfig { allocation_granule_bytes: 0, limit_mode: LimitMode::Active, ..Default::default() };
/// assert_eq!(config, same);
/// assert_eq!(config.pinned_max_bytes, ManagerConfig::DEFAULT_PINNED_MAX_BYTES);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    /// Memory always left free, and below which nothing is allocated (default 32 MiB; 0 allowed).
    pub allocation_granule_bytes: u64,
    /// The initial limit mode.
    pub limit_mode: LimitMode,
    /// Host arrays up to this size may be pinned (default 1 GiB).
    pub pinned_max_bytes: u64,
    /// Host arrays above this size spill to a file; `None`: 80% of total RAM.
    pub host_spill_threshold: Option<u64>,
    /// Where spill files go; `None`: the system temporary directory.
    pub spill_directory: Option<PathBuf>,
}

impl ManagerConfig {
    /// The default [`pinned_max_bytes`](Self::pinned_max_bytes): 1 GiB.
    pub const DEFAULT_PINNED_MAX_BYTES: u64 = DEFAULT_PINNED_MAX_BYTES;

    /// Sets [`allocation_granule_bytes`](Self::allocation_granule_bytes).
    /// `granule(0)` lets a small device use all of its free memory.
    pub fn granule(mut self, bytes: u64) -> Self {
        self.allocation_granule_bytes = bytes;
        self
    }

    /// Sets the initial [`limit_mode`](Self::limit_mode) (default passive).
    pub fn limit_mode(mut self, mode: LimitMode) -> Self {
        self.limit_mode = mode;
        self
    }

    /// Sets [`pinned_max_bytes`](Self::pinned_max_bytes).
    pub fn pinned_max_bytes(mut self, bytes: u64) -> Self {
        self.pinned_max_bytes = bytes;
        self
    }

    /// Sets [`host_spill_threshold`](Self::host_spill_threshold), unless an
    /// instance or its owner sets its own.
    pub fn host_spill_threshold(mut self, bytes: u64) -> Self {
        self.host_spill_threshold = Some(bytes);
        self
    }

    /// Sets [`spill_directory`](Self::spill_directory), unless an instance
    /// or its owner sets its own. It must exist.
    pub fn spill_directory(mut self, directory: impl Into<PathBuf>) -> Self {
        self.spill_directory = Some(directory.into());
        self
    }

    /// Checks that the [`spill_directory`](Self::spill_directory), when set,
    /// exists: it is never created, so that a typo cannot scatter files.
    ///
    /// ```
    /// use cubie_mem::{ManagerConfig, MemError};
    ///
    /// assert!(ManagerConfig::default().spill_directory(std::env::temp_dir()).validate().is_ok());
    /// let missing = ManagerConfig::default().spill_directory("/no/such/spill/dir");
    /// assert!(matches!(missing.validate(), Err(MemError::Config { .. })));
    /// ```
    pub fn validate(&self) -> Result<(), MemError> {
        match &self.spill_directory {
            Some(directory) => {
                check_spill_directory("ManagerConfig::spill_directory".to_owned(), directory)
            }
            None => Ok(()),
        }
    }
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            allocation_granule_bytes: crate::plan::DEFAULT_ALLOCATION_GRANULE,
            limit_mode: LimitMode::Passive,
            pinned_max_bytes: DEFAULT_PINNED_MAX_BYTES,
            host_spill_threshold: None,
            spill_directory: None,
        }
    }
}

/// `Ok` when the spill directory `directory` exists; else
/// [`MemError::Config`] naming `setting` and the path.
pub(crate) fn check_spill_directory(setting: String, directory: &Path) -> Result<(), MemError> {
    let problem = match std::fs::metadata(directory) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => "it is not a directory".to_owned(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => "no such directory".to_owned(),
        Err(error) => format!("it cannot be read: {error}"),
    };
    Err(MemError::Config {
        name: setting,
        value: directory.display().to_string(),
        reason: format!(
            "{problem}; spill files go there and it is not created for you: create it, or set \
             an existing directory"
        ),
    })
}

/// Reads a size from environment variable `name`; `Ok(None)` when unset.
pub(crate) fn size_from_env(name: &str) -> Result<Option<u64>, MemError> {
    match std::env::var(name) {
        Ok(value) => match value.parse::<Bytes>() {
            Ok(Bytes(bytes)) => Ok(Some(bytes)),
            Err(MemError::Config { reason, .. }) => Err(MemError::Config {
                name: name.to_owned(),
                value,
                reason,
            }),
            Err(other) => Err(other),
        },
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(raw)) => Err(MemError::Config {
            name: name.to_owned(),
            value: raw.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".into(),
        }),
    }
}
