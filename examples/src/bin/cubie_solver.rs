//! cubie's batch solver on cubie-mem: `InputArrays` and `OutputArrays`
//! composed in one `BatchSolver` with `#[buffer(part)]`, a batch of Lorenz
//! runs integrated with RK4 and streamed through the chunk pipeline on a
//! simulated device a quarter the size of the batch, every run checked bit
//! for bit against a serial reference (the body is
//! `cubie_mem_examples::cubie_solver`).
//!
//! `cubie_solver [--runs N] [--precision f64|f32]` (defaults: 100,000 runs,
//! f64). It prints the plan, the chunk count and a summary, and exits with a
//! failure when any run differs from the reference. CI runs the same batch
//! at 3,000 runs through the test in `examples/src/cubie_solver/tests.rs`,
//! which `cargo test --workspace` runs.

use std::process::ExitCode;

use cubie_mem::MemError;
use cubie_mem_examples::cubie_solver::{self, HostRk4, Job, Outcome, Real};

/// The modelled device's RK4 steps per nanosecond, over all runs.
const STEPS_PER_NS: u64 = 50;

/// The batch and precision the command line asks for.
fn args() -> Result<(Job, bool), MemError> {
    let usage = |value: &str| MemError::Config {
        name: "arguments".into(),
        value: value.to_owned(),
        reason: "usage: cubie_solver [--runs N] [--precision f64|f32] (N at least 1)".into(),
    };
    let (mut job, mut single) = (Job::new(100_000), false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--runs", Some(runs)) => match runs.parse() {
                Ok(runs) if runs > 0 => job.runs = runs,
                _ => return Err(usage(&runs)),
            },
            ("--precision", Some(precision)) if precision == "f64" || precision == "f32" => {
                single = precision == "f32";
            }
            _ => return Err(usage(&arg)),
        }
    }
    Ok((job, single))
}

/// Runs `job` in precision `P` and prints what it did.
fn solve<P: Real>(job: &Job, precision: &str) -> Result<Outcome, MemError> {
    let kernel = HostRk4 {
        integration: job.integration.clone(),
        steps_per_ns: STEPS_PER_NS,
    };
    let outcome = cubie_solver::run::<P>(job, &kernel)?;
    let grid = &job.integration;
    println!(
        "{} Lorenz runs in {precision}, RK4: {} steps of {}, saved every {}, summarised every {} saves",
        job.runs,
        grid.steps(),
        grid.dt,
        grid.steps_per_save,
        grid.saves_per_summary
    );
    println!(
        "batch {:.1} MiB on a simulated device with {:.1} MiB free",
        outcome.batch_bytes as f64 / (1u64 << 20) as f64,
        outcome.device_free as f64 / (1u64 << 20) as f64
    );
    println!("plan: {}", outcome.plan);
    println!(
        "chunks: {} of {} runs, {} buffer sets",
        outcome.plan.chunks(),
        outcome.plan.chunk_length(),
        outcome.plan.buffer_sets()
    );
    println!(
        "pipeline {:.3} s wall ({:.3} ms modelled), reference and check {:.3} s",
        outcome.wall.as_secs_f64(),
        outcome.modelled_ns as f64 / 1e6,
        outcome.check_wall.as_secs_f64()
    );
    println!(
        "status 0 in {} of {} runs; largest x {:.6}; mean final x²+y²+z² {:.6}",
        outcome.runs_checked - outcome.failed_runs,
        outcome.runs_checked,
        outcome.largest_x,
        outcome.mean_final_radius2
    );
    Ok(outcome)
}

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    let result = args().and_then(|(job, single)| match single {
        true => solve::<f32>(&job, "f32"),
        false => solve::<f64>(&job, "f64"),
    });
    match result {
        Ok(outcome) if outcome.mismatches == 0 => {
            println!(
                "every run matches the serial reference bit for bit ({} runs)",
                outcome.runs_checked
            );
            ExitCode::SUCCESS
        }
        Ok(outcome) => {
            eprintln!(
                "error: {} of {} runs differ from the serial reference; first: {}",
                outcome.mismatches,
                outcome.runs_checked,
                outcome.first_mismatch.unwrap_or_default()
            );
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
