//! Without `#[stream_group]`, the buffers belong to the group "default".

use cubie_mem::{DeviceArray, GpuBuffers, ManagerConfig, MemoryManager, Registration, SimBackend};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Times {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    times: DeviceArray<f64>,
}

fn main() {
    assert_eq!(Times::STREAM_GROUP, "default");
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    // A plain registration is in "default" too, so it may hold these buffers.
    let holder = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let times = mgr
        .allocate_buffers::<Times>(&holder, &Dims { n_runs: 64 })
        .unwrap();
    assert_eq!(times.times.shape(), [64]);
}
