use cubie_mem::{DeviceArray, GpuBuffers};

pub struct SweepDims {
    pub n_points: usize,
    pub n_samples: usize,
}

// Neither dimension is used more or named like runs: both buffers are
// reported, with both candidates, and neither is prescribed.
#[derive(GpuBuffers)]
#[buffers(dims = SweepDims)]
pub struct Sweep {
    #[buffer(shape = [n_points, n_samples], chunk_axis = n_points)]
    grid: DeviceArray<f32>,
    #[buffer(shape = [n_samples], chunk_axis = n_samples)]
    weights: DeviceArray<f32>,
}

fn main() {}
