//! Typed array handles: copies, release, and freeing through the manager.

use crate::common::{Counter, allocate_f64, manager, queuing, runs_request};
use cubie_mem::{ArrayRequest, MemError, MemoryKind, Registration, ReleaseReason, SpillSettings};

#[test]
fn device_arrays_round_trip_every_element_type() {
    fn round_trip<T: cubie_mem::Element + From<u8>>() {
        let (mgr, _) = manager(1 << 30, 1 << 20);
        let a = mgr.register(queuing()).unwrap();
        mgr.queue_request(&a, [("x", ArrayRequest::of::<T>([3, 4]).chunk_axis(None))])
            .unwrap();
        let x = mgr.allocate_queue_for(&a).unwrap().take::<T>("x").unwrap();
        let data: Vec<T> = (0..12u8).map(T::from).collect();
        x.copy_from_host(&data).unwrap();
        assert_eq!(x.to_vec().unwrap(), data);
        let mut part = vec![T::from(0); 5];
        x.copy_to_host_at(4, &mut part).unwrap();
        assert_eq!(part, data[4..9]);
        x.copy_from_host_at(10, &[T::from(99), T::from(98)])
            .unwrap();
        assert_eq!(x.to_vec().unwrap()[10..], [T::from(99), T::from(98)]);
        assert!(matches!(
            x.copy_from_host_at(11, &[T::from(1); 2]),
            Err(MemError::OutOfBounds { .. })
        ));
    }
    round_trip::<f32>();
    round_trip::<f64>();
    round_trip::<i32>();
    round_trip::<u8>();
    round_trip::<u32>();
    round_trip::<i64>();
    round_trip::<u64>();
}

#[test]
fn copies_check_lengths() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 10));
    let err = x.copy_from_host(&[0.0; 9]).unwrap_err();
    assert!(
        matches!(
            err,
            MemError::LengthMismatch {
                expected: 10,
                found: 9,
                ..
            }
        ),
        "{err}"
    );
    assert!(x.copy_to_host(&mut [0.0; 11]).is_err());
}

#[test]
fn pinned_arrays_are_host_readable() {
    let (mgr, _) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    let req = ArrayRequest::of::<i32>([8])
        .memory(MemoryKind::Pinned)
        .chunk_axis(0)
        .total_runs(8);
    mgr.queue_request(&a, [("status", req)]).unwrap();
    let status = mgr
        .allocate_queue_for(&a)
        .unwrap()
        .take_pinned::<i32>("status")
        .unwrap();
    assert!(
        status.read().unwrap().iter().all(|&v| v == 0),
        "pinned memory starts zeroed"
    );
    status
        .write()
        .unwrap()
        .copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&*status.read().unwrap(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(status.to_vec().unwrap()[7], 8);
}

#[test]
fn free_releases_one_label() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    mgr.queue_request(&a, [("x", runs_request(8, 10)), ("y", runs_request(8, 10))])
        .unwrap();
    let mut r = mgr.allocate_queue_for(&a).unwrap();
    let (x, y) = (r.take::<f64>("x").unwrap(), r.take::<f64>("y").unwrap());
    assert!(mgr.free(&a, "x").unwrap());
    assert!(!mgr.free(&a, "x").unwrap());
    assert_eq!(x.release_reason(), Some(ReleaseReason::Freed));
    assert!(y.is_valid());
    assert_eq!(sim.free_bytes(), (1 << 20) - 80);
    let err = x.copy_from_host(&[0.0; 10]).unwrap_err();
    assert_eq!(
        err,
        MemError::Released {
            label: "x".into(),
            reason: ReleaseReason::Freed
        }
    );
}

#[test]
fn free_all_and_invalidate_all() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let hooks = Counter::default();
    let a = mgr
        .register(Registration::new().on_invalidate(hooks.hook()))
        .unwrap();
    let b = mgr
        .register(Registration::new().on_invalidate(hooks.hook()))
        .unwrap();
    for i in [&a, &b] {
        mgr.queue_request(i, [("x", runs_request(8, 10))]).unwrap();
        mgr.allocate_queue(i).unwrap();
    }
    mgr.free_all();
    assert_eq!(sim.free_bytes(), 1 << 20);
    assert_eq!(hooks.get(), 0, "free_all calls no hook");
    mgr.queue_request(&a, [("x", runs_request(8, 10))]).unwrap();
    mgr.allocate_queue(&a).unwrap();
    mgr.invalidate_all();
    assert_eq!(sim.free_bytes(), 1 << 20);
    assert_eq!(hooks.get(), 2);
}

#[test]
fn dropping_an_instance_releases_everything_it_had() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr
        .register(queuing().proportion(0.5).stream_group("g"))
        .unwrap();
    let _b = mgr.register(queuing().stream_group("g")).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 10));
    mgr.queue_request(&a, [("y", runs_request(8, 10))]).unwrap();
    drop(a);
    assert_eq!(x.release_reason(), Some(ReleaseReason::Deregistered));
    assert_eq!(sim.free_bytes(), 1 << 20);
    assert_eq!(mgr.memory_report().instances.len(), 1);
    assert_eq!(mgr.manual_pool_proportion(), 0.0);
    assert_eq!(mgr.auto_pool_proportion(), 1.0);
}

#[test]
fn handles_outlive_their_manager_safely() {
    let (mgr, sim) = manager(1 << 30, 1 << 20);
    let a = mgr.register(queuing()).unwrap();
    let x = allocate_f64(&mgr, &a, "x", runs_request(8, 10));
    drop(a);
    drop(mgr);
    assert!(!x.is_valid());
    assert!(x.to_vec().is_err());
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(sim.live_streams(), 0, "the manager destroys its streams");
}

#[test]
fn statistics_track_current_peak_and_events() {
    let (mgr, _) = manager(1 << 30, 10_000);
    let a = mgr.register(queuing().stream_group("g")).unwrap();
    mgr.queue_request(
        &a,
        [("x", runs_request(8, 100)), ("y", runs_request(8, 100))],
    )
    .unwrap();
    mgr.allocate_queue(&a).unwrap();
    mgr.free(&a, "y").unwrap();
    mgr.queue_request(&a, [("z", runs_request(800, 100))])
        .unwrap(); // chunked
    mgr.allocate_queue(&a).unwrap();
    let stats = mgr.memory_report();
    let inst = &stats.instances[0];
    assert_eq!(inst.usage.allocations, 3);
    assert_eq!(inst.usage.frees, 1);
    assert_eq!(inst.usage.peak_count, 2);
    assert_eq!(inst.usage.chunked_requests, 1);
    assert_eq!(stats.groups["g"], inst.usage);
    // x (800 bytes) stays; z runs in 10 chunks of 10 runs: 8000 bytes.
    assert_eq!(stats.total.current_bytes, 800 + 8000);
    assert_eq!(stats.total.peak_bytes, 800 + 8000);
    let table = stats.to_string();
    assert!(
        table.contains("group g") && table.contains("total"),
        "{table}"
    );
}

#[test]
fn spill_settings_resolve_instance_then_owner_then_manager() {
    use cubie_mem::{ManagerConfig, MemoryManager, SimBackend};
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            host_spill_threshold: Some(300),
            spill_directory: Some("/manager".into()),
            ..Default::default()
        },
    );
    let owner = mgr.new_owner().with_spill(SpillSettings {
        threshold: Some(200),
        directory: None,
    });
    let plain = mgr.register(Registration::new()).unwrap();
    let owned = mgr.register(Registration::new().owner(&owner)).unwrap();
    // A registration's spill directory must exist (the manager's is only
    // checked where it is used).
    let own_dir = tempfile::tempdir().unwrap();
    let own = mgr
        .register(
            Registration::new()
                .owner(&owner)
                .host_spill_threshold(100)
                .spill_directory(own_dir.path()),
        )
        .unwrap();
    let parent = mgr
        .register(Registration::new().host_spill_threshold(50))
        .unwrap();
    let child = mgr.register(Registration::new().owner(&parent)).unwrap();
    assert_eq!(
        plain.spill_settings(),
        SpillSettings {
            threshold: Some(300),
            directory: Some("/manager".into())
        }
    );
    assert_eq!(
        owned.spill_settings(),
        SpillSettings {
            threshold: Some(200),
            directory: Some("/manager".into())
        }
    );
    assert_eq!(
        own.spill_settings(),
        SpillSettings {
            threshold: Some(100),
            directory: Some(own_dir.path().to_path_buf())
        }
    );
    assert_eq!(
        child.spill_settings().threshold,
        Some(50),
        "inherited from the owning instance"
    );
}

#[test]
fn the_public_types_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<cubie_mem::MemoryManager>();
    send_sync::<cubie_mem::Instance>();
    send_sync::<cubie_mem::Owner>();
    send_sync::<cubie_mem::DeviceArray<f64>>();
    send_sync::<cubie_mem::PinnedArray<i32>>();
    send_sync::<cubie_mem::ArrayResponse>();
    send_sync::<cubie_mem::Work>();
}
