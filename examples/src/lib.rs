//! Code the examples share: their log output, and the hand-written CUDA
//! kernel of the GPU examples (feature `cuda`), launched on the manager's
//! memory through the CUDA backend's interop.

#[cfg(feature = "cuda")]
pub mod euler_decay;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the examples' log output: `RUST_LOG` chooses what is shown
/// (`RUST_LOG=cubie_mem=debug` explains every decision of the manager;
/// warnings and above by default, info for the examples themselves), on
/// standard error, with colours only when it is a terminal.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
}
