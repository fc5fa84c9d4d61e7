//! A misspelt field key is one error: `chunk_axs` is read as `chunk_axis`,
//! so `status` is still split along the run axis it names, and the code
//! using the struct compiles.

use cubie_mem::{DeviceArray, GpuBuffers, MemoryManager, PinnedArray, SimBackend};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axs = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], memory = pinned)]
    status: PinnedArray<i32>,
}

fn main() {
    let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    let solver = mgr
        .register(Outputs::registration().on_invalidate(|| {}))
        .unwrap();
    let dims = RunDims {
        n_states: 3,
        n_runs: 100,
    };
    let outputs = mgr.allocate_buffers::<Outputs>(&solver, &dims).unwrap();
    let _ = (outputs.state.shape(), outputs.status.shape());
}
