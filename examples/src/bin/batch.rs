//! The main job: a batch of ODE runs several times larger than a small
//! simulated device, declared with `#[derive(GpuBuffers)]`, planned into
//! chunks by the manager, and streamed through the device chunk by chunk
//! (the body is `cubie_mem_examples::batch`). Exits with a failure when the
//! results differ from the closed form.

use std::process::ExitCode;

use cubie_mem::MemError;
use cubie_mem::backend::Calibration;
use cubie_mem_examples::batch::{self, Job, KernelModel};

/// The main job as the command line asks:
/// `batch [--trace FILE] [--output spilled|pinned] [--staging-threads N]
/// [--calibration fixed|measured|FIGURES] [--kernel slow|bus-bound]`.
fn job_from_args() -> Result<Job, MemError> {
    let usage = |value: &str| MemError::Config {
        name: "arguments".into(),
        value: value.to_owned(),
        reason: "usage: batch [--trace FILE] [--output spilled|pinned] [--staging-threads N] \
                 [--calibration fixed|measured|FIGURES] [--kernel slow|bus-bound] (FILE: a \
                 Chrome trace of the modelled \
                 device; the results go to a spill file, or to page-locked memory; N host threads \
                 stage the chunks, at least 1, by default the machine's available parallelism up \
                 to 8; the modelled host works at the fixed figures (the default), at this \
                 machine's, measured once and cached, or at those of a FIGURES file that \
                 Calibration::save or gpu_bench wrote; the kernel takes 100 Euler updates a ns, \
                 the default, or an H100's time for its bytes)"
            .into(),
    };
    let mut job = Job::main_job();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--trace", Some(path)) => job.trace = Some(path.into()),
            ("--output", Some(kind)) if kind == "spilled" || kind == "pinned" => {
                job.pinned_output = kind == "pinned";
            }
            ("--staging-threads", Some(count)) => {
                job.staging_threads = count.parse().map_err(|_| usage(&count))?;
            }
            ("--kernel", Some(kernel)) if kernel == "slow" || kernel == "bus-bound" => {
                job.kernel = if kernel == "slow" {
                    KernelModel::Slow
                } else {
                    KernelModel::BusBound
                };
            }
            ("--calibration", Some(figures)) => {
                job.calibration = match figures.as_str() {
                    "fixed" => Calibration::fixed(),
                    "measured" => Calibration::for_this_machine(),
                    path => Calibration::load(path)?,
                };
            }
            _ => return Err(usage(&arg)),
        }
    }
    Ok(job)
}

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match job_from_args().and_then(|job| batch::run(&job)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
