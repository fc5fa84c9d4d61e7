//! Spill files: where they go, that they are unlinked as soon as they are
//! made (so nothing is left on drop, on a panic in the middle of a transfer,
//! or when the process is killed), and that a disk that cannot hold one is an
//! error at creation, not a SIGBUS.
//!
//! The tests that need a process of their own re-run this test binary
//! filtered to [`spill_child_process`], which does what [`CHILD_ROLE`] says
//! and returns at once when it is not set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use cubie_mem::{
    ArrayRequest, ChunkPlan, HostMemoryKind, Instance, ManagerConfig, MemError, MemoryManager,
    Registration, SimBackend, SpillSettings,
};

fn manager_spilling_to(directory: &Path) -> (MemoryManager, Instance) {
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            spill_directory: Some(directory.to_path_buf()),
            ..Default::default()
        },
    );
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    (mgr, solver)
}

/// The names in `directory` (all of them, spill files or not).
fn entries(directory: &Path) -> Vec<String> {
    std::fs::read_dir(directory)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The lines of `/proc/<pid>/maps` that map `path`, which the kernel marks
/// "(deleted)" once the file is unlinked.
#[cfg(target_os = "linux")]
fn mappings_of(pid: &str, path: &Path) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let path = path.display().to_string();
    maps.lines()
        .filter(|line| line.contains(&path))
        .map(str::to_owned)
        .collect()
}

#[test]
fn spill_file_is_unlinked_once_mapped_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let data: Vec<u64> = (0..1000).collect();
    let mut array = mgr
        .create_host_array([10, 100], HostMemoryKind::Spilled, Some(&data), &solver)
        .unwrap();
    assert_eq!(array.kind(), HostMemoryKind::Spilled);
    // Where the file was made: in the spill directory, under the prefix...
    let path = array.spill_path().unwrap().to_path_buf();
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(SpillSettings::FILE_PREFIX), "{name}");
    // ...and unlinked already: the directory is empty while the array lives.
    assert!(!path.exists());
    assert_eq!(entries(dir.path()), Vec::<String>::new());
    #[cfg(target_os = "linux")]
    {
        let mapped = mappings_of("self", &path);
        assert!(
            !mapped.is_empty() && mapped.iter().all(|l| l.ends_with("(deleted)")),
            "{mapped:?}"
        );
    }

    // The mapping alone keeps the data, writes included.
    assert_eq!(array.as_slice(), &data[..]);
    array.as_mut_slice()[999] = 0xDEAD_BEEF;
    assert_eq!(array.as_slice()[999], 0xDEAD_BEEF);
    assert_eq!(array.as_slice()[1], 1);
    assert_eq!(array.nbytes(), 8000);

    drop(array);
    #[cfg(target_os = "linux")]
    assert_eq!(mappings_of("self", &path), Vec::<String>::new());
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn zero_byte_spilled_arrays_work() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let mut array = mgr
        .create_host_array::<f64>([0, 4], HostMemoryKind::Spilled, Some(&[][..]), &solver)
        .unwrap();
    assert!(array.is_empty());
    assert!(array.as_mut_slice().is_empty());
    assert_eq!(array.spill_path().unwrap().parent(), Some(dir.path()));
    let empty = mgr
        .create_host_array::<f32>([0], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    assert_eq!(empty.nbytes(), 0);
    assert_eq!(entries(dir.path()), Vec::<String>::new());
    array.close();
}

#[test]
fn close_unmaps_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let array = mgr
        .create_host_array::<f32>([1 << 16], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    let path = array.spill_path().unwrap().to_path_buf();
    #[cfg(target_os = "linux")]
    assert_eq!(mappings_of("self", &path).len(), 1);
    array.close();
    #[cfg(target_os = "linux")]
    assert_eq!(mappings_of("self", &path), Vec::<String>::new());
    assert!(!path.exists());
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn nothing_is_left_when_a_transfer_panics() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let shape = [4, 3, 50];
    let data: Vec<f64> = (0..600).map(f64::from).collect();
    let input = mgr
        .create_host_array(shape, HostMemoryKind::Spilled, Some(&data), &solver)
        .unwrap();
    let output = mgr
        .create_host_array::<f64>(shape, HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    let paths: Vec<PathBuf> = [&input, &output]
        .iter()
        .map(|a| a.spill_path().unwrap().to_path_buf())
        .collect();
    mgr.queue_request(
        &solver,
        [
            ("in", ArrayRequest::of::<f64>([4, 3, 20]).unchunkable()),
            ("out", ArrayRequest::of::<f64>([4, 3, 20]).unchunkable()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let device_in = response.take::<f64>("in").unwrap();
    let device_out = response.take::<f64>("out").unwrap();
    let plan = ChunkPlan::new(50, 3, 20).unwrap();

    let spill_dir = dir.path().to_path_buf();
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        let (input, mut output) = (input, output);
        mgr.chunk_streamer(&solver, &plan)
            .unwrap()
            .pipeline()
            .input(&input, device_in.along(2))
            .output(&mut output, device_out.along(2))
            .run(|chunk, _| {
                // The arrays are in use, their files already gone.
                assert_eq!(entries(&spill_dir), Vec::<String>::new());
                if chunk.index == 1 {
                    panic!("the computation failed in the middle of the batch");
                }
                Ok::<_, MemError>(())
            })
    }));
    assert!(outcome.is_err(), "the panic propagates");
    for path in &paths {
        assert!(!path.exists(), "{} survived the panic", path.display());
        #[cfg(target_os = "linux")]
        assert_eq!(mappings_of("self", path), Vec::<String>::new());
    }
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn missing_spill_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let (mgr, solver) = manager_spilling_to(&missing);
    let error = mgr
        .create_host_array::<u8>([8], HostMemoryKind::Spilled, None, &solver)
        .unwrap_err();
    assert!(
        matches!(&error, MemError::Io { operation: "using spill directory", path, message }
            if *path == missing.display().to_string() && message.contains("spill_directory")),
        "{error}"
    );
    // Pageable and pinned arrays do not need the directory.
    mgr.create_host_array::<u8>([8], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
}

#[test]
fn spill_directory_resolves_instance_owner_manager_then_temp() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (mgr, plain) = manager_spilling_to(dirs[0].path());
    let owner = mgr.new_owner().with_spill(SpillSettings {
        threshold: None,
        directory: Some(dirs[1].path().to_path_buf()),
    });
    let inherits = mgr.register(Registration::new().owner(&owner)).unwrap();
    let own = mgr
        .register(
            Registration::new()
                .owner(&owner)
                .spill_directory(dirs[2].path()),
        )
        .unwrap();
    for (instance, dir) in [(&plain, &dirs[0]), (&inherits, &dirs[1]), (&own, &dirs[2])] {
        let array = mgr
            .create_host_array::<u8>([4], HostMemoryKind::Spilled, None, instance)
            .unwrap();
        assert_eq!(array.spill_path().unwrap().parent(), Some(dir.path()));
    }

    let defaults = MemoryManager::new(SimBackend::new(1 << 30));
    let solver = defaults.register(Registration::new()).unwrap();
    let array = defaults
        .create_host_array::<u8>([4], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    assert_eq!(
        array.spill_path().unwrap().parent(),
        Some(std::env::temp_dir().as_path())
    );
}

/// What [`spill_child_process`] does: [`FULL_DISK`] or [`HOLD`].
const CHILD_ROLE: &str = "CUBIE_SPILL_TEST_CHILD";
/// The spill directory [`spill_child_process`] uses.
const CHILD_DIR: &str = "CUBIE_SPILL_TEST_DIR";
/// Role: spill under a 1 MiB file-size limit with SIGXFSZ ignored.
const FULL_DISK: &str = "full-disk";
/// Role: spill under a 1 MiB file-size limit with SIGXFSZ at its default
/// action (killing the process).
const FILE_SIZE_LIMIT_DEFAULT_SIGNAL: &str = "file-size-limit";
/// Role: hold a spilled array until killed.
const HOLD: &str = "hold";
/// The file-size limit of the full-disk child.
const FILE_SIZE_LIMIT: u64 = 1 << 20;
/// Bytes of the array that does not fit under [`FILE_SIZE_LIMIT`].
const TOO_LARGE_BYTES: usize = 4 << 20;
/// What the full-disk child prints before the error's message.
const ERROR_LINE: &str = "spill child error: ";
/// What the full-disk child prints when all its checks passed.
const DONE_LINE: &str = "spill child: full-disk checks passed";
/// What the holding child prints once its array is made.
const READY_LINE: &str = "spill child ready: ";

/// Not a test of its own: the body of the child processes that the tests
/// below start, chosen by [`CHILD_ROLE`] (ignored, so that a plain run does
/// not count it as a test that passed).
#[test]
#[ignore = "the body of the child processes the spill tests start"]
fn spill_child_process() {
    let role = std::env::var(CHILD_ROLE).expect("started by a spill test, with its role");
    let dir = PathBuf::from(std::env::var_os(CHILD_DIR).unwrap());
    let (mgr, solver) = manager_spilling_to(&dir);
    match role.as_str() {
        #[cfg(unix)]
        FULL_DISK | FILE_SIZE_LIMIT_DEFAULT_SIGNAL => {
            if role == FULL_DISK {
                // SAFETY: SIG_IGN installs no handler; this process runs this
                // test only, and ignoring SIGXFSZ makes writes past the limit
                // fail with EFBIG instead of killing it.
                let previous = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
                assert_ne!(previous, libc::SIG_ERR);
            }
            let limit = libc::rlimit {
                rlim_cur: FILE_SIZE_LIMIT as libc::rlim_t,
                rlim_max: FILE_SIZE_LIMIT as libc::rlim_t,
            };
            // SAFETY: `limit` is a valid rlimit that outlives the call.
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) }, 0);

            let error = mgr
                .create_host_array::<u8>([TOO_LARGE_BYTES], HostMemoryKind::Spilled, None, &solver)
                .unwrap_err();
            println!("{ERROR_LINE}{error}");
            let MemError::Io {
                operation,
                path,
                message,
            } = &error
            else {
                panic!("expected MemError::Io, got {error:?}");
            };
            assert_eq!(*operation, "reserving space for a spill file in");
            assert_eq!(*path, dir.display().to_string());
            if role == FILE_SIZE_LIMIT_DEFAULT_SIGNAL {
                assert!(
                    message.contains("file-size limit (RLIMIT_FSIZE) is 1048576 B"),
                    "{message}"
                );
            }
            for part in [
                &format!("{TOO_LARGE_BYTES} B (4.00 MiB) needed"),
                "ulimit -f",
                "free disk space",
                "Registration::spill_directory",
                "ManagerConfig::spill_directory",
                "host_spill_threshold",
            ] {
                assert!(message.contains(part), "{part:?} missing: {message}");
            }
            assert_eq!(entries(&dir), Vec::<String>::new());
            // An array that fits under the limit is reserved and works.
            let mut fits = mgr
                .create_host_array::<u8>([64 << 10], HostMemoryKind::Spilled, None, &solver)
                .unwrap();
            fits.as_mut_slice().fill(0xA5);
            assert!(fits.as_slice().iter().all(|&b| b == 0xA5));
            drop(fits);
            assert_eq!(entries(&dir), Vec::<String>::new());
            println!("{DONE_LINE}");
        }
        HOLD => {
            let data: Vec<u64> = (0..1 << 20).collect();
            let array = mgr
                .create_host_array([1 << 20], HostMemoryKind::Spilled, Some(&data), &solver)
                .unwrap();
            println!("{READY_LINE}{}", array.spill_path().unwrap().display());
            // Until killed; a parent that never kills fails on its timeout.
            std::thread::sleep(std::time::Duration::from_secs(120));
            drop(array);
        }
        other => panic!("unknown {CHILD_ROLE}={other}"),
    }
}

#[cfg(unix)]
mod child {
    //! Starting this test binary as a child process, and waiting for it with
    //! a bound.

    use std::io::{BufRead, BufReader, Read};
    use std::path::Path;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
    use std::time::{Duration, Instant};

    /// How long a child may take to get ready or to finish.
    pub const TIMEOUT: Duration = Duration::from_secs(60);

    /// A running child and the lines of its stdout and stderr.
    pub struct ChildProcess {
        pub child: Child,
        lines: Receiver<String>,
        /// Every line received so far, for failure messages.
        pub output: Vec<String>,
    }

    fn forward(stream: impl Read + Send + 'static, lines: std::sync::mpsc::Sender<String>) {
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
    }

    impl ChildProcess {
        /// Runs [`super::spill_child_process`] in a new process as `role`,
        /// spilling to `dir`.
        pub fn start(role: &str, dir: &Path) -> ChildProcess {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "spill_child_process",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(super::CHILD_ROLE, role)
                .env(super::CHILD_DIR, dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let (sender, lines) = channel();
            forward(child.stdout.take().unwrap(), sender.clone());
            forward(child.stderr.take().unwrap(), sender);
            ChildProcess {
                child,
                lines,
                output: Vec::new(),
            }
        }

        /// What follows `prefix` on the first line that holds it (libtest may
        /// print the test's name before it on the same line); fails after
        /// [`TIMEOUT`] or when the child's output ends first.
        pub fn wait_for_line(&mut self, prefix: &str) -> String {
            let deadline = Instant::now() + TIMEOUT;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.lines.recv_timeout(left) {
                    Ok(line) => {
                        let found = line.split_once(prefix).map(|(_, rest)| rest.to_owned());
                        self.output.push(line);
                        if let Some(rest) = found {
                            return rest;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        self.fail(&format!("no {prefix:?} line within {TIMEOUT:?}"))
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        self.fail(&format!("output ended without a {prefix:?} line"))
                    }
                }
            }
        }

        /// Its exit status, once it ends, and all its output; fails after
        /// [`TIMEOUT`].
        pub fn wait(&mut self) -> ExitStatus {
            let deadline = Instant::now() + TIMEOUT;
            let status = loop {
                if let Some(status) = self.child.try_wait().unwrap() {
                    break status;
                }
                if Instant::now() >= deadline {
                    self.fail(&format!("still running after {TIMEOUT:?}"));
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            // The pipes close with the process; bound the drain all the same.
            while let Ok(line) = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                self.output.push(line);
            }
            status
        }

        /// Kills the child and fails the test with `what` and its output.
        pub fn fail(&mut self, what: &str) -> ! {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!(
                "child process: {what}; its output:\n{}",
                self.output.join("\n")
            );
        }
    }

    impl Drop for ChildProcess {
        fn drop(&mut self) {
            // Never leave a child behind when a test fails.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A spilled array larger than the space the system allows is an `Io` error
/// at creation, naming the bytes, the directory and the fix, and the process
/// lives on: the space is reserved up front, not found missing by a write
/// through the map (SIGBUS). The child stands in for a full disk with a
/// 1 MiB file-size limit (RLIMIT_FSIZE, no root needed) and SIGXFSZ ignored.
#[cfg(unix)]
#[test]
fn full_disk_is_an_error_at_creation_not_a_signal() {
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    let mut child = child::ChildProcess::start(FULL_DISK, dir.path());
    let status = child.wait();
    let output = child.output.join("\n");
    assert_eq!(status.signal(), None, "killed by a signal: {output}");
    assert!(status.success(), "{status}: {output}");
    // The child checked the error's fields before printing DONE_LINE.
    assert!(output.contains(ERROR_LINE), "{output}");
    assert!(output.contains(DONE_LINE), "{output}");
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

/// The same with SIGXFSZ at its default action, which kills a process that
/// writes past its file-size limit: the limit is read before anything is
/// written, so the array is refused with an error that names the limit.
#[cfg(unix)]
#[test]
fn a_file_size_limit_is_an_error_not_a_sigxfsz() {
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    let mut child = child::ChildProcess::start(FILE_SIZE_LIMIT_DEFAULT_SIGNAL, dir.path());
    let status = child.wait();
    let output = child.output.join("\n");
    assert_eq!(status.signal(), None, "killed by a signal: {output}");
    assert!(status.success(), "{status}: {output}");
    // The child checked that the error names the limit before printing DONE_LINE.
    assert!(output.contains(DONE_LINE), "{output}");
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

/// A process killed (SIGKILL) while it holds a spilled array leaves no file:
/// the file was unlinked as soon as it was made.
#[cfg(unix)]
#[test]
fn nothing_is_left_when_the_process_is_killed() {
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    let mut child = child::ChildProcess::start(HOLD, dir.path());
    let made_at = PathBuf::from(child.wait_for_line(READY_LINE));
    assert_eq!(made_at.parent(), Some(dir.path()));
    // Alive, with the array mapped from the unlinked file.
    assert_eq!(child.child.try_wait().unwrap(), None);
    #[cfg(target_os = "linux")]
    {
        let mapped = mappings_of(&child.child.id().to_string(), &made_at);
        assert!(
            !mapped.is_empty() && mapped.iter().all(|l| l.ends_with("(deleted)")),
            "{mapped:?}"
        );
    }
    assert_eq!(entries(dir.path()), Vec::<String>::new());

    child.child.kill().unwrap(); // SIGKILL: no destructor runs
    let status = child.wait();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    let left: Vec<String> = entries(dir.path())
        .into_iter()
        .filter(|name| name.starts_with(SpillSettings::FILE_PREFIX))
        .collect();
    assert_eq!(left, Vec::<String>::new());
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}
