//! The process-wide manager.

use std::sync::{Arc, OnceLock};

use crate::backend::Backend;
use crate::backend::sim::SimBackend;
use crate::config::size_from_env;
use crate::{ManagerConfig, MemError, MemoryManager};

/// Environment variable overriding the simulated device's total memory.
pub const SIM_TOTAL_ENV: &str = "CUBIE_SIM_TOTAL";
/// Environment variable overriding the simulated device's free memory.
pub const SIM_FREE_ENV: &str = "CUBIE_SIM_FREE";

/// The simulated device's default total memory (8 GiB), as cubie's simulator.
pub const SIM_DEFAULT_TOTAL: u64 = 8 << 30;
/// The simulated device's default free memory (1 GiB), as cubie's simulator.
pub const SIM_DEFAULT_FREE: u64 = 1 << 30;

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
        .get_or_init(|| {
            default_backend()
                .map(|backend| MemoryManager::from_shared(backend, ManagerConfig::default()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// A simulated device sized by the environment (see [`default_memmgr`]).
pub fn sim_backend_from_env() -> Result<SimBackend, MemError> {
    let total = size_from_env(SIM_TOTAL_ENV)?.unwrap_or(SIM_DEFAULT_TOTAL);
    let free = size_from_env(SIM_FREE_ENV)?.unwrap_or(SIM_DEFAULT_FREE.min(total));
    Ok(SimBackend::new(total).with_free(free))
}

#[cfg(not(feature = "cuda"))]
fn default_backend() -> Result<Arc<dyn Backend>, MemError> {
    Ok(Arc::new(sim_backend_from_env()?))
}

#[cfg(feature = "cuda")]
fn default_backend() -> Result<Arc<dyn Backend>, MemError> {
    match crate::backend::cuda::CudaBackend::new(0) {
        Ok(cuda) => Ok(Arc::new(cuda)),
        Err(error) => {
            tracing::warn!(%error, "no usable CUDA device; the default manager runs on the simulated device");
            Ok(Arc::new(sim_backend_from_env()?))
        }
    }
}
