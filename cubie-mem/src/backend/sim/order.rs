//! What the simulated device knows to be ordered, so that it can report the
//! stream hazards a GPU would turn into wrong results.
//!
//! Each stream, event and the host carry a vector clock: per stream, the
//! last position known done before them. An access to bytes last written on
//! another stream, not covered by the accessing stream's clock, is a hazard.
//! A destroyed stream is retired once the host has seen its work done.

use std::ops::Range;

use rustc_hash::{FxHashMap, FxHashSet};

use super::pinned_uses::PinnedUses;
use super::ranges::Accesses;
use super::stamp::{Landing, Stamp};
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
    /// Destroyed streams whose last work the host has not seen.
    retiring: FxHashMap<u64, u64>,
    events: FxHashMap<u64, VectorClock>,
    host: VectorClock,
    device: FxHashMap<u64, Accesses>,
    /// Per stream, the allocations whose accesses may name it.
    touched: FxHashMap<u64, Touched>,
    /// Page-locked uses in flight.
    pinned: PinnedUses,
    /// How many retiring streams make a sweep for those no access names.
    sweep_at: usize,
}

/// The fewest retiring streams that make a sweep.
const SWEEP_FLOOR: usize = 16;

/// The allocations a stream accessed, pruned to the live ones as they double.
#[derive(Default)]
struct Touched {
    allocations: FxHashSet<u64>,
    prune_at: usize,
}

/// The fewest allocations in a stream's list that make a pruning.
const PRUNE_FLOOR: usize = 64;

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
        self.touch(at.stream, ptr);
    }

    /// Notes that `stream` accessed the allocation at `ptr`.
    fn touch(&mut self, stream: u64, ptr: DevicePtr) {
        let touched = self.touched.entry(stream).or_default();
        if touched.allocations.insert(ptr.0)
            && touched.allocations.len() > touched.prune_at.max(PRUNE_FLOOR)
        {
            let device = &self.device;
            touched.allocations.retain(|ptr| device.contains_key(ptr));
            touched.prune_at = touched.allocations.len().saturating_mul(2);
        }
    }

    /// Checks an access by `at` to `range` of the allocation at `ptr`.
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

    /// Records that `at` wrote `range` of the allocation at `ptr`.
    pub(super) fn wrote_device(
        &mut self,
        at: Stamp,
        ptr: DevicePtr,
        range: Range<u64>,
        what: &'static str,
    ) {
        if let Some(accesses) = self.device.get_mut(&ptr.0) {
            accesses.write(at, range, what);
            self.touch(at.stream, ptr);
        }
    }

    /// Records that `at` read `range` of the allocation at `ptr`.
    pub(super) fn read_device(&mut self, at: Stamp, ptr: DevicePtr, range: Range<u64>) {
        if let Some(accesses) = self.device.get_mut(&ptr.0) {
            accesses.read(at, range);
            self.touch(at.stream, ptr);
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

    /// Checks an asynchronous copy by `at` of page-locked `bytes` against
    /// the copies in flight.
    pub(super) fn check_pinned(
        &self,
        operation: &'static str,
        at: Stamp,
        bytes: &Range<u64>,
        writes_host: bool,
    ) -> Result<(), BackendError> {
        let conflict = self
            .pinned
            .overlapping(bytes, !writes_host)
            .filter(|used| !self.ordered(at, used.at))
            .min_by_key(|used| used.sequence);
        match conflict {
            Some(used) => Err(BackendError::StreamHazard {
                operation,
                accessed_on: at.stream,
                memory: HazardMemory::PageLocked(bytes.start.max(used.bytes.start)),
                earlier: used.doing(),
                earlier_on: used.at.stream,
            }),
            None => Ok(()),
        }
    }

    /// Records an asynchronous copy by `at` from or into `bytes`; a copy into
    /// them (`landing`) writes its data when the host sees it done.
    pub(super) fn used_pinned(&mut self, at: Stamp, bytes: Range<u64>, landing: Option<Vec<u8>>) {
        self.pinned.push(at, bytes, landing);
    }

    /// Checks that the host may read (or write) the page-locked `bytes` now.
    pub(super) fn check_host_access(
        &self,
        bytes: &Range<u64>,
        writes: bool,
    ) -> Result<(), BackendError> {
        let conflict = self.pinned.first_overlapping(bytes, !writes);
        match conflict {
            Some(used) => Err(BackendError::HostAccessInFlight {
                access: if writes { "write" } else { "read" },
                address: bytes.start.max(used.bytes.start),
                copy: used.doing(),
                stream: used.at.stream,
            }),
            None => Ok(()),
        }
    }

    /// Forgets the copies of `bytes`; whether any was still in flight.
    pub(super) fn forget_pinned(&mut self, bytes: &Range<u64>) -> bool {
        let forgot = self.pinned.forget(bytes);
        if forgot {
            self.retire_unreferenced();
        }
        forgot
    }

    /// Drops the page-locked uses the host now knows are done; returns the
    /// downloads among them, to land.
    fn retire_pinned(&mut self, advanced: &[u64]) -> Vec<Landing> {
        let mut landed = Vec::new();
        for &stream in advanced {
            let host = &self.host;
            self.pinned.retire_done(
                stream,
                |position| host.covers(stream, position),
                &mut landed,
            );
        }
        landed.sort_unstable_by_key(|&(sequence, _)| sequence);
        landed.into_iter().map(|(_, landing)| landing).collect()
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

    /// What follows the host learning more of the `advanced` streams.
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

    /// Retires the destroyed streams that no remembered access names.
    fn retire_unreferenced(&mut self) {
        if !self.retiring.is_empty() {
            let retiring = &self.retiring;
            let named: FxHashSet<u64> = self
                .device
                .values()
                .flat_map(Accesses::streams)
                .chain(self.pinned.streams())
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

    /// Forgets a destroyed stream everywhere.
    fn retire(&mut self, stream: u64) {
        self.retiring.remove(&stream);
        self.host.forget(stream);
        for state in self.streams.values_mut() {
            state.clock.forget(stream);
        }
        for clock in self.events.values_mut() {
            clock.forget(stream);
        }
        for ptr in self.touched.remove(&stream).unwrap_or_default().allocations {
            if let Some(accesses) = self.device.get_mut(&ptr) {
                accesses.retire(stream);
            }
        }
    }

    /// The number of streams, live or retiring, any clock may name (for tests).
    #[cfg(test)]
    pub(super) fn remembered_streams(&self) -> usize {
        self.streams.len() + self.retiring.len()
    }
}

#[cfg(test)]
mod tests;
