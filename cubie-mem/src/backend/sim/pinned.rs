//! Page-locked blocks of the simulated device. The host's reads and writes
//! of them are checked against the copies in flight, as a GPU would punish
//! them; a conflict is reported by the device's next call.

use std::ops::Range;
use std::sync::{Arc, Mutex, Weak};

use super::SimState;
use crate::backend::{BackendError, PinnedBlock};
use crate::block::HostBlock;

/// A page-locked block of a simulated device.
pub(super) struct SimPinnedBlock {
    block: HostBlock,
    /// Its device, kept while the block lives, to unregister it on drop.
    device: Arc<Mutex<SimState>>,
}

impl SimPinnedBlock {
    /// `block` as page-locked memory of `device`, registered there.
    pub(super) fn register(
        block: HostBlock,
        state: &mut SimState,
        device: Arc<Mutex<SimState>>,
    ) -> Self {
        // The block's own pointer, not one borrowed from its bytes: the
        // device reads uploads and lands downloads through it.
        state
            .pinned_blocks
            .insert(block.base(), block.bytes().len());
        SimPinnedBlock { block, device }
    }

    /// The host addresses of the block's bytes.
    fn range(&self) -> Range<u64> {
        let start = self.block.base().as_ptr().addr() as u64;
        start..start.saturating_add(self.block.bytes().len() as u64)
    }

    /// Checks a host access to the whole block against the copies in flight.
    fn check(&self, writes: bool) {
        let range = self.range();
        self.for_each_device(|state, _| {
            if let Err(error) = state.order.check_host_access(&range, writes) {
                tracing::error!(%error, "the host touched page-locked memory a copy still uses");
                state.deferred.get_or_insert(error);
            }
        });
    }

    /// Runs `visit` on the state of the block's device, then of its peers.
    fn for_each_device(&self, mut visit: impl FnMut(&mut SimState, bool)) {
        let copiers = {
            let mut state = self.device.lock().unwrap_or_else(|p| p.into_inner());
            visit(&mut state, true);
            state.copiers.clone()
        };
        for copier in copiers.iter().filter_map(Weak::upgrade) {
            visit(&mut copier.lock().unwrap_or_else(|p| p.into_inner()), false);
        }
    }
}

// SAFETY: the base pointer is the host block's, which upholds the
// contract; the checks below only report accesses.
unsafe impl PinnedBlock for SimPinnedBlock {
    /// The block's first byte, unchecked.
    fn base(&self) -> std::ptr::NonNull<u8> {
        self.block.base()
    }

    /// The block's bytes; reading them while a copy into them runs is reported.
    fn bytes(&self) -> &[u8] {
        self.check(false);
        self.block.bytes()
    }

    /// The block's bytes, writable; writing them while a copy runs is reported.
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.check(true);
        self.block.bytes_mut()
    }
}

impl Drop for SimPinnedBlock {
    /// Unregisters the block; freeing it while a copy runs is reported.
    fn drop(&mut self) {
        let range = self.range();
        self.for_each_device(|state, own| {
            if own {
                state.pinned_blocks.remove(range.start);
            }
            if state.order.forget_pinned(&range) {
                let error = BackendError::HostAccessInFlight {
                    access: "free",
                    address: range.start,
                    copy: "still used by an asynchronous copy",
                    stream: 0,
                };
                tracing::error!(%error, "a page-locked block was freed while a copy still used it");
                state.deferred.get_or_insert(error);
            }
        });
    }
}

impl SimState {
    /// Checks that `address..address + len` lies in one live page-locked block.
    pub(super) fn check_page_locked(
        &self,
        operation: &'static str,
        address: usize,
        len: usize,
    ) -> Result<Range<u64>, BackendError> {
        let start = address as u64;
        self.pinned_blocks.check(operation, address, len)?;
        Ok(start..start.saturating_add(len as u64))
    }

    /// Writes the data of downloads the host has now seen done.
    pub(super) fn land(&mut self, landings: Vec<super::stamp::Landing>) {
        for landing in landings {
            let len = landing.data.len();
            let Ok(pointer) = self
                .pinned_blocks
                .pointer("land", landing.address as usize, len)
            else {
                continue;
            };
            // SAFETY: the bytes lie in a live page-locked block of this
            // device or of a peer whose blocks it accepts (found just now,
            // under this device's lock, which the block's drop takes after
            // unregistering it and before freeing it), and the pointer is
            // the block's own; the asynchronous copy's contract gave the
            // bytes to the copy until the host saw it done, which is now, so
            // no reference to them is alive.
            unsafe {
                std::ptr::copy_nonoverlapping(landing.data.as_ptr(), pointer.as_ptr(), len);
            }
        }
    }
}
