//! The manager's configuration as a new user meets it: the chainable
//! setters of `ManagerConfig`, the granule error that names the call
//! changing it, and spill directories checked where they are set.

use std::path::Path;

use cubie_mem::{
    ArrayRequest, Bytes, HostMemoryKind, LimitMode, ManagerConfig, MemError, MemoryManager,
    Registration, SimBackend,
};

use crate::common;
use crate::common::queuing;

/// A request of `runs` f64 runs along axis 0.
fn runs(runs: usize) -> ArrayRequest {
    ArrayRequest::of::<f64>([runs])
        .chunk_axis(0)
        .total_runs(runs)
}

#[test]
fn every_setter_matches_the_struct_update_form() {
    let dir = tempfile::tempdir().unwrap();
    let built = ManagerConfig::default()
        .granule(0)
        .limit_mode(LimitMode::Active)
        .pinned_max_bytes(4096)
        .host_spill_threshold(1 << 20)
        .spill_directory(dir.path());
    let literal = ManagerConfig {
        allocation_granule_bytes: 0,
        limit_mode: LimitMode::Active,
        pinned_max_bytes: 4096,
        host_spill_threshold: Some(1 << 20),
        spill_directory: Some(dir.path().to_path_buf()),
    };
    assert_eq!(built, literal);
    assert_eq!(built.validate(), Ok(()));
    let mgr = MemoryManager::with_config(SimBackend::new(1 << 30), built);
    assert_eq!(mgr.config(), &literal);
}

#[test]
fn a_small_device_below_the_default_granule_names_the_setting_and_the_call() {
    // 16 MiB free: below the default granule of 32 MiB.
    let small = || SimBackend::new(1 << 30).with_free(16 << 20);
    let mgr = MemoryManager::new(small());
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("state", runs(1000))]).unwrap();
    let error = mgr.allocate_queue(&solver).unwrap_err();
    assert!(
        matches!(
            error,
            MemError::BelowGranule {
                free: Bytes(16_777_216),
                granule: Bytes(33_554_432),
                ..
            }
        ),
        "{error}"
    );

    // The call the message names (error_messages) is the fix.
    let mgr = MemoryManager::with_config(small(), ManagerConfig::default().granule(0));
    let solver = mgr.register(queuing()).unwrap();
    mgr.queue_request(&solver, [("state", runs(1000))]).unwrap();
    assert_eq!(mgr.allocate_queue_for(&solver).unwrap().chunks, 1);
}

#[test]
fn register_refuses_a_spill_directory_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let (mgr, _) = common::manager(1 << 30, 1 << 30);

    let error = mgr
        .register(
            Registration::new()
                .name("rk45-outputs")
                .spill_directory(&missing),
        )
        .unwrap_err();
    let path = missing.display().to_string();
    assert!(
        matches!(&error, MemError::Config { name, value, reason }
            if name == "Registration::spill_directory of 'rk45-outputs'" && *value == path
                && reason.starts_with("no such directory")),
        "{error}"
    );
    assert_eq!(
        mgr.memory_report().instances.len(),
        0,
        "a failed registration registers nothing"
    );

    let unnamed = mgr
        .register(Registration::new().spill_directory(&missing))
        .unwrap_err();
    assert!(
        matches!(&unnamed, MemError::Config { name, value, .. }
            if name == "Registration::spill_directory of an unnamed registration" && *value == path),
        "{unnamed}"
    );

    // A file is not a directory.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let error = mgr
        .register(Registration::new().spill_directory(&file))
        .unwrap_err();
    assert!(
        matches!(&error, MemError::Config { value, reason, .. }
            if *value == file.display().to_string() && reason.starts_with("it is not a directory")),
        "{error}"
    );

    let solver = mgr
        .register(Registration::new().spill_directory(dir.path()))
        .unwrap();
    let array = mgr
        .create_host_array::<u8>([4], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    assert_eq!(array.spill_path().unwrap().parent(), Some(dir.path()));
}

/// A manager whose configuration spills to `directory`.
fn spilling_to(directory: &Path) -> ManagerConfig {
    ManagerConfig::default()
        .granule(0)
        .spill_directory(directory)
}

#[test]
fn a_missing_manager_spill_directory_is_refused_or_reported_where_the_config_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");

    let error = spilling_to(&missing).validate().unwrap_err();
    let path = missing.display().to_string();
    assert!(
        matches!(&error, MemError::Config { name, value, reason }
            if name == "ManagerConfig::spill_directory" && *value == path
                && reason.starts_with("no such directory")),
        "{error}"
    );

    // with_config keeps its signature: it warns, and the first spilled
    // array is the error.
    let (mgr, logs) = common::capture_logs(|| {
        MemoryManager::with_config(SimBackend::new(1 << 30), spilling_to(&missing))
    });
    assert!(logs.contains("WARN"), "{logs}");
    assert!(logs.contains("ManagerConfig::spill_directory"), "{logs}");
    assert!(logs.contains("not-there"), "{logs}");
    let solver = mgr.register(Registration::new()).unwrap();
    let at_use = mgr
        .create_host_array::<u8>([8], HostMemoryKind::Spilled, None, &solver)
        .unwrap_err();
    assert!(
        matches!(&at_use, MemError::Io { path: at, .. } if *at == path),
        "{at_use}"
    );

    // A directory made after the manager is used from then on.
    std::fs::create_dir(&missing).unwrap();
    let array = mgr
        .create_host_array::<u8>([8], HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    assert_eq!(
        array.spill_path().unwrap().parent(),
        Some(missing.as_path())
    );

    // A usable configuration logs nothing.
    let ((), logs) = common::capture_logs(|| {
        drop(MemoryManager::with_config(
            SimBackend::new(1 << 30),
            spilling_to(dir.path()),
        ));
    });
    assert!(!logs.contains("WARN"), "{logs}");
}

#[test]
fn an_owner_spill_directory_that_does_not_exist_is_reported_where_it_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let (mgr, _) = common::manager(1 << 30, 1 << 30);
    let (owner, logs) = common::capture_logs(|| {
        mgr.new_owner().with_spill(cubie_mem::SpillSettings {
            threshold: None,
            directory: Some(missing.clone()),
        })
    });
    assert!(
        logs.contains("WARN") && logs.contains("not-there"),
        "{logs}"
    );
    let solver = mgr.register(Registration::new().owner(&owner)).unwrap();
    let spilled = mgr.create_host_array::<u8>([4], HostMemoryKind::Spilled, None, &solver);
    assert!(
        matches!(&spilled, Err(MemError::Io { path, .. }) if path.ends_with("not-there")),
        "{spilled:?}"
    );
}
