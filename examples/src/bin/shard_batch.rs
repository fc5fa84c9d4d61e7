//! One batch over the processes a launcher starts, on any number of nodes:
//!
//! ```sh
//! mpirun -np 3 shard_batch --out results --runs 100000   # or: srun shard_batch --out ...
//! shard_batch --verify results --runs 100000
//! ```
//!
//! Each process reads its rank from the launcher (`Shard::from_env`), runs
//! its contiguous share of the runs on the devices its local rank picks (the
//! body is `cubie_mem_examples::shard`), and writes `rank-<rank>.json` with
//! its run range and results. `--verify`, once every rank is done, checks
//! that every run was written exactly once and matches the closed form, and
//! fails otherwise. Without a launcher the program is one process that runs
//! the whole batch.

use std::path::PathBuf;
use std::process::ExitCode;

use cubie_mem::Shard;
use cubie_mem_examples::shard::{self, Job};

const USAGE: &str = "usage: shard_batch --out DIR [--runs N] [--devices N]  (one rank, under a \
                     launcher or alone)\n       shard_batch --verify DIR --runs N";

/// What the command line asks for.
enum Mode {
    /// Run this process's rank of the job, writing into the directory.
    Run(Job, PathBuf),
    /// Check the directory's results of a batch of this many runs.
    Verify(PathBuf, usize),
}

fn mode_from_args() -> Result<Mode, String> {
    let (mut out, mut verify) = (None, None);
    let mut job = Job {
        total_runs: 100_000,
        visible_devices: 1,
        device_free: 64 << 10,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{arg} {value}: not a count\n{USAGE}"))
        };
        match arg.as_str() {
            "--out" => out = Some(PathBuf::from(&value)),
            "--verify" => verify = Some(PathBuf::from(&value)),
            "--runs" => job.total_runs = number()?,
            "--devices" => job.visible_devices = number()?,
            _ => return Err(format!("unexpected {arg} {value}\n{USAGE}")),
        }
    }
    match (out, verify) {
        (Some(dir), None) => Ok(Mode::Run(job, dir)),
        (None, Some(dir)) => Ok(Mode::Verify(dir, job.total_runs)),
        _ => Err(USAGE.into()),
    }
}

fn run(mode: Mode) -> Result<(), String> {
    match mode {
        Mode::Run(job, dir) => {
            let shard = Shard::from_env().map_err(|error| error.to_string())?;
            let report = shard::run_rank(&shard, &job, &dir).map_err(|error| error.to_string())?;
            println!(
                "{shard}: runs {:?} of {} on device(s) {:?} of {}, {} chunk(s), written to {}",
                report.runs,
                job.total_runs,
                report.devices,
                job.visible_devices,
                report.chunks,
                report.file.display()
            );
        }
        Mode::Verify(dir, total_runs) => {
            let verified = shard::verify(&dir, total_runs)?;
            println!(
                "verified: runs 0..{total_runs} each written exactly once across {} file(s), \
                 largest relative difference from the closed form {:.1e}",
                verified.files, verified.max_error
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    cubie_mem_examples::init_logging();
    match mode_from_args().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
