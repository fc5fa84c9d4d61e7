use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states * 2, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [3u32, n_runs], chunk_axis = 1)]
    flags: DeviceArray<u32>,
    #[buffer(shape = [dims.n_states], unchunkable)]
    initial: DeviceArray<f64>,
}

fn main() {}
