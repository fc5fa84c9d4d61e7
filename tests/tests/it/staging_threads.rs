//! Staged chunks gathered and scattered by several host threads: spilled
//! arrays streamed along each axis byte-exact with 1 and 4 threads, each
//! window cut into pieces on the modelled host engine, each host row it
//! copies costing a calibrated figure, and zero staging threads refused.

use std::time::Duration;

use cubie_mem::backend::Calibration;
use cubie_mem::timeline::{Activity, Timeline};
use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostKernel, HostMemoryKind, MemError, MemoryManager,
    Registration, SimBackend, StagingThreads,
};

/// A `[8, 16, 2048]` array of f64 (2 MiB): each staged window of a chunk
/// of more than half an axis holds at least 1 MiB, four pieces of 256 KiB.
const SHAPE: [usize; 3] = [8, 16, 2048];

/// The host's modelled busy time and the staging spans' names.
fn host_work(timeline: &Timeline) -> (u64, Vec<String>) {
    let staging = timeline
        .spans()
        .iter()
        .filter(|span| span.activity == Activity::HostStaging);
    let busy = staging
        .clone()
        .map(|span| span.end_ns - span.start_ns)
        .sum();
    (busy, staging.map(|span| span.name.clone()).collect())
}

/// Streams `y = 2 x + 1` over a spilled input and a spilled output chunked
/// along `axis` (a short last chunk) with `threads` staging threads, on a
/// host of `figures`; the output and the modelled host work.
fn stream_spilled(
    axis: usize,
    threads: usize,
    figures: &Calibration,
) -> (Vec<f64>, Vec<f64>, Timeline) {
    let sim = SimBackend::new(1 << 30).with_calibration(figures);
    let mgr = MemoryManager::new(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let runs = SHAPE[axis];
    let chunk_length = runs * 5 / 8;
    let mut chunk_shape = SHAPE.to_vec();
    chunk_shape[axis] = chunk_length;
    let request = || ArrayRequest::of::<f64>(chunk_shape.clone()).unchunkable();
    mgr.queue_request(&solver, [("x", request()), ("y", request())])
        .unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let set: (DeviceArray<f64>, DeviceArray<f64>) =
        (response.take("x").unwrap(), response.take("y").unwrap());
    let plan = ChunkPlan::new(runs, 2, chunk_length).unwrap();
    let elements: usize = SHAPE.iter().product();
    let values: Vec<f64> = (0..elements).map(|i| i as f64 + 0.25).collect();
    let input = mgr
        .create_host_array(SHAPE, HostMemoryKind::Spilled, Some(&values), &solver)
        .unwrap();
    let mut output = mgr
        .create_host_array::<f64>(SHAPE, HostMemoryKind::Spilled, None, &solver)
        .unwrap();
    sim.clear_timeline();
    mgr.chunk_streamer(&solver, &plan)
        .unwrap()
        .with_staging_threads(StagingThreads::new(threads).unwrap())
        .pipeline_sets(std::slice::from_ref(&set))
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
    let expected = values.iter().map(|x| 2.0 * x + 1.0).collect();
    (output.as_slice().to_vec(), expected, sim.timeline())
}

#[test]
fn spilled_arrays_stream_byte_exact_along_each_axis_with_one_and_four_threads() {
    for axis in 0..SHAPE.len() {
        let (one, expected, one_timeline) = stream_spilled(axis, 1, &Calibration::fixed());
        let (four, _, four_timeline) = stream_spilled(axis, 4, &Calibration::fixed());
        assert!(one == expected, "axis {axis}, 1 thread: wrong results");
        assert!(four == expected, "axis {axis}, 4 threads: wrong results");
        let (one_busy, one_names) = host_work(&one_timeline);
        let (four_busy, four_names) = host_work(&four_timeline);
        assert!(
            one_names.iter().all(|name| !name.contains("threads")),
            "axis {axis}: one thread works alone: {one_names:?}"
        );
        assert!(
            four_names.iter().any(|name| name.ends_with("on 4 threads")),
            "axis {axis}: the full windows are cut in four: {four_names:?}"
        );
        assert!(
            four_busy * 2 < one_busy,
            "axis {axis}: 4 threads keep the modelled host busy {four_busy} ns, 1 thread \
             {one_busy} ns"
        );
    }
}

#[test]
fn each_host_row_a_window_gathers_or_scatters_costs_its_calibrated_figure() {
    // Along the last axis a chunk is 8 x 16 = 128 rows of its runs, one
    // window each; along the first, one block.
    let costly = Calibration {
        gather_row_ps: 1_000_000,
        scatter_row_ps: 2_000_000,
        ..Calibration::fixed()
    };
    for (axis, rows) in [(2, 128), (0, 1)] {
        let (free_busy, names) = host_work(&stream_spilled(axis, 1, &Calibration::fixed()).2);
        let (results, expected, timeline) = stream_spilled(axis, 1, &costly);
        assert!(results == expected, "axis {axis}: wrong results");
        let (costly_busy, costly_names) = host_work(&timeline);
        assert_eq!(names, costly_names, "axis {axis}");
        let in_rows = format!("in {rows} row(s)");
        assert!(
            names.len() == 4 && names.iter().all(|name| name.ends_with(&in_rows)),
            "axis {axis}: two chunks gathered and scattered, each {in_rows}: {names:?}"
        );
        // Two chunks' rows at 1 µs gathered and 2 µs scattered.
        assert_eq!(costly_busy - free_busy, 2 * rows * 3_000, "axis {axis}");
    }
}

#[test]
fn copy_in_and_copy_out_of_a_spilled_array_are_byte_exact_on_four_threads() {
    let sim = SimBackend::new(1 << 30);
    let mgr = MemoryManager::new(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    for axis in 0..SHAPE.len() {
        let runs = SHAPE[axis];
        let mut chunk_shape = SHAPE.to_vec();
        chunk_shape[axis] = runs / 2;
        mgr.queue_request(
            &solver,
            [("d", ArrayRequest::of::<f64>(chunk_shape).unchunkable())],
        )
        .unwrap();
        let device: DeviceArray<f64> = mgr.allocate_queue_for(&solver).unwrap().take("d").unwrap();
        let elements: usize = SHAPE.iter().product();
        let values: Vec<f64> = (0..elements).map(|i| i as f64 * 0.5).collect();
        let input = mgr
            .create_host_array(SHAPE, HostMemoryKind::Spilled, Some(&values), &solver)
            .unwrap();
        let mut output = mgr
            .create_host_array::<f64>(SHAPE, HostMemoryKind::Spilled, None, &solver)
            .unwrap();
        let plan = ChunkPlan::new(runs, 2, runs / 2).unwrap();
        let streamer = mgr
            .chunk_streamer(&solver, &plan)
            .unwrap()
            .with_staging_threads(StagingThreads::new(4).unwrap());
        for chunk in 0..2 {
            streamer.copy_in(&input, &device, axis, chunk).unwrap();
            streamer
                .copy_out(&device, &mut output, axis, chunk)
                .unwrap();
        }
        assert!(output.as_slice() == values.as_slice(), "axis {axis}");
    }
    let (_, names) = host_work(&sim.timeline());
    assert!(
        names.iter().any(|name| name.ends_with("on 4 threads")),
        "the windows are cut in four: {names:?}"
    );
}

#[test]
fn no_staging_thread_is_refused_with_the_fix() {
    let error = StagingThreads::new(0).unwrap_err();
    assert!(
        matches!(&error, MemError::Config { name, value, .. }
            if name == "StagingThreads::new" && value == "0"),
        "{error:?}"
    );
    assert_eq!(StagingThreads::new(1).unwrap().threads(), 1);
    assert_eq!(StagingThreads::new(3).unwrap().threads(), 3);
    let default = StagingThreads::default_count();
    assert!((1..=StagingThreads::MAX_DEFAULT_THREADS).contains(&default));
}
