//! Measures the CUDA backend on the device, each figure beside a reference
//! taken in the same run:
//!
//! - allocation latency: a stream-ordered allocation and free from the
//!   device's pool (what the manager does) against plain `cuMemAlloc` /
//!   `cuMemFree` through cust;
//! - pinned bandwidth: host to device and device to host copies between the
//!   manager's `PinnedArray` and `DeviceArray` against the same copies made
//!   directly with cust (`LockedBuffer` and `DeviceBuffer`); the backend's
//!   asynchronous copies from and to a page-locked block (queued back to back,
//!   one event waited for per round instead of a synchronise per copy) and
//!   pageable copies through the manager are shown for comparison.
//!
//! ```text
//! cargo run --release -p cubie-mem-examples --features cuda --bin gpu_bench
//! ```
//!
//! Each figure is the median of several timed rounds, after a warm-up.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cubie_mem::backend::cuda::CudaBackend;
use cubie_mem::backend::cuda::cust::memory::{
    CopyDestination, DeviceBuffer, LockedBuffer, cuda_free, cuda_malloc,
};
use cubie_mem::{ArrayRequest, Backend, MemoryKind, MemoryManager, Registration};

/// Timed rounds per figure (the median is reported).
const ROUNDS: usize = 7;
/// Allocation and free pairs per latency round.
const PAIRS: usize = 1000;
/// Allocation sizes measured.
const ALLOCATION_SIZES: [u64; 3] = [4 << 10, 1 << 20, 64 << 20];
/// Elements (f32) of the bandwidth copies: 256 MiB.
const COPY_ELEMENTS: usize = 64 << 20;
/// Copies per bandwidth round.
const COPIES: usize = 4;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("gpu_bench: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let cuda = CudaBackend::new(0)?;
    println!("device {} ({})", cuda.ordinal(), cuda.device_name());
    allocation_latency(&cuda)?;
    bandwidth(&cuda)?;
    Ok(())
}

/// The median of `ROUNDS` timings of `round`, after one untimed call.
fn median(
    mut round: impl FnMut() -> Result<Duration, Box<dyn Error>>,
) -> Result<Duration, Box<dyn Error>> {
    round()?;
    let mut times = (0..ROUNDS)
        .map(|_| round())
        .collect::<Result<Vec<_>, _>>()?;
    times.sort_unstable();
    Ok(times[ROUNDS / 2])
}

fn allocation_latency(cuda: &CudaBackend) -> Result<(), Box<dyn Error>> {
    println!("\nallocation + free, per pair (median of {ROUNDS} rounds of {PAIRS}):");
    println!(
        "{:>12} {:>16} {:>20} {:>8}",
        "size", "pooled async", "cuMemAlloc/Free", "speedup"
    );
    let stream = cuda.create_stream()?;
    for bytes in ALLOCATION_SIZES {
        let pooled = median(|| {
            let start = Instant::now();
            for _ in 0..PAIRS {
                let ptr = cuda.alloc_device(bytes, stream)?;
                cuda.free_device(ptr, bytes, stream)?;
            }
            cuda.synchronize(stream)?;
            Ok(start.elapsed() / PAIRS as u32)
        })?;
        cuda.make_current()?;
        let plain = median(|| {
            let start = Instant::now();
            for _ in 0..PAIRS {
                // SAFETY: the context is current on this thread; the memory
                // is freed at once and never accessed.
                unsafe {
                    let ptr = cuda_malloc::<u8>(bytes as usize)?;
                    cuda_free(ptr)?;
                }
            }
            Ok(start.elapsed() / PAIRS as u32)
        })?;
        println!(
            "{:>12} {:>13.2} us {:>17.2} us {:>7.1}x",
            cubie_mem::Bytes(bytes).to_string(),
            pooled.as_secs_f64() * 1e6,
            plain.as_secs_f64() * 1e6,
            plain.as_secs_f64() / pooled.as_secs_f64()
        );
    }
    cuda.destroy_stream(stream)?;
    Ok(())
}

fn gib_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / (1u64 << 30) as f64
}

fn bandwidth(cuda: &CudaBackend) -> Result<(), Box<dyn Error>> {
    let bytes = COPY_ELEMENTS * size_of::<f32>();
    println!(
        "\ncopies of {} (median of {ROUNDS} rounds of {COPIES}):",
        cubie_mem::Bytes(bytes as u64)
    );

    let mgr = MemoryManager::new(cuda.clone());
    let bench = mgr.register(
        Registration::new()
            .stream_group("bench")
            .on_invalidate(|| {}),
    )?;
    mgr.queue_request(
        &bench,
        [
            (
                "device",
                ArrayRequest::of::<f32>([COPY_ELEMENTS]).unchunkable(),
            ),
            (
                "host",
                ArrayRequest::of::<f32>([COPY_ELEMENTS])
                    .memory(MemoryKind::Pinned)
                    .unchunkable(),
            ),
        ],
    )?;
    let mut response = mgr.allocate_queue_for(&bench)?;
    let device = response.take::<f32>("device")?;
    let host = response.take_pinned::<f32>("host")?;
    host.write()?
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as f32);
    let mut pageable = vec![1.0f32; COPY_ELEMENTS];

    let ours_h2d = median(|| {
        let source = host.read()?;
        let start = Instant::now();
        for _ in 0..COPIES {
            device.copy_from_host(&source)?;
        }
        Ok(start.elapsed() / COPIES as u32)
    })?;
    let ours_d2h = median(|| {
        let mut target = host.write()?;
        let start = Instant::now();
        for _ in 0..COPIES {
            device.copy_to_host(&mut target)?;
        }
        Ok(start.elapsed() / COPIES as u32)
    })?;
    let pageable_h2d = median(|| {
        let start = Instant::now();
        for _ in 0..COPIES {
            device.copy_from_host(&pageable)?;
        }
        Ok(start.elapsed() / COPIES as u32)
    })?;
    let pageable_d2h = median(|| {
        let start = Instant::now();
        for _ in 0..COPIES {
            device.copy_to_host(&mut pageable)?;
        }
        Ok(start.elapsed() / COPIES as u32)
    })?;

    let (async_h2d, async_d2h) = async_bandwidth(cuda, bytes)?;

    cuda.make_current()?;
    let mut locked = LockedBuffer::new(&1.0f32, COPY_ELEMENTS)?;
    let mut reference = DeviceBuffer::<f32>::zeroed(COPY_ELEMENTS)?;
    let cust_h2d = median(|| {
        let start = Instant::now();
        for _ in 0..COPIES {
            reference.copy_from(&locked)?;
        }
        Ok(start.elapsed() / COPIES as u32)
    })?;
    let cust_d2h = median(|| {
        let start = Instant::now();
        for _ in 0..COPIES {
            reference.copy_to(&mut locked)?;
        }
        Ok(start.elapsed() / COPIES as u32)
    })?;

    println!(
        "{:>22} {:>14} {:>14} {:>8}",
        "", "cubie-mem", "cust direct", "ratio"
    );
    for (name, ours, direct) in [
        ("pinned host to device", ours_h2d, cust_h2d),
        ("pinned device to host", ours_d2h, cust_d2h),
        ("async pinned to device", async_h2d, cust_h2d),
        ("async pinned from dev.", async_d2h, cust_d2h),
    ] {
        println!(
            "{name:>22} {:>9.2} GiB/s {:>9.2} GiB/s {:>8.3}",
            gib_per_s(bytes, ours),
            gib_per_s(bytes, direct),
            direct.as_secs_f64() / ours.as_secs_f64()
        );
    }
    println!(
        "{:>22} {:>9.2} GiB/s\n{:>22} {:>9.2} GiB/s",
        "pageable host to dev.",
        gib_per_s(bytes, pageable_h2d),
        "pageable dev. to host",
        gib_per_s(bytes, pageable_d2h)
    );
    println!(
        "device free memory now: {}",
        cubie_mem::Bytes(cuda.mem_info()?.free)
    );
    Ok(())
}

/// Asynchronous copies of `bytes` through the backend between one page-locked
/// block and device memory: `COPIES` queued back to back on one stream, then
/// one event waited for; the median time per copy, host to device and back.
fn async_bandwidth(
    cuda: &CudaBackend,
    bytes: usize,
) -> Result<(Duration, Duration), Box<dyn Error>> {
    let stream = cuda.create_stream()?;
    let device = cuda.alloc_device(bytes as u64, stream)?;
    let mut block = cuda.alloc_pinned(bytes as u64)?;
    block.bytes_mut().fill(1);
    let host = block.bytes_mut().as_mut_ptr();
    let queued = |upload: bool| {
        median(|| {
            let start = Instant::now();
            for _ in 0..COPIES {
                // SAFETY: `host` is the whole page-locked block of this
                // backend; it is not touched until the event below has been
                // waited for, and not dropped before the stream is
                // synchronised (also when a round fails).
                unsafe {
                    if upload {
                        cuda.copy_to_device_async(device, 0, host.cast_const(), bytes, stream)?;
                    } else {
                        cuda.copy_from_device_async(host, bytes, device, 0, stream)?;
                    }
                }
            }
            let done = cuda.record_event(stream)?;
            cuda.synchronize_event(done)?;
            cuda.destroy_event(done)?;
            Ok(start.elapsed() / COPIES as u32)
        })
    };
    let figures = queued(true).and_then(|h2d| Ok((h2d, queued(false)?)));
    // No copy may still use the block when it drops.
    let drained = cuda.synchronize(stream);
    cuda.free_device(device, bytes as u64, stream)?;
    cuda.synchronize(stream)?;
    cuda.destroy_stream(stream)?;
    drained?;
    drop(block);
    figures
}
