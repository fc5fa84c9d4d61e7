//! Asynchronous copies between page-locked host arrays and device arrays:
//! they return at once, hold their host array until done, and overlap on
//! the modelled device's two copy engines.

use crate::common;
use std::time::Duration;

use cubie_mem::backend::Calibration;
use cubie_mem::timeline::Activity;
use cubie_mem::{
    ArrayRequest, DeviceArray, HostArray, HostMemoryKind, Instance, MemError, MemoryManager,
    Registration, SimBackend,
};

/// Elements per array: 16384 bytes of f32, 16384 ns at 1 byte/ns.
const LEN: usize = 4096;
const COPY_NS: u64 = (LEN * 4) as u64;

/// A manager on a device copying 1 byte/ns each way.
fn setup() -> (MemoryManager, SimBackend) {
    // Page-locking takes no time: the times asserted are the copies'.
    let sim = SimBackend::new(1 << 30)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&Calibration {
            page_lock: u64::MAX,
            ..Calibration::fixed()
        });
    (common::manager_on(sim.clone()), sim)
}

fn instance(mgr: &MemoryManager, group: &str) -> Instance {
    mgr.register(Registration::new().stream_group(group).on_invalidate(|| {}))
        .unwrap()
}

fn device(mgr: &MemoryManager, solver: &Instance, label: &str) -> DeviceArray<f32> {
    mgr.queue_request(solver, [(label, ArrayRequest::of::<f32>([LEN]))])
        .unwrap();
    mgr.allocate_queue_for(solver)
        .unwrap()
        .take::<f32>(label)
        .unwrap()
}

fn values() -> Vec<f32> {
    (0..LEN).map(|i| i as f32 * 0.5).collect()
}

fn host(
    mgr: &MemoryManager,
    solver: &Instance,
    kind: HostMemoryKind,
    like: Option<&[f32]>,
) -> HostArray<f32> {
    mgr.create_host_array([LEN], kind, like, solver).unwrap()
}

#[test]
fn an_upload_returns_at_once_and_the_host_array_comes_back_once_it_is_done() {
    let (mgr, sim) = setup();
    let solver = instance(&mgr, "solver");
    let y = device(&mgr, &solver, "y");
    let data = values();
    let start = sim.now();

    let upload = y
        .upload_async(host(&mgr, &solver, HostMemoryKind::Pinned, Some(&data)))
        .unwrap();
    assert_eq!(sim.now(), start, "the host did not wait");
    assert!(!upload.is_done().unwrap());
    let host_array = upload.wait().unwrap();
    assert_eq!(sim.now(), start + Duration::from_nanos(COPY_NS));
    assert_eq!(
        host_array.as_slice(),
        data,
        "an upload leaves the host array as it was"
    );

    let mut back = host(&mgr, &solver, HostMemoryKind::Pinned, None);
    back.as_mut_slice().fill(-1.0);
    let back = y.download_async(back).unwrap().wait().unwrap();
    assert_eq!(back.as_slice(), data);
    assert_eq!(y.to_vec().unwrap(), data);
}

#[test]
fn copies_on_two_groups_streams_overlap_on_the_two_copy_engines() {
    let (mgr, sim) = setup();
    let (a, b) = (instance(&mgr, "a"), instance(&mgr, "b"));
    let (x, y) = (device(&mgr, &a, "x"), device(&mgr, &b, "y"));
    let data = values();
    y.copy_from_host(&data).unwrap();
    sim.clear_timeline();

    let upload = x
        .upload_async(host(&mgr, &a, HostMemoryKind::Pinned, Some(&data)))
        .unwrap();
    let download = y
        .download_async(host(&mgr, &b, HostMemoryKind::Pinned, None))
        .unwrap();
    let (_, back) = (upload.wait().unwrap(), download.wait().unwrap());
    let timeline = sim.timeline();
    assert_eq!(back.as_slice(), data);
    assert_eq!(x.to_vec().unwrap(), data);
    assert_eq!(timeline.busy_ns(Activity::HostToDevice), COPY_NS);
    assert_eq!(timeline.busy_ns(Activity::DeviceToHost), COPY_NS);
    assert_eq!(
        timeline.makespan_ns(),
        COPY_NS,
        "the upload and the download ran at the same time"
    );
}

#[test]
fn copies_on_one_stream_run_in_order() {
    let (mgr, sim) = setup();
    let solver = instance(&mgr, "solver");
    let (x, y) = (device(&mgr, &solver, "x"), device(&mgr, &solver, "y"));
    let data = values();
    sim.clear_timeline();
    let upload = x
        .upload_async(host(&mgr, &solver, HostMemoryKind::Pinned, Some(&data)))
        .unwrap();
    let second = y
        .upload_async(host(&mgr, &solver, HostMemoryKind::Pinned, Some(&data)))
        .unwrap();
    drop(second);
    assert_eq!(
        sim.now(),
        Duration::from_nanos(2 * COPY_NS),
        "dropping a copy waits for it, and it came after the first on their stream"
    );
    assert!(upload.is_done().unwrap());
    assert_eq!(upload.wait().unwrap().as_slice(), data);
}

#[test]
fn pageable_or_mismatched_host_arrays_are_refused_and_given_back() {
    let (mgr, sim) = setup();
    let solver = instance(&mgr, "solver");
    let y = device(&mgr, &solver, "y");
    let data = values();
    let before = sim.timeline().spans().len();

    let pageable = host(&mgr, &solver, HostMemoryKind::Pageable, Some(&data));
    let refused = y.upload_async(pageable).unwrap_err();
    assert!(
        matches!(refused.error(), MemError::WrongArrayType { label, found, .. }
            if label == "y" && found.contains("copy_from_host")),
        "{refused}"
    );
    let pageable = refused.into_host().expect("nothing was queued");
    assert_eq!(pageable.as_slice(), data);

    let short = mgr
        .create_host_array::<f32>([LEN - 1], HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    let (error, short) = y.download_async(short).unwrap_err().into_parts();
    assert!(
        matches!(
            error,
            MemError::LengthMismatch { expected: LEN, found, .. } if found == LEN - 1
        ),
        "{error}"
    );
    assert_eq!(short.expect("nothing was queued").len(), LEN - 1);
    assert_eq!(sim.timeline().spans().len(), before, "nothing moved");

    let as_mem_error = |host| -> Result<(), MemError> {
        y.upload_async(host)?.wait()?;
        Ok(())
    };
    assert!(matches!(
        as_mem_error(pageable),
        Err(MemError::WrongArrayType { .. })
    ));
}

#[test]
fn a_released_device_array_refuses_the_copy_and_gives_the_host_array_back() {
    let (mgr, _sim) = setup();
    let solver = instance(&mgr, "solver");
    let y = device(&mgr, &solver, "y");
    mgr.free(&solver, "y").unwrap();
    let refused = y
        .upload_async(host(&mgr, &solver, HostMemoryKind::Pinned, None))
        .unwrap_err();
    assert!(
        matches!(refused.error(), MemError::Released { .. }),
        "{refused}"
    );
    assert!(refused.into_host().is_some());
}

#[test]
fn a_copy_keeps_its_device_array_allocated_until_it_is_done() {
    let (mgr, sim) = setup();
    let solver = instance(&mgr, "solver");
    let y = device(&mgr, &solver, "y");
    let data = values();
    y.copy_from_host(&data).unwrap();
    let download = y
        .download_async(host(&mgr, &solver, HostMemoryKind::Pinned, None))
        .unwrap();
    mgr.free(&solver, "y").unwrap();
    assert!(!y.is_valid());
    assert_eq!(download.wait().unwrap().as_slice(), data);
    drop(y);
    assert_eq!(sim.live_allocations(), 0);
}

#[test]
fn another_managers_page_locked_array_is_staged_and_done_at_once() {
    // Not this backend's page-locked memory: never handed to an
    // asynchronous copy, but copied as pageable memory is, the host waiting.
    let (mgr, _sim) = setup();
    let solver = instance(&mgr, "solver");
    let y = device(&mgr, &solver, "y");
    let (other, _) = setup();
    let elsewhere = instance(&other, "solver");
    let data = values();
    let foreign = host(&other, &elsewhere, HostMemoryKind::Pinned, Some(&data));

    let upload = y.upload_async(foreign).unwrap();
    assert!(upload.is_done().unwrap(), "the staged copy is done");
    let foreign = upload.wait().unwrap();
    assert_eq!(foreign.as_slice(), data, "the array comes back as it was");
    assert_eq!(y.to_vec().unwrap(), data);

    let mut emptied = foreign;
    emptied.as_mut_slice().fill(0.0);
    let download = y.download_async(emptied).unwrap();
    assert!(download.is_done().unwrap());
    assert_eq!(download.wait().unwrap().as_slice(), data);
}

#[test]
fn a_polling_loop_sees_a_short_copy_done() {
    let (mgr, sim) = setup();
    let solver = instance(&mgr, "solver");
    mgr.queue_request(&solver, [("one", ArrayRequest::of::<f32>([250]))])
        .unwrap();
    let one = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f32>("one")
        .unwrap();
    // 1,000 bytes at 1 byte per ns: a 1 µs copy.
    let upload = one
        .upload_async(
            mgr.create_host_array([250], HostMemoryKind::Pinned, Some(&[2.0; 250]), &solver)
                .unwrap(),
        )
        .unwrap();
    let start = sim.now();
    let mut polls = 0;
    while !upload.is_done().unwrap() {
        polls += 1;
        assert!(
            polls < 1_000,
            "the host's clock does not advance while it polls"
        );
    }
    assert!(sim.now() >= start + Duration::from_micros(1));
    assert_eq!(upload.wait().unwrap().as_slice(), [2.0; 250]);
}
