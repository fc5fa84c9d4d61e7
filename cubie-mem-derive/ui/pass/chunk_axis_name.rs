//! `chunk_axis = <dim name>`: the axis where that dimension sits in the shape.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_saves: usize,
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f32>,
    #[buffer(shape = [n_runs, n_saves], chunk_axis = n_runs)]
    times: DeviceArray<f32>,
}

fn main() {
    let requests = Buffers::requests(&Dims {
        n_saves: 5,
        n_states: 3,
        n_runs: 20,
    });
    let state = requests.get("state").unwrap();
    assert_eq!((state.axis(), state.runs()), (Some(2), 20));
    let times = requests.get("times").unwrap();
    assert_eq!((times.axis(), times.runs()), (Some(0), 20));
}
