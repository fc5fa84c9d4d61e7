//! The simulated device against the contract.

use super::*;
use crate::backend::{
    Access, Backend, EngineRates, Event, HazardMemory, KernelArg, KernelBody, KernelLaunch, Stream,
};

#[test]
fn allocations_reduce_free_memory_and_hold_data() {
    let sim = SimBackend::new(1000).with_free(600);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(100, &*stream).unwrap();
    assert_eq!(sim.free_bytes(), 500);
    stream.copy_to_device(ptr, 10, &[1, 2, 3]).unwrap();
    let mut out = [0u8; 4];
    stream.copy_from_device(&mut out, ptr, 9).unwrap();
    assert_eq!(out, [memory::POISON, 1, 2, 3], "byte 9 was never written");
    assert!(matches!(
        stream.copy_from_device(&mut out, ptr, 97),
        Err(BackendError::OutOfBounds { .. })
    ));
    sim.free_device(ptr, 100, &*stream).unwrap();
    assert_eq!(sim.free_bytes(), 600);
    assert_eq!(sim.pooled_bytes(), 100);
    // The pool gives the block back at the same address, as fresh memory:
    // what was written there before reads as poison (CUDA leaves it undefined).
    let again = sim.alloc_device(50, &*stream).unwrap();
    assert_eq!((again, sim.pooled_bytes()), (ptr, 0));
    stream.copy_from_device(&mut out, again, 9).unwrap();
    assert_eq!(out, [memory::POISON; 4]);
    // Under pressure the pool is trimmed to make room.
    sim.free_device(again, 50, &*stream).unwrap();
    let big = sim.alloc_device(600, &*stream).unwrap();
    assert_eq!((sim.pooled_bytes(), sim.free_bytes()), (0, 0));
    sim.free_device(big, 600, &*stream).unwrap();
}

#[test]
fn out_of_memory_and_fault_injection() {
    let sim = SimBackend::new(1000).fail_allocations_after(1);
    let stream = sim.create_stream().unwrap();
    assert!(matches!(
        sim.alloc_device(2000, &*stream),
        Err(BackendError::OutOfMemory { .. })
    ));
    assert!(
        sim.alloc_device(10, &*stream)
            .unwrap_err()
            .is_out_of_memory()
    );
    sim.set_fail_allocations_after(None);
    assert!(sim.alloc_device(10, &*stream).is_ok());
}

#[test]
fn events_complete_unless_held() {
    let sim = SimBackend::new(1000);
    let stream = sim.create_stream().unwrap();
    let e = stream.record().unwrap();
    assert!(e.is_complete().unwrap());
    sim.hold_completions(true);
    let e = stream.record().unwrap();
    assert!(!e.is_complete().unwrap());
    sim.hold_completions(false);
    assert!(e.is_complete().unwrap());
}

/// An event of no simulated device: another backend's.
struct ForeignEvent;

impl Event for ForeignEvent {
    fn is_complete(&self) -> Result<bool, BackendError> {
        Ok(true)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn streams_wait_only_for_events_of_their_own_device() {
    let sim = SimBackend::new(1 << 20);
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let event = a.record().unwrap();
    b.wait(&*event).unwrap();
    // Another simulated device's event, and another backend's, are refused.
    let other = SimBackend::new(1 << 20);
    let elsewhere = other.create_stream().unwrap().record().unwrap();
    for foreign in [&*elsewhere, &ForeignEvent as &dyn Event] {
        let error = b.wait(foreign).unwrap_err();
        assert!(
            matches!(
                error,
                BackendError::Unsupported {
                    operation: "order streams",
                    ..
                }
            ),
            "{error}"
        );
    }
    // Nor does another device's stream wait for this device's event, or
    // allocate, free or launch here.
    let theirs = other.create_stream().unwrap();
    assert!(matches!(
        theirs.wait(&*event),
        Err(BackendError::Unsupported { .. })
    ));
    assert!(matches!(
        sim.alloc_device(64, &*theirs),
        Err(BackendError::Unsupported { .. })
    ));
    let ptr = sim.alloc_device(64, &*a).unwrap();
    assert!(matches!(
        sim.free_device(ptr, 64, &*theirs),
        Err(BackendError::Unsupported { .. })
    ));
    assert!(matches!(
        kernel(&sim, &*theirs, &[], 1, |_| {}),
        Err(BackendError::Unsupported { .. })
    ));
    assert_eq!(sim.live_allocations(), 1, "nothing was freed");
    sim.free_device(ptr, 64, &*a).unwrap();
}

#[test]
fn streams_and_events_are_released_when_dropped_and_events_outlive_their_stream() {
    let sim = SimBackend::new(1 << 20);
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let event = a.record().unwrap();
    assert_eq!((sim.live_streams(), sim.live_events()), (2, 1));
    drop(a);
    assert_eq!(sim.live_streams(), 1);
    // The event of a destroyed stream can still be waited for.
    b.wait(&*event).unwrap();
    event.synchronize().unwrap();
    assert!(event.is_complete().unwrap());
    drop(event);
    assert_eq!(sim.live_events(), 0);
    drop(b);
    assert_eq!(sim.live_streams(), 0);
}

#[test]
fn blocking_copies_take_modelled_time_and_the_host_waits() {
    // 1 byte per ns up, half that down.
    let sim = SimBackend::new(1 << 20).with_copy_bandwidth(1_000_000_000, 500_000_000);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(4000, &*stream).unwrap();
    stream.copy_to_device(ptr, 0, &[1; 4000]).unwrap();
    assert_eq!(sim.now(), Duration::from_nanos(4000));
    let mut out = [0; 1000];
    stream.copy_from_device(&mut out, ptr, 0).unwrap();
    assert_eq!(sim.now(), Duration::from_nanos(6000));
    sim.free_device(ptr, 4000, &*stream).unwrap();
    let timeline = sim.timeline();
    let spans: Vec<_> = timeline
        .spans()
        .iter()
        .map(|s| (s.activity.category(), s.start_ns, s.end_ns))
        .collect();
    assert_eq!(
        spans,
        [
            ("alloc", 0, 0),
            ("h2d", 0, 4000),
            ("d2h", 4000, 6000),
            ("free", 6000, 6000)
        ]
    );
    sim.clear_timeline();
    assert!(sim.timeline().spans().is_empty());
}

#[test]
fn pinned_blocks_are_aligned_and_zeroed() {
    let sim = SimBackend::new(1000);
    let block = sim.alloc_pinned(100).unwrap();
    assert_eq!(block.bytes().len(), 100);
    assert_eq!(block.bytes().as_ptr() as usize % 64, 0);
    assert!(block.bytes().iter().all(|&b| b == 0));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "Miri cannot fail an allocation: it aborts on an impossible size"
)]
fn memory_the_host_cannot_provide_is_out_of_memory() {
    let sim = SimBackend::new(u64::MAX);
    let stream = sim.create_stream().unwrap();
    for bytes in [1u64 << 60, u64::MAX - 1] {
        let error = sim.alloc_device(bytes, &*stream).unwrap_err();
        assert!(
            matches!(error, BackendError::OutOfMemory { requested, .. } if requested == Bytes(bytes)),
            "{error}"
        );
        let error = sim.alloc_pinned(bytes).err().unwrap();
        assert!(
            matches!(error, BackendError::OutOfMemory { requested, .. } if requested == Bytes(bytes)),
            "{error}"
        );
    }
    // Nothing half-done: no allocation, free memory unchanged, and the
    // device still allocates.
    assert_eq!(sim.live_allocations(), 0);
    assert_eq!(sim.free_bytes(), u64::MAX);
    let ptr = sim.alloc_device(100, &*stream).unwrap();
    assert_eq!(ptr.0 % ADDRESS_ALIGNMENT, 0);
}

#[test]
fn an_exhausted_address_space_is_out_of_memory() {
    let sim = SimBackend::new(u64::MAX);
    let stream = sim.create_stream().unwrap();
    sim.state().next_address = u64::MAX - ADDRESS_ALIGNMENT + 1;
    assert!(
        sim.alloc_device(1, &*stream)
            .unwrap_err()
            .is_out_of_memory()
    );
    assert_eq!(sim.live_allocations(), 0);
}

/// Launches a host kernel of `micros` µs over `args`.
fn kernel(
    sim: &SimBackend,
    stream: &dyn Stream,
    args: &[KernelArg],
    micros: u64,
    mut body: impl FnMut(&mut [&mut [u8]]) + Send,
) -> Result<(), BackendError> {
    sim.launch(
        KernelLaunch {
            name: "test kernel",
            args,
            body: KernelBody::Host {
                duration: Duration::from_micros(micros),
                run: &mut body,
            },
        },
        stream,
    )
}

fn arg(ptr: DevicePtr, bytes: u64, access: Access) -> KernelArg {
    KernelArg { ptr, bytes, access }
}

#[test]
fn asynchronous_copies_return_at_once_and_events_say_when_they_are_done() {
    // 1 byte per ns each way; page-locking takes no time.
    let sim = SimBackend::new(1 << 20)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&instant_page_locking());
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(1000, &*stream).unwrap();
    let mut block = sim.alloc_pinned(1000).unwrap();
    block.bytes_mut().fill(7);
    // SAFETY: the block lives, untouched, until the stream is synchronised.
    unsafe { stream.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 1000) }.unwrap();
    assert_eq!(sim.now(), Duration::ZERO, "the host did not wait");
    let done = stream.record().unwrap();
    assert!(!done.is_complete().unwrap());
    done.synchronize().unwrap();
    assert_eq!(sim.now(), Duration::from_nanos(1000));
    assert!(done.is_complete().unwrap());
    let back = sim.alloc_pinned(1000).unwrap();
    let dst = back.base().as_ptr();
    // SAFETY: as above.
    unsafe { stream.copy_from_device_async(dst, 1000, ptr, 0) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(back.bytes(), [7; 1000]);
    assert_eq!(sim.now(), Duration::from_nanos(2000));
}

#[test]
fn an_access_on_another_stream_without_an_event_is_a_hazard() {
    let sim = SimBackend::new(1 << 20);
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    let block = sim.alloc_pinned(64).unwrap();
    // SAFETY: the block outlives every copy; the test synchronises below.
    unsafe { a.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 64) }.unwrap();
    let read = [arg(ptr, 64, Access::Read)];
    let error = kernel(&sim, &*b, &read, 1, |_| {}).unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard { accessed_on, earlier: "written by a copy", earlier_on, .. }
                if accessed_on == b.id() && earlier_on == a.id()
        ),
        "{error}"
    );
    // An event orders them.
    let uploaded = a.record().unwrap();
    b.wait(&*uploaded).unwrap();
    kernel(&sim, &*b, &read, 1, |_| {}).unwrap();
    // Memory allocated on one stream is the allocating stream's until ordered.
    let fresh = sim.alloc_device(64, &*a).unwrap();
    let error = kernel(&sim, &*b, &[arg(fresh, 64, Access::Write)], 1, |_| {}).unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard {
                earlier: "allocated",
                ..
            }
        ),
        "{error}"
    );
    // So is freeing what another stream wrote without ordering.
    kernel(&sim, &*b, &read, 1, |_| {}).unwrap();
    let written = [arg(ptr, 64, Access::Write)];
    kernel(&sim, &*b, &written, 1, |_| {}).unwrap();
    assert!(matches!(
        sim.free_device(ptr, 64, &*a),
        Err(BackendError::StreamHazard { .. })
    ));
    b.synchronize().unwrap();
    sim.free_device(ptr, 64, &*a).unwrap();
}

#[test]
fn a_write_over_memory_another_stream_still_reads_is_a_hazard() {
    let sim = SimBackend::new(1 << 20);
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    let allocated = a.record().unwrap();
    b.wait(&*allocated).unwrap();
    let block = sim.alloc_pinned(64).unwrap();
    kernel(&sim, &*b, &[arg(ptr, 64, Access::Write)], 1, |_| {}).unwrap();
    let written = b.record().unwrap();
    a.wait(&*written).unwrap();
    // Stream a reads what b wrote (ordered), then b overwrites it unordered.
    kernel(&sim, &*a, &[arg(ptr, 64, Access::Read)], 1, |_| {}).unwrap();
    let error = kernel(&sim, &*b, &[arg(ptr, 64, Access::Write)], 1, |_| {}).unwrap_err();
    assert!(
        matches!(error, BackendError::StreamHazard { accessed_on, earlier: "read by earlier work", earlier_on, .. }
            if accessed_on == b.id() && earlier_on == a.id()),
        "{error}"
    );
    // So is a copy into it; once b waits for a's read, both are fine.
    // SAFETY: the block outlives the copy; the test synchronises below.
    let copy = unsafe { b.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 64) };
    assert!(matches!(copy, Err(BackendError::StreamHazard { .. })));
    let read = a.record().unwrap();
    b.wait(&*read).unwrap();
    // SAFETY: as above.
    unsafe { b.copy_to_device_async(ptr, 0, block.bytes().as_ptr(), 64) }.unwrap();
    b.synchronize().unwrap();
}

#[test]
fn a_page_locked_block_in_flight_cannot_be_reused_by_another_stream() {
    let sim = SimBackend::new(1 << 20);
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let x = sim.alloc_device(64, &*a).unwrap();
    let y = sim.alloc_device(64, &*b).unwrap();
    let block = sim.alloc_pinned(64).unwrap();
    let host = block.base().as_ptr();
    // SAFETY: the block outlives the copies; the test synchronises below.
    unsafe { a.copy_to_device_async(x, 0, host, 64) }.unwrap();
    let error = unsafe { b.copy_from_device_async(host, 64, y, 0) }.unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard {
                memory: HazardMemory::PageLocked(_),
                earlier: "still being read by a copy to the device",
                accessed_on,
                earlier_on,
                ..
            } if accessed_on == b.id() && earlier_on == a.id()
        ),
        "{error}"
    );
    a.synchronize().unwrap();
    // SAFETY: as above.
    unsafe { b.copy_from_device_async(host, 64, y, 0) }.unwrap();
    b.synchronize().unwrap();
    assert_eq!(block.bytes(), [memory::POISON; 64], "y was never written");
}

#[test]
fn kernels_run_on_the_compute_engine_and_overlap_copies_on_other_streams() {
    // 1 byte per ns each way: a 1000-byte copy takes 1 µs, as the kernels do.
    let sim = SimBackend::new(1 << 20)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&instant_page_locking());
    let (up, compute) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let input = sim.alloc_device(1000, &*up).unwrap();
    let output = sim.alloc_device(1000, &*compute).unwrap();
    let staged = sim.alloc_pinned(1000).unwrap();
    // SAFETY: the block outlives the copies; the test synchronises below.
    unsafe { up.copy_to_device_async(input, 0, staged.bytes().as_ptr(), 1000) }.unwrap();
    let uploaded = up.record().unwrap();
    compute.wait(&*uploaded).unwrap();
    let args = [
        arg(input, 1000, Access::Read),
        arg(output, 1000, Access::Write),
    ];
    kernel(&sim, &*compute, &args, 1, |bytes| {
        let (input, output) = bytes.split_at_mut(1);
        output[0].copy_from_slice(input[0]);
    })
    .unwrap();
    // The next upload overlaps the kernel.
    let other = sim.alloc_device(1000, &*up).unwrap();
    unsafe { up.copy_to_device_async(other, 0, staged.bytes().as_ptr(), 1000) }.unwrap();
    compute.synchronize().unwrap();
    up.synchronize().unwrap();
    let spans: Vec<_> = sim
        .timeline()
        .spans()
        .iter()
        .filter(|s| s.activity != Activity::Alloc)
        .map(|s| (s.activity.category(), s.start_ns, s.end_ns))
        .collect();
    assert_eq!(
        spans,
        [
            ("h2d", 0, 1000),
            ("kernel", 1000, 2000),
            ("h2d", 1000, 2000)
        ]
    );
    assert_eq!(sim.now(), Duration::from_nanos(2000));
    let mut out = [1u8; 1000];
    compute.copy_from_device(&mut out, output, 0).unwrap();
    assert_eq!(out, [0; 1000], "the kernel copied the zeroed staging block");
}

#[test]
fn a_kernel_sees_poison_and_cannot_list_an_allocation_twice() {
    // The kernel reads poison on purpose: the initcheck would refuse it.
    let sim = SimBackend::new(1 << 20).with_initcheck(false);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(16, &*stream).unwrap();
    let mut seen = Vec::new();
    kernel(&sim, &*stream, &[arg(ptr, 16, Access::Read)], 1, |bytes| {
        seen = bytes[0].to_vec()
    })
    .unwrap();
    assert!(seen.iter().all(|&b| b == memory::POISON));
    let twice = [arg(ptr, 16, Access::Read), arg(ptr, 16, Access::Write)];
    assert!(matches!(
        kernel(&sim, &*stream, &twice, 1, |_| {}),
        Err(BackendError::Unsupported { .. })
    ));
    assert!(matches!(
        kernel(&sim, &*stream, &[arg(ptr, 17, Access::Read)], 1, |_| {}),
        Err(BackendError::OutOfBounds { .. })
    ));
}

#[test]
fn the_compute_speed_scales_every_kernel_on_the_clock_and_the_timeline() {
    let sim = SimBackend::new(1 << 20).with_compute_speed(200);
    let stream = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(8, &*stream).unwrap();
    kernel(&sim, &*stream, &[arg(ptr, 8, Access::Write)], 10, |_| {}).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(sim.now(), Duration::from_micros(5), "10 µs at 200%");
    let kernel_span = sim.timeline().spans().last().unwrap().clone();
    assert_eq!((kernel_span.start_ns, kernel_span.end_ns), (0, 5000));
    // Slower than declared, rounded up to the nanosecond.
    let slow = SimBackend::new(1 << 20).with_compute_speed(3);
    let stream = slow.create_stream().unwrap();
    kernel(&slow, &*stream, &[], 1, |_| {}).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(slow.now(), Duration::from_nanos(33_334));
    // 0 counts as 1%.
    let crawl = SimBackend::new(1 << 20).with_compute_speed(0);
    assert_eq!(crawl.engine_rates().unwrap().compute_percent(), 1);
}

#[test]
fn a_kernel_scaled_past_the_clock_is_refused() {
    let sim = SimBackend::new(1 << 20).with_compute_speed(1);
    let stream = sim.create_stream().unwrap();
    // About 2^64 / 50 ns declared: 2^64 * 2 ns at 1%.
    let micros = u64::MAX / 50_000;
    let err = kernel(&sim, &*stream, &[], micros, |_| {}).unwrap_err();
    let scaled = Duration::from_micros(micros) * 100;
    assert!(
        matches!(err, BackendError::ClockOverflow { duration, .. } if duration == scaled),
        "{err:?}"
    );
    assert!(sim.timeline().spans().is_empty(), "nothing was placed");
}

#[test]
fn engine_rates_are_the_modelled_bandwidths_and_speed() {
    let rates = SimBackend::new(1).engine_rates().unwrap();
    assert_eq!(
        rates,
        EngineRates::new(
            SimBackend::DEFAULT_COPY_BANDWIDTH,
            SimBackend::DEFAULT_COPY_BANDWIDTH,
            // The host's on the default staging threads, each adding as much.
            Calibration::fixed().memcpy_bandwidth(1)
                * crate::backend::default_staging_lanes() as u64,
            SimBackend::DEFAULT_COMPUTE_PERCENT
        )
    );
    let sim = SimBackend::new(1)
        .with_copy_bandwidth(1, 2)
        .with_calibration(&Calibration {
            memcpy_by_threads: vec![3],
            ..Calibration::fixed()
        })
        .with_compute_speed(400);
    let host = 3 * crate::backend::default_staging_lanes() as u64;
    assert_eq!(sim.engine_rates(), Some(EngineRates::new(1, 2, host, 400)));
}

#[test]
fn page_locking_keeps_the_host_busy_for_its_bytes_at_the_page_lock_rate() {
    // 1 byte per ns.
    let sim = SimBackend::new(1 << 20).with_calibration(&Calibration {
        page_lock: 1_000_000_000,
        ..Calibration::fixed()
    });
    let block = sim.alloc_pinned(4000).unwrap();
    assert_eq!(
        sim.now(),
        Duration::from_nanos(4000),
        "the host page-locked"
    );
    let timeline = sim.timeline();
    assert_eq!(timeline.busy_ns(Activity::PageLock), 4000);
    assert_eq!(timeline.host_busy_ns(), 4000);
    assert_eq!(timeline.busiest_engine_ns(), 4000);
    let span = timeline.spans().last().unwrap().clone();
    assert_eq!(
        (span.activity, span.start_ns, span.end_ns, span.bytes),
        (Activity::PageLock, 0, 4000, 4000)
    );
    drop(block);
    // The default, 4.45 GB/s: 44.5 MB in 10 ms.
    let default = SimBackend::new(1 << 30);
    let _block = default.alloc_pinned(44_500_000).unwrap();
    assert_eq!(default.now(), Duration::from_millis(10));
}
