//! A device held in host memory: the default backend, so that everything runs
//! without a GPU.
//!
//! Allocations are real memory that can be written and read back. Data moves
//! when work is queued, and a modelled clock ([`clock`]) says when that work
//! would run on a GPU: copies take bytes / bandwidth on their engine,
//! streams order their own work, and the host's clock advances when it waits
//! (a blocking copy, a synchronisation). An event fires once the host's
//! clock has passed it. [`SimBackend::hold_completions`] overrides that and
//! keeps every event pending, so that tests can model a GPU that is still
//! busy. [`SimBackend::timeline`] records what ran when.

pub mod clock;
pub mod memory;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::{Backend, DevicePtr, EventHandle, MemInfo, PinnedBlock, StreamHandle};
use crate::block::HostBlock;
use crate::timeline::{Activity, Timeline};
use crate::{Bytes, MemError};
use clock::{DeviceClock, Engine, Work};
use memory::{DeviceBlock, Pool};

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
    allocations: HashMap<u64, DeviceBlock>,
    pool: Pool,
    device_bytes: u64,
    next_address: u64,
    allocation_calls: usize,
    fail_after: Option<usize>,
    streams: HashSet<u64>,
    next_stream: u64,
    events: HashSet<u64>,
    next_event: u64,
    hold_completions: bool,
    clock: DeviceClock,
}

impl SimBackend {
    /// A device with `total_bytes` of memory, all of it free.
    pub fn new(total_bytes: u64) -> Self {
        SimBackend {
            inner: Arc::new(Mutex::new(SimState {
                total: total_bytes,
                initial_free: total_bytes,
                allocations: HashMap::new(),
                pool: Pool::default(),
                device_bytes: 0,
                next_address: ADDRESS_ALIGNMENT,
                allocation_calls: 0,
                fail_after: None,
                streams: HashSet::new(),
                next_stream: 1,
                events: HashSet::new(),
                next_event: 1,
                hold_completions: false,
                clock: DeviceClock::new(),
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

    /// While held, every event reports pending whatever the clock says (as
    /// if the GPU were still busy); once released, events fire by the
    /// modelled clock again.
    pub fn hold_completions(&self, hold: bool) {
        self.state().hold_completions = hold;
    }

    /// Sets the copy bandwidths, in bytes per second, host to device and
    /// device to host (default [`clock::DEFAULT_COPY_BANDWIDTH`] each).
    pub fn with_copy_bandwidth(self, host_to_device: u64, device_to_host: u64) -> Self {
        self.state()
            .clock
            .set_bandwidth(host_to_device, device_to_host);
        self
    }

    /// The host's modelled clock: how long the host has waited for the device.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.state().clock.now_ns())
    }

    /// The work recorded so far, on the modelled clock.
    pub fn timeline(&self) -> Timeline {
        self.state().clock.timeline().clone()
    }

    /// Forgets the recorded work (the clock keeps running).
    pub fn clear_timeline(&self) {
        self.state().clock.clear_timeline();
    }

    /// Free device memory now.
    pub fn free_bytes(&self) -> u64 {
        self.state().free()
    }

    /// Number of live device allocations.
    pub fn live_allocations(&self) -> usize {
        self.state().allocations.len()
    }

    /// Bytes of freed device memory the pool keeps for reuse (they count as
    /// free; the pool releases them when an allocation needs the room).
    pub fn pooled_bytes(&self) -> u64 {
        self.state().pool.bytes()
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

    fn block(
        &mut self,
        ptr: DevicePtr,
        operation: &'static str,
    ) -> Result<&mut DeviceBlock, MemError> {
        self.allocations.get_mut(&ptr.0).ok_or_else(|| {
            MemError::backend(NAME, operation, format!("{ptr} is not a live allocation"))
        })
    }

    /// Device memory for `bytes`: a pooled block that fits (stale bytes), or
    /// a fresh one (poison) after trimming the pool to make room for it.
    fn device_block(&mut self, bytes: u64) -> Result<(u64, DeviceBlock), MemError> {
        if let Some(reused) = self.pool.take(bytes) {
            return Ok(reused);
        }
        let room = self
            .initial_free
            .saturating_sub(self.device_bytes)
            .saturating_sub(bytes);
        self.pool.trim(room);
        // An exhausted address space is out of memory too.
        let address = self.next_address;
        let next = bytes
            .max(1)
            .div_ceil(ADDRESS_ALIGNMENT)
            .checked_mul(ADDRESS_ALIGNMENT)
            .and_then(|span| address.checked_add(span))
            .ok_or_else(|| self.out_of_memory(bytes))?;
        let block = self.host_block(bytes, "simulated device memory")?;
        self.next_address = next;
        Ok((address, DeviceBlock::fresh(block)))
    }
}

impl SimState {
    /// Times a copy of pageable memory: queued on `stream`, and the host
    /// waits for it (its slice is free again when the call returns).
    fn blocking_copy(&mut self, engine: Engine, stream: StreamHandle, len: usize) {
        let bytes = len as u64;
        let (activity, direction) = match engine {
            Engine::HostToDevice => (Activity::HostToDevice, "upload"),
            Engine::DeviceToHost => (Activity::DeviceToHost, "download"),
        };
        let duration = self.clock.copy_ns(engine, bytes);
        let end = self.clock.run(
            engine,
            duration,
            Work {
                activity,
                name: format!("{direction} {}", Bytes(bytes)),
                stream: stream.0,
                bytes,
            },
        );
        self.clock.wait_until(end);
    }
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
        // The stream's pending work finishes first.
        s.clock.synchronize(stream.0);
        s.clock.forget_stream(stream.0);
        s.streams.remove(&stream.0);
        Ok(())
    }

    fn synchronize(&self, stream: StreamHandle) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "synchronize")?;
        s.clock.synchronize(stream.0);
        Ok(())
    }

    fn record_event(&self, stream: StreamHandle) -> Result<EventHandle, MemError> {
        let mut s = self.state();
        s.check_stream(stream, "record event")?;
        let id = s.next_event;
        s.next_event = id.saturating_add(1);
        s.events.insert(id);
        s.clock.record_event(id, stream.0);
        Ok(EventHandle(id))
    }

    fn wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "order streams")?;
        if !s.events.contains(&event.0) {
            return Err(MemError::backend(
                NAME,
                "order streams",
                format!("event {} does not exist", event.0),
            ));
        }
        s.clock.wait_event(stream.0, event.0);
        Ok(())
    }

    fn event_complete(&self, event: EventHandle) -> Result<bool, MemError> {
        let s = self.state();
        if !s.events.contains(&event.0) {
            return Err(MemError::backend(
                NAME,
                "query event",
                format!("event {} does not exist", event.0),
            ));
        }
        Ok(!s.hold_completions && s.clock.event_fired(event.0))
    }

    fn destroy_event(&self, event: EventHandle) -> Result<(), MemError> {
        let mut s = self.state();
        s.events.remove(&event.0);
        s.clock.forget_event(event.0);
        Ok(())
    }

    fn alloc_device(&self, bytes: u64, stream: StreamHandle) -> Result<DevicePtr, MemError> {
        let mut s = self.state();
        s.check_stream(stream, "allocate")?;
        s.count_allocation(bytes)?;
        if bytes > s.free() {
            return Err(s.out_of_memory(bytes));
        }
        let (address, block) = s.device_block(bytes)?;
        s.allocations.insert(address, block);
        s.device_bytes = s.device_bytes.saturating_add(bytes);
        s.clock.instant(Work {
            activity: Activity::Alloc,
            name: format!("alloc {}", Bytes(bytes)),
            stream: stream.0,
            bytes,
        });
        Ok(DevicePtr(address))
    }

    fn free_device(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "free")?;
        let block = s.allocations.remove(&ptr.0).ok_or_else(|| {
            MemError::backend(NAME, "free", format!("{ptr} is not a live allocation"))
        })?;
        let bytes = block.len();
        s.device_bytes = s.device_bytes.saturating_sub(bytes);
        s.pool.put(ptr.0, block);
        s.clock.instant(Work {
            activity: Activity::Free,
            name: format!("free {}", Bytes(bytes)),
            stream: stream.0,
            bytes,
        });
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
        s.block(dst, "copy to device")?.write(offset, src)?;
        s.blocking_copy(Engine::HostToDevice, stream, src.len());
        Ok(())
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        offset: u64,
        stream: StreamHandle,
    ) -> Result<(), MemError> {
        let mut s = self.state();
        s.check_stream(stream, "copy from device")?;
        s.block(src, "copy from device")?.read(offset, dst)?;
        s.blocking_copy(Engine::DeviceToHost, stream, dst.len());
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
        assert_eq!(out, [memory::POISON, 1, 2, 3], "byte 9 was never written");
        assert!(matches!(
            sim.copy_from_device(&mut out, ptr, 97, stream),
            Err(MemError::OutOfBounds { .. })
        ));
        sim.free_device(ptr, stream).unwrap();
        assert_eq!(sim.free_bytes(), 600);
        assert_eq!(sim.pooled_bytes(), 100);
        // The pool gives the block back, stale, at the same address.
        let again = sim.alloc_device(50, stream).unwrap();
        assert_eq!((again, sim.pooled_bytes()), (ptr, 0));
        sim.copy_from_device(&mut out, again, 9, stream).unwrap();
        assert_eq!(out, [memory::POISON, 1, 2, 3]);
        // Under pressure the pool is trimmed to make room.
        sim.free_device(again, stream).unwrap();
        let big = sim.alloc_device(600, stream).unwrap();
        assert_eq!((sim.pooled_bytes(), sim.free_bytes()), (0, 0));
        sim.free_device(big, stream).unwrap();
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
    fn streams_wait_only_for_events_that_exist() {
        let sim = SimBackend::new(1 << 20);
        let (a, b) = (sim.create_stream().unwrap(), sim.create_stream().unwrap());
        let event = sim.record_event(a).unwrap();
        sim.wait_event(b, event).unwrap();
        sim.destroy_event(event).unwrap();
        assert!(sim.wait_event(b, event).is_err());
        assert!(sim.wait_event(StreamHandle(99), event).is_err());
    }

    #[test]
    fn blocking_copies_take_modelled_time_and_the_host_waits() {
        // 1 byte per ns up, half that down.
        let sim = SimBackend::new(1 << 20).with_copy_bandwidth(1_000_000_000, 500_000_000);
        let stream = sim.create_stream().unwrap();
        let ptr = sim.alloc_device(4000, stream).unwrap();
        sim.copy_to_device(ptr, 0, &[1; 4000], stream).unwrap();
        assert_eq!(sim.now(), Duration::from_nanos(4000));
        let mut out = [0; 1000];
        sim.copy_from_device(&mut out, ptr, 0, stream).unwrap();
        assert_eq!(sim.now(), Duration::from_nanos(6000));
        sim.free_device(ptr, stream).unwrap();
        let timeline = sim.timeline();
        let spans: Vec<_> = timeline
            .spans()
            .iter()
            .map(|s| (s.activity.category(), s.start_ns, s.end_ns))
            .collect();
        assert_eq!(
            spans,
            [
                ("alloc", 0, 0),
                ("h2d", 0, 4000),
                ("d2h", 4000, 6000),
                ("free", 6000, 6000)
            ]
        );
        sim.clear_timeline();
        assert!(sim.timeline().spans().is_empty());
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
