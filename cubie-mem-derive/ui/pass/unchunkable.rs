//! `unchunkable`: allocated whole in every chunk.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [n_states, n_runs], unchunkable)]
    everything: DeviceArray<f64>,
    #[buffer(shape = [n_states], unchunkable)]
    initial: DeviceArray<f64>,
}

fn main() {
    let requests = Buffers::requests(&Dims {
        n_states: 3,
        n_runs: 40,
    });
    for (_, request) in requests.iter() {
        assert!(request.is_flagged_unchunkable());
        assert!(!request.is_chunkable());
        assert_eq!(request.runs(), 1);
    }
}
