use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
#[buffer(shape = [n_runs])]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    #[stream_group("integrators")]
    #[buffers(dims = RunDims)]
    state: DeviceArray<f64>,
}

fn main() {}
