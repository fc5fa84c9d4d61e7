use cubie_mem::GpuBuffers;

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub union Outputs {
    bits: u64,
    value: f64,
}

fn main() {}
