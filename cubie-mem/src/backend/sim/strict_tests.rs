//! The simulated device punishes what a GPU would: work of a destroyed
//! stream still running, page-locked memory the host touches while a copy
//! uses it, host memory that is not page-locked in an asynchronous copy;
//! it allows what a GPU allows (streams on disjoint bytes of one buffer);
//! and it times the host's own work and pageable copies.

use super::*;
use crate::backend::{Backend, HostWork};

/// 1 byte per ns each way.
/// A device of 1 byte/ns copies whose page-locked blocks cost no host
/// time, so that the times asserted are the copies' alone.
fn sim() -> SimBackend {
    SimBackend::new(1 << 20)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&instant_page_locking())
}

/// [`sim`] with its host's memcpy at `bytes_per_second` on each thread.
fn sim_with_host(bytes_per_second: u64) -> SimBackend {
    sim().with_calibration(&Calibration {
        memcpy_by_threads: vec![bytes_per_second],
        ..instant_page_locking()
    })
}

/// Asserts that `error` reports the host's `access` ("read", "write" or
/// "free") to page-locked bytes a copy in flight uses.
fn assert_host_access(error: &BackendError, access: &str) {
    assert!(
        matches!(error, BackendError::HostAccessInFlight { access: a, .. } if *a == access),
        "expected the host's {access} to be reported: {error}"
    );
}

#[test]
fn destroying_a_stream_does_not_wait_for_its_work() {
    let sim = sim();
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    let mut block = sim.alloc_pinned(64).unwrap();
    block.bytes_mut().fill(3);
    // SAFETY: the block lives until the end; the test waits for the copy.
    unsafe { a.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 64) }.unwrap();
    let uploaded = a.record().unwrap();
    let a_id = a.id();
    drop(a);
    assert_eq!(sim.live_streams(), 1, "the stream was destroyed");
    assert_eq!(
        sim.now(),
        Duration::ZERO,
        "destroying the stream waited for nothing"
    );
    // Its copy still writes the device memory: another stream must be ordered.
    let mut back = [0u8; 64];
    let error = b.copy_from_device(&mut back, ptr, 0).unwrap_err();
    assert!(
        matches!(error, BackendError::StreamHazard { earlier_on, .. } if earlier_on == a_id),
        "{error}"
    );
    // ... and still reads the block: the host may not write it yet.
    block.bytes_mut().fill(4);
    let error = b.synchronize().unwrap_err();
    assert_host_access(&error, "write");
    // Once the host has seen the copy done, all is well.
    uploaded.synchronize().unwrap();
    b.copy_from_device(&mut back, ptr, 0).unwrap();
    assert_eq!(back, [3; 64]);
    block.bytes_mut().fill(5);
    b.synchronize().unwrap();
}

#[test]
fn a_download_lands_only_when_the_host_has_seen_it_done() {
    let sim = sim();
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(1000, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[7; 1000]).unwrap();
    let mut block = sim.alloc_pinned(1000).unwrap();
    block.bytes_mut().fill(1);
    let target = block.base().as_ptr();
    // SAFETY: the block lives until the end, and the test reads it early on
    // purpose only through the checked `bytes`.
    unsafe { stream.copy_from_device_async(target, 1000, ptr, 0) }.unwrap();
    let done = stream.record().unwrap();
    assert_eq!(
        block.bytes(),
        [1; 1000],
        "the copy has not landed: stale bytes"
    );
    let error = done.synchronize().unwrap_err();
    assert!(
        matches!(error, BackendError::HostAccessInFlight { access: "read", stream: s, .. } if s == stream.id()),
        "{error}"
    );
    done.synchronize().unwrap();
    assert_eq!(block.bytes(), [7; 1000]);
    stream.synchronize().unwrap();
}

#[test]
fn a_block_freed_while_a_copy_uses_it_is_reported_and_never_written() {
    let sim = sim();
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(64, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[9; 64]).unwrap();
    let block = sim.alloc_pinned(64).unwrap();
    let target = block.base().as_ptr();
    // SAFETY: deliberately broken: the block is dropped before the copy is
    // waited for. The simulated copy lands only once seen done, so nothing
    // writes the freed memory.
    unsafe { stream.copy_from_device_async(target, 64, ptr, 0) }.unwrap();
    drop(block);
    let error = stream.synchronize().unwrap_err();
    assert_host_access(&error, "free");
    stream.synchronize().unwrap();
}

#[test]
fn the_host_touching_a_peer_block_this_device_copies_is_reported_here() {
    let (owner, copier) = (sim(), sim());
    copier.accept_page_locked(&owner);
    let stream = copier.create_stream().unwrap();
    let ptr = copier.alloc_device(64, &*stream).unwrap();
    let mut block = owner.alloc_pinned(64).unwrap();
    let target = block.base().as_ptr();
    // SAFETY: the block lives until the copy is waited for.
    unsafe { stream.copy_from_device_async(target, 64, ptr, 0) }.unwrap();
    assert_eq!(block.bytes()[0], 0, "read before the download is seen done");
    let error = stream.synchronize().unwrap_err();
    assert_host_access(&error, "read");
    stream.synchronize().unwrap();
    assert_eq!(
        block.bytes()[0],
        SimBackend::POISON,
        "landed once seen done"
    );
    assert!(
        owner.create_stream().is_ok(),
        "the copier's misuse is reported by the copier alone"
    );

    let source = block.base().as_ptr().cast_const();
    // SAFETY: deliberately broken: the block is written, then dropped,
    // while the upload reads it; the simulated copy took its bytes.
    unsafe { stream.copy_to_device_async(ptr, 0, source, 64) }.unwrap();
    block.bytes_mut().fill(1);
    let error = stream.synchronize().unwrap_err();
    assert_host_access(&error, "write");
    // SAFETY: as above.
    unsafe { stream.copy_to_device_async(ptr, 0, source, 64) }.unwrap();
    drop(block);
    let error = stream.synchronize().unwrap_err();
    assert_host_access(&error, "free");
    stream.synchronize().unwrap();
    assert_eq!(owner.live_pinned_blocks(), 0);
}

#[test]
fn a_block_outliving_the_device_that_made_it_is_still_unregistered_when_freed() {
    let (owner, copier) = (sim(), sim());
    copier.accept_page_locked(&owner);
    let block = owner.alloc_pinned(64).unwrap();
    drop(owner);
    let stream = copier.create_stream().unwrap();
    let ptr = copier.alloc_device(64, &*stream).unwrap();
    let target = block.base().as_ptr();
    // SAFETY: deliberately broken: the block is dropped before the copy is
    // waited for; the simulated download lands only once seen done.
    unsafe { stream.copy_from_device_async(target, 64, ptr, 0) }.unwrap();
    drop(block);
    let error = stream.synchronize().unwrap_err();
    assert_host_access(&error, "free");
    // SAFETY: refused before anything is written.
    let error = unsafe { stream.copy_from_device_async(target, 64, ptr, 0) }.unwrap_err();
    assert!(
        matches!(error, BackendError::NotPageLocked { .. }),
        "{error}"
    );
}

#[test]
fn asynchronous_copies_refuse_memory_that_is_not_page_locked_by_this_device() {
    let sim = sim();
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(64, &*stream).unwrap();
    let pageable = [0u8; 64];
    let other = SimBackend::new(1 << 20).alloc_pinned(64).unwrap();
    for (source, what) in [
        (pageable.as_ptr(), "a Vec"),
        (other.bytes().as_ptr(), "another device's page-locked block"),
    ] {
        // SAFETY: refused before anything is read.
        let error = unsafe { stream.copy_to_device_async(ptr, 0, source, 64) }.unwrap_err();
        assert!(
            matches!(error, BackendError::NotPageLocked { len: 64, .. }),
            "{what}: {error}"
        );
    }
    let mut target = [0u8; 64];
    // SAFETY: refused before anything is written.
    let error =
        unsafe { stream.copy_from_device_async(target.as_mut_ptr(), 64, ptr, 0) }.unwrap_err();
    assert!(
        matches!(error, BackendError::NotPageLocked { len: 64, .. }),
        "{error}"
    );
    // A block of this device, but a range running past its end.
    let block = sim.alloc_pinned(64).unwrap();
    // SAFETY: refused before anything is read.
    let error =
        unsafe { stream.copy_to_device_async(ptr, 0, block.bytes().as_ptr().wrapping_add(8), 64) }
            .unwrap_err();
    assert!(
        matches!(error, BackendError::NotPageLocked { .. }),
        "{error}"
    );
}

#[test]
fn streams_may_write_disjoint_bytes_of_one_buffer_but_not_the_same_bytes() {
    let sim = sim();
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    let allocated = a.record().unwrap();
    b.wait(&*allocated).unwrap();
    let block = sim.alloc_pinned(64).unwrap();
    let source = block.base().as_ptr().cast_const();
    // SAFETY: the block lives until the streams are synchronised below.
    unsafe {
        a.copy_to_device_async(ptr, 0, source, 32).unwrap();
        b.copy_to_device_async(ptr, 32, source, 32).unwrap();
        let overlapping = b.copy_to_device_async(ptr, 16, source, 32).unwrap_err();
        assert!(
            matches!(overlapping, BackendError::StreamHazard { earlier_on, .. } if earlier_on == a.id()),
            "{overlapping}"
        );
    }
    a.synchronize().unwrap();
    b.synchronize().unwrap();
}

#[test]
fn the_hosts_work_is_timed_on_its_own_engine_and_delays_what_it_issues() {
    // 1 byte per ns for the host too.
    let sim = sim_with_host(1_000_000_000);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(500, &*stream).unwrap();
    sim.host_work(HostWork::Gather { rows: 1 }, 2000, 1);
    assert_eq!(sim.now(), Duration::from_nanos(2000), "the host was busy");
    let block = sim.alloc_pinned(500).unwrap();
    // SAFETY: the block lives until the stream is synchronised.
    unsafe { stream.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 500) }.unwrap();
    sim.host_work(HostWork::Scatter { rows: 1 }, 1000, 1);
    stream.synchronize().unwrap();
    let spans: Vec<_> = sim
        .timeline()
        .spans()
        .iter()
        .filter(|s| s.activity != Activity::Alloc)
        .map(|s| (s.activity.category(), s.start_ns, s.end_ns))
        .collect();
    assert_eq!(
        spans,
        [("host", 0, 2000), ("h2d", 2000, 2500), ("host", 2000, 3000)]
    );
    assert_eq!(sim.timeline().busy_ns(Activity::HostStaging), 3000);
    assert_eq!(
        sim.timeline().busiest_engine_ns(),
        3000,
        "the host is the busiest engine"
    );
}

#[test]
fn pageable_copies_run_at_the_pageable_bandwidth_and_block_the_host() {
    // Page-locked copies at 1 byte per ns, pageable ones at half that.
    let sim = sim_with_host(500_000_000);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(1000, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[1; 1000]).unwrap();
    assert_eq!(sim.now(), Duration::from_nanos(2000));
    let mut back = [0u8; 1000];
    stream.copy_from_device(&mut back, ptr, 0).unwrap();
    assert_eq!(sim.now(), Duration::from_nanos(4000));
    // A pageable bandwidth above the engine's does not make copies faster.
    let fast = SimBackend::new(1 << 20)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&Calibration {
            memcpy_by_threads: vec![u64::MAX],
            ..Calibration::fixed()
        });
    let stream = fast.create_stream().unwrap();
    let ptr = fast.alloc_device(1000, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[1; 1000]).unwrap();
    assert_eq!(fast.now(), Duration::from_nanos(1000));
}

#[test]
fn a_polling_loop_ends_as_the_hosts_clock_passes_the_event() {
    let sim = sim();
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(1 << 20, &*stream).unwrap();
    let block = sim.alloc_pinned(1 << 20).unwrap();
    // SAFETY: the block lives until the copy is seen done.
    unsafe { stream.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 1 << 20) }.unwrap();
    let done = stream.record().unwrap();
    let mut polls = 0u64;
    while !done.is_complete().unwrap() {
        polls += 1;
        assert!(polls < 10_000, "the poll never saw the 1 ms copy done");
    }
    // 1 MiB at 1 byte per ns, one poll's time at a time.
    assert_eq!(polls, (1u64 << 20).div_ceil(clock::POLL_NS));
    assert!(sim.now() >= Duration::from_nanos(1 << 20));
}

#[test]
fn work_the_clock_cannot_hold_is_refused_and_later_timings_stay_exact() {
    use crate::backend::{Access, KernelArg, KernelBody, KernelLaunch};
    let sim = sim();
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(8, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[1; 8]).unwrap();
    let args = [KernelArg {
        ptr,
        bytes: 8,
        access: Access::ReadWrite,
    }];
    let launch = |duration: Duration| {
        let mut body = |bytes: &mut [&mut [u8]]| bytes[0].fill(9);
        sim.launch(
            KernelLaunch {
                name: "long",
                args: &args,
                body: KernelBody::Host {
                    duration,
                    run: &mut body,
                },
            },
            &*stream,
        )
    };
    let longest = SimBackend::LONGEST_OPERATION;
    for duration in [
        Duration::from_nanos(u64::MAX),
        Duration::MAX,
        longest + Duration::from_nanos(1),
    ] {
        let error = launch(duration).unwrap_err();
        assert!(
            matches!(error, BackendError::ClockOverflow { start_ns: 8, duration: d, .. }
                if d == duration),
            "{error}"
        );
    }
    // Nothing ran: the data, the clock and the timeline are as they were,
    // and the next copy is timed as the model says (8 bytes at 1 byte/ns).
    let mut back = [0; 8];
    stream.copy_from_device(&mut back, ptr, 0).unwrap();
    assert_eq!(back, [1; 8]);
    assert_eq!(sim.now(), Duration::from_nanos(16));
    let download = sim.timeline().spans().last().unwrap().clone();
    assert_eq!((download.start_ns, download.end_ns), (8, 16));
    assert_eq!(sim.timeline().spans().len(), 3, "alloc, upload, download");

    // The longest operation is placed exactly, and leaves the device
    // working: the next copy starts when it ends and takes its 8 ns.
    launch(longest).unwrap();
    let kernel_end = sim.timeline().spans().last().unwrap().end_ns;
    assert_eq!(kernel_end, 16 + (1 << 50));
    stream.copy_from_device(&mut back, ptr, 0).unwrap();
    assert_eq!(back, [9; 8]);
    let download = sim.timeline().spans().last().unwrap().clone();
    assert_eq!(
        (download.start_ns, download.end_ns),
        (kernel_end, kernel_end + 8)
    );
}

#[test]
fn the_timeline_keeps_its_capacity_and_figures_over_everything() {
    let sim = sim().with_timeline_capacity(10);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(10, &*stream).unwrap();
    for _ in 0..100 {
        stream.copy_to_device(ptr, 0, &[1; 10]).unwrap();
    }
    let timeline = sim.timeline();
    assert_eq!(timeline.spans().len(), 10);
    assert_eq!(timeline.dropped_spans(), 91, "the allocation and 90 copies");
    assert_eq!(timeline.busy_ns(Activity::HostToDevice), 1_000);
    assert_eq!(timeline.makespan_ns(), 1_000);
    assert_eq!(timeline.to_chrome_trace()["otherData"]["dropped_spans"], 91);
    sim.clear_timeline();
    assert_eq!(sim.timeline().dropped_spans(), 0);
}

#[test]
fn host_work_over_four_lanes_takes_a_quarter_of_one_lanes_time() {
    // 1 byte per ns for each of the host's threads.
    let sim = sim_with_host(1_000_000_000);
    sim.host_work(HostWork::Gather { rows: 1 }, 4000, 1);
    assert_eq!(
        sim.now(),
        Duration::from_nanos(4000),
        "one lane: 4000 B at 1 B/ns"
    );
    sim.host_work(HostWork::Scatter { rows: 1 }, 4000, 4);
    assert_eq!(sim.now(), Duration::from_nanos(5000), "four lanes: 1000 ns");
    sim.host_work(HostWork::Gather { rows: 1 }, 4001, 4);
    assert_eq!(
        sim.now(),
        Duration::from_nanos(6001),
        "rounded up to the ns"
    );
    sim.host_work(HostWork::Gather { rows: 1 }, 10, 0);
    assert_eq!(sim.now(), Duration::from_nanos(6011), "0 lanes count as 1");
    let names: Vec<_> = sim
        .timeline()
        .spans()
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert!(
        names.iter().any(|name| name.ends_with("on 4 threads")),
        "the timeline names the lanes: {names:?}"
    );
}
