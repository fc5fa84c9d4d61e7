//! A device held in host memory: the default backend, so that everything runs
//! without a GPU.
//!
//! Allocations are real memory that can be written and read back. Work on a
//! stream runs synchronously when queued, so it is trivially ordered; events
//! complete when recorded unless completions are held back with
//! [`SimBackend::hold_completions`], which lets tests model a busy GPU.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Backend, DevicePtr, EventHandle, MemInfo, PinnedBlock, StreamHandle, byte_range};
use crate::block::HostBlock;
use crate::{Bytes, MemError};

const NAME: &str = "simulated";

/// Alignment of simulated device addresses, as cudaMalloc's 256 bytes.
const ADDRESS_ALIGNMENT: u64 = 256;

/// The simulated device. Cloning gives another handle to the same device, so a
/// test can keep one while the manager owns another.
///
/// ```
/// use cubie_mem::backend::{Backend, sim::SimBackend};
///
/// let sim = SimBackend::new(8 << 30).with_free(1 << 30);
/// assert_eq!(sim.mem_info().unwrap().free, 1 << 30);
/// ```
#[derive(Clone)]
pub struct SimBackend {
    inner: Arc<Mutex<SimState>>,
}

struct SimState {
    total: u64,
    initial_free: u64,
    allocations: HashMap<u64, HostBlock>,
    device_bytes: u64,
    next_address: u64,
    allocation_calls: usize,
    fail_after: Option<usize>,
    streams: HashSet<u64>,
    next_stream: u64,
    events: HashMap<u64, bool>,
    next_event: u64,
    hold_completions: bool,
}

impl SimBackend {
    /// A device with `total_bytes` of memory, all of it free.
    pub fn new(total_bytes: u64) -> Self {
        SimBackend {
            inner: Arc::new(Mutex::new(SimState {
                total: total_bytes,
                initial_free: total_bytes,
                allocations: HashMap::new(),
                device_bytes: 0,
                next_address: ADDRESS_ALIGNMENT,
                allocation_calls: 0,
                fail_after: None,
                streams: HashSet::new(),
                next_stream: 1,
                events: HashMap::new(),
                next_event: 1,
                hold_completions: false,
            })),
        }
    }

    /// Sets the free memory before this manager allocates (other processes
    /// hold the rest); live allocations reduce it further. Clamped to the total.
    pub fn with_free(self, free_bytes: u64) -> Self {
        {
            let mut s = self.state();
            s.initial_free = free_bytes.min(s.total);
        }
        self
    }

    /// Fault injection: allocation `n + 1` and later (device or pinned,
    /// counted from now) fail as out of memory.
    pub fn fail_allocations_after(self, n: usize) -> Self {
        self.set_fail_allocations_after(Some(n));
        self
    }

    /// Sets or lifts (`None`) the fault of [`SimBackend::fail_allocations_after`],
    /// restarting the count.
    pub fn set_fail_allocations_after(&self, n: Option<usize>) {
        let mut s = self.state();
        s.fail_after = n;
        s.allocation_calls = 0;
    }

    /// While held, recorded events stay pending (as if the GPU were still
    /// busy); releasing completes them all.
    pub fn hold_completions(&self, hold: bool) {
        let mut s = self.state();
        s.hold_completions = hold;
        if !hold {
            s.events.values_mut().for_each(|done| *done = true);
        }
    }

    /// Free device memory now.
    pub fn free_bytes(&self) -> u64 {
        self.state().free()
    }

    /// Number of live device allocations.
    pub fn live_allocations(&self) -> usize {
        self.state().allocations.len()
    }

    /// Number of live streams.
    pub fn live_streams(&self) -> usize {
        self.state().streams.len()
    }

    /// Number of live (not destroyed) events.
    pub fn live_events(&self) -> usize {
        self.state().events.len()
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // The state is consistent after every statement, so a panic elsewhere
        // while it was held leaves nothing half-done.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("SimBackend")
            .field("total", &s.total)
            .field("free", &s.free())
            .field("live_allocations", &s.allocations.len())
            .finish()
    }
}

impl SimState {
    fn free(&self) -> u64 {
        self.initial_free.saturating_sub(self.device_bytes)
    }

    /// The out-of-memory error for a request of `bytes`.
    fn out_of_memory(&self, bytes: u64) -> MemError {
        let free = self.free();
        MemError::OutOfMemory {
            label: String::new(),
            requested: Bytes(bytes),
            free: Bytes(free),
            idle_held: Bytes(0),
            limit: Bytes(free),
        }
    }

    fn count_allocation(&mut self, bytes: u64) -> Result<(), MemError> {
        self.allocation_calls = self.allocation_calls.saturating_add(1);
        match self.fail_after {
            Some(n) if self.allocation_calls > n => Err(self.out_of_memory(bytes)),
            _ => Ok(()),
        }
    }

    /// A zeroed host block of `bytes` standing in for device or page-locked
    /// memory; out of memory when the host cannot provide it.
    fn host_block(&self, bytes: u64, what: &'static str) -> Result<HostBlock, MemError> {
        usize::try_from(bytes)
            .ok()
            .and_then(|len| HostBlock::zeroed(len, what).ok())
            .ok_or_else(|| self.out_of_memory(bytes))
    }

    fn check_stream(&self, stream: StreamHandle, operation: &'static str) -> Result<(), MemError> {
        if self.streams.contains(&stream.0) {
            Ok(())
        } else {
            Err(MemError::backend(
                NAME,
                operation,
                format!("stream {} does not exist", stream.0),
            ))
        }
    }

    fn block(&self, ptr: DevicePtr, operation: &'static str) -> Result<&[u8], MemError> {
        self.allocations
            .get(&ptr.0)
            .map(|b| b.bytes())
            .ok_or_else(|| {
                MemError::backend(NAME, operation, format!("{ptr} is not a live allocation"))
            })
    }
}

/// [`byte_range`] as indices into a host-held block.
fn range(offset: u64, len: usize, size: usize) -> Result<std::ops::Range<usize>, MemError> {
    let r = byte_range(offset, len, size as u64)?;
    Ok(r.start as usize..r.end as usize)
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn mem_info(&self) -> Result<MemInfo, MemError> {
        let s = self.state();
        Ok(MemInfo {
            free: s.free(),
            total: s.total,
        })
    }

    fn create_stream(&self) -> Result<StreamHandle, MemError> {
        let mut s = self.state();
        let id = s.next_stream;
        s.next_stream += 1;
        s.streams.insert(id);
        Ok(StreamHandle(id))
    }

    fn destroy_stream(&self, stream: StreamHandle) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "destroy stream")?;
        s.streams.remove(&stream.0);
        Ok(())
    }

    fn synchronize(&self, stream: StreamHandle) -> Result<(), MemError> {
        self.state().check_stream(stream, "synchronize")
    }

    fn record_event(&self, stream: StreamHandle) -> Result<EventHandle, MemError> {
        let mut s = self.state();
        s.check_stream(stream, "record event")?;
        let id = s.next_event;
        s.next_event += 1;
        let done = !s.hold_completions;
        s.events.insert(id, done);
        Ok(EventHandle(id))
    }

    fn event_complete(&self, event: EventHandle) -> Result<bool, MemError> {
        self.state().events.get(&event.0).copied().ok_or_else(|| {
            MemError::backend(
                NAME,
                "query event",
                format!("event {} does not exist", event.0),
            )
        })
    }

    fn destroy_event(&self, event: EventHandle) -> Result<(), MemError> {
        self.state().events.remove(&event.0);
        Ok(())
    }

    fn alloc_device(&self, bytes: u64, stream: StreamHandle) -> Result<DevicePtr, MemError> {
        let mut s = self.state();
        s.check_stream(stream, "allocate")?;
        s.count_allocation(bytes)?;
        if bytes > s.free() {
            return Err(s.out_of_memory(bytes));
        }
        // An exhausted address space is out of memory too.
        let address = s.next_address;
        let next = bytes
            .max(1)
            .div_ceil(ADDRESS_ALIGNMENT)
            .checked_mul(ADDRESS_ALIGNMENT)
            .and_then(|span| address.checked_add(span))
            .ok_or_else(|| s.out_of_memory(bytes))?;
        let block = s.host_block(bytes, "simulated device memory")?;
        s.next_address = next;
        s.allocations.insert(address, block);
        s.device_bytes = s.device_bytes.saturating_add(bytes);
        Ok(DevicePtr(address))
    }

    fn free_device(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "free")?;
        let block = s.allocations.remove(&ptr.0).ok_or_else(|| {
            MemError::backend(NAME, "free", format!("{ptr} is not a live allocation"))
        })?;
        s.device_bytes = s.device_bytes.saturating_sub(block.bytes().len() as u64);
        Ok(())
    }

    fn alloc_pinned(&self, bytes: u64) -> Result<Box<dyn PinnedBlock>, MemError> {
        let mut s = self.state();
        s.count_allocation(bytes)?;
        Ok(Box::new(
            s.host_block(bytes, "simulated page-locked memory")?,
        ))
    }

    fn copy_to_device(
        &self,
        dst: DevicePtr,
        offset: u64,
        src: &[u8],
        stream: StreamHandle,
    ) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "copy to device")?;
        let size = s.block(dst, "copy to device")?.len();
        let r = range(offset, src.len(), size)?;
        if let Some(target) = s
            .allocations
            .get_mut(&dst.0)
            .and_then(|block| block.bytes_mut().get_mut(r))
        {
            target.copy_from_slice(src);
        }
        Ok(())
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), MemError> {
        let s = self.state();
        s.check_stream(stream, "copy from device")?;
        let block = s.block(src, "copy from device")?;
        let r = range(offset, dst.len(), block.len())?;
        if let Some(source) = block.get(r) {
            dst.copy_from_slice(source);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_reduce_free_memory_and_hold_data() {
        let sim = SimBackend::new(1000).with_free(600);
        let stream = sim.create_stream().unwrap();
        let ptr = sim.alloc_device(100, stream).unwrap();
        assert_eq!(sim.free_bytes(), 500);
        sim.copy_to_device(ptr, 10, &[1, 2, 3], stream).unwrap();
        let mut out = [0u8; 4];
        sim.copy_from_device(&mut out, ptr, 9, stream).unwrap();
        assert_eq!(out, [0, 1, 2, 3]);
        assert!(matches!(
            sim.copy_from_device(&mut out, ptr, 97, stream),
            Err(MemError::OutOfBounds { .. })
        ));
        sim.free_device(ptr, stream).unwrap();
        assert_eq!(sim.free_bytes(), 600);
    }

    #[test]
    fn out_of_memory_and_fault_injection() {
        let sim = SimBackend::new(1000).fail_allocations_after(1);
        let stream = sim.create_stream().unwrap();
        assert!(matches!(
            sim.alloc_device(2000, stream),
            Err(MemError::OutOfMemory { .. })
        ));
        assert!(sim.alloc_device(10, stream).unwrap_err().is_out_of_memory());
        sim.set_fail_allocations_after(None);
        assert!(sim.alloc_device(10, stream).is_ok());
    }

    #[test]
    fn events_complete_unless_held() {
        let sim = SimBackend::new(1000);
        let stream = sim.create_stream().unwrap();
        let e = sim.record_event(stream).unwrap();
        assert!(sim.event_complete(e).unwrap());
        sim.hold_completions(true);
        let e = sim.record_event(stream).unwrap();
        assert!(!sim.event_complete(e).unwrap());
        sim.hold_completions(false);
        assert!(sim.event_complete(e).unwrap());
    }

    #[test]
    fn pinned_blocks_are_aligned_and_zeroed() {
        let sim = SimBackend::new(1000);
        let block = sim.alloc_pinned(100).unwrap();
        assert_eq!(block.bytes().len(), 100);
        assert_eq!(block.bytes().as_ptr() as usize % 64, 0);
        assert!(block.bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn memory_the_host_cannot_provide_is_out_of_memory() {
        let sim = SimBackend::new(u64::MAX);
        let stream = sim.create_stream().unwrap();
        for bytes in [1u64 << 60, u64::MAX - 1] {
            let error = sim.alloc_device(bytes, stream).unwrap_err();
            assert!(
                matches!(error, MemError::OutOfMemory { requested, .. } if requested == Bytes(bytes)),
                "{error}"
            );
            let error = sim.alloc_pinned(bytes).err().unwrap();
            assert!(
                matches!(error, MemError::OutOfMemory { requested, .. } if requested == Bytes(bytes)),
                "{error}"
            );
        }
        // Nothing half-done: no allocation, free memory unchanged, and the
        // device still allocates.
        assert_eq!(sim.live_allocations(), 0);
        assert_eq!(sim.free_bytes(), u64::MAX);
        let ptr = sim.alloc_device(100, stream).unwrap();
        assert_eq!(ptr.0 % ADDRESS_ALIGNMENT, 0);
    }

    #[test]
    fn an_exhausted_address_space_is_out_of_memory() {
        let sim = SimBackend::new(u64::MAX);
        let stream = sim.create_stream().unwrap();
        sim.state().next_address = u64::MAX - ADDRESS_ALIGNMENT + 1;
        assert!(sim.alloc_device(1, stream).unwrap_err().is_out_of_memory());
        assert_eq!(sim.live_allocations(), 0);
    }
}
