//! Zero-filled, 64-byte aligned host memory whose allocation can fail
//! without aborting: the storage of pageable host arrays, of the simulated
//! device's allocations and of its page-locked blocks.
//!
//! The block comes from `std::alloc::alloc_zeroed`, so a large one is made of
//! fresh pages the kernel zeroes on first touch: creating it costs neither
//! time nor resident memory in proportion to its size. The layout asks for
//! byte alignment and 63 bytes more, and the block starts at the first
//! 64-byte boundary inside: the system allocator serves a zeroed layout of
//! alignment above 16 with an aligned allocation followed by a write of
//! every byte, which would touch every page up front.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

use crate::backend::PinnedBlock;
use crate::{Bytes, MemError};

/// Alignment of the first byte of a block.
pub(crate) const BLOCK_ALIGNMENT: usize = 64;

/// Zero-sized and 64-byte aligned: its dangling pointer starts empty blocks.
#[repr(C, align(64))]
struct Aligned;

/// A dangling pointer aligned for every element type: where empty memory
/// starts.
pub(crate) fn aligned_dangling() -> NonNull<u8> {
    NonNull::<Aligned>::dangling().cast()
}

/// `len` bytes of zero-filled, 64-byte aligned host memory, freed on drop.
pub(crate) struct HostBlock {
    /// What was allocated (size 0: nothing was).
    layout: Layout,
    /// The allocation's start, for `dealloc`.
    allocation: NonNull<u8>,
    /// The block's first byte: `allocation` rounded up to [`BLOCK_ALIGNMENT`].
    data: NonNull<u8>,
    /// The block's length.
    len: usize,
}

// SAFETY: a HostBlock owns its allocation exclusively, as a `Box<[u8]>` does;
// shared access only reads it and writes need `&mut self`.
unsafe impl Send for HostBlock {}
// SAFETY: as for Send; `&HostBlock` gives read-only access.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// `len` zero bytes, or [`MemError::HostOutOfMemory`] naming `what` when
    /// the host cannot provide them. A zero-length block allocates nothing.
    pub(crate) fn zeroed(len: usize, what: &'static str) -> Result<Self, MemError> {
        let aligned = aligned_dangling();
        if len == 0 {
            return Ok(HostBlock {
                layout: Layout::new::<()>(),
                allocation: aligned,
                data: aligned,
                len,
            });
        }
        let failed = || MemError::HostOutOfMemory {
            requested: Bytes(u64::try_from(len).unwrap_or(u64::MAX)),
            what,
        };
        let size = len.checked_add(BLOCK_ALIGNMENT - 1).ok_or_else(failed)?;
        let layout = Layout::from_size_align(size, 1).map_err(|_| failed())?;
        // SAFETY: `layout` has a non-zero size (`size > len > 0`).
        let allocation = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or_else(failed)?;
        let offset =
            (BLOCK_ALIGNMENT - allocation.as_ptr().addr() % BLOCK_ALIGNMENT) % BLOCK_ALIGNMENT;
        // SAFETY: `offset < BLOCK_ALIGNMENT`, and the allocation has
        // `len + BLOCK_ALIGNMENT - 1` bytes, so `allocation + offset` and the `len`
        // bytes after it lie inside it.
        let data = unsafe { allocation.add(offset) };
        Ok(HostBlock {
            layout,
            allocation,
            data,
            len,
        })
    }
}

// SAFETY: `data` comes from the allocation (never from a reference) and
// points to the block's `len` bytes while it lives; `bytes` and `bytes_mut`
// start there.
unsafe impl PinnedBlock for HostBlock {
    /// The block's first byte, taken from the allocation without a
    /// reference: the simulated device lands downloads in its page-locked
    /// blocks through it, and host arrays keep it.
    fn base(&self) -> NonNull<u8> {
        self.data
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `data` is non-null and aligned, and either `len` is 0 or
        // `data..data + len` lies inside the live, zero-initialised allocation
        // this block owns; the borrow of `self` keeps it alive and unwritten.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the exclusive borrow of `self` makes the
        // slice the only access to these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: `allocation` came from `alloc_zeroed(self.layout)` with this
            // layout and is freed only here, once.
            unsafe { dealloc(self.allocation.as_ptr(), self.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_and_zeroed() {
        // Miri walks every byte: a large block there takes minutes.
        let large = if cfg!(miri) { 1 << 12 } else { 1 << 20 };
        for len in [1, 63, 64, 65, 100, 4096, large] {
            let mut block = HostBlock::zeroed(len, "a test block").unwrap();
            assert_eq!(block.bytes().len(), len);
            assert_eq!(block.bytes().as_ptr().addr() % BLOCK_ALIGNMENT, 0);
            assert!(block.bytes().iter().all(|&b| b == 0));
            block.bytes_mut().fill(0xab);
            assert!(block.bytes().iter().all(|&b| b == 0xab));
        }
    }

    #[test]
    fn an_empty_block_allocates_nothing_and_is_aligned() {
        let mut block = HostBlock::zeroed(0, "a test block").unwrap();
        assert_eq!(block.layout.size(), 0);
        assert!(block.bytes().is_empty() && block.bytes_mut().is_empty());
        assert_eq!(block.bytes().as_ptr().addr() % BLOCK_ALIGNMENT, 0);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "Miri cannot fail an allocation: it aborts on an impossible size"
    )]
    fn impossible_sizes_are_errors_not_aborts() {
        for len in [usize::MAX, usize::MAX / 2, 1 << 60] {
            // black_box: an optimised build may elide an allocation whose
            // memory is never used, and report it as made.
            let block = std::hint::black_box(HostBlock::zeroed(len, "a test block"));
            let error = block.err().unwrap();
            assert!(error.is_out_of_memory(), "{error}");
            assert!(
                matches!(
                    error,
                    MemError::HostOutOfMemory { requested, what: "a test block" }
                        if requested == Bytes(len as u64)
                ),
                "{error}"
            );
        }
    }
}
