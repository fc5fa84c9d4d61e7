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

use std::collections::BTreeMap;
use std::ops::Range;

use rustc_hash::{FxHashMap, FxHashSet};

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
        self.merge_noting(other, |_| {});
    }

    /// Merges `other`, telling `advanced` each stream it knows more of.
    fn merge_noting(&mut self, other: &VectorClock, mut advanced: impl FnMut(u64)) {
        for (&stream, &position) in &other.0 {
            let known = self.0.entry(stream).or_insert(0);
            if position > *known {
                *known = position;
                advanced(stream);
            }
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
    /// Its place among all uses, in the order they were queued.
    sequence: u64,
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
    /// Page-locked uses in flight, by stream, in the order queued: the host
    /// learning of one stream's work looks at that stream's alone.
    pinned: FxHashMap<u64, Vec<PinnedUse>>,
    /// The stream of each use in flight, by its first byte and sequence:
    /// a query for some bytes reads only the uses that start at most
    /// `longest_use` bytes before them.
    pinned_by_start: BTreeMap<(u64, u64), u64>,
    /// The longest use since none was in flight.
    longest_use: u64,
    /// The sequence number of the next page-locked use.
    next_use: u64,
    /// How many retiring streams make a sweep for those no access names
    /// (twice as many as the last sweep left): a sweep reads every
    /// remembered access, so each costs as much as the retiring it waited for.
    sweep_at: usize,
}

/// The fewest retiring streams that make a sweep.
const SWEEP_FLOOR: usize = 16;

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
        let named_retiring = self.device.remove(&ptr.0).is_some_and(|accesses| {
            accesses
                .streams()
                .any(|stream| self.retiring.contains_key(&stream))
        });
        if named_retiring {
            self.retire_unreferenced();
        }
    }

    /// The page-locked uses in flight that overlap `bytes`.
    fn pinned_overlapping<'a>(
        &'a self,
        bytes: &'a Range<u64>,
    ) -> impl Iterator<Item = &'a PinnedUse> + 'a {
        let from = bytes.start.saturating_sub(self.longest_use);
        self.pinned_by_start
            .range((from, 0)..(bytes.end, 0))
            .filter_map(|(&(_, sequence), stream)| {
                let uses = self.pinned.get(stream)?;
                let index = uses.binary_search_by_key(&sequence, |u| u.sequence).ok()?;
                uses.get(index)
            })
            .filter(|used| overlap(&used.bytes, bytes))
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
        let conflict = self
            .pinned_overlapping(bytes)
            .filter(|used| (used.landing.is_some() || writes_host) && !self.ordered(at, used.at))
            .min_by_key(|used| used.sequence);
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
        let sequence = self.next_use;
        self.next_use = self.next_use.saturating_add(1);
        self.longest_use = self.longest_use.max(bytes.end.saturating_sub(bytes.start));
        self.pinned_by_start
            .insert((bytes.start, sequence), at.stream);
        self.pinned.entry(at.stream).or_default().push(PinnedUse {
            sequence,
            bytes,
            at,
            landing,
        });
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
            .pinned_overlapping(bytes)
            .filter(|used| writes || used.landing.is_some())
            .min_by_key(|used| used.sequence);
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
        let freed: Vec<(u64, u64, u64)> = self
            .pinned_overlapping(bytes)
            .map(|used| (used.bytes.start, used.sequence, used.at.stream))
            .collect();
        let forgot = !freed.is_empty();
        for (start, sequence, stream) in freed {
            self.pinned_by_start.remove(&(start, sequence));
            if let Some(uses) = self.pinned.get_mut(&stream) {
                uses.retain(|used| used.sequence != sequence);
                if uses.is_empty() {
                    self.pinned.remove(&stream);
                }
            }
        }
        self.forget_longest_when_idle();
        if forgot {
            self.retire_unreferenced();
        }
        forgot
    }

    /// Drops the page-locked uses on the `advanced` streams that the host
    /// now knows are done; the data of the downloads among them, to land in
    /// host memory in the order they were queued.
    fn retire_pinned(&mut self, advanced: &[u64]) -> Vec<Landing> {
        let mut landed = Vec::new();
        for &stream in advanced {
            let Some(uses) = self.pinned.get_mut(&stream) else {
                continue;
            };
            // A stream's uses are in position order: the done ones lead.
            let done = uses
                .iter()
                .take_while(|used| self.host.covers(stream, used.at.position))
                .count();
            let by_start = &mut self.pinned_by_start;
            landed.extend(uses.drain(..done).filter_map(|used| {
                by_start.remove(&(used.bytes.start, used.sequence));
                let data = used.landing?;
                Some((
                    used.sequence,
                    Landing {
                        address: used.bytes.start,
                        data,
                    },
                ))
            }));
            if uses.is_empty() {
                self.pinned.remove(&stream);
            }
        }
        self.forget_longest_when_idle();
        landed.sort_unstable_by_key(|&(sequence, _)| sequence);
        landed.into_iter().map(|(_, landing)| landing).collect()
    }

    /// With no use in flight, the next ones set the bound on their length.
    fn forget_longest_when_idle(&mut self) {
        if self.pinned_by_start.is_empty() {
            self.longest_use = 0;
        }
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
        let mut advanced = Vec::new();
        if let Some(state) = self.streams.get(&stream) {
            self.host
                .merge_noting(&state.clock, |stream| advanced.push(stream));
        }
        self.host_learned(&advanced)
    }

    /// The host knows the work before `event` is done; the downloads it now
    /// sees done, to land.
    pub(super) fn host_waits_for_event(&mut self, event: u64) -> Vec<Landing> {
        let mut advanced = Vec::new();
        if let Some(clock) = self.events.get(&event) {
            self.host
                .merge_noting(clock, |stream| advanced.push(stream));
        }
        self.host_learned(&advanced)
    }

    /// What follows the host learning more of the `advanced` streams (and
    /// of no other): their page-locked uses now done retire, and so do
    /// those of them that are destroyed with all their work seen done.
    fn host_learned(&mut self, advanced: &[u64]) -> Vec<Landing> {
        let landings = self.retire_pinned(advanced);
        for &stream in advanced {
            if self
                .retiring
                .get(&stream)
                .is_some_and(|&last| self.host.covers(stream, last))
            {
                self.retire(stream);
            }
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
            if self.retiring.len() >= self.sweep_at.max(SWEEP_FLOOR) {
                self.retire_unreferenced();
            }
        }
    }

    /// Retires the destroyed streams that no remembered access names any
    /// more, in one pass over the accesses.
    fn retire_unreferenced(&mut self) {
        if !self.retiring.is_empty() {
            let retiring = &self.retiring;
            let named: FxHashSet<u64> = self
                .device
                .values()
                .flat_map(Accesses::streams)
                .chain(self.pinned.keys().copied())
                .filter(|stream| retiring.contains_key(stream))
                .collect();
            let unreferenced: Vec<u64> = retiring
                .keys()
                .copied()
                .filter(|stream| !named.contains(stream))
                .collect();
            for stream in unreferenced {
                self.retire(stream);
            }
        }
        self.sweep_at = self.retiring.len().saturating_mul(2);
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
mod tests;
