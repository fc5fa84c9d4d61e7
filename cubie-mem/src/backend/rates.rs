//! How fast a device's engines work ([`Backend::engine_rates`](super::Backend::engine_rates)).

/// The throughput of a device's engines: two copy engines, the host's
/// staging work, and compute. A 0 given counts as 1.
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
    /// Copy and host rates in bytes per second, and the compute speed in
    /// percent of the kernels' declared times (200: half the time).
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

    /// Bytes per second of the host's staging work for the device, on the
    /// default staging threads (`StagingThreads::default_count`).
    pub fn host(&self) -> u64 {
        self.host
    }

    /// The compute speed in percent of the kernels' declared times.
    pub fn compute_percent(&self) -> u32 {
        self.compute_percent
    }
}

/// The most staging threads the default takes: 8 (see
/// `StagingThreads::MAX_DEFAULT_THREADS`).
pub(crate) const MAX_DEFAULT_STAGING_LANES: usize = 8;

/// The default number of staging threads, and so of the host engine's
/// lanes: the machine's available parallelism, at most
/// [`MAX_DEFAULT_STAGING_LANES`] (1 where it cannot be read).
pub(crate) fn default_staging_lanes() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_DEFAULT_STAGING_LANES)
}
