//! Who last wrote each byte range of one device allocation, and who read it
//! since: what a stream hazard is judged against, per byte range, so that
//! streams working on disjoint parts of one buffer never conflict.

use std::ops::Range;

use super::stamp::Stamp;

/// The history of one byte range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) range: Range<u64>,
    /// The last write.
    pub(super) write: Stamp,
    /// What it was ("allocated", "written by a copy", ...).
    pub(super) what: &'static str,
    /// The latest read on each stream since the write, sorted by stream.
    pub(super) reads: Vec<Stamp>,
}

/// The accesses of one allocation, by byte range.
#[derive(Clone, Debug)]
pub(super) struct Accesses(Vec<Segment>);

impl Accesses {
    /// An allocation of `len` bytes made at `at`.
    pub(super) fn allocated(at: Stamp, len: u64) -> Self {
        Accesses(vec![Segment {
            range: 0..len.max(1),
            write: at,
            what: "allocated",
            reads: Vec::new(),
        }])
    }

    /// The segments overlapping `range`.
    pub(super) fn overlapping(&self, range: &Range<u64>) -> impl Iterator<Item = &Segment> {
        let first = self.0.partition_point(|s| s.range.end <= range.start);
        self.0[first..]
            .iter()
            .take_while(move |s| s.range.start < range.end)
    }

    /// Makes `at` a boundary between two segments (when it lies inside one).
    fn split_at(&mut self, at: u64) {
        let index = self.0.partition_point(|s| s.range.end <= at);
        let Some(segment) = self.0.get_mut(index) else {
            return;
        };
        if segment.range.start < at && at < segment.range.end {
            let mut right = segment.clone();
            right.range.start = at;
            segment.range.end = at;
            self.0.insert(index + 1, right);
        }
    }

    /// The indices of the segments inside `range`, after splitting at its ends.
    fn isolate(&mut self, range: &Range<u64>) -> Range<usize> {
        self.split_at(range.start);
        self.split_at(range.end);
        let first = self.0.partition_point(|s| s.range.end <= range.start);
        let last = self.0.partition_point(|s| s.range.start < range.end);
        first..last.max(first)
    }

    /// `at` wrote `range` (`what`): its earlier history is gone.
    pub(super) fn write(&mut self, at: Stamp, range: Range<u64>, what: &'static str) {
        if range.is_empty() {
            return;
        }
        let inside = self.isolate(&range);
        if inside.is_empty() {
            return;
        }
        let start = self.0[inside.start].range.start;
        let end = self.0[inside.end - 1].range.end;
        self.0.splice(
            inside.clone(),
            [Segment {
                range: start..end,
                write: at,
                what,
                reads: Vec::new(),
            }],
        );
        self.merge_all(inside.start..inside.start + 1);
    }

    /// `at` read `range`.
    pub(super) fn read(&mut self, at: Stamp, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let inside = self.isolate(&range);
        for segment in &mut self.0[inside.clone()] {
            match segment.reads.binary_search_by_key(&at.stream, |r| r.stream) {
                Ok(index) => {
                    let read = &mut segment.reads[index];
                    read.position = read.position.max(at.position);
                }
                Err(index) => segment.reads.insert(index, at),
            }
        }
        self.merge_all(inside);
    }

    /// Merges neighbours with the same history around the segments at `indices`.
    fn merge_all(&mut self, indices: Range<usize>) {
        let mut index = indices.start.saturating_sub(1);
        let mut last = indices.end;
        while index < last && index + 1 < self.0.len() {
            if self.merge_with_next(index) {
                last -= 1;
            } else {
                index += 1;
            }
        }
    }

    /// Merges segment `index` with the next when their histories agree.
    fn merge_with_next(&mut self, index: usize) -> bool {
        let same = match (self.0.get(index), self.0.get(index + 1)) {
            (Some(a), Some(b)) => a.write == b.write && a.what == b.what && a.reads == b.reads,
            _ => false,
        };
        if same {
            let next = self.0.remove(index + 1);
            self.0[index].range.end = next.range.end;
        }
        same
    }

    /// The streams its stamps lie on (a stream once per stamp).
    pub(super) fn streams(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().flat_map(|segment| {
            std::iter::once(segment.write.stream).chain(segment.reads.iter().map(|r| r.stream))
        })
    }

    /// Forgets `stream`, whose every operation the host has seen done.
    pub(super) fn retire(&mut self, stream: u64) {
        for segment in &mut self.0 {
            if segment.write.stream == stream {
                segment.write = Stamp::SEEN;
            }
            segment.reads.retain(|read| read.stream != stream);
        }
        self.merge_all(0..self.0.len());
    }

    /// The number of segments (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(stream: u64, position: u64) -> Stamp {
        Stamp { stream, position }
    }

    fn writes(a: &Accesses) -> Vec<(Range<u64>, u64)> {
        a.0.iter()
            .map(|s| (s.range.clone(), s.write.stream))
            .collect()
    }

    #[test]
    fn writes_split_and_replace_the_ranges_they_cover() {
        let mut a = Accesses::allocated(at(1, 1), 100);
        a.write(at(2, 1), 10..20, "written by a copy");
        a.write(at(3, 1), 50..100, "written by a kernel");
        assert_eq!(
            writes(&a),
            [(0..10, 1), (10..20, 2), (20..50, 1), (50..100, 3)]
        );
        a.write(at(2, 2), 0..100, "written by a copy");
        assert_eq!(writes(&a), [(0..100, 2)]);
    }

    #[test]
    fn reads_add_stamps_and_equal_neighbours_merge() {
        let mut a = Accesses::allocated(at(1, 1), 100);
        a.read(at(2, 5), 0..50);
        a.read(at(2, 5), 50..100);
        assert_eq!(a.len(), 1, "the same history on both halves merges");
        a.read(at(3, 1), 40..60);
        assert_eq!(a.len(), 3);
        let middle: Vec<_> = a.overlapping(&(45..46)).collect();
        assert_eq!(middle[0].reads, [at(2, 5), at(3, 1)]);
        a.retire(3);
        assert_eq!(a.len(), 1, "retiring stream 3 makes the ranges equal again");
        a.retire(1);
        assert_eq!(a.0[0].write, Stamp::SEEN);
        let streams: Vec<u64> = a.streams().collect();
        assert_eq!(streams, [Stamp::SEEN.stream, 2]);
    }

    #[test]
    fn overlapping_finds_exactly_the_touched_segments() {
        let mut a = Accesses::allocated(at(1, 1), 100);
        a.write(at(2, 1), 10..20, "w");
        let touched: Vec<_> = a.overlapping(&(15..25)).map(|s| s.range.clone()).collect();
        assert_eq!(touched, [10..20, 20..100]);
        assert_eq!(a.overlapping(&(0..10)).count(), 1);
        assert_eq!(a.overlapping(&(100..110)).count(), 0);
    }
}
