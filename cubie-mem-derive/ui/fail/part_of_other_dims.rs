use cubie_mem::{DeviceArray, GpuBuffers};

pub struct InputDims {
    pub n_runs: usize,
}

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = InputDims)]
pub struct Inputs {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    initial: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Solver {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    state: DeviceArray<f64>,
    #[buffer(part)]
    inputs: Inputs,
}

fn main() {}
