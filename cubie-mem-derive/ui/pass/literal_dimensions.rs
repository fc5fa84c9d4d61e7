//! Shape entries may be integer literals beside dims fields.

use cubie_mem::{DeviceArray, GpuBuffers};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [3, 2usize, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [16], unchunkable)]
    table: DeviceArray<u32>,
}

/// A batch of a fixed size: the run count is the literal on the chunk axis.
#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Fixed {
    #[buffer(shape = [4, 1_000], chunk_axis = 1)]
    fixed: DeviceArray<u8>,
}

fn main() {
    let requests = Buffers::requests(&Dims { n_runs: 1_000 });
    assert_eq!(requests.get("state").unwrap().shape(), [3, 2, 1_000]);
    assert_eq!(requests.get("table").unwrap().shape(), [16]);
    let requests = Fixed::requests(&Dims { n_runs: 1 });
    let fixed = requests.get("fixed").unwrap();
    assert_eq!((fixed.shape(), fixed.runs()), (&[4, 1_000][..], 1_000));
}
