//! Every mistake of one struct is reported in one compilation, and the code
//! using the struct reports nothing more.

use cubie_mem::{DeviceArray, GpuBuffers, ManagerConfig, MemoryManager, PinnedArray, SimBackend};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = 2)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = device)]
    status: PinnedArray<i32>,
    #[buffer(shape = [0, n_states], unchunkable, lable = "init")]
    initial: DeviceArray<f64>,
    #[buffer(shape = [n_states], unchunkable, label = "status")]
    scale: DeviceArray<f64>,
}

fn main() {
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let solver = mgr
        .register(Outputs::registration().on_invalidate(|| {}))
        .unwrap();
    let dims = RunDims {
        n_states: 3,
        n_runs: 100,
    };
    let outputs = mgr.allocate_buffers::<Outputs>(&solver, &dims).unwrap();
    let _ = outputs.state.shape();
}
