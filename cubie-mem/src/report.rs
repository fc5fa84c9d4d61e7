//! Who holds a device's memory, and what would make a request fit
//! ([`FitReport`]), as an out-of-memory error carries it or
//! [`MemoryManager::memory_report`](crate::MemoryManager::memory_report) gives it.
//!
//! ```
//! use cubie_mem::{ArrayRequest, ManagerConfig, MemoryManager, Registration, SimBackend};
//!
//! let mgr = MemoryManager::with_config(SimBackend::new(1 << 30), ManagerConfig::default().granule(0));
//! let solver = mgr.register(Registration::new().name("solver").on_invalidate(|| {}))?;
//! mgr.queue_request(&solver, [("state", ArrayRequest::of::<f32>([1 << 20]).unchunkable())])?;
//! mgr.allocate_queue(&solver)?;
//! let report = mgr.memory_report();
//! assert_eq!(report.owners[0].device_bytes, 4 << 20);
//! assert_eq!(report.device_pool.unwrap().used, 4 << 20);
//! println!("{report}");
//! # Ok::<(), cubie_mem::MemError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use crate::backend::{MemInfo, PoolUsage};
use crate::pools::Proportion;
use crate::stats::{InstanceStats, UsageStats, UsageTable};
use crate::{Bytes, LimitMode};

/// What an owner holding memory is doing: whether it can give memory back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OwnerState {
    /// No work in flight: eviction may take its memory.
    Idle,
    /// Work in flight: never evicted.
    Busy,
    /// The owner of the request: never evicted for its own batch.
    Requesting,
}

impl fmt::Display for OwnerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            OwnerState::Idle => "idle",
            OwnerState::Busy => "busy",
            OwnerState::Requesting => "requesting",
        })
    }
}

/// One owner, the unit of eviction, and what its registrations hold.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnerUsage {
    /// The owner, with its name when it has one (`'solver' (owner 3)`).
    pub owner: String,
    /// Its registrations holding memory, with their names.
    pub instances: Vec<String>,
    /// The stream group its registrations are in.
    pub group: String,
    /// Idle, busy, or the requester.
    pub state: OwnerState,
    /// Device bytes held.
    pub device_bytes: u64,
    /// Pinned bytes held (page-locked host memory of pinned requests).
    pub pinned_bytes: u64,
}

/// One line: `'solver' (owner 3), group default, busy: 600 B device, ...`.
impl fmt::Display for OwnerUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, group {}, {}: {} device, {} pinned (instances {})",
            self.owner,
            self.group,
            self.state,
            Bytes(self.device_bytes),
            Bytes(self.pinned_bytes),
            self.instances.join(", ")
        )
    }
}

/// Who holds a device's memory and how it was used: every owner holding any
/// (largest first), the device's free and total memory, its pool,
/// page-locked host memory, the queue, and the usage counters per instance,
/// stream group and in total.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MemoryReport {
    /// The backend's name.
    pub backend: &'static str,
    /// The device's free and total memory.
    pub device: MemInfo,
    /// The limit mode.
    pub limit_mode: LimitMode,
    /// Counters over the manager's whole life.
    pub total: UsageStats,
    /// Counters per stream group.
    pub groups: BTreeMap<String, UsageStats>,
    /// Figures per registered instance, by id.
    pub instances: Vec<InstanceStats>,
    /// The owners holding memory, the most device bytes first.
    pub owners: Vec<OwnerUsage>,
    /// The backend's device pool, where it reports one.
    pub device_pool: Option<PoolUsage>,
    /// Bytes of page-locked host memory in pinned host arrays.
    pub pinned_host_array_bytes: u64,
    /// Bytes of page-locked host memory in staging buffers.
    pub staging_bytes: u64,
    /// The request sets waiting in the queue, in the order queued. Only an
    /// `allocate_queue` of the set's own owner serves it.
    ///
    /// ```
    /// use cubie_mem::{ArrayRequest, ManagerConfig, MemoryManager, Registration, SimBackend};
    ///
    /// let mgr = MemoryManager::with_config(SimBackend::new(1 << 30), ManagerConfig::default().granule(0));
    /// let solver = mgr.register(Registration::new().name("solver").on_invalidate(|| {})).unwrap();
    /// // Forgot `.owner(&solver)`: an owner of its own.
    /// let outputs = mgr.register(Registration::new().name("outputs").on_invalidate(|| {})).unwrap();
    /// mgr.queue_request(&outputs, [("state", ArrayRequest::of::<f64>([4, 2, 100]).total_runs(100))]).unwrap();
    /// mgr.allocate_queue(&solver).unwrap(); // serves the solver's owner only: warns
    /// let pending = mgr.memory_report().pending;
    /// assert_eq!(pending.len(), 1);
    /// assert_eq!((pending[0].labels.as_slice(), pending[0].passed_over), (&["state".to_owned()][..], 1));
    /// ```
    pub pending: Vec<PendingRequests>,
}

/// A request set waiting in the queue ([`MemoryReport::pending`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRequests {
    /// The instance that queued, with its name when set.
    pub instance: String,
    /// Its owner, whose `allocate_queue` serves the set.
    pub owner: String,
    /// The stream group it waits in.
    pub group: String,
    /// The labels queued, in the order given.
    pub labels: Vec<String>,
    /// How many `allocate_queue` calls in its group served another owner
    /// while it waited: above 0 when `.owner(..)` was likely forgotten.
    pub passed_over: usize,
}

impl MemoryReport {
    /// Device bytes this manager's owners hold.
    pub fn held_device_bytes(&self) -> u64 {
        self.owners
            .iter()
            .fold(0u64, |sum, h| sum.saturating_add(h.device_bytes))
    }

    /// Device bytes the idle owners hold: what eviction could release.
    pub fn idle_device_bytes(&self) -> u64 {
        self.owners
            .iter()
            .filter(|o| o.state == OwnerState::Idle)
            .fold(0u64, |sum, h| sum.saturating_add(h.device_bytes))
    }

    /// Device memory neither free nor held by this manager's owners.
    pub fn elsewhere_bytes(&self) -> u64 {
        self.device
            .total
            .saturating_sub(self.device.free)
            .saturating_sub(self.held_device_bytes())
    }
}

/// Several lines: the device, its pool, each owner, what is elsewhere, the
/// usage counters as a table, and page-locked host memory.
impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} device: {} total, {} free; limit mode {:?}",
            self.backend,
            Bytes(self.device.total),
            Bytes(self.device.free),
            self.limit_mode
        )?;
        if let Some(pool) = self.device_pool {
            write!(
                f,
                "; device pool reserved {}, used {}",
                Bytes(pool.reserved),
                Bytes(pool.used)
            )?;
            if let Some(largest) = pool.largest_free_block {
                write!(f, ", largest free block {}", Bytes(largest))?;
            }
        }
        writeln!(f)?;
        if self.owners.is_empty() {
            writeln!(f, "  no owner of this manager holds memory")?;
        }
        for owner in &self.owners {
            writeln!(f, "  {owner}")?;
        }
        writeln!(
            f,
            "  held elsewhere (other processes, managers, the driver): {}",
            Bytes(self.elsewhere_bytes())
        )?;
        UsageTable {
            limit_mode: self.limit_mode,
            instances: &self.instances,
            groups: &self.groups,
            total: &self.total,
        }
        .fmt(f)?;
        write!(
            f,
            "page-locked host memory: {} in host arrays, {} in staging buffers",
            Bytes(self.pinned_host_array_bytes),
            Bytes(self.staging_bytes)
        )
    }
}

/// The one change that would make a request fit.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Fix {
    /// Give the group's instances at least `proportion`, or use
    /// `LimitMode::Passive`.
    RaiseProportion {
        /// The group held to its caps.
        group: String,
        /// The proportion its members need together.
        proportion: f64,
    },
    /// Release arrays the requesting owner holds outside this batch.
    ReleaseOwn {
        /// The registration holding them.
        instance: String,
        /// The device bytes it holds.
        bytes: u64,
    },
    /// Free the arrays of an idle owner that eviction did not choose.
    FreeIdle {
        /// The owner.
        owner: String,
        /// The device bytes it holds.
        bytes: u64,
    },
    /// Lower `ManagerConfig::allocation_granule_bytes` to at most `granule`.
    LowerGranule {
        /// The largest granule with which the request fits.
        granule: u64,
    },
    /// Lower the requests' pipeline depth to `depth`.
    LowerDepth {
        /// The deepest pipeline that fits.
        depth: usize,
    },
    /// Finish a busy owner's work and free its arrays.
    FreeBusy {
        /// The owner.
        owner: String,
        /// The device bytes it holds.
        bytes: u64,
    },
    /// Free this much device memory held outside this manager's reach.
    FreeDevice {
        /// The bytes lacking.
        bytes: u64,
    },
    /// Ask for at most this many bytes in one allocation.
    Shrink {
        /// The most one allocation can get.
        bytes: u64,
    },
    /// Call again: the device refused memory its figures show free.
    Retry,
}

/// A phrase that follows "it would fit if you".
impl fmt::Display for Fix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fix::RaiseProportion { group, proportion } => write!(
                f,
                "raise the proportion of group '{group}' to {} (set_manual_proportion) or use \
                 LimitMode::Passive",
                Proportion(*proportion)
            ),
            Fix::ReleaseOwn { instance, bytes } => write!(
                f,
                "release the arrays {instance} holds outside this batch ({}; free or \
                 Allocated::release)",
                Bytes(*bytes)
            ),
            Fix::FreeIdle { owner, bytes } => write!(
                f,
                "free the arrays of idle {owner}, which holds {}",
                Bytes(*bytes)
            ),
            Fix::LowerGranule { granule } => write!(
                f,
                "lower ManagerConfig::allocation_granule_bytes to {}",
                Bytes(*granule)
            ),
            Fix::LowerDepth { depth } => write!(f, "lower the pipeline depth to {depth}"),
            Fix::FreeBusy { owner, bytes } => write!(
                f,
                "finish the work of busy {owner} and free its arrays ({})",
                Bytes(*bytes)
            ),
            Fix::FreeDevice { bytes } => {
                write!(f, "free {} more of device memory", Bytes(*bytes))
            }
            Fix::Shrink { bytes } => write!(
                f,
                "ask for at most {} in one array, or shrink the per-run arrays",
                Bytes(*bytes)
            ),
            Fix::Retry => f.write_str(
                "call again: the device refused memory its figures show free (another process \
                 took it meanwhile, or a fault)",
            ),
        }
    }
}

/// What an out-of-memory error knows: who holds the memory, the bytes
/// lacking, and the one change that would make the request fit.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FitReport {
    /// Who holds the memory, when the request failed.
    pub memory: MemoryReport,
    /// Bytes of free device memory the request lacks.
    pub lacking: u64,
    /// The one change that would make the request fit.
    pub fix: Fix,
}

/// A byte count in its binary unit alone (`600.00 MiB`).
fn short(bytes: u64) -> String {
    let text = Bytes(bytes).to_string();
    match text.split_once(" (") {
        Some((_, unit)) => unit.trim_end_matches(')').to_owned(),
        None => text,
    }
}

/// Owners a summary line names; the rest are counted.
const SUMMARY_OWNERS: usize = 4;

impl FitReport {
    /// One line for an error's message: the largest owners and the fix.
    pub fn summary(&self) -> String {
        let memory = &self.memory;
        let mut parts: Vec<String> = memory
            .owners
            .iter()
            .filter(|o| o.device_bytes > 0)
            .take(SUMMARY_OWNERS)
            .map(|o| format!("{} {} {}", o.owner, o.state, short(o.device_bytes)))
            .collect();
        let more = memory
            .owners
            .iter()
            .filter(|o| o.device_bytes > 0)
            .count()
            .saturating_sub(SUMMARY_OWNERS);
        if more > 0 {
            parts.push(format!("{more} more"));
        }
        parts.push(format!("elsewhere {}", short(memory.elsewhere_bytes())));
        let pool = memory.device_pool.map_or_else(String::new, |pool| {
            format!(
                "; device pool reserved {}, used {}",
                short(pool.reserved),
                short(pool.used)
            )
        });
        format!(
            "device held by {}{pool}; it would fit if you {}",
            parts.join(", "),
            self.fix
        )
    }
}

impl fmt::Display for FitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "lacking {}; it would fit if you {}",
            Bytes(self.lacking),
            self.fix
        )?;
        self.memory.fmt(f)
    }
}
