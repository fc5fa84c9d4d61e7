//! What the devices of a set did: each device's timeline, its makespan,
//! the slowest over the mean, and one Chrome trace with a process per
//! device.

use std::fmt;
use std::io::Write;

use serde_json::{Value, json};

use super::DeviceSet;
use crate::timeline::Timeline;
use crate::{MemError, SimBackend};

/// The timelines of a set's devices, by device: made by
/// [`DeviceSet::report`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSetReport {
    timelines: Vec<Timeline>,
}

impl DeviceSet {
    /// Each device's timeline so far (a simulated device's modelled one, a
    /// CUDA device's recorded one; empty for a backend that keeps none).
    pub fn report(&self) -> Result<DeviceSetReport, MemError> {
        let timelines = self
            .managers()
            .iter()
            .map(|manager| timeline_of(manager.backend().as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DeviceSetReport { timelines })
    }
}

/// The timeline a backend keeps, if any.
fn timeline_of(backend: &dyn crate::backend::Backend) -> Result<Timeline, MemError> {
    let any = backend.as_any();
    if let Some(sim) = any.and_then(|any| any.downcast_ref::<SimBackend>()) {
        return Ok(sim.timeline());
    }
    #[cfg(feature = "cuda")]
    if let Some(cuda) = any.and_then(|any| any.downcast_ref::<crate::backend::cuda::CudaBackend>())
    {
        return cuda.timeline();
    }
    Ok(Timeline::default())
}

impl DeviceSetReport {
    /// The timelines, by device.
    pub fn timelines(&self) -> &[Timeline] {
        &self.timelines
    }

    /// Each device's makespan in nanoseconds, by device.
    pub fn makespans_ns(&self) -> Vec<u64> {
        self.timelines.iter().map(Timeline::makespan_ns).collect()
    }

    /// The longest makespan: how long the batch took, the devices working
    /// at once.
    pub fn makespan_ns(&self) -> u64 {
        self.makespans_ns().into_iter().max().unwrap_or(0)
    }

    /// The slowest device's makespan over the mean of the devices that did
    /// work: 1 when they finish together. `None` when none worked.
    pub fn imbalance(&self) -> Option<f64> {
        let busy: Vec<u64> = self
            .makespans_ns()
            .into_iter()
            .filter(|&ns| ns > 0)
            .collect();
        let slowest = *busy.iter().max()?;
        let mean = busy.iter().map(|&ns| ns as f64).sum::<f64>() / busy.len() as f64;
        Some(slowest as f64 / mean)
    }

    /// The timelines as one Chrome trace: device `d` is process `d + 1`
    /// (named `device d`), each with its engines' tracks.
    pub fn to_chrome_trace(&self) -> Value {
        let events: Vec<Value> = self
            .timelines
            .iter()
            .enumerate()
            .flat_map(|(device, timeline)| {
                let pid = device as u64 + 1;
                timeline.chrome_events(pid, &format!("device {device}"))
            })
            .collect();
        let dropped: u64 = self.timelines.iter().map(Timeline::dropped_spans).sum();
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ns",
            "otherData": { "dropped_spans": dropped, "devices": self.timelines.len() },
        })
    }

    /// Writes [`DeviceSetReport::to_chrome_trace`] as JSON.
    pub fn write_chrome_trace(&self, writer: impl Write) -> std::io::Result<()> {
        serde_json::to_writer(writer, &self.to_chrome_trace()).map_err(std::io::Error::from)
    }
}

impl fmt::Display for DeviceSetReport {
    /// One line per device with its makespan, then the slowest over the
    /// mean.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (device, ns) in self.makespans_ns().into_iter().enumerate() {
            writeln!(f, "device {device}: makespan {:.3} ms", ns as f64 / 1e6)?;
        }
        match self.imbalance() {
            Some(ratio) => write!(f, "slowest over mean: {ratio:.3}"),
            None => write!(f, "no device worked"),
        }
    }
}
