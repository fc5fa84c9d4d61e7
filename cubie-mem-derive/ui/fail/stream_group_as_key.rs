//! `stream_group` is an attribute of its own, not a key: written as a key of
//! `#[buffers(..)]` or `#[buffer(..)]`, it is one error that names the
//! attribute to write, with the user's name in it.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims, stream_group = "integrators")]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(stream_group("loaders"), dims = RunDims)]
pub struct Inputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, stream_group = io)]
    params: DeviceArray<f64>,
}

fn main() {}
