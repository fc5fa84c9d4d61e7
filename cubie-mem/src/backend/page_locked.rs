//! The host address ranges of a backend's live page-locked blocks, and of
//! the peers whose blocks it accepts.
//!
//! Each range keeps its block's base pointer
//! ([`PinnedBlock::base`](super::PinnedBlock::base)). A backend that writes
//! into a block after the queuing call returned goes through that pointer,
//! never through the address the copy was given. Until the host sees the
//! copy done, the bytes belong to the backend, so that write is the only access.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use super::BackendError;

/// A live block: where it ends, and the pointer it was allocated at.
#[derive(Clone, Copy)]
struct LiveBlock {
    end: u64,
    base: BlockPointer,
}

/// A block's base pointer, kept beside its range.
#[derive(Clone, Copy)]
struct BlockPointer(NonNull<u8>);

// SAFETY: the pointer is only dereferenced by a backend under the copy
// contract described in the module's docs (the bytes belong to the copy, so
// no other thread touches them); the value itself is just an address with
// its provenance.
unsafe impl Send for BlockPointer {}
// SAFETY: as for Send.
unsafe impl Sync for BlockPointer {}

/// Ranges by start.
type Ranges = Arc<Mutex<BTreeMap<u64, LiveBlock>>>;

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

/// The pointer to `start..end`, from the base of the range holding it.
fn pointer_in(ranges: &Ranges, start: u64, end: u64) -> Option<NonNull<u8>> {
    let ranges = lock(ranges);
    let (&block_start, block) = ranges.range(..=start).next_back()?;
    if end > block.end {
        return None;
    }
    let offset = usize::try_from(start - block_start).ok()?;
    // In bounds: `start..end` lies inside the block that starts at `base`.
    NonNull::new(block.base.0.as_ptr().wrapping_add(offset))
}

impl PageLockedRanges {
    /// Registers a live block of `len` bytes allocated at `base`.
    pub(crate) fn insert(&self, base: NonNull<u8>, len: usize) {
        let start = base.as_ptr().addr() as u64;
        let end = start.saturating_add(len as u64);
        if start < end {
            lock(&self.own).insert(
                start,
                LiveBlock {
                    end,
                    base: BlockPointer(base),
                },
            );
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
        if len == 0 {
            return Ok(());
        }
        self.pointer(operation, address, len).map(drop)
    }

    /// The `len` bytes at `address`, through the base pointer of the live
    /// block holding them; else [`BackendError::NotPageLocked`].
    pub(crate) fn pointer(
        &self,
        operation: &'static str,
        address: usize,
        len: usize,
    ) -> Result<NonNull<u8>, BackendError> {
        let start = address as u64;
        let end = start.saturating_add(len as u64);
        let peers = lock(&self.peers).clone();
        std::iter::once(&self.own)
            .chain(&peers)
            .find_map(|ranges| pointer_in(ranges, start, end))
            .ok_or(BackendError::NotPageLocked {
                operation,
                address: start,
                len,
            })
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

    /// A registered block of `len` bytes: its storage and its address.
    fn block(len: usize) -> (Vec<u8>, NonNull<u8>, usize) {
        let mut storage = vec![0u8; len];
        let base = NonNull::new(storage.as_mut_ptr()).unwrap();
        let address = base.as_ptr().addr();
        (storage, base, address)
    }

    #[test]
    fn a_peers_blocks_are_accepted_once_accepted_and_only_while_live() {
        let (a, b) = (PageLockedRanges::default(), PageLockedRanges::default());
        let (_b_storage, b_base, b_at) = block(1000);
        let (_a_storage, a_base, a_at) = block(1000);
        b.insert(b_base, 1000);
        a.insert(a_base, 1000);
        assert!(a.check("copy", a_at, 1000).is_ok());
        assert!(a.check("copy", b_at + 500, 10).is_err(), "not yet a peer");
        a.accept(b.share());
        a.accept(b.share());
        a.accept(a.share());
        assert_eq!(lock(&a.peers).len(), 1);
        assert!(a.check("copy", b_at + 500, 500).is_ok());
        assert!(
            a.check("copy", b_at + 500, 501).is_err(),
            "past the block's end"
        );
        assert!(b.check("copy", a_at, 1).is_err(), "acceptance is one way");
        b.remove(b_at as u64);
        assert!(
            a.check("copy", b_at + 500, 1).is_err(),
            "a freed block is refused"
        );
        assert!(a.check("copy", 0, 0).is_ok(), "nothing to copy");
        assert_eq!((a.len(), b.len()), (1, 0));
    }

    #[test]
    fn bytes_are_reached_through_their_blocks_pointer_at_their_offset() {
        let ranges = PageLockedRanges::default();
        let (mut storage, base, at) = block(64);
        ranges.insert(base, 64);
        let pointer = ranges.pointer("land", at + 10, 4).unwrap();
        // SAFETY: bytes 10..14 of the live block, which nothing else borrows.
        unsafe {
            pointer
                .as_ptr()
                .copy_from_nonoverlapping([1, 2, 3, 4].as_ptr(), 4)
        };
        assert_eq!(&storage[8..16], [0, 0, 1, 2, 3, 4, 0, 0]);
        storage[0] = 9;
        let error = ranges.pointer("land", at + 62, 4).unwrap_err();
        assert!(
            matches!(error, BackendError::NotPageLocked { operation: "land", len: 4, address } if address == at as u64 + 62),
            "{error}"
        );
    }
}
