//! Integration tests of cubie-mem live under `tests/`; this library is empty.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../docs/cuda.md")]
pub struct CudaDoctests;
