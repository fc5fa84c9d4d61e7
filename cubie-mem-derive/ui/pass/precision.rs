//! `precision = <type>` states the element type, for concrete and generic fields.

use cubie_mem::{DType, DeviceArray, GpuBuffers, PinnedArray, Precision};

pub struct Dims {
    pub n_runs: usize,
}

type Real = f32;

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers<P: Precision> {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = P)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = f64)]
    times: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, precision = f32)]
    scales: PinnedArray<Real>,
}

fn main() {
    let requests = Buffers::<f32>::requests(&Dims { n_runs: 8 });
    assert_eq!(requests.get("state").unwrap().dtype(), DType::F32);
    assert_eq!(requests.get("times").unwrap().dtype(), DType::F64);
    assert_eq!(requests.get("scales").unwrap().dtype(), DType::F32);
}
