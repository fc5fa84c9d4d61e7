//! How fast a device's engines work, as a backend that models or knows them
//! reports it ([`Backend::engine_rates`](super::Backend::engine_rates)).

/// The throughput of a device's engines: its two copy engines, the host's
/// staging work for it, and its compute speed.
///
/// A streamed chunk pipeline runs each engine beside the others, so its
/// time per run is set by its slowest engine for the batch's work
/// ([`Workload`](crate::plan::split::Workload)). A batch split across
/// devices uses these rates to give each device a share it finishes in the
/// same time as the others ([`weights`](crate::plan::split::weights)).
///
/// Every rate is at least 1: a 0 given counts as 1, as for the simulated
/// device's bandwidths.
///
/// ```
/// use cubie_mem::backend::{Backend, EngineRates};
/// use cubie_mem::SimBackend;
///
/// let sim = SimBackend::new(1 << 30).with_compute_speed(200);
/// let rates = sim.engine_rates().unwrap();
/// assert_eq!(rates.compute_percent(), 200);
/// assert_eq!(rates.host_to_device(), SimBackend::DEFAULT_COPY_BANDWIDTH);
/// assert_eq!(EngineRates::new(0, 1, 1, 0).compute_percent(), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EngineRates {
    host_to_device: u64,
    device_to_host: u64,
    host: u64,
    compute_percent: u32,
}

impl EngineRates {
    /// Rates of `host_to_device` and `device_to_host` copy bytes per second,
    /// `host` bytes per second of the host's gathers into staging buffers
    /// and scatters out of them, and a compute speed of `compute_percent`
    /// percent of the kernels' declared durations (100: a kernel takes the
    /// time its launch declares; 200: half of it). A 0 counts as 1.
    pub fn new(host_to_device: u64, device_to_host: u64, host: u64, compute_percent: u32) -> Self {
        EngineRates {
            host_to_device: host_to_device.max(1),
            device_to_host: device_to_host.max(1),
            host: host.max(1),
            compute_percent: compute_percent.max(1),
        }
    }

    /// Bytes per second the host-to-device copy engine moves (at least 1).
    pub fn host_to_device(&self) -> u64 {
        self.host_to_device
    }

    /// Bytes per second the device-to-host copy engine moves (at least 1).
    pub fn device_to_host(&self) -> u64 {
        self.device_to_host
    }

    /// Bytes per second of the host's own staging work for the device
    /// (at least 1).
    pub fn host(&self) -> u64 {
        self.host
    }

    /// The compute speed in percent of the kernels' declared durations
    /// (at least 1): a kernel declared at 10 µs takes 5 µs at 200.
    pub fn compute_percent(&self) -> u32 {
        self.compute_percent
    }
}
