//! A malformed size in the environment is a clear error at first use of the
//! default manager, and stays one. (Its own test binary.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(not(feature = "cuda"))]

use cubie_mem::{MemError, SimBackend, default_memmgr};

#[test]
fn a_malformed_size_is_reported_at_first_use() {
    // SAFETY of set_var: this binary's only test, run before any other thread reads the environment.
    unsafe { std::env::set_var(SimBackend::TOTAL_ENV, "eight gigs") };
    for _ in 0..2 {
        let err = default_memmgr().unwrap_err();
        assert!(
            matches!(&err, MemError::Config { name, value, reason }
                if name == SimBackend::TOTAL_ENV && value == "eight gigs" && reason.contains("512MiB")),
            "{err}"
        );
    }
}
