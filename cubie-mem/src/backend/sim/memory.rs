//! Simulated device memory, as strict as the GPU's: fresh memory, and memory
//! back from the pool, reads as [`POISON`] until written. A block records
//! which byte ranges were written.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::backend::{BackendError, PinnedBlock, byte_range};
use crate::block::HostBlock;

/// The byte unwritten device memory reads as.
pub(crate) const POISON: u8 = 0xFF;

/// The byte ranges written so far: sorted, disjoint and merged.
#[derive(Default)]
struct Written(Vec<Range<u64>>);

impl Written {
    fn mark(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let mut merged = range;
        self.0.retain(|r| {
            let touches = r.start <= merged.end && merged.start <= r.end;
            if touches {
                merged = merged.start.min(r.start)..merged.end.max(r.end);
            }
            !touches
        });
        let at = self.0.partition_point(|r| r.start < merged.start);
        self.0.insert(at, merged);
    }

    /// The parts of `range` never written.
    fn gaps(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        let mut at = range.start;
        for r in &self.0 {
            if r.end <= at {
                continue;
            }
            if r.start >= range.end {
                break;
            }
            if r.start > at {
                gaps.push(at..r.start);
            }
            at = at.max(r.end);
        }
        if at < range.end {
            gaps.push(at..range.end);
        }
        gaps
    }
}

/// The memory of one simulated device allocation.
pub(super) struct DeviceBlock {
    data: HostBlock,
    /// Bytes in use (a block reused from the pool may be larger).
    len: u64,
    written: Written,
}

impl DeviceBlock {
    /// A fresh block: every byte poison until written.
    pub(super) fn fresh(data: HostBlock) -> Self {
        let len = data.bytes().len() as u64;
        DeviceBlock {
            data,
            len,
            written: Written::default(),
        }
    }

    /// Bytes in use.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    fn capacity(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// Copies `src` in at `offset`.
    pub(super) fn write(
        &mut self,
        operation: &'static str,
        offset: u64,
        src: &[u8],
    ) -> Result<(), BackendError> {
        let range = byte_range(operation, offset, src.len(), self.len)?;
        if let Some(target) = self
            .data
            .bytes_mut()
            .get_mut(range.start as usize..range.end as usize)
        {
            target.copy_from_slice(src);
        }
        self.written.mark(range);
        Ok(())
    }

    /// Copies the bytes at `offset` into `dst`; bytes never written read as
    /// [`POISON`].
    pub(super) fn read(
        &self,
        operation: &'static str,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), BackendError> {
        let range = byte_range(operation, offset, dst.len(), self.len)?;
        if let Some(source) = self
            .data
            .bytes()
            .get(range.start as usize..range.end as usize)
        {
            dst.copy_from_slice(source);
        }
        for gap in self.written.gaps(range.clone()) {
            let start = (gap.start - range.start) as usize;
            let end = (gap.end - range.start) as usize;
            if let Some(poisoned) = dst.get_mut(start..end) {
                poisoned.fill(POISON);
            }
        }
        Ok(())
    }
}

impl DeviceBlock {
    /// The first never-written range of the first `len` bytes, and how many
    /// of them were never written; `None` when all were written.
    pub(super) fn unwritten(&self, len: u64) -> Option<(Range<u64>, u64)> {
        let gaps = self.written.gaps(0..len.min(self.len));
        let first = gaps.first()?.clone();
        let count = gaps
            .iter()
            .fold(0u64, |sum, gap| sum.saturating_add(gap.end - gap.start));
        Some((first, count))
    }

    /// The first `len` bytes, for a kernel to work on in place; bytes never
    /// written are filled with [`POISON`] first.
    pub(super) fn bytes_mut(&mut self, len: u64) -> &mut [u8] {
        let len = len.min(self.len);
        for gap in self.written.gaps(0..len) {
            if let Some(bytes) = self
                .data
                .bytes_mut()
                .get_mut(gap.start as usize..gap.end as usize)
            {
                bytes.fill(POISON);
            }
        }
        self.written.mark(0..len);
        self.data
            .bytes_mut()
            .get_mut(..len as usize)
            .unwrap_or(&mut [])
    }
}

/// Freed blocks kept for reuse, by (capacity, address).
#[derive(Default)]
pub(super) struct Pool {
    blocks: BTreeMap<(u64, u64), DeviceBlock>,
    bytes: u64,
}

impl Pool {
    /// Host bytes the pool holds.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keeps a freed block.
    pub(super) fn put(&mut self, address: u64, block: DeviceBlock) {
        self.bytes = self.bytes.saturating_add(block.capacity());
        self.blocks.insert((block.capacity(), address), block);
    }

    /// The smallest pooled block of at least `bytes`, as fresh memory.
    pub(super) fn take(&mut self, bytes: u64) -> Option<(u64, DeviceBlock)> {
        let key = *self.blocks.range((bytes, 0)..).next()?.0;
        let mut block = self.blocks.remove(&key)?;
        let address = key.1;
        self.bytes = self.bytes.saturating_sub(block.capacity());
        block.len = bytes;
        block.written = Written::default();
        Some((address, block))
    }

    /// Releases pooled blocks, largest first, until at most `keep` bytes remain.
    pub(super) fn trim(&mut self, keep: u64) {
        while self.bytes > keep {
            let Some((_, block)) = self.blocks.pop_last() else {
                return;
            };
            self.bytes = self.bytes.saturating_sub(block.capacity());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(len: usize) -> DeviceBlock {
        DeviceBlock::fresh(HostBlock::zeroed(len, "test").unwrap())
    }

    #[test]
    fn unwritten_bytes_read_as_poison() {
        let mut b = block(16);
        b.write("test", 4, &[1, 2]).unwrap();
        b.write("test", 10, &[3]).unwrap();
        let mut out = [0u8; 12];
        b.read("test", 2, &mut out).unwrap();
        assert_eq!(out, [255, 255, 1, 2, 255, 255, 255, 255, 3, 255, 255, 255]);
        let mut floats = [0u8; 8];
        block(8).read("test", 0, &mut floats).unwrap();
        assert!(f64::from_ne_bytes(floats).is_nan());
    }

    #[test]
    fn kernels_see_poison_where_nothing_was_written() {
        let mut b = block(8);
        b.write("test", 0, &[1, 2]).unwrap();
        assert_eq!(b.bytes_mut(4), [1, 2, 255, 255]);
        b.bytes_mut(8)[7] = 9;
        let mut out = [0u8; 8];
        b.read("test", 0, &mut out).unwrap();
        assert_eq!(out, [1, 2, 255, 255, 255, 255, 255, 9]);
    }

    #[test]
    fn unwritten_bytes_are_counted_from_the_first_gap() {
        let mut b = block(16);
        assert_eq!(b.unwritten(16), Some((0..16, 16)));
        b.write("test", 0, &[1; 4]).unwrap();
        b.write("test", 8, &[1; 2]).unwrap();
        assert_eq!(b.unwritten(16), Some((4..8, 10)), "4..8 and 10..16");
        assert_eq!(b.unwritten(4), None, "only the first 4 bytes asked");
        assert_eq!(
            b.unwritten(u64::MAX),
            Some((4..8, 10)),
            "clamped to the block"
        );
        b.bytes_mut(16);
        assert_eq!(b.unwritten(16), None, "a kernel's bytes count as written");
    }

    #[test]
    fn written_ranges_merge() {
        let mut w = Written::default();
        w.mark(10..20);
        w.mark(0..5);
        w.mark(5..10);
        w.mark(30..40);
        w.mark(15..32);
        assert_eq!(w.0, vec![(0..40)]);
        assert!(w.gaps(0..40).is_empty());
        assert_eq!(w.gaps(38..44), vec![(40..44)]);
    }

    #[test]
    fn pooled_blocks_come_back_fresh_and_best_fitting() {
        let mut pool = Pool::default();
        let mut big = block(100);
        big.write("test", 0, &[7; 100]).unwrap();
        pool.put(1000, big);
        pool.put(2000, block(40));
        assert_eq!(pool.bytes(), 140);
        let (address, reused) = pool.take(30).unwrap();
        assert_eq!((address, reused.len()), (2000, 30));
        let (address, reused) = pool.take(50).unwrap();
        assert_eq!((address, reused.len()), (1000, 50));
        let mut out = [0u8; 50];
        reused.read("test", 0, &mut out).unwrap();
        assert_eq!(out, [POISON; 50], "reused memory is fresh memory: poison");
        assert_eq!(pool.bytes(), 0);
        assert!(pool.take(1).is_none());
    }

    #[test]
    fn trimming_frees_the_largest_first() {
        let mut pool = Pool::default();
        pool.put(1, block(10));
        pool.put(2, block(30));
        pool.put(3, block(20));
        pool.trim(35);
        assert_eq!(pool.bytes(), 30);
        assert!(pool.take(21).is_none(), "the 30-byte block went");
        pool.trim(0);
        assert_eq!(pool.bytes(), 0);
    }
}
