//! Derived buffer structs allocated on the simulated device: one chunk,
//! several chunks, several structs planned together, and generic precision.

use std::sync::mpsc;

use cubie_mem::{
    ArrayResponse, DType, DeviceArray, GpuBuffers, ManagerConfig, MemError, MemoryKind,
    MemoryManager, PinnedArray, Precision, Registration, SimBackend,
};

pub struct RunDims {
    pub n_states: usize,
    pub n_saves: usize,
    pub n_params: usize,
    pub n_runs: usize,
}

const DIMS: RunDims = RunDims {
    n_states: 4,
    n_saves: 10,
    n_params: 2,
    n_runs: 1000,
};

/// The design's solver outputs.
#[derive(Debug, GpuBuffers)]
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

/// Inputs of the same solver, in the same stream group.
#[derive(Debug, GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = RunDims)]
pub struct Inputs {
    #[buffer(shape = [n_params, n_runs], chunk_axis = 1, label = "parameters")]
    params: DeviceArray<f64>,
    #[buffer(shape = [n_states, 2], unchunkable, precision = f64)]
    bounds: DeviceArray<f64>,
}

/// A manager without allocation granule, on a device with `free` bytes free.
fn manager(free: u64) -> MemoryManager {
    MemoryManager::with_config(
        SimBackend::new(1 << 30).with_free(free),
        ManagerConfig {
            allocation_granule_bytes: 0,
            ..Default::default()
        },
    )
}

#[test]
fn allocates_whole_batch_when_it_fits() {
    let mgr = manager(1 << 30);
    let solver = mgr
        .register(Outputs::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let outputs = mgr
        .allocate_buffers::<Outputs<f64>>(&solver, &DIMS)
        .unwrap();

    assert_eq!(outputs.state.shape(), [10, 4, 1000]);
    assert_eq!(outputs.status.shape(), [1000]);
    assert_eq!(outputs.initial.shape(), [4]);
    let plan = outputs.plan();
    assert!(!plan.is_chunked());
    assert_eq!(
        (plan.chunks(), plan.chunk_length(), plan.total_runs()),
        (1, 1000, 1000)
    );
    assert_eq!(mgr.stream_group(&solver), "integrators");

    outputs
        .initial
        .copy_from_host(&[1.0, 2.0, 3.0, 4.0])
        .unwrap();
    assert_eq!(outputs.initial.to_vec().unwrap(), [1.0, 2.0, 3.0, 4.0]);
    outputs.status.write().unwrap().fill(7);
    assert!(outputs.status.read().unwrap().iter().all(|&s| s == 7));
}

#[test]
fn splits_the_run_axis_when_the_batch_does_not_fit() {
    // Chunkable: state 10*4*1000*8 = 320000 B, status 1000*4 = 4000 B;
    // unchunkable: initial 4*8 = 32 B. With 100000 B free, 2% is withheld:
    // alloc = 98000, max_chunk = floor(1000 * (98000 - 32) / 324000) = 302,
    // chunks = ceil(1000 / 302) = 4, chunk_length = ceil(1000 / 4) = 250.
    let mgr = manager(100_000);
    let solver = mgr
        .register(Outputs::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let outputs = mgr
        .allocate_buffers::<Outputs<f64>>(&solver, &DIMS)
        .unwrap();

    let plan = *outputs.plan();
    assert_eq!(
        (plan.chunks(), plan.chunk_length(), plan.total_runs()),
        (4, 250, 1000)
    );
    assert_eq!(
        (plan.chunkable_bytes(), plan.unchunkable_bytes()),
        (324_000, 32)
    );
    assert_eq!(
        plan.iter_chunks().map(|c| c.runs).collect::<Vec<_>>(),
        [0..250, 250..500, 500..750, 750..1000]
    );
    assert_eq!(outputs.state.shape(), [10, 4, 250]);
    assert_eq!(outputs.status.shape(), [250]);
    assert_eq!(outputs.initial.shape(), [4]);

    let requests = Outputs::<f64>::requests(&DIMS);
    for (label, request) in requests.iter() {
        let expected: &[usize] = match label {
            "state" => &[10, 4, 250],
            "status" => &[250],
            _ => &[4],
        };
        assert_eq!(plan.chunked_shape(request), expected, "{label}");
    }
}

#[test]
fn structs_of_one_stream_group_share_one_plan() {
    let mgr = manager(100_000);
    let (delivered, inputs_response) = mpsc::channel::<ArrayResponse>();
    let inputs_holder = mgr
        .register(
            Inputs::registration()
                .on_invalidate(|| {})
                .on_allocation_ready(move |response| delivered.send(response).unwrap()),
        )
        .unwrap();
    let outputs_holder = mgr
        .register(
            Outputs::<f64>::registration()
                .owner(&inputs_holder)
                .on_invalidate(|| {}),
        )
        .unwrap();

    mgr.queue_request(&inputs_holder, Inputs::requests(&DIMS))
        .unwrap();
    let outputs = mgr
        .allocate_buffers::<Outputs<f64>>(&outputs_holder, &DIMS)
        .unwrap();
    let response = inputs_response.try_recv().unwrap();
    let plan = *response.plan();
    let inputs = Inputs::from_response(response).unwrap();

    assert_eq!(plan, *outputs.plan());
    assert!(plan.is_chunked());
    // Both structs' bytes were planned together: 324000 + 16000 chunkable.
    assert_eq!(plan.chunkable_bytes(), 340_000);
    assert_eq!(plan.unchunkable_bytes(), 32 + 64);
    let runs = plan.chunk_length();
    assert_eq!(outputs.state.shape(), [10, 4, runs]);
    assert_eq!(inputs.params.shape(), [2, runs]);
    assert_eq!(inputs.params.label(), "parameters");
    assert_eq!(inputs.bounds.shape(), [4, 2]);
}

#[test]
fn generic_precision_follows_the_caller() {
    let mgr = manager(1 << 30);
    let single = mgr
        .register(Outputs::<f32>::registration().on_invalidate(|| {}))
        .unwrap();
    let double = mgr
        .register(Outputs::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    let outputs_f32: cubie_mem::Allocated<Outputs<f32>> =
        mgr.allocate_buffers(&single, &DIMS).unwrap();
    let outputs_f64 = mgr
        .allocate_buffers::<Outputs<f64>>(&double, &DIMS)
        .unwrap();

    assert_eq!(outputs_f32.state.nbytes(), 10 * 4 * 1000 * 4);
    assert_eq!(outputs_f64.state.nbytes(), 10 * 4 * 1000 * 8);
    outputs_f32.initial.copy_from_host(&[0.5f32; 4]).unwrap();
    outputs_f64.initial.copy_from_host(&[0.25f64; 4]).unwrap();
    assert_eq!(outputs_f32.initial.to_vec().unwrap(), [0.5f32; 4]);
    assert_eq!(outputs_f64.initial.to_vec().unwrap(), [0.25f64; 4]);

    for (precision, requests) in [
        (DType::F32, Outputs::<f32>::requests(&DIMS)),
        (DType::F64, Outputs::<f64>::requests(&DIMS)),
    ] {
        assert_eq!(requests.get("state").unwrap().dtype(), precision);
        assert_eq!(requests.get("initial").unwrap().dtype(), precision);
        assert_eq!(requests.get("status").unwrap().dtype(), DType::I32);
    }
}

#[test]
fn requests_carry_the_declared_layout() {
    let requests = Outputs::<f64>::requests(&DIMS);
    assert_eq!(
        requests.labels().collect::<Vec<_>>(),
        Outputs::<f64>::LABELS
    );

    let state = requests.get("state").unwrap();
    assert_eq!(state.shape(), [10, 4, 1000]);
    assert_eq!(state.memory_kind(), MemoryKind::Device);
    assert_eq!((state.axis(), state.runs()), (Some(2), 1000));

    let status = requests.get("status").unwrap();
    assert_eq!(status.memory_kind(), MemoryKind::Pinned);
    assert_eq!((status.axis(), status.runs()), (Some(0), 1000));

    let initial = requests.get("initial").unwrap();
    assert!(initial.is_flagged_unchunkable());
    assert!(!initial.is_chunkable());
    assert_eq!(initial.runs(), 1);
}

#[test]
fn buffers_refuse_an_instance_of_another_stream_group() {
    let mgr = manager(1 << 30);
    let stray = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let error = mgr
        .allocate_buffers::<Outputs<f64>>(&stray, &DIMS)
        .unwrap_err();
    assert!(
        matches!(&error, MemError::StreamGroupMismatch { group, declared: "integrators", .. } if group == "default"),
        "{error}"
    );
    let error = mgr
        .queue_request(&stray, Inputs::requests(&DIMS))
        .unwrap_err();
    assert!(
        matches!(error, MemError::StreamGroupMismatch { .. }),
        "{error}"
    );
}

#[test]
fn from_response_reports_a_missing_buffer() {
    let mgr = manager(1 << 30);
    let holder = mgr
        .register(Inputs::registration().on_invalidate(|| {}))
        .unwrap();
    // Queue only one of the two requests: the response lacks "bounds".
    let partial = Inputs::requests(&DIMS)
        .into_iter()
        .filter(|(label, _)| label == "parameters");
    mgr.queue_request(&holder, partial).unwrap();
    let response = mgr.allocate_queue_for(&holder).unwrap();
    let error = Inputs::from_response(response).unwrap_err();
    assert!(
        matches!(&error, MemError::UnknownLabel { label, .. } if label == "bounds"),
        "{error}"
    );
}

/// A struct without `#[stream_group]`.
#[derive(Debug, GpuBuffers)]
#[buffers(dims = RunDims)]
pub struct Scratch {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    error: DeviceArray<f64>,
}

#[test]
fn registration_presets_the_struct_name_and_its_stream_group() {
    let mgr = manager(1 << 30);
    let outputs = mgr
        .register(Outputs::<f64>::registration().on_invalidate(|| {}))
        .unwrap();
    assert_eq!(outputs.name(), Some("Outputs"));
    assert_eq!(mgr.stream_group(&outputs), "integrators");

    let scratch = mgr
        .register(Scratch::registration().on_invalidate(|| {}))
        .unwrap();
    assert_eq!(Scratch::STREAM_GROUP, Registration::DEFAULT_STREAM_GROUP);
    assert_eq!(
        mgr.stream_group(&scratch),
        Registration::DEFAULT_STREAM_GROUP
    );
    let buffers = mgr.allocate_buffers::<Scratch>(&scratch, &DIMS).unwrap();
    assert_eq!(buffers.error.shape(), [DIMS.n_runs]);

    let renamed = mgr
        .register(Scratch::registration().name("errors").on_invalidate(|| {}))
        .unwrap();
    assert_eq!(renamed.name(), Some("errors"));
}

#[test]
fn the_preset_leaves_the_invalidate_hook_to_the_holder() {
    let mgr = manager(1 << 30);
    let careless = mgr.register(Scratch::registration()).unwrap();
    let error = mgr
        .allocate_buffers::<Scratch>(&careless, &DIMS)
        .unwrap_err();
    assert!(
        matches!(error, MemError::NoInvalidateHook { ref instance } if instance.starts_with("'Scratch'")),
        "{error}"
    );
}
