use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims, host = InputsHost)]
pub struct Inputs {
    #[buffer(shape = [n_runs], chunk_axis = 0, input)]
    x: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Solver {
    #[buffer(part, input, host_memory = pinned)]
    inputs: Inputs,
}

fn main() {}
