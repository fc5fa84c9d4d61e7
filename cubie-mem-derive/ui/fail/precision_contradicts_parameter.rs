use cubie_mem::{DeviceArray, GpuBuffers, Precision};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Outputs<P: Precision> {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = f32)]
    state: DeviceArray<P>,
}

fn main() {}
