use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims, host = InputsHost)]
pub struct Inputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, input)]
    x: DeviceArray<f64>,
    #[buffer(shape = [n_states], unchunkable, input)]
    weights: DeviceArray<f64>,
}

fn main() {}
