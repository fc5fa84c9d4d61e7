//! Spill files: where they go, that they are unlinked as soon as they are
//! made (so nothing is left on drop, on a panic in the middle of a transfer,
//! or when the process is killed), and that a disk that cannot hold one is an
//! error at creation, not a SIGBUS.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use cubie_mem::host::SPILL_FILE_PREFIX;
use cubie_mem::{
    ArrayRequest, ChunkPlan, HostMemoryType, Instance, ManagerConfig, MemError, MemoryManager,
    Registration, SimBackend,
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
        .create_host_array([10, 100], HostMemoryType::Spilled, Some(&data), &solver)
        .unwrap();
    assert_eq!(array.kind(), HostMemoryType::Spilled);
    // Where the file was made: in the spill directory, under the prefix...
    let path = array.spill_path().unwrap().to_path_buf();
    assert_eq!(path.parent(), Some(dir.path()));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(SPILL_FILE_PREFIX), "{name}");
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
        .create_host_array::<f64>([0, 4], HostMemoryType::Spilled, Some(&[][..]), &solver)
        .unwrap();
    assert!(array.is_empty());
    assert!(array.as_mut_slice().is_empty());
    assert_eq!(array.spill_path().unwrap().parent(), Some(dir.path()));
    let untyped = mgr
        .create_host_array_dyn(cubie_mem::DType::F32, [0], HostMemoryType::Spilled, &solver)
        .unwrap();
    assert_eq!(untyped.nbytes(), 0);
    assert_eq!(entries(dir.path()), Vec::<String>::new());
    array.close();
}

#[test]
fn close_unmaps_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mgr, solver) = manager_spilling_to(dir.path());
    let array = mgr
        .create_host_array::<f32>([1 << 16], HostMemoryType::Spilled, None, &solver)
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

    let spill_dir = dir.path().to_path_buf();
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        let (input, mut output) = (input, output);
        mgr.chunk_streamer(&solver, &plan)
            .unwrap()
            .pipeline()
            .input(&input, &device_in, 2)
            .output(&mut output, &device_out, 2)
            .run(|chunk| {
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
