//! A struct of parts: buffer structs of their own, marked
//! `#[buffer(part)]`, requested, planned and taken together under one
//! owner; the whole's `pipeline_depth` given to every part's requests; the
//! dims and stream group taken from the first part when the whole names
//! none; a generic whole over generic parts.

use cubie_mem::{
    DeviceArray, GpuBuffers, ManagerConfig, MemoryManager, PinnedArray, Precision, SimBackend,
    SingleBufferSet,
};

pub struct Dims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = Dims)]
pub struct Inputs<P: Precision> {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    initial_values: DeviceArray<P>,
    #[buffer(shape = [4], unchunkable)]
    coefficients: DeviceArray<P>,
}

#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = Dims)]
pub struct Outputs<P: Precision> {
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<P>,
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    status_codes: PinnedArray<i32>,
}

#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Solver<P: Precision> {
    #[buffer(part)]
    inputs: Inputs<P>,
    #[buffer(part)]
    outputs: Outputs<P>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    iterations: DeviceArray<i32>,
}

/// Parts alone: dims and group are the first part's; no depth, and every
/// part a single set, so the whole is one too.
#[derive(GpuBuffers)]
pub struct Pair {
    #[buffer(part)]
    inputs: Inputs<f32>,
    #[buffer(part)]
    outputs: Outputs<f32>,
}

fn single<B: SingleBufferSet>() {}

fn main() {
    single::<Pair>();
    assert_eq!(
        Solver::<f64>::LABELS,
        ["iterations", "initial_values", "coefficients", "state", "status_codes"]
    );
    assert_eq!(Pair::STREAM_GROUP, "solver");
    let dims = Dims {
        n_states: 3,
        n_saves: 5,
        n_runs: 1000,
    };
    let requests = Solver::<f64>::requests(&dims);
    assert_eq!(requests.len(), 5);
    for (_, request) in requests.iter() {
        assert_eq!(request.depth(), 2, "the whole's depth reaches every part");
    }
    let mgr = MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(60_000),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    );
    let holder = mgr
        .register(Solver::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let solver = mgr.allocate_buffers::<Solver<f64>>(&holder, &dims).unwrap();
    assert!(solver.plan().chunks() > 1, "one plan for every part");
    assert_eq!(solver.sets().len(), 2);
    let length = solver.plan().chunk_length();
    for set in solver.sets() {
        assert_eq!(set.inputs.initial_values.shape(), [3, length]);
        assert_eq!(set.outputs.state.shape(), [5, 3, length]);
        assert_eq!(set.outputs.status_codes.shape(), [length]);
        assert_eq!(set.inputs.coefficients.shape(), [4]);
        assert_eq!(set.iterations.shape(), [length]);
    }
}
