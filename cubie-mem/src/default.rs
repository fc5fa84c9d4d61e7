//! The process-wide manager.

use std::sync::{Arc, OnceLock};

use crate::backend::Backend;
use crate::backend::sim::SimBackend;
use crate::config::size_from_env;
use crate::{MemError, MemoryManager};

impl SimBackend {
    /// Environment variable overriding the simulated device's total memory
    /// (read by [`SimBackend::from_env`]).
    pub const TOTAL_ENV: &str = "CUBIE_SIM_TOTAL";
    /// Environment variable overriding the simulated device's free memory.
    pub const FREE_ENV: &str = "CUBIE_SIM_FREE";
    /// The default total memory (8 GiB), as cubie's simulator.
    pub const DEFAULT_TOTAL: u64 = 8 << 30;
    /// The default free memory (1 GiB), as cubie's simulator.
    pub const DEFAULT_FREE: u64 = 1 << 30;

    /// A simulated device sized by the environment ([`TOTAL_ENV`](Self::TOTAL_ENV)
    /// and [`FREE_ENV`](Self::FREE_ENV), as sizes such as `512MiB`), else
    /// the defaults: the device [`default_memmgr`] uses without a GPU.
    pub fn from_env() -> Result<SimBackend, MemError> {
        let total = size_from_env(Self::TOTAL_ENV)?.unwrap_or(Self::DEFAULT_TOTAL);
        let free = size_from_env(Self::FREE_ENV)?.unwrap_or(Self::DEFAULT_FREE.min(total));
        Ok(SimBackend::new(total).with_free(free))
    }
}

static DEFAULT: OnceLock<Result<MemoryManager, MemError>> = OnceLock::new();

/// The process-wide manager, created on first use: on the CUDA device when
/// built with feature `cuda` and a device answers, else on a simulated device
/// of 8 GiB with 1 GiB free (`CUBIE_SIM_TOTAL` and `CUBIE_SIM_FREE` override
/// these, as sizes such as `512MiB`).
///
/// A malformed environment value is an error here, at first use, and on
/// every later call.
pub fn default_memmgr() -> Result<&'static MemoryManager, MemError> {
    DEFAULT
        .get_or_init(|| default_backend().map(MemoryManager::new))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(not(feature = "cuda"))]
fn default_backend() -> Result<Arc<dyn Backend>, MemError> {
    Ok(Arc::new(SimBackend::from_env()?))
}

#[cfg(feature = "cuda")]
fn default_backend() -> Result<Arc<dyn Backend>, MemError> {
    match crate::backend::cuda::CudaBackend::new(0) {
        Ok(cuda) => Ok(Arc::new(cuda)),
        Err(error) => {
            tracing::warn!(%error, "no usable CUDA device; the default manager runs on the simulated device");
            Ok(Arc::new(SimBackend::from_env()?))
        }
    }
}
