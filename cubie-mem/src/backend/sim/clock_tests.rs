//! The clock's tests: placement on engines and streams, events, copy,
//! strided copy and kernel times, instants, and copies both ways at once.

use super::*;

fn work(activity: Activity, stream: u64) -> Work {
    Work {
        activity,
        name: String::new(),
        stream,
        bytes: 0,
    }
}

#[test]
fn engines_overlap_across_streams_and_serialise_within_one() {
    let mut c = DeviceClock::new();
    // Two uploads on two streams share the one host-to-device engine.
    assert_eq!(
        c.run(Engine::HostToDevice, 100, work(Activity::HostToDevice, 1)),
        100
    );
    assert_eq!(
        c.run(Engine::HostToDevice, 100, work(Activity::HostToDevice, 2)),
        200
    );
    // A download on stream 1 follows its upload and overlaps stream 2's.
    assert_eq!(
        c.run(Engine::DeviceToHost, 300, work(Activity::DeviceToHost, 1)),
        400
    );
    // Stream 2's download waits for the engine, not only for its stream.
    assert_eq!(
        c.run(Engine::DeviceToHost, 50, work(Activity::DeviceToHost, 2)),
        450
    );
    assert_eq!(c.now_ns(), 0, "the host has not waited");
    let t = c.timeline();
    assert_eq!(t.makespan_ns(), 450);
    assert_eq!(t.busiest_engine_ns(), 350);
}

#[test]
fn events_order_streams_and_fire_when_the_host_passes_them() {
    let mut c = DeviceClock::new();
    c.run(Engine::HostToDevice, 500, work(Activity::HostToDevice, 1));
    c.record_event(9, 1);
    assert!(!c.event_fired(9));
    c.wait_event(2, 9);
    // Stream 2's copy waits for the upload although its engine is free.
    assert_eq!(
        c.run(Engine::DeviceToHost, 10, work(Activity::DeviceToHost, 2)),
        510
    );
    c.synchronize(2);
    assert_eq!(c.now_ns(), 510);
    assert!(c.event_fired(9));
    // An event on an idle stream fires at once.
    c.record_event(10, 3);
    assert!(c.event_fired(10));
}

#[test]
fn copy_time_is_bytes_over_bandwidth_rounded_up() {
    let mut c = DeviceClock::new();
    assert_eq!(c.copy_ns(Engine::HostToDevice, 50_000), 1000);
    c.set_bandwidth(3, 0);
    assert_eq!(c.copy_ns(Engine::HostToDevice, 1), 333_333_334);
    assert_eq!(c.copy_ns(Engine::DeviceToHost, 1), 1_000_000_000);
    assert_eq!(c.copy_ns(Engine::DeviceToHost, u64::MAX), u64::MAX);
}

#[test]
fn strided_copies_add_each_rows_cost_to_their_bytes_time() {
    let mut c = DeviceClock::new();
    // 50,000 bytes at 50 GB/s: 1 µs; 1,000 rows at 2.5 ns: 2.5 µs.
    assert_eq!(
        c.strided_copy_ns(Engine::DeviceToHost, 50_000, 1_000),
        3_500
    );
    assert_eq!(
        c.strided_copy_ns(Engine::HostToDevice, 0, 3),
        8,
        "7.5 ns, rounded up"
    );
    c.strided_row_ps = 0;
    assert_eq!(
        c.strided_copy_ns(Engine::HostToDevice, 50_000, 1_000),
        1_000
    );
    c.strided_row_ps = u64::MAX;
    assert_eq!(
        c.strided_copy_ns(Engine::HostToDevice, 1, u64::MAX),
        u64::MAX
    );
}

#[test]
fn kernels_take_their_declared_time_over_the_compute_speed() {
    let mut c = DeviceClock::new();
    let declared = Duration::from_micros(10);
    assert_eq!(c.kernel_duration(declared), declared);
    c.set_compute_speed(200);
    assert_eq!(c.kernel_duration(declared), Duration::from_micros(5));
    c.set_compute_speed(0);
    assert_eq!(c.kernel_duration(declared), Duration::from_millis(1));
    c.set_compute_speed(3);
    // 10 µs * 100 / 3, rounded up.
    assert_eq!(c.kernel_duration(declared), Duration::from_nanos(333_334));
    assert_eq!(
        c.kernel_duration(Duration::new(1, 999_999_999)),
        Duration::new(66, 666_666_634)
    );
    c.set_compute_speed(1);
    assert_eq!(c.kernel_duration(Duration::MAX), Duration::MAX);
}

#[test]
fn instants_sit_at_the_stream_position_without_taking_time() {
    let mut c = DeviceClock::new();
    c.run(Engine::HostToDevice, 100, work(Activity::HostToDevice, 1));
    c.instant(work(Activity::Free, 1));
    let free = c.timeline().spans().last().unwrap().clone();
    assert_eq!((free.start_ns, free.end_ns), (100, 100));
}

#[test]
fn a_copy_beside_the_other_directions_loses_the_overlap_at_the_both_ways_share() {
    let mut clock = DeviceClock::new();
    // 1 byte per ns each way; each direction keeps half while the other runs.
    clock.set_calibration(&Calibration {
        copy_bandwidth: Some((1_000_000_000, 1_000_000_000)),
        both_ways_percent: 50,
        strided_row_ps: Some(1_000),
        ..Calibration::fixed()
    });
    // The node's strided rows: 1 ns each beyond the bytes.
    assert_eq!(
        clock.strided_copy_ns(Engine::HostToDevice, 1_000, 10),
        1_010
    );
    let download = clock.copy_ns(Engine::DeviceToHost, 1_000);
    assert_eq!(
        clock.run(
            Engine::DeviceToHost,
            download,
            work(Activity::DeviceToHost, 1)
        ),
        1_000
    );
    // An upload of 1,000 bytes beside it all the way: those 1,000 ns move
    // at half speed, 1,000 ns more.
    let upload = clock.copy_ns(Engine::HostToDevice, 1_000);
    assert_eq!(
        clock.run(
            Engine::HostToDevice,
            upload,
            work(Activity::HostToDevice, 2)
        ),
        2_000
    );
    // One after the other direction ended runs at full speed; a kernel is
    // never slowed.
    clock.wait_until(2_000);
    assert_eq!(
        clock.run(
            Engine::DeviceToHost,
            download,
            work(Activity::DeviceToHost, 1)
        ),
        3_000
    );
    assert_eq!(
        clock.run(Engine::Compute, 500, work(Activity::Kernel, 3)),
        2_500
    );

    // The fixed figures lose nothing.
    let mut fixed = DeviceClock::new();
    fixed.set_bandwidth(1_000_000_000, 1_000_000_000);
    fixed.run(Engine::DeviceToHost, 1_000, work(Activity::DeviceToHost, 1));
    assert_eq!(
        fixed.run(Engine::HostToDevice, 1_000, work(Activity::HostToDevice, 2)),
        1_000
    );
}

#[test]
fn staging_beside_a_copy_loses_the_overlap_at_its_share_of_host_memory() {
    let mut clock = DeviceClock::new();
    // 1 byte per ns for copies and for one staging thread; staging keeps
    // half of it beside the copy engines' DMA.
    clock.set_calibration(&Calibration {
        memcpy_by_threads: vec![1_000_000_000],
        copy_bandwidth: Some((1_000_000_000, 1_000_000_000)),
        staging_beside_copies_percent: 50,
        ..Calibration::fixed()
    });
    let download = clock.copy_ns(Engine::DeviceToHost, 1_000);
    clock.run(
        Engine::DeviceToHost,
        download,
        work(Activity::DeviceToHost, 1),
    );
    clock
        .host_work("scatter".into(), HostWork::Scatter { rows: 1 }, 1_000, 1)
        .unwrap();
    assert_eq!(
        clock.host_ns, 2_000,
        "1,000 ns beside the download, at half speed"
    );
    clock
        .host_work("gather".into(), HostWork::Gather { rows: 1 }, 1_000, 1)
        .unwrap();
    assert_eq!(clock.host_ns, 3_000, "nothing copies any more");
}
