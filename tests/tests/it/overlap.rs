//! The overlap the chunk pipeline reaches on the modelled device, whose
//! clock is deterministic: a batch whose upload, kernel and download take
//! equal time per chunk runs in about `(n + 2)` steps with two buffer sets,
//! against about `2n` with one and `3n` when nothing overlaps. Pageable host
//! arrays add the host's own work (gathering into staging buffers and
//! scattering out of them, at the host's bandwidth).

use crate::common;
use std::time::Duration;

use cubie_mem::backend::Calibration;
use cubie_mem::timeline::Activity;
use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostMemoryKind, Instance, MemoryManager, SimBackend,
};

/// Runs per chunk; a chunk of f32 is 4000 bytes, 4 µs at 1 byte/ns.
const CHUNK_RUNS: usize = 1000;
/// The modelled time of each upload, kernel and download.
const STEP: Duration = Duration::from_micros(4);

/// One buffer set: a chunk's input and its result.
struct Set {
    input: DeviceArray<f32>,
    output: DeviceArray<f32>,
}

fn sets(mgr: &MemoryManager, solver: &Instance, count: usize) -> Vec<Set> {
    let shape = [1, CHUNK_RUNS];
    let labels: Vec<(String, String)> = (0..count)
        .map(|set| (format!("in{set}"), format!("out{set}")))
        .collect();
    let requests = labels.iter().flat_map(|(input, output)| {
        [
            (input.clone(), ArrayRequest::of::<f32>(shape).unchunkable()),
            (output.clone(), ArrayRequest::of::<f32>(shape).unchunkable()),
        ]
    });
    mgr.queue_request(solver, requests).unwrap();
    let mut response = mgr.allocate_queue_for(solver).unwrap();
    labels
        .iter()
        .map(|(input, output)| Set {
            input: response.take(input).unwrap(),
            output: response.take(output).unwrap(),
        })
        .collect()
}

/// The timeline's figures for `chunks` chunks through `depth` buffer sets,
/// with host arrays of `kind`.
struct Figures {
    makespan: u64,
    busiest: u64,
    /// The sum of the device's three engines.
    sum: u64,
    /// The host's staging work.
    host: u64,
}

fn stream_batch(chunks: usize, depth: usize, kind: HostMemoryKind) -> Figures {
    let sim = SimBackend::new(1 << 30).with_copy_bandwidth(1_000_000_000, 1_000_000_000);
    let mgr = common::manager_on(sim.clone());
    let solver = mgr
        .register(cubie_mem::Registration::new().on_invalidate(|| {}))
        .unwrap();
    let sets = sets(&mgr, &solver, depth);
    let runs = chunks * CHUNK_RUNS;
    let data: Vec<f32> = (0..runs).map(|r| r as f32).collect();
    let host_in = mgr
        .create_host_array([1, runs], kind, Some(&data), &solver)
        .unwrap();
    let mut host_out = mgr
        .create_host_array::<f32>([1, runs], kind, None, &solver)
        .unwrap();
    let plan = ChunkPlan::new(runs, chunks, CHUNK_RUNS).unwrap();
    sim.clear_timeline();
    let streamer = mgr.chunk_streamer(&solver, &plan).unwrap();
    streamer
        .pipeline_sets(&sets)
        .input_with(&host_in, |set| set.input.along(1))
        .output_with(&mut host_out, |set| set.output.along(1))
        .run(|_, set| common::double(&set.input, &set.output, STEP))
        .unwrap();
    let doubled: Vec<f32> = data.iter().map(|x| 2.0 * x).collect();
    assert_eq!(host_out.as_slice(), doubled, "depth {depth}, {kind:?}");
    let timeline = sim.timeline();
    let sum = [
        Activity::HostToDevice,
        Activity::DeviceToHost,
        Activity::Kernel,
    ]
    .iter()
    .map(|&activity| timeline.busy_ns(activity))
    .sum();
    Figures {
        makespan: timeline.makespan_ns(),
        busiest: timeline.busiest_engine_ns(),
        sum,
        host: timeline.busy_ns(Activity::HostStaging),
    }
}

#[test]
fn two_buffer_sets_overlap_uploads_kernels_and_downloads() {
    let chunks = 32;
    let step = STEP.as_nanos() as u64;
    let pinned = stream_batch(chunks, 2, HostMemoryKind::Pinned);
    let serial = stream_batch(chunks, 1, HostMemoryKind::Pinned);
    println!(
        "pinned: {chunks} chunks, depth 2: makespan {} ns, busiest engine {} ns ({:.3}x); depth 1: \
         makespan {} ns ({:.3}x); sum of engines {} ns",
        pinned.makespan,
        pinned.busiest,
        pinned.makespan as f64 / pinned.busiest as f64,
        serial.makespan,
        serial.makespan as f64 / pinned.busiest as f64,
        pinned.sum,
    );
    assert_eq!(pinned.busiest, chunks as u64 * step);
    assert_eq!(pinned.sum, 3 * chunks as u64 * step);
    assert_eq!(pinned.host, 0, "pinned arrays are copied directly");
    // The ideal: n + 2 steps.
    assert_eq!(pinned.makespan, (chunks as u64 + 2) * step);
    assert!(pinned.makespan as f64 <= 1.10 * pinned.busiest as f64);
    // One set: the upload of k + 1 and the download of k overlap, the
    // kernels do not: 2n + 1 steps.
    assert_eq!(serial.makespan, (2 * chunks as u64 + 1) * step);
}

#[test]
fn pageable_arrays_add_the_hosts_staging_work_to_the_model() {
    let chunks = 32;
    let step = STEP.as_nanos() as u64;
    // Each chunk's 4000 bytes are gathered in and scattered out at the
    // default host bandwidth.
    let staging = (4000u64 * 1_000_000_000).div_ceil(Calibration::fixed().memcpy_bandwidth(1));
    for depth in [1, 2] {
        let pinned = stream_batch(chunks, depth, HostMemoryKind::Pinned);
        let pageable = stream_batch(chunks, depth, HostMemoryKind::Pageable);
        println!(
            "depth {depth}: pageable makespan {} ns, host busy {} ns; pinned makespan {} ns",
            pageable.makespan, pageable.host, pinned.makespan
        );
        assert_eq!(pageable.host, 2 * chunks as u64 * staging, "depth {depth}");
        assert_eq!(pageable.sum, 3 * chunks as u64 * step, "depth {depth}");
        assert!(
            pinned.makespan < pageable.makespan
                && pageable.makespan <= pinned.makespan + pageable.host,
            "depth {depth}: the host's work lengthens the batch by at most its own time"
        );
    }
}

#[test]
fn a_third_buffer_set_changes_nothing_when_two_suffice() {
    let step = STEP.as_nanos() as u64;
    let figures = stream_batch(8, 3, HostMemoryKind::Pinned);
    assert_eq!(figures.makespan, 10 * step);
}
