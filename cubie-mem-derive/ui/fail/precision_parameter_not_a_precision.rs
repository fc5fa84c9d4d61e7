use cubie_mem::{DeviceArray, Element, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs<T: Element> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, precision = T)]
    state: DeviceArray<T>,
}

fn main() {}
