//! Spill files: memory-mapped temporary files, unlinked at once, that hold
//! host arrays too large for RAM; their space is reserved, and their pages
//! pre-faulted where the kernel can, when they are made. The guide page
//! [host memory](crate::guide::host_memory#host-arrays) has the rules.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use tempfile::NamedTempFile;

use crate::{Bytes, MemError};

/// Prefix of spill file names, so that stray files are recognisable.
pub(crate) const SPILL_FILE_PREFIX: &str = "cubie-spill-";

/// Size of the zero-filled writes that allocate a spill file's blocks where
/// `fallocate` is not available.
const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// A mapped, already unlinked temporary file.
pub(crate) struct SpillFile {
    map: MmapMut,
    path: PathBuf,
}

fn io_error(operation: &'static str, path: &Path, error: &io::Error) -> MemError {
    MemError::Io {
        operation,
        path: path.display().to_string(),
        message: error.to_string(),
    }
}

/// The error for a spill file whose space could not be reserved: the bytes,
/// the directory, and what to change.
fn reserve_error(directory: &Path, bytes: usize, error: &io::Error) -> MemError {
    let limit = if error.kind() == io::ErrorKind::FileTooLarge {
        "raise the process's file-size limit (ulimit -f), "
    } else {
        ""
    };
    MemError::Io {
        operation: "reserving space for a spill file in",
        path: directory.display().to_string(),
        message: format!(
            "{} needed, but: {error}; {limit}free disk space there, set another spill \
             directory with Registration::spill_directory or ManagerConfig::spill_directory, \
             or raise the spill threshold (Registration::host_spill_threshold or \
             ManagerConfig::host_spill_threshold) so that arrays this large stay in memory",
            Bytes(bytes as u64)
        ),
    }
}

/// Creates an empty file with a unique spill file name and owner-only
/// permissions in `directory`.
fn create_named(directory: &Path) -> Result<NamedTempFile, MemError> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(SPILL_FILE_PREFIX).suffix(".bin");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o600));
    }
    builder
        .tempfile_in(directory)
        .map_err(|e| io_error("creating a spill file in", directory, &e))
}

/// Allocates the blocks of the first `bytes` of the empty `file` (its length
/// becomes `bytes`), with `fallocate`, or by writing zeros where the
/// filesystem does not support that.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_vendor = "apple"
))]
fn reserve(file: &File, bytes: usize) -> io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    use rustix::io::Errno;

    if bytes == 0 {
        return Ok(()); // fallocate rejects an empty range
    }
    loop {
        match fallocate(file, FallocateFlags::empty(), 0, bytes as u64) {
            Err(Errno::INTR) => {}
            // Not supported by this filesystem (the two are one code on Linux).
            Err(e)
                if [Errno::OPNOTSUPP, Errno::NOTSUP, Errno::INVAL, Errno::NOSYS].contains(&e) =>
            {
                return write_zeros(file, bytes);
            }
            result => return result.map_err(io::Error::from),
        }
    }
}

/// Allocates the blocks of the first `bytes` of the empty `file` by writing
/// zeros (no `fallocate` here).
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_vendor = "apple"
)))]
fn reserve(file: &File, bytes: usize) -> io::Result<()> {
    write_zeros(file, bytes)
}

/// Refuses a file of `bytes` past the process's file-size limit
/// (`RLIMIT_FSIZE`, `ulimit -f`): growing a file past it raises `SIGXFSZ`,
/// whose default action kills the process, so it is read before anything
/// is written.
#[cfg(unix)]
fn check_file_size_limit(bytes: usize) -> io::Result<()> {
    use rustix::process::{Resource, getrlimit};
    match getrlimit(Resource::Fsize).current {
        Some(limit) if bytes as u64 > limit => Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "the process's file-size limit (RLIMIT_FSIZE) is {}",
                Bytes(limit)
            ),
        )),
        _ => Ok(()),
    }
}

/// No file-size limit to read here.
#[cfg(not(unix))]
fn check_file_size_limit(_bytes: usize) -> io::Result<()> {
    Ok(())
}

/// Writes `bytes` zeros at the current position of `file`, in chunks of at
/// most [`ZERO_CHUNK_BYTES`].
fn write_zeros(mut file: &File, bytes: usize) -> io::Result<()> {
    let zeros = vec![0u8; bytes.min(ZERO_CHUNK_BYTES)];
    let mut left = bytes;
    while left > 0 {
        let chunk = zeros.get(..left.min(zeros.len())).unwrap_or(&zeros);
        file.write_all(chunk)?;
        left = left.saturating_sub(chunk.len());
    }
    Ok(())
}

/// Pre-faults every page of `map` for writing (`MADV_POPULATE_WRITE`) when
/// it fits in half the available RAM; returns whether it did. Where the
/// kernel refuses the advice (before Linux 5.14) the pages fault in on
/// first write instead.
#[cfg(target_os = "linux")]
fn prefault(map: &MmapMut) -> bool {
    let bytes = map.len() as u64;
    let fits = super::SystemMemory::read().is_some_and(|ram| bytes <= ram.available / 2);
    if bytes == 0 || !fits {
        return false;
    }
    match map.advise(memmap2::Advice::PopulateWrite) {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(%error, bytes = %Bytes(bytes), "pre-faulting a spill file refused; its pages fault in on first write");
            false
        }
    }
}

/// No write pre-faulting here: the pages fault in on first write.
#[cfg(not(target_os = "linux"))]
fn prefault(_map: &MmapMut) -> bool {
    false
}

impl SpillFile {
    /// Creates, unlinks, reserves and maps a zero-filled file of `bytes` in
    /// `directory`.
    pub(crate) fn create(directory: &Path, bytes: usize) -> Result<SpillFile, MemError> {
        let named = create_named(directory)?;
        let path = named.path().to_path_buf();
        let (file, name) = named.into_parts();
        name.close().map_err(|e| MemError::Io {
            operation: "unlinking new spill file",
            path: path.display().to_string(),
            message: format!("{e}; delete it by hand"),
        })?;
        check_file_size_limit(bytes).map_err(|e| reserve_error(directory, bytes, &e))?;
        reserve(&file, bytes).map_err(|e| reserve_error(directory, bytes, &e))?;
        // SAFETY: the file was created under a unique name with owner-only
        // permissions and unlinked at once, so no other process can open it
        // by name; its length is fixed here and it is never truncated while
        // mapped. It holds plain bytes, so any content is a valid value of the
        // array's element type.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| MemError::Io {
            operation: "mapping a spill file made in",
            path: directory.display().to_string(),
            message: format!("{} to map: {e}", Bytes(bytes as u64)),
        })?;
        prefault(&map);
        Ok(SpillFile { map, path })
    }

    /// Where the file was made; it is unlinked already.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// The mapping's first byte (dangling and aligned when it is empty).
    pub(crate) fn base_mut(&mut self) -> std::ptr::NonNull<u8> {
        std::ptr::NonNull::new(self.map.as_mut_ptr()).unwrap_or_else(crate::block::aligned_dangling)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Bytes the filesystem has allocated to `file`.
    #[cfg(unix)]
    fn allocated(file: &File) -> u64 {
        use std::os::unix::fs::MetadataExt;
        file.metadata().unwrap().blocks() * 512
    }

    #[cfg(unix)]
    #[test]
    fn spill_files_are_created_owner_only_under_the_prefix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let named = create_named(dir.path()).unwrap();
        let name = named.path().file_name().unwrap().to_string_lossy();
        assert!(name.starts_with(SPILL_FILE_PREFIX), "{name}");
        let mode = named.as_file().metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "owner read/write only, got {mode:o}");
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri cannot reserve a file's blocks (fallocate) or map a file (mmap)"
    )]
    fn created_files_are_unlinked_zeroed_and_writable() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = SpillFile::create(dir.path(), 3 << 20).unwrap();
        assert_eq!(file.path().parent(), Some(dir.path()));
        assert!(!file.path().exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(file.bytes().len(), 3 << 20);
        assert!(file.bytes().iter().all(|&b| b == 0));
        file.bytes_mut()[(3 << 20) - 1] = 7;
        assert_eq!(file.bytes()[(3 << 20) - 1], 7);

        let empty = SpillFile::create(dir.path(), 0).unwrap();
        assert!(empty.bytes().is_empty());
    }

    /// Bytes of the mapping at `start` resident in memory, from
    /// `/proc/self/smaps`.
    #[cfg(target_os = "linux")]
    fn resident(start: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines();
        while let Some(line) = lines.next() {
            let range = line.split_whitespace().next().unwrap_or("");
            let Some((from, _)) = range.split_once('-') else {
                continue;
            };
            if usize::from_str_radix(from, 16) != Ok(start) {
                continue;
            }
            for field in lines.by_ref() {
                if let Some(kib) = field.strip_prefix("Rss:") {
                    let kib = kib.trim().trim_end_matches("kB").trim();
                    return kib.parse::<u64>().unwrap() * 1024;
                }
            }
        }
        panic!("no mapping at {start:#x} in /proc/self/smaps");
    }

    #[cfg(target_os = "linux")]
    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri cannot reserve a file's blocks (fallocate) or map a file (mmap)"
    )]
    fn a_new_file_is_pre_faulted_where_the_kernel_can() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = 4 << 20;
        let file = tempfile::tempfile_in(dir.path()).unwrap();
        reserve(&file, bytes).unwrap();
        // SAFETY: a private unlinked temporary file of fixed length.
        let cold = unsafe { MmapMut::map_mut(&file) }.unwrap();
        assert!(
            resident(cold.as_ptr().addr()) < bytes as u64,
            "nothing touched yet"
        );
        let spilled = SpillFile::create(dir.path(), bytes).unwrap();
        if prefault(&cold) {
            assert_eq!(resident(cold.as_ptr().addr()), bytes as u64);
            let at = spilled.bytes().as_ptr().addr();
            assert_eq!(resident(at), bytes as u64, "created pre-faulted");
        }
        assert!(spilled.bytes().iter().all(|&b| b == 0));
    }

    #[cfg(unix)]
    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri cannot reserve a file's blocks (fallocate) or map a file (mmap)"
    )]
    fn reserving_allocates_every_block() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = (5 << 20) + 123;
        let file = tempfile::tempfile_in(dir.path()).unwrap();
        reserve(&file, bytes).unwrap();
        assert_eq!(file.metadata().unwrap().len(), bytes as u64);
        assert!(allocated(&file) >= bytes as u64, "{}", allocated(&file));
    }

    #[cfg(unix)]
    #[test]
    fn the_fallback_writes_every_block() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = (2 << 20) + 5;
        let file = tempfile::tempfile_in(dir.path()).unwrap();
        write_zeros(&file, bytes).unwrap();
        assert_eq!(file.metadata().unwrap().len(), bytes as u64);
        assert!(allocated(&file) >= bytes as u64, "{}", allocated(&file));
        let empty = tempfile::tempfile_in(dir.path()).unwrap();
        write_zeros(&empty, 0).unwrap();
        assert_eq!(empty.metadata().unwrap().len(), 0);
    }

    #[test]
    fn a_failed_reservation_names_the_bytes_directory_and_fix() {
        let error = io::Error::from(io::ErrorKind::StorageFull);
        let message = reserve_error(Path::new("/spill/here"), 3 << 30, &error).to_string();
        for part in [
            "/spill/here",
            "3221225472 B (3.00 GiB) needed",
            "free disk space",
            "Registration::spill_directory",
            "ManagerConfig::spill_directory",
            "host_spill_threshold",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        assert!(!message.contains("ulimit"), "{message}");
        let too_large = io::Error::from(io::ErrorKind::FileTooLarge);
        let message = reserve_error(Path::new("/d"), 10, &too_large).to_string();
        assert!(message.contains("ulimit -f"), "{message}");
    }
}
