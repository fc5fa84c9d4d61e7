use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

type Real = f32;

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, precision = f64)]
    state: DeviceArray<Real>,
}

fn main() {}
