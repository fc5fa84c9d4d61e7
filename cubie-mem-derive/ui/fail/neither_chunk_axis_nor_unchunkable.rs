use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs])]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Mixed {
    #[buffer(shape = [n_saves, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_states])]
    initial: DeviceArray<f64>,
}

fn main() {}
