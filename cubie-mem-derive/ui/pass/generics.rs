//! Type parameters beside the precision, and where-clauses, pass through.

use cubie_mem::{DType, DeviceArray, Element, GpuBuffers, PinnedArray, Precision};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[stream_group("mixed")]
#[buffers(dims = Dims)]
pub struct Mixed<P: Precision, I = u8>
where
    I: Element + Copy,
{
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    flags: PinnedArray<I>,
}

fn dtypes<B: GpuBuffers<Dims = Dims>>() -> Vec<DType> {
    B::requests(&Dims {
        n_states: 2,
        n_runs: 8,
    })
    .iter()
    .map(|(_, request)| request.dtype())
    .collect()
}

fn main() {
    assert_eq!(dtypes::<Mixed<f32>>(), [DType::F32, DType::U8]);
    assert_eq!(dtypes::<Mixed<f64, u64>>(), [DType::F64, DType::U64]);
    assert_eq!(<Mixed<f64, i32> as GpuBuffers>::STREAM_GROUP, "mixed");
}
