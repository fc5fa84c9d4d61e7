//! The page-locked host memory a manager's host arrays and staging buffers
//! hold, counted apart from device memory for the statistics and reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::PinnedBlock;

/// What a page-locked block is held for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinnedUse {
    /// A host array ([`HostArray`](crate::HostArray) in pinned memory).
    HostArray,
    /// A staging buffer of a staging pool made by the manager.
    Staging,
}

/// Bytes of page-locked host memory held now, by use. Shared by a manager
/// and every block it counts; a block gives its bytes back when dropped.
#[derive(Debug, Default)]
pub(crate) struct PinnedTally {
    host_arrays: AtomicU64,
    staging: AtomicU64,
}

impl PinnedTally {
    fn counter(&self, what: PinnedUse) -> &AtomicU64 {
        match what {
            PinnedUse::HostArray => &self.host_arrays,
            PinnedUse::Staging => &self.staging,
        }
    }

    /// Bytes held now for `what`.
    pub(crate) fn bytes(&self, what: PinnedUse) -> u64 {
        self.counter(what).load(Ordering::Relaxed)
    }

    /// `block`, counted under `what` until it is dropped.
    pub(crate) fn count(
        self: &Arc<Self>,
        block: Box<dyn PinnedBlock>,
        what: PinnedUse,
    ) -> Box<dyn PinnedBlock> {
        let bytes = u64::try_from(block.bytes().len()).unwrap_or(u64::MAX);
        let counter = self.counter(what);
        // Saturating: a figure that cannot be held is never wrapped.
        let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
            Some(held.saturating_add(bytes))
        });
        Box::new(Counted {
            block,
            bytes,
            what,
            tally: Arc::clone(self),
        })
    }
}

/// A page-locked block counted in a tally while it lives.
struct Counted {
    block: Box<dyn PinnedBlock>,
    bytes: u64,
    what: PinnedUse,
    tally: Arc<PinnedTally>,
}

// SAFETY: every method forwards to the counted block, which upholds the
// contract.
unsafe impl PinnedBlock for Counted {
    fn base(&self) -> std::ptr::NonNull<u8> {
        self.block.base()
    }

    fn bytes(&self) -> &[u8] {
        self.block.bytes()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self.block.bytes_mut()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let bytes = self.bytes;
        let _ = self.tally.counter(self.what).fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |held| Some(held.saturating_sub(bytes)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;
    use crate::backend::Backend;

    #[test]
    fn a_counted_block_is_held_until_dropped() {
        let sim = SimBackend::new(1 << 20);
        let tally = Arc::new(PinnedTally::default());
        let mut block = tally.count(sim.alloc_pinned(300).unwrap(), PinnedUse::Staging);
        assert_eq!(tally.bytes(PinnedUse::Staging), 300);
        assert_eq!(tally.bytes(PinnedUse::HostArray), 0);
        block.bytes_mut()[0] = 7;
        assert_eq!(block.bytes()[0], 7);
        assert!(sim.is_page_locked(block.bytes().as_ptr(), 300));
        drop(block);
        assert_eq!(tally.bytes(PinnedUse::Staging), 0);
    }
}
