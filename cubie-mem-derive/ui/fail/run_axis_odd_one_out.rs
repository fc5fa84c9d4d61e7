use cubie_mem::{DeviceArray, GpuBuffers};

pub struct KineticsDims {
    pub n_species: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

// The first chunked buffer is the one split along the wrong dimension: the
// two that agree set the run axis, and only the odd one is blamed.
#[derive(GpuBuffers)]
#[buffers(dims = KineticsDims)]
pub struct Outputs {
    #[buffer(shape = [n_saves, n_species, n_runs], chunk_axis = n_species)]
    traj: DeviceArray<f64>,
    #[buffer(shape = [n_species, n_runs], chunk_axis = n_runs)]
    final_state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    status: DeviceArray<i32>,
}

fn main() {}
