//! Page-locked host memory with reuse: released blocks go back to a cache
//! and serve later requests of a similar size, so that repeated batches do
//! not page-lock and unlock host memory each time (both are slow system
//! calls).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, MutexGuard};

use super::context::DeviceContext;
use super::driver::describe;
use super::sys::{self, CuResult};
use crate::Bytes;
use crate::backend::page_locked::PageLockedRanges;
use crate::backend::{BackendError, MemorySpace, PinnedBlock};

/// The host address ranges of a context's live page-locked pages, and of
/// the contexts whose pages it accepts (the devices of a set: every block
/// is allocated portable).
type Registry = Arc<PageLockedRanges>;

/// Page-locked host pages from `cuMemHostAlloc`, freed with `cuMemFreeHost`
/// (its context current) when dropped.
pub(super) struct HostPages {
    ptr: NonNull<u8>,
    capacity: usize,
    context: Arc<DeviceContext>,
    /// Where the pages are registered while they live.
    registry: Registry,
}

// SAFETY: the pages are plain host memory owned by this value alone.
unsafe impl Send for HostPages {}
// SAFETY: shared access only reads through `&self`.
unsafe impl Sync for HostPages {}

impl HostPages {
    /// `capacity` page-locked bytes (at least one), registered: zeroed for
    /// [`Contents::Zeroed`], else as the driver hands them over.
    fn allocate(
        context: &Arc<DeviceContext>,
        registry: &Registry,
        capacity: usize,
        contents: Contents,
    ) -> Result<Self, BackendError> {
        const OPERATION: &str = "allocate pinned memory";
        let _guard = context.enter(OPERATION)?;
        let mut host: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is a live slot; the context is current.
        let result =
            unsafe { sys::cuMemHostAlloc(&mut host, capacity, sys::MEMHOSTALLOC_PORTABLE) };
        if result == CuResult::OUT_OF_MEMORY {
            return Err(page_locking_failed(capacity));
        }
        context.check(result, OPERATION)?;
        let ptr = NonNull::new(host.cast::<u8>()).ok_or_else(|| page_locking_failed(capacity))?;
        // Unfilled, every byte still has a value: the pages are page-locked,
        // so resident, holding the kernel's zeros or what this process left
        // in memory the driver reuses. A caller of `Overwritten` writes
        // every byte before it reads.
        if contents == Contents::Zeroed {
            // SAFETY: the driver returned `capacity` writable bytes at `ptr`.
            unsafe { ptr::write_bytes(ptr.as_ptr(), 0, capacity) };
        }
        let pages = HostPages {
            ptr,
            capacity,
            context: Arc::clone(context),
            registry: Arc::clone(registry),
        };
        registry.insert(pages.ptr, pages.capacity);
        Ok(pages)
    }

    fn len(&self) -> usize {
        self.capacity
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `capacity` initialised bytes live at `ptr` while `self` does.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.capacity) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `bytes`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.capacity) }
    }
}

impl Drop for HostPages {
    /// Frees the pages; on a context lost to a fault they are left
    /// allocated, as a copy from or into them may never have been waited for.
    fn drop(&mut self) {
        self.registry.remove(self.ptr.as_ptr().addr() as u64);
        let Ok(_guard) = self.context.enter("free pinned memory") else {
            return;
        };
        // SAFETY: the pages came from cuMemHostAlloc and are freed once; no
        // copy uses them any more (the manager waits for its copies).
        let result = unsafe { sys::cuMemFreeHost(self.ptr.as_ptr().cast::<c_void>()) };
        if result != CuResult::SUCCESS {
            tracing::debug!(error = %describe(result), "freeing page-locked host memory failed");
        }
    }
}

/// Pinned blocks are allocated in whole pages, so that similar sizes share
/// blocks.
const PAGE: usize = 4096;

/// Idle blocks by capacity, up to a limit of cached bytes.
///
/// A request of `len` bytes takes the smallest cached block of at least `len`
/// bytes that is not more than twice as large (a page at least), so that a
/// small request never pins a large block.
pub(super) struct BlockCache<B> {
    blocks: BTreeMap<usize, Vec<B>>,
    cached_bytes: u64,
    limit: u64,
}

impl<B> BlockCache<B> {
    /// An empty cache holding at most `limit` bytes.
    pub(super) fn new(limit: u64) -> Self {
        BlockCache {
            blocks: BTreeMap::new(),
            cached_bytes: 0,
            limit,
        }
    }

    /// Takes a cached block for `len` bytes, with its capacity.
    pub(super) fn take(&mut self, len: usize) -> Option<(usize, B)> {
        let largest = len.saturating_mul(2).max(PAGE);
        let (&capacity, list) = self.blocks.range_mut(len..=largest).next()?;
        let block = list.pop()?;
        if list.is_empty() {
            self.blocks.remove(&capacity);
        }
        self.cached_bytes -= capacity as u64;
        Some((capacity, block))
    }

    /// Keeps `block` of `capacity` bytes for reuse; hands it back when that
    /// would exceed the limit, for the caller to free.
    pub(super) fn put(&mut self, capacity: usize, block: B) -> Option<B> {
        let cached = self.cached_bytes.saturating_add(capacity as u64);
        if cached > self.limit {
            return Some(block);
        }
        self.cached_bytes = cached;
        self.blocks.entry(capacity).or_default().push(block);
        None
    }

    /// Removes every cached block.
    pub(super) fn drain(&mut self) -> Vec<B> {
        self.cached_bytes = 0;
        std::mem::take(&mut self.blocks)
            .into_values()
            .flatten()
            .collect()
    }

    /// Bytes held idle.
    pub(super) fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }
}

/// What a block handed out by [`PinnedCache::allocate`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Contents {
    /// Zeros: the caller may read before it writes.
    Zeroed,
    /// Whatever its last user (or the driver) left: the caller writes every
    /// byte first, so a new block skips the zero-fill (about 40 to 80 ms for
    /// 480 MB).
    Overwritten,
}

/// The page-locked blocks of one device context, in use and cached.
pub(super) struct PinnedCache {
    context: Arc<DeviceContext>,
    cache: Mutex<BlockCache<HostPages>>,
    /// Every live block's address range.
    registry: Registry,
}

impl PinnedCache {
    /// A cache keeping at most `limit` idle bytes.
    pub(super) fn new(context: Arc<DeviceContext>, limit: u64) -> Arc<Self> {
        Arc::new(PinnedCache {
            context,
            cache: Mutex::new(BlockCache::new(limit)),
            registry: Registry::default(),
        })
    }

    fn cache(&self) -> MutexGuard<'_, BlockCache<HostPages>> {
        // The cache is consistent after every statement.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of `bytes`, reused from the cache when one fits: zero-filled,
    /// or for [`Contents::Overwritten`] unfilled, a reused block as its last
    /// user left it and a new one as the driver hands it over.
    pub(super) fn allocate(
        self: &Arc<Self>,
        bytes: u64,
        contents: Contents,
    ) -> Result<Box<dyn PinnedBlock>, BackendError> {
        let len = usize::try_from(bytes).map_err(|_| out_of_page_locked_memory(bytes))?;
        let cached = self.cache().take(len);
        let buffer = match cached {
            Some((_, mut buffer)) => {
                if contents == Contents::Zeroed
                    && let Some(used) = buffer.bytes_mut().get_mut(..len)
                {
                    used.fill(0);
                }
                buffer
            }
            None => self.allocate_new(len, contents)?,
        };
        Ok(Box::new(CudaPinnedBlock {
            buffer: Some(buffer),
            len,
            cache: Arc::clone(self),
        }))
    }

    /// A new block of at least `len` bytes, in whole pages, filled as
    /// `contents` asks.
    fn allocate_new(&self, len: usize, contents: Contents) -> Result<HostPages, BackendError> {
        let capacity = len
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or_else(|| out_of_page_locked_memory(len as u64))?;
        match HostPages::allocate(&self.context, &self.registry, capacity, contents) {
            Err(first) if first.is_out_of_memory() => {
                // Idle cached blocks may be what stands in the way.
                let released = self.cache().drain();
                if released.is_empty() {
                    return Err(first);
                }
                drop(released);
                HostPages::allocate(&self.context, &self.registry, capacity, contents)
            }
            other => other,
        }
    }

    /// Takes a block back into the cache, or frees it when the cache is full.
    fn release(&self, buffer: HostPages) {
        let refused = self.cache().put(buffer.len(), buffer);
        drop(refused);
    }

    /// Frees every cached block.
    pub(super) fn clear(&self) {
        let blocks = self.cache().drain();
        drop(blocks);
    }

    /// Bytes of released blocks kept for reuse.
    pub(super) fn cached_bytes(&self) -> u64 {
        self.cache().cached_bytes()
    }

    /// Checks that `address..address + len` lies in one live page-locked
    /// block of this cache, or of a cache whose blocks it accepts, for an
    /// asynchronous copy.
    pub(super) fn check_page_locked(
        &self,
        operation: &'static str,
        address: usize,
        len: usize,
    ) -> Result<(), BackendError> {
        self.registry.check(operation, address, len)
    }

    /// Accepts `peer`'s blocks for this context's copies: its pages are
    /// portable, so page-locked for every context.
    pub(super) fn accept(&self, peer: &PinnedCache) {
        self.registry.accept(peer.registry.share());
    }
}

impl Drop for PinnedCache {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Page-locked memory of `bytes` that cannot be had.
fn out_of_page_locked_memory(bytes: u64) -> BackendError {
    BackendError::OutOfMemory {
        space: MemorySpace::PageLocked,
        requested: Bytes(bytes),
        free: None,
    }
}

/// Page-locking `bytes` failed for want of memory.
fn page_locking_failed(bytes: usize) -> BackendError {
    tracing::debug!(
        bytes = %Bytes(bytes as u64),
        "page-locking host memory failed; lowering ManagerConfig::pinned_max_bytes makes large host arrays use pageable memory"
    );
    out_of_page_locked_memory(bytes as u64)
}

/// A page-locked block handed to the manager; returns to the cache on drop.
struct CudaPinnedBlock {
    buffer: Option<HostPages>,
    len: usize,
    cache: Arc<PinnedCache>,
}

// SAFETY: the base pointer is the driver's allocation, never taken from a
// reference; `bytes` and `bytes_mut` start there (empty without pages).
unsafe impl PinnedBlock for CudaPinnedBlock {
    fn base(&self) -> NonNull<u8> {
        self.buffer
            .as_ref()
            .map_or_else(crate::block::aligned_dangling, |b| b.ptr)
    }

    fn bytes(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .and_then(|b| b.bytes().get(..self.len))
            .unwrap_or(&[])
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        self.buffer
            .as_mut()
            .and_then(|b| b.bytes_mut().get_mut(..len))
            .unwrap_or(&mut [])
    }
}

impl Drop for CudaPinnedBlock {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.cache.release(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_block_serves_the_next_request_of_similar_size() {
        let mut cache = BlockCache::new(1 << 20);
        assert!(cache.put(8192, "a").is_none());
        assert_eq!(cache.cached_bytes(), 8192);
        assert_eq!(cache.take(5000), Some((8192, "a")));
        assert_eq!(cache.cached_bytes(), 0);
        assert_eq!(cache.take(5000), None);
    }

    #[test]
    fn the_smallest_fitting_block_is_taken() {
        let mut cache = BlockCache::new(1 << 30);
        cache.put(1 << 20, "large");
        cache.put(12288, "medium");
        cache.put(4096, "small");
        assert_eq!(cache.take(7000), Some((12288, "medium")));
        assert_eq!(cache.take(100), Some((4096, "small")));
    }

    #[test]
    fn a_block_more_than_twice_too_large_is_left_for_larger_requests() {
        let mut cache = BlockCache::new(1 << 30);
        cache.put(1 << 20, "large");
        assert_eq!(cache.take(4096), None);
        assert_eq!(cache.take((1 << 19) + 1), Some((1 << 20, "large")));
    }

    #[test]
    fn blocks_past_the_limit_are_handed_back_and_drain_empties() {
        let mut cache = BlockCache::new(10_000);
        assert!(cache.put(8192, 1).is_none());
        assert_eq!(cache.put(4096, 2), Some(2));
        assert!(cache.put(1000, 3).is_none());
        let mut drained = cache.drain();
        drained.sort_unstable();
        assert_eq!(drained, [1, 3]);
        assert_eq!(cache.cached_bytes(), 0);
    }
}
