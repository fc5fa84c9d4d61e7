//! The simulated device's clock: when each piece of work runs.
//!
//! Four engines each run one operation at a time. An operation starts once
//! it is issued, its stream's earlier work is done and its engine is free.
//! Times are integer nanoseconds, so the model is deterministic.

use rustc_hash::FxHashMap;
use std::time::Duration;

use super::calibration::{Calibration, CallCosts};
use crate::backend::error::LONGEST_OPERATION_NS;
use crate::backend::{BackendError, EngineRates, HostWork, default_staging_lanes};
use crate::timeline::{Activity, Span, SpanLog, Timeline};

/// The default bandwidth of each copy direction: about PCIe Gen5 x16.
pub(crate) const DEFAULT_COPY_BANDWIDTH: u64 = 50_000_000_000;

/// The default cost of each row of a strided copy, in picoseconds: 2.5 ns,
/// a customer's figure quoted in a ROCm pull request (the guide's device
/// model gives the source).
pub(crate) const DEFAULT_STRIDED_ROW_PS: u64 = 2_500;

/// The default compute speed, in percent of the kernels' declared times.
pub(crate) const DEFAULT_COMPUTE_PERCENT: u32 = 100;

/// The modelled time of one poll of an event the host's clock has not reached.
pub(crate) const POLL_NS: u64 = 1_000;

/// A resource that runs one operation at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Engine {
    HostToDevice = 0,
    DeviceToHost = 1,
    Compute = 2,
    /// The host's own work: it advances the host's clock.
    Host = 3,
}

/// The stream number host work is recorded under (streams start at 1).
pub(super) const HOST_STREAM: u64 = 0;

/// Work to place on the clock.
pub(super) struct Work {
    pub(super) activity: Activity,
    pub(super) name: String,
    pub(super) stream: u64,
    pub(super) bytes: u64,
}

/// The modelled times of the host, the engines, the streams and the events.
pub(super) struct DeviceClock {
    host_ns: u64,
    engine_free_ns: [u64; 4],
    stream_tail_ns: FxHashMap<u64, u64>,
    event_ns: FxHashMap<u64, u64>,
    /// Bytes per second, host to device and device to host (at least 1).
    bandwidth: [u64; 2],
    /// The host's figures, and the link's where they give them.
    host: Calibration,
    /// Compute speed in percent of the kernels' declared times (at least 1).
    compute_percent: u32,
    /// Picoseconds each row of a strided copy costs beyond its bytes.
    strided_row_ps: u64,
    /// When each engine's last operation started.
    engine_busy_from_ns: [u64; 4],
    timeline: SpanLog,
}

impl DeviceClock {
    pub(super) fn new() -> Self {
        DeviceClock {
            host_ns: 0,
            engine_free_ns: [0; 4],
            stream_tail_ns: FxHashMap::default(),
            event_ns: FxHashMap::default(),
            bandwidth: [DEFAULT_COPY_BANDWIDTH; 2],
            host: Calibration::fixed(),
            compute_percent: DEFAULT_COMPUTE_PERCENT,
            strided_row_ps: DEFAULT_STRIDED_ROW_PS,
            engine_busy_from_ns: [0; 4],
            timeline: SpanLog::default(),
        }
    }

    /// Sets the copy bandwidths in bytes per second (0 counts as 1).
    pub(super) fn set_bandwidth(&mut self, host_to_device: u64, device_to_host: u64) {
        self.bandwidth = [host_to_device.max(1), device_to_host.max(1)];
    }

    /// Sets every figure of `figures`; the link's only where it gives them.
    pub(super) fn set_calibration(&mut self, figures: &Calibration) {
        self.host = figures.clone();
        if let Some((host_to_device, device_to_host)) = figures.copy_bandwidth {
            self.set_bandwidth(host_to_device, device_to_host);
        }
        if let Some(picoseconds) = figures.strided_row_ps {
            self.strided_row_ps = picoseconds;
        }
    }

    /// The host's time per driver call.
    pub(super) fn calls(&self) -> CallCosts {
        self.host.calls
    }

    /// The host spends `cost_ns` in a driver call named `name` before what
    /// it queues can start. Nothing is placed for a free call, nor past the
    /// clock's range.
    pub(super) fn call(&mut self, name: &str, cost_ns: u64) {
        if cost_ns > 0 {
            let _ = self.host_busy(name.to_owned(), 0, cost_ns, Activity::HostCall);
        }
    }

    /// Sets the compute speed in percent (0 counts as 1).
    pub(super) fn set_compute_speed(&mut self, percent: u32) {
        self.compute_percent = percent.max(1);
    }

    /// The engines' rates, for [`Backend::engine_rates`](crate::backend::Backend::engine_rates):
    /// the host's on the default staging threads.
    pub(super) fn rates(&self) -> EngineRates {
        let [host_to_device, device_to_host] = self.bandwidth;
        EngineRates::new(
            host_to_device,
            device_to_host,
            self.host.memcpy_bandwidth(default_staging_lanes()),
            self.compute_percent,
        )
    }

    /// How long a kernel declared at `declared` takes at the compute speed,
    /// rounded up; [`Duration::MAX`] past its range.
    pub(super) fn kernel_duration(&self, declared: Duration) -> Duration {
        let ns = (declared.as_nanos() * 100).div_ceil(u128::from(self.compute_percent));
        // The remainder is below 10^9: the cast is exact.
        let nanos = (ns % 1_000_000_000) as u32;
        u64::try_from(ns / 1_000_000_000).map_or(Duration::MAX, |secs| Duration::new(secs, nanos))
    }

    /// The host's clock.
    pub(super) fn now_ns(&self) -> u64 {
        self.host_ns
    }

    /// The recorded work.
    pub(super) fn timeline(&self) -> Timeline {
        self.timeline.timeline()
    }

    /// Keeps at most `spans` spans of recorded work from now on.
    pub(super) fn set_timeline_capacity(&mut self, spans: usize) {
        self.timeline.set_capacity(spans);
    }

    /// Forgets the recorded work (the clock keeps running).
    pub(super) fn clear_timeline(&mut self) {
        self.timeline.clear();
    }

    /// How long a copy of `bytes` takes on `engine`, rounded up.
    pub(super) fn copy_ns(&self, engine: Engine, bytes: u64) -> u64 {
        let bandwidth = match engine {
            Engine::HostToDevice => self.bandwidth[0],
            Engine::DeviceToHost => self.bandwidth[1],
            Engine::Host => self.host.memcpy_bandwidth(1),
            Engine::Compute => return 0,
        };
        transfer_ns(bytes, bandwidth)
    }

    /// How long a strided copy of `rows` rows and `bytes` takes on `engine`:
    /// its bytes' time plus each row's cost.
    pub(super) fn strided_copy_ns(&self, engine: Engine, bytes: u64, rows: u64) -> u64 {
        let per_rows = (u128::from(rows) * u128::from(self.strided_row_ps)).div_ceil(1_000);
        u64::try_from(per_rows)
            .ok()
            .and_then(|rows_ns| self.copy_ns(engine, bytes).checked_add(rows_ns))
            .unwrap_or(u64::MAX)
    }

    /// How long a copy of `bytes` from or into pageable memory takes: the
    /// pageable bandwidth, or the engine's when that is slower.
    pub(super) fn pageable_copy_ns(&self, engine: Engine, bytes: u64) -> u64 {
        self.copy_ns(engine, bytes)
            .max(transfer_ns(bytes, self.host.memcpy_bandwidth(1)))
    }

    /// The host does `work` on `bytes` with `lanes` threads: its clock
    /// advances by bytes / the host's bandwidth on that many threads, each
    /// of their rows' cost shared among them, and by what it loses beside
    /// the copy engines' DMA into and out of host memory. A first touch
    /// runs at its own rate, on one thread.
    pub(super) fn host_work(
        &mut self,
        name: String,
        work: HostWork,
        bytes: u64,
        lanes: usize,
    ) -> Result<(), BackendError> {
        let (rows, row_ps) = match work {
            HostWork::Gather { rows } => (rows, self.host.gather_row_ps),
            HostWork::Scatter { rows } => (rows, self.host.scatter_row_ps),
            HostWork::FirstTouch => {
                let duration = transfer_ns(bytes, self.host.first_touch.max(1));
                return self.host_busy(name, bytes, duration, Activity::FirstTouch);
            }
        };
        let lanes = lanes.max(1);
        let rows_ns = (u128::from(rows) * u128::from(row_ps)).div_ceil(1_000 * lanes as u128);
        let duration = transfer_ns(bytes, self.host.memcpy_bandwidth(lanes))
            .saturating_add(u64::try_from(rows_ns).unwrap_or(u64::MAX));
        let start = self.start(Engine::Host, HOST_STREAM);
        let lost = [Engine::HostToDevice, Engine::DeviceToHost]
            .into_iter()
            .map(|engine| {
                let share = self.host.staging_beside_copies_percent;
                self.overlap_loss(engine, share, start, duration)
            })
            .max()
            .unwrap_or(0);
        self.host_busy(
            name,
            bytes,
            duration.saturating_add(lost),
            Activity::HostStaging,
        )
    }

    /// Places `duration` of the host's own work (`activity`) on its engine
    /// and advances its clock; refused past the clock's range.
    fn host_busy(
        &mut self,
        name: String,
        bytes: u64,
        duration: u64,
        activity: Activity,
    ) -> Result<(), BackendError> {
        self.fits(
            "host work",
            Engine::Host,
            HOST_STREAM,
            Duration::from_nanos(duration),
        )?;
        let end = self.run(
            Engine::Host,
            duration,
            Work {
                activity,
                name,
                stream: HOST_STREAM,
                bytes,
            },
        );
        self.host_ns = end;
        Ok(())
    }

    /// How long page-locking `bytes` takes the host; refused past the
    /// clock's range. [`page_lock`](Self::page_lock) then places it.
    pub(super) fn page_lock_time(&self, bytes: u64) -> Result<u64, BackendError> {
        let duration = match self.host.page_lock {
            u64::MAX => 0,
            bandwidth => transfer_ns(bytes, bandwidth),
        };
        self.fits(
            "page-locking",
            Engine::Host,
            HOST_STREAM,
            Duration::from_nanos(duration),
        )?;
        Ok(duration)
    }

    /// The host page-locks `bytes` for `duration`.
    pub(super) fn page_lock(&mut self, name: String, bytes: u64, duration: u64) {
        if duration == 0 {
            return;
        }
        let end = self.run(
            Engine::Host,
            duration,
            Work {
                activity: Activity::PageLock,
                name,
                stream: HOST_STREAM,
                bytes,
            },
        );
        self.host_ns = end;
    }

    /// The host polled an event its clock has not reached: a poll's time
    /// passes.
    pub(super) fn poll(&mut self) {
        self.host_ns = self.host_ns.saturating_add(POLL_NS);
    }

    fn tail(&self, stream: u64) -> u64 {
        self.stream_tail_ns.get(&stream).copied().unwrap_or(0)
    }

    /// When work on `engine` and `stream` queued now would start.
    fn start(&self, engine: Engine, stream: u64) -> u64 {
        self.host_ns
            .max(self.tail(stream))
            .max(self.engine_free_ns[engine as usize])
    }

    /// Checks that work of `duration` takes at most [`LONGEST_OPERATION_NS`]
    /// and ends within the clock's range, so every time recorded is exact.
    pub(super) fn fits(
        &self,
        operation: &'static str,
        engine: Engine,
        stream: u64,
        duration: Duration,
    ) -> Result<(), BackendError> {
        let start_ns = self.start(engine, stream);
        let fits = u64::try_from(duration.as_nanos())
            .ok()
            .filter(|&duration_ns| duration_ns <= LONGEST_OPERATION_NS)
            .and_then(|duration_ns| start_ns.checked_add(duration_ns))
            .is_some();
        if fits {
            Ok(())
        } else {
            Err(BackendError::ClockOverflow {
                operation,
                start_ns,
                duration,
            })
        }
    }

    /// Places `work` of `duration_ns` on `engine` after the stream's earlier
    /// work; returns when it ends. The caller checked that it [fits](Self::fits).
    pub(super) fn run(&mut self, engine: Engine, duration_ns: u64, work: Work) -> u64 {
        let start = self.start(engine, work.stream);
        let duration_ns =
            duration_ns.saturating_add(self.both_ways_slowdown(engine, start, duration_ns));
        let engine = engine as usize;
        let end = start.saturating_add(duration_ns);
        self.engine_busy_from_ns[engine] = start;
        self.engine_free_ns[engine] = end;
        self.stream_tail_ns.insert(work.stream, end);
        self.record(work, start, end);
        end
    }

    /// The time a copy on `engine` from `start` for `duration_ns` loses to
    /// the other direction's copy running beside it: the overlap with that
    /// engine's last operation, moved at `both_ways_percent`. The copy
    /// placed first keeps its time (work is placed in the order issued).
    fn both_ways_slowdown(&self, engine: Engine, start: u64, duration_ns: u64) -> u64 {
        let other = match engine {
            Engine::HostToDevice => Engine::DeviceToHost,
            Engine::DeviceToHost => Engine::HostToDevice,
            Engine::Compute | Engine::Host => return 0,
        };
        self.overlap_loss(other, self.host.both_ways_percent, start, duration_ns)
    }

    /// The time work from `start` for `duration_ns` loses where it overlaps
    /// `other`'s last operation, its overlapped part moving at `percent` of
    /// its speed (1 to 100; 100 loses nothing).
    fn overlap_loss(&self, other: Engine, percent: u32, start: u64, duration_ns: u64) -> u64 {
        let other = other as usize;
        let percent = u64::from(percent.clamp(1, 100));
        let from = start.max(self.engine_busy_from_ns[other]);
        let to = start
            .saturating_add(duration_ns)
            .min(self.engine_free_ns[other]);
        let overlap = to.saturating_sub(from);
        (u128::from(overlap) * u128::from(100 - percent))
            .div_ceil(u128::from(percent))
            .try_into()
            .unwrap_or(u64::MAX)
    }

    /// Places instantaneous work (an allocation, a free) at the stream's
    /// current position.
    pub(super) fn instant(&mut self, work: Work) {
        let at = self.host_ns.max(self.tail(work.stream));
        self.stream_tail_ns.insert(work.stream, at);
        self.record(work, at, at);
    }

    fn record(&mut self, work: Work, start_ns: u64, end_ns: u64) {
        self.timeline.push(Span {
            activity: work.activity,
            name: work.name,
            stream: work.stream,
            bytes: work.bytes,
            start_ns,
            end_ns,
        });
    }

    /// The host waits until `time_ns`: past its own clock, it blocks, and
    /// runs again a wake-up after.
    pub(super) fn wait_until(&mut self, time_ns: u64) {
        if time_ns > self.host_ns {
            self.host_ns = time_ns;
            self.call("wake-up", self.host.wake_ns);
        }
    }

    /// The host waits for everything queued on `stream`.
    pub(super) fn synchronize(&mut self, stream: u64) {
        self.wait_until(self.tail(stream));
    }

    /// The host waits for `event`.
    pub(super) fn synchronize_event(&mut self, event: u64) {
        if let Some(&at) = self.event_ns.get(&event) {
            self.wait_until(at);
        }
    }

    /// Records event `event` after the work queued on `stream`.
    pub(super) fn record_event(&mut self, event: u64, stream: u64) {
        let at = self.host_ns.max(self.tail(stream));
        self.event_ns.insert(event, at);
    }

    /// Makes later work on `stream` wait for `event`.
    pub(super) fn wait_event(&mut self, stream: u64, event: u64) {
        if let Some(&at) = self.event_ns.get(&event) {
            let tail = self.tail(stream).max(at);
            self.stream_tail_ns.insert(stream, tail);
        }
    }

    /// Whether `event` has fired: the host's clock has passed its time.
    pub(super) fn event_fired(&self, event: u64) -> bool {
        self.event_ns
            .get(&event)
            .is_some_and(|&at| at <= self.host_ns)
    }

    pub(super) fn forget_event(&mut self, event: u64) {
        self.event_ns.remove(&event);
    }

    pub(super) fn forget_stream(&mut self, stream: u64) {
        self.stream_tail_ns.remove(&stream);
    }
}

/// Nanoseconds to move `bytes` at `bandwidth` bytes per second, rounded up.
fn transfer_ns(bytes: u64, bandwidth: u64) -> u64 {
    let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(bandwidth.max(1)));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "clock_tests.rs"]
mod tests;
