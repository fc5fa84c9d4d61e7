//! The host address ranges of a backend's live page-locked blocks, and of
//! the backends whose blocks it accepts too: the devices of one set, whose
//! page-locked allocations are portable (`CU_MEMHOSTALLOC_PORTABLE`), so
//! that one host array serves every device's asynchronous copies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::BackendError;

/// Ranges by start: start to end.
type Ranges = Arc<Mutex<BTreeMap<u64, u64>>>;

/// A backend's page-locked ranges, and its peers'.
#[derive(Default)]
pub(crate) struct PageLockedRanges {
    own: Ranges,
    /// The ranges of the backends whose blocks this one accepts.
    peers: Mutex<Vec<Ranges>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every value is consistent after each statement.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `ranges` hold `start..end` inside one range.
fn holds(ranges: &Ranges, start: u64, end: u64) -> bool {
    matches!(lock(ranges).range(..=start).next_back(), Some((_, &block_end)) if end <= block_end)
}

impl PageLockedRanges {
    /// Registers a live block.
    pub(crate) fn insert(&self, start: u64, end: u64) {
        if start < end {
            lock(&self.own).insert(start, end);
        }
    }

    /// Unregisters the block starting at `start`.
    pub(crate) fn remove(&self, start: u64) {
        lock(&self.own).remove(&start);
    }

    /// The number of live blocks of this backend.
    pub(crate) fn len(&self) -> usize {
        lock(&self.own).len()
    }

    /// Checks that `len` bytes at `address` lie inside one live block of
    /// this backend or of a peer; else [`BackendError::NotPageLocked`].
    pub(crate) fn check(
        &self,
        operation: &'static str,
        address: usize,
        len: usize,
    ) -> Result<(), BackendError> {
        let start = address as u64;
        let end = start.saturating_add(len as u64);
        let peers = lock(&self.peers).clone();
        if len == 0
            || holds(&self.own, start, end)
            || peers.iter().any(|ranges| holds(ranges, start, end))
        {
            Ok(())
        } else {
            Err(BackendError::NotPageLocked {
                operation,
                address: start,
                len,
            })
        }
    }

    /// A handle to this backend's own ranges, for a peer to accept.
    pub(crate) fn share(&self) -> PeerRanges {
        PeerRanges(Arc::clone(&self.own))
    }

    /// Accepts `peer`'s blocks from now on (once, however often asked).
    pub(crate) fn accept(&self, peer: PeerRanges) {
        if Arc::ptr_eq(&self.own, &peer.0) {
            return;
        }
        let mut peers = lock(&self.peers);
        if !peers.iter().any(|known| Arc::ptr_eq(known, &peer.0)) {
            peers.push(peer.0);
        }
    }
}

/// Another backend's page-locked ranges, handed over to be accepted.
pub(crate) struct PeerRanges(Ranges);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_blocks_are_accepted_once_accepted_and_only_while_live() {
        let (a, b) = (PageLockedRanges::default(), PageLockedRanges::default());
        b.insert(1000, 2000);
        a.insert(5000, 6000);
        assert!(a.check("copy", 5000, 1000).is_ok());
        assert!(a.check("copy", 1500, 10).is_err(), "not yet a peer");
        a.accept(b.share());
        a.accept(b.share());
        a.accept(a.share());
        assert_eq!(lock(&a.peers).len(), 1);
        assert!(a.check("copy", 1500, 500).is_ok());
        assert!(a.check("copy", 1500, 501).is_err(), "past the block's end");
        assert!(b.check("copy", 5000, 1).is_err(), "acceptance is one way");
        b.remove(1000);
        assert!(
            a.check("copy", 1500, 1).is_err(),
            "a freed block is refused"
        );
        assert!(a.check("copy", 0, 0).is_ok(), "nothing to copy");
        assert_eq!((a.len(), b.len()), (1, 0));
    }
}
