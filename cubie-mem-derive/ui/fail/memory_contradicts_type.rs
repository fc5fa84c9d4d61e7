use cubie_mem::{DeviceArray, GpuBuffers, PinnedArray};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, memory = pinned)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = device)]
    status: PinnedArray<i32>,
}

fn main() {}
