//! The process-wide manager on the simulated device, sized by the environment.
//! (Its own test binary: the default manager is created once per process.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(not(feature = "cuda"))]

use cubie_mem::{SimBackend, default_memmgr};

#[test]
fn environment_sizes_the_simulated_device() {
    // SAFETY of set_var: this binary's only test, run before any other thread reads the environment.
    unsafe {
        std::env::set_var(SimBackend::TOTAL_ENV, "512MiB");
        std::env::set_var(SimBackend::FREE_ENV, "0.25 GiB");
    }
    let mgr = default_memmgr().unwrap();
    let info = mgr.mem_info().unwrap();
    assert_eq!(info.total, 512 << 20);
    assert_eq!(info.free, 256 << 20);
    assert_eq!(mgr.backend().name(), "simulated");
    assert!(
        std::ptr::eq(mgr, default_memmgr().unwrap()),
        "one manager per process"
    );

    unsafe {
        std::env::remove_var(SimBackend::TOTAL_ENV);
        std::env::remove_var(SimBackend::FREE_ENV);
    }
    let defaults = SimBackend::from_env().unwrap();
    assert_eq!(defaults.free_bytes(), 1 << 30);
    assert_eq!(
        cubie_mem::backend::Backend::mem_info(&defaults)
            .unwrap()
            .total,
        8 << 30
    );
}
