//! A batch of the solver: planned on a simulated device smaller than the
//! batch, streamed through the chunk pipeline, and checked run by run
//! against the serial reference.

use std::time::{Duration, Instant};

use cubie_mem::{
    ChunkPlan, GpuBuffers, HostArray, ManagerConfig, MemError, MemoryManager, Precision, SimBackend,
};
use ndarray::{ArrayView1, ArrayView3, Ix1, Ix2, Ix3};

use super::{
    BatchSolver, InputHost, Integration, N_OBSERVABLES, N_PARAMS, N_STATES, OutputHost, Real,
    RunRecord, SolverDims, SolverKernel, simulate_run,
};

/// A batch to run.
#[derive(Clone, Debug)]
pub struct Job {
    /// The runs of the batch.
    pub runs: usize,
    /// The simulated device's free memory; `None`: the unchunkable arrays
    /// and a quarter of the per-run arrays, so that the batch, in two
    /// buffer sets, takes about eight chunks.
    pub device_free: Option<u64>,
    /// The time grid.
    pub integration: Integration,
}

impl Job {
    /// `runs` runs on the default grid and device.
    pub fn new(runs: usize) -> Self {
        Job {
            runs,
            device_free: None,
            integration: Integration::default(),
        }
    }
}

/// What a batch did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The manager's plan: chunks, chunk length, buffer sets.
    pub plan: ChunkPlan,
    /// The bytes of the whole batch's device arrays, in one buffer set.
    pub batch_bytes: u64,
    /// The simulated device's free memory.
    pub device_free: u64,
    /// The runs checked against the reference (every run of the batch).
    pub runs_checked: usize,
    /// The runs whose results differ from the reference in any bit.
    pub mismatches: usize,
    /// The first difference found, described.
    pub first_mismatch: Option<String>,
    /// The runs with a status code other than 0.
    pub failed_runs: usize,
    /// The largest `x` of any run at any save (from the state summaries).
    pub largest_x: f64,
    /// The mean over the runs of `x² + y² + z²` at the last save.
    pub mean_final_radius2: f64,
    /// Wall time of the pipeline (upload, kernels, download).
    pub wall: Duration,
    /// Wall time of the serial reference and the comparison.
    pub check_wall: Duration,
    /// The modelled device's makespan, in nanoseconds.
    pub modelled_ns: u64,
}

/// The bytes of the per-run (chunkable) and shared (unchunkable) arrays of
/// a batch, in one buffer set.
fn batch_bytes<P: Precision>(dims: &SolverDims) -> Result<(u64, u64), MemError> {
    let (mut chunkable, mut unchunkable) = (0u64, 0u64);
    for (_, request) in BatchSolver::<P>::requests(dims).iter() {
        let bytes = request.nbytes()?;
        if request.is_chunkable() {
            chunkable = chunkable.saturating_add(bytes);
        } else {
            unchunkable = unchunkable.saturating_add(bytes);
        }
    }
    Ok((chunkable, unchunkable))
}

/// The batch's inputs on the host.
struct Inputs<P: Precision> {
    initial: Vec<P>,
    parameters: Vec<P>,
    drivers: Vec<P>,
}

/// Each run's initial state and parameters around the Lorenz attractor's
/// classic values, and a driver that is on in even segments and zero in
/// odd ones.
fn inputs<P: Precision>(dims: &SolverDims) -> Inputs<P> {
    let runs = dims.runs;
    let value = |row: usize, run: usize| match row {
        0 => 1.0 + 0.01 * (run % 97) as f64,
        1 => 1.0 - 0.02 * (run % 31) as f64,
        _ => 20.0 + 0.5 * (run % 13) as f64,
    };
    let parameter = |row: usize, run: usize| match row {
        0 => 10.0 + 0.1 * (run % 7) as f64,
        1 => 28.0 - 0.5 * (run % 11) as f64,
        _ => 8.0 / 3.0 + 0.01 * (run % 5) as f64,
    };
    let coefficient = |segment: usize, k: usize| match segment % 2 {
        0 => [1.0, -0.5, 0.25, -0.125][k] * (segment + 1) as f64,
        _ => 0.0,
    };
    Inputs {
        initial: (0..N_STATES * runs)
            .map(|i| P::from_f64(value(i / runs, i % runs)))
            .collect(),
        parameters: (0..N_PARAMS * runs)
            .map(|i| P::from_f64(parameter(i / runs, i % runs)))
            .collect(),
        drivers: (0..dims.segments * dims.drivers * dims.coefficients)
            .map(|i| P::from_f64(coefficient(i / dims.coefficients, i % dims.coefficients)))
            .collect(),
    }
}

/// A run's results as bit patterns, array by array: what "bit for bit"
/// compares.
fn bits<P: Precision>(record: &RunRecord<P>) -> [(&'static str, Vec<u64>); 6] {
    let float = |v: &P| v.to_f64().to_bits();
    let integer = |v: &i32| u64::from(v.cast_unsigned());
    [
        ("state", record.state.iter().flatten().map(float).collect()),
        (
            "observables",
            record.observables.iter().flatten().map(float).collect(),
        ),
        (
            "state_summaries",
            record.state_summaries.iter().flatten().map(float).collect(),
        ),
        (
            "observable_summaries",
            record
                .observable_summaries
                .iter()
                .flatten()
                .map(float)
                .collect(),
        ),
        (
            "iteration_counters",
            record.counters.iter().flatten().map(integer).collect(),
        ),
        ("status_codes", vec![integer(&record.status)]),
    ]
}

/// The error of a host array that is not of its declared rank.
fn shape_error(error: ndarray::ShapeError) -> MemError {
    MemError::Kernel {
        kernel: "reference".into(),
        reason: error.to_string(),
    }
}

/// The batch's results as views of their declared shapes.
struct Stored<'a, P> {
    state: ArrayView3<'a, P>,
    observables: ArrayView3<'a, P>,
    state_summaries: ArrayView3<'a, P>,
    observable_summaries: ArrayView3<'a, P>,
    counters: ArrayView3<'a, i32>,
    status: ArrayView1<'a, i32>,
}

/// The rows of `view` at `run`, as arrays of `N` (`N` is the rows' length).
fn rows<T: Copy + Default, const N: usize>(view: &ArrayView3<'_, T>, run: usize) -> Vec<[T; N]> {
    (0..view.shape()[0])
        .map(|t| std::array::from_fn(|v| view.get([t, v, run]).copied().unwrap_or_default()))
        .collect()
}

impl<'a, P: Real> Stored<'a, P> {
    /// Views of `results`.
    fn new(results: &'a OutputHost<P>) -> Result<Self, MemError> {
        let three = |array: &'a HostArray<P>| array.view().into_dimensionality::<Ix3>();
        Ok(Stored {
            state: three(&results.state).map_err(shape_error)?,
            observables: three(&results.observables).map_err(shape_error)?,
            state_summaries: three(&results.state_summaries).map_err(shape_error)?,
            observable_summaries: three(&results.observable_summaries).map_err(shape_error)?,
            counters: (results
                .iteration_counters
                .view()
                .into_dimensionality::<Ix3>())
            .map_err(shape_error)?,
            status: (results.status_codes.view().into_dimensionality::<Ix1>())
                .map_err(shape_error)?,
        })
    }

    /// Run `run`'s results as the host arrays hold them.
    fn record(&self, run: usize) -> RunRecord<P> {
        RunRecord {
            state: rows(&self.state, run),
            observables: rows(&self.observables, run),
            state_summaries: rows(&self.state_summaries, run),
            observable_summaries: rows(&self.observable_summaries, run),
            counters: rows(&self.counters, run),
            status: self.status.get(run).copied().unwrap_or(-1),
        }
    }
}

/// Runs `job` with `kernel` on a simulated device, checking every run.
pub fn run<P: Real>(job: &Job, kernel: &impl SolverKernel<P>) -> Result<Outcome, MemError> {
    job.integration.validate()?;
    let dims = SolverDims::new(job.runs, &job.integration);
    let (chunkable, unchunkable) = batch_bytes::<P>(&dims)?;
    let device_free = job.device_free.unwrap_or(unchunkable + chunkable / 4);
    let sim = SimBackend::new(device_free.max(1 << 30)).with_free(device_free);
    let mgr = MemoryManager::with_config(sim.clone(), ManagerConfig::default().granule(0));
    let holder = mgr.register(BatchSolver::<P>::registration().on_invalidate(|| {}))?;
    let buffers = mgr.allocate_buffers::<BatchSolver<P>>(&holder, &dims)?;

    let data = inputs::<P>(&dims);
    // The driver's coefficients are unchunkable: one array every set shares.
    if let Some(first) = buffers.sets().first() {
        first
            .inputs
            .driver_coefficients
            .copy_from_host(&data.drivers)?;
    }
    // The host side of both parts, of the kinds the manager picks.
    let mut input = InputHost::<P>::new(&mgr, &dims, None, &holder)?;
    input
        .initial_values
        .as_mut_slice()
        .copy_from_slice(&data.initial);
    input
        .parameters
        .as_mut_slice()
        .copy_from_slice(&data.parameters);
    let mut out = OutputHost::<P>::new(&mgr, &dims, None, &holder)?;

    let started = Instant::now();
    mgr.chunk_streamer(&holder, buffers.plan())?
        .pipeline_sets(buffers.sets())
        .bind(&mut input, |set| &set.inputs)
        .bind(&mut out, |set| &set.outputs)
        .run(|chunk, set| kernel.solve_chunk(set, chunk.len()))?;
    let (initial, parameters) = (input.initial_values, input.parameters);
    let wall = started.elapsed();

    let started = Instant::now();
    let stored = Stored::new(&out)?;
    let initial = initial
        .view()
        .into_dimensionality::<Ix2>()
        .map_err(shape_error)?;
    let parameters = parameters
        .view()
        .into_dimensionality::<Ix2>()
        .map_err(shape_error)?;
    let shape = (dims.segments, dims.drivers, dims.coefficients);
    let drivers = ArrayView3::from_shape(shape, &data.drivers[..]).map_err(shape_error)?;
    let (mut mismatches, mut first_mismatch) = (0, None);
    let (mut failed_runs, mut largest_x, mut radius2) = (0, f64::NEG_INFINITY, 0.0);
    for run in 0..job.runs {
        let reference = simulate_run(
            &job.integration,
            std::array::from_fn(|v| initial[[v, run]]),
            std::array::from_fn(|p| parameters[[p, run]]),
            &drivers,
        );
        let got = stored.record(run);
        let differs =
            bits(&reference)
                .into_iter()
                .zip(bits(&got))
                .find_map(|((label, want), (_, got))| {
                    let at = want.iter().zip(&got).position(|(a, b)| a != b);
                    at.map(|at| (label, at, want.len()))
                });
        if let Some((label, at, of)) = differs {
            mismatches += 1;
            first_mismatch.get_or_insert_with(|| {
                format!("run {run}: '{label}' differs at element {at} of the run's {of}")
            });
        }
        failed_runs += usize::from(got.status != 0);
        for window in &got.state_summaries {
            largest_x = largest_x.max(window[N_STATES].to_f64());
        }
        if let Some(last) = got.observables.last() {
            radius2 += last[N_OBSERVABLES - 1].to_f64();
        }
    }
    Ok(Outcome {
        plan: *buffers.plan(),
        batch_bytes: chunkable + unchunkable,
        device_free,
        runs_checked: job.runs,
        mismatches,
        first_mismatch,
        failed_runs,
        largest_x,
        mean_final_radius2: radius2 / job.runs.max(1) as f64,
        wall,
        check_wall: started.elapsed(),
        modelled_ns: sim.timeline().makespan_ns(),
    })
}
