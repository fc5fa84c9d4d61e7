//! Integration tests of cubie-mem live under `tests/`; this library is empty.

#[doc = include_str!("../../docs/derive.md")]
#[cfg(doctest)]
pub struct DeriveDoctests;
