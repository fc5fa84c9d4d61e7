//! Measures the CUDA backend on the device, each figure beside a reference
//! taken in the same run (medians of several rounds, after a warm-up):
//!
//! - allocation: a warm pooled allocation and free of one 1 MiB device array
//!   through the backend, and through the manager (queue, allocate, free),
//!   against `cuMemAlloc` / `cuMemFree` of the same size (goals: at most
//!   2 µs through the backend, at least 10x faster than `cuMemAlloc`);
//! - bandwidth: asynchronous copies of 256 MiB between a page-locked host
//!   array and a device array (`upload_async`, `download_async`) against a
//!   plain driver copy of the same bytes (goal: at least 90%);
//! - overlap: the chunk pipeline over 32 equal chunks with three buffer
//!   sets, the examples' Euler kernel sized to take about as long as a
//!   chunk's upload, recorded as a timeline through CUDA events: the
//!   makespan against the busiest of the copy and compute engines (goal: at
//!   most 1.1x). `--trace FILE` writes that timeline as a Chrome trace;
//! - driver calls: what a pipeline chunk costs in driver calls, with the
//!   timeline off and on, and the live events of a persistent buffer set
//!   over 50 pipeline runs (goals: the fake driver's budgets, 24 and 40 a
//!   chunk; no more events after 50 runs than after 5);
//! - strided copies: one 2D copy of rows of 64 B to 1 MiB, both ways,
//!   against one contiguous copy of the same bytes, and the pipeline over a
//!   pinned `[states, runs]` state chunked along the runs (figures only:
//!   the curve the simulated device's 2.5 ns a row stands for);
//! - calibration: this node's memcpy by threads and first touch, and
//!   page-locking by `cuMemHostAlloc` by size; `--calibration FILE` writes
//!   them in the format the simulated device loads
//!   (`batch --calibration FILE`).
//!
//! The references call the driver through `cudarc::driver::result`
//! (cudarc's thin wrappers of the driver API), bindings independent of the
//! backend's own.
//!
//! Each figure is printed with its goal and whether it was met; with
//! `--check-goals` a missed goal makes the run fail (the GPU check passes
//! it; on the fake driver of CI the timings mean nothing).
//!
//! ```text
//! cargo run --release -p cubie-mem-examples --features cuda --bin gpu_bench [-- --trace FILE] [--calibration FILE] [--check-goals]
//! ```

use std::error::Error;
use std::fmt::Display;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cubie_mem::backend::Backend;
use cubie_mem::cuda::{CudaBackend, GroupStream};
use cubie_mem::timeline::{Activity, Timeline};
use cubie_mem::{
    ArrayRequest, ChunkPlan, DeviceArray, HostMemoryKind, ManagerConfig, MemoryManager,
    Registration,
};
use cubie_mem_examples::euler_decay::EulerDecay;

#[path = "gpu_bench/calibration.rs"]
mod calibration;
#[path = "gpu_bench/calls.rs"]
mod calls;
#[path = "gpu_bench/strided.rs"]
mod strided;

/// The plain driver calls the references make, through cudarc's thin
/// wrappers of the driver API (`cudarc::driver::result`): bindings of
/// their own, independent of the backend's, loading the same driver
/// library.
mod driver {
    use cudarc::driver::{DriverError, result};

    /// Whether cudarc finds the driver library (it panics at its first
    /// call when it does not).
    pub fn present() -> Result<(), String> {
        // SAFETY: tries to load the driver library, as the backend did.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            Ok(())
        } else {
            Err("cudarc found no CUDA driver library".into())
        }
    }

    /// An error naming the call and cudarc's description of the code.
    pub fn failed(call: &'static str) -> impl Fn(DriverError) -> String {
        move |error| format!("{call} failed: {error}")
    }

    pub use result::{free_sync, malloc_sync, memcpy_dtoh_sync, memcpy_htod_sync};
}

/// Timed rounds per figure (the median is reported).
const ROUNDS: usize = 7;
/// Allocation and free pairs per latency round.
const PAIRS: u32 = 1000;
/// A host array that a failed copy kept.
const LOST: &str = "the host array was lost in a failed copy";
/// The allocation measured.
const ALLOCATION_BYTES: usize = 1 << 20;
/// Elements (f32) of the bandwidth copies: 256 MiB.
const COPY_ELEMENTS: usize = 64 << 20;
/// Chunks of the pipeline, and runs (f64) per chunk: 8 MiB per array.
const CHUNKS: usize = 32;
const CHUNK_RUNS: usize = 1 << 20;

type BenchResult<T = ()> = Result<T, Box<dyn Error>>;

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!("gpu_bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The command line.
#[derive(Default)]
struct Options {
    trace: Option<PathBuf>,
    calibration: Option<PathBuf>,
    check_goals: bool,
}

fn options() -> BenchResult<Options> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--trace" => options.trace = Some(args.next().ok_or("--trace needs a FILE")?.into()),
            "--calibration" => {
                options.calibration = Some(args.next().ok_or("--calibration needs a FILE")?.into());
            }
            "--check-goals" => options.check_goals = true,
            _ => {
                return Err(format!(
                    "usage: gpu_bench [--trace FILE] [--calibration FILE] [--check-goals]; got '{arg}'"
                )
                .into());
            }
        }
    }
    Ok(options)
}

/// The goals the figures are measured against, and those missed.
#[derive(Default)]
struct Goals {
    missed: Vec<String>,
}

impl Goals {
    /// Notes whether `goal` was `met`; the word to print beside the figure.
    fn check(&mut self, met: bool, goal: impl Display) -> String {
        if met {
            format!("goal {goal}: met")
        } else {
            self.missed.push(goal.to_string());
            format!("goal {goal}: MISSED")
        }
    }
}

fn run() -> BenchResult {
    let options = options()?;
    let cuda = CudaBackend::new(0)?;
    println!(
        "device {} ({}), driver CUDA {}.{}",
        cuda.ordinal(),
        cuda.device_name(),
        cuda.driver_version() / 1000,
        cuda.driver_version() % 1000 / 10
    );
    driver::present()?;
    let mut goals = Goals::default();
    allocation(&cuda, &mut goals)?;
    bandwidth(&cuda, &mut goals)?;
    overlap(&cuda, options.trace, &mut goals)?;
    calls::report(&cuda, &mut goals)?;
    let row_ps = strided::report(&cuda)?;
    calibration::report(&cuda, row_ps, options.calibration.as_deref())?;
    match (goals.missed.is_empty(), options.check_goals) {
        (true, _) => println!("\nevery goal met"),
        (false, true) => {
            return Err(format!(
                "{} goal(s) missed: {}",
                goals.missed.len(),
                goals.missed.join("; ")
            )
            .into());
        }
        (false, false) => println!(
            "\n{} goal(s) missed, not checked (run with --check-goals to fail on them): {}",
            goals.missed.len(),
            goals.missed.join("; ")
        ),
    }
    Ok(())
}

/// The median of `ROUNDS` timings of `round`, after one untimed call.
fn median(mut round: impl FnMut() -> BenchResult<Duration>) -> BenchResult<Duration> {
    round()?;
    let mut times = (0..ROUNDS)
        .map(|_| round())
        .collect::<Result<Vec<_>, _>>()?;
    times.sort_unstable();
    Ok(times[ROUNDS / 2])
}

fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}

fn allocation(cuda: &CudaBackend, goals: &mut Goals) -> BenchResult {
    let bytes = ALLOCATION_BYTES as u64;
    let stream = cuda.create_stream()?;
    let backend = median(|| {
        let start = Instant::now();
        for _ in 0..PAIRS {
            let ptr = cuda.alloc_device(bytes, &*stream)?;
            cuda.free_device(ptr, bytes, &*stream)?;
        }
        let per_pair = start.elapsed() / PAIRS;
        stream.synchronize()?;
        Ok(per_pair)
    })?;
    drop(stream);

    let mgr = MemoryManager::with_config(cuda.clone(), ManagerConfig::default().granule(0));
    let solver = mgr.register(
        Registration::new()
            .stream_group("bench")
            .on_invalidate(|| {}),
    )?;
    let manager = median(|| {
        let start = Instant::now();
        for _ in 0..PAIRS {
            mgr.queue_request(
                &solver,
                [(
                    "x",
                    ArrayRequest::of::<u8>([ALLOCATION_BYTES]).unchunkable(),
                )],
            )?;
            let array = mgr.allocate_queue_for(&solver)?.take::<u8>("x")?;
            mgr.free(&solver, "x")?;
            drop(array);
        }
        let per_pair = start.elapsed() / PAIRS;
        mgr.synchronize(&solver)?;
        Ok(per_pair)
    })?;

    cuda.make_current()?;
    let plain = median(|| {
        let start = Instant::now();
        for _ in 0..PAIRS {
            // SAFETY: the context is current on this thread; the memory is
            // freed at once and never accessed.
            unsafe {
                let address =
                    driver::malloc_sync(ALLOCATION_BYTES).map_err(driver::failed("cuMemAlloc"))?;
                driver::free_sync(address).map_err(driver::failed("cuMemFree"))?;
            }
        }
        Ok(start.elapsed() / PAIRS)
    })?;
    println!("\nallocation + free of 1 MiB, per pair (median of {ROUNDS} rounds of {PAIRS}):");
    let speedup = plain.as_secs_f64() / backend.as_secs_f64();
    let latency_goal = goals.check(micros(backend) <= 2.0, "backend pair <= 2 us");
    let speedup_goal = goals.check(speedup >= 10.0, "backend >= 10x cuMemAlloc");
    println!(
        "  backend (pooled, stream-ordered)  {:>8.2} us  {speedup:>6.1}x faster than cuMemAlloc  ({latency_goal}; {speedup_goal})",
        micros(backend),
    );
    println!(
        "  manager (queue, allocate, free)   {:>8.2} us  {:>6.1}x faster than cuMemAlloc",
        micros(manager),
        plain.as_secs_f64() / manager.as_secs_f64()
    );
    println!(
        "  cuMemAlloc + cuMemFree            {:>8.2} us",
        micros(plain)
    );
    Ok(())
}

fn gib_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / (1u64 << 30) as f64
}

fn bandwidth(cuda: &CudaBackend, goals: &mut Goals) -> BenchResult {
    let bytes = COPY_ELEMENTS * size_of::<f32>();
    let mgr = MemoryManager::new(cuda.clone());
    let bench = mgr.register(
        Registration::new()
            .stream_group("bench")
            .on_invalidate(|| {}),
    )?;
    mgr.queue_request(
        &bench,
        [(
            "device",
            ArrayRequest::of::<f32>([COPY_ELEMENTS]).unchunkable(),
        )],
    )?;
    let device = mgr.allocate_queue_for(&bench)?.take::<f32>("device")?;
    let values: Vec<f32> = (0..COPY_ELEMENTS).map(|i| i as f32).collect();
    let mut host = Some(mgr.create_host_array(
        [COPY_ELEMENTS],
        HostMemoryKind::Pinned,
        Some(&values),
        &bench,
    )?);
    let ours_h2d = median(|| {
        let array = host.take().ok_or(LOST)?;
        let start = Instant::now();
        let back = device.upload_async(array)?.wait()?;
        let time = start.elapsed();
        host = Some(back);
        Ok(time)
    })?;
    let ours_d2h = median(|| {
        let array = host.take().ok_or(LOST)?;
        let start = Instant::now();
        let back = device.download_async(array)?.wait()?;
        let time = start.elapsed();
        host = Some(back);
        Ok(time)
    })?;
    let host = host.take().ok_or(LOST)?;
    if host.as_slice() != values {
        return Err("the round trip through the device changed the data".into());
    }

    let stream = GroupStream::of(&mgr, &bench)?;
    let view = stream.view(&device)?;
    let address = view.device_address();
    stream.synchronize()?;
    cuda.make_current()?;
    let plain_h2d = median(|| {
        let start = Instant::now();
        // SAFETY: the host array is page-locked and `bytes` long, the device
        // array as long and idle (its stream is synchronised).
        unsafe { driver::memcpy_htod_sync(address, host.as_slice()) }
            .map_err(driver::failed("cuMemcpyHtoD"))?;
        Ok(start.elapsed())
    })?;
    let mut host = host;
    let plain_d2h = median(|| {
        let start = Instant::now();
        // SAFETY: as above; nothing else touches the host array meanwhile.
        unsafe { driver::memcpy_dtoh_sync(host.as_mut_slice(), address) }
            .map_err(driver::failed("cuMemcpyDtoH"))?;
        Ok(start.elapsed())
    })?;
    drop(view);

    println!(
        "\npage-locked copies of {} (median of {ROUNDS}):",
        cubie_mem::Bytes(bytes as u64)
    );
    for (name, ours, plain) in [
        ("host to device", ours_h2d, plain_h2d),
        ("device to host", ours_d2h, plain_d2h),
    ] {
        let percent = 100.0 * plain.as_secs_f64() / ours.as_secs_f64();
        let goal = goals.check(
            percent >= 90.0,
            format_args!("{name} >= 90% of the plain copy"),
        );
        println!(
            "  {name}: upload/download_async {:>7.2} GiB/s, plain driver copy {:>7.2} GiB/s: {percent:>5.1}% ({goal})",
            gib_per_s(bytes, ours),
            gib_per_s(bytes, plain),
        );
    }
    Ok(())
}

/// One buffer set of the pipeline: the state (in and out) and the rates.
struct Set {
    y: DeviceArray<f64>,
    k: DeviceArray<f64>,
}

/// Runs the pipeline with `steps` kernel steps per chunk, recording its
/// timeline.
fn pipeline(
    cuda: &CudaBackend,
    mgr: &MemoryManager,
    sets: &[Set],
    steps: usize,
) -> BenchResult<Timeline> {
    let solver = mgr.register(
        Registration::new()
            .stream_group("pipeline")
            .on_invalidate(|| {}),
    )?;
    let runs = CHUNKS * CHUNK_RUNS;
    let y0: Vec<f64> = (0..runs).map(|i| 1.0 + (i % 97) as f64 / 97.0).collect();
    let rates: Vec<f64> = (0..runs).map(|i| 0.1 + (i % 13) as f64 * 0.7).collect();
    let mut y = mgr.create_host_array([runs], HostMemoryKind::Pinned, Some(&y0), &solver)?;
    let k = mgr.create_host_array([runs], HostMemoryKind::Pinned, Some(&rates), &solver)?;
    let plan = ChunkPlan::new(runs, CHUNKS, CHUNK_RUNS)?;
    let kernel = EulerDecay::load(cuda)?;
    let stream = GroupStream::of(mgr, &solver)?;
    cuda.record_timeline(true);
    let streamer = mgr.chunk_streamer(&solver, &plan)?;
    let ran = streamer
        .pipeline_sets(sets)
        .inout_with(&mut y, |set| set.y.along(0))
        .input_with(&k, |set| set.k.along(0))
        .run(|_, set| {
            for _ in 0..steps {
                kernel.step(&stream, &set.y, &set.k, 1e-3)?;
            }
            Ok::<_, cubie_mem::MemError>(())
        });
    let timeline = cuda.timeline();
    cuda.record_timeline(false);
    ran?;
    Ok(timeline?)
}

fn mean_ns(timeline: &Timeline, activity: Activity) -> f64 {
    let spans = timeline
        .spans()
        .iter()
        .filter(|s| s.activity == activity)
        .count();
    timeline.busy_ns(activity) as f64 / spans.max(1) as f64
}

fn overlap(cuda: &CudaBackend, trace: Option<PathBuf>, goals: &mut Goals) -> BenchResult {
    let mgr = MemoryManager::new(cuda.clone());
    let holder = mgr.register(
        Registration::new()
            .stream_group("pipeline")
            .on_invalidate(|| {}),
    )?;
    let depth = 3;
    let labels: Vec<(String, String)> = (0..depth)
        .map(|s| (format!("y{s}"), format!("k{s}")))
        .collect();
    mgr.queue_request(
        &holder,
        labels.iter().flat_map(|(y, k)| {
            [
                (
                    y.clone(),
                    ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable(),
                ),
                (
                    k.clone(),
                    ArrayRequest::of::<f64>([CHUNK_RUNS]).unchunkable(),
                ),
            ]
        }),
    )?;
    let mut response = mgr.allocate_queue_for(&holder)?;
    let sets = labels
        .iter()
        .map(|(y, k)| {
            Ok(Set {
                y: response.take(y)?,
                k: response.take(k)?,
            })
        })
        .collect::<BenchResult<Vec<_>>>()?;

    // One kernel step per chunk first, to size the kernel to an upload.
    let probe = pipeline(cuda, &mgr, &sets, 1)?;
    let upload = mean_ns(&probe, Activity::HostToDevice) * 2.0;
    let step = mean_ns(&probe, Activity::Kernel);
    let steps = (upload / step.max(1.0)).round().clamp(1.0, 10_000.0) as usize;
    let timeline = pipeline(cuda, &mgr, &sets, steps)?;

    let ms = |ns: u64| ns as f64 / 1e6;
    let (h2d, d2h, kernels) = (
        timeline.busy_ns(Activity::HostToDevice),
        timeline.busy_ns(Activity::DeviceToHost),
        timeline.busy_ns(Activity::Kernel),
    );
    let (makespan, busiest) = (timeline.makespan_ns(), timeline.busiest_engine_ns());
    println!(
        "\npipeline of {CHUNKS} chunks x {} in {depth} buffer sets, {steps} kernel steps per chunk:",
        cubie_mem::Bytes((CHUNK_RUNS * 8) as u64)
    );
    let ratio = makespan as f64 / busiest.max(1) as f64;
    let goal = goals.check(ratio <= 1.1, "makespan <= 1.1x the busiest engine");
    println!(
        "  busy: h2d {:.3} ms, kernels {:.3} ms, d2h {:.3} ms; makespan {:.3} ms = {ratio:.3}x the busiest engine ({goal}), {:.3}x the sum",
        ms(h2d),
        ms(kernels),
        ms(d2h),
        ms(makespan),
        makespan as f64 / (h2d + d2h + kernels).max(1) as f64
    );
    if let Some(path) = trace {
        let file = std::fs::File::create(&path)?;
        timeline.write_chrome_trace(std::io::BufWriter::new(file))?;
        println!("  timeline written to {}", path.display());
    }
    Ok(())
}
