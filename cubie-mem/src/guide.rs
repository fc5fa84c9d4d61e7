#![doc = include_str!("../docs/index.md")]
//!
//! In the API documentation the pages are this module's submodules, and
//! their code blocks run as the crate's doctests (the `cuda` and `interop`
//! pages with the feature `cuda`).

#[doc = include_str!("../docs/first-solver.md")]
pub mod first_solver {}

#[doc = include_str!("../docs/glossary.md")]
pub mod glossary {}

#[doc = include_str!("../docs/architecture.md")]
pub mod architecture {}

#[doc = include_str!("../docs/default-manager.md")]
pub mod default_manager {}

#[doc = include_str!("../docs/memory-manager.md")]
pub mod memory_manager {}

#[doc = include_str!("../docs/array-request.md")]
pub mod array_request {}

#[doc = include_str!("../docs/element-types.md")]
pub mod element_types {}

#[doc = include_str!("../docs/planner.md")]
pub mod planner {}

#[doc = include_str!("../docs/array-response.md")]
pub mod array_response {}

#[doc = include_str!("../docs/stream-groups.md")]
pub mod stream_groups {}

#[doc = include_str!("../docs/current-stream.md")]
pub mod current_stream {}

#[doc = include_str!("../docs/derive.md")]
pub mod derive {}

#[doc = include_str!("../docs/derive-errors.md")]
pub mod derive_errors {}

#[doc = include_str!("../docs/host-memory.md")]
pub mod host_memory {}

#[doc = include_str!("../docs/kernels.md")]
pub mod kernels {}

#[doc = include_str!("../docs/devices.md")]
pub mod devices {}

#[doc = include_str!("../docs/device-split.md")]
pub mod device_split {}

#[doc = include_str!("../docs/device-model.md")]
pub mod device_model {}

#[doc = include_str!("../docs/logging.md")]
pub mod logging {}

#[doc = include_str!("../docs/clusters.md")]
pub mod clusters {}

#[doc = include_str!("../docs/launchers.md")]
pub mod launchers {}

#[doc = include_str!("../docs/from-cubie.md")]
pub mod from_cubie {}

#[cfg(feature = "cuda")]
#[doc = include_str!("../docs/cuda.md")]
pub mod cuda {}

#[cfg(feature = "cuda")]
#[doc = include_str!("../docs/cuda-design.md")]
pub mod cuda_design {}

#[cfg(feature = "cuda")]
#[doc = include_str!("../docs/interop.md")]
pub mod interop {}
