//! `chunk_axis = <index>`: the run count is the length of that axis.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [n_states, n_runs], chunk_axis = 1)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs, n_states], chunk_axis = 0)]
    transposed: DeviceArray<f64>,
}

fn main() {
    let requests = Buffers::requests(&Dims {
        n_states: 3,
        n_runs: 50,
    });
    let state = requests.get("state").unwrap();
    assert_eq!(
        (state.shape(), state.axis(), state.runs()),
        (&[3, 50][..], Some(1), 50)
    );
    let transposed = requests.get("transposed").unwrap();
    assert_eq!(
        (transposed.shape(), transposed.axis(), transposed.runs()),
        (&[50, 3][..], Some(0), 50)
    );
}
