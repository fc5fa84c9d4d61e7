//! Integration tests of cubie-mem live under `tests/`; this library is empty.
