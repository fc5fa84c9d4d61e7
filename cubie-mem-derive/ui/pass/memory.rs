//! `memory = device | pinned` restates the field type's placement.

use cubie_mem::{DeviceArray, GpuBuffers, MemoryKind, PinnedArray};

pub struct Dims {
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims)]
pub struct Buffers {
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = device)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, memory = pinned)]
    status: PinnedArray<i32>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    staged: PinnedArray<f64>,
}

fn main() {
    let requests = Buffers::requests(&Dims { n_runs: 8 });
    assert_eq!(
        requests.get("state").unwrap().memory_kind(),
        MemoryKind::Device
    );
    assert_eq!(
        requests.get("status").unwrap().memory_kind(),
        MemoryKind::Pinned
    );
    assert_eq!(
        requests.get("staged").unwrap().memory_kind(),
        MemoryKind::Pinned
    );
}
