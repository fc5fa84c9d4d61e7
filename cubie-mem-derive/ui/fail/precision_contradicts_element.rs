//! A precision the field's element type contradicts: for an element type
//! that is a precision the message suggests it, for one that is not (an
//! integer) it suggests leaving `precision` out.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, precision = f32)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = f32)]
    status: DeviceArray<i32>,
}

fn main() {}
