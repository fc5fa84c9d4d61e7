//! `#[stream_group("name")]`: the registration preset puts holders in the group.

use cubie_mem::{
    DeviceArray, GpuBuffers, ManagerConfig, MemError, MemoryManager, Registration, SimBackend,
};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(Debug, GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = Dims)]
pub struct Times {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    times: DeviceArray<f64>,
}

fn main() {
    assert_eq!(Times::STREAM_GROUP, "integrators");
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let holder = mgr
        .register(Times::registration().on_invalidate(|| {}))
        .unwrap();
    assert_eq!(mgr.stream_group(&holder), "integrators");
    let dims = Dims { n_runs: 64 };
    assert!(mgr.allocate_buffers::<Times>(&holder, &dims).is_ok());

    let stray = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let error = mgr.allocate_buffers::<Times>(&stray, &dims).unwrap_err();
    assert!(matches!(
        error,
        MemError::StreamGroupMismatch {
            declared: "integrators",
            ..
        }
    ));
}
