//! A user's own element type, a `#[repr(C)]` `bytemuck::Pod` struct opted in
//! with one impl, in device and pinned buffers, beside a type parameter and
//! a generic element of the user's.

use cubie_mem::{
    DType, DeviceArray, Element, GpuBuffers, MemoryManager, PinnedArray, Precision, SimBackend,
};

/// The state of one run.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct State {
    pub y: f64,
    pub dy: f64,
}

impl Element for State {
    const DTYPE: DType = DType::of::<Self>("State");
}

/// An element of the user's, generic over its precision.
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Scaled<P>(pub P);

impl Element for Scaled<f32> {
    const DTYPE: DType = DType::of::<Self>("Scaled<f32>");
}

pub struct RunDims {
    pub n_states: usize,
    pub n_runs: usize,
}

#[derive(GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Outputs<P: Precision>
where
    Scaled<P>: Element,
{
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<State>,
    #[buffer(shape = [n_runs], memory = pinned)]
    last: PinnedArray<State>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    scaled: DeviceArray<Scaled<P>>,
    #[buffer(shape = [n_runs], precision = P)]
    times: DeviceArray<P>,
}

fn main() {
    let dims = RunDims {
        n_states: 3,
        n_runs: 10,
    };
    let dtypes: Vec<String> = Outputs::<f32>::requests(&dims)
        .iter()
        .map(|(_, request)| request.dtype().to_string())
        .collect();
    assert_eq!(dtypes, ["State", "State", "Scaled<f32>", "f32"]);

    let mgr = MemoryManager::new(SimBackend::new(1 << 30));
    let solver = mgr
        .register(Outputs::<f32>::registration().on_invalidate(|| {}))
        .unwrap();
    let outputs = mgr.allocate_buffers::<Outputs<f32>>(&solver, &dims).unwrap();
    assert_eq!(outputs.state.shape(), [3, 10]);
    assert_eq!(outputs.state.nbytes(), 30 * 16);
    let states = [State { y: 1.0, dy: -0.5 }; 30];
    outputs.state.copy_from_host(&states).unwrap();
    let mut back = [State { y: 0.0, dy: 0.0 }; 30];
    outputs.state.copy_to_host(&mut back).unwrap();
    assert_eq!(back, states);
    assert_eq!(outputs.last.shape(), [10]);
    assert_eq!(outputs.scaled.shape(), [10]);
}
