//! Timelines of device work: what ran when, on which engine and stream,
//! exportable in the Chrome trace event format that Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! The simulated device records one on its modelled clock
//! ([`SimBackend::timeline`](crate::SimBackend::timeline)).
//!
//! ```
//! use cubie_mem::backend::Backend;
//! use cubie_mem::SimBackend;
//!
//! let sim = SimBackend::new(1 << 30).with_copy_bandwidth(1_000_000_000, 1_000_000_000);
//! let stream = sim.create_stream().unwrap();
//! let ptr = sim.alloc_device(1000, stream).unwrap();
//! sim.copy_to_device(ptr, 0, &[0u8; 1000], stream).unwrap(); // 1 µs at 1 GB/s
//! let timeline = sim.timeline();
//! assert_eq!(timeline.busy_ns(cubie_mem::timeline::Activity::HostToDevice), 1000);
//! let trace = timeline.to_chrome_trace();
//! assert!(trace["traceEvents"].as_array().unwrap().len() > 2);
//! ```

use std::io::Write;

use serde_json::{Value, json};

/// What a span of device time was spent on; its Chrome trace category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activity {
    /// The host's own work for the device (`host`): gathering chunks into
    /// staging buffers, scattering them out, reading and writing spill
    /// files.
    HostStaging,
    /// A copy from host to device memory (`h2d`).
    HostToDevice,
    /// A copy from device to host memory (`d2h`).
    DeviceToHost,
    /// A kernel (`kernel`).
    Kernel,
    /// A stream-ordered allocation (`alloc`).
    Alloc,
    /// A stream-ordered free (`free`).
    Free,
}

impl Activity {
    /// Every activity, in track order.
    pub const ALL: [Activity; 6] = [
        Activity::HostStaging,
        Activity::HostToDevice,
        Activity::DeviceToHost,
        Activity::Kernel,
        Activity::Alloc,
        Activity::Free,
    ];

    /// The Chrome trace category: `host`, `h2d`, `d2h`, `kernel`, `alloc`
    /// or `free`.
    pub fn category(self) -> &'static str {
        match self {
            Activity::HostStaging => "host",
            Activity::HostToDevice => "h2d",
            Activity::DeviceToHost => "d2h",
            Activity::Kernel => "kernel",
            Activity::Alloc => "alloc",
            Activity::Free => "free",
        }
    }

    /// The trace track (`tid`) the activity is drawn on: one per engine
    /// (the host's staging work its own), and one for the allocator.
    fn track(self) -> (u64, &'static str) {
        match self {
            Activity::HostStaging => (5, "host (staging and spill I/O)"),
            Activity::HostToDevice => (1, "host-to-device engine"),
            Activity::DeviceToHost => (2, "device-to-host engine"),
            Activity::Kernel => (3, "compute engine"),
            Activity::Alloc | Activity::Free => (4, "allocator"),
        }
    }
}

/// One piece of device work with its start and end, in nanoseconds of the
/// device's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// What it was.
    pub activity: Activity,
    /// A short name (the kernel's, or the copy's direction and size).
    pub name: String,
    /// The stream it was ordered on (the backend's handle number).
    pub stream: u64,
    /// Bytes moved, allocated or freed (0 for kernels).
    pub bytes: u64,
    /// Start, in nanoseconds.
    pub start_ns: u64,
    /// End, in nanoseconds (equal to the start for allocations and frees).
    pub end_ns: u64,
}

impl Span {
    /// The span's duration in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// The spans of device work, in the order they were issued.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    spans: Vec<Span>,
}

impl Timeline {
    /// The spans, in the order they were issued.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    pub(crate) fn push(&mut self, span: Span) {
        self.spans.push(span);
    }

    /// From the start of the first span to the end of the last, in
    /// nanoseconds (0 when empty).
    pub fn makespan_ns(&self) -> u64 {
        let start = self.spans.iter().map(|s| s.start_ns).min();
        let end = self.spans.iter().map(|s| s.end_ns).max();
        match (start, end) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => 0,
        }
    }

    /// Total time spent on `activity`, in nanoseconds.
    pub fn busy_ns(&self, activity: Activity) -> u64 {
        self.spans
            .iter()
            .filter(|s| s.activity == activity)
            .fold(0u64, |sum, s| sum.saturating_add(s.duration_ns()))
    }

    /// The busy time of the busiest engine (the host's staging work,
    /// host-to-device, device-to-host or compute): the least any schedule
    /// of this work could take.
    pub fn busiest_engine_ns(&self) -> u64 {
        [
            Activity::HostStaging,
            Activity::HostToDevice,
            Activity::DeviceToHost,
            Activity::Kernel,
        ]
        .into_iter()
        .map(|a| self.busy_ns(a))
        .max()
        .unwrap_or(0)
    }

    /// The timeline as a Chrome trace: an object with `traceEvents`, one
    /// `"ph": "X"` event per span (`ts` and `dur` in microseconds, `cat` the
    /// activity's category, one `tid` per engine) and `"ph": "M"` events
    /// naming the process and its tracks.
    pub fn to_chrome_trace(&self) -> Value {
        const PID: u64 = 1;
        let mut events = vec![json!({
            "ph": "M", "name": "process_name", "pid": PID, "tid": 0,
            "args": { "name": "cubie-mem device" },
        })];
        let mut named = Vec::new();
        for activity in Activity::ALL {
            let (tid, name) = activity.track();
            if !named.contains(&tid) {
                named.push(tid);
                events.push(json!({
                    "ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
                    "args": { "name": name },
                }));
            }
        }
        for span in &self.spans {
            let (tid, _) = span.activity.track();
            events.push(json!({
                "ph": "X",
                "name": span.name,
                "cat": span.activity.category(),
                "pid": PID,
                "tid": tid,
                "ts": span.start_ns as f64 / 1000.0,
                "dur": span.duration_ns() as f64 / 1000.0,
                "args": { "stream": span.stream, "bytes": span.bytes },
            }));
        }
        json!({ "traceEvents": events, "displayTimeUnit": "ns" })
    }

    /// Writes [`Timeline::to_chrome_trace`] as JSON.
    pub fn write_chrome_trace(&self, writer: impl Write) -> std::io::Result<()> {
        serde_json::to_writer(writer, &self.to_chrome_trace()).map_err(std::io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(activity: Activity, start_ns: u64, end_ns: u64) -> Span {
        Span {
            activity,
            name: activity.category().to_owned(),
            stream: 7,
            bytes: 64,
            start_ns,
            end_ns,
        }
    }

    #[test]
    fn figures_of_an_overlapped_timeline() {
        let mut t = Timeline::default();
        t.push(span(Activity::Alloc, 0, 0));
        t.push(span(Activity::HostToDevice, 0, 1000));
        t.push(span(Activity::Kernel, 1000, 3000));
        t.push(span(Activity::HostToDevice, 1000, 2000));
        t.push(span(Activity::DeviceToHost, 3000, 3500));
        assert_eq!(t.makespan_ns(), 3500);
        assert_eq!(t.busy_ns(Activity::HostToDevice), 2000);
        assert_eq!(t.busiest_engine_ns(), 2000);
        // The host's staging work is an engine too: here the busiest.
        t.push(span(Activity::HostStaging, 0, 2500));
        assert_eq!(t.busiest_engine_ns(), 2500);
        assert_eq!(Timeline::default().makespan_ns(), 0);
    }

    #[test]
    fn the_chrome_trace_parses_back_with_every_field() {
        let mut t = Timeline::default();
        t.push(span(Activity::HostToDevice, 1500, 4000));
        t.push(span(Activity::Free, 4000, 4000));
        let mut out = Vec::new();
        t.write_chrome_trace(&mut out).unwrap();
        let parsed: Value = serde_json::from_slice(&out).unwrap();
        let events = parsed["traceEvents"].as_array().unwrap();
        let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0]["cat"], "h2d");
        assert_eq!(spans[0]["ts"], 1.5);
        assert_eq!(spans[0]["dur"], 2.5);
        assert_eq!(spans[0]["tid"], 1);
        assert_eq!(spans[0]["args"]["stream"], 7);
        assert_eq!(spans[1]["cat"], "free");
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names.len(),
            5,
            "one track per engine, the host's and the allocator"
        );
        assert!(
            events
                .iter()
                .all(|e| e["pid"].is_u64() && e["tid"].is_u64())
        );
    }
}
