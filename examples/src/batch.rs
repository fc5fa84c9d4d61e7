//! The main job's body: a batch of ODE runs several times larger than a
//! small simulated device, declared with `#[derive(GpuBuffers)]`, planned
//! into chunks by the manager, and streamed through the device chunk by
//! chunk. The `batch` binary runs it at full size; the tests run it small.
//!
//! Each run integrates the decay `dy/dt = -k y` of its variables with
//! explicit Euler steps; the "kernel" runs on the host over the chunk's device
//! arrays, launched through the backend with a modelled duration, so the
//! simulated device times it on its compute engine. Two buffer sets
//! (`pipeline_depth = 2`) let the upload of chunk k + 1 and the download of
//! chunk k - 1 run while chunk k computes. Prints the chunk plan, a progress
//! bar per chunk, a summary table with the modelled overlap and the
//! manager's memory table, and fails when the results differ from the
//! closed form.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cubie_mem::backend::Calibration;
use cubie_mem::timeline::{Activity, Timeline};
use cubie_mem::{
    ArrayRequest, Bytes, DeviceArray, GpuBuffers, HostKernel, HostMemoryKind, ManagerConfig,
    MemError, MemoryManager, Precision, Registration, SimBackend, StagingThreads,
};
use indicatif::{ProgressBar, ProgressStyle};

const MIB: u64 = 1 << 20;
/// The largest difference from the closed form the results may show: the
/// streamed integration does the same arithmetic as the closed form's
/// product, so only rounding separates them.
pub const CLOSED_FORM_TOLERANCE: f64 = 1e-12;
/// The weights of the four state variables.
const WEIGHTS: [f64; 4] = [1.0, 0.5, 0.25, 0.125];
/// Euler steps between two saved states.
const STEPS_PER_SAVE: usize = 10;
/// Step size.
const DT: f64 = 0.01;
/// Euler updates per nanosecond the slow kernel sustains over a chunk (one
/// update: one variable of one run advanced by one step), which sets its
/// declared duration.
const MODELLED_UPDATES_PER_NS: u64 = 100;
/// The memory bandwidth of an NVIDIA H100 SXM5 (HBM3, 3.35 TB/s, NVIDIA's
/// datasheet), at which the bus-bound kernel reads and writes its bytes.
const H100_MEMORY_BYTES_PER_SECOND: u64 = 3_350_000_000_000;

/// How long the modelled kernel takes over a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelModel {
    /// 100 Euler updates a nanosecond: 25 to 40 times slower than a GPU
    /// would run it, so the kernels take much of each chunk's time.
    Slow,
    /// The time an H100 takes to read the chunk's inputs and write its
    /// results at its memory bandwidth: what a GPU would take, so the
    /// pipeline is bound by the bus and the host.
    BusBound,
}

impl KernelModel {
    /// The kernel's modelled duration over `runs` runs of `element` bytes.
    fn duration(self, dims: &RunDims, runs: usize, element: usize) -> Duration {
        match self {
            KernelModel::Slow => {
                let updates = (runs * dims.n_states * dims.n_saves * STEPS_PER_SAVE) as u64;
                Duration::from_nanos(updates.div_ceil(MODELLED_UPDATES_PER_NS))
            }
            KernelModel::BusBound => {
                // Initial values, rates and results per run; the weights once.
                let per_run = dims.n_states + 1 + dims.n_saves * dims.n_states;
                let bytes = ((runs * per_run + dims.n_states) * element) as u128;
                let ns = (bytes * 1_000_000_000).div_ceil(u128::from(H100_MEMORY_BYTES_PER_SECOND));
                Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
            }
        }
    }
}

impl std::fmt::Display for KernelModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KernelModel::Slow => "slow (100 Euler updates a ns)",
            KernelModel::BusBound => "bus-bound (an H100's 3.35 TB/s over the chunk's bytes)",
        })
    }
}

/// The sizes the buffer shapes refer to.
pub struct RunDims {
    /// Variables per run.
    pub n_states: usize,
    /// Saved time points per run.
    pub n_saves: usize,
    /// Runs in the batch.
    pub n_runs: usize,
}

/// A solver's buffers, declared once: the manager turns them into requests
/// and chunks them along `n_runs`. `IntegrationHost` holds the batch's
/// inputs and results on the host.
#[derive(GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = RunDims, pipeline_depth = 2, host = IntegrationHost)]
pub struct Integration<P: Precision> {
    /// Initial values, one column per run.
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs, input)]
    initial: DeviceArray<P>,
    /// Decay rate of each run.
    #[buffer(shape = [n_runs], chunk_axis = 0, input)]
    rates: DeviceArray<P>,
    /// The saved trajectory of every run.
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs, output)]
    state: DeviceArray<P>,
    /// Per-variable weights shared by every run.
    #[buffer(shape = [n_states], unchunkable)]
    weights: DeviceArray<P>,
}

/// The "kernel": integrates the first `len` runs of the chunk held by `set`
/// on the host, in place on the set's device arrays, launched through the
/// backend so the device orders, checks and times it like a GPU kernel.
fn integrate_chunk<P: Precision>(
    set: &Integration<P>,
    dims: &RunDims,
    len: usize,
    kernel: KernelModel,
) -> Result<(), MemError> {
    // The chunk length; the last chunk uses `len` runs of it.
    let width = set.rates.len();
    let duration = kernel.duration(dims, len, size_of::<P>());
    HostKernel::new("euler", duration)
        .reads(&set.initial)
        .reads(&set.rates)
        .reads(&set.weights)
        .writes(&set.state)
        .launch(|args| {
            let initial = args.read(&set.initial)?;
            let rates = args.read(&set.rates)?;
            let weights = args.read(&set.weights)?;
            let state = args.write(&set.state)?;
            for (run, rate) in rates.iter().enumerate().take(len) {
                let k = rate.to_f64();
                for (var, weight) in weights.iter().enumerate() {
                    let mut y = initial[var * width + run].to_f64() * weight.to_f64();
                    for save in 0..dims.n_saves {
                        for _ in 0..STEPS_PER_SAVE {
                            y -= DT * k * y;
                        }
                        state[(save * dims.n_states + var) * width + run] = P::from_f64(y);
                    }
                }
            }
            Ok(())
        })
}

/// The name of the busiest engine of `timeline` (the host's staging work
/// and page-locking together).
fn busiest_name(timeline: &Timeline) -> &'static str {
    [
        (timeline.host_busy_ns(), "the host"),
        (timeline.busy_ns(Activity::HostToDevice), "host to device"),
        (timeline.busy_ns(Activity::DeviceToHost), "device to host"),
        (timeline.busy_ns(Activity::Kernel), "compute"),
    ]
    .into_iter()
    .max_by_key(|&(busy, _)| busy)
    .map_or("none", |(_, name)| name)
}

/// The largest difference between the saved results and the closed form
/// of explicit Euler, `y_n = y_0 (1 - k dt)^n`, at the last save (NaN
/// when a result is NaN).
fn closed_form_error(results: &[f64], initial: &[f64], rates: &[f64], dims: &RunDims) -> f64 {
    let n = dims.n_runs;
    let last = dims.n_saves - 1;
    let steps = (STEPS_PER_SAVE * dims.n_saves) as i32;
    let mut max_error = 0.0f64;
    for run in 0..n {
        for (var, weight) in WEIGHTS.iter().enumerate() {
            let exact = initial[var * n + run] * weight * (1.0 - rates[run] * DT).powi(steps);
            let got = results[(last * dims.n_states + var) * n + run];
            let error = (got - exact).abs();
            if error.is_nan() || error > max_error {
                max_error = error;
            }
        }
    }
    max_error
}

/// What the job runs: the batch's size, the device, and what it writes.
#[derive(Clone, Debug)]
pub struct Job {
    /// Runs in the batch.
    pub n_runs: usize,
    /// Free memory of the simulated device before the job allocates.
    pub device_free: u64,
    /// Bytes of the idle cache allocated before the batch, and evicted for it.
    pub cache_bytes: u64,
    /// The manager's allocation granule.
    pub granule: u64,
    /// Host arrays above this size spill to a memory-mapped file.
    pub spill_threshold: u64,
    /// Keep the results in page-locked memory instead of the spill file.
    pub pinned_output: bool,
    /// Host threads that gather and scatter staged chunks (and so read
    /// and write the spill file); the modelled host engine gets as many
    /// lanes.
    pub staging_threads: usize,
    /// How many times the batch is streamed: the first batch page-locks
    /// the staging buffers, the later ones reuse them.
    pub batches: usize,
    /// The calibration the simulated device times the host's work with.
    pub calibration: Calibration,
    /// How long the modelled kernel takes over a chunk.
    pub kernel: KernelModel,
    /// Where to write the modelled device's Chrome trace.
    pub trace: Option<PathBuf>,
    /// Draw the progress bar (on standard error).
    pub show_progress: bool,
}

impl Job {
    /// The main job: 300,000 runs (about 470 MiB) on a device with 96 MiB
    /// free, 24 MiB of it taken by an idle cache, staged by the machine's
    /// default number of threads ([`StagingThreads::default_count`]).
    pub fn main_job() -> Job {
        Job {
            n_runs: 300_000,
            device_free: 96 * MIB,
            cache_bytes: 24 * MIB,
            granule: 8 * MIB,
            spill_threshold: 128 * MIB,
            pinned_output: false,
            staging_threads: StagingThreads::default_count(),
            batches: 2,
            calibration: Calibration::fixed(),
            kernel: KernelModel::Slow,
            trace: None,
            show_progress: true,
        }
    }
}

/// What a job measured.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Free device memory once the cache was allocated, before the batch.
    pub free_after_cache: u64,
    /// Whether the cache was evicted to make room for the batch.
    pub cache_evicted: bool,
    /// Chunks the batch ran in.
    pub chunks: usize,
    /// The largest difference between a result and the closed form.
    pub max_error: f64,
    /// The host's modelled staging time in the last batch (gathers,
    /// scatters, spill I/O), in ns.
    pub host_busy_ns: u64,
    /// The host's modelled page-locking in the first batch, in ns: the
    /// pinned host arrays' and the staging buffers'.
    pub first_batch_page_lock_ns: u64,
    /// The host's modelled first touch of the spill file's pages, in ns.
    pub first_touch_ns: u64,
    /// The modelled makespan of the first batch, in ns.
    pub first_batch_makespan_ns: u64,
    /// The modelled makespan of the last batch, in ns.
    pub makespan_ns: u64,
    /// The busy time of the busiest engine, in ns.
    pub busiest_engine_ns: u64,
    /// The busiest engine's busy time and one chunk's share of the other
    /// engines' (the first chunk's fill and the last one's drain), in ns.
    pub floor_ns: u64,
    /// Which engine that is ("the host", "device to host", ...).
    pub busiest_engine: &'static str,
}

/// Runs `job`, printing the plan, the chunks and the summary; an error when
/// the results differ from the closed form by more than
/// [`CLOSED_FORM_TOLERANCE`].
pub fn run(job: &Job) -> Result<Outcome, MemError> {
    // An 8 GiB device of which other processes leave `device_free` to us.
    let sim = SimBackend::new(8 << 30)
        .with_free(job.device_free)
        .with_calibration(&job.calibration);
    let mgr =
        MemoryManager::with_config(sim.clone(), ManagerConfig::default().granule(job.granule));

    // An idle cache in another group: evicted when the batch needs the room.
    let cache = mgr.register(
        Registration::new()
            .name("lookup cache")
            .stream_group("cache")
            .on_invalidate(|| tracing::info!("the idle cache was evicted")),
    )?;
    mgr.queue_request(
        &cache,
        [(
            "lookup",
            ArrayRequest::of::<u8>([usize::try_from(job.cache_bytes).unwrap_or(usize::MAX)])
                .unchunkable(),
        )],
    )?;
    mgr.allocate_queue(&cache)?;
    let free_after_cache = sim.free_bytes();

    // Large results spill to a memory-mapped temporary file.
    let solver = mgr.register(
        Integration::<f64>::registration()
            .name("solver")
            .on_invalidate(|| tracing::warn!("solver buffers invalidated"))
            .host_spill_threshold(job.spill_threshold),
    )?;
    let dims = RunDims {
        n_states: 4,
        n_saves: 50,
        n_runs: job.n_runs,
    };
    let buffers = mgr.allocate_buffers::<Integration<f64>>(&solver, &dims)?;
    let plan = *buffers.plan();

    let batch_bytes = plan.chunkable_bytes() + plan.unchunkable_bytes();
    let state_bytes = (dims.n_runs * dims.n_states * dims.n_saves * size_of::<f64>()) as u64;
    println!(
        "batch: {} of state ({} runs x {} states x {} saves) and {} of other arrays, {} in all, \
         on a device with {} free beside an idle cache of {} ({:.1}x)",
        Bytes(state_bytes),
        dims.n_runs,
        dims.n_states,
        dims.n_saves,
        Bytes(batch_bytes - state_bytes),
        Bytes(batch_bytes),
        Bytes(free_after_cache),
        Bytes(job.cache_bytes),
        batch_bytes as f64 / free_after_cache.max(1) as f64
    );
    println!("plan: {plan}, withheld {}", Bytes(plan.withheld()));
    // Every set's arrays have the same shapes; the weights are shared.
    let first = &buffers.sets()[0];
    for (name, shape) in [
        ("initial", first.initial.shape()),
        ("rates", first.rates.shape()),
        ("state", first.state.shape()),
        ("weights", first.weights.shape()),
    ] {
        println!("  {name:<8} {shape:?}");
    }

    // The whole batch on the host: inputs in memory, results spilled.
    let n = dims.n_runs;
    let initial: Vec<f64> = (0..dims.n_states * n)
        .map(|i| 1.0 + (i % 7) as f64)
        .collect();
    let rates: Vec<f64> = (0..n).map(|r| 0.5 + (r % 10) as f64 * 0.1).collect();
    // Every array of the kind the manager picks, or all page-locked.
    let kind = job.pinned_output.then_some(HostMemoryKind::Pinned);
    let mut on_host = IntegrationHost::<f64>::new(&mgr, &dims, kind, &solver)?;
    on_host.initial.as_mut_slice().copy_from_slice(&initial);
    on_host.rates.as_mut_slice().copy_from_slice(&rates);
    first.weights.copy_from_host(&WEIGHTS)?;
    println!(
        "host: initial {:?}, rates {:?}, state {:?}{}",
        on_host.initial.kind(),
        on_host.rates.kind(),
        on_host.state.kind(),
        on_host
            .state
            .spill_path()
            .map(|p| format!(" (made at {}, unlinked once mapped)", p.display()))
            .unwrap_or_default()
    );
    println!();

    let batches = job.batches.max(1);
    let progress = if job.show_progress {
        ProgressBar::new((n * batches) as u64)
    } else {
        ProgressBar::hidden()
    }
    .with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Staging buffers come from the manager's staging pool: page-locked by the
    // first batch, reused by the later ones.
    let streamer = mgr
        .chunk_streamer(&solver, &plan)?
        .with_staging_threads(StagingThreads::new(job.staging_threads)?);
    // The pinned host arrays were page-locked before the first batch.
    let arrays_page_locking = sim.timeline().busy_ns(Activity::PageLock);
    let mut first_batch = None;
    let mut max_error = 0.0f64;
    let mut elapsed = Duration::ZERO;
    for batch in 1..=batches {
        if batch > 1 {
            // Each later batch is timed on its own; the first one's
            // timeline is kept for its surcharge.
            first_batch.get_or_insert_with(|| sim.timeline());
            sim.clear_timeline();
        }
        let started = Instant::now();
        streamer
            .pipeline_sets(buffers.sets())
            .bind(&mut on_host, |set| set)
            .run(|chunk, set| {
                progress.set_message(format!(
                    "batch {batch}/{batches}, chunk {}/{}",
                    chunk.index + 1,
                    plan.chunks()
                ));
                integrate_chunk(set, &dims, chunk.len(), job.kernel)?;
                progress.inc(chunk.len() as u64);
                progress.suspend(|| {
                    println!(
                        "batch {batch}, chunk {:>2}: runs {:>6}..{:<6} done",
                        chunk.index, chunk.runs.start, chunk.runs.end
                    )
                });
                Ok::<_, MemError>(())
            })?;
        elapsed = started.elapsed();
        let error = closed_form_error(on_host.state.as_slice(), &initial, &rates, &dims);
        // A NaN result is the largest error (f64::max would skip it).
        if error.is_nan() || error > max_error {
            max_error = error;
        }
    }
    progress.finish_with_message("done");
    let timeline = sim.timeline();
    let first_batch = first_batch.unwrap_or_else(|| timeline.clone());

    let cache_evicted = cache.allocated_bytes() == 0;
    let stats = mgr.memory_report();
    let moved_in = on_host.initial.nbytes() + on_host.rates.nbytes();
    let moved_out = on_host.state.nbytes();
    println!();
    println!("summary");
    println!("  {:<28} {}", "runs", n);
    println!(
        "  {:<28} {} of {} runs",
        "chunks",
        plan.chunks(),
        plan.chunk_length()
    );
    println!(
        "  {:<28} {} (the modelled host engine's lanes)",
        "staging threads", job.staging_threads
    );
    println!("  {:<28} {}", "calibration", job.calibration);
    println!("  {:<28} {}", "kernel", job.kernel);
    println!("  {:<28} {}", "bytes moved host -> device", Bytes(moved_in));
    println!(
        "  {:<28} {}",
        "bytes moved device -> host",
        Bytes(moved_out)
    );
    println!(
        "  {:<28} {}",
        "peak device memory",
        Bytes(stats.total.peak_bytes)
    );
    println!(
        "  {:<28} {} (each streams the whole batch; the figures below are the last one's)",
        "batches", batches
    );
    println!("  {:<28} {:.2?}", "streaming time", elapsed);
    println!("  {:<28} {:.3e}", "max error vs closed form", max_error);
    let ms = |ns: u64| ns as f64 / 1e6;
    let first_page_locking = first_batch.busy_ns(Activity::PageLock);
    let first_touch = first_batch.busy_ns(Activity::FirstTouch);
    println!(
        "  {:<28} makespan {:.3} ms, with {:.3} ms of host time preparing memory that later \
         batches reuse: page-locking {:.3} ms (pinned host arrays {:.3} ms, staging buffers \
         {:.3} ms), the spill file's first touch {:.3} ms",
        "modelled first batch",
        ms(first_batch.makespan_ns()),
        ms(first_page_locking + first_touch),
        ms(first_page_locking),
        ms(arrays_page_locking),
        ms(first_page_locking.saturating_sub(arrays_page_locking)),
        ms(first_touch),
    );
    let (host, preparing, calls, h2d, d2h, compute) = (
        timeline.busy_ns(Activity::HostStaging),
        timeline.busy_ns(Activity::PageLock) + timeline.busy_ns(Activity::FirstTouch),
        timeline.busy_ns(Activity::HostCall),
        timeline.busy_ns(Activity::HostToDevice),
        timeline.busy_ns(Activity::DeviceToHost),
        timeline.busy_ns(Activity::Kernel),
    );
    let sum = timeline.host_busy_ns() + h2d + compute + d2h;
    let (makespan, busiest) = (timeline.makespan_ns(), timeline.busiest_engine_ns());
    // The busiest engine, plus one chunk's share of each other engine: the
    // first chunk's fill before it and the last chunk's drain after it.
    let floor = busiest + (sum - busiest) / plan.chunks().max(1) as u64;
    println!(
        "  {:<28} host {:.3} ms (gather, scatter, spill I/O; page-locking and first touch {:.3} \
         ms; calls and wake-ups {:.3} ms), h2d {:.3} ms, kernels {:.3} ms, d2h {:.3} ms (sum \
         {:.3} ms)",
        "modelled engine busy time",
        ms(host),
        ms(preparing),
        ms(calls),
        ms(h2d),
        ms(compute),
        ms(d2h),
        ms(sum),
    );
    println!(
        "  {:<28} {:.3} ms: {:.3}x the busiest engine ({}), {:.3}x the floor ({:.3} ms: the \
         busiest engine and one chunk's share of the others, its fill and drain), {:.3}x the \
         sum of the engines",
        "modelled makespan",
        ms(makespan),
        makespan as f64 / busiest.max(1) as f64,
        busiest_name(&timeline),
        makespan as f64 / floor.max(1) as f64,
        ms(floor),
        makespan as f64 / sum.max(1) as f64,
    );
    println!(
        "  {:<28} {} kept, {} older ones dropped (the figures above count them all)",
        "timeline spans",
        timeline.spans().len(),
        timeline.dropped_spans(),
    );
    println!();
    println!("{stats}");

    if let Some(path) = on_host.state.spill_path() {
        println!(
            "spill file {} unlinked once mapped: {}",
            path.display(),
            !path.exists()
        );
    }
    on_host.state.close();
    if let Some(path) = &job.trace {
        let write = std::fs::File::create(path)
            .and_then(|file| timeline.write_chrome_trace(std::io::BufWriter::new(file)));
        write.map_err(|error| MemError::Io {
            operation: "writing the trace",
            path: path.display().to_string(),
            message: error.to_string(),
        })?;
        println!(
            "trace of the modelled device written to {} (open it in https://ui.perfetto.dev)",
            path.display()
        );
    }
    if max_error.is_nan() || max_error > CLOSED_FORM_TOLERANCE {
        return Err(MemError::Config {
            name: "result check".into(),
            value: format!("{max_error:e}"),
            reason: format!(
                "the streamed results differ from the closed form by more than {CLOSED_FORM_TOLERANCE:e}"
            ),
        });
    }
    Ok(Outcome {
        free_after_cache,
        cache_evicted,
        chunks: plan.chunks(),
        max_error,
        host_busy_ns: host,
        first_batch_page_lock_ns: first_page_locking,
        first_touch_ns: first_touch,
        first_batch_makespan_ns: first_batch.makespan_ns(),
        makespan_ns: makespan,
        busiest_engine_ns: busiest,
        floor_ns: floor,
        busiest_engine: busiest_name(&timeline),
    })
}

#[cfg(test)]
mod tests;
