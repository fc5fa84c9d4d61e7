//! The main job: a batch of ODE runs several times larger than a small
//! simulated device, declared with `#[derive(GpuBuffers)]`, planned into
//! chunks by the manager, and streamed through the device chunk by chunk.
//!
//! Each run integrates the decay `dy/dt = -k y` of `N_STATES` variables with
//! explicit Euler steps; the "kernel" runs on the host over the chunk's device
//! arrays, launched through the backend with a modelled duration, so the
//! simulated device times it on its compute engine. Two buffer sets
//! (`pipeline_depth = 2`) let the upload of chunk k + 1 and the download of
//! chunk k - 1 run while chunk k computes. Prints the chunk plan, a progress
//! bar per chunk, a summary table with the modelled overlap and the
//! manager's memory table.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cubie_mem::timeline::{Activity, Timeline};
use cubie_mem::{
    ArrayRequest, Bytes, DeviceArray, GpuBuffers, HostKernel, HostMemoryKind, ManagerConfig,
    MemError, MemoryManager, Precision, Registration, SimBackend,
};
use indicatif::{ProgressBar, ProgressStyle};

const MIB: u64 = 1 << 20;
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

/// The command line: `batch [--trace FILE] [--output spilled|pinned]`.
struct Options {
    /// Where to write the modelled device's Chrome trace.
    trace: Option<std::path::PathBuf>,
    /// Keep the results in page-locked memory instead of the spill file.
    pinned_output: bool,
}

fn options() -> Result<Options, MemError> {
    let usage = |value: &str| MemError::Config {
        name: "arguments".into(),
        value: value.to_owned(),
        reason: "usage: batch [--trace FILE] [--output spilled|pinned] (FILE: a Chrome trace of \
                 the modelled device; the results go to a spill file, or to page-locked memory)"
            .into(),
    };
    let mut options = Options {
        trace: None,
        pinned_output: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--trace", Some(path)) => options.trace = Some(path.into()),
            ("--output", Some(kind)) if kind == "spilled" || kind == "pinned" => {
                options.pinned_output = kind == "pinned";
            }
            _ => return Err(usage(&arg)),
        }
    }
    Ok(options)
}

fn run() -> Result<(), MemError> {
    let Options {
        trace,
        pinned_output,
    } = options()?;
    // An 8 GiB device of which other processes leave 96 MiB to us.
    let sim = SimBackend::new(8 << 30).with_free(96 * MIB);
    let mgr = MemoryManager::with_config(
        sim.clone(),
        ManagerConfig {
            allocation_granule_bytes: 8 * MIB,
            ..Default::default()
        },
    );

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
            ArrayRequest::of::<u8>([24 * MIB as usize]).unchunkable(),
        )],
    )?;
    mgr.allocate_queue(&cache)?;

    // Results above 128 MiB spill to a memory-mapped temporary file.
    let solver = mgr.register(
        Integration::<f64>::registration()
            .name("solver")
            .on_invalidate(|| tracing::warn!("solver buffers invalidated"))
            .host_spill_threshold(128 * MIB),
    )?;
    let dims = RunDims {
        n_states: 4,
        n_saves: 50,
        n_runs: 300_000,
    };
    let buffers = mgr.allocate_buffers::<Integration<f64>>(&solver, &dims)?;
    let plan = *buffers.plan();

    let batch_bytes = plan.chunkable_bytes() + plan.unchunkable_bytes();
    let state_bytes = (dims.n_runs * dims.n_states * dims.n_saves * size_of::<f64>()) as u64;
    println!(
        "batch: {} of state ({} runs x {} states x {} saves) and {} of other arrays, {} in all, \
         on a device with {} free ({:.1}x)",
        Bytes(state_bytes),
        dims.n_runs,
        dims.n_states,
        dims.n_saves,
        Bytes(batch_bytes - state_bytes),
        Bytes(batch_bytes),
        Bytes(96 * MIB),
        batch_bytes as f64 / (96 * MIB) as f64
    );
    println!(
        "plan: {} chunks of {} runs in {} buffer sets (allocatable {}, withheld {})",
        plan.chunks(),
        plan.chunk_length(),
        plan.buffer_sets(),
        Bytes(plan.allocatable()),
        Bytes(plan.withheld())
    );
    for (name, shape) in [
        ("initial", buffers.initial.shape()),
        ("rates", buffers.rates.shape()),
        ("state", buffers.state.shape()),
        ("weights", buffers.weights.shape()),
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
    let mut host_state = if pinned_output {
        mgr.create_host_array::<f64>(state_shape, HostMemoryKind::Pinned, None, &solver)?
    } else {
        mgr.new_host_array::<f64>(state_shape, None, &solver)?
    };
    buffers.weights.copy_from_host(&[1.0, 0.5, 0.25, 0.125])?;
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

    let progress = ProgressBar::new(n as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let streamer = mgr
        .chunk_streamer(&solver, &plan)?
        .with_pool(mgr.new_staging_pool());
    streamer
        .pipeline_sets(buffers.sets())
        .input_with(&host_initial, |set| &set.initial, 1)
        .input_with(&host_rates, |set| &set.rates, 0)
        .output_with(&mut host_state, |set| &set.state, 2)
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
    let weights = [1.0, 0.5, 0.25, 0.125];
    let mut max_error = 0.0f64;
    for run in 0..n {
        for (var, weight) in weights.iter().enumerate() {
            let exact = initial[var * n + run] * weight * (1.0 - rates[run] * DT).powi(steps);
            let got = results[(last * dims.n_states + var) * n + run];
            max_error = max_error.max((got - exact).abs());
        }
    }

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
    if let Some(path) = trace {
        let write = std::fs::File::create(&path)
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
    if max_error > 1e-12 {
        return Err(MemError::Config {
            name: "result check".into(),
            value: format!("{max_error:e}"),
            reason: "the streamed results differ from the closed form".into(),
        });
    }
    Ok(())
}

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
