use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Flags {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    flags: DeviceArray<bool>,
}

fn main() {}
