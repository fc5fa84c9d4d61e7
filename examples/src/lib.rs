//! Code the examples share: the main job's body (run by the `batch` binary
//! and, small, by the tests), cubie's batch solver declared with cubie-mem
//! (run by the `cubie_solver` binary and, small, by its test), one rank of
//! a batch under a launcher (run by the `shard_batch` binary), their log
//! output, and the hand-written CUDA
//! kernel of the GPU examples (feature `cuda`), launched on the manager's
//! memory through the CUDA backend's interop.

pub mod batch;
pub mod cubie_solver;
#[cfg(feature = "cuda")]
pub mod euler_decay;
pub mod shard;

use std::io::IsTerminal;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the examples' log output: `RUST_LOG` chooses what is shown, as
/// comma-separated `target=level` directives and a bare default level
/// (`RUST_LOG=cubie_mem=debug` explains every decision of the manager;
/// `info` when unset or unreadable), on standard error, with colours only
/// when it is a terminal.
pub fn init_logging() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|directives| directives.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_target(false),
        )
        .with(filter)
        .init();
}
