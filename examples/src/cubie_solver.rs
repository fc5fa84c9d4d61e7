//! cubie's batch solver, declared with cubie-mem: the buffers of cubie
//! 0.17's `BatchSolverKernel` as two buffer structs, [`InputArrays`] and
//! [`OutputArrays`], composed in one [`BatchSolver`] with
//! `#[buffer(part)]` (one owner, one plan, two buffer sets, stream group
//! `"solver"`), and a batch of Lorenz systems integrated with classic RK4
//! streamed through the chunk pipeline on a simulated device a quarter the
//! size of the batch. Each run's parameters (`sigma`, `rho`, `beta`) come
//! from `parameters`, a piecewise-cubic driver forces `x`, every
//! `steps_per_save` steps the state (and the time, in the row after the
//! states), two observables and the iteration counters are saved, and each
//! summary window of saves gives the mean and maximum of every state and
//! observable.
//!
//! The kernel is behind [`SolverKernel`]: [`HostRk4`] runs it on the
//! simulated device, indexing its chunk's arrays as they are declared
//! (`state[[save, v, run]]`, through the typed-rank `ndarray` views of
//! `KernelArgs::read_runs`/`write_runs`), its chunk's runs split over host
//! threads by `KernelArgs::par_runs`; a GPU implementation of the
//! same trait launches PTX on the group's stream, as
//! `euler_decay` (`examples/src/euler_decay.rs`, feature `cuda`) does.
//!
//! Every run of the batch is checked against a serial reference computed on
//! the host with the same arithmetic, bit for bit ([`Outcome::mismatches`]).
//! The `cubie_solver` binary runs it (`--runs N`); the test beside this
//! module runs it at a few thousand runs, in several chunks, and
//! `cargo test --workspace` (what CI runs) runs that test.

mod job;
#[cfg(test)]
mod tests;

use std::ops::{Add, Div, Mul, Sub};
use std::time::Duration;

use cubie_mem::{DeviceArray, GpuBuffers, HostKernel, MemError, Precision};
use ndarray::{ArrayView3, Ix1, Ix2, Ix3};

pub use job::{Job, Outcome, run};

/// The states of the Lorenz system: `x`, `y`, `z`.
pub const N_STATES: usize = 3;
/// The parameters of each run: `sigma`, `rho`, `beta`.
pub const N_PARAMS: usize = 3;
/// The observables saved with the state: `x * y` and `x² + y² + z²`.
pub const N_OBSERVABLES: usize = 2;
/// The drivers: one, forcing `dx/dt`.
pub const N_DRIVERS: usize = 1;
/// The driver's polynomial order in each segment (cubic).
pub const DRIVER_ORDER: usize = 3;
/// The iteration counters saved with each save: steps, right-hand-side
/// evaluations, accepted and rejected steps since the previous save.
pub const N_COUNTERS: usize = 4;
/// The summary metrics of each variable: mean and maximum.
const N_METRICS: usize = 2;

/// Floating-point arithmetic of a solver's precision: `f32` (cubie's
/// default) or `f64`.
pub trait Real:
    Precision
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
}

impl<P> Real for P where
    P: Precision + Default + Add<Output = P> + Sub<Output = P> + Mul<Output = P> + Div<Output = P>
{
}

/// The sizes the buffers' shapes name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolverDims {
    /// The states, `N_STATES`.
    pub n_states: usize,
    /// The parameters, `N_PARAMS`.
    pub n_params: usize,
    /// The driver's segments.
    pub segments: usize,
    /// The drivers, `N_DRIVERS`.
    pub drivers: usize,
    /// The coefficients of each segment's polynomial: order + 1.
    pub coefficients: usize,
    /// The saves of each run.
    pub saves: usize,
    /// The rows of a saved state: the states, then the time.
    pub state_rows: usize,
    /// The observables, `N_OBSERVABLES`.
    pub observables: usize,
    /// The summary windows of each run.
    pub summaries: usize,
    /// The rows of the state summaries: each state's mean, then its maximum.
    pub state_summary_rows: usize,
    /// The rows of the observable summaries: means, then maxima.
    pub observable_summary_rows: usize,
    /// The runs of the batch.
    pub runs: usize,
}

impl SolverDims {
    /// The sizes of a batch of `runs` runs integrated as `integration` says.
    pub fn new(runs: usize, integration: &Integration) -> Self {
        SolverDims {
            n_states: N_STATES,
            n_params: N_PARAMS,
            segments: integration.segments,
            drivers: N_DRIVERS,
            coefficients: DRIVER_ORDER + 1,
            saves: integration.saves,
            state_rows: N_STATES + 1,
            observables: N_OBSERVABLES,
            summaries: integration.summaries(),
            state_summary_rows: N_METRICS * N_STATES,
            observable_summary_rows: N_METRICS * N_OBSERVABLES,
            runs,
        }
    }
}

/// cubie's `InputArrays`: what each run starts from, and the drivers every
/// run shares. `InputHost` holds the batch's inputs on the host.
#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = SolverDims, host = InputHost)]
pub struct InputArrays<P: Precision> {
    /// Each run's initial state.
    #[buffer(shape = [n_states, runs], chunk_axis = runs, input)]
    pub initial_values: DeviceArray<P>,
    /// Each run's `sigma`, `rho` and `beta`.
    #[buffer(shape = [n_params, runs], chunk_axis = runs, input)]
    pub parameters: DeviceArray<P>,
    /// The drivers' polynomial coefficients per segment, lowest order
    /// first; one array every buffer set shares.
    #[buffer(shape = [segments, drivers, coefficients], unchunkable)]
    pub driver_coefficients: DeviceArray<P>,
}

/// cubie's `OutputArrays`: saves and summaries as `[time, variable, run]`,
/// a status code and iteration counters per run. `OutputHost` holds the
/// batch's results on the host.
#[derive(GpuBuffers)]
#[stream_group("solver")]
#[buffers(dims = SolverDims, host = OutputHost)]
pub struct OutputArrays<P: Precision> {
    /// The saved states, the time of each save in the row after them.
    #[buffer(shape = [saves, state_rows, runs], chunk_axis = runs, output)]
    pub state: DeviceArray<P>,
    /// The saved observables.
    #[buffer(shape = [saves, observables, runs], chunk_axis = runs, output)]
    pub observables: DeviceArray<P>,
    /// Each window's mean and maximum of each state.
    #[buffer(shape = [summaries, state_summary_rows, runs], chunk_axis = runs, output)]
    pub state_summaries: DeviceArray<P>,
    /// Each window's mean and maximum of each observable.
    #[buffer(shape = [summaries, observable_summary_rows, runs], chunk_axis = runs, output)]
    pub observable_summaries: DeviceArray<P>,
    /// 0 for a run that stayed finite, 1 otherwise.
    #[buffer(shape = [runs], chunk_axis = runs, output)]
    pub status_codes: DeviceArray<i32>,
    /// The counters of each save interval (`N_COUNTERS`).
    #[buffer(shape = [saves, 4, runs], chunk_axis = runs, output)]
    pub iteration_counters: DeviceArray<i32>,
}

/// cubie's `BatchSolverKernel`'s buffers: both parts under one owner and
/// one plan, in two buffer sets, so that one chunk's copies overlap
/// another's computation.
#[derive(GpuBuffers)]
#[buffers(pipeline_depth = 2)]
pub struct BatchSolver<P: Precision> {
    /// The inputs.
    #[buffer(part)]
    pub inputs: InputArrays<P>,
    /// The outputs.
    #[buffer(part)]
    pub outputs: OutputArrays<P>,
}

/// The time grid: cubie's `dt`, `dt_save` (as steps per save) and
/// `dt_summarise` (as saves per summary), and the driver's segments.
#[derive(Clone, Debug, PartialEq)]
pub struct Integration {
    /// The step.
    pub dt: f64,
    /// Steps between saves.
    pub steps_per_save: usize,
    /// Saves per run; the first after `steps_per_save` steps.
    pub saves: usize,
    /// Saves per summary window; must divide `saves`.
    pub saves_per_summary: usize,
    /// The driver's segments, of equal length, over the whole integration.
    pub segments: usize,
}

impl Default for Integration {
    /// 200 steps of 0.005 (t = 1), saved every 10, summarised every 5
    /// saves, the driver in 4 segments.
    fn default() -> Self {
        Integration {
            dt: 0.005,
            steps_per_save: 10,
            saves: 20,
            saves_per_summary: 5,
            segments: 4,
        }
    }
}

impl Integration {
    /// The summary windows of a run.
    pub fn summaries(&self) -> usize {
        self.saves.checked_div(self.saves_per_summary).unwrap_or(0)
    }

    /// The steps of a run.
    pub fn steps(&self) -> usize {
        self.saves.saturating_mul(self.steps_per_save)
    }

    /// Refuses a grid this example cannot integrate.
    fn validate(&self) -> Result<(), MemError> {
        let refuse = |reason: &str| {
            Err(MemError::Config {
                name: "integration".into(),
                value: format!("{self:?}"),
                reason: reason.into(),
            })
        };
        if !(self.dt.is_finite() && self.dt > 0.0) {
            return refuse("dt must be positive");
        }
        if self.steps_per_save == 0 || self.saves == 0 || self.segments == 0 {
            return refuse("steps per save, saves and segments must be at least 1");
        }
        if self.saves_per_summary == 0 || !self.saves.is_multiple_of(self.saves_per_summary) {
            return refuse("saves per summary must divide the saves");
        }
        if (self.steps_per_save.checked_mul(4)).is_none_or(|n| i32::try_from(n).is_err()) {
            return refuse("the counters are i32: 4 x steps per save must fit one");
        }
        Ok(())
    }

    /// The length of a driver segment.
    fn segment_duration(&self) -> f64 {
        self.dt * self.steps() as f64 / self.segments as f64
    }
}

/// One run's results, in the order they are saved.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord<P> {
    /// Each save's states and time.
    pub state: Vec<[P; N_STATES + 1]>,
    /// Each save's observables.
    pub observables: Vec<[P; N_OBSERVABLES]>,
    /// Each window's state means, then maxima.
    pub state_summaries: Vec<[P; N_METRICS * N_STATES]>,
    /// Each window's observable means, then maxima.
    pub observable_summaries: Vec<[P; N_METRICS * N_OBSERVABLES]>,
    /// Each save's counters.
    pub counters: Vec<[i32; N_COUNTERS]>,
    /// 0 when the state stayed finite at every save, else 1.
    pub status: i32,
}

/// The driver at time `t`: the cubic of `t`'s segment, evaluated by Horner
/// at the time since the segment began.
fn driver<P: Real>(drivers: &ArrayView3<'_, P>, segment_duration: P, t: P) -> P {
    let segments = drivers.shape()[0];
    let mut segment = 0;
    while segment + 1 < segments && P::from_f64((segment + 1) as f64) * segment_duration <= t {
        segment += 1;
    }
    let tau = t - P::from_f64(segment as f64) * segment_duration;
    let mut value = P::from_f64(0.0);
    for k in (0..=DRIVER_ORDER).rev() {
        value = value * tau + drivers[[segment, 0, k]];
    }
    value
}

/// The Lorenz system's right-hand side at `y`, `x` forced by `forcing`
/// (the driver's value at that time).
fn lorenz<P: Real>(params: &[P; N_PARAMS], forcing: P, y: &[P; N_STATES]) -> [P; N_STATES] {
    let [sigma, rho, beta] = *params;
    let [x, y, z] = *y;
    [
        sigma * (y - x) + forcing,
        x * (rho - z) - y,
        x * y - beta * z,
    ]
}

/// `y + h * k`, element by element.
fn offset<P: Real>(y: &[P; N_STATES], h: P, k: &[P; N_STATES]) -> [P; N_STATES] {
    std::array::from_fn(|i| y[i] + h * k[i])
}

/// Integrates one run with classic RK4: the arithmetic of the kernel and
/// of the serial reference alike.
pub fn simulate_run<P: Real>(
    integration: &Integration,
    initial: [P; N_STATES],
    params: [P; N_PARAMS],
    drivers: &ArrayView3<'_, P>,
) -> RunRecord<P> {
    let (dt, half, two, six) = (
        P::from_f64(integration.dt),
        P::from_f64(0.5 * integration.dt),
        P::from_f64(2.0),
        P::from_f64(6.0),
    );
    let segment = P::from_f64(integration.segment_duration());
    let windows = integration.summaries();
    let mut record = RunRecord {
        state: Vec::with_capacity(integration.saves),
        observables: Vec::with_capacity(integration.saves),
        state_summaries: Vec::with_capacity(windows),
        observable_summaries: Vec::with_capacity(windows),
        counters: Vec::with_capacity(integration.saves),
        status: 0,
    };
    let mut y = initial;
    let mut step = 0usize;
    for _save in 0..integration.saves {
        for _ in 0..integration.steps_per_save {
            let t = P::from_f64(step as f64) * dt;
            let k1 = lorenz(&params, driver(drivers, segment, t), &y);
            let mid = driver(drivers, segment, t + half);
            let k2 = lorenz(&params, mid, &offset(&y, half, &k1));
            let k3 = lorenz(&params, mid, &offset(&y, half, &k2));
            let k4 = lorenz(
                &params,
                driver(drivers, segment, t + dt),
                &offset(&y, dt, &k3),
            );
            y = std::array::from_fn(|i| y[i] + dt / six * (k1[i] + two * (k2[i] + k3[i]) + k4[i]));
            step += 1;
        }
        let t = P::from_f64(step as f64) * dt;
        let [x, yy, z] = y;
        record.state.push([x, yy, z, t]);
        record.observables.push([x * yy, x * x + yy * yy + z * z]);
        let steps = i32::try_from(integration.steps_per_save).unwrap_or(i32::MAX);
        record
            .counters
            .push([steps, steps.saturating_mul(4), steps, 0]);
        if !y.iter().all(|v| v.to_f64().is_finite()) {
            record.status = 1;
        }
    }
    let per = integration.saves_per_summary;
    for window in 0..windows {
        let saves = window * per..(window + 1) * per;
        record
            .state_summaries
            .push(summarise(&record.state[saves.clone()]));
        record
            .observable_summaries
            .push(summarise(&record.observables[saves]));
    }
    record
}

/// The mean of each of the first `N / 2` columns of `rows`, then each
/// one's maximum (a saved state's time column left out).
fn summarise<P: Real, const C: usize, const N: usize>(rows: &[[P; C]]) -> [P; N] {
    let columns = N / N_METRICS;
    let mut out = [P::from_f64(0.0); N];
    for (i, row) in rows.iter().enumerate() {
        for v in 0..columns {
            out[v] = out[v] + row[v];
            if i == 0 || row[v] > out[columns + v] {
                out[columns + v] = row[v];
            }
        }
    }
    for mean in &mut out[..columns] {
        *mean = *mean / P::from_f64(rows.len() as f64);
    }
    out
}

/// A solver's kernel: computes the first `runs` runs of the chunk that
/// `set` holds, on the device the buffers live on.
///
/// [`HostRk4`] is the simulated device's; on a GPU an implementation holds
/// a loaded PTX module and launches it on the group's stream over views of
/// the set's arrays, as `euler_decay` (`examples/src/euler_decay.rs`,
/// feature `cuda`) does.
pub trait SolverKernel<P: Precision> {
    /// Queues the computation of the chunk's `runs` runs.
    fn solve_chunk(&self, set: &BatchSolver<P>, runs: usize) -> Result<(), MemError>;
}

/// The kernel on the simulated device: a `HostKernel` over the set's
/// arrays, timed on the device's compute engine.
#[derive(Clone, Debug)]
pub struct HostRk4 {
    /// The time grid.
    pub integration: Integration,
    /// The modelled device's RK4 steps per nanosecond, over all runs.
    pub steps_per_ns: u64,
}

/// The kernel's name in errors and traces.
const KERNEL: &str = "lorenz_rk4";

impl<P: Real> SolverKernel<P> for HostRk4 {
    fn solve_chunk(&self, set: &BatchSolver<P>, runs: usize) -> Result<(), MemError> {
        let (inputs, outputs) = (&set.inputs, &set.outputs);
        let steps = (runs as u64).saturating_mul(self.integration.steps() as u64);
        let duration = Duration::from_nanos(steps / self.steps_per_ns.max(1));
        HostKernel::new(KERNEL, duration)
            .reads(&inputs.initial_values)
            .reads(&inputs.parameters)
            .reads(&inputs.driver_coefficients)
            .writes(&outputs.state)
            .writes(&outputs.observables)
            .writes(&outputs.state_summaries)
            .writes(&outputs.observable_summaries)
            .writes(&outputs.status_codes)
            .writes(&outputs.iteration_counters)
            .launch(|args| {
                let views = (
                    args.read_runs::<Ix2, _>(&inputs.initial_values, runs)?,
                    args.read_runs::<Ix2, _>(&inputs.parameters, runs)?,
                    args.read_runs::<Ix3, _>(&inputs.driver_coefficients, runs)?,
                    args.write_runs::<Ix3, _>(&outputs.state, runs)?,
                    args.write_runs::<Ix3, _>(&outputs.observables, runs)?,
                    args.write_runs::<Ix3, _>(&outputs.state_summaries, runs)?,
                    args.write_runs::<Ix3, _>(&outputs.observable_summaries, runs)?,
                    args.write_runs::<Ix1, _>(&outputs.status_codes, runs)?,
                    args.write_runs::<Ix3, _>(&outputs.iteration_counters, runs)?,
                );
                // Each part of the chunk's runs on a host thread, its views
                // indexed from its first run.
                args.par_runs(views, |part, views| {
                    let (initial, params, drivers, mut state, mut observables) =
                        (views.0, views.1, views.2, views.3, views.4);
                    let (mut state_summaries, mut observable_summaries, mut status, mut counters) =
                        (views.5, views.6, views.7, views.8);
                    for run in 0..part.len() {
                        let record = simulate_run(
                            &self.integration,
                            std::array::from_fn(|v| initial[[v, run]]),
                            std::array::from_fn(|p| params[[p, run]]),
                            &drivers,
                        );
                        for (save, row) in record.state.iter().enumerate() {
                            for (v, &value) in row.iter().enumerate() {
                                state[[save, v, run]] = value;
                            }
                            for (o, &value) in record.observables[save].iter().enumerate() {
                                observables[[save, o, run]] = value;
                            }
                            for (c, &count) in record.counters[save].iter().enumerate() {
                                counters[[save, c, run]] = count;
                            }
                        }
                        for (window, row) in record.state_summaries.iter().enumerate() {
                            for (m, &value) in row.iter().enumerate() {
                                state_summaries[[window, m, run]] = value;
                            }
                            for (m, &value) in
                                record.observable_summaries[window].iter().enumerate()
                            {
                                observable_summaries[[window, m, run]] = value;
                            }
                        }
                        status[run] = record.status;
                    }
                    Ok(())
                })
            })
    }
}
