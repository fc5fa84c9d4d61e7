//! A device held in host memory: the default backend, so that everything runs
//! without a GPU.
//!
//! The device is a strict model of a CUDA GPU, so that what passes on it
//! predicts the GPU:
//!
//! - **Memory** ([`memory`]): allocations are real memory that can be
//!   written and read back; fresh memory reads as poison ([`memory::POISON`],
//!   NaN as floats) until written, and freed memory stays in a pool
//!   (`cuMemFreeAsync`), trimmed under pressure, that hands it back as fresh
//!   memory: poison again.
//! - **Time** ([`clock`]): four engines (host to device, device to host,
//!   compute, and the host's own staging work) run one operation at a time;
//!   copies take bytes / bandwidth (pageable ones a slower bandwidth, the
//!   host waiting), kernels the time their launch declares (scaled by the
//!   device's compute speed), gathers,
//!   scatters and spill I/O bytes / (lanes x host bandwidth), the lanes
//!   the staging threads' pieces; streams order their own
//!   work, events order work across streams, and the host's clock advances
//!   when it works and when it waits or polls. An event fires once the
//!   host's clock has passed it.
//! - **Hazards** ([`order`], per byte range): an access on one stream to
//!   bytes last written (or allocated) on another with no event between, a
//!   write over bytes another stream read, unordered, and an asynchronous
//!   copy into or from page-locked bytes another stream's copy still uses,
//!   fail with [`BackendError::StreamHazard`] naming both streams. The host
//!   reading or writing a page-locked block a copy still uses, and an
//!   asynchronous copy of host memory that is not one of this device's
//!   page-locked blocks, are errors too ([`pinned`]).
//!
//! Device data moves when work is queued (a host kernel runs then); a copy
//! into page-locked memory lands when the host has seen it done, as on a
//! GPU. Destroying a stream does not wait for its work. For a program free
//! of hazards that gives the results the GPU would.
//! [`SimBackend::hold_completions`] keeps every polled event pending (a GPU
//! still busy, as the manager's eviction sees it); the host's own waits
//! still complete. [`SimBackend::timeline`] records what ran when.

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
use clock::{DeviceClock, Engine, Work};
use memory::{DeviceBlock, Pool};
use order::Ordering;

const NAME: &str = "simulated";

/// Alignment of simulated device addresses, as cudaMalloc's 256 bytes.
const ADDRESS_ALIGNMENT: u64 = 256;

/// The simulated device. Cloning gives another handle to the same device, so a
/// test can keep one while the manager owns another.
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
    /// Streams and events handed out and not yet released, and the
    /// numbers of the next ones.
    live_streams: usize,
    next_stream: u64,
    live_events: usize,
    next_event: u64,
    hold_completions: bool,
    clock: DeviceClock,
    order: Ordering,
    /// Allocations a host kernel works on right now (taken out of
    /// `allocations` while it runs without the lock), by the kernel's name.
    running: FxHashMap<u64, String>,
    /// The live page-locked blocks' host address ranges, and those of the
    /// devices of a set whose blocks this device accepts.
    pinned_blocks: PageLockedRanges,
    /// The devices of a set that accept this device's page-locked blocks:
    /// the host's accesses to a block are checked against their copies in
    /// flight too.
    copiers: Vec<Weak<Mutex<SimState>>>,
    /// A misuse found outside a call (the host touching page-locked memory
    /// a copy still uses), reported by the next call.
    deferred: Option<BackendError>,
}

impl SimBackend {
    /// What fresh device memory reads as until written: 0xFF bytes, NaN
    /// as a float, -1 as a signed integer.
    pub const POISON: u8 = memory::POISON;
    /// The default bandwidth of each copy direction, bytes per second:
    /// about that of a PCIe Gen5 x16 link.
    pub const DEFAULT_COPY_BANDWIDTH: u64 = clock::DEFAULT_COPY_BANDWIDTH;
    /// The default bandwidth of the host's own work (gather, scatter, spill
    /// I/O) on one thread, bytes per second: a large memcpy on a small
    /// cloud machine.
    pub const DEFAULT_HOST_BANDWIDTH: u64 = clock::DEFAULT_HOST_BANDWIDTH;
    /// The default bandwidth of copies from or into pageable memory, bytes
    /// per second (the driver stages them with the CPU).
    pub const DEFAULT_PAGEABLE_BANDWIDTH: u64 = clock::DEFAULT_PAGEABLE_BANDWIDTH;
    /// The default cost of each row of a strided (2D) copy beyond its
    /// bytes' time at the copy bandwidth, in picoseconds (2.5 ns: NVIDIA's
    /// `cudaMemcpy2D` of 1,048,576 one-byte rows, as measured for ROCm
    /// rocm-systems pull request 6910; see the guide's device model).
    pub const DEFAULT_STRIDED_ROW_PS: u64 = clock::DEFAULT_STRIDED_ROW_PS;
    /// The default compute speed, in percent of the kernels' declared
    /// durations: a kernel takes the time its launch declares.
    pub const DEFAULT_COMPUTE_PERCENT: u32 = clock::DEFAULT_COMPUTE_PERCENT;
    /// The longest one operation (a kernel, a copy, the host's work) may
    /// take on the modelled clock: 2^50 ns, about 13 days. Longer work is
    /// refused before anything changes
    /// ([`BackendError::ClockOverflow`](super::BackendError::ClockOverflow)),
    /// so that one bad figure cannot use up the clock's range and leave
    /// the device unusable.
    pub const LONGEST_OPERATION: Duration = Duration::from_nanos(LONGEST_OPERATION_NS);
    /// The default rate at which the host page-locks memory, bytes per
    /// second: 4.45 GB/s (44.5 MB in about 10 ms; see the guide's device
    /// model). An allocation of page-locked memory keeps the host busy for
    /// its bytes at this rate.
    pub const DEFAULT_PAGE_LOCK_BANDWIDTH: u64 = clock::DEFAULT_PAGE_LOCK_BANDWIDTH;
    /// The default rate at which the host touches fresh host memory for the
    /// first time, bytes per second: 4 GB/s, a 4 KiB page a microsecond (a
    /// minor page fault; see the guide's device model).
    pub const DEFAULT_FIRST_TOUCH_BANDWIDTH: u64 = clock::DEFAULT_FIRST_TOUCH_BANDWIDTH;

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

    /// While held, every event polled ([`Event::is_complete`]) reports
    /// pending whatever the clock says, as if the GPU were still busy (what
    /// the manager's eviction sees); the host's own waits (synchronise,
    /// [`Event::synchronize`], blocking copies) still complete.
    /// Once released, events fire by the modelled clock again.
    ///
    /// [`Event::is_complete`]: super::Event::is_complete
    /// [`Event::synchronize`]: super::Event::synchronize
    pub fn hold_completions(&self, hold: bool) {
        self.state().hold_completions = hold;
    }

    /// Sets the copy bandwidths, in bytes per second, host to device and
    /// device to host (default [`SimBackend::DEFAULT_COPY_BANDWIDTH`] each).
    pub fn with_copy_bandwidth(self, host_to_device: u64, device_to_host: u64) -> Self {
        self.state()
            .clock
            .set_bandwidth(host_to_device, device_to_host);
        self
    }

    /// Sets the bandwidth of the host's own work on host memory (gathering
    /// chunks into staging buffers, scattering them out, spill I/O) on one
    /// thread, in bytes per second (default
    /// [`SimBackend::DEFAULT_HOST_BANDWIDTH`]); work cut over `L` staging
    /// threads ([`StagingThreads`](crate::StagingThreads)) takes
    /// `bytes / (L x bandwidth)`.
    pub fn with_host_bandwidth(self, bytes_per_second: u64) -> Self {
        self.state().clock.set_host_bandwidth(bytes_per_second);
        self
    }

    /// Sets the rate at which the host page-locks memory, in bytes per
    /// second (default [`SimBackend::DEFAULT_PAGE_LOCK_BANDWIDTH`]; 0
    /// counts as 1; `u64::MAX` makes it take no time): each allocation of
    /// page-locked memory keeps the host busy for its bytes at this rate,
    /// on the host's track of the timeline
    /// ([`Activity::PageLock`](crate::timeline::Activity::PageLock)).
    pub fn with_page_lock_bandwidth(self, bytes_per_second: u64) -> Self {
        self.state().clock.set_page_lock_bandwidth(bytes_per_second);
        self
    }

    /// Sets the rate at which the host touches fresh host memory for the
    /// first time, in bytes per second (default
    /// [`SimBackend::DEFAULT_FIRST_TOUCH_BANDWIDTH`]; 0 counts as 1): a new
    /// spill file's pre-faulting
    /// ([`HostWork::FirstTouch`](crate::backend::HostWork::FirstTouch))
    /// keeps the host busy for its bytes at this rate, on the host's track
    /// ([`Activity::FirstTouch`](crate::timeline::Activity::FirstTouch)).
    pub fn with_first_touch_bandwidth(self, bytes_per_second: u64) -> Self {
        self.state()
            .clock
            .set_first_touch_bandwidth(bytes_per_second);
        self
    }

    /// Sets the cost of each row of a strided copy beyond its bytes' time,
    /// in picoseconds (default [`SimBackend::DEFAULT_STRIDED_ROW_PS`]): a
    /// strided copy of `rows` rows holding `bytes` takes `bytes / bandwidth
    /// + rows x cost`, each part rounded up to the nanosecond.
    pub fn with_strided_row_cost(self, picoseconds: u64) -> Self {
        self.state().clock.set_strided_row_cost(picoseconds);
        self
    }

    /// Sets the bandwidth of copies from or into pageable memory, in bytes
    /// per second (default [`SimBackend::DEFAULT_PAGEABLE_BANDWIDTH`]); a
    /// copy is never faster than its engine's bandwidth.
    pub fn with_pageable_bandwidth(self, bytes_per_second: u64) -> Self {
        self.state().clock.set_pageable_bandwidth(bytes_per_second);
        self
    }

    /// Sets the compute speed, in percent of the kernels' declared
    /// durations (default [`SimBackend::DEFAULT_COMPUTE_PERCENT`]; 0 counts
    /// as 1): a kernel declared at 10 µs ([`HostKernel::new`](crate::HostKernel::new))
    /// takes 5 µs at 200, 20 µs at 50, rounded up to the nanosecond, on the
    /// clock and in the timeline. With the bandwidths, it models devices
    /// whose engines differ ([`Backend::engine_rates`](super::Backend::engine_rates)
    /// reports them). A kernel whose scaled time passes the clock's range
    /// is refused ([`BackendError::ClockOverflow`]).
    pub fn with_compute_speed(self, percent: u32) -> Self {
        self.state().clock.set_compute_speed(percent);
        self
    }

    /// The host's modelled clock: how long the host has worked on and
    /// waited for the device.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.state().clock.now_ns())
    }

    /// The work recorded so far, on the modelled clock: the most recent
    /// spans up to the timeline's capacity, with figures over all of them.
    pub fn timeline(&self) -> Timeline {
        self.state().clock.timeline()
    }

    /// Keeps at most `spans` spans of recorded work (the most recent; the
    /// default is [`DEFAULT_TIMELINE_CAPACITY`](crate::timeline::DEFAULT_TIMELINE_CAPACITY)),
    /// so that a long-running process does not grow: older spans are
    /// dropped and counted ([`Timeline::dropped_spans`]).
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

    /// Bytes of freed device memory the pool keeps for reuse (they count as
    /// free; the pool releases them when an allocation needs the room).
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

    /// Number of live page-locked host blocks (host arrays and staging
    /// buffers), for checking that nothing leaked.
    pub fn live_pinned_blocks(&self) -> usize {
        self.state().pinned_blocks.len()
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // The state is consistent after every statement, so a panic elsewhere
        // while it was held leaves nothing half-done.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state for a call of the contract: a misuse found since the last
    /// call (the host touching page-locked memory in flight) fails it.
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

    /// A zeroed host block of `bytes` standing in for device or page-locked
    /// memory; out of memory when the host cannot provide it.
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

    /// The error for an allocation that is not there: a host kernel has it
    /// right now, or it does not exist.
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

    /// Device memory for `bytes`: a pooled block that fits (stale bytes), or
    /// a fresh one (poison) after trimming the pool to make room for it.
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

    /// Checks, before a copy of `len` bytes changes anything, that its time
    /// fits on the clock.
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

    /// Places a copy of `bytes` on its engine after the stream's earlier
    /// work, at the pageable bandwidth when `pageable`; returns when it ends.
    fn timed_copy(&mut self, engine: Engine, stream: u64, bytes: u64, pageable: bool) -> u64 {
        let (activity, direction, host) = match engine {
            Engine::DeviceToHost => (Activity::DeviceToHost, "download", " into pageable memory"),
            Engine::HostToDevice | Engine::Compute | Engine::Host => {
                (Activity::HostToDevice, "upload", " from pageable memory")
            }
        };
        let duration = self.copy_duration(engine, bytes, pageable);
        let memory = if pageable { host } else { "" };
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

#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod strided_tests;
#[cfg(test)]
mod tests;
