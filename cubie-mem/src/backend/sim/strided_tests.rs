//! Strided copies on the simulated device: every row checked like a
//! contiguous copy (bounds, page-locked bytes, hazards per range, landing
//! on completion, the host's access in flight), the bytes between rows
//! untouched, and the time of bytes plus a cost per row.

use super::*;
use crate::backend::{Backend, HazardMemory, PinnedBlock, Stream, StridedRows};

/// 1 byte per ns each way, 2.5 ns a row.
/// A device of 1 byte/ns copies whose page-locked blocks cost no host
/// time, so that the times asserted are the copies' alone.
fn sim() -> SimBackend {
    SimBackend::new(1 << 20)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&instant_page_locking())
}

/// 3 rows of 4 bytes, 10 apart on the host and 6 apart on the device.
const ROWS: StridedRows = StridedRows {
    row_bytes: 4,
    rows: 3,
    host_pitch: 10,
    device_pitch: 6,
};

fn upload(
    ptr: DevicePtr,
    offset: u64,
    block: &dyn PinnedBlock,
    at: usize,
    rows: StridedRows,
    stream: &dyn Stream,
) -> Result<(), BackendError> {
    let src = block.bytes()[at..].as_ptr();
    // SAFETY: the block outlives the copy; each test waits for it.
    unsafe { stream.copy_to_device_strided_async(ptr, offset, src, rows) }
}

fn download(
    block: &mut dyn PinnedBlock,
    at: usize,
    rows: StridedRows,
    ptr: DevicePtr,
    stream: &dyn Stream,
) -> Result<(), BackendError> {
    let dst = block.bytes_mut()[at..].as_mut_ptr();
    // SAFETY: as in `upload`.
    unsafe { stream.copy_from_device_strided_async(dst, rows, ptr, 0) }
}

#[test]
fn rows_move_byte_exact_and_the_bytes_between_them_stay() {
    let sim = sim();
    let s = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(32, &*s).unwrap();
    let mut block = sim.alloc_pinned(32).unwrap();
    block
        .bytes_mut()
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = i as u8);
    upload(ptr, 2, &*block, 1, ROWS, &*s).unwrap();
    let mut device = [0u8; 20];
    s.copy_from_device(&mut device, ptr, 0).unwrap();
    let p = SimBackend::POISON;
    #[rustfmt::skip]
    let expected = [p, p, 1, 2, 3, 4, p, p, 11, 12, 13, 14, p, p, 21, 22, 23, 24, p, p];
    assert_eq!(
        device, expected,
        "rows at pitch 6 from offset 2; poison between"
    );

    let mut back = sim.alloc_pinned(32).unwrap();
    back.bytes_mut().fill(7);
    let packed = StridedRows::new(4, 3, 10, 6);
    // SAFETY: as in `upload`.
    let dst = back.bytes_mut()[3..].as_mut_ptr();
    unsafe { s.copy_from_device_strided_async(dst, packed, ptr, 2) }.unwrap();
    s.synchronize().unwrap();
    let mut expected = [7u8; 32];
    for (row, host) in [3, 13, 23].into_iter().enumerate() {
        let first = 1 + 10 * row as u8;
        expected[host..host + 4].copy_from_slice(&[first, first + 1, first + 2, first + 3]);
    }
    assert_eq!(back.bytes(), expected);
}

#[test]
fn figures_outside_the_memory_are_refused_before_anything_moves() {
    let sim = sim();
    let s = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(16, &*s).unwrap();
    let block = sim.alloc_pinned(32).unwrap();
    // The device rows end at 2 * 6 + 4 = 16: from offset 1 they pass the end.
    let error = upload(ptr, 1, &*block, 0, ROWS, &*s).unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::OutOfBounds {
                offset: 1,
                end: 17,
                size: 16,
                ..
            }
        ),
        "{error}"
    );
    // The host rows end at 2 * 10 + 4 = 24: from byte 9 the last one passes
    // the block's 32 bytes, though the first two lie inside.
    let error = upload(ptr, 0, &*block, 9, ROWS, &*s).unwrap_err();
    assert!(
        matches!(error, BackendError::NotPageLocked { len: 4, .. }),
        "{error}"
    );
    let overlapping = StridedRows::new(4, 3, 3, 6);
    let error = upload(ptr, 0, &*block, 0, overlapping, &*s).unwrap_err();
    assert!(matches!(error, BackendError::BadStride { .. }), "{error}");
    let huge = StridedRows::new(4, usize::MAX, 4, 4);
    let error = upload(ptr, 0, &*block, 0, huge, &*s).unwrap_err();
    assert!(matches!(error, BackendError::BadStride { .. }), "{error}");
    // Nothing was written, queued or timed.
    let mut device = [0u8; 16];
    s.copy_from_device(&mut device, ptr, 0).unwrap();
    assert_eq!(device, [SimBackend::POISON; 16]);
    assert_eq!(sim.timeline().busy_ns(Activity::HostToDevice), 0);
}

#[test]
fn hazards_are_per_row_on_the_device() {
    let sim = sim();
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(32, &*a).unwrap();
    let ready = a.record().unwrap();
    b.wait(&*ready).unwrap();
    let block = sim.alloc_pinned(32).unwrap();
    upload(ptr, 0, &*block, 0, ROWS, &*a).unwrap();
    // Bytes 4..6 lie between the first two rows: stream b may write them.
    b.copy_to_device(ptr, 4, &[9, 9]).unwrap();
    // The second row (6..10) is stream a's copy's, unordered with b.
    let error = b.copy_to_device(ptr, 8, &[9]).unwrap_err();
    assert!(
        matches!(error, BackendError::StreamHazard { earlier_on, .. } if earlier_on == a.id()),
        "{error}"
    );
    a.synchronize().unwrap();
}

#[test]
fn hazards_are_per_row_in_page_locked_memory() {
    let sim = sim();
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    a.copy_to_device(ptr, 0, &[1; 64]).unwrap();
    let ready = a.record().unwrap();
    b.wait(&*ready).unwrap();
    let mut block = sim.alloc_pinned(32).unwrap();
    // The block's own pointer, which touches none of its bytes and stays
    // valid after the download's borrow: the host may not touch the block
    // once it is lent.
    let base = block.base().as_ptr().cast_const();
    download(&mut *block, 0, ROWS, ptr, &*a).unwrap();
    // Host bytes 4..10 lie between the first two rows: another stream's
    // copy may use them.
    let between = base.wrapping_add(4);
    // SAFETY: as in `upload`.
    unsafe { b.copy_to_device_async(ptr, 40, between, 6) }.unwrap();
    // Bytes 10..14 are the second row, which stream a's download writes.
    let row = base.wrapping_add(10);
    // SAFETY: as in `upload`.
    let error = unsafe { b.copy_to_device_async(ptr, 50, row, 4) }.unwrap_err();
    assert!(
        matches!(error, BackendError::StreamHazard { memory: HazardMemory::PageLocked(_), earlier_on, .. } if earlier_on == a.id()),
        "{error}"
    );
    a.synchronize().unwrap();
    b.synchronize().unwrap();
}

#[test]
fn downloaded_rows_land_when_the_host_has_seen_the_copy_done() {
    let sim = sim();
    let s = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(32, &*s).unwrap();
    s.copy_to_device(ptr, 0, &[5; 32]).unwrap();
    let mut block = sim.alloc_pinned(32).unwrap();
    download(&mut *block, 0, ROWS, ptr, &*s).unwrap();
    let done = s.record().unwrap();
    // Reading the rows now reads what was there, and is reported.
    assert_eq!(block.bytes()[10], 0, "not landed yet");
    let error = done.is_complete().unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::HostAccessInFlight { access: "read", .. }
        ),
        "{error}"
    );
    done.synchronize().unwrap();
    let mut expected = [0u8; 32];
    for host in [0, 10, 20] {
        expected[host..host + 4].fill(5);
    }
    assert_eq!(block.bytes(), expected);
}

#[test]
fn a_strided_copy_takes_its_bytes_time_plus_a_cost_per_row() {
    let sim = sim().with_calibration(&Calibration {
        strided_row_ps: Some(2_500),
        ..instant_page_locking()
    });
    let s = sim.create_stream().unwrap();
    let ptr = sim.alloc_device(4096, &*s).unwrap();
    let block = sim.alloc_pinned(8192).unwrap();
    // 100 rows of 40 bytes: 4,000 ns of bytes, 250 ns of rows.
    let rows = StridedRows::new(40, 100, 80, 40);
    upload(ptr, 0, &*block, 0, rows, &*s).unwrap();
    assert_eq!(sim.now(), Duration::ZERO, "queued: the host did not wait");
    s.synchronize().unwrap();
    assert_eq!(sim.now(), Duration::from_nanos(4_250));
    let timeline = sim.timeline();
    assert_eq!(timeline.busy_ns(Activity::HostToDevice), 4_250);
    let span = timeline.spans().last().unwrap().clone();
    assert_eq!(span.name, "upload 4000 B (3.91 KiB) in 100 rows");
    assert_eq!(span.bytes, 4_000);
}

#[test]
fn each_row_of_a_strided_copy_is_checked_against_earlier_work() {
    let sim = sim();
    let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
    let ptr = sim.alloc_device(64, &*a).unwrap();
    a.copy_to_device(ptr, 0, &[1; 64]).unwrap();
    let ready = a.record().unwrap();
    b.wait(&*ready).unwrap();
    let mut block = sim.alloc_pinned(64).unwrap();
    let base = block.base().as_ptr();
    // Stream b writes a byte of the second device row (6..10), unordered
    // with stream a: both directions' strided copies on a race with it.
    let other = sim.alloc_pinned(8).unwrap();
    // SAFETY: the block outlives the copy; the streams are synchronised.
    unsafe { b.copy_to_device_async(ptr, 7, other.bytes().as_ptr(), 1) }.unwrap();
    let error = upload(ptr, 0, &*block, 0, ROWS, &*a).unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard {
                memory: HazardMemory::Device(_),
                ..
            }
        ),
        "{error}"
    );
    let error = download(&mut *block, 0, ROWS, ptr, &*a).unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard {
                memory: HazardMemory::Device(_),
                ..
            }
        ),
        "{error}"
    );
    b.synchronize().unwrap();
    // Stream b's download into the third host row (20..24) is in flight:
    // a strided upload reading it, or download writing it, races with it.
    // SAFETY: the block outlives the copy; the streams are synchronised.
    unsafe { b.copy_from_device_async(base.wrapping_add(21), 2, ptr, 50) }.unwrap();
    // SAFETY: as in `upload` (refused: nothing is queued).
    let error = unsafe { a.copy_to_device_strided_async(ptr, 0, base, ROWS) }.unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard {
                memory: HazardMemory::PageLocked(_),
                ..
            }
        ),
        "{error}"
    );
    // SAFETY: as above.
    let error = unsafe { a.copy_from_device_strided_async(base, ROWS, ptr, 0) }.unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::StreamHazard {
                memory: HazardMemory::PageLocked(_),
                ..
            }
        ),
        "{error}"
    );
    b.synchronize().unwrap();
    a.synchronize().unwrap();
}
