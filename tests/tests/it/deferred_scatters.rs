//! Staged results scattered while the device works on, on the modelled
//! clock (deterministic): a staged binding downloads into two staging
//! buffers in turn, the host scatters each chunk once its download has
//! landed and feeds the device between scatters, so the host track has no
//! gap while a landed chunk waits, and the batch takes its busiest engine's
//! time plus the pipeline's fill. With one staging buffer (the pool gives
//! no second) the results are the same, byte for byte.

use crate::common;
use std::time::Duration;

use cubie_mem::backend::Calibration;
use cubie_mem::timeline::{Activity, Span, Timeline};
use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostMemoryKind, Registration, SimBackend, StagingPool,
    StagingThreads,
};

/// Runs per chunk: a chunk of `f32` is 4000 bytes, 4 µs on a copy engine
/// of 1 byte/ns.
const CHUNK_RUNS: usize = 1000;
/// The modelled kernel time of each chunk.
const KERNEL: Duration = Duration::from_micros(4);

/// One buffer set: a chunk's input and its result.
struct Set {
    input: DeviceArray<f32>,
    output: DeviceArray<f32>,
}

/// Streams `chunks` chunks through two buffer sets, inputs page-locked and
/// results pageable (so staged), scattered on one thread at
/// `host_bandwidth`; the timeline of the run. `single_buffer`: the staging
/// pool gives each binding one buffer only.
fn stream(chunks: usize, host_bandwidth: u64, single_buffer: bool) -> Timeline {
    let sim = SimBackend::new(1 << 30)
        .with_copy_bandwidth(1_000_000_000, 1_000_000_000)
        .with_calibration(&Calibration {
            memcpy_by_threads: vec![host_bandwidth],
            ..Calibration::fixed()
        });
    let mgr = common::manager_on(sim.clone());
    let solver = mgr
        .register(Registration::new().on_invalidate(|| {}))
        .unwrap();
    let requests = (0..2).flat_map(|set| {
        ["in", "out"].map(|label| {
            (
                format!("{label}{set}"),
                ArrayRequest::of::<f32>([1, CHUNK_RUNS]).unchunkable(),
            )
        })
    });
    mgr.queue_request(&solver, requests).unwrap();
    let mut response = mgr.allocate_queue_for(&solver).unwrap();
    let sets: Vec<Set> = (0..2)
        .map(|set| Set {
            input: response.take(&format!("in{set}")).unwrap(),
            output: response.take(&format!("out{set}")).unwrap(),
        })
        .collect();
    let runs = chunks * CHUNK_RUNS;
    let data: Vec<f32> = (0..runs).map(|r| r as f32).collect();
    let host_in = mgr
        .create_host_array([1, runs], HostMemoryKind::Pinned, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<f32>([1, runs], HostMemoryKind::Pageable, None, &solver)
        .unwrap();
    let plan = ChunkPlan::new(runs, chunks, CHUNK_RUNS).unwrap();
    let mut streamer = mgr
        .chunk_streamer(&solver, &plan)
        .unwrap()
        .with_staging_threads(StagingThreads::new(1).unwrap());
    if single_buffer {
        // A pool that never grows past one buffer per label.
        let backend = std::sync::Arc::clone(mgr.backend());
        streamer = streamer.with_pool(StagingPool::with_memory_probe(backend, || None));
    }
    sim.clear_timeline();
    streamer
        .pipeline_sets(&sets)
        .input_with(&host_in, |set| set.input.along(1))
        .output_with(&mut host_out, |set| set.output.along(1))
        .run(|_, set| common::double(&set.input, &set.output, KERNEL))
        .unwrap();
    let doubled: Vec<f32> = data.iter().map(|x| 2.0 * x).collect();
    assert_eq!(
        host_out.as_slice(),
        doubled,
        "single buffer: {single_buffer}"
    );
    sim.timeline()
}

/// The spans of `activity`, in start order.
fn spans(timeline: &Timeline, activity: Activity) -> Vec<Span> {
    let mut spans: Vec<Span> = timeline
        .spans()
        .iter()
        .filter(|span| span.activity == activity && span.end_ns > span.start_ns)
        .cloned()
        .collect();
    spans.sort_by_key(|span| span.start_ns);
    spans
}

/// Checks that the host never idles while a landed chunk waits: the
/// `i`-th scatter starts when the host finished the one before it or when
/// the `i`-th download landed, whichever is later.
fn assert_no_gap_while_work_is_ready(timeline: &Timeline) {
    let scatters = spans(timeline, Activity::HostStaging);
    let downloads = spans(timeline, Activity::DeviceToHost);
    assert_eq!(scatters.len(), downloads.len());
    let mut host_free = 0;
    for (index, (scatter, download)) in scatters.iter().zip(&downloads).enumerate() {
        assert_eq!(
            scatter.start_ns,
            host_free.max(download.end_ns),
            "scatter {index} started late: {scatter:?} after {download:?}"
        );
        host_free = scatter.end_ns;
    }
}

#[test]
fn a_host_bound_batch_takes_the_hosts_time_plus_the_first_chunks() {
    // Each chunk's 4000 bytes scatter in 8 µs at 500 MB/s: the host is
    // the busiest engine, twice the downloads.
    let chunks = 16;
    let timeline = stream(chunks, 500_000_000, false);
    assert_no_gap_while_work_is_ready(&timeline);
    let host = timeline.busy_ns(Activity::HostStaging);
    assert_eq!(host, chunks as u64 * 8_000);
    // The run starts by page-locking the results' two staging buffers
    // (the inputs, page-locked, move directly).
    let page_locking = timeline.busy_ns(Activity::PageLock);
    assert_eq!(page_locking, 2 * 899, "4000 bytes at 4.45 GB/s each");
    assert_eq!(timeline.busiest_engine_ns(), host + page_locking);
    // Then the first chunk's upload (4 µs), kernel (4 µs) and download
    // (4 µs) before the first scatter; then the host never stops.
    assert_eq!(timeline.makespan_ns(), page_locking + 12_000 + host);
    assert!(timeline.makespan_ns() * 100 <= timeline.busiest_engine_ns() * 110);
    // Every download after the first starts before the host finished the
    // chunk before it: the device is fed while the host scatters.
    let scatters = spans(&timeline, Activity::HostStaging);
    let downloads = spans(&timeline, Activity::DeviceToHost);
    for (index, download) in downloads.iter().enumerate().skip(2) {
        assert!(
            download.start_ns < scatters[index - 1].end_ns,
            "download {index} waited for the host: {download:?}"
        );
    }
}

#[test]
fn a_device_bound_batch_scatters_each_chunk_as_it_lands() {
    // 2 µs of scatter against 4 µs downloads and kernels.
    let chunks = 16;
    let timeline = stream(chunks, 2_000_000_000, false);
    assert_no_gap_while_work_is_ready(&timeline);
    let busiest = timeline.busiest_engine_ns();
    assert_eq!(busiest, chunks as u64 * 4_000);
    // The staging buffers' page-locking, two steps of fill (upload,
    // kernel) and the last scatter.
    let page_locking = timeline.busy_ns(Activity::PageLock);
    assert_eq!(
        timeline.makespan_ns(),
        page_locking + busiest + 8_000 + 2_000
    );
}

#[test]
fn one_staging_buffer_gives_the_same_results_later() {
    let chunks = 16;
    let two = stream(chunks, 500_000_000, false);
    let one = stream(chunks, 500_000_000, true);
    assert_eq!(
        one.busy_ns(Activity::HostStaging),
        two.busy_ns(Activity::HostStaging)
    );
    assert!(
        one.makespan_ns() > two.makespan_ns(),
        "one buffer: {} ns, two: {} ns",
        one.makespan_ns(),
        two.makespan_ns()
    );
}
