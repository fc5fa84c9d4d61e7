//! The staging pool: pinned buffers that pageable and spilled arrays pass
//! through on their way to and from the device.
//!
//! Buffers are reused by (label, shape, element type). The pool grows while
//! available RAM stays above 20% of total; a label with no buffer in flight
//! always gets one, so every label can make progress. Otherwise an acquire
//! waits until a buffer is released (or RAM frees up, checked periodically).

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::SystemMemory;
use super::array::shape_size;
use super::tally::{PinnedTally, PinnedUse};
use crate::backend::{Backend, PinnedBlock};
use crate::{DType, Element, MemError, MemoryManager};

/// Most bytes one staging buffer holds; larger transfers run in rounds.
pub(crate) const STAGING_BYTES_PER_TRANSFER: usize = 64 << 20;

/// How often a waiting acquire re-reads the RAM figures.
const RAM_RECHECK: Duration = Duration::from_millis(50);

/// What a staging buffer is reused for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StagingKey {
    /// The label of the array it stages.
    pub label: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its element type.
    pub dtype: DType,
}

type MemoryProbe = dyn Fn() -> Option<SystemMemory> + Send + Sync;

struct PoolShared {
    backend: Arc<dyn Backend>,
    /// Where the pool's buffers are counted (a pool made by a manager).
    tally: Option<Arc<PinnedTally>>,
    probe: Box<MemoryProbe>,
    state: Mutex<PoolState>,
    released: Condvar,
}

#[derive(Default)]
struct PoolState {
    idle: HashMap<StagingKey, Vec<Box<dyn PinnedBlock>>>,
    in_flight: HashMap<String, usize>,
    allocations: usize,
}

impl PoolShared {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Every update leaves the state consistent; no foreign code runs under the lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, key: StagingKey, block: Box<dyn PinnedBlock>) {
        let mut state = self.lock();
        if let Some(count) = state.in_flight.get_mut(&key.label) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.in_flight.remove(&key.label);
            }
        }
        state.idle.entry(key).or_default().push(block);
        drop(state);
        self.released.notify_all();
    }

    fn may_grow(&self, bytes: usize) -> bool {
        (self.probe)().is_some_and(|ram| ram.can_grow_by(bytes as u64))
    }
}

/// How long an acquire may wait.
#[derive(Clone, Copy)]
enum Wait {
    No,
    Until(Instant),
    Forever,
}

/// A thread-safe pool of pinned staging buffers. Cloning gives another handle
/// to the same pool.
///
/// ```
/// use cubie_mem::{MemoryManager, SimBackend};
///
/// let mgr = MemoryManager::new(SimBackend::new(1 << 30));
/// let pool = cubie_mem::StagingPool::for_manager(&mgr);
/// let mut buffer = pool.acquire::<f64>("state", &[4, 100]).unwrap();
/// buffer[0] = 1.5;
/// drop(buffer); // back to the pool
/// let again = pool.acquire::<f64>("state", &[4, 100]).unwrap();
/// assert_eq!(again[0], 1.5); // the same buffer, reused
/// assert_eq!(pool.pinned_allocations(), 1);
/// ```
#[derive(Clone)]
pub struct StagingPool {
    shared: Arc<PoolShared>,
}

impl StagingPool {
    /// Most bytes one staging buffer holds; larger transfers run in rounds.
    pub const BYTES_PER_TRANSFER: usize = STAGING_BYTES_PER_TRANSFER;

    /// A pool allocating from `backend`, bounded by this machine's RAM.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self::with_memory_probe(backend, SystemMemory::read)
    }

    /// A pool whose growth follows the RAM figures `probe` reports (`None`:
    /// unknown, so no growth beyond one buffer per label). For tests and for
    /// callers with their own view of host memory.
    pub fn with_memory_probe(
        backend: Arc<dyn Backend>,
        probe: impl Fn() -> Option<SystemMemory> + Send + Sync + 'static,
    ) -> Self {
        StagingPool {
            shared: Arc::new(PoolShared {
                backend,
                tally: None,
                probe: Box::new(probe),
                state: Mutex::new(PoolState::default()),
                released: Condvar::new(),
            }),
        }
    }

    /// A buffer of `shape` for `label`, waiting as long as it takes for one
    /// to be released when the pool may not grow.
    ///
    /// A thread that already holds a buffer of `label` and asks for another
    /// may wait until RAM frees up; use [`try_acquire`](Self::try_acquire)
    /// there.
    pub fn acquire<T: Element>(
        &self,
        label: &str,
        shape: &[usize],
    ) -> Result<StagingBuffer<T>, MemError> {
        loop {
            if let Some(buffer) = self.acquire_within(label, shape, Wait::Forever)? {
                return Ok(buffer);
            }
        }
    }

    /// [`acquire`](Self::acquire), giving up with `Ok(None)` after `timeout`.
    pub fn acquire_timeout<T: Element>(
        &self,
        label: &str,
        shape: &[usize],
        timeout: Duration,
    ) -> Result<Option<StagingBuffer<T>>, MemError> {
        let wait = Instant::now()
            .checked_add(timeout)
            .map_or(Wait::Forever, Wait::Until);
        self.acquire_within(label, shape, wait)
    }

    /// [`acquire`](Self::acquire) without waiting: `Ok(None)` when it would wait.
    pub fn try_acquire<T: Element>(
        &self,
        label: &str,
        shape: &[usize],
    ) -> Result<Option<StagingBuffer<T>>, MemError> {
        self.acquire_within(label, shape, Wait::No)
    }

    fn acquire_within<T: Element>(
        &self,
        label: &str,
        shape: &[usize],
        wait: Wait,
    ) -> Result<Option<StagingBuffer<T>>, MemError> {
        let (len, bytes) = shape_size(shape, size_of::<T>())?;
        let key = StagingKey {
            label: label.to_owned(),
            shape: shape.to_vec(),
            dtype: crate::dtype::dtype_of::<T>(),
        };
        let shared = &self.shared;
        let mut state = shared.lock();
        loop {
            if let Some(block) = state.idle.get_mut(&key).and_then(Vec::pop) {
                *state.in_flight.entry(key.label.clone()).or_default() += 1;
                return Ok(Some(self.buffer(key, block, len)));
            }
            let label_idle = state.in_flight.get(label).is_none_or(|&n| n == 0);
            if label_idle || shared.may_grow(bytes) {
                *state.in_flight.entry(key.label.clone()).or_default() += 1;
                state.allocations += 1;
                drop(state);
                return match shared.backend.alloc_pinned_for_overwrite(bytes as u64) {
                    Ok(block) => {
                        let block = match &shared.tally {
                            Some(tally) => tally.count(block, PinnedUse::Staging),
                            None => block,
                        };
                        Ok(Some(self.buffer(key, block, len)))
                    }
                    Err(error) => {
                        let mut state = shared.lock();
                        state.allocations -= 1;
                        if let Some(count) = state.in_flight.get_mut(label) {
                            *count = count.saturating_sub(1);
                        }
                        drop(state);
                        shared.released.notify_all();
                        Err(super::array::host_pinned_error(&*shared.backend, error))
                    }
                };
            }
            // Idle buffers of other keys hold RAM nobody uses: free them first.
            let before = state.idle.len();
            state
                .idle
                .retain(|k, blocks| k == &key && !blocks.is_empty());
            if state.idle.len() < before {
                continue;
            }
            let pause = match wait {
                Wait::No => return Ok(None),
                Wait::Forever => RAM_RECHECK,
                Wait::Until(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(RAM_RECHECK),
                    _ => return Ok(None),
                },
            };
            state = shared
                .released
                .wait_timeout(state, pause)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    fn buffer<T: Element>(
        &self,
        key: StagingKey,
        block: Box<dyn PinnedBlock>,
        len: usize,
    ) -> StagingBuffer<T> {
        StagingBuffer {
            block: Some(block),
            key,
            len,
            pool: Arc::clone(&self.shared),
            _element: PhantomData,
        }
    }

    /// Frees every idle buffer. Buffers in flight are kept when released.
    pub fn clear(&self) {
        let idle = std::mem::take(&mut self.shared.lock().idle);
        drop(idle);
        self.shared.released.notify_all();
    }

    /// Number of idle buffers the pool holds.
    pub fn idle_buffers(&self) -> usize {
        self.shared.lock().idle.values().map(Vec::len).sum()
    }

    /// Number of buffers of `label` in flight.
    pub fn in_flight(&self, label: &str) -> usize {
        self.shared
            .lock()
            .in_flight
            .get(label)
            .copied()
            .unwrap_or(0)
    }

    /// Number of pinned allocations the pool has made so far.
    pub fn pinned_allocations(&self) -> usize {
        self.shared.lock().allocations
    }
}

impl fmt::Debug for StagingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("StagingPool")
            .field("idle", &state.idle.values().map(Vec::len).sum::<usize>())
            .field("in_flight", &state.in_flight)
            .field("allocations", &state.allocations)
            .finish()
    }
}

/// A pinned buffer from a [`StagingPool`]; dereferences to its elements and
/// returns to the pool when dropped, waking waiting acquires. Its contents
/// are unspecified until written: a reused buffer holds what its last user
/// left, and a new one comes from
/// [`Backend::alloc_pinned_for_overwrite`](crate::backend::Backend::alloc_pinned_for_overwrite),
/// which may hand back a recycled page-locked block without zero-filling it.
pub struct StagingBuffer<T: Element> {
    block: Option<Box<dyn PinnedBlock>>,
    key: StagingKey,
    len: usize,
    pool: Arc<PoolShared>,
    _element: PhantomData<T>,
}

impl<T: Element> StagingBuffer<T> {
    /// What the buffer is reused for.
    pub fn key(&self) -> &StagingKey {
        &self.key
    }
}

impl<T: Element> Deref for StagingBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        let bytes = self.len * size_of::<T>();
        self.block
            .as_ref()
            .and_then(|b| b.bytes().get(..bytes))
            .and_then(|b| bytemuck::try_cast_slice(b).ok())
            .unwrap_or(&[])
    }
}

impl<T: Element> DerefMut for StagingBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let bytes = self.len * size_of::<T>();
        self.block
            .as_mut()
            .and_then(|b| b.bytes_mut().get_mut(..bytes))
            .and_then(|b| bytemuck::try_cast_slice_mut(b).ok())
            .unwrap_or(&mut [])
    }
}

impl<T: Element> Drop for StagingBuffer<T> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            let key = StagingKey {
                label: std::mem::take(&mut self.key.label),
                shape: std::mem::take(&mut self.key.shape),
                dtype: self.key.dtype,
            };
            self.pool.release(key, block);
        }
    }
}

impl<T: Element> fmt::Debug for StagingBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagingBuffer")
            .field("key", &self.key)
            .finish()
    }
}

impl StagingPool {
    /// A new staging pool on `manager`'s backend, bounded by the machine's
    /// RAM, apart from the manager's own (which streamers use unless given
    /// another with [`ChunkStreamer::with_pool`](crate::ChunkStreamer::with_pool)).
    /// Its buffers count in the manager's
    /// [statistics](MemoryManager::stats) as page-locked host memory held
    /// for staging.
    pub fn for_manager(manager: &MemoryManager) -> StagingPool {
        let mut pool = StagingPool::new(Arc::clone(manager.backend()));
        if let Some(shared) = Arc::get_mut(&mut pool.shared) {
            shared.tally = Some(Arc::clone(&manager.inner.pinned_host));
        }
        pool
    }
}
