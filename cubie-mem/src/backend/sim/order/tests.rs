//! The ordering rules on their own: hazards, retirement, landings.

use super::*;

const WHOLE: Range<u64> = 0..64;

fn write(o: &mut Ordering, stream: u64, ptr: DevicePtr) -> Result<(), BackendError> {
    let at = o.next(stream);
    o.check_device("upload", at, ptr, &WHOLE, true)?;
    o.wrote_device(at, ptr, WHOLE, "written by a copy");
    Ok(())
}

fn pinned(o: &mut Ordering, stream: u64, bytes: Range<u64>, writes: bool) -> bool {
    let at = o.next(stream);
    let ok = o.check_pinned("copy", at, &bytes, writes).is_ok();
    if ok {
        o.used_pinned(at, bytes, writes.then(Vec::new));
    }
    ok
}

#[test]
fn a_write_on_one_stream_needs_an_event_before_another_stream_touches_it() {
    let mut o = Ordering::default();
    let ptr = DevicePtr(256);
    let at = o.next(1);
    o.allocated(at, ptr, 64);
    write(&mut o, 1, ptr).unwrap();
    let read = o.next(2);
    let error = o
        .check_device("kernel", read, ptr, &WHOLE, false)
        .unwrap_err();
    assert!(matches!(
        error,
        BackendError::StreamHazard {
            accessed_on: 2,
            earlier_on: 1,
            ..
        }
    ));
    o.record_event(7, 1);
    o.wait_event(2, 7);
    let read = o.next(2);
    o.check_device("kernel", read, ptr, &WHOLE, false).unwrap();
    o.read_device(read, ptr, WHOLE);
    // A write on the first stream must now wait for that read.
    assert!(write(&mut o, 1, ptr).is_err());
    o.record_event(8, 2);
    o.wait_event(1, 8);
    write(&mut o, 1, ptr).unwrap();
}

#[test]
fn what_the_host_waited_for_orders_later_work_everywhere() {
    let mut o = Ordering::default();
    let ptr = DevicePtr(256);
    let at = o.next(1);
    o.allocated(at, ptr, 64);
    write(&mut o, 1, ptr).unwrap();
    o.host_waits_for_stream(1);
    let read = o.next(3);
    o.check_device("kernel", read, ptr, &WHOLE, false).unwrap();
}

#[test]
fn page_locked_bytes_in_flight_cannot_be_reused_by_another_stream() {
    let mut o = Ordering::default();
    assert!(pinned(&mut o, 1, 0..100, false));
    // Two reads of the block do not conflict.
    assert!(pinned(&mut o, 2, 50..60, false));
    assert!(!pinned(&mut o, 2, 90..120, true));
    // Disjoint bytes are fine; once the host waited, all are.
    assert!(pinned(&mut o, 2, 100..120, true));
    o.host_waits_for_stream(1);
    o.host_waits_for_stream(2);
    assert!(pinned(&mut o, 3, 0..120, true));
}

#[test]
fn a_download_lands_when_the_host_sees_it_done_and_not_before() {
    let mut o = Ordering::default();
    let at = o.next(1);
    o.used_pinned(at, 4096..4100, Some(vec![1, 2, 3, 4]));
    assert!(o.check_host_access(&(4000..4097), false).is_err());
    assert!(o.check_host_access(&(0..4096), true).is_ok(), "other bytes");
    assert!(
        o.host_waits_for_stream(2).is_empty(),
        "another stream's wait"
    );
    let landed = o.host_waits_for_stream(1);
    assert_eq!(landed.len(), 1);
    assert_eq!(
        (landed[0].address, &landed[0].data[..]),
        (4096, &[1, 2, 3, 4][..])
    );
    assert!(o.check_host_access(&(4000..4200), true).is_ok());
}

#[test]
fn destroyed_streams_are_retired_once_nothing_needs_them() {
    let mut o = Ordering::default();
    let ptr = DevicePtr(256);
    let at = o.next(1);
    o.allocated(at, ptr, 64);
    o.host_waits_for_stream(1);
    // Streams that came and went, with work the host saw done or none.
    for stream in 2..1002 {
        if stream % 2 == 0 {
            write(&mut o, stream, ptr).unwrap();
            o.host_waits_for_stream(stream);
        }
        o.destroy_stream(stream);
    }
    assert_eq!(o.remembered_streams(), 1, "only stream 1 is remembered");
    assert!(o.host.0.len() <= 1 && o.events.is_empty());
    // A destroyed stream whose write the host has not seen stays, and
    // orders later work, until the host sees it.
    write(&mut o, 5000, ptr).unwrap();
    o.record_event(9, 5000);
    o.destroy_stream(5000);
    assert_eq!(o.remembered_streams(), 2);
    let read = o.next(1);
    assert!(o.check_device("kernel", read, ptr, &WHOLE, false).is_err());
    o.host_waits_for_event(9);
    assert_eq!(o.remembered_streams(), 1, "retired once seen");
    let read = o.next(1);
    o.check_device("kernel", read, ptr, &WHOLE, false).unwrap();
    // One whose every access was forgotten (its memory freed) goes too.
    let ptr2 = DevicePtr(512);
    let at = o.next(6000);
    o.allocated(at, ptr2, 8);
    o.destroy_stream(6000);
    assert_eq!(o.remembered_streams(), 2);
    o.forget_device(ptr2);
    assert_eq!(o.remembered_streams(), 1);
}

#[test]
fn downloads_seen_done_at_once_land_in_the_order_they_were_queued() {
    let mut o = Ordering::default();
    // Streams 1..=20 each download into the same bytes, each ordered after
    // the one before by an event; the host sees them all done at once.
    for stream in 1..=20u64 {
        if stream > 1 {
            o.record_event(stream, stream - 1);
            o.wait_event(stream, stream);
        }
        let at = o.next(stream);
        o.check_pinned("download", at, &(0..4), true).unwrap();
        o.used_pinned(at, 0..4, Some(vec![u8::try_from(stream).unwrap(); 4]));
    }
    let landed: Vec<u8> = o
        .host_waits_for_stream(20)
        .iter()
        .map(|landing| landing.data[0])
        .collect();
    assert_eq!(landed, (1..=20).collect::<Vec<u8>>());
    assert!(o.check_host_access(&(0..4), true).is_ok());
}

#[test]
fn destroyed_streams_no_access_names_are_swept_as_they_accumulate() {
    let mut o = Ordering::default();
    let ptr = DevicePtr(256);
    let at = o.next(1);
    o.allocated(at, ptr, 64);
    o.host_waits_for_stream(1);
    // Each stream overwrites the bytes after the one before and is
    // destroyed unseen: only the last write names its stream.
    for stream in 2..=200u64 {
        let before = stream - 1;
        o.wait_event(stream, before);
        o.forget_event(before);
        write(&mut o, stream, ptr).unwrap();
        o.record_event(stream, stream);
        o.destroy_stream(stream);
    }
    assert!(
        o.remembered_streams() <= 2 * SWEEP_FLOOR,
        "{} streams remembered",
        o.remembered_streams()
    );
    // The last one still orders later work until the host sees it.
    let read = o.next(1);
    assert!(o.check_device("kernel", read, ptr, &WHOLE, false).is_err());
}

#[test]
fn a_long_copy_in_flight_is_found_from_bytes_far_past_its_start() {
    let mut o = Ordering::default();
    assert!(pinned(&mut o, 1, 0..1000, true));
    assert!(pinned(&mut o, 2, 2000..2010, false));
    assert!(o.check_host_access(&(990..995), false).is_err());
    assert!(o.check_host_access(&(1000..1990), true).is_ok());
    assert!(
        !pinned(&mut o, 3, 999..1001, false),
        "an upload of bytes it writes"
    );
    assert!(o.forget_pinned(&(500..501)));
    assert!(o.check_host_access(&(0..1000), true).is_ok(), "forgotten");
    assert!(o.check_host_access(&(2005..2006), true).is_err());
}

#[test]
fn a_long_lived_streams_allocations_follow_the_live_ones() {
    let mut o = Ordering::default();
    for address in 1..=1000u64 {
        let ptr = DevicePtr(address * 256);
        let at = o.next(1);
        o.allocated(at, ptr, 64);
        write(&mut o, 1, ptr).unwrap();
        o.forget_device(ptr);
    }
    let touched = o.touched.get(&1).map_or(0, |t| t.allocations.len());
    assert!(
        touched <= 2 * PRUNE_FLOOR,
        "{touched} allocations remembered"
    );
}

#[test]
fn bytes_given_backwards_overlap_nothing_and_do_not_panic() {
    let mut o = Ordering::default();
    assert!(pinned(&mut o, 1, 100..200, true));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 500..50;
    assert!(o.check_host_access(&backwards, true).is_ok());
    assert!(!o.forget_pinned(&backwards));
}
