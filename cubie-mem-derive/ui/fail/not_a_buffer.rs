use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: Vec<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    status: DeviceArray<i32>,
}

fn main() {}
