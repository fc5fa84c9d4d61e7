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
/// Euler updates per nanosecond the modelled GPU sustains over a chunk (one
/// update: one variable of one run advanced by one step), which sets the
/// kernel's declared duration.
const MODELLED_UPDATES_PER_NS: u64 = 100;

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
/// and chunks them along `n_runs`.
#[derive(GpuBuffers)]
#[stream_group("integrators")]
#[buffers(dims = RunDims, pipeline_depth = 2)]
pub struct Integration<P: Precision> {
    /// Initial values, one column per run.
    #[buffer(shape = [n_states, n_runs], chunk_axis = n_runs)]
    initial: DeviceArray<P>,
    /// Decay rate of each run.
    #[buffer(shape = [n_runs], chunk_axis = 0)]
    rates: DeviceArray<P>,
    /// The saved trajectory of every run.
    #[buffer(shape = [n_saves, n_states, n_runs], chunk_axis = n_runs)]
    state: DeviceArray<P>,
    /// Per-variable weights shared by every run.
    #[buffer(shape = [n_states], unchunkable)]
    weights: DeviceArray<P>,
}

/// The modelled duration of the kernel over `runs` runs.
fn kernel_time(dims: &RunDims, runs: usize) -> Duration {
    let updates = (runs * dims.n_states * dims.n_saves * STEPS_PER_SAVE) as u64;
    Duration::from_nanos(updates.div_ceil(MODELLED_UPDATES_PER_NS))
}

/// The "kernel": integrates the first `len` runs of the chunk held by `set`
/// on the host, in place on the set's device arrays, launched through the
/// backend so the device orders, checks and times it like a GPU kernel.
fn integrate_chunk<P: Precision>(
    set: &Integration<P>,
    dims: &RunDims,
    len: usize,
) -> Result<(), MemError> {
    // The chunk length; the last chunk uses `len` runs of it.
    let width = set.rates.len();
    HostKernel::new("euler", kernel_time(dims, len))
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

/// The name of the busiest engine of `timeline`.
fn busiest_name(timeline: &Timeline) -> &'static str {
    [
        (Activity::HostStaging, "the host"),
        (Activity::HostToDevice, "host to device"),
        (Activity::DeviceToHost, "device to host"),
        (Activity::Kernel, "compute"),
    ]
    .into_iter()
    .max_by_key(|&(activity, _)| timeline.busy_ns(activity))
    .map_or("none", |(_, name)| name)
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
    /// The host's modelled busy time (gathers, scatters, spill I/O), in ns.
    pub host_busy_ns: u64,
    /// The modelled makespan of the batch, in ns.
    pub makespan_ns: u64,
    /// The busy time of the busiest engine, in ns.
    pub busiest_engine_ns: u64,
    /// Which engine that is ("the host", "device to host", ...).
    pub busiest_engine: &'static str,
}

/// Runs `job`, printing the plan, the chunks and the summary; an error when
/// the results differ from the closed form by more than
/// [`CLOSED_FORM_TOLERANCE`].
pub fn run(job: &Job) -> Result<Outcome, MemError> {
    // An 8 GiB device of which other processes leave `device_free` to us.
    let sim = SimBackend::new(8 << 30).with_free(job.device_free);
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
    let host_initial = mgr.new_host_array([dims.n_states, n], Some(&initial), &solver)?;
    let host_rates = mgr.new_host_array([n], Some(&rates), &solver)?;
    let state_shape = [dims.n_saves, dims.n_states, n];
    let mut host_state = if job.pinned_output {
        mgr.create_host_array::<f64>(state_shape, HostMemoryKind::Pinned, None, &solver)?
    } else {
        mgr.new_host_array::<f64>(state_shape, None, &solver)?
    };
    first.weights.copy_from_host(&WEIGHTS)?;
    println!(
        "host: initial {:?}, rates {:?}, state {:?}{}",
        host_initial.kind(),
        host_rates.kind(),
        host_state.kind(),
        host_state
            .spill_path()
            .map(|p| format!(" (made at {}, unlinked once mapped)", p.display()))
            .unwrap_or_default()
    );
    println!();

    let progress = if job.show_progress {
        ProgressBar::new(n as u64)
    } else {
        ProgressBar::hidden()
    }
    .with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let streamer = mgr
        .chunk_streamer(&solver, &plan)?
        .with_pool(mgr.new_staging_pool())
        .with_staging_threads(StagingThreads::new(job.staging_threads)?);
    streamer
        .pipeline_sets(buffers.sets())
        .input_with(&host_initial, |set| &set.initial)
        .input_with(&host_rates, |set| &set.rates)
        .output_with(&mut host_state, |set| &set.state)
        .run(|chunk, set| {
            progress.set_message(format!("chunk {}/{}", chunk.index + 1, plan.chunks()));
            integrate_chunk(set, &dims, chunk.len())?;
            progress.inc(chunk.len() as u64);
            progress.suspend(|| {
                println!(
                    "chunk {:>2}: runs {:>6}..{:<6} done",
                    chunk.index, chunk.runs.start, chunk.runs.end
                )
            });
            Ok::<_, MemError>(())
        })?;
    progress.finish_with_message("done");
    let elapsed = started.elapsed();

    // Check against the closed form of explicit Euler: y_n = y_0 (1 - k dt)^n.
    let results = host_state.as_slice();
    let last = dims.n_saves - 1;
    let steps = (STEPS_PER_SAVE * dims.n_saves) as i32;
    let mut max_error = 0.0f64;
    for run in 0..n {
        for (var, weight) in WEIGHTS.iter().enumerate() {
            let exact = initial[var * n + run] * weight * (1.0 - rates[run] * DT).powi(steps);
            let got = results[(last * dims.n_states + var) * n + run];
            let error = (got - exact).abs();
            // A NaN result is the largest error (f64::max would skip it).
            if error.is_nan() || error > max_error {
                max_error = error;
            }
        }
    }

    let cache_evicted = mgr.allocated_bytes(&cache) == 0;
    let stats = mgr.stats();
    let moved_in = host_initial.nbytes() + host_rates.nbytes();
    let moved_out = host_state.nbytes();
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
    println!("  {:<28} {:.2?}", "streaming time", elapsed);
    println!("  {:<28} {:.3e}", "max error vs closed form", max_error);
    let timeline = sim.timeline();
    let ms = |ns: u64| ns as f64 / 1e6;
    let (host, h2d, d2h, compute) = (
        timeline.busy_ns(Activity::HostStaging),
        timeline.busy_ns(Activity::HostToDevice),
        timeline.busy_ns(Activity::DeviceToHost),
        timeline.busy_ns(Activity::Kernel),
    );
    let sum = host + h2d + compute + d2h;
    let (makespan, busiest) = (timeline.makespan_ns(), timeline.busiest_engine_ns());
    println!(
        "  {:<28} host {:.3} ms (gather, scatter, spill I/O), h2d {:.3} ms, kernels {:.3} ms, \
         d2h {:.3} ms (sum {:.3} ms)",
        "modelled engine busy time",
        ms(host),
        ms(h2d),
        ms(compute),
        ms(d2h),
        ms(sum),
    );
    println!(
        "  {:<28} {:.3} ms: {:.3}x the busiest engine ({}), {:.3}x the sum of the engines",
        "modelled makespan",
        ms(makespan),
        makespan as f64 / busiest.max(1) as f64,
        busiest_name(&timeline),
        makespan as f64 / sum.max(1) as f64,
    );
    println!(
        "  {:<28} {} kept, {} older ones dropped (the figures above count them all)",
        "timeline spans",
        timeline.spans().len(),
        timeline.dropped_spans(),
    );
    println!();
    println!("{}", stats.report());

    if let Some(path) = host_state.spill_path() {
        println!(
            "spill file {} unlinked once mapped: {}",
            path.display(),
            !path.exists()
        );
    }
    host_state.close();
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
        makespan_ns: makespan,
        busiest_engine_ns: busiest,
        busiest_engine: busiest_name(&timeline),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The main job at a hundredth of its size: 3,000 runs on a device
    /// with 1 MiB free, a quarter of it taken by the cache.
    fn small_job() -> Job {
        Job {
            n_runs: 3_000,
            device_free: MIB,
            cache_bytes: MIB / 4,
            granule: MIB / 16,
            spill_threshold: MIB,
            pinned_output: false,
            staging_threads: 1,
            trace: None,
            show_progress: false,
        }
    }

    #[test]
    fn a_small_job_evicts_the_cache_chunks_and_matches_the_closed_form() {
        let outcome = run(&small_job()).unwrap();
        assert_eq!(outcome.free_after_cache, MIB - MIB / 4);
        assert!(outcome.cache_evicted);
        assert!(outcome.chunks > 1, "{outcome:?}");
        assert!(outcome.max_error <= CLOSED_FORM_TOLERANCE, "{outcome:?}");
    }

    #[test]
    fn four_staging_threads_quarter_the_modelled_host_time() {
        // The main job at a tenth of its size: each chunk's results are
        // scattered from windows of about 4 MiB, cut in four pieces.
        let tenth = |staging_threads| Job {
            n_runs: 30_000,
            device_free: 10 * MIB,
            cache_bytes: 10 * MIB / 4,
            granule: 10 * MIB / 16,
            spill_threshold: 10 * MIB,
            staging_threads,
            ..small_job()
        };
        let one = run(&tenth(1)).unwrap();
        let four = run(&tenth(4)).unwrap();
        // On the modelled clock: 4,001,068 ns of host work on one thread,
        // a quarter of it on four (each window's time rounded up to the ns).
        assert_eq!(one.host_busy_ns, 4_001_068, "{one:?}");
        assert_eq!(four.host_busy_ns, 1_000_272, "{four:?}");
        assert_eq!(one.busiest_engine, "the host", "{one:?}");
        // The host is the busiest engine: the makespan falls by what it saved.
        assert_eq!(
            one.makespan_ns - four.makespan_ns,
            one.host_busy_ns - four.host_busy_ns,
            "{one:?}\n{four:?}"
        );
    }

    /// The main job at a tenth of its size, on two staging threads (the
    /// figures of CI's two cores, whatever the machine running the test).
    fn tenth_job(pinned_output: bool) -> Job {
        Job {
            n_runs: 30_000,
            device_free: 10 * MIB,
            cache_bytes: 10 * MIB / 4,
            granule: 10 * MIB / 16,
            spill_threshold: 10 * MIB,
            pinned_output,
            staging_threads: 2,
            ..small_job()
        }
    }

    #[test]
    fn the_main_job_runs_within_a_tenth_of_its_busiest_engine_spilled_or_pinned() {
        let spilled = run(&tenth_job(false)).unwrap();
        let pinned = run(&tenth_job(true)).unwrap();
        println!("{spilled:?}\n{pinned:?}");
        // Spilled results: the host scatters them (2,000,534 ns on two
        // threads) while the device works on; the makespan (1.072x) adds
        // the first chunk's upload, kernel and download before the first
        // scatter.
        assert_eq!(spilled.busiest_engine, "the host", "{spilled:?}");
        assert_eq!(spilled.host_busy_ns, 2_000_534, "{spilled:?}");
        assert_eq!(spilled.makespan_ns, 2_144_586, "{spilled:?}");
        assert!(spilled.makespan_ns * 100 <= spilled.busiest_engine_ns * 110);
        // Pinned results: strided DMA, no host work; the downloads are the
        // busiest engine (965,500 ns), after the first chunk's upload and
        // kernel.
        assert_eq!(pinned.busiest_engine, "device to host", "{pinned:?}");
        assert_eq!(pinned.host_busy_ns, 0, "{pinned:?}");
        assert_eq!(pinned.makespan_ns, 1_022_256, "{pinned:?}");
        assert!(pinned.makespan_ns * 100 <= pinned.busiest_engine_ns * 110);
    }

    #[test]
    fn pinned_results_leave_the_host_idle_and_the_downloads_the_busiest_engine() {
        let spilled = run(&small_job()).unwrap();
        assert_eq!(spilled.busiest_engine, "the host", "{spilled:?}");
        let pinned = run(&Job {
            pinned_output: true,
            ..small_job()
        })
        .unwrap();
        assert_eq!(
            pinned.host_busy_ns, 0,
            "strided copies both ways: {pinned:?}"
        );
        assert_eq!(pinned.busiest_engine, "device to host", "{pinned:?}");
        // The downloads overlap everything else: 107,192 ns against their
        // 101,500 on the modelled clock (the spilled results: 502,186 ns).
        assert!(
            pinned.makespan_ns * 100 <= pinned.busiest_engine_ns * 110,
            "at most 1.10x the busiest engine: {pinned:?}"
        );
    }

    #[test]
    fn a_device_run_out_explains_who_holds_what() {
        // The small job on a device that holds a small cache and little
        // more: even with the cache evicted, the batch does not fit.
        let job = Job {
            device_free: MIB / 16 + 2048,
            cache_bytes: 1024,
            ..small_job()
        };
        let error = run(&job).unwrap_err();
        println!("{error}\n{}", error.fit_report().unwrap());
        let message = error.to_string();
        assert!(message.contains("'lookup cache'"), "{message}");
        assert!(message.contains("pool reserved"), "{message}");
        let report = error.fit_report().unwrap();
        assert_eq!(report.memory.pool.unwrap().used, 1024);
    }
}
