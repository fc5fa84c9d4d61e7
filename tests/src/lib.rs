//! Integration tests of cubie-mem live under `tests/` (with the trybuild ui
//! suite under `ui/`). The user guide's code blocks run as doctests of
//! cubie-mem itself (its `guide` module).
