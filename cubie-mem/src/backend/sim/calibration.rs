//! The calibration the simulated device times the host's work with: the
//! fixed defaults, or figures measured on a machine and kept in a file.

use std::fmt;
use std::path::Path;

use serde_json::{Value, json};

use crate::MemError;

/// The default bandwidth of the host's own work on one thread: the top of
/// published single-thread memcpy figures (the guide's device model; a
/// machine's own are measured by `Calibration::measure`).
const DEFAULT_HOST_BANDWIDTH: u64 = 12_000_000_000;

/// The default rate at which the host page-locks memory: 4.45 GB/s, as a
/// published `cuMemHostAlloc` of 33.38 GiB in 7,957 ms.
const DEFAULT_PAGE_LOCK_BANDWIDTH: u64 = 4_450_000_000;

/// The default rate of the host's first touch of fresh memory: 4 GB/s, one
/// 4 KiB page a microsecond (a read fault's median; a machine's own figure
/// for a file populated for writing is measured by `Calibration::measure`).
const DEFAULT_FIRST_TOUCH_BANDWIDTH: u64 = 4_000_000_000;

/// The name a figures file declares itself with.
const FORMAT: &str = "cubie-mem calibration";

/// The version of the figures file this build reads and writes.
const VERSION: u64 = 2;

/// The figures the simulated device times the host's work with
/// ([`SimBackend::with_calibration`](crate::SimBackend::with_calibration)):
/// [`fixed`](Self::fixed), measured here, or [`load`](Self::load)ed. The
/// guide's device model lists each figure and its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// Where the figures come from: "fixed", or the machine measured.
    pub source: String,
    /// Bytes per second of a memcpy on 1, 2, ... threads together (one
    /// entry at least): staging, and pageable copies (one thread).
    pub memcpy_by_threads: Vec<u64>,
    /// Picoseconds each row (contiguous block) of a staging thread's
    /// gather from a host array costs beyond its bytes.
    pub gather_row_ps: u64,
    /// The same for a scatter into a host array.
    pub scatter_row_ps: u64,
    /// Bytes per second of faulting in a new spill file for writing.
    pub first_touch: u64,
    /// Bytes per second of page-locking new host memory.
    pub page_lock: u64,
    /// The host's time per driver call (0 but on a GPU node's figures).
    pub calls: CallCosts,
    /// Nanoseconds the host takes to run again after a wait that blocked.
    pub wake_ns: u64,
    /// A GPU node's copy bandwidths, up and down; `None` keeps the device's.
    pub copy_bandwidth: Option<(u64, u64)>,
    /// Percent of its bandwidth a copy keeps beside the other direction's.
    pub both_ways_percent: u32,
    /// Percent of its bandwidth staging keeps beside a copy engine's DMA.
    pub staging_beside_copies_percent: u32,
    /// A GPU node's picoseconds a row of a 2D copy costs beyond its bytes;
    /// `None` keeps the device's.
    pub strided_row_ps: Option<u64>,
}

/// The host's nanoseconds per driver call, by kind of call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCosts {
    /// A kernel launch.
    pub launch_ns: u64,
    /// An event record.
    pub record_ns: u64,
    /// A copy call (one per copy: blocking, asynchronous or strided).
    pub copy_ns: u64,
}

impl Calibration {
    /// The defaults: 12 GB/s a staging thread, each adding as much, host
    /// rows free, page-locking at 4.45 GB/s, first touch at 4 GB/s,
    /// nothing else.
    pub fn fixed() -> Self {
        Calibration {
            source: "fixed".to_owned(),
            memcpy_by_threads: vec![DEFAULT_HOST_BANDWIDTH],
            gather_row_ps: 0,
            scatter_row_ps: 0,
            first_touch: DEFAULT_FIRST_TOUCH_BANDWIDTH,
            page_lock: DEFAULT_PAGE_LOCK_BANDWIDTH,
            calls: CallCosts::default(),
            wake_ns: 0,
            copy_bandwidth: None,
            both_ways_percent: 100,
            staging_beside_copies_percent: 100,
            strided_row_ps: None,
        }
    }

    /// Bytes per second of a memcpy on `threads` threads: past the curve,
    /// each thread adds what the last one added (never less than nothing).
    pub fn memcpy_bandwidth(&self, threads: usize) -> u64 {
        bandwidth_on(&self.memcpy_by_threads, threads)
    }

    /// Reads what [`save`](Self::save) wrote; a bad file is
    /// `MemError::Config`, naming it and what is wrong.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, MemError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| MemError::Io {
            operation: "reading a calibration from",
            path: path.display().to_string(),
            message: error.to_string(),
        })?;
        Self::from_json(&text).map_err(|reason| MemError::Config {
            name: "calibration file".to_owned(),
            value: path.display().to_string(),
            reason,
        })
    }

    /// Writes the figures as JSON, for [`Calibration::load`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), MemError> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json()).map_err(|error| MemError::Io {
            operation: "writing a calibration to",
            path: path.display().to_string(),
            message: error.to_string(),
        })
    }

    /// The figures as the JSON text [`Calibration::load`] reads.
    pub(crate) fn to_json(&self) -> String {
        let value = json!({
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "memcpy_bytes_per_second_by_threads": self.memcpy_by_threads,
            "gather_row_ps": self.gather_row_ps,
            "scatter_row_ps": self.scatter_row_ps,
            "first_touch_bytes_per_second": self.first_touch,
            "page_lock_bytes_per_second": self.page_lock,
            "launch_ns": self.calls.launch_ns,
            "record_ns": self.calls.record_ns,
            "copy_call_ns": self.calls.copy_ns,
            "wake_ns": self.wake_ns,
            "host_to_device_bytes_per_second": self.copy_bandwidth.map(|(up, _)| up),
            "device_to_host_bytes_per_second": self.copy_bandwidth.map(|(_, down)| down),
            "both_ways_percent": self.both_ways_percent,
            "staging_beside_copies_percent": self.staging_beside_copies_percent,
            "strided_row_ps": self.strided_row_ps,
        });
        format!("{value:#}\n")
    }

    /// Figures from the JSON text `to_json` writes; the reason otherwise.
    pub(crate) fn from_json(text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))?;
        if value["format"] != FORMAT || value["version"] != VERSION {
            return Err(format!(
                "not a version {VERSION} calibration file (its \"format\" must be \"{FORMAT}\" \
                 and its \"version\" {VERSION}); write it with Calibration::save"
            ));
        }
        let rate = |key: &str| match value[key].as_u64() {
            Some(rate) if rate > 0 => Ok(rate),
            _ => Err(format!(
                "\"{key}\" must be a whole number of bytes per second above 0"
            )),
        };
        let curve = value["memcpy_bytes_per_second_by_threads"].as_array();
        let memcpy_by_threads = curve
            .filter(|curve| !curve.is_empty())
            .and_then(|curve| {
                curve
                    .iter()
                    .map(|rate| rate.as_u64().filter(|&rate| rate > 0))
                    .collect::<Option<Vec<u64>>>()
            })
            .ok_or_else(|| {
                "\"memcpy_bytes_per_second_by_threads\" must list the bytes per second on 1, 2, \
                 ... threads, each above 0"
                    .to_owned()
            })?;
        // Costs may be left out (0), as where no driver was timed.
        let cost = |key: &str, unit: &str| match &value[key] {
            Value::Null => Ok(0),
            time => time
                .as_u64()
                .ok_or_else(|| format!("\"{key}\" must be a whole number of {unit}")),
        };
        let nanoseconds = |key: &str| cost(key, "nanoseconds");
        Ok(Calibration {
            source: value["source"].as_str().unwrap_or("a file").to_owned(),
            memcpy_by_threads,
            gather_row_ps: cost("gather_row_ps", "picoseconds")?,
            scatter_row_ps: cost("scatter_row_ps", "picoseconds")?,
            first_touch: rate("first_touch_bytes_per_second")?,
            page_lock: rate("page_lock_bytes_per_second")?,
            calls: CallCosts {
                launch_ns: nanoseconds("launch_ns")?,
                record_ns: nanoseconds("record_ns")?,
                copy_ns: nanoseconds("copy_call_ns")?,
            },
            wake_ns: nanoseconds("wake_ns")?,
            copy_bandwidth: copy_bandwidth(&value)?,
            both_ways_percent: percent(&value, "both_ways_percent")?,
            staging_beside_copies_percent: percent(&value, "staging_beside_copies_percent")?,
            strided_row_ps: match &value["strided_row_ps"] {
                Value::Null => None,
                ps => Some(ps.as_u64().ok_or_else(|| {
                    "\"strided_row_ps\" must be a whole number of picoseconds".to_owned()
                })?),
            },
        })
    }
}

impl fmt::Display for Calibration {
    /// One line: the source, then every figure.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let curve: Vec<String> = self.memcpy_by_threads.iter().map(|&r| gb(r)).collect();
        write!(
            f,
            "{}: memcpy {} GB/s on 1..{} thread(s), host rows (gather, scatter) {}, {} ps, \
             page-locking {} GB/s, first touch {} GB/s, calls (launch, record, copy) {}, {}, {} ns, \
             wake-up {} ns{}",
            self.source,
            curve.join(", "),
            self.memcpy_by_threads.len(),
            self.gather_row_ps,
            self.scatter_row_ps,
            gb(self.page_lock),
            gb(self.first_touch),
            self.calls.launch_ns,
            self.calls.record_ns,
            self.calls.copy_ns,
            self.wake_ns,
            match self.copy_bandwidth {
                Some((up, down)) => format!(
                    ", copies {} and {} GB/s, {}% each both ways, staging {}% beside copies{}",
                    gb(up),
                    gb(down),
                    self.both_ways_percent,
                    self.staging_beside_copies_percent,
                    self.strided_row_ps
                        .map(|ps| format!(", 2D rows {ps} ps"))
                        .unwrap_or_default(),
                ),
                None => String::new(),
            },
        )
    }
}

/// The copy bandwidths of a calibration's JSON: both directions, or
/// neither (`None`).
fn copy_bandwidth(value: &Value) -> Result<Option<(u64, u64)>, String> {
    let keys = [
        "host_to_device_bytes_per_second",
        "device_to_host_bytes_per_second",
    ];
    match keys.map(|key| &value[key]) {
        [Value::Null, Value::Null] => Ok(None),
        [up, down] => match (up.as_u64(), down.as_u64()) {
            (Some(up), Some(down)) if up > 0 && down > 0 => Ok(Some((up, down))),
            _ => Err(format!(
                "\"{}\" and \"{}\" must both be whole numbers of bytes per second above 0, \
                 or both be left out",
                keys[0], keys[1]
            )),
        },
    }
}

/// A share in percent of a calibration's JSON, at `key`: 100 when left out.
fn percent(value: &Value, key: &str) -> Result<u32, String> {
    match &value[key] {
        Value::Null => Ok(100),
        percent => percent
            .as_u64()
            .filter(|percent| (1..=100).contains(percent))
            .and_then(|percent| u32::try_from(percent).ok())
            .ok_or_else(|| format!("\"{key}\" must be a whole number from 1 to 100")),
    }
}

/// A rate in GB/s (10^9 bytes a second), to two decimals.
fn gb(bytes_per_second: u64) -> String {
    format!("{:.2}", bytes_per_second as f64 / 1e9)
}

/// Bytes per second on `threads` threads (0 counts as 1) of `curve`,
/// extended past its end by its last step (at least 1).
fn bandwidth_on(curve: &[u64], threads: usize) -> u64 {
    let threads = threads.max(1);
    let Some((&last, before)) = curve.split_last() else {
        return 1;
    };
    if let Some(&rate) = curve.get(threads - 1) {
        return rate.max(1);
    }
    let step = last.saturating_sub(before.last().copied().unwrap_or(0));
    let extra = u64::try_from(threads - curve.len()).unwrap_or(u64::MAX);
    last.saturating_add(step.saturating_mul(extra)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimBackend;
    use crate::backend::{Backend, HostWork};
    use std::time::Duration;

    #[test]
    fn driver_calls_and_wake_ups_cost_the_host_their_figures() {
        use crate::backend::{KernelBody, KernelLaunch};
        use crate::timeline::Activity;

        // Copies at 1 byte per ns, pageable too.
        let figures = Calibration {
            memcpy_by_threads: vec![1_000_000_000],
            calls: CallCosts {
                launch_ns: 4_000,
                record_ns: 500,
                copy_ns: 250,
            },
            wake_ns: 8_000,
            ..Calibration::fixed()
        };
        let sim = SimBackend::new(1 << 20)
            .with_calibration(&figures)
            .with_copy_bandwidth(1_000_000_000, 1_000_000_000);
        let stream = sim.create_stream().unwrap();
        let ptr = sim.alloc_device(1_000, &*stream).unwrap();
        let now = || u64::try_from(sim.now().as_nanos()).unwrap();
        // A blocking copy: its call, the copy, then the host wakes.
        stream.copy_to_device(ptr, 0, &[1u8; 1_000]).unwrap();
        assert_eq!(now(), 250 + 1_000 + 8_000);
        // A launch returns after its call, and the kernel starts then.
        let mut body = |_: &mut [&mut [u8]]| {};
        let launch = KernelLaunch {
            name: "two microseconds",
            args: &[],
            body: KernelBody::Host {
                duration: Duration::from_micros(2),
                run: &mut body,
            },
        };
        sim.launch(launch, &*stream).unwrap();
        assert_eq!(now(), 9_250 + 4_000);
        let event = stream.record().unwrap();
        assert_eq!(now(), 13_250 + 500);
        // Waiting for the kernel (13,250 to 15,250 ns) blocks, then wakes;
        // a wait for what is done does not block.
        event.synchronize().unwrap();
        assert_eq!(now(), 15_250 + 8_000);
        event.synchronize().unwrap();
        assert_eq!(now(), 23_250);
        let calls = sim.timeline().busy_ns(Activity::HostCall);
        assert_eq!(calls, 250 + 8_000 + 4_000 + 500 + 8_000);
        assert_eq!(sim.timeline().host_busy_ns(), calls);
    }

    #[test]
    fn page_locking_holds_back_every_later_call_as_the_drivers_lock_does() {
        use crate::backend::{KernelBody, KernelLaunch};
        use crate::timeline::Activity;

        // Page-locking at 1 byte per ns; a launch call of 100 ns.
        let figures = Calibration {
            page_lock: 1_000_000_000,
            calls: CallCosts {
                launch_ns: 100,
                ..CallCosts::default()
            },
            ..Calibration::fixed()
        };
        let sim = SimBackend::new(1 << 20).with_calibration(&figures);
        let stream = sim.create_stream().unwrap();
        let _block = sim.alloc_pinned(5_000).unwrap();
        let mut body = |_: &mut [&mut [u8]]| {};
        let launch = KernelLaunch {
            name: "after the lock",
            args: &[],
            body: KernelBody::Host {
                duration: Duration::from_micros(1),
                run: &mut body,
            },
        };
        sim.launch(launch, &*stream).unwrap();
        let kernel = sim
            .timeline()
            .spans()
            .iter()
            .find(|span| span.activity == Activity::Kernel)
            .cloned()
            .unwrap();
        // The launch's call waits for the page-locking (5,000 ns), and the
        // kernel for the call.
        assert_eq!((kernel.start_ns, kernel.end_ns), (5_100, 6_100));
    }

    #[test]
    fn a_figures_file_written_by_hand_times_the_simulated_host() {
        // 1 and 1.5 bytes per ns on one and two threads, 1 and 2 ns a row
        // gathered and scattered; page-locking at 0.5 and first touch at
        // 0.25 bytes per ns.
        let path = std::env::temp_dir().join(format!("host-figures-{}.json", std::process::id()));
        std::fs::write(
            &path,
            r#"{
                "format": "cubie-mem calibration",
                "version": 2,
                "source": "written by hand",
                "memcpy_bytes_per_second_by_threads": [1000000000, 1500000000],
                "gather_row_ps": 1000,
                "scatter_row_ps": 2000,
                "first_touch_bytes_per_second": 250000000,
                "page_lock_bytes_per_second": 500000000
            }"#,
        )
        .unwrap();
        let figures = Calibration::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(figures.source, "written by hand");
        let sim = SimBackend::new(1 << 30).with_calibration(&figures);
        let mut now = 0;
        let mut advanced_by = |ns: u64| {
            now += ns;
            assert_eq!(sim.now(), Duration::from_nanos(now));
        };
        sim.host_work(HostWork::Gather { rows: 3 }, 3_000, 1);
        advanced_by(3_000 + 3);
        // The threads share the rows' cost.
        sim.host_work(HostWork::Scatter { rows: 4 }, 3_000, 2);
        advanced_by(2_000 + 4);
        // Three threads: the second's 0.5 bytes per ns added again.
        sim.host_work(HostWork::Gather { rows: 0 }, 4_000, 3);
        advanced_by(2_000);
        let _block = sim.alloc_pinned(1_000).unwrap();
        advanced_by(2_000);
        sim.host_work(HostWork::FirstTouch, 1_000, 1);
        advanced_by(4_000);
        // A pageable copy runs at one thread's memcpy.
        let stream = sim.create_stream().unwrap();
        let ptr = sim.alloc_device(1_000, &*stream).unwrap();
        stream.copy_to_device(ptr, 0, &[7u8; 1_000]).unwrap();
        advanced_by(1_000);
        // The rates weigh a device set's devices: the host's on the
        // default staging threads.
        let lanes = crate::backend::default_staging_lanes();
        assert_eq!(
            sim.engine_rates().unwrap().host(),
            figures.memcpy_bandwidth(lanes)
        );

        let missing = Calibration::load(&path).unwrap_err();
        assert!(matches!(missing, MemError::Io { .. }), "{missing}");
    }

    #[test]
    fn the_curve_is_read_then_extended_by_its_last_step() {
        assert_eq!(bandwidth_on(&[10], 0), 10);
        assert_eq!(bandwidth_on(&[10], 3), 30);
        assert_eq!(bandwidth_on(&[10, 16, 20], 2), 16);
        assert_eq!(bandwidth_on(&[10, 16, 20], 3), 20);
        assert_eq!(bandwidth_on(&[10, 16, 20], 5), 28);
        // A curve that fell at its end stays flat; overflow saturates.
        assert_eq!(bandwidth_on(&[10, 16, 14], 8), 14);
        assert_eq!(bandwidth_on(&[u64::MAX], usize::MAX), u64::MAX);
        assert_eq!(bandwidth_on(&[], 4), 1);
        assert_eq!(bandwidth_on(&[0], 1), 1);
    }

    #[test]
    fn figures_saved_are_loaded_back_and_bad_files_are_named() {
        let figures = Calibration {
            source: "measured on test".to_owned(),
            memcpy_by_threads: vec![9_000_000_000, 15_000_000_000],
            gather_row_ps: 4_100,
            scatter_row_ps: 6_300,
            first_touch: 3_000_000_000,
            page_lock: 5_000_000_000,
            calls: CallCosts {
                launch_ns: 4_000,
                record_ns: 500,
                copy_ns: 250,
            },
            wake_ns: 8_000,
            copy_bandwidth: Some((54_800_000_000, 46_800_000_000)),
            both_ways_percent: 85,
            staging_beside_copies_percent: 70,
            strided_row_ps: Some(2_450),
        };
        assert_eq!(Calibration::from_json(&figures.to_json()), Ok(figures));

        let error = Calibration::from_json("{}").unwrap_err();
        assert!(error.contains("\"format\" must be"), "{error}");
        let mut value: Value = serde_json::from_str(&Calibration::fixed().to_json()).unwrap();
        value["page_lock_bytes_per_second"] = json!(0);
        let error = Calibration::from_json(&value.to_string()).unwrap_err();
        assert!(error.contains("\"page_lock_bytes_per_second\""), "{error}");
        value["page_lock_bytes_per_second"] = json!(1);
        value["wake_ns"] = json!(-1);
        let error = Calibration::from_json(&value.to_string()).unwrap_err();
        assert!(error.contains("\"wake_ns\""), "{error}");
        value["wake_ns"] = json!(0);
        value["scatter_row_ps"] = json!(1.5);
        let error = Calibration::from_json(&value.to_string()).unwrap_err();
        assert!(
            error.contains("\"scatter_row_ps\" must be a whole number of picoseconds"),
            "{error}"
        );
        value["scatter_row_ps"] = json!(0);
        value["both_ways_percent"] = json!(0);
        let error = Calibration::from_json(&value.to_string()).unwrap_err();
        assert!(error.contains("from 1 to 100"), "{error}");
        value["both_ways_percent"] = json!(100);
        value["host_to_device_bytes_per_second"] = json!(1);
        let error = Calibration::from_json(&value.to_string()).unwrap_err();
        assert!(error.contains("or both be left out"), "{error}");
        value["host_to_device_bytes_per_second"] = Value::Null;
        value["memcpy_bytes_per_second_by_threads"] = json!([]);
        let error = Calibration::from_json(&value.to_string()).unwrap_err();
        assert!(error.contains("on 1, 2"), "{error}");
    }
}
