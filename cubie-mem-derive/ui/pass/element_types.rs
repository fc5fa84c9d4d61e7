//! Every primitive element type, on the device and pinned.

use cubie_mem::{DType, DeviceArray, GpuBuffers, PinnedArray};

pub struct Dims {
    pub n: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Everything {
    #[buffer(shape = [n], unchunkable)]
    a: DeviceArray<f32>,
    #[buffer(shape = [n], unchunkable)]
    b: DeviceArray<f64>,
    #[buffer(shape = [n], unchunkable)]
    c: DeviceArray<i32>,
    #[buffer(shape = [n], unchunkable)]
    d: DeviceArray<u8>,
    #[buffer(shape = [n], unchunkable)]
    e: PinnedArray<u32>,
    #[buffer(shape = [n], unchunkable)]
    f: PinnedArray<i64>,
    #[buffer(shape = [n], unchunkable)]
    g: PinnedArray<u64>,
}

fn main() {
    let dtypes: Vec<DType> = Everything::requests(&Dims { n: 4 })
        .iter()
        .map(|(_, request)| request.dtype())
        .collect();
    // The seven primitives: the tags after them need the features `half`
    // and `num-complex`.
    assert_eq!(dtypes, DType::ALL[..7]);
}
