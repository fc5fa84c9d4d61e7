use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Inputs {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    x: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Solver {
    #[buffer(part, shape = [n_runs], label = "inputs")]
    inputs: Inputs,
}

fn main() {}
