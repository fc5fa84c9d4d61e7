//! A device held in host memory: the default backend, so that everything runs
//! without a GPU.
//!
//! It is a strict model of a CUDA GPU: poisoned fresh memory ([`memory`]),
//! kernels' reads of it refused (the initcheck), a modelled clock with four engines ([`clock`]), and stream hazards
//! refused ([`order`], [`pinned`]). The guide page
//! [device model](crate::guide::device_model) describes it.

mod calibration;
mod clock;
mod device;
mod memory;
mod order;
mod pinned;
mod pinned_uses;
mod ranges;
mod stamp;
mod stream;
mod strided;

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::error::LONGEST_OPERATION_NS;
use super::page_locked::PageLockedRanges;
use super::{BackendError, DevicePtr, MemorySpace};
use crate::Bytes;
use crate::block::HostBlock;
use crate::timeline::{Activity, Timeline};
pub use calibration::{Calibration, CallCosts};
use clock::{DeviceClock, Engine, Work};
use memory::{DeviceBlock, Pool};
use order::Ordering;

const NAME: &str = "simulated";

/// Alignment of simulated device addresses, as cudaMalloc's 256 bytes.
const ADDRESS_ALIGNMENT: u64 = 256;

/// The simulated device. A clone is another handle to the same device.
///
/// ```
/// use cubie_mem::SimBackend;
/// use cubie_mem::backend::Backend;
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
    allocations: FxHashMap<u64, DeviceBlock>,
    pool: Pool,
    device_bytes: u64,
    next_address: u64,
    allocation_calls: usize,
    fail_after: Option<usize>,
    /// Streams and events handed out and not yet released.
    live_streams: usize,
    next_stream: u64,
    live_events: usize,
    next_event: u64,
    hold_completions: bool,
    clock: DeviceClock,
    order: Ordering,
    /// Allocations a host kernel works on right now, by the kernel's name.
    running: FxHashMap<u64, String>,
    /// The live page-locked blocks' host address ranges.
    pinned_blocks: PageLockedRanges,
    /// The devices of a set that accept this device's page-locked blocks.
    copiers: Vec<Weak<Mutex<SimState>>>,
    /// A misuse found outside a call, reported by the next call.
    deferred: Option<BackendError>,
    /// Whether a kernel's read of never-written bytes is refused.
    initcheck: bool,
}

impl SimBackend {
    /// What fresh device memory reads as until written: 0xFF bytes (NaN).
    pub const POISON: u8 = memory::POISON;
    /// The default bandwidth of each copy direction, bytes per second.
    pub const DEFAULT_COPY_BANDWIDTH: u64 = clock::DEFAULT_COPY_BANDWIDTH;
    /// The default cost of each row of a strided copy, in picoseconds.
    pub const DEFAULT_STRIDED_ROW_PS: u64 = clock::DEFAULT_STRIDED_ROW_PS;
    /// The default compute speed, in percent of the kernels' declared times.
    pub const DEFAULT_COMPUTE_PERCENT: u32 = clock::DEFAULT_COMPUTE_PERCENT;
    /// The longest one operation may take on the modelled clock: 2^50 ns.
    /// Longer work is refused
    /// ([`BackendError::ClockOverflow`](super::BackendError::ClockOverflow)).
    pub const LONGEST_OPERATION: Duration = Duration::from_nanos(LONGEST_OPERATION_NS);

    /// A device with `total_bytes` of memory, all of it free.
    pub fn new(total_bytes: u64) -> Self {
        SimBackend {
            inner: Arc::new(Mutex::new(SimState {
                total: total_bytes,
                initial_free: total_bytes,
                allocations: FxHashMap::default(),
                pool: Pool::default(),
                device_bytes: 0,
                next_address: ADDRESS_ALIGNMENT,
                allocation_calls: 0,
                fail_after: None,
                live_streams: 0,
                next_stream: 1,
                live_events: 0,
                next_event: 1,
                hold_completions: false,
                clock: DeviceClock::new(),
                order: Ordering::default(),
                running: FxHashMap::default(),
                pinned_blocks: PageLockedRanges::default(),
                copiers: Vec::new(),
                deferred: None,
                initcheck: true,
            })),
        }
    }

    /// Sets the free memory before this manager allocates, clamped to the total.
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

    /// Sets or lifts (`None`) the fault of [`SimBackend::fail_allocations_after`].
    pub fn set_fail_allocations_after(&self, n: Option<usize>) {
        let mut s = self.state();
        s.fail_after = n;
        s.allocation_calls = 0;
    }

    /// While held, every polled event reports pending, as if the GPU were
    /// still busy; the host's own waits still complete.
    pub fn hold_completions(&self, hold: bool) {
        self.state().hold_completions = hold;
    }

    /// Sets the copy bandwidths, host to device and back, in bytes per second.
    pub fn with_copy_bandwidth(self, host_to_device: u64, device_to_host: u64) -> Self {
        self.state()
            .clock
            .set_bandwidth(host_to_device, device_to_host);
        self
    }

    /// Times the device with every figure of `figures`: the host's memcpy
    /// by thread count (pageable copies at one thread's), its rows,
    /// page-locking, first touch, calls and wake-ups, and a node's link
    /// figures where it gives them. The host's figures are set here only
    /// ([`Calibration::fixed`] by default); a later
    /// [`with_copy_bandwidth`](Self::with_copy_bandwidth) changes the link's.
    pub fn with_calibration(self, figures: &Calibration) -> Self {
        self.state().clock.set_calibration(figures);
        self
    }

    /// Sets the compute speed, in percent of the kernels' declared times: a
    /// kernel declared at 10 µs takes 5 µs at 200.
    pub fn with_compute_speed(self, percent: u32) -> Self {
        self.state().clock.set_compute_speed(percent);
        self
    }

    /// Turns the initcheck on (the default) or off: on, a kernel launch
    /// that declares it reads (`Access::Read` or `Access::ReadWrite`) bytes
    /// that nothing wrote is refused
    /// ([`BackendError::UnwrittenRead`](super::BackendError::UnwrittenRead)),
    /// as compute-sanitizer's initcheck would; off, the kernel reads
    /// [`POISON`](Self::POISON) there, for code that does so on purpose.
    pub fn with_initcheck(self, on: bool) -> Self {
        self.state().initcheck = on;
        self
    }

    /// The host's modelled clock.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.state().clock.now_ns())
    }

    /// The work recorded so far, on the modelled clock.
    pub fn timeline(&self) -> Timeline {
        self.state().clock.timeline()
    }

    /// Keeps at most the `spans` most recent spans of recorded work.
    pub fn with_timeline_capacity(self, spans: usize) -> Self {
        self.state().clock.set_timeline_capacity(spans);
        self
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

    /// Bytes of freed device memory the pool keeps for reuse.
    pub fn pooled_bytes(&self) -> u64 {
        self.state().pool.bytes()
    }

    /// Number of live streams.
    pub fn live_streams(&self) -> usize {
        self.state().live_streams
    }

    /// Number of live (not destroyed) events.
    pub fn live_events(&self) -> usize {
        self.state().live_events
    }

    /// Number of live page-locked host blocks, for checking leaks.
    pub fn live_pinned_blocks(&self) -> usize {
        self.state().pinned_blocks.len()
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // The state is consistent after every statement, so a panic elsewhere
        // while it was held leaves nothing half-done.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state for a call; a misuse found since the last call fails it.
    fn call(&self) -> Result<MutexGuard<'_, SimState>, BackendError> {
        let mut state = self.state();
        match state.deferred.take() {
            Some(error) => Err(error),
            None => Ok(state),
        }
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

    /// The out-of-memory error for a request of `bytes` of `space`.
    fn out_of_memory(&self, space: MemorySpace, bytes: u64) -> BackendError {
        BackendError::OutOfMemory {
            space,
            requested: Bytes(bytes),
            free: (space == MemorySpace::Device).then(|| Bytes(self.free())),
        }
    }

    fn count_allocation(&mut self, space: MemorySpace, bytes: u64) -> Result<(), BackendError> {
        self.allocation_calls = self.allocation_calls.saturating_add(1);
        match self.fail_after {
            Some(n) if self.allocation_calls > n => Err(self.out_of_memory(space, bytes)),
            _ => Ok(()),
        }
    }

    /// A zeroed host block of `bytes` standing in for device or pinned memory.
    fn host_block(&self, space: MemorySpace, bytes: u64) -> Result<HostBlock, BackendError> {
        let what = match space {
            MemorySpace::Device => "simulated device memory",
            MemorySpace::PageLocked => "simulated page-locked memory",
        };
        usize::try_from(bytes)
            .ok()
            .and_then(|len| HostBlock::zeroed(len, what).ok())
            .ok_or_else(|| self.out_of_memory(space, bytes))
    }

    /// The error for an allocation that is not there.
    fn missing(&self, ptr: DevicePtr, operation: &'static str) -> BackendError {
        match self.running.get(&ptr.0) {
            Some(kernel) => BackendError::Unsupported {
                operation,
                reason: format!(
                    "the allocation at {ptr} is in use by the host kernel '{kernel}' running now; \
                     a kernel body must not call the backend"
                ),
            },
            None => BackendError::UnknownAllocation { operation, ptr },
        }
    }

    fn block(
        &mut self,
        ptr: DevicePtr,
        operation: &'static str,
    ) -> Result<&mut DeviceBlock, BackendError> {
        if !self.allocations.contains_key(&ptr.0) {
            return Err(self.missing(ptr, operation));
        }
        self.allocations
            .get_mut(&ptr.0)
            .ok_or(BackendError::UnknownAllocation { operation, ptr })
    }

    /// Device memory for `bytes`: a pooled block, or a fresh (poisoned) one.
    fn device_block(&mut self, bytes: u64) -> Result<(u64, DeviceBlock), BackendError> {
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
            .ok_or_else(|| self.out_of_memory(MemorySpace::Device, bytes))?;
        let block = self.host_block(MemorySpace::Device, bytes)?;
        self.next_address = next;
        Ok((address, DeviceBlock::fresh(block)))
    }

    /// The modelled time of a copy of `bytes` on `engine`, at the pageable
    /// bandwidth when `pageable`.
    fn copy_duration(&self, engine: Engine, bytes: u64, pageable: bool) -> u64 {
        if pageable {
            self.clock.pageable_copy_ns(engine, bytes)
        } else {
            self.clock.copy_ns(engine, bytes)
        }
    }

    /// Checks that a copy of `len` bytes fits on the clock.
    fn copy_fits(
        &self,
        operation: &'static str,
        engine: Engine,
        stream: u64,
        len: usize,
        pageable: bool,
    ) -> Result<(), BackendError> {
        let duration = self.copy_duration(engine, len as u64, pageable);
        self.clock
            .fits(operation, engine, stream, Duration::from_nanos(duration))
    }

    /// Places a copy of `bytes` on its engine; returns when it ends.
    fn timed_copy(&mut self, engine: Engine, stream: u64, bytes: u64, pageable: bool) -> u64 {
        let (activity, direction, host) = match engine {
            Engine::DeviceToHost => (Activity::DeviceToHost, "download", " into pageable memory"),
            Engine::HostToDevice | Engine::Compute | Engine::Host => {
                (Activity::HostToDevice, "upload", " from pageable memory")
            }
        };
        let duration = self.copy_duration(engine, bytes, pageable);
        let memory = if pageable { host } else { "" };
        let call = self.clock.calls().copy_ns;
        self.clock.call("copy call", call);
        self.clock.run(
            engine,
            duration,
            Work {
                activity,
                name: format!("{direction} {}{memory}", Bytes(bytes)),
                stream,
                bytes,
            },
        )
    }

    /// The host waits for everything queued on `stream`; what it downloaded
    /// lands.
    fn host_waits_for_stream(&mut self, stream: u64) {
        self.clock.synchronize(stream);
        let landings = self.order.host_waits_for_stream(stream);
        self.land(landings);
    }

    /// The host knows the work before `event` is done; what it downloaded
    /// lands.
    fn host_waits_for_event(&mut self, event: u64) {
        let landings = self.order.host_waits_for_event(event);
        self.land(landings);
    }
}

/// The fixed figures with page-locking free, for tests whose times are the
/// copies' alone.
#[cfg(test)]
fn instant_page_locking() -> Calibration {
    Calibration {
        page_lock: u64::MAX,
        ..Calibration::fixed()
    }
}

#[cfg(test)]
mod initcheck_tests;
#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod strided_tests;
#[cfg(test)]
mod tests;
