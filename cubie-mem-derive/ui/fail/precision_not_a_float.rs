use cubie_mem::{GpuBuffers, PinnedArray};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = i32)]
    status: PinnedArray<i32>,
}

fn main() {}
