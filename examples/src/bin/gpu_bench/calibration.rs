//! A GPU node's calibration for the simulated device: this
//! machine's memcpy curve, first touch and wake-up (`Calibration::measure`),
//! with page-locking measured through the driver (`cuMemHostAlloc` of new
//! blocks, by size) in place of `mlock`, and the host's time per call: a
//! launch (`EulerDecay::step` through cubie-mem), an event record (and its
//! release) and an asynchronous copy call, each the mean of 1,000; the
//! link: a 64 MiB copy each way alone, and both at once on two streams;
//! and the staging threads' memcpy beside copies both ways, against alone. With `--calibration FILE` they
//! are written in the format `Calibration::load` reads, so that
//! `batch --calibration FILE` replays the batch on this node's figures.

use std::path::Path;
use std::time::{Duration, Instant};

use cubie_mem::backend::{Backend, Calibration, CallCosts};
use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::{ArrayRequest, MemoryManager, Registration};
use cubie_mem_examples::euler_decay::EulerDecay;

use super::BenchResult;

/// Calls timed per kind; the mean is the figure.
const CALLS: u32 = 1000;
/// Bytes each timed copy moves: small, so that the call is what is timed.
const CALL_COPY_BYTES: usize = 4096;
/// Bytes each link copy moves.
const LINK_BYTES: usize = 64 << 20;
/// Rounds of each link figure; the median is kept.
const LINK_ROUNDS: usize = 5;
/// Bytes each thread's memcpy moves beside the copies.
const MEMCPY_BYTES: usize = 32 << 20;
/// Copies queued each way while the memcpy runs: enough to outlast it.
const BESIDE_COPIES: usize = 16;

/// The sizes page-locking is measured at; the largest gives the figure.
const PAGE_LOCK_SIZES: [u64; 3] = [4 << 20, 64 << 20, 256 << 20];

/// Measures the calibration (with `strided_row_ps`, the strided copies'
/// figure), prints it and, given `path`, writes it.
pub fn report(cuda: &CudaBackend, strided_row_ps: u64, path: Option<&Path>) -> BenchResult {
    println!("\ncalibration (the simulated device's, measured on this node)");
    let mut figures = Calibration::measure();
    for bytes in PAGE_LOCK_SIZES {
        // Empty the backend's cache, so that the block is a new one.
        cuda.clear_pinned_cache();
        let began = Instant::now();
        let block = cuda.alloc_pinned_for_overwrite(bytes)?;
        let elapsed = began.elapsed();
        drop(block);
        let rate = (u128::from(bytes) * 1_000_000_000 / elapsed.as_nanos().max(1)) as u64;
        println!(
            "  page-locking {:>4} MiB (cuMemHostAlloc): {:>8.3} ms, {:.2} GB/s",
            bytes >> 20,
            elapsed.as_secs_f64() * 1e3,
            rate as f64 / 1e9
        );
        figures.page_lock = rate.max(1);
    }
    cuda.clear_pinned_cache();
    figures.calls = call_costs(cuda)?;
    let (up, down, both_ways_percent, staging_percent) =
        link(cuda, figures.memcpy_by_threads.len())?;
    figures.copy_bandwidth = Some((up, down));
    figures.both_ways_percent = both_ways_percent;
    figures.staging_beside_copies_percent = staging_percent;
    figures.strided_row_ps = Some(strided_row_ps);
    figures.source = format!(
        "{} (page-locking by cuMemHostAlloc on {})",
        figures.source,
        cuda.device_name()
    );
    println!("  {figures}");
    if let Some(path) = path {
        figures.save(path)?;
        println!(
            "  written to {} (batch --calibration FILE loads it)",
            path.display()
        );
    }
    Ok(())
}

/// The host's mean time per launch, record and copy call, `CALLS` each.
fn call_costs(cuda: &CudaBackend) -> BenchResult<CallCosts> {
    let per_call = |total: Duration| u64::try_from((total / CALLS).as_nanos()).unwrap_or(u64::MAX);
    let stream = cuda.create_stream()?;
    let device = cuda.alloc_device(CALL_COPY_BYTES as u64, &*stream)?;
    let block = cuda.alloc_pinned(CALL_COPY_BYTES as u64)?;
    let began = Instant::now();
    for _ in 0..CALLS {
        // SAFETY: the page-locked block lives, unwritten, until the stream
        // is synchronised below.
        unsafe { stream.copy_to_device_async(device, 0, block.bytes().as_ptr(), CALL_COPY_BYTES)? };
    }
    let copy_ns = per_call(began.elapsed());
    let began = Instant::now();
    for _ in 0..CALLS {
        drop(stream.record()?);
    }
    let record_ns = per_call(began.elapsed());
    stream.synchronize()?;
    drop(block);
    cuda.free_device(device, CALL_COPY_BYTES as u64, &*stream)?;

    let mgr = MemoryManager::new(cuda.clone());
    let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
    let request = || ArrayRequest::of::<f64>([256]).unchunkable();
    mgr.queue_request(&solver, [("y", request()), ("k", request())])?;
    let mut response = mgr.allocate_queue_for(&solver)?;
    let (y, k) = (response.take::<f64>("y")?, response.take::<f64>("k")?);
    y.copy_from_host(&[1.0; 256])?;
    k.copy_from_host(&[0.5; 256])?;
    let kernel = EulerDecay::load(cuda)?;
    let group = GroupStream::of(&mgr, &solver)?;
    let began = Instant::now();
    for _ in 0..CALLS {
        kernel.step(&group, &y, &k, 1e-6)?;
    }
    let launch_ns = per_call(began.elapsed());
    mgr.synchronize(&solver)?;
    println!(
        "  host time per call: launch {launch_ns} ns (EulerDecay::step), record {record_ns} ns, \
         copy {copy_ns} ns"
    );
    Ok(CallCosts {
        launch_ns,
        record_ns,
        copy_ns,
    })
}

/// The link's bytes per second host to device and back alone; the percent
/// of it each direction keeps when both copy at once (the slower
/// direction's time alone over the time both take together); and the
/// percent of its speed a memcpy on `threads` threads keeps while copies
/// run both ways.
fn link(cuda: &CudaBackend, threads: usize) -> BenchResult<(u64, u64, u32, u32)> {
    let (up_stream, down_stream) = (cuda.create_stream()?, cuda.create_stream()?);
    let up_device = cuda.alloc_device(LINK_BYTES as u64, &*up_stream)?;
    let down_device = cuda.alloc_device(LINK_BYTES as u64, &*down_stream)?;
    let up_host = cuda.alloc_pinned(LINK_BYTES as u64)?;
    let mut down_host = cuda.alloc_pinned(LINK_BYTES as u64)?;
    let down_ptr = down_host.bytes_mut().as_mut_ptr();
    // Both device buffers written once, so that a download reads written bytes.
    // SAFETY: each block lives, untouched by the host, until its stream is
    // synchronised in the same round.
    let upload = || unsafe {
        up_stream.copy_to_device_async(up_device, 0, up_host.bytes().as_ptr(), LINK_BYTES)
    };
    let download =
        || unsafe { down_stream.copy_from_device_async(down_ptr, LINK_BYTES, down_device, 0) };
    // SAFETY: as above.
    unsafe {
        down_stream.copy_to_device_async(down_device, 0, up_host.bytes().as_ptr(), LINK_BYTES)?
    };
    down_stream.synchronize()?;
    let median = |round: &dyn Fn() -> BenchResult<Duration>| -> BenchResult<Duration> {
        let mut times = (0..LINK_ROUNDS)
            .map(|_| round())
            .collect::<BenchResult<Vec<_>>>()?;
        times.sort_unstable();
        Ok(times[LINK_ROUNDS / 2])
    };
    let up_alone = median(&|| {
        let began = Instant::now();
        upload()?;
        up_stream.synchronize()?;
        Ok(began.elapsed())
    })?;
    let down_alone = median(&|| {
        let began = Instant::now();
        download()?;
        down_stream.synchronize()?;
        Ok(began.elapsed())
    })?;
    let both = median(&|| {
        let began = Instant::now();
        upload()?;
        download()?;
        up_stream.synchronize()?;
        down_stream.synchronize()?;
        Ok(began.elapsed())
    })?;
    let mut buffers: Vec<(Vec<u8>, Vec<u8>)> = (0..threads.max(1))
        .map(|_| (vec![1u8; MEMCPY_BYTES], vec![0u8; MEMCPY_BYTES]))
        .collect();
    // The first copy touches the pages; the medians of the rounds count.
    memcpy(&mut buffers);
    let mut alone: Vec<Duration> = (0..LINK_ROUNDS).map(|_| memcpy(&mut buffers)).collect();
    let mut beside = Vec::with_capacity(LINK_ROUNDS);
    for _ in 0..LINK_ROUNDS {
        for _ in 0..BESIDE_COPIES {
            upload()?;
            download()?;
        }
        beside.push(memcpy(&mut buffers));
        up_stream.synchronize()?;
        down_stream.synchronize()?;
    }
    alone.sort_unstable();
    beside.sort_unstable();
    let (alone, beside) = (alone[LINK_ROUNDS / 2], beside[LINK_ROUNDS / 2]);
    let staging_percent = (alone.as_nanos() * 100 / beside.as_nanos().max(1)).clamp(1, 100) as u32;
    println!(
        "  memcpy of {} MiB on {} thread(s): {:.3} ms alone, {:.3} ms beside copies both ways: \
         {staging_percent}%",
        (MEMCPY_BYTES >> 20) * buffers.len(),
        buffers.len(),
        alone.as_secs_f64() * 1e3,
        beside.as_secs_f64() * 1e3,
    );
    cuda.free_device(up_device, LINK_BYTES as u64, &*up_stream)?;
    cuda.free_device(down_device, LINK_BYTES as u64, &*down_stream)?;
    let rate =
        |time: Duration| (LINK_BYTES as u128 * 1_000_000_000 / time.as_nanos().max(1)) as u64;
    let slower = up_alone.max(down_alone);
    let percent = (slower.as_nanos() * 100 / both.as_nanos().max(1)).clamp(1, 100) as u32;
    println!(
        "  link, {} MiB: host to device {:.2} GB/s, device to host {:.2} GB/s alone; both at once \
         {:.3} ms against {:.3} ms for the slower alone: {percent}% each",
        LINK_BYTES >> 20,
        rate(up_alone) as f64 / 1e9,
        rate(down_alone) as f64 / 1e9,
        both.as_secs_f64() * 1e3,
        slower.as_secs_f64() * 1e3,
    );
    Ok((
        rate(up_alone).max(1),
        rate(down_alone).max(1),
        percent,
        staging_percent,
    ))
}

/// One memcpy of each pair of `buffers`, each on its own thread, from a
/// common start: the slowest thread's time.
fn memcpy(buffers: &mut [(Vec<u8>, Vec<u8>)]) -> Duration {
    let start = std::sync::Barrier::new(buffers.len());
    std::thread::scope(|scope| {
        let threads: Vec<_> = buffers
            .iter_mut()
            .map(|(from, to)| {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    to.copy_from_slice(from);
                    std::hint::black_box(&to);
                    began.elapsed()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().unwrap_or(Duration::MAX))
            .max()
            .unwrap_or(Duration::MAX)
    })
}
