//! Strided copies on the fake driver: a pipeline streams pinned `[saves,
//! states, runs]` arrays along their last axis by one `cuMemcpy2DAsync_v2`
//! per array and chunk, both ways, with every byte right and no violation
//! (page-locked rows, device rows in one live allocation, races per row);
//! both devices of a set copy the rows of device 0's pinned arrays
//! directly; and figures the driver must not see are refused before it is
//! called.

use cubie_mem::backend::{Backend, BackendError, StridedRows};
use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, DeviceSet, GpuBuffers, HostMemoryKind, ManagerConfig,
    Registration, Throughput,
};
use cubie_mem_examples::euler_decay::EulerDecay;

use super::*;

const SAVES: usize = 3;
const STATES: usize = 4;
const CHUNK_RUNS: usize = 512;
/// Six chunks, the last one 100 runs short (rows of 3,296 bytes).
const RUNS: usize = 6 * CHUNK_RUNS - 100;
const DT: f64 = 0.01;

/// One buffer set: the state, stepped in place, and the rates.
struct Set {
    y: DeviceArray<f64>,
    k: DeviceArray<f64>,
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn pinned_saves_states_runs_arrays_stream_along_their_last_axis_by_2d_copies() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(
            Registration::new()
                .stream_group("strided")
                .on_invalidate(|| {}),
        )
        .unwrap();
    let labels = ["y0", "k0", "y1", "k1"];
    let chunk = [SAVES, STATES, CHUNK_RUNS];
    mgr.queue_request(
        &solver,
        labels.map(|label| (label, ArrayRequest::of::<f64>(chunk).unchunkable())),
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let sets: Vec<Set> = (0..2)
        .map(|s| Set {
            y: response.take(labels[2 * s]).unwrap(),
            k: response.take(labels[2 * s + 1]).unwrap(),
        })
        .collect();
    let shape = [SAVES, STATES, RUNS];
    let (y0, rates) = euler_inputs(SAVES * STATES * RUNS);
    let pinned = HostMemoryKind::Pinned;
    let mut y = mgr
        .create_host_array(shape, pinned, Some(&y0), &solver)
        .unwrap();
    let k = mgr
        .create_host_array(shape, pinned, Some(&rates), &solver)
        .unwrap();
    let plan = ChunkPlan::new(RUNS, RUNS.div_ceil(CHUNK_RUNS), CHUNK_RUNS).unwrap();
    let decay = EulerDecay::load(&cuda).unwrap();
    let stream = GroupStream::of(&mgr, &solver).unwrap();
    let (strided, contiguous) = (
        fake.calls("cuMemcpy2DAsync_v2"),
        fake.calls("cuMemcpyHtoDAsync_v2") + fake.calls("cuMemcpyDtoHAsync_v2"),
    );
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .pipeline_sets(&sets)
        .inout_with(&mut y, |set| set.y.along(2))
        .input_with(&k, |set| set.k.along(2))
        .run(|_, set| decay.step(&stream, &set.y, &set.k, DT))
        .unwrap();
    fake.assert_clean();
    assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
    assert_eq!(
        fake.calls("cuMemcpy2DAsync_v2") - strided,
        3 * plan.chunks() as u64,
        "y up and down and k up: one 2D copy each a chunk"
    );
    assert_eq!(
        fake.calls("cuMemcpyHtoDAsync_v2") + fake.calls("cuMemcpyDtoHAsync_v2"),
        contiguous,
        "nothing staged"
    );
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn strided_copies_the_driver_must_not_see_are_refused_before_it_is_called() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let stream = cuda.create_stream().unwrap();
    let ptr = cuda.alloc_device(4096, &*stream).unwrap();
    let block = cuda.alloc_pinned(4096).unwrap();
    let src = block.bytes().as_ptr();
    let calls = fake.calls("cuMemcpy2DAsync_v2");
    let copy = |rows: StridedRows, offset: u64, src: *const u8| {
        // SAFETY: nothing is queued (each is refused); the block outlives it.
        unsafe { stream.copy_to_device_strided_async(ptr, offset, src, rows) }
    };
    let error = copy(StridedRows::new(64, 4, 32, 64), 0, src).unwrap_err();
    assert!(matches!(error, BackendError::BadStride { .. }), "{error}");
    // The last device row ends at 3 * 1024 + 1024 = 4096: from 8 it passes.
    let error = copy(StridedRows::new(1024, 4, 1024, 1024), 8, src).unwrap_err();
    assert!(matches!(error, BackendError::OutOfBounds { .. }), "{error}");
    // The last host row passes the page-locked block.
    let error = copy(StridedRows::new(64, 4, 1024, 64), 0, src.wrapping_add(1024)).unwrap_err();
    assert!(
        matches!(error, BackendError::NotPageLocked { .. }),
        "{error}"
    );
    let pageable = vec![0u8; 4096];
    let error = copy(StridedRows::new(64, 4, 1024, 64), 0, pageable.as_ptr()).unwrap_err();
    assert!(
        matches!(error, BackendError::NotPageLocked { .. }),
        "{error}"
    );
    assert_eq!(
        fake.calls("cuMemcpy2DAsync_v2"),
        calls,
        "the driver saw none"
    );
    cuda.free_device(ptr, 4096, &*stream).unwrap();
    stream.synchronize().unwrap();
}

pub struct Dims {
    pub n_states: usize,
    pub n_runs: usize,
}

/// A `[states, runs]` state and its rates, two buffer sets.
#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct States {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    y: DeviceArray<f64>,
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    k: DeviceArray<f64>,
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn both_devices_of_a_set_copy_the_rows_of_device_0s_pinned_arrays_directly() {
    let fake = Fake::open();
    let set = DeviceSet::cuda(ManagerConfig::default().granule(0)).unwrap();
    assert_eq!(set.len(), 2, "the fake lists two devices");
    let runs = 20_001;
    let buffers = set
        .allocate::<States>(
            runs,
            &Throughput::Equal,
            |_| States::registration().on_invalidate(|| {}),
            |n_runs| Dims {
                n_states: STATES,
                n_runs,
            },
        )
        .unwrap();
    let (kernels, streams) = set_kernels(&set, &buffers);
    let (y0, rates) = euler_inputs(STATES * runs);
    let first = &set.managers()[0];
    let holder = first.register(Registration::new()).unwrap();
    let pinned = HostMemoryKind::Pinned;
    let mut y = first
        .create_host_array([STATES, runs], pinned, Some(&y0), &holder)
        .unwrap();
    let k = first
        .create_host_array([STATES, runs], pinned, Some(&rates), &holder)
        .unwrap();
    let (strided, contiguous) = (
        fake.calls("cuMemcpy2DAsync_v2"),
        fake.calls("cuMemcpyHtoDAsync_v2") + fake.calls("cuMemcpyDtoHAsync_v2"),
    );
    buffers
        .pipeline()
        .inout(&mut y, |set| &set.y)
        .input(&k, |set| &set.k)
        .run(|device, _, set| kernels[device].step(&streams[device], &set.y, &set.k, DT))
        .unwrap();
    fake.assert_clean();
    assert_one_euler_step(y.as_slice(), &y0, &rates, DT);
    let chunks: usize = buffers
        .portions()
        .iter()
        .map(|share| share.buffers().plan().chunks())
        .sum();
    assert_eq!(
        fake.calls("cuMemcpy2DAsync_v2") - strided,
        3 * chunks as u64,
        "y up and down and k up on both devices: one 2D copy each a chunk"
    );
    assert_eq!(
        fake.calls("cuMemcpyHtoDAsync_v2") + fake.calls("cuMemcpyDtoHAsync_v2"),
        contiguous,
        "nothing staged"
    );
    drop(buffers);
}

#[test]
#[ignore = "needs the fake driver of ci/fake-cuda on the loader's path"]
fn copy_in_and_copy_out_of_a_pinned_chunk_are_one_2d_copy_each() {
    let fake = Fake::open();
    let cuda = CudaBackend::new(0).unwrap();
    let mgr = manager(&cuda);
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let chunk = [STATES, CHUNK_RUNS];
    mgr.queue_request(
        &solver,
        [("x", ArrayRequest::of::<f64>(chunk).unchunkable())],
    )
    .unwrap();
    let device = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("x")
        .unwrap();
    let (values, _) = euler_inputs(STATES * RUNS);
    let pinned = HostMemoryKind::Pinned;
    let host = mgr
        .create_host_array([STATES, RUNS], pinned, Some(&values), &solver)
        .unwrap();
    let mut back = mgr
        .create_host_array::<f64>([STATES, RUNS], pinned, None, &solver)
        .unwrap();
    let plan = ChunkPlan::new(RUNS, RUNS.div_ceil(CHUNK_RUNS), CHUNK_RUNS).unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    let strided = fake.calls("cuMemcpy2DAsync_v2");
    for chunk in 0..plan.chunks() {
        streamer.copy_in(&host, &device, 1, chunk).unwrap();
        streamer.copy_out(&device, &mut back, 1, chunk).unwrap();
    }
    fake.assert_clean();
    assert_eq!(back.as_slice(), values);
    assert_eq!(
        fake.calls("cuMemcpy2DAsync_v2") - strided,
        2 * plan.chunks() as u64
    );
}
