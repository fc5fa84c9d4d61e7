//! The integration tests of cubie-mem, as one test binary (one link)
//! with a module per subject. Tests that need a process of their own
//! (environment variables, the process-wide manager, killed child
//! processes), the trybuild suite and the cuda tests are binaries of their
//! own beside it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;

mod allocation;
mod architecture;
mod async_copy;
mod composed;
mod config_builder;
mod cubie_agreement;
mod deferred_scatters;
mod derive;
mod device_set;
mod element_types;
mod error_messages;
mod eviction;
mod external_streams;
mod failed_eviction;
mod faults;
mod fit_reports;
mod handles;
mod held_bytes;
mod host;
mod host_limits;
mod host_mirror;
mod host_pipeline;
mod hostile_inputs;
mod identity;
mod idle_eviction;
mod initcheck;
mod logging;
mod nd_runs;
mod ndarray_views;
mod overlap;
mod pipeline_depth;
mod pipeline_failures;
mod pipeline_properties;
mod pipeline_targets;
mod planner_properties;
mod resume;
mod reused_buffers;
mod robustness;
mod shard_messages;
mod shares;
mod silent_mistakes;
mod split;
mod staging_reuse;
mod staging_threads;
mod streams;
mod stress;
mod strided_dma;
mod summaries;
mod tracing_events;
