use cubie_mem::{DeviceArray, GpuBuffers};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs {
    #[buffer(shape = n_runs, chunk_axis = 0)]
    a: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = "n_runs")]
    b: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = host)]
    c: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, label = d_label)]
    d: DeviceArray<f64>,
    #[buffer(shape = [n_states], unchunkable = true)]
    e: DeviceArray<f64>,
    #[buffer]
    f: DeviceArray<f64>,
}

fn main() {}
