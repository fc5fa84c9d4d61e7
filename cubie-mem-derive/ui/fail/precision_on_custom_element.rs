//! `precision = ..` on a buffer of the user's own element type: the macro
//! cannot tell what `State` is, so the generated code asserts it, and the
//! one error is at the `precision` token.

use cubie_mem::{DType, DeviceArray, Element, GpuBuffers};

#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct State {
    pub y: f64,
    pub dy: f64,
}

impl Element for State {
    const DTYPE: DType = DType::of::<Self>("State");
}

pub struct RunDims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = f64)]
    state: DeviceArray<State>,
}

fn main() {}
