use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
    pub n_samples: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Inputs {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    initial: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Outputs {
    #[buffer(shape = [n_samples], chunk_axis = 0)]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
pub struct Solver {
    #[buffer(part)]
    inputs: Inputs,
    #[buffer(part)]
    outputs: Outputs,
}

fn main() {}
