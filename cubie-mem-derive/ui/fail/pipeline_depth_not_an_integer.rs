use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims, pipeline_depth = two)]
pub struct Named {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims, pipeline_depth = 2u8)]
pub struct Suffixed {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims, pipeline_depth = 1.5)]
pub struct Fractional {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

fn main() {}
