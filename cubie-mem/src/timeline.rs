//! Timelines of device work: what ran when, on which engine and stream,
//! exportable as a Chrome trace for Perfetto (<https://ui.perfetto.dev>).
//!
//! A timeline keeps the most recent spans up to a capacity; its figures
//! cover every span. The guide page
//! [device model](crate::guide::device_model) shows how to read one.
//!
//! ```
//! use cubie_mem::backend::Backend;
//! use cubie_mem::SimBackend;
//!
//! let sim = SimBackend::new(1 << 30).with_copy_bandwidth(1_000_000_000, 1_000_000_000);
//! let stream = sim.create_stream().unwrap();
//! let ptr = sim.alloc_device(1000, &*stream).unwrap();
//! stream.copy_to_device(ptr, 0, &[0u8; 1000]).unwrap(); // 1 µs at 1 GB/s
//! let timeline = sim.timeline();
//! assert_eq!(timeline.busy_ns(cubie_mem::timeline::Activity::HostToDevice), 1000);
//! let trace = timeline.to_chrome_trace();
//! assert!(trace["traceEvents"].as_array().unwrap().len() > 2);
//! ```

use std::collections::VecDeque;
use std::io::Write;

use serde_json::{Value, json};

/// What a span of device time was spent on; its Chrome trace category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activity {
    /// The host's own work for the device (`host`): staging and spill files.
    HostStaging,
    /// A copy from host to device memory (`h2d`).
    HostToDevice,
    /// A copy from device to host memory (`d2h`).
    DeviceToHost,
    /// A kernel (`kernel`).
    Kernel,
    /// The host page-locking memory (`pagelock`).
    PageLock,
    /// The host faulting in a new spill file's pages (`firsttouch`).
    FirstTouch,
    /// A stream-ordered allocation (`alloc`).
    Alloc,
    /// A stream-ordered free (`free`).
    Free,
    /// The host in a driver call (a launch, a record, a copy call) or
    /// waking after a wait (`call`), as a node's figures give them
    /// ([`Calibration`](crate::backend::Calibration)).
    HostCall,
}

impl Activity {
    /// Every activity, in track order.
    pub const ALL: [Activity; 9] = [
        Activity::HostStaging,
        Activity::HostToDevice,
        Activity::DeviceToHost,
        Activity::Kernel,
        Activity::PageLock,
        Activity::FirstTouch,
        Activity::Alloc,
        Activity::Free,
        Activity::HostCall,
    ];

    /// The Chrome trace category, such as `h2d` or `kernel`.
    pub fn category(self) -> &'static str {
        match self {
            Activity::HostStaging => "host",
            Activity::HostToDevice => "h2d",
            Activity::DeviceToHost => "d2h",
            Activity::Kernel => "kernel",
            Activity::PageLock => "pagelock",
            Activity::FirstTouch => "firsttouch",
            Activity::Alloc => "alloc",
            Activity::Free => "free",
            Activity::HostCall => "call",
        }
    }

    /// The activity's place in [`Activity::ALL`].
    fn index(self) -> usize {
        match self {
            Activity::HostStaging => 0,
            Activity::HostToDevice => 1,
            Activity::DeviceToHost => 2,
            Activity::Kernel => 3,
            Activity::PageLock => 4,
            Activity::FirstTouch => 5,
            Activity::Alloc => 6,
            Activity::Free => 7,
            Activity::HostCall => 8,
        }
    }

    /// The trace track (`tid`) the activity is drawn on: one per engine, and
    /// one for the allocator.
    fn track(self) -> (u64, &'static str) {
        match self {
            Activity::HostStaging
            | Activity::PageLock
            | Activity::FirstTouch
            | Activity::HostCall => (
                5,
                "host (staging, spill I/O, page-locking, first touch, calls)",
            ),
            Activity::HostToDevice => (1, "host-to-device engine"),
            Activity::DeviceToHost => (2, "device-to-host engine"),
            Activity::Kernel => (3, "compute engine"),
            Activity::Alloc | Activity::Free => (4, "allocator"),
        }
    }
}

/// One piece of device work, timed in nanoseconds of the device's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// What it was.
    pub activity: Activity,
    /// A short name (the kernel's, or the copy's direction and size).
    pub name: String,
    /// The stream it was ordered on (the backend's handle number).
    pub stream: u64,
    /// Bytes moved, allocated or freed; for a kernel, those of its arrays.
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

/// Figures over every span recorded, dropped ones included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    busy_ns: [u64; Activity::ALL.len()],
    first_start_ns: Option<u64>,
    last_end_ns: Option<u64>,
}

impl Totals {
    fn add(&mut self, span: &Span) {
        let busy = &mut self.busy_ns[span.activity.index()];
        *busy = busy.saturating_add(span.duration_ns());
        self.first_start_ns = Some(
            self.first_start_ns
                .map_or(span.start_ns, |start| start.min(span.start_ns)),
        );
        self.last_end_ns = Some(
            self.last_end_ns
                .map_or(span.end_ns, |end| end.max(span.end_ns)),
        );
    }
}

/// The spans of device work in issue order, with figures over every span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    spans: Vec<Span>,
    dropped: u64,
    totals: Totals,
}

impl Timeline {
    /// How many spans a timeline keeps by default: 131,072 (about 10 MiB).
    pub const DEFAULT_CAPACITY: usize = 1 << 17;

    /// The spans kept, in the order they were issued.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// How many older spans were dropped to keep within capacity.
    pub fn dropped_spans(&self) -> u64 {
        self.dropped
    }

    /// From the start of the first span to the end of the last, in ns.
    pub fn makespan_ns(&self) -> u64 {
        match (self.totals.first_start_ns, self.totals.last_end_ns) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => 0,
        }
    }

    /// Total time spent on `activity`, in nanoseconds.
    pub fn busy_ns(&self, activity: Activity) -> u64 {
        self.totals.busy_ns[activity.index()]
    }

    /// The busy time of the busiest engine: the least any schedule could take.
    pub fn busiest_engine_ns(&self) -> u64 {
        [
            self.host_busy_ns(),
            self.busy_ns(Activity::HostToDevice),
            self.busy_ns(Activity::DeviceToHost),
            self.busy_ns(Activity::Kernel),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// The host's busy time: staging, page-locking, first touches and
    /// calls.
    pub fn host_busy_ns(&self) -> u64 {
        self.busy_ns(Activity::HostStaging)
            .saturating_add(self.busy_ns(Activity::PageLock))
            .saturating_add(self.busy_ns(Activity::FirstTouch))
            .saturating_add(self.busy_ns(Activity::HostCall))
    }

    /// The timeline as a Chrome trace: one `"ph": "X"` event per span kept,
    /// one track per engine.
    pub fn to_chrome_trace(&self) -> Value {
        json!({
            "traceEvents": self.chrome_events(1, "cubie-mem device"),
            "displayTimeUnit": "ns",
            "otherData": { "dropped_spans": self.dropped },
        })
    }

    /// The events of [`to_chrome_trace`](Self::to_chrome_trace) as process
    /// `pid`: for several devices in one trace.
    pub fn chrome_events(&self, pid: u64, process: &str) -> Vec<Value> {
        let mut events = vec![json!({
            "ph": "M", "name": "process_name", "pid": pid, "tid": 0,
            "args": { "name": process },
        })];
        let mut named = Vec::new();
        for activity in Activity::ALL {
            let (tid, name) = activity.track();
            if !named.contains(&tid) {
                named.push(tid);
                events.push(json!({
                    "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
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
                "pid": pid,
                "tid": tid,
                "ts": span.start_ns as f64 / 1000.0,
                "dur": span.duration_ns() as f64 / 1000.0,
                "args": { "stream": span.stream, "bytes": span.bytes },
            }));
        }
        events
    }

    /// Writes [`Timeline::to_chrome_trace`] as JSON.
    pub fn write_chrome_trace(&self, writer: impl Write) -> std::io::Result<()> {
        serde_json::to_writer(writer, &self.to_chrome_trace()).map_err(std::io::Error::from)
    }
}

/// A bounded record of spans, with figures over all of them.
#[derive(Clone, Debug)]
pub(crate) struct SpanLog {
    spans: VecDeque<Span>,
    capacity: usize,
    dropped: u64,
    totals: Totals,
}

impl Default for SpanLog {
    fn default() -> Self {
        SpanLog::new(Timeline::DEFAULT_CAPACITY)
    }
}

impl SpanLog {
    /// An empty log keeping at most `capacity` spans.
    pub(crate) fn new(capacity: usize) -> Self {
        SpanLog {
            spans: VecDeque::new(),
            capacity,
            dropped: 0,
            totals: Totals::default(),
        }
    }

    /// Records `span`, dropping the oldest when the log is full.
    pub(crate) fn push(&mut self, span: Span) {
        self.totals.add(&span);
        self.spans.push_back(span);
        self.trim();
    }

    /// Keeps at most `capacity` spans from now on (dropping the oldest now).
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.trim();
        self.spans.shrink_to(capacity);
    }

    fn trim(&mut self) {
        while self.spans.len() > self.capacity {
            self.spans.pop_front();
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    /// Counts `spans` more spans as dropped.
    #[cfg(feature = "cuda")]
    pub(crate) fn note_dropped(&mut self, spans: u64) {
        self.dropped = self.dropped.saturating_add(spans);
    }

    /// Forgets every span and figure (the capacity stays).
    pub(crate) fn clear(&mut self) {
        *self = SpanLog::new(self.capacity);
    }

    /// The spans kept and the figures, as a [`Timeline`].
    pub(crate) fn timeline(&self) -> Timeline {
        Timeline {
            spans: self.spans.iter().cloned().collect(),
            dropped: self.dropped,
            totals: self.totals,
        }
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
        let mut log = SpanLog::default();
        log.push(span(Activity::Alloc, 0, 0));
        log.push(span(Activity::HostToDevice, 0, 1000));
        log.push(span(Activity::Kernel, 1000, 3000));
        log.push(span(Activity::HostToDevice, 1000, 2000));
        log.push(span(Activity::DeviceToHost, 3000, 3500));
        let t = log.timeline();
        assert_eq!(t.makespan_ns(), 3500);
        assert_eq!(t.busy_ns(Activity::HostToDevice), 2000);
        assert_eq!(t.busiest_engine_ns(), 2000);
        // The host's staging work is an engine too: here the busiest.
        log.push(span(Activity::HostStaging, 0, 2500));
        assert_eq!(log.timeline().busiest_engine_ns(), 2500);
        assert_eq!(Timeline::default().makespan_ns(), 0);
    }

    #[test]
    fn the_chrome_trace_parses_back_with_every_field() {
        let mut log = SpanLog::default();
        log.push(span(Activity::HostToDevice, 1500, 4000));
        log.push(span(Activity::Free, 4000, 4000));
        let mut out = Vec::new();
        log.timeline().write_chrome_trace(&mut out).unwrap();
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

    #[test]
    fn a_bounded_log_keeps_the_most_recent_spans_and_every_figure() {
        let mut log = SpanLog::new(3);
        for i in 0..10u64 {
            log.push(span(Activity::HostToDevice, i * 100, i * 100 + 50));
        }
        log.push(span(Activity::Kernel, 2000, 2600));
        let t = log.timeline();
        assert_eq!(t.spans().len(), 3);
        assert_eq!(t.dropped_spans(), 8);
        assert_eq!(t.spans()[0].start_ns, 800, "the most recent are kept");
        assert_eq!(
            t.busy_ns(Activity::HostToDevice),
            500,
            "dropped spans count"
        );
        assert_eq!(t.busy_ns(Activity::Kernel), 600);
        assert_eq!(t.makespan_ns(), 2600);
        let trace = t.to_chrome_trace();
        assert_eq!(trace["otherData"]["dropped_spans"], 8);

        log.set_capacity(1);
        assert_eq!(log.timeline().spans().len(), 1);
        assert_eq!(log.timeline().dropped_spans(), 10);
        log.clear();
        assert_eq!(log.timeline(), Timeline::default());
        log.set_capacity(0);
        log.push(span(Activity::Free, 5, 5));
        assert!(log.timeline().spans().is_empty());
        assert_eq!(log.timeline().dropped_spans(), 1);
    }
}
