//! Usage statistics: current and peak bytes, counts and event counters, per
//! instance, per stream group and in total.

use std::collections::BTreeMap;
use std::fmt;

use crate::ids::InstanceId;
use crate::pools::Proportion;
use crate::{Bytes, LimitMode, MemoryKind};

/// Saturating counters for one scope: an instance, a group, or the manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UsageStats {
    /// Bytes in use now, device and pinned: the arrays' own sizes.
    pub current_bytes: u64,
    /// Device bytes in use now (the arrays' own sizes).
    pub device_bytes: u64,
    /// Pinned bytes in use now (the arrays' own sizes).
    pub pinned_bytes: u64,
    /// Bytes held now, device and pinned: the buffers' bytes, which caps,
    /// budgets and eviction count.
    pub held_bytes: u64,
    /// Device bytes held now (the buffers' bytes).
    pub held_device_bytes: u64,
    /// Pinned bytes held now (the buffers' bytes).
    pub held_pinned_bytes: u64,
    /// The most bytes (device and pinned) in use at once.
    pub peak_bytes: u64,
    /// The most device bytes in use at once.
    pub peak_device_bytes: u64,
    /// The most bytes (device and pinned) held at once.
    pub peak_held_bytes: u64,
    /// Arrays allocated now.
    pub current_count: u64,
    /// The most arrays allocated at once.
    pub peak_count: u64,
    /// Arrays allocated in all (including buffers reused for a new allocation).
    pub allocations: u64,
    /// Arrays freed in all (including evictions).
    pub frees: u64,
    /// Arrays evicted to make room for other owners.
    pub evictions: u64,
    /// Requests served in more than one chunk.
    pub chunked_requests: u64,
}

impl UsageStats {
    fn kind_bytes(&mut self, kind: MemoryKind) -> (&mut u64, &mut u64) {
        match kind {
            MemoryKind::Device => (&mut self.device_bytes, &mut self.held_device_bytes),
            MemoryKind::Pinned => (&mut self.pinned_bytes, &mut self.held_pinned_bytes),
        }
    }

    fn update_peaks(&mut self) {
        self.peak_bytes = self.peak_bytes.max(self.current_bytes);
        self.peak_device_bytes = self.peak_device_bytes.max(self.device_bytes);
        self.peak_held_bytes = self.peak_held_bytes.max(self.held_bytes);
        self.peak_count = self.peak_count.max(self.current_count);
    }

    /// An array of `bytes` in a new buffer of `held` bytes.
    pub(crate) fn allocated(&mut self, bytes: u64, held: u64, kind: MemoryKind) {
        self.current_bytes = self.current_bytes.saturating_add(bytes);
        self.held_bytes = self.held_bytes.saturating_add(held);
        let (in_use, of_kind) = self.kind_bytes(kind);
        *in_use = in_use.saturating_add(bytes);
        *of_kind = of_kind.saturating_add(held);
        self.current_count = self.current_count.saturating_add(1);
        self.allocations = self.allocations.saturating_add(1);
        self.update_peaks();
    }

    /// An array of `bytes` freed with its buffer of `held` bytes.
    pub(crate) fn freed(&mut self, bytes: u64, held: u64, kind: MemoryKind, evicted: bool) {
        self.current_bytes = self.current_bytes.saturating_sub(bytes);
        self.held_bytes = self.held_bytes.saturating_sub(held);
        let (in_use, of_kind) = self.kind_bytes(kind);
        *in_use = in_use.saturating_sub(bytes);
        *of_kind = of_kind.saturating_sub(held);
        self.current_count = self.current_count.saturating_sub(1);
        self.frees = self.frees.saturating_add(1);
        if evicted {
            self.evictions = self.evictions.saturating_add(1);
        }
    }

    /// A buffer of `held` bytes reused in place for a new array: one free
    /// and one allocation, with the bytes held unchanged.
    pub(crate) fn reused(&mut self, before: u64, after: u64, held: u64, kind: MemoryKind) {
        self.freed(before, held, kind, false);
        self.allocated(after, held, kind);
    }

    pub(crate) fn chunked(&mut self) {
        self.chunked_requests = self.chunked_requests.saturating_add(1);
    }

    /// Moves the current figures of `moved` out (an instance leaving a group).
    pub(crate) fn transfer_current(&mut self, moved: &UsageStats) {
        self.current_bytes = self.current_bytes.saturating_sub(moved.current_bytes);
        self.device_bytes = self.device_bytes.saturating_sub(moved.device_bytes);
        self.pinned_bytes = self.pinned_bytes.saturating_sub(moved.pinned_bytes);
        self.held_bytes = self.held_bytes.saturating_sub(moved.held_bytes);
        self.held_device_bytes = self
            .held_device_bytes
            .saturating_sub(moved.held_device_bytes);
        self.held_pinned_bytes = self
            .held_pinned_bytes
            .saturating_sub(moved.held_pinned_bytes);
        self.current_count = self.current_count.saturating_sub(moved.current_count);
    }

    /// Moves the current figures of `moved` in (an instance joining a group).
    pub(crate) fn receive_current(&mut self, moved: &UsageStats) {
        self.current_bytes = self.current_bytes.saturating_add(moved.current_bytes);
        self.device_bytes = self.device_bytes.saturating_add(moved.device_bytes);
        self.pinned_bytes = self.pinned_bytes.saturating_add(moved.pinned_bytes);
        self.held_bytes = self.held_bytes.saturating_add(moved.held_bytes);
        self.held_device_bytes = self
            .held_device_bytes
            .saturating_add(moved.held_device_bytes);
        self.held_pinned_bytes = self
            .held_pinned_bytes
            .saturating_add(moved.held_pinned_bytes);
        self.current_count = self.current_count.saturating_add(moved.current_count);
        self.update_peaks();
    }
}

/// A count printed with thousands separators: `27,273`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Count(pub(crate) u64);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.0.to_string();
        let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
        for (i, digit) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(digit);
        }
        f.pad(&grouped)
    }
}

/// `n` and a regular noun, in the plural unless `n` is 1: `1 run`, `27,273 runs`.
pub(crate) fn counted(n: u64, noun: &str) -> String {
    format!("{} {noun}{}", Count(n), if n == 1 { "" } else { "s" })
}

/// One line: bytes in use, held and at the peak, arrays, and the counters.
///
/// ```
/// use cubie_mem::{ArrayRequest, ManagerConfig, MemoryManager, Registration, SimBackend};
///
/// let mgr = MemoryManager::with_config(SimBackend::new(1 << 30), ManagerConfig::default().granule(0));
/// let solver = mgr.register(Registration::new().on_invalidate(|| {}))?;
/// mgr.queue_request(&solver, [("state", ArrayRequest::of::<f32>([1 << 20]).unchunkable())])?;
/// mgr.allocate_queue(&solver)?;
/// assert_eq!(
///     mgr.memory_report().total.to_string(),
///     "device 4194304 B (4.00 MiB), pinned 0 B, held 4194304 B (4.00 MiB), peak 4194304 B (4.00 MiB); \
///      1 array (peak 1); 1 allocation, 0 frees, 0 evictions, 0 chunked requests"
/// );
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
impl fmt::Display for UsageStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {}, pinned {}, held {}, peak {}; {} (peak {}); {}, {}, {}, {}",
            Bytes(self.device_bytes),
            Bytes(self.pinned_bytes),
            Bytes(self.held_bytes),
            Bytes(self.peak_bytes),
            counted(self.current_count, "array"),
            Count(self.peak_count),
            counted(self.allocations, "allocation"),
            counted(self.frees, "free"),
            counted(self.evictions, "eviction"),
            counted(self.chunked_requests, "chunked request"),
        )
    }
}

/// One registered instance's figures.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct InstanceStats {
    /// The instance's id.
    pub instance: InstanceId,
    /// The name it registered with, if any.
    pub name: Option<String>,
    /// Its stream group.
    pub group: String,
    /// Its VRAM proportion.
    pub proportion: f64,
    /// Its cap in bytes (a limit only in active mode).
    pub cap: u64,
    /// Its counters.
    pub usage: UsageStats,
}

impl InstanceStats {
    /// The name, or "instance N" when unnamed.
    pub fn display_name(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => self.instance.to_string(),
        }
    }
}

/// One line: the instance's name, group, share and cap, then its
/// [usage](UsageStats).
impl fmt::Display for InstanceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (group {}): share {}%, cap {}; {}",
            self.display_name(),
            self.group,
            Proportion(self.proportion * 100.0),
            Bytes(self.cap),
            self.usage
        )
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 20) as f64)
}

const HEADER: [&str; 12] = [
    "scope",
    "device MiB",
    "device held",
    "pinned MiB",
    "pinned held",
    "peak held",
    "arrays",
    "peak arrays",
    "allocs",
    "frees",
    "evicted",
    "chunked",
];

fn row(scope: String, u: &UsageStats) -> [String; 12] {
    [
        scope,
        mib(u.device_bytes),
        mib(u.held_device_bytes),
        mib(u.pinned_bytes),
        mib(u.held_pinned_bytes),
        mib(u.peak_held_bytes),
        u.current_count.to_string(),
        u.peak_count.to_string(),
        u.allocations.to_string(),
        u.frees.to_string(),
        u.evictions.to_string(),
        u.chunked_requests.to_string(),
    ]
}

/// The usage counters as a table, per instance, group and in total: a part
/// of [`MemoryReport`](crate::report::MemoryReport)'s text.
pub(crate) struct UsageTable<'a> {
    pub(crate) limit_mode: LimitMode,
    pub(crate) instances: &'a [InstanceStats],
    pub(crate) groups: &'a BTreeMap<String, UsageStats>,
    pub(crate) total: &'a UsageStats,
}

impl fmt::Display for UsageTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rows: Vec<[String; 12]> = Vec::new();
        for i in self.instances {
            let scope = match self.limit_mode {
                LimitMode::Active => {
                    format!("{} ({}, cap {} MiB)", i.display_name(), i.group, mib(i.cap))
                }
                LimitMode::Passive => format!("{} ({})", i.display_name(), i.group),
            };
            rows.push(row(scope, &i.usage));
        }
        for (name, usage) in self.groups {
            rows.push(row(format!("group {name}"), usage));
        }
        rows.push(row("total".to_owned(), self.total));

        let mut widths = HEADER.map(str::len);
        for r in &rows {
            for (w, cell) in widths.iter_mut().zip(r) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[&str]| -> fmt::Result {
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i == 0 {
                    write!(f, "{cell:<w$}")?;
                } else {
                    write!(f, "  {cell:>w$}")?;
                }
            }
            writeln!(f)
        };
        line(f, &HEADER)?;
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        line(f, &rule.iter().map(String::as_str).collect::<Vec<_>>())?;
        for r in &rows {
            line(f, &r.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_follow_current_and_kinds_split() {
        let mut u = UsageStats::default();
        u.allocated(100, 100, MemoryKind::Device);
        u.allocated(50, 50, MemoryKind::Pinned);
        u.freed(100, 100, MemoryKind::Device, true);
        assert_eq!((u.current_bytes, u.peak_bytes), (50, 150));
        assert_eq!((u.device_bytes, u.pinned_bytes), (0, 50));
        assert_eq!((u.held_bytes, u.peak_held_bytes), (50, 150));
        assert_eq!(u.peak_device_bytes, 100);
        assert_eq!((u.current_count, u.peak_count), (1, 2));
        assert_eq!((u.allocations, u.frees, u.evictions), (2, 1, 1));
    }

    #[test]
    fn counters_saturate() {
        let mut u = UsageStats::default();
        u.allocated(u64::MAX, u64::MAX, MemoryKind::Device);
        u.allocated(u64::MAX, u64::MAX, MemoryKind::Device);
        assert_eq!((u.current_bytes, u.held_bytes), (u64::MAX, u64::MAX));
        u.freed(u64::MAX, u64::MAX, MemoryKind::Device, false);
        u.freed(u64::MAX, u64::MAX, MemoryKind::Device, false);
        u.freed(u64::MAX, u64::MAX, MemoryKind::Device, false);
        assert_eq!((u.current_bytes, u.current_count), (0, 0));
        assert_eq!((u.held_bytes, u.held_device_bytes), (0, 0));
    }

    #[test]
    fn a_reused_buffer_changes_the_bytes_in_use_not_those_held() {
        let mut u = UsageStats::default();
        u.allocated(800, 800, MemoryKind::Device);
        u.reused(800, 40, 800, MemoryKind::Device);
        assert_eq!((u.current_bytes, u.device_bytes), (40, 40));
        assert_eq!((u.held_bytes, u.held_device_bytes), (800, 800));
        assert_eq!((u.current_count, u.allocations, u.frees), (1, 2, 1));
    }

    fn table(limit_mode: LimitMode) -> String {
        let mut usage = UsageStats::default();
        usage.allocated(3 << 20, 5 << 20, MemoryKind::Device);
        usage.allocated(1 << 20, 1 << 20, MemoryKind::Pinned);
        let instances = [InstanceStats {
            instance: InstanceId::fresh(),
            name: Some("rk45-outputs".to_owned()),
            group: "default".to_owned(),
            proportion: 0.5,
            cap: 4 << 30,
            usage,
        }];
        UsageTable {
            limit_mode,
            instances: &instances,
            groups: &BTreeMap::from([("default".to_owned(), usage)]),
            total: &usage,
        }
        .to_string()
    }

    #[test]
    fn usage_is_a_table_with_distinct_headers_and_names() {
        let text = table(LimitMode::Passive);
        let header = text.lines().next().unwrap();
        let mut columns: Vec<&str> = header
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(columns.len(), HEADER.len());
        columns.sort_unstable();
        columns.dedup();
        assert_eq!(columns.len(), HEADER.len(), "headers are distinct");
        assert!(text.contains("group default"));
        assert!(text.contains("rk45-outputs (default)"));
        assert!(!text.contains("cap"), "passive mode shows no caps");
        let total = text.lines().find(|l| l.starts_with("total")).unwrap();
        let cells: Vec<&str> = total.split_whitespace().collect();
        assert_eq!(&cells[1..6], ["3.00", "5.00", "1.00", "1.00", "6.00"]);
    }

    #[test]
    fn active_mode_shows_caps() {
        let text = table(LimitMode::Active);
        assert!(text.contains("rk45-outputs (default, cap 4096.00 MiB)"));
    }
}
