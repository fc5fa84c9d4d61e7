//! What the simulated device knows to be ordered, so that it can report the
//! stream hazards a GPU would turn into wrong results.
//!
//! Every operation queued on a stream gets the next position on that stream.
//! Each stream, event and the host carry a vector clock: for every stream,
//! the last position known to be done before them. A stream learns of other
//! streams' work through the events it waits for, and of everything the host
//! has waited for (synchronise, event wait, a blocking copy, an event polled
//! complete) when it is given new work. An access to a byte range whose last
//! write (or, for page-locked blocks, a copy still in flight) is on another
//! stream and not covered by the accessing stream's clock is a hazard; so is
//! a write to bytes another stream read since their last write, unordered.
//!
//! Destroying a stream is not a wait: its work still runs, and what it
//! touched stays in use until the host has seen that work done. Once it has
//! (or nothing the stream did is remembered any more), the stream is retired
//! from every clock, so that the state follows the live streams and events,
//! not all that ever existed.

use std::ops::Range;

use rustc_hash::FxHashMap;

use super::ranges::Accesses;
use crate::backend::{BackendError, DevicePtr, HazardMemory};

/// Per stream, the last position known done.
#[derive(Clone, Debug, Default)]
pub(super) struct VectorClock(FxHashMap<u64, u64>);

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

    fn forget(&mut self, stream: u64) {
        self.0.remove(&stream);
    }
}

/// One operation, where it sits in its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) stream: u64,
    pub(super) position: u64,
}

impl Stamp {
    /// What everything is ordered after: work of a retired stream, which the
    /// host has seen done (stream numbers start at 1).
    pub(super) const SEEN: Stamp = Stamp {
        stream: 0,
        position: 0,
    };
}

/// Bytes a copy from the device writes into page-locked memory when the
/// host sees it done: the host address and the data.
pub(super) struct Landing {
    pub(super) address: u64,
    pub(super) data: Vec<u8>,
}

/// A copy from or into page-locked bytes not yet known done by the host.
struct PinnedUse {
    bytes: Range<u64>,
    at: Stamp,
    /// A download: it writes the host bytes, with this data, once seen done.
    landing: Option<Vec<u8>>,
}

/// A stream's position and what it knows.
#[derive(Default)]
struct StreamState {
    position: u64,
    clock: VectorClock,
}

/// The ordering state of the whole device.
#[derive(Default)]
pub(super) struct Ordering {
    streams: FxHashMap<u64, StreamState>,
    /// Destroyed streams whose last work the host has not seen, by their
    /// last position.
    retiring: FxHashMap<u64, u64>,
    events: FxHashMap<u64, VectorClock>,
    host: VectorClock,
    device: FxHashMap<u64, Accesses>,
    pinned: Vec<PinnedUse>,
}

impl Ordering {
    /// A new position on `stream`, ordered after everything the host waited for.
    pub(super) fn next(&mut self, stream: u64) -> Stamp {
        let state = self.streams.entry(stream).or_default();
        state.clock.merge(&self.host);
        state.position += 1;
        state.clock.0.insert(stream, state.position);
        Stamp {
            stream,
            position: state.position,
        }
    }

    fn clock(&self, stream: u64) -> Option<&VectorClock> {
        self.streams.get(&stream).map(|state| &state.clock)
    }

    fn ordered(&self, later: Stamp, earlier: Stamp) -> bool {
        earlier.stream == later.stream
            || earlier == Stamp::SEEN
            || self
                .clock(later.stream)
                .is_some_and(|clock| clock.covers(earlier.stream, earlier.position))
    }

    /// Records a new allocation of `len` bytes at `ptr`, made by `at`.
    pub(super) fn allocated(&mut self, at: Stamp, ptr: DevicePtr, len: u64) {
        self.device.insert(ptr.0, Accesses::allocated(at, len));
    }

    /// Checks an access by `at` to `range` of the allocation at `ptr` against
    /// the last writes of those bytes and, for a write, the reads since.
    pub(super) fn check_device(
        &self,
        operation: &'static str,
        at: Stamp,
        ptr: DevicePtr,
        range: &Range<u64>,
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
        for segment in accesses.overlapping(range) {
            if !self.ordered(at, segment.write) {
                return Err(hazard(segment.write, segment.what));
            }
            if writes && let Some(read) = segment.reads.iter().find(|r| !self.ordered(at, **r)) {
                return Err(hazard(*read, "read by earlier work"));
            }
        }
        Ok(())
    }

    /// Records that `at` wrote `range` of the allocation at `ptr` (`what`:
    /// "written by a copy", ...).
    pub(super) fn wrote_device(
        &mut self,
        at: Stamp,
        ptr: DevicePtr,
        range: Range<u64>,
        what: &'static str,
    ) {
        if let Some(accesses) = self.device.get_mut(&ptr.0) {
            accesses.write(at, range, what);
        }
    }

    /// Records that `at` read `range` of the allocation at `ptr`.
    pub(super) fn read_device(&mut self, at: Stamp, ptr: DevicePtr, range: Range<u64>) {
        if let Some(accesses) = self.device.get_mut(&ptr.0) {
            accesses.read(at, range);
        }
    }

    /// Forgets a freed allocation.
    pub(super) fn forget_device(&mut self, ptr: DevicePtr) {
        self.device.remove(&ptr.0);
        self.retire_unreferenced();
    }

    /// Checks an asynchronous copy by `at` from (`writes_host` false) or into
    /// the page-locked bytes `bytes` against the copies still in flight.
    pub(super) fn check_pinned(
        &self,
        operation: &'static str,
        at: Stamp,
        bytes: &Range<u64>,
        writes_host: bool,
    ) -> Result<(), BackendError> {
        let conflict = self.pinned.iter().find(|used| {
            overlap(&used.bytes, bytes)
                && (used.landing.is_some() || writes_host)
                && !self.ordered(at, used.at)
        });
        match conflict {
            Some(used) => Err(BackendError::StreamHazard {
                operation,
                accessed_on: at.stream,
                memory: HazardMemory::PageLocked(bytes.start.max(used.bytes.start)),
                earlier: in_flight(used),
                earlier_on: used.at.stream,
            }),
            None => Ok(()),
        }
    }

    /// Records an asynchronous copy by `at` from or into `bytes`; a copy into
    /// them (`landing`) writes its data when the host sees it done.
    pub(super) fn used_pinned(&mut self, at: Stamp, bytes: Range<u64>, landing: Option<Vec<u8>>) {
        self.pinned.push(PinnedUse { bytes, at, landing });
    }

    /// Checks that the host may read (or, `writes`, write) the page-locked
    /// `bytes` now: no copy it has not seen done writes them (or touches
    /// them at all).
    pub(super) fn check_host_access(
        &self,
        bytes: &Range<u64>,
        writes: bool,
    ) -> Result<(), BackendError> {
        let conflict = self
            .pinned
            .iter()
            .find(|used| overlap(&used.bytes, bytes) && (writes || used.landing.is_some()));
        match conflict {
            Some(used) => Err(BackendError::HostAccessInFlight {
                access: if writes { "write" } else { "read" },
                address: bytes.start.max(used.bytes.start),
                copy: in_flight(used),
                stream: used.at.stream,
            }),
            None => Ok(()),
        }
    }

    /// Forgets the copies from or into `bytes` (a page-locked block freed);
    /// whether any was still in flight.
    pub(super) fn forget_pinned(&mut self, bytes: &Range<u64>) -> bool {
        let before = self.pinned.len();
        self.pinned.retain(|used| !overlap(&used.bytes, bytes));
        let forgot = self.pinned.len() != before;
        if forgot {
            self.retire_unreferenced();
        }
        forgot
    }

    /// Drops the page-locked uses the host knows are done; the data of the
    /// downloads among them, to land in host memory.
    fn retire_pinned(&mut self) -> Vec<Landing> {
        let mut landings = Vec::new();
        let host = &self.host;
        self.pinned.retain_mut(|used| {
            let done = host.covers(used.at.stream, used.at.position);
            if done && let Some(data) = used.landing.take() {
                landings.push(Landing {
                    address: used.bytes.start,
                    data,
                });
            }
            !done
        });
        landings
    }

    /// Records event `event` after the work queued so far on `stream`.
    pub(super) fn record_event(&mut self, event: u64, stream: u64) {
        let clock = self.clock(stream).cloned().unwrap_or_default();
        self.events.insert(event, clock);
    }

    /// Later work on `stream` is ordered after `event`.
    pub(super) fn wait_event(&mut self, stream: u64, event: u64) {
        if let Some(clock) = self.events.get(&event) {
            self.streams.entry(stream).or_default().clock.merge(clock);
        }
    }

    /// The host waited for everything queued on `stream`; the downloads it
    /// now sees done, to land.
    pub(super) fn host_waits_for_stream(&mut self, stream: u64) -> Vec<Landing> {
        if let Some(state) = self.streams.get(&stream) {
            self.host.merge(&state.clock);
        }
        self.host_learned()
    }

    /// The host knows the work before `event` is done; the downloads it now
    /// sees done, to land.
    pub(super) fn host_waits_for_event(&mut self, event: u64) -> Vec<Landing> {
        if let Some(clock) = self.events.get(&event) {
            self.host.merge(clock);
        }
        self.host_learned()
    }

    fn host_learned(&mut self) -> Vec<Landing> {
        let landings = self.retire_pinned();
        let seen: Vec<u64> = self
            .retiring
            .iter()
            .filter(|&(&stream, &last)| self.host.covers(stream, last))
            .map(|(&stream, _)| stream)
            .collect();
        for stream in seen {
            self.retire(stream);
        }
        landings
    }

    pub(super) fn forget_event(&mut self, event: u64) {
        self.events.remove(&event);
    }

    /// A destroyed stream: no new work comes, its queued work still runs.
    pub(super) fn destroy_stream(&mut self, stream: u64) {
        let Some(state) = self.streams.remove(&stream) else {
            return;
        };
        if state.position == 0 || self.host.covers(stream, state.position) {
            self.retire(stream);
        } else {
            self.retiring.insert(stream, state.position);
            self.retire_unreferenced();
        }
    }

    /// Retires the destroyed streams that no remembered access names any more.
    fn retire_unreferenced(&mut self) {
        if self.retiring.is_empty() {
            return;
        }
        let unreferenced: Vec<u64> = self
            .retiring
            .keys()
            .copied()
            .filter(|&stream| {
                !self.device.values().any(|a| a.mentions(stream))
                    && !self.pinned.iter().any(|used| used.at.stream == stream)
            })
            .collect();
        for stream in unreferenced {
            self.retire(stream);
        }
    }

    /// Forgets a destroyed stream everywhere: the host has seen its work done
    /// (its writes are then ordered before everything), or nothing it did is
    /// remembered.
    fn retire(&mut self, stream: u64) {
        self.retiring.remove(&stream);
        self.host.forget(stream);
        for state in self.streams.values_mut() {
            state.clock.forget(stream);
        }
        for clock in self.events.values_mut() {
            clock.forget(stream);
        }
        for accesses in self.device.values_mut() {
            accesses.retire(stream);
        }
    }

    /// The number of streams, live or retiring, any clock may name (for tests).
    #[cfg(test)]
    pub(super) fn remembered_streams(&self) -> usize {
        self.streams.len() + self.retiring.len()
    }
}

fn overlap(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// What a page-locked use still in flight is doing.
fn in_flight(used: &PinnedUse) -> &'static str {
    if used.landing.is_some() {
        "still being written by a copy from the device"
    } else {
        "still being read by a copy to the device"
    }
}

#[cfg(test)]
mod tests {
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
}
