//! A host mirror beside a generic struct: its fields are the directed
//! buffers, with the struct's generics (a parameter no host array names
//! included), made from the struct's requests and bound in one call.

use cubie_mem::{
    DeviceArray, Element, GpuBuffers, HostArray, HostBuffers, HostMemoryKind, MemoryManager,
    PinnedArray, Precision, SimBackend,
};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims, host = MixedHost)]
pub struct Mixed<P: Precision, I = u8, S = i64>
where
    I: Element + Copy,
    S: Element,
{
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, input)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs, output, host_memory = pinned)]
    flags: PinnedArray<I>,
    #[buffer(shape = [n_runs, 2], chunk_axis = 0, inout, label = "pair")]
    pairs: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    scratch: DeviceArray<S>,
}

/// A mirror binds to its own struct.
fn binds<H: HostBuffers<B>, B>() {}

fn main() {
    binds::<MixedHost<f32>, Mixed<f32>>();
    let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    let holder = mgr
        .register(Mixed::<f32>::registration().on_invalidate(|| {}))
        .unwrap();
    let dims = Dims { n_states: 2, n_runs: 8 };
    let host: MixedHost<f32, u8, i64> =
        MixedHost::new(&mgr, &dims, HostMemoryKind::Pageable, &holder).unwrap();
    let state: &HostArray<f32> = &host.state;
    assert_eq!(state.shape(), [2, 8]);
    assert_eq!(host.flags.kind(), HostMemoryKind::Pinned);
    assert_eq!(host.pairs.shape(), [8, 2]);
    assert_eq!(host.pairs.kind(), HostMemoryKind::Pageable);
}
