//! `pipeline_depth = N` on the struct: every request carries depth N, and a
//! chunked allocation builds one struct per buffer set.

use cubie_mem::{DeviceArray, GpuBuffers, ManagerConfig, MemoryManager, SimBackend};

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 3usize)]
pub struct Buffers {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<f64>,
    #[buffer(shape = [n_states], unchunkable)]
    initial: DeviceArray<f64>,
}

#[derive(GpuBuffers)]
#[buffers(pipeline_depth = 1, dims = Dims)]
pub struct Sequential {
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    state: DeviceArray<f32>,
}

fn main() {
    let dims = Dims {
        n_states: 4,
        n_runs: 1000,
    };
    for (_, request) in Buffers::requests(&dims).iter() {
        assert_eq!(request.depth(), 3);
    }
    for (_, request) in Sequential::requests(&dims).iter() {
        assert_eq!(request.depth(), 1);
    }
    // 32 kB of per-run arrays on a device with 20 kB free: chunked, 3 sets.
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(20_000),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let holder = mgr
        .register(Buffers::registration().on_invalidate(|| {}))
        .unwrap();
    let buffers = mgr.allocate_buffers::<Buffers>(&holder, &dims).unwrap();
    assert_eq!(buffers.plan().buffer_sets(), 3);
    assert_eq!(buffers.sets().len(), 3);
    // `Buffers` is not `SingleBufferSet`: name the set.
    let first = buffers.set(0).unwrap();
    for set in buffers.sets() {
        assert_eq!(set.state.shape(), first.state.shape());
        assert_eq!(set.initial.shape(), [4]);
    }
}
