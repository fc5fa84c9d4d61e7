//! Spill files: memory-mapped temporary files that hold host arrays too large
//! for RAM.
//!
//! A spill file is created with owner-only permissions (0600 on Unix) under a
//! unique name in the spill directory, sized to the array (sparse, so it reads
//! as zeros), and mapped read-write. It is removed when its array drops, also
//! while a panic unwinds; a failure to remove it is logged as a warning, or
//! returned by [`HostArray::close`](super::HostArray::close).

use std::path::Path;

use memmap2::MmapMut;
use tempfile::TempPath;

use crate::MemError;

/// Prefix of spill file names, so that stray files are recognisable.
pub const SPILL_FILE_PREFIX: &str = "cubie-spill-";

/// A mapped temporary file; removed on drop.
pub(crate) struct SpillFile {
    map: Option<MmapMut>,
    path: Option<TempPath>,
}

fn io_error(operation: &'static str, path: &Path, error: &std::io::Error) -> MemError {
    MemError::Io {
        operation,
        path: path.display().to_string(),
        message: error.to_string(),
    }
}

impl SpillFile {
    /// Creates and maps a zero-filled file of `bytes` in `directory`.
    pub(crate) fn create(directory: &Path, bytes: usize) -> Result<SpillFile, MemError> {
        let mut builder = tempfile::Builder::new();
        builder.prefix(SPILL_FILE_PREFIX).suffix(".bin");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o600));
        }
        let file = builder
            .tempfile_in(directory)
            .map_err(|e| io_error("creating a spill file in", directory, &e))?;
        // From here on, dropping `file` removes it.
        file.as_file()
            .set_len(bytes as u64)
            .map_err(|e| io_error("sizing spill file", file.path(), &e))?;
        // SAFETY: the file was just created under a unique name with owner-only
        // permissions and is never truncated while mapped; it holds plain
        // bytes, so any content is a valid value of the array's element type.
        let map = unsafe { MmapMut::map_mut(file.as_file()) }
            .map_err(|e| io_error("mapping spill file", file.path(), &e))?;
        let (_file, path) = file.into_parts();
        Ok(SpillFile {
            map: Some(map),
            path: Some(path),
        })
    }

    /// The file's path (empty once removed).
    pub(crate) fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or(&mut [])
    }

    /// Unmaps and removes the file, reporting a failure to remove it.
    pub(crate) fn remove(&mut self) -> Result<(), MemError> {
        drop(self.map.take());
        match self.path.take() {
            Some(path) => {
                let shown = path.to_path_buf();
                path.close()
                    .map_err(|e| io_error("removing spill file", &shown, &e))
            }
            None => Ok(()),
        }
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        let path = self.path().to_path_buf();
        if let Err(error) = self.remove() {
            tracing::warn!(path = %path.display(), %error, "removing a spill file failed; delete it by hand");
        }
    }
}
