use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims, host = OutputsHost)]
pub struct Outputs {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    state: DeviceArray<f64>,
}

fn main() {}
