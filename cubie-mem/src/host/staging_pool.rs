//! The staging pool: page-locked buffers that pageable and spilled arrays
//! pass through on their way to and from the device, reused by (label,
//! shape, element type) and bounded by RAM; see
//! [host memory](crate::guide::host_memory#staging-buffers).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::SystemMemory;
use super::array::shape_size;
use super::tally::{PinnedTally, PinnedUse};
use crate::backend::{Backend, PinnedBlock};
use crate::resource::{Event, OwnedStream};
use crate::{DType, MemError, MemoryManager};

/// How often a waiting acquire re-reads the RAM figures.
const RAM_RECHECK: Duration = Duration::from_millis(50);

/// What a staging buffer is reused for: its label, shape and element type.
type Key = (String, Vec<usize>, DType);

type MemoryProbe = dyn Fn() -> Option<SystemMemory> + Send + Sync;

struct PoolShared {
    backend: Arc<dyn Backend>,
    /// Where the pool's buffers are counted (a pool made for a manager).
    tally: Option<Arc<PinnedTally>>,
    probe: Box<MemoryProbe>,
    state: Mutex<PoolState>,
    released: Condvar,
}

#[derive(Default)]
struct PoolState {
    idle: HashMap<Key, Vec<Box<dyn PinnedBlock>>>,
    in_flight: HashMap<String, usize>,
    allocations: usize,
}

impl PoolState {
    fn leave(&mut self, label: &str) {
        if let Some(count) = self.in_flight.get_mut(label) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.in_flight.remove(label);
            }
        }
    }
}

impl PoolShared {
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // Every update leaves the state consistent; no foreign code runs under the lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A thread-safe pool of page-locked staging buffers, which streamers take
/// their staging buffers from: the manager's own
/// ([`ChunkStreamer::pool`](crate::ChunkStreamer::pool)), or another given
/// with [`ChunkStreamer::with_pool`](crate::ChunkStreamer::with_pool).
/// Cloning gives another handle to the same pool.
#[derive(Clone)]
pub struct StagingPool {
    shared: Arc<PoolShared>,
}

impl StagingPool {
    /// Most bytes one staging buffer holds (4 MiB): a larger chunk moves in
    /// windows of one length, so that what a first batch page-locks stays
    /// small while each copy call still moves enough to reach the link's
    /// bandwidth.
    pub const BYTES_PER_TRANSFER: usize = 4 << 20;

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

    /// A new staging pool on `manager`'s backend, bounded by the machine's
    /// RAM, apart from the manager's own. Its buffers count in the manager's
    /// [memory report](MemoryManager::memory_report) as page-locked host memory held
    /// for staging.
    pub fn for_manager(manager: &MemoryManager) -> StagingPool {
        let mut pool = StagingPool::new(Arc::clone(manager.backend()));
        if let Some(shared) = Arc::get_mut(&mut pool.shared) {
            shared.tally = Some(Arc::clone(&manager.inner.pinned_host));
        }
        pool
    }

    /// A buffer of `shape` elements of `dtype` for `label`, waiting as long
    /// as it takes for one to be released when the pool may not grow.
    pub(crate) fn acquire(
        &self,
        label: &str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<StagingBuffer, MemError> {
        loop {
            if let Some(buffer) = self.acquire_until(label, shape, dtype, None)? {
                return Ok(buffer);
            }
        }
    }

    /// [`acquire`](Self::acquire) without waiting: `Ok(None)` when it would wait.
    pub(crate) fn try_acquire(
        &self,
        label: &str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Option<StagingBuffer>, MemError> {
        self.acquire_until(label, shape, dtype, Some(Instant::now()))
    }

    /// A buffer for `label`: an idle one of that key, else a new one when
    /// the label has none in flight or RAM allows, else one released before
    /// `deadline` (`None`: no deadline); `Ok(None)` past it.
    fn acquire_until(
        &self,
        label: &str,
        shape: &[usize],
        dtype: DType,
        deadline: Option<Instant>,
    ) -> Result<Option<StagingBuffer>, MemError> {
        let (_, bytes) = shape_size(shape, dtype.size_bytes())?;
        let key: Key = (label.to_owned(), shape.to_vec(), dtype);
        let shared = &self.shared;
        let mut state = shared.lock();
        loop {
            if let Some(block) = state.idle.get_mut(&key).and_then(Vec::pop) {
                *state.in_flight.entry(key.0.clone()).or_default() += 1;
                return Ok(Some(self.buffer(key, block, bytes)));
            }
            let may_grow = || (shared.probe)().is_some_and(|ram| ram.can_grow_by(bytes as u64));
            if !state.in_flight.contains_key(label) || may_grow() {
                *state.in_flight.entry(key.0.clone()).or_default() += 1;
                state.allocations += 1;
                drop(state);
                return match shared.backend.alloc_pinned_for_overwrite(bytes as u64) {
                    Ok(block) => {
                        let block = match &shared.tally {
                            Some(tally) => tally.count(block, PinnedUse::Staging),
                            None => block,
                        };
                        Ok(Some(self.buffer(key, block, bytes)))
                    }
                    Err(error) => {
                        let mut state = shared.lock();
                        state.allocations -= 1;
                        state.leave(label);
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
            let pause = match deadline {
                None => RAM_RECHECK,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
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

    fn buffer(&self, key: Key, block: Box<dyn PinnedBlock>, len: usize) -> StagingBuffer {
        StagingBuffer {
            block: Some(block),
            key,
            len,
            pool: Arc::clone(&self.shared),
            pending: None,
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

/// A page-locked buffer from a [`StagingPool`], and the event of the last
/// asynchronous copy that used it. The host reaches the buffer only once
/// that copy is done ([`host`](Self::host)), and it goes back to its pool
/// when dropped only then too, so neither the host nor the buffer's next
/// user can see (or spoil) bytes a copy is still moving.
///
/// Its contents are unspecified until written: a reused buffer holds what
/// its last user left, and a new one comes from
/// [`Backend::alloc_pinned_for_overwrite`], which may hand back a recycled
/// page-locked block without zero-filling it.
pub(crate) struct StagingBuffer {
    block: Option<Box<dyn PinnedBlock>>,
    key: Key,
    /// The bytes asked for.
    len: usize,
    pool: Arc<PoolShared>,
    pending: Option<Event>,
}

impl StagingBuffer {
    /// Waits for the last copy that used the buffer. A wait that fails
    /// leaves the copy pending, so the buffer is retired when dropped.
    fn settle(&mut self) -> Result<(), MemError> {
        if let Some(event) = &self.pending {
            event.wait()?;
        }
        self.pending = None;
        Ok(())
    }

    /// Whether the last copy that used the buffer is done (does not block).
    pub(crate) fn is_settled(&mut self) -> Result<bool, MemError> {
        let settled = match &self.pending {
            Some(event) => event.is_complete()?,
            None => true,
        };
        if settled {
            self.pending = None;
        }
        Ok(settled)
    }

    /// The bytes, for the host, once no copy uses them.
    pub(crate) fn host(&mut self) -> Result<&mut [u8], MemError> {
        self.settle()?;
        let len = self.len;
        Ok(self
            .block
            .as_mut()
            .and_then(|b| b.bytes_mut().get_mut(..len))
            .unwrap_or(&mut []))
    }

    /// Hands the buffer to an asynchronous copy queued by `queue` on
    /// `stream`: it gets the buffer's first `len` bytes, and the buffer
    /// is not touched again until an event recorded after the copy fired.
    ///
    /// # Safety
    ///
    /// `queue` must only queue copies on `stream` that use the slice it is
    /// given, and nothing else may keep its address.
    pub(crate) unsafe fn lend(
        &mut self,
        stream: &OwnedStream,
        len: usize,
        queue: impl FnOnce(&mut [u8]) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        let buffer = self.host()?;
        let len = len.min(buffer.len());
        let queued = queue(buffer.get_mut(..len).unwrap_or(&mut []));
        // Even a failed call may have queued part of its work: wait for it
        // before anyone touches the buffer again.
        self.pending = Some(Event::record(stream)?);
        queued
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        // The buffer goes back to the pool only once no copy uses it; when
        // that cannot be known, it is never reused (nor freed).
        if let Err(error) = self.settle() {
            tracing::error!(%error, "waiting for a staging copy failed; its buffer is retired");
            std::mem::forget(block);
            return;
        }
        let mut state = self.pool.lock();
        state.leave(&self.key.0);
        let dtype = self.key.2;
        let key = std::mem::replace(&mut self.key, (String::new(), Vec::new(), dtype));
        state.idle.entry(key).or_default().push(block);
        drop(state);
        self.pool.released.notify_all();
    }
}

#[cfg(test)]
mod tests;
