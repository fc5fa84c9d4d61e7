use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(chunk_axis = 1)]
    state: DeviceArray<f64>,
    initial: DeviceArray<f64>,
}

fn main() {}
