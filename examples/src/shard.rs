//! The cluster example's body: one rank of a batch that a launcher (`srun`,
//! `mpirun`) runs as several processes. The `shard_batch` binary runs it;
//! the tests run it for ranks described by hand.
//!
//! Each rank reads its [`Shard`], takes its contiguous range of the batch's
//! runs, and streams it across the devices its local rank picks with a
//! [`DeviceSet`] (simulated devices here), which splits the range between
//! them and streams each device's part on a thread of its own. Each run integrates
//! `dy/dt = -k y` with explicit Euler steps, whose closed form is
//! `y0 (1 - k dt)^steps`. The rank writes its run range and its results to
//! `rank-<rank>.json` in the output directory; nothing else is shared
//! between ranks. [`verify`], a separate step once every rank is done,
//! checks that every run of the batch was written exactly once and matches
//! the closed form.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cubie_mem::{
    DeviceArray, DeviceSet, GpuBuffers, HostKernel, HostMemoryKind, ManagerConfig, MemError,
    Registration, Shard, SimBackend, Throughput,
};
use serde_json::{Value, json};

/// Euler steps per run.
const STEPS: u16 = 100;
/// Step size.
const DT: f64 = 0.01;
/// The largest difference from the closed form a result may show, relative
/// to the result (the steps and the closed form round differently).
pub const TOLERANCE: f64 = 1e-12;

/// A run's initial value and decay rate, from its index in the batch.
fn inputs(run: usize) -> (f64, f64) {
    (1.0 + (run % 7) as f64, 0.5 + (run % 10) as f64 * 0.1)
}

/// The closed form of run `run`'s result.
pub fn closed_form(run: usize) -> f64 {
    let (y0, k) = inputs(run);
    y0 * (1.0 - k * DT).powi(i32::from(STEPS))
}

/// What every rank of the job runs.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// Runs in the whole batch, over every rank.
    pub total_runs: usize,
    /// Devices visible on each node.
    pub visible_devices: usize,
    /// Free memory of each simulated device: small, so that a rank's share
    /// runs in several chunks.
    pub device_free: u64,
}

/// What one rank did.
#[derive(Clone, Debug)]
pub struct RankReport {
    /// The rank's runs of the batch.
    pub runs: Range<usize>,
    /// The devices of its node it ran them on.
    pub devices: Range<usize>,
    /// Chunks it streamed, over all its devices.
    pub chunks: usize,
    /// The file it wrote.
    pub file: PathBuf,
}

/// The arrays of one device's part: initial values and rates in, results
/// out, each with a run per element.
#[derive(GpuBuffers)]
#[buffers(dims = Runs, pipeline_depth = 2)]
pub struct Decay {
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    y0: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    k: DeviceArray<f64>,
    #[buffer(shape = [n_runs], chunk_axis = n_runs)]
    y: DeviceArray<f64>,
}

/// The dims of [`Decay`]: its run count.
pub struct Runs {
    /// Runs of a device's part.
    pub n_runs: usize,
}

/// Runs the part of `job` that `shard` describes on the devices its local
/// rank picks (a [`DeviceSet`] of simulated devices, which splits the
/// rank's runs between them and streams each device's part on a thread of
/// its own) and writes it to `out_dir/rank-<rank>.json`.
pub fn run_rank(shard: &Shard, job: &Job, out_dir: &Path) -> Result<RankReport, MemError> {
    let runs = shard.runs(job.total_runs);
    let devices = shard.devices(job.visible_devices);
    if devices.is_empty() {
        return Err(MemError::Config {
            name: "visible devices".into(),
            value: job.visible_devices.to_string(),
            reason: "a rank needs at least one device".into(),
        });
    }
    let (values, chunks) = stream(&runs, devices.len(), job.device_free)?;
    let file = out_dir.join(format!("rank-{}.json", shard.rank()));
    let record = json!({
        "rank": shard.rank(),
        "size": shard.size(),
        "runs": [runs.start, runs.end],
        "values": values,
    });
    // Written whole under another name first, so that a file of this name
    // is always complete.
    let partial = out_dir.join(format!("rank-{}.json.partial", shard.rank()));
    std::fs::create_dir_all(out_dir)
        .and_then(|()| std::fs::write(&partial, record.to_string()))
        .and_then(|()| std::fs::rename(&partial, &file))
        .map_err(|error| MemError::Io {
            operation: "writing the results",
            path: file.display().to_string(),
            message: error.to_string(),
        })?;
    Ok(RankReport {
        runs,
        devices,
        chunks,
        file,
    })
}

/// Streams the batch's `runs` across `devices` simulated devices with
/// `device_free` bytes free each: their results, and the chunks it took.
fn stream(
    runs: &Range<usize>,
    devices: usize,
    device_free: u64,
) -> Result<(Vec<f64>, usize), MemError> {
    let n = runs.len();
    if n == 0 {
        return Ok((Vec::new(), 0));
    }
    let set = DeviceSet::simulated(
        (0..devices).map(|_| SimBackend::new(1 << 30).with_free(device_free)),
        ManagerConfig::default().granule(0),
    );
    let buffers = set.allocate::<Decay>(
        n,
        &Throughput::Equal,
        |_| Decay::registration().name("decay").on_invalidate(|| {}),
        |n_runs| Runs { n_runs },
    )?;
    let chunks = buffers
        .portions()
        .iter()
        .map(|share| share.buffers().plan().chunks())
        .sum();
    // The host arrays hold the rank's runs; any device's manager makes them.
    let manager = &set.managers()[0];
    let holder = manager.register(Registration::new().name("host arrays"))?;
    let (initial, rates): (Vec<f64>, Vec<f64>) = runs.clone().map(inputs).unzip();
    let host_y0 =
        manager.create_host_array([n], HostMemoryKind::Pageable, Some(&initial), &holder)?;
    let host_k = manager.create_host_array([n], HostMemoryKind::Pageable, Some(&rates), &holder)?;
    let mut host_y =
        manager.create_host_array::<f64>([n], HostMemoryKind::Pageable, None, &holder)?;
    buffers
        .pipeline()
        .input(&host_y0, |set| &set.y0)
        .input(&host_k, |set| &set.k)
        .output(&mut host_y, |set| &set.y)
        .run(|_device, chunk, set| {
            // 1 ns per Euler step of a run on the modelled device.
            let modelled = Duration::from_nanos(chunk.len() as u64 * u64::from(STEPS));
            HostKernel::new("euler", modelled)
                .reads(&set.y0)
                .reads(&set.k)
                .writes(&set.y)
                .launch(|args| {
                    let (y0, k, y) = (args.read(&set.y0)?, args.read(&set.k)?, args.write(&set.y)?);
                    for ((y, y0), k) in y.iter_mut().zip(y0).zip(k).take(chunk.len()) {
                        *y = *y0;
                        for _ in 0..STEPS {
                            *y -= DT * k * *y;
                        }
                    }
                    Ok(())
                })
        })?;
    Ok((host_y.as_slice().to_vec(), chunks))
}

/// What [`verify`] found.
#[derive(Clone, Copy, Debug)]
pub struct Verified {
    /// Result files read.
    pub files: usize,
    /// The largest difference from the closed form, relative to it.
    pub max_error: f64,
}

/// Checks that the `rank-*.json` files in `dir` hold every run of a batch
/// of `total_runs` exactly once, each matching the closed form within
/// [`TOLERANCE`]; the message says what is wrong otherwise.
pub fn verify(dir: &Path, total_runs: usize) -> Result<Verified, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("reading {}: {e}", dir.display()))?
            .path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        if name.starts_with("rank-") && name.ends_with(".json") {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(format!(
            "no rank-*.json files in {}: run the ranks with --out {0} first",
            dir.display()
        ));
    }
    files.sort();

    // Each file's runs, checked against the closed form.
    let mut ranges = Vec::new();
    let mut max_error = 0.0f64;
    for path in &files {
        let name = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {name}: {e}"))?;
        let record: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
        let bound = |i: usize| {
            record["runs"][i]
                .as_u64()
                .and_then(|b| usize::try_from(b).ok())
        };
        let (Some(start), Some(end), Some(values)) =
            (bound(0), bound(1), record["values"].as_array())
        else {
            return Err(format!(
                "{name} holds no \"runs\": [start, end] and \"values\""
            ));
        };
        if start > end || end > total_runs || values.len() != end - start {
            return Err(format!(
                "{name} holds runs {start}..{end} with {} value(s), which is not a part of a batch \
                 of {total_runs} runs",
                values.len()
            ));
        }
        for (run, value) in (start..end).zip(values) {
            let exact = closed_form(run);
            let got = value.as_f64().unwrap_or(f64::NAN);
            let error = (got - exact).abs() / exact.abs();
            // A NaN is the largest error (f64::max would skip it).
            if error.is_nan() || error > TOLERANCE {
                return Err(format!(
                    "run {run} in {name} is {got}, the closed form {exact}"
                ));
            }
            max_error = max_error.max(error);
        }
        ranges.push((start..end, path));
    }

    // Every run exactly once: the ranges, in order, tile 0..total_runs.
    ranges.sort_by_key(|(runs, _)| (runs.start, runs.end));
    let mut next = 0;
    let mut last: Option<&PathBuf> = None;
    for (runs, path) in ranges {
        if runs.start > next {
            return Err(format!("runs {next}..{} are in no file", runs.start));
        }
        if runs.start < next && !runs.is_empty() {
            let other = last.map_or_else(String::new, |p| p.display().to_string());
            return Err(format!(
                "runs {}..{} are in both {other} and {}",
                runs.start,
                next.min(runs.end),
                path.display()
            ));
        }
        if !runs.is_empty() {
            (next, last) = (runs.end, Some(path));
        }
    }
    if next < total_runs {
        return Err(format!("runs {next}..{total_runs} are in no file"));
    }
    Ok(Verified {
        files: files.len(),
        max_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Slurm variables of task `rank` of a step of 2 tasks on 2 nodes,
    /// one per node, as `srun -N2 -n2` sets them.
    fn slurm_task(rank: usize) -> impl Fn(&str) -> Option<String> {
        move |name| {
            let value = match name {
                "SLURM_PROCID" | "SLURM_NODEID" => rank.to_string(),
                "SLURM_STEP_ID" | "SLURM_LOCALID" => "0".into(),
                "SLURM_STEP_NUM_TASKS" | "SLURM_NTASKS" => "2".into(),
                "SLURM_STEP_TASKS_PER_NODE" | "SLURM_TASKS_PER_NODE" => "1(x2)".into(),
                _ => return None,
            };
            Some(value)
        }
    }

    const JOB: Job = Job {
        total_runs: 5_001,
        visible_devices: 2,
        device_free: 16 << 10,
    };

    #[test]
    fn two_ranks_of_two_devices_write_every_run_once() {
        let dir = tempfile::tempdir().unwrap();
        for rank in 0..2 {
            let shard = Shard::from_vars(slurm_task(rank)).unwrap();
            assert_eq!(
                (shard.rank(), shard.size(), shard.local_size()),
                (rank, 2, 1)
            );
            let report = run_rank(&shard, &JOB, dir.path()).unwrap();
            assert_eq!(report.devices, 0..2, "alone on its node: both devices");
            assert!(report.chunks > 2, "{report:?}");
        }
        let verified = verify(dir.path(), JOB.total_runs).unwrap();
        assert_eq!(verified.files, 2);
        assert!(verified.max_error <= TOLERANCE);
    }

    #[test]
    fn verify_finds_missing_and_doubled_runs() {
        let dir = tempfile::tempdir().unwrap();
        let first = Shard::from_vars(slurm_task(0)).unwrap();
        let report = run_rank(&first, &JOB, dir.path()).unwrap();
        assert_eq!(
            verify(dir.path(), JOB.total_runs).unwrap_err(),
            "runs 2501..5001 are in no file"
        );
        std::fs::copy(&report.file, dir.path().join("rank-1.json")).unwrap();
        let doubled = verify(dir.path(), JOB.total_runs).unwrap_err();
        assert!(doubled.starts_with("runs 0..2501 are in both"), "{doubled}");
        std::fs::write(dir.path().join("rank-1.json"), "{}").unwrap();
        assert!(
            verify(dir.path(), JOB.total_runs)
                .unwrap_err()
                .contains("holds no \"runs\"")
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(
            verify(empty.path(), 1)
                .unwrap_err()
                .starts_with("no rank-*.json files")
        );
    }
}
