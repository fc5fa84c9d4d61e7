//! Spill files: where they go, who can read them, and that they are removed
//! on drop, on a panic in the middle of a transfer, with removal failures
//! reported.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cubie_mem::host::SPILL_FILE_PREFIX;
use cubie_mem::{
    ArrayRequest, ChunkPlan, HostMemoryType, Instance, ManagerConfig, MemError, MemoryManager,
    Registration, SimBackend,
};

fn manager_spilling_to(directory: &std::path::Path) -> (MemoryManager, Instance) {
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

#[test]
fn spill_file_lives_with_its_array_and_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let data: Vec<u64> = (0..1000).collect();
    let mut array = mgr
        .create_host_array([10, 100], HostMemoryType::Spilled, Some(&data), &solver)
        .unwrap();
    let path = array.spill_path().unwrap().to_path_buf();
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(SPILL_FILE_PREFIX), "{name}");
    assert!(path.exists());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "owner read/write only, got {mode:o}");
    }
    // The array is the file: writes through the map reach it.
    array.as_mut_slice()[999] = 0xDEAD_BEEF;
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 8000);
    assert_eq!(&on_disk[7992..], &0xDEAD_BEEFu64.to_ne_bytes());
    assert_eq!(&on_disk[8..16], &1u64.to_ne_bytes());

    drop(array);
    assert!(!path.exists(), "removed on drop");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn spill_file_is_removed_when_a_transfer_panics() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let shape = [4, 3, 50];
    let data: Vec<f64> = (0..600).map(f64::from).collect();
    let input = mgr
        .create_host_array(shape, HostMemoryType::Spilled, Some(&data), &solver)
        .unwrap();
    let output = mgr
        .create_host_array::<f64>(shape, HostMemoryType::Spilled, None, &solver)
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
    let plan = ChunkPlan {
        total_runs: 50,
        chunks: 3,
        chunk_length: 20,
        ..Default::default()
    };

    let outcome = catch_unwind(AssertUnwindSafe(move || {
        let (input, mut output) = (input, output);
        mgr.chunk_streamer(&solver, &plan)
            .unwrap()
            .pipeline()
            .input(&input, &device_in, 2)
            .output(&mut output, &device_out, 2)
            .run(|chunk| {
                assert!(paths_exist(&[input.spill_path().unwrap().to_path_buf()]));
                if chunk.index == 1 {
                    panic!("the computation failed in the middle of the batch");
                }
                Ok::<_, MemError>(())
            })
    }));
    assert!(outcome.is_err(), "the panic propagates");
    for path in &paths {
        assert!(!path.exists(), "{} survived the panic", path.display());
    }
}

fn paths_exist(paths: &[PathBuf]) -> bool {
    paths.iter().all(|p| p.exists())
}

#[test]
fn missing_spill_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let (mgr, solver) = manager_spilling_to(&missing);
    let error = mgr
        .create_host_array::<u8>([8], HostMemoryType::Spilled, None, &solver)
        .unwrap_err();
    assert!(matches!(error, MemError::Io { .. }));
    let message = error.to_string();
    assert!(
        message.contains("not-there") && message.contains("spill_directory"),
        "{message}"
    );
    // Pageable and pinned arrays do not need the directory.
    mgr.create_host_array::<u8>([8], HostMemoryType::Pageable, None, &solver)
        .unwrap();
}

#[test]
fn spill_directory_resolves_instance_owner_manager_then_temp() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (mgr, plain) = manager_spilling_to(dirs[0].path());
    let owner = mgr.new_owner_with_spill(None, Some(dirs[1].path().to_path_buf()));
    let inherits = mgr.register(Registration::new().owner(&owner)).unwrap();
    let own = mgr
        .register(
            Registration::new()
                .owner(&owner)
                .spill_directory(dirs[2].path()),
        )
        .unwrap();
    assert_eq!(mgr.spill_directory(&plain).unwrap(), dirs[0].path());
    assert_eq!(mgr.spill_directory(&inherits).unwrap(), dirs[1].path());
    assert_eq!(mgr.spill_directory(&own).unwrap(), dirs[2].path());
    for (instance, dir) in [(&plain, &dirs[0]), (&inherits, &dirs[1]), (&own, &dirs[2])] {
        let array = mgr
            .create_host_array::<u8>([4], HostMemoryType::Spilled, None, instance)
            .unwrap();
        assert_eq!(array.spill_path().unwrap().parent(), Some(dir.path()));
    }

    let defaults = MemoryManager::new(SimBackend::new(1 << 30));
    let solver = defaults.register(Registration::new()).unwrap();
    assert_eq!(
        defaults.spill_directory(&solver).unwrap(),
        std::env::temp_dir()
    );
}

#[test]
fn failure_to_remove_is_returned_by_close() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let array = mgr
        .create_host_array::<f32>([16], HostMemoryType::Spilled, None, &solver)
        .unwrap();
    let path = array.spill_path().unwrap().to_path_buf();
    std::fs::remove_file(&path).unwrap();
    let error = array.close().unwrap_err();
    assert!(
        matches!(&error, MemError::Io { operation: "removing spill file", path: p, .. } if p == &path.display().to_string()),
        "{error}"
    );

    let array = mgr
        .create_host_array::<f32>([16], HostMemoryType::Spilled, None, &solver)
        .unwrap();
    let path = array.spill_path().unwrap().to_path_buf();
    array.close().unwrap();
    assert!(!path.exists());
}

/// A tracing writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[test]
fn failure_to_remove_on_drop_is_logged_as_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let array = mgr
        .create_host_array::<f32>([16], HostMemoryType::Spilled, None, &solver)
        .unwrap();
    let path = array.spill_path().unwrap().to_path_buf();
    std::fs::remove_file(&path).unwrap();

    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || drop(array));
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("WARN"), "{log}");
    assert!(log.contains("removing a spill file failed"), "{log}");
    assert!(log.contains(&path.display().to_string()), "{log}");
}
