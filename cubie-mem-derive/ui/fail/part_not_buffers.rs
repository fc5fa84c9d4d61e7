use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

pub struct Plain {
    pub values: Vec<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Solver {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    state: DeviceArray<f64>,
    #[buffer(part)]
    extra: Plain,
}

fn main() {}
