//! What the simulated device knows to be ordered, so that it can report the
//! stream hazards a GPU would turn into wrong results.
//!
//! Every operation queued on a stream gets the next position on that stream.
//! Each stream, event and the host carry a vector clock: for every stream,
//! the last position known to be done before them. A stream learns of other
//! streams' work through the events it waits for, and of everything the host
//! has waited for (synchronise, event wait, a blocking copy, an event polled
//! complete) when it is given new work. An access to memory whose last write
//! (or, for page-locked blocks, a copy still in flight) is on another stream
//! and not covered by the accessing stream's clock is a hazard; so is a
//! write to memory another stream read since its last write, unordered.

use std::collections::HashMap;
use std::ops::Range;

use crate::backend::{BackendError, DevicePtr, HazardMemory};

/// Per stream, the last position known done.
#[derive(Clone, Debug, Default)]
pub(super) struct VectorClock(HashMap<u64, u64>);

impl VectorClock {
    fn covers(&self, stream: u64, position: u64) -> bool {
        self.0.get(&stream).is_some_and(|&known| known >= position)
    }

    fn merge(&mut self, other: &VectorClock) {
        for (&stream, &position) in &other.0 {
            let known = self.0.entry(stream).or_insert(0);
            *known = (*known).max(position);
        }
    }
}

/// One operation, where it sits in its stream.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stamp {
    stream: u64,
    position: u64,
}

/// The last write of a device allocation, and the reads since.
#[derive(Clone)]
struct Accesses {
    write: Stamp,
    what: &'static str,
    /// The latest read on each stream since the write.
    reads: Vec<Stamp>,
}

/// A copy from or into a page-locked block not yet known done by the host.
struct PinnedUse {
    bytes: Range<u64>,
    at: Stamp,
    writes_host: bool,
}

/// The ordering state of the whole device.
#[derive(Default)]
pub(super) struct Ordering {
    streams: HashMap<u64, (u64, VectorClock)>,
    events: HashMap<u64, VectorClock>,
    host: VectorClock,
    device: HashMap<u64, Accesses>,
    pinned: Vec<PinnedUse>,
}

impl Ordering {
    /// A new position on `stream`, ordered after everything the host waited for.
    pub(super) fn next(&mut self, stream: u64) -> Stamp {
        let (position, clock) = self.streams.entry(stream).or_default();
        clock.merge(&self.host);
        *position += 1;
        clock.0.insert(stream, *position);
        Stamp {
            stream,
            position: *position,
        }
    }

    fn clock(&self, stream: u64) -> Option<&VectorClock> {
        self.streams.get(&stream).map(|(_, clock)| clock)
    }

    fn ordered(&self, later: Stamp, earlier: Stamp) -> bool {
        earlier.stream == later.stream
            || self
                .clock(later.stream)
                .is_some_and(|clock| clock.covers(earlier.stream, earlier.position))
    }

    /// Checks an access by `at` to the allocation at `ptr` against its last
    /// write and, for a write, against the reads since.
    pub(super) fn check_device(
        &self,
        operation: &'static str,
        at: Stamp,
        ptr: DevicePtr,
        writes: bool,
    ) -> Result<(), BackendError> {
        let Some(accesses) = self.device.get(&ptr.0) else {
            return Ok(());
        };
        let hazard = |earlier: Stamp, what| BackendError::StreamHazard {
            operation,
            accessed_on: at.stream,
            memory: HazardMemory::Device(ptr),
            earlier: what,
            earlier_on: earlier.stream,
        };
        if !self.ordered(at, accesses.write) {
            return Err(hazard(accesses.write, accesses.what));
        }
        match accesses.reads.iter().find(|read| !self.ordered(at, **read)) {
            Some(read) if writes => Err(hazard(*read, "read by earlier work")),
            _ => Ok(()),
        }
    }

    /// Records that `at` wrote the allocation at `ptr` (`what`: "written by
    /// a copy", ...).
    pub(super) fn wrote_device(&mut self, at: Stamp, ptr: DevicePtr, what: &'static str) {
        self.device.insert(
            ptr.0,
            Accesses {
                write: at,
                what,
                reads: Vec::new(),
            },
        );
    }

    /// Records that `at` read the allocation at `ptr`.
    pub(super) fn read_device(&mut self, at: Stamp, ptr: DevicePtr) {
        if let Some(accesses) = self.device.get_mut(&ptr.0) {
            match accesses
                .reads
                .iter_mut()
                .find(|read| read.stream == at.stream)
            {
                Some(read) => read.position = read.position.max(at.position),
                None => accesses.reads.push(at),
            }
        }
    }

    /// Forgets a freed allocation.
    pub(super) fn forget_device(&mut self, ptr: DevicePtr) {
        self.device.remove(&ptr.0);
    }

    /// Checks an asynchronous copy by `at` from (`writes_host` false) or into
    /// the page-locked bytes `bytes` against the copies still in flight.
    pub(super) fn check_pinned(
        &mut self,
        operation: &'static str,
        at: Stamp,
        bytes: &Range<u64>,
        writes_host: bool,
    ) -> Result<(), BackendError> {
        self.retire_pinned();
        let conflict = self.pinned.iter().find(|used| {
            used.bytes.start < bytes.end
                && bytes.start < used.bytes.end
                && (used.writes_host || writes_host)
                && !self.ordered(at, used.at)
        });
        match conflict {
            Some(used) => Err(BackendError::StreamHazard {
                operation,
                accessed_on: at.stream,
                memory: HazardMemory::PageLocked(bytes.start.max(used.bytes.start)),
                earlier: if used.writes_host {
                    "still being written by a copy from the device"
                } else {
                    "still being read by a copy to the device"
                },
                earlier_on: used.at.stream,
            }),
            None => Ok(()),
        }
    }

    /// Records an asynchronous copy by `at` from or into `bytes`.
    pub(super) fn used_pinned(&mut self, at: Stamp, bytes: Range<u64>, writes_host: bool) {
        self.pinned.push(PinnedUse {
            bytes,
            at,
            writes_host,
        });
    }

    /// Drops the page-locked uses the host knows are done.
    fn retire_pinned(&mut self) {
        let host = &self.host;
        self.pinned
            .retain(|used| !host.covers(used.at.stream, used.at.position));
    }

    /// Records event `event` after the work queued so far on `stream`.
    pub(super) fn record_event(&mut self, event: u64, stream: u64) {
        let clock = self.clock(stream).cloned().unwrap_or_default();
        self.events.insert(event, clock);
    }

    /// Later work on `stream` is ordered after `event`.
    pub(super) fn wait_event(&mut self, stream: u64, event: u64) {
        if let Some(clock) = self.events.get(&event).cloned() {
            self.streams.entry(stream).or_default().1.merge(&clock);
        }
    }

    /// The host waited for everything queued on `stream`.
    pub(super) fn host_waits_for_stream(&mut self, stream: u64) {
        if let Some(clock) = self.clock(stream).cloned() {
            self.host.merge(&clock);
        }
        self.retire_pinned();
    }

    /// The host knows the work before `event` is done.
    pub(super) fn host_waits_for_event(&mut self, event: u64) {
        if let Some(clock) = self.events.get(&event).cloned() {
            self.host.merge(&clock);
        }
        self.retire_pinned();
    }

    pub(super) fn forget_event(&mut self, event: u64) {
        self.events.remove(&event);
    }

    /// Forgets a destroyed stream (stream numbers are never reused).
    pub(super) fn forget_stream(&mut self, stream: u64) {
        self.streams.remove(&stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(o: &mut Ordering, stream: u64, ptr: DevicePtr) -> Result<(), BackendError> {
        let at = o.next(stream);
        o.check_device("upload", at, ptr, true)?;
        o.wrote_device(at, ptr, "written by a copy");
        Ok(())
    }

    fn pinned(o: &mut Ordering, stream: u64, bytes: Range<u64>, writes: bool) -> bool {
        let at = o.next(stream);
        let ok = o.check_pinned("copy", at, &bytes, writes).is_ok();
        if ok {
            o.used_pinned(at, bytes, writes);
        }
        ok
    }

    #[test]
    fn a_write_on_one_stream_needs_an_event_before_another_stream_touches_it() {
        let mut o = Ordering::default();
        let ptr = DevicePtr(256);
        write(&mut o, 1, ptr).unwrap();
        let read = o.next(2);
        let error = o.check_device("kernel", read, ptr, false).unwrap_err();
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
        o.check_device("kernel", read, ptr, false).unwrap();
        o.read_device(read, ptr);
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
        write(&mut o, 1, ptr).unwrap();
        o.host_waits_for_stream(1);
        let read = o.next(3);
        o.check_device("kernel", read, ptr, false).unwrap();
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
}
