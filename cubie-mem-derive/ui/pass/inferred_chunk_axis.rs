//! A buffer with neither `chunk_axis` nor `unchunkable` is split along the
//! run axis the other buffers name, when that dimension is in its shape.

use cubie_mem::{DeviceArray, GpuBuffers, PinnedArray};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], memory = pinned)]
    status: PinnedArray<i32>,
    #[buffer(shape = [n_runs, n_states])]
    transposed: DeviceArray<f64>,
}

fn main() {
    let requests = Buffers::requests(&Dims {
        n_states: 3,
        n_runs: 40,
    });
    let status = requests.get("status").unwrap();
    assert_eq!((status.axis(), status.runs()), (Some(0), 40));
    let transposed = requests.get("transposed").unwrap();
    assert_eq!((transposed.axis(), transposed.runs()), (Some(0), 40));
}
