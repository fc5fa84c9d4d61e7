//! Strided (2D) copies on the device, for the real curve of their
//! throughput against the row's width that the simulated device models at
//! 2.5 ns a row: one `cuMemcpy2DAsync` of rows of 32 B to 1 MiB, a row
//! apart in page-locked memory and packed on the device, both ways, against
//! one contiguous copy of the same bytes; and the chunk pipeline over a
//! pinned `[states, runs]` state, whose chunks move by strided copies.
//! Figures only: the goals come once a device has given them.

use std::time::{Duration, Instant};

use cubie_mem::backend::{Backend, BackendError, Stream, StridedRows};
use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::timeline::Activity;
use cubie_mem::{ArrayRequest, ChunkPlan, HostMemoryKind, MemoryManager, Registration};
use cubie_mem_examples::euler_decay::EulerDecay;

use super::{BenchResult, ROUNDS, Set, gib_per_s, median};

/// The row widths measured, in bytes.
const WIDTHS: [usize; 9] = [
    32,
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];
/// The bytes of each copy, at most: 16 MiB.
const BYTES: usize = 16 << 20;
/// The rows of a copy, at most (narrow rows move fewer bytes).
const MAX_ROWS: usize = 16 << 10;
/// The pipeline's states (rows of each chunk), chunks and runs per chunk.
const STATES: usize = 8;
const CHUNKS: usize = 16;
const CHUNK_RUNS: usize = 64 << 10;

/// How long `queue` and the work it queued on `stream` take.
fn timed(
    stream: &dyn Stream,
    queue: impl FnOnce() -> Result<(), BackendError>,
) -> BenchResult<Duration> {
    let start = Instant::now();
    queue()?;
    stream.synchronize()?;
    Ok(start.elapsed())
}

/// Prints each width's 2D copies against contiguous copies of their bytes;
/// the picoseconds a row costs beyond its bytes, from the narrowest rows
/// (the mean of both directions), for the calibration.
pub fn report(cuda: &CudaBackend) -> BenchResult<u64> {
    let stream = cuda.create_stream()?;
    let stream = &*stream;
    let device = cuda.alloc_device(BYTES as u64, stream)?;
    // Rows a row apart: twice the bytes on the host.
    let mut block = cuda.alloc_pinned(2 * BYTES as u64)?;
    block.bytes_mut().fill(1);
    let host = block.bytes_mut().as_mut_ptr();
    println!(
        "\nstrided (2D) copies against one contiguous copy of the same bytes (median of {ROUNDS}):"
    );
    let mut row_ps = None;
    for width in WIDTHS {
        let rows = (BYTES / width).min(MAX_ROWS);
        let shape = StridedRows::new(width, rows, 2 * width, width as u64);
        let bytes = width * rows;
        // SAFETY (each copy below): the block and the device memory are
        // live and large enough for the rows (`2 * BYTES` and `BYTES`
        // bytes); nothing else touches them, and each copy is waited for.
        let up_2d = median(|| {
            timed(stream, || unsafe {
                stream.copy_to_device_strided_async(device, 0, host, shape)
            })
        })?;
        let up = median(|| {
            timed(stream, || unsafe {
                stream.copy_to_device_async(device, 0, host, bytes)
            })
        })?;
        let down_2d = median(|| {
            timed(stream, || unsafe {
                stream.copy_from_device_strided_async(host, shape, device, 0)
            })
        })?;
        let down = median(|| {
            timed(stream, || unsafe {
                stream.copy_from_device_async(host, bytes, device, 0)
            })
        })?;
        let extra = (up_2d.saturating_sub(up) + down_2d.saturating_sub(down)) / 2;
        row_ps.get_or_insert((extra.as_nanos() * 1000 / rows.max(1) as u128) as u64);
        println!(
            "  rows of {width:>7} B x {rows:>5}: h2d {:>6.2} GiB/s ({:>5.1}% of {:>6.2}), d2h {:>6.2} GiB/s ({:>5.1}% of {:>6.2})",
            gib_per_s(bytes, up_2d),
            100.0 * up.as_secs_f64() / up_2d.as_secs_f64(),
            gib_per_s(bytes, up),
            gib_per_s(bytes, down_2d),
            100.0 * down.as_secs_f64() / down_2d.as_secs_f64(),
            gib_per_s(bytes, down),
        );
    }
    drop(block);
    cuda.free_device(device, BYTES as u64, stream)?;
    stream.synchronize()?;
    pipeline(cuda)?;
    let row_ps = row_ps.unwrap_or(0);
    println!("  a row costs {row_ps} ps beyond its bytes (32 B rows, both ways)");
    Ok(row_ps)
}

/// The pipeline over a pinned `[STATES, runs]` state stepped in place and
/// its rates, chunked along the runs: each chunk's arrays move by one
/// strided copy each way.
fn pipeline(cuda: &CudaBackend) -> BenchResult {
    let mgr = MemoryManager::new(cuda.clone());
    let solver = mgr.register(
        Registration::new()
            .stream_group("strided")
            .on_invalidate(|| {}),
    )?;
    let chunk = [STATES, CHUNK_RUNS];
    let labels = ["y0", "k0", "y1", "k1"];
    mgr.queue_request(
        &solver,
        labels.map(|label| (label, ArrayRequest::of::<f64>(chunk).unchunkable())),
    )?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let sets = (0..2)
        .map(|s| {
            Ok(Set {
                y: response.take(labels[2 * s])?,
                k: response.take(labels[2 * s + 1])?,
            })
        })
        .collect::<BenchResult<Vec<_>>>()?;
    let runs = CHUNKS * CHUNK_RUNS;
    let shape = [STATES, runs];
    let pinned = HostMemoryKind::Pinned;
    let mut y =
        mgr.create_host_array(shape, pinned, Some(&vec![1.0f64; STATES * runs]), &solver)?;
    let k = mgr.create_host_array(shape, pinned, Some(&vec![0.5f64; STATES * runs]), &solver)?;
    let plan = ChunkPlan::new(runs, CHUNKS, CHUNK_RUNS)?;
    let kernel = EulerDecay::load(cuda)?;
    let stream = GroupStream::of(&mgr, &solver)?;
    cuda.record_timeline(true);
    let ran = mgr
        .chunk_streamer(&solver, &plan)?
        .pipeline_sets(&sets)
        .inout_with(&mut y, |set| set.y.along(1))
        .input_with(&k, |set| set.k.along(1))
        .run(|_, set| kernel.step(&stream, &set.y, &set.k, 1e-3));
    let timeline = cuda.timeline();
    cuda.record_timeline(false);
    ran?;
    let timeline = timeline?;
    let ms = |ns: u64| ns as f64 / 1e6;
    println!(
        "  pipeline of {CHUNKS} chunks of [{STATES}, {CHUNK_RUNS}] f64 (rows of {}), pinned, along the runs: \
         h2d {:.3} ms, kernels {:.3} ms, d2h {:.3} ms; makespan {:.3} ms = {:.3}x the busiest engine",
        cubie_mem::Bytes((CHUNK_RUNS * 8) as u64),
        ms(timeline.busy_ns(Activity::HostToDevice)),
        ms(timeline.busy_ns(Activity::Kernel)),
        ms(timeline.busy_ns(Activity::DeviceToHost)),
        ms(timeline.makespan_ns()),
        timeline.makespan_ns() as f64 / timeline.busiest_engine_ns().max(1) as f64,
    );
    Ok(())
}
