//! A key too far from `dims` to be read as it, and a struct without `dims`:
//! one error each. The fallback impl's dims type then accepts whatever the
//! code using the struct passes.

use cubie_mem::{DeviceArray, GpuBuffers, MemoryManager, SimBackend};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dimensions = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
pub struct Inputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    params: DeviceArray<f64>,
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
    mgr.queue_request(&solver, Inputs::requests(&dims)).unwrap();
    let outputs = mgr.allocate_buffers::<Outputs>(&solver, &dims).unwrap();
    let _ = outputs.state.shape();
}
