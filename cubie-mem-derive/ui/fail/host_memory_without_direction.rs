use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims, host = OutputsHost)]
pub struct Outputs {
    #[buffer(shape = [n_runs], chunk_axis = 0, output)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = 0, host_memory = pinned)]
    scratch: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = 0, output, host_memory = locked)]
    y: DeviceArray<f64>,
}

/// Code using the mirror reports nothing more.
fn lengths(host: &OutputsHost) -> (usize, usize) {
    (host.state.len(), host.y.len())
}

fn main() {
    let _ = lengths;
}
