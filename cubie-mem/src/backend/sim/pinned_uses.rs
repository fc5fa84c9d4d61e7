//! The copies of page-locked host bytes that the host has not seen done,
//! kept by stream and by byte range, so that a check reads only nearby ranges.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use rustc_hash::FxHashMap;

use super::stamp::{Landing, Stamp};

/// A copy from or into page-locked bytes not yet known done by the host.
pub(super) struct PinnedUse {
    /// Its place among all uses, in the order they were queued.
    pub(super) sequence: u64,
    pub(super) bytes: Range<u64>,
    pub(super) at: Stamp,
    /// A download: it writes the host bytes, with this data, once seen done.
    pub(super) landing: Option<Vec<u8>>,
}

impl PinnedUse {
    /// What the copy is doing to the bytes, for an error.
    pub(super) fn doing(&self) -> &'static str {
        if self.landing.is_some() {
            "still being written by a copy from the device"
        } else {
            "still being read by a copy to the device"
        }
    }

    fn kind(&self) -> usize {
        if self.landing.is_some() {
            DOWNLOADS
        } else {
            UPLOADS
        }
    }
}

/// The uses of one byte range, as (sequence, stream): in queue order.
type RangeUses = BTreeSet<(u64, u64)>;

/// The index of `by_range` for copies that read the host bytes.
const UPLOADS: usize = 0;
/// The index of `by_range` for copies that write them.
const DOWNLOADS: usize = 1;

/// Every page-locked use in flight.
#[derive(Default)]
pub(super) struct PinnedUses {
    by_stream: FxHashMap<u64, Vec<PinnedUse>>,
    /// Uploads and downloads, each by (first byte, end).
    by_range: [BTreeMap<(u64, u64), RangeUses>; 2],
    /// The longest use since none was in flight.
    longest: u64,
    next_sequence: u64,
}

impl PinnedUses {
    /// Records a copy by `at` from or into `bytes`.
    pub(super) fn push(&mut self, at: Stamp, bytes: Range<u64>, landing: Option<Vec<u8>>) {
        let sequence = self.next_sequence;
        self.next_sequence = self.next_sequence.saturating_add(1);
        self.longest = self.longest.max(bytes.end.saturating_sub(bytes.start));
        let used = PinnedUse {
            sequence,
            bytes,
            at,
            landing,
        };
        self.by_range[used.kind()]
            .entry((used.bytes.start, used.bytes.end))
            .or_default()
            .insert((sequence, at.stream));
        self.by_stream.entry(at.stream).or_default().push(used);
    }

    /// The uses overlapping `bytes` (only the downloads, or all).
    pub(super) fn overlapping<'a>(
        &'a self,
        bytes: &'a Range<u64>,
        downloads_only: bool,
    ) -> impl Iterator<Item = &'a PinnedUse> + 'a {
        self.ranges_overlapping(bytes, downloads_only)
            .flat_map(|uses| uses.iter())
            .filter_map(|&(sequence, stream)| self.find(stream, sequence))
    }

    /// The earliest queued use overlapping `bytes`.
    pub(super) fn first_overlapping(
        &self,
        bytes: &Range<u64>,
        downloads_only: bool,
    ) -> Option<&PinnedUse> {
        let &(sequence, stream) = self
            .ranges_overlapping(bytes, downloads_only)
            .filter_map(|uses| uses.first())
            .min()?;
        self.find(stream, sequence)
    }

    /// Removes the uses overlapping `bytes`; whether there were any.
    pub(super) fn forget(&mut self, bytes: &Range<u64>) -> bool {
        let freed: Vec<(u64, u64)> = self
            .overlapping(bytes, false)
            .map(|used| (used.at.stream, used.sequence))
            .collect();
        for &(stream, sequence) in &freed {
            let Some(uses) = self.by_stream.get_mut(&stream) else {
                continue;
            };
            if let Ok(index) = uses.binary_search_by_key(&sequence, |used| used.sequence) {
                let used = uses.remove(index);
                unindex(&mut self.by_range, &used);
            }
            if uses.is_empty() {
                self.by_stream.remove(&stream);
            }
        }
        self.reset_longest_when_idle();
        !freed.is_empty()
    }

    /// Removes the uses of `stream` the host has seen done; the downloads
    /// among them go to `landed`.
    pub(super) fn retire_done(
        &mut self,
        stream: u64,
        done: impl Fn(u64) -> bool,
        landed: &mut Vec<(u64, Landing)>,
    ) {
        let Some(uses) = self.by_stream.get_mut(&stream) else {
            return;
        };
        let count = uses
            .iter()
            .take_while(|used| done(used.at.position))
            .count();
        for used in uses.drain(..count) {
            unindex(&mut self.by_range, &used);
            if let Some(data) = used.landing {
                let address = used.bytes.start;
                landed.push((used.sequence, Landing { address, data }));
            }
        }
        if uses.is_empty() {
            self.by_stream.remove(&stream);
        }
        self.reset_longest_when_idle();
    }

    /// The streams with a use in flight.
    pub(super) fn streams(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_stream.keys().copied()
    }

    fn ranges_overlapping<'a>(
        &'a self,
        bytes: &'a Range<u64>,
        downloads_only: bool,
    ) -> impl Iterator<Item = &'a RangeUses> + 'a {
        let kinds = if downloads_only {
            &self.by_range[DOWNLOADS..]
        } else {
            &self.by_range[..]
        };
        // Never past `bytes.end`: a range of BTreeMap must not end before
        // it starts, even for bytes given backwards.
        let from = bytes.start.saturating_sub(self.longest).min(bytes.end);
        kinds
            .iter()
            .flat_map(move |ranges| ranges.range((from, 0)..(bytes.end, 0)))
            .filter(move |&(&(start, end), _)| start < bytes.end && bytes.start < end)
            .map(|(_, uses)| uses)
    }

    fn find(&self, stream: u64, sequence: u64) -> Option<&PinnedUse> {
        let uses = self.by_stream.get(&stream)?;
        let index = uses
            .binary_search_by_key(&sequence, |used| used.sequence)
            .ok()?;
        uses.get(index)
    }

    /// With no use in flight, the next ones set the bound on their length.
    fn reset_longest_when_idle(&mut self) {
        if self.by_stream.is_empty() {
            self.longest = 0;
        }
    }
}

/// Takes `used` out of the index by byte range.
fn unindex(by_range: &mut [BTreeMap<(u64, u64), RangeUses>; 2], used: &PinnedUse) {
    let ranges = &mut by_range[used.kind()];
    let key = (used.bytes.start, used.bytes.end);
    if let Some(uses) = ranges.get_mut(&key) {
        uses.remove(&(used.sequence, used.at.stream));
        if uses.is_empty() {
            ranges.remove(&key);
        }
    }
}
