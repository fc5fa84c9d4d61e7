//! `label = "..."` names the array in the manager; the default is the field name.

use cubie_mem::{DeviceArray, GpuBuffers, ManagerConfig, MemoryManager, SimBackend};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, label = "solver.state")]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    r#type: DeviceArray<u8>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    times: DeviceArray<f64>,
}

fn main() {
    assert_eq!(Buffers::LABELS, ["solver.state", "type", "times"]);
    let dims = Dims { n_runs: 8 };
    let requests = Buffers::requests(&dims);
    assert_eq!(requests.labels().collect::<Vec<_>>(), Buffers::LABELS);

    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let holder = mgr
        .register(Buffers::registration().on_invalidate(|| {}))
        .unwrap();
    let buffers = mgr.allocate_buffers::<Buffers>(&holder, &dims).unwrap();
    assert_eq!(buffers.state.label(), "solver.state");
    assert_eq!(buffers.r#type.label(), "type");
    assert_eq!(buffers.times.label(), "times");
}
