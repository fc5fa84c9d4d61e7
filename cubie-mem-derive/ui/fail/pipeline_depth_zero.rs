use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims, pipeline_depth = 0)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

fn main() {}
