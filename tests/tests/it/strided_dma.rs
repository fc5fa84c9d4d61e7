//! Chunks of page-locked host arrays move by one strided copy of the copy
//! engines when their rows are wide enough, with no host work, and through
//! staging otherwise: byte-exact along every axis of 1-, 2- and 3-axis
//! arrays, the threshold on both sides, a short last chunk staged while
//! the others go by DMA, and a `DeviceSet` writing one pinned strided
//! output from two simulated devices.

use std::time::Duration;

use cubie_mem::timeline::{Activity, Timeline};
use cubie_mem::{
    ArrayRequest, ChunkPlan, ChunkStreamer, DeviceArray, DeviceSet, GpuBuffers, HostArray,
    HostKernel, HostMemoryKind, ManagerConfig, MemError, MemoryManager, Registration, SimBackend,
    Throughput,
};

/// The copies of `activity` that moved rows by one strided copy.
fn strided_copies(timeline: &Timeline, activity: Activity) -> usize {
    timeline
        .spans()
        .iter()
        .filter(|span| span.activity == activity && span.name.ends_with(" rows"))
        .count()
}

/// What one pipeline run over a pinned input and a pinned output did.
struct Streamed {
    output: Vec<f64>,
    expected: Vec<f64>,
    timeline: Timeline,
}

/// Streams `y = 2 x + 1` over a pinned `shape` array chunked along `axis`
/// in chunks of `chunk_length` runs, two buffer sets, with the streamer's
/// narrowest strided row `min_row`.
fn stream(shape: &[usize], axis: usize, chunk_length: usize, min_row: usize) -> Streamed {
    let sim = SimBackend::new(1 << 30);
    let mgr = MemoryManager::new(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let mut chunk_shape = shape.to_vec();
    chunk_shape[axis] = chunk_length;
    let request = || ArrayRequest::of::<f64>(chunk_shape.clone()).unchunkable();
    mgr.queue_request(
        &solver,
        [
            ("x0", request()),
            ("y0", request()),
            ("x1", request()),
            ("y1", request()),
        ],
    )
    .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let sets: Vec<(DeviceArray<f64>, DeviceArray<f64>)> = (0..2)
        .map(|set| {
            (
                response.take(&format!("x{set}")).unwrap(),
                response.take(&format!("y{set}")).unwrap(),
            )
        })
        .collect();
    let runs = shape[axis];
    let plan = ChunkPlan::new(runs, runs.div_ceil(chunk_length), chunk_length).unwrap();
    let elements: usize = shape.iter().product();
    let values: Vec<f64> = (0..elements).map(|i| i as f64 + 0.25).collect();
    let input = mgr
        .create_host_array(shape, HostMemoryKind::Pinned, Some(&values), &solver)
        .unwrap();
    let mut output = mgr
        .create_host_array::<f64>(shape, HostMemoryKind::Pinned, None, &solver)
        .unwrap();
    sim.clear_timeline();
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .with_min_strided_row_bytes(min_row)
        .pipeline_sets(&sets)
        .input_with(&input, |(x, _)| x.along(axis))
        .output_with(&mut output, |(_, y)| y.along(axis))
        .run(|_, (x, y)| {
            HostKernel::new("affine", Duration::from_micros(1))
                .reads(x)
                .writes(y)
                .launch(|args| {
                    let (x, y) = (args.read(x)?, args.write(y)?);
                    y.iter_mut().zip(x).for_each(|(y, x)| *y = 2.0 * x + 1.0);
                    Ok::<_, MemError>(())
                })
        })
        .unwrap();
    Streamed {
        output: output.as_slice().to_vec(),
        expected: values.iter().map(|x| 2.0 * x + 1.0).collect(),
        timeline: sim.timeline(),
    }
}

#[test]
fn chunks_along_each_axis_of_pinned_arrays_move_byte_exact_without_host_work() {
    let default = ChunkStreamer::DEFAULT_MIN_STRIDED_ROW_BYTES;
    for shape in [vec![40], vec![6, 40], vec![3, 40, 5], vec![40, 4, 6]] {
        for axis in 0..shape.len() {
            let chunk_length = if shape[axis] == 40 { 8 } else { 2 };
            let streamed = stream(&shape, axis, chunk_length, default);
            assert_eq!(
                streamed.output, streamed.expected,
                "shape {shape:?} along axis {axis}"
            );
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            let row_bytes = chunk_length * inner * 8;
            if row_bytes < default {
                continue;
            }
            let timeline = &streamed.timeline;
            assert_eq!(
                timeline.busy_ns(Activity::HostStaging),
                0,
                "shape {shape:?} along axis {axis}: no gather or scatter"
            );
            let chunks = shape[axis].div_ceil(chunk_length);
            let strided = if outer > 1 { chunks } else { 0 };
            assert_eq!(
                strided_copies(timeline, Activity::HostToDevice),
                strided,
                "shape {shape:?} along axis {axis}: one strided upload a chunk unless contiguous"
            );
            assert_eq!(strided_copies(timeline, Activity::DeviceToHost), strided);
        }
    }
}

#[test]
fn a_narrow_row_is_staged_and_a_wide_row_moves_by_dma() {
    let default = ChunkStreamer::DEFAULT_MIN_STRIDED_ROW_BYTES;
    // [8, 40] f64 along axis 1: rows of 8 x chunk_length bytes.
    for (chunk_length, min_row, dma) in [
        (4, default, true),      // 32 bytes: at the threshold
        (3, default, false),     // 24 bytes: under it
        (20, default, true),     // 160 bytes
        (20, usize::MAX, false), // every strided chunk staged
        (1, 8, true),            // a lower threshold moves 8-byte rows
    ] {
        let streamed = stream(&[8, 40], 1, chunk_length, min_row);
        assert_eq!(
            streamed.output, streamed.expected,
            "chunks of {chunk_length}"
        );
        let timeline = &streamed.timeline;
        let chunks = 40usize.div_ceil(chunk_length);
        let staged = timeline.busy_ns(Activity::HostStaging);
        if dma {
            assert_eq!(staged, 0, "chunks of {chunk_length}: by DMA");
            assert_eq!(strided_copies(timeline, Activity::HostToDevice), chunks);
            assert_eq!(strided_copies(timeline, Activity::DeviceToHost), chunks);
        } else {
            assert!(staged > 0, "chunks of {chunk_length}: staged");
            assert_eq!(strided_copies(timeline, Activity::HostToDevice), 0);
            assert_eq!(strided_copies(timeline, Activity::DeviceToHost), 0);
        }
    }
}

#[test]
fn a_short_last_chunk_under_the_threshold_is_staged_and_the_others_move_by_dma() {
    // [4, 10] f64 in chunks of 4 runs: rows of 32, 32 and 16 bytes.
    let streamed = stream(&[4, 10], 1, 4, ChunkStreamer::DEFAULT_MIN_STRIDED_ROW_BYTES);
    assert_eq!(streamed.output, streamed.expected);
    let timeline = &streamed.timeline;
    assert_eq!(strided_copies(timeline, Activity::HostToDevice), 2);
    assert_eq!(strided_copies(timeline, Activity::DeviceToHost), 2);
    // The last chunk's rows gathered, and scattered: 3 rows of 4 runs
    // (the unused ones) and one of 2, 14 values.
    let host: Vec<_> = timeline
        .spans()
        .iter()
        .filter(|span| span.activity == Activity::HostStaging)
        .map(|span| span.bytes)
        .collect();
    assert_eq!(host, [112, 112]);
}

pub struct Dims {
    pub n_saves: usize,
    pub n_states: usize,
    pub n_runs: usize,
}

/// Results laid out as cubie's: `[saves, states, runs]`, chunked along the
/// runs, pinned on the host.
#[derive(GpuBuffers)]
#[buffers(dims = Dims, pipeline_depth = 2)]
pub struct Results {
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    initial: DeviceArray<f64>,
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
    saved: DeviceArray<f64>,
}

const SAVES: usize = 5;
const STATES: usize = 3;

/// `saved[s][i][run] = (s + 1) * initial[i][run]`.
fn integrate(set: &Results) -> Result<(), MemError> {
    let length = set.initial.shape()[1];
    HostKernel::new("save", Duration::from_micros(2))
        .reads(&set.initial)
        .writes(&set.saved)
        .launch(|args| {
            let (initial, saved) = (args.read(&set.initial)?, args.write(&set.saved)?);
            for (index, out) in saved.iter_mut().enumerate() {
                let save = index / (STATES * length);
                *out = (save + 1) as f64 * initial[index % (STATES * length)];
            }
            Ok(())
        })
}

#[test]
fn a_device_set_writes_a_pinned_strided_output_by_dma_on_every_device() {
    let devices = (0..2).map(|_| SimBackend::new(1 << 30).with_free(256 << 10));
    let set = DeviceSet::simulated(devices, ManagerConfig::default().granule(0));
    let runs = 6_000;
    let dims = |runs| Dims {
        n_saves: SAVES,
        n_states: STATES,
        n_runs: runs,
    };
    let buffers = set
        .allocate::<Results>(
            runs,
            &Throughput::Equal,
            |_| Results::registration().on_invalidate(|| {}),
            dims,
        )
        .unwrap();
    assert!(
        buffers
            .portions()
            .iter()
            .all(|share| share.buffers().plan().chunks() > 1),
        "each device streams several chunks"
    );
    let maker = set.manager(0).unwrap();
    let holder = maker.register(Registration::new()).unwrap();
    let values: Vec<f64> = (0..STATES * runs).map(|i| i as f64 + 0.5).collect();
    let initial: HostArray<f64> = maker
        .create_host_array(
            [STATES, runs],
            HostMemoryKind::Pinned,
            Some(&values),
            &holder,
        )
        .unwrap();
    let mut saved: HostArray<f64> = maker
        .create_host_array([SAVES, STATES, runs], HostMemoryKind::Pinned, None, &holder)
        .unwrap();
    buffers
        .pipeline()
        .input(&initial, |set| &set.initial)
        .output(&mut saved, |set| &set.saved)
        .run(|_, _, set| integrate(set))
        .unwrap();
    let expected: Vec<f64> = (0..SAVES)
        .flat_map(|save| values.iter().map(move |x| (save + 1) as f64 * x))
        .collect();
    assert_eq!(saved.as_slice(), expected, "every byte of every save");
    let report = set.report().unwrap();
    for (device, timeline) in report.timelines().iter().enumerate() {
        assert_eq!(
            timeline.busy_ns(Activity::HostStaging),
            0,
            "device {device}: no gather or scatter"
        );
        let chunks = buffers.portions()[device].buffers().plan().chunks();
        assert_eq!(
            strided_copies(timeline, Activity::DeviceToHost),
            chunks,
            "device {device}: one strided download a chunk"
        );
        assert_eq!(strided_copies(timeline, Activity::HostToDevice), chunks);
    }
}

#[test]
fn copy_in_and_copy_out_move_a_pinned_chunks_rows_by_one_strided_copy() {
    let sim = SimBackend::new(1 << 30);
    let mgr = MemoryManager::new(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    mgr.queue_request(
        &solver,
        [("x", ArrayRequest::of::<f64>([5, 8]).unchunkable())],
    )
    .unwrap();
    let device = mgr
        .allocate_queue_for(&solver)
        .unwrap()
        .take::<f64>("x")
        .unwrap();
    // [5, 40] along axis 1 in chunks of 8: rows of 64 bytes, 320 apart.
    let plan = ChunkPlan::new(40, 5, 8).unwrap();
    let values: Vec<f64> = (0..200).map(f64::from).collect();
    let pinned = HostMemoryKind::Pinned;
    let host = mgr
        .create_host_array([5, 40], pinned, Some(&values), &solver)
        .unwrap();
    let mut back = mgr
        .create_host_array::<f64>([5, 40], pinned, None, &solver)
        .unwrap();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    sim.clear_timeline();
    streamer.copy_in(&host, &device, 1, 2).unwrap();
    let expected: Vec<f64> = (0..5)
        .flat_map(|row| (16..24).map(move |run| f64::from(row * 40 + run)))
        .collect();
    assert_eq!(device.to_vec().unwrap(), expected);
    for chunk in 0..5 {
        streamer.copy_in(&host, &device, 1, chunk).unwrap();
        streamer.copy_out(&device, &mut back, 1, chunk).unwrap();
    }
    assert_eq!(back.as_slice(), values);
    let timeline = sim.timeline();
    assert_eq!(timeline.busy_ns(Activity::HostStaging), 0, "nothing staged");
    assert_eq!(strided_copies(&timeline, Activity::HostToDevice), 6);
    assert_eq!(strided_copies(&timeline, Activity::DeviceToHost), 5);
}
