use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Values<T> {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    values: DeviceArray<T>,
}

fn main() {}
