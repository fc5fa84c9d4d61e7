//! A misspelt `dims` key is one error: the fallback impl reads the dims type
//! from the misspelt key, so the code passing dims to the struct compiles.

use cubie_mem::{DeviceArray, GpuBuffers, MemoryManager, SimBackend};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dim = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
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
    let _ = Outputs::requests(&dims);
    let outputs = mgr.allocate_buffers::<Outputs>(&solver, &dims).unwrap();
    let _ = outputs.state.shape();
}
