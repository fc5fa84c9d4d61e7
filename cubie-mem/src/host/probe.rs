//! This machine measured for the simulated device's calibration, and
//! cached per machine.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::SystemMemory;
use super::spill::SpillFile;
use crate::backend::{Calibration, default_staging_lanes};

/// Bytes each thread copies a round: past the caches.
const MEMCPY_BYTES: usize = 32 << 20;

/// Rounds of each memcpy measure; the median is kept.
const MEMCPY_ROUNDS: usize = 3;

/// Bytes each row measure gathers or scatters: past the caches.
const ROWS_BYTES: usize = 16 << 20;

/// The row widths the host's cost per row is fitted over: from a single
/// variable's runs to a page.
const ROW_WIDTHS: [usize; 3] = [32, 256, 4096];

/// Bytes of the spill file and of the block the probe page-locks.
const PREPARE_BYTES: usize = 64 << 20;

/// Rounds of the first-touch and page-locking measures; the median is kept.
const PREPARE_ROUNDS: usize = 3;

/// Wake-ups timed; the median is kept.
const WAKE_ROUNDS: usize = 51;

/// The environment variable naming the cache's directory.
const CACHE_DIR_VARIABLE: &str = "CUBIE_MEM_CACHE_DIR";

impl Calibration {
    /// Measures this machine in under a second: memcpy on each count of the
    /// default staging threads, gathers and scatters of rows 32 B to 4 KiB
    /// wide, a 64 MiB spill file, 64 MiB `mlock`ed, and a thread's wake-up
    /// (no driver: calls cost 0). A measure that fails
    /// keeps the fixed figure, and the source says why.
    pub fn measure() -> Self {
        let fixed = Calibration::fixed();
        let mut notes = Vec::new();
        let first_touch = median_of(PREPARE_ROUNDS, first_touch_rate).unwrap_or_else(|reason| {
            notes.push(format!("first touch fixed ({reason})"));
            fixed.first_touch
        });
        let page_lock = median_of(PREPARE_ROUNDS, page_lock_rate).unwrap_or_else(|reason| {
            notes.push(format!("page-locking fixed ({reason})"));
            fixed.page_lock
        });
        let (gather_row_ps, scatter_row_ps) = row_costs();
        let mut source = format!("measured on {}", machine());
        if !notes.is_empty() {
            source = format!("{source}; {}", notes.join("; "));
        }
        Calibration {
            source,
            memcpy_by_threads: memcpy_curve(),
            gather_row_ps,
            scatter_row_ps,
            first_touch,
            page_lock,
            wake_ns: wake_ns(),
            ..fixed
        }
    }

    /// This machine's figures, measured once and cached in
    /// `calibration.json` (in `$CUBIE_MEM_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/cubie-mem` or `~/.cache/cubie-mem`).
    pub fn for_this_machine() -> Self {
        let Some(path) = cache_path() else {
            return Calibration::measure();
        };
        let here = format!("measured on {}", machine());
        if let Ok(cached) = Calibration::load(&path)
            && cached.source.starts_with(&here)
        {
            return cached;
        }
        let figures = Calibration::measure();
        let saved = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(|error| error.to_string())
            .and_then(|()| figures.save(&path).map_err(|error| error.to_string()));
        if let Err(error) = saved {
            tracing::warn!(%error, path = %path.display(), "the measured calibration could not be cached");
        }
        figures
    }
}

/// Where the measured figures are cached, if any directory is named.
fn cache_path() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let directory = var(CACHE_DIR_VARIABLE)
        .map(PathBuf::from)
        .or_else(|| var("XDG_CACHE_HOME").map(|dir| PathBuf::from(dir).join("cubie-mem")))
        .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".cache/cubie-mem")))?;
    Some(directory.join("calibration.json"))
}

/// The machine, as the cache tells machines apart: CPU model, CPUs, RAM.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, name)| name.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let ram = SystemMemory::read().map_or(0, |ram| ram.total);
    format!(
        "{model}, {cpus} CPUs, {:.1} GiB RAM",
        ram as f64 / f64::from(1u32 << 30)
    )
}

/// The memcpy bandwidth on 1 to the default staging threads (as far as a
/// quarter of the available RAM holds their buffers).
fn memcpy_curve() -> Vec<u64> {
    let per_thread = 2 * MEMCPY_BYTES as u64;
    let by_ram = SystemMemory::read().map_or(1, |ram| ram.available / 4 / per_thread);
    let threads = default_staging_lanes()
        .min(usize::try_from(by_ram).unwrap_or(usize::MAX))
        .max(1);
    let mut buffers: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|_| (vec![1u8; MEMCPY_BYTES], vec![0u8; MEMCPY_BYTES]))
        .collect();
    (1..=threads)
        .map(|count| {
            let rounds = (0..MEMCPY_ROUNDS).map(|_| memcpy_round(&mut buffers[..count]));
            median(rounds.collect()).unwrap_or(1)
        })
        .collect()
}

/// One round, every thread from a common start: all bytes over the slowest.
fn memcpy_round(buffers: &mut [(Vec<u8>, Vec<u8>)]) -> u64 {
    let start = Barrier::new(buffers.len());
    let slowest = std::thread::scope(|scope| {
        let workers: Vec<_> = buffers
            .iter_mut()
            .map(|(from, to)| {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    to.copy_from_slice(from);
                    black_box(&to);
                    began.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or(Duration::MAX))
            .max()
            .unwrap_or(Duration::MAX)
    });
    rate(buffers.len() * MEMCPY_BYTES, slowest)
}

/// Picoseconds a row costs beyond its bytes, gathering rows of a host
/// array (each a row apart) into one block and scattering them back: the
/// least-squares slope of each width's time over its count of rows, past
/// the time of the same bytes in one row, as staging copies them.
fn row_costs() -> (u64, u64) {
    let mut spread = vec![1u8; 2 * ROWS_BYTES];
    let mut packed = vec![2u8; ROWS_BYTES];
    let mut fit = |scatter: bool| {
        let mut time = |width: usize| {
            let rounds =
                (0..MEMCPY_ROUNDS).map(|_| rows_round(&mut spread, &mut packed, width, scatter));
            median(rounds.collect()).unwrap_or_default()
        };
        let whole = time(ROWS_BYTES);
        let by_rows = ROW_WIDTHS.map(|width| (ROWS_BYTES / width, time(width)));
        cost_per_row_ps(whole, &by_rows)
    };
    (fit(false), fit(true))
}

/// The least-squares slope, in picoseconds a row, of each `(rows, time)`'s
/// time past `whole` (the same bytes in one row); 0 where rows cost nothing.
fn cost_per_row_ps(whole: Duration, by_rows: &[(usize, Duration)]) -> u64 {
    let (mut weighted, mut squares) = (0f64, 0f64);
    for &(rows, time) in by_rows {
        let rows = rows as f64;
        let beyond_ps = (time.as_secs_f64() - whole.as_secs_f64()) * 1e12;
        weighted += rows * beyond_ps;
        squares += rows * rows;
    }
    // A float cast saturates: negative or NaN slopes are 0.
    (weighted / squares).round() as u64
}

/// The time to gather `packed`'s bytes from rows `width` wide, two widths
/// apart in `spread`, or to scatter them back.
fn rows_round(spread: &mut [u8], packed: &mut [u8], width: usize, scatter: bool) -> Duration {
    let rows = spread
        .chunks_exact_mut(2 * width)
        .zip(packed.chunks_exact_mut(width));
    let began = Instant::now();
    for (row, block) in rows {
        let row = &mut row[..width];
        if scatter {
            row.copy_from_slice(block);
        } else {
            block.copy_from_slice(row);
        }
    }
    let elapsed = began.elapsed();
    black_box((spread, packed));
    elapsed
}

/// The median time a thread blocked on a channel takes to run once sent to.
fn wake_ns() -> u64 {
    let (to_waiter, waiting) = std::sync::mpsc::channel::<Instant>();
    let (to_probe, woken) = std::sync::mpsc::channel::<Duration>();
    let waiter = std::thread::spawn(move || {
        for sent in waiting {
            if to_probe.send(sent.elapsed()).is_err() {
                break;
            }
        }
    });
    let mut times = Vec::with_capacity(WAKE_ROUNDS);
    for _ in 0..WAKE_ROUNDS {
        // Long enough for the waiter to block, not merely spin.
        std::thread::sleep(Duration::from_micros(200));
        if to_waiter.send(Instant::now()).is_err() {
            break;
        }
        match woken.recv() {
            Ok(time) => times.push(time),
            Err(_) => break,
        }
    }
    drop(to_waiter);
    let _ = waiter.join();
    median(times).map_or(0, |time| u64::try_from(time.as_nanos()).unwrap_or(u64::MAX))
}

/// Bytes per second of making a 64 MiB spill file, as host arrays spill.
fn first_touch_rate() -> Result<u64, String> {
    let began = Instant::now();
    let file = SpillFile::create(&std::env::temp_dir(), PREPARE_BYTES)
        .map_err(|error| error.to_string())?;
    let elapsed = began.elapsed();
    drop(file);
    Ok(rate(PREPARE_BYTES, elapsed))
}

/// Bytes per second of `mlock`ing 64 MiB of new memory.
fn page_lock_rate() -> Result<u64, String> {
    let block = memmap2::MmapMut::map_anon(PREPARE_BYTES).map_err(|error| error.to_string())?;
    let began = Instant::now();
    block
        .lock()
        .map_err(|error| format!("mlock refused: {error}"))?;
    let elapsed = began.elapsed();
    drop(block);
    Ok(rate(PREPARE_BYTES, elapsed))
}

/// The median of `rounds` rates of `measure`, or its first failure.
fn median_of(rounds: usize, measure: fn() -> Result<u64, String>) -> Result<u64, String> {
    let rates = (0..rounds.max(1))
        .map(|_| measure())
        .collect::<Result<Vec<u64>, String>>()?;
    Ok(median(rates).unwrap_or(1))
}

/// The middle of `values` once sorted (the upper one of an even count);
/// `None` for none.
fn median<T: Ord + Copy>(mut values: Vec<T>) -> Option<T> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// `bytes` over `elapsed`, in bytes per second (at least 1).
fn rate(bytes: usize, elapsed: Duration) -> u64 {
    let nanos = elapsed.as_nanos().max(1);
    let per_second = (bytes as u128).saturating_mul(1_000_000_000) / nanos;
    u64::try_from(per_second).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_bytes_over_time_and_never_zero() {
        assert_eq!(rate(1_000, Duration::from_micros(1)), 1_000_000_000);
        assert_eq!(rate(0, Duration::from_secs(1)), 1);
        assert_eq!(rate(1, Duration::ZERO), 1_000_000_000);
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps, locks and copies hundreds of MiB")]
    fn the_probe_measures_every_figure_and_names_the_machine() {
        let figures = Calibration::measure();
        assert!(
            figures.source.starts_with("measured on "),
            "{}",
            figures.source
        );
        assert!(!figures.memcpy_by_threads.is_empty());
        assert!(figures.memcpy_by_threads.iter().all(|&rate| rate > 1));
        assert!(figures.first_touch > 1 && figures.page_lock > 1);
        assert!(figures.wake_ns > 0, "{figures}");
        // Past a microsecond a row would be a unit slip, not a host.
        assert!(figures.gather_row_ps < 1_000_000, "{figures}");
        assert!(figures.scatter_row_ps < 1_000_000, "{figures}");
    }

    #[test]
    fn the_row_cost_is_the_slope_of_time_over_rows() {
        let ms = Duration::from_millis;
        // 2 ns a row beyond 10 ms, with noise of a few µs either way.
        let by_rows = [
            (1_000, ms(10) + Duration::from_nanos(2_000 + 300)),
            (100_000, ms(10) + Duration::from_nanos(200_000 - 300)),
            (500_000, ms(11)),
        ];
        assert_eq!(cost_per_row_ps(ms(10), &by_rows), 2_000);
        assert_eq!(cost_per_row_ps(ms(12), &by_rows), 0, "faster than one row");
        assert_eq!(cost_per_row_ps(ms(10), &[]), 0, "nothing measured");
    }
}
