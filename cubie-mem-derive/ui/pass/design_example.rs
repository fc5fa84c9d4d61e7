//! The struct of the design's opening example, allocated on the simulated device.

use cubie_mem::{
    DeviceArray, GpuBuffers, ManagerConfig, MemoryManager, PinnedArray, Precision, SimBackend,
};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = RunDims)]
pub struct Outputs<P: Precision> {
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], memory = pinned)]
    status: PinnedArray<i32>,
    #[buffer(shape = [n_states], unchunkable)]
    initial: DeviceArray<P>,
}

fn main() {
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let solver = mgr
        .register(Outputs::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let dims = RunDims {
        n_states: 3,
        n_saves: 10,
        n_runs: 100,
    };
    let outputs = mgr
        .allocate_buffers::<Outputs<f64>>(&solver, &dims)
        .unwrap();
    assert_eq!(outputs.state.shape(), [10, 3, 100]);
    assert_eq!(outputs.status.shape(), [100]);
    assert_eq!(outputs.initial.shape(), [3]);
    assert_eq!(outputs.plan().chunks(), 1);
    assert_eq!(Outputs::<f64>::STREAM_GROUP, "integrators");
    assert_eq!(Outputs::<f64>::LABELS, ["state", "status", "initial"]);
}
