use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Outputs {
    #[buffer(shape = [n_runs], chunk_axis = 0, output)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = 0, input)]
    x: DeviceArray<f64>,
}

fn main() {}
