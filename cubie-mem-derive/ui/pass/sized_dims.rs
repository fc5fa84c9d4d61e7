//! `GpuBuffers::Dims` is sized: generic code can hold dims by value.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
}

/// Keeps the dims beside the buffers' requests.
struct Planned<B: GpuBuffers> {
    dims: B::Dims,
    requests: usize,
}

fn plan<B: GpuBuffers>(dims: B::Dims) -> Planned<B> {
    let requests = B::requests(&dims).len();
    Planned { dims, requests }
}

fn main() {
    let planned = plan::<Outputs>(RunDims {
        n_states: 3,
        n_runs: 100,
    });
    assert_eq!(planned.requests, 1);
    assert_eq!(planned.dims.n_runs * planned.dims.n_states, 300);
}
