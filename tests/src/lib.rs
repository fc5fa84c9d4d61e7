//! Integration tests of cubie-mem live under `tests/`; this library is empty.

#[doc = include_str!("../../docs/host-memory.md")]
#[cfg(doctest)]
pub struct HostMemoryDoctests;
