use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub enum Outputs {
    Single(DeviceArray<f64>),
    Double(DeviceArray<f64>, DeviceArray<f64>),
}

fn main() {}
