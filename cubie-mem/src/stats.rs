//! Usage statistics, in the manner of torch's `memory_stats` and RMM's
//! statistics adaptor: current and peak bytes and counts, and event counters,
//! per instance, per stream group and in total.

use std::collections::BTreeMap;
use std::fmt;

use crate::backend::MemInfo;
use crate::{Bytes, LimitMode};

/// Counters for one scope (an instance, a group, or the whole manager).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageStats {
    /// Bytes allocated now (device and pinned).
    pub current_bytes: u64,
    /// The most bytes allocated at once.
    pub peak_bytes: u64,
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
    pub(crate) fn allocated(&mut self, bytes: u64) {
        self.current_bytes += bytes;
        self.current_count += 1;
        self.allocations += 1;
        self.peak_bytes = self.peak_bytes.max(self.current_bytes);
        self.peak_count = self.peak_count.max(self.current_count);
    }

    pub(crate) fn freed(&mut self, bytes: u64, evicted: bool) {
        self.current_bytes = self.current_bytes.saturating_sub(bytes);
        self.current_count = self.current_count.saturating_sub(1);
        self.frees += 1;
        if evicted {
            self.evictions += 1;
        }
    }

    /// Moves the current figures out (for an instance changing group).
    pub(crate) fn transfer_current(&mut self, bytes: u64, count: u64) {
        self.current_bytes = self.current_bytes.saturating_sub(bytes);
        self.current_count = self.current_count.saturating_sub(count);
    }

    /// Moves the current figures in.
    pub(crate) fn receive_current(&mut self, bytes: u64, count: u64) {
        self.current_bytes += bytes;
        self.current_count += count;
        self.peak_bytes = self.peak_bytes.max(self.current_bytes);
        self.peak_count = self.peak_count.max(self.current_count);
    }
}

/// One registered instance's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceStats {
    /// The instance's id.
    pub instance: u64,
    /// Its stream group.
    pub group: String,
    /// Its VRAM proportion.
    pub proportion: f64,
    /// Its cap in bytes.
    pub cap: u64,
    /// Its counters.
    pub usage: UsageStats,
}

/// A snapshot of the manager's statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryStats {
    /// The backend's name.
    pub backend: &'static str,
    /// Device memory at the time of the snapshot.
    pub device: MemInfo,
    /// The limit mode.
    pub limit_mode: LimitMode,
    /// Counters over the manager's whole life.
    pub total: UsageStats,
    /// Counters per stream group.
    pub groups: BTreeMap<String, UsageStats>,
    /// Figures per registered instance, by id.
    pub instances: Vec<InstanceStats>,
}

impl MemoryStats {
    /// A printable table of this snapshot.
    pub fn report(&self) -> MemoryReport<'_> {
        MemoryReport { stats: self }
    }
}

/// A [`MemoryStats`] snapshot printed as a table.
pub struct MemoryReport<'a> {
    stats: &'a MemoryStats,
}

fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 20) as f64)
}

impl fmt::Display for MemoryReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.stats;
        writeln!(
            f,
            "{} device: {} total, {} free; limit mode {:?}",
            s.backend,
            Bytes(s.device.total),
            Bytes(s.device.free),
            s.limit_mode
        )?;
        let header = [
            "scope", "cur MiB", "peak MiB", "arrays", "peak", "allocs", "frees", "evicted",
            "chunked",
        ];
        let mut rows: Vec<[String; 9]> = Vec::new();
        let mut row = |scope: String, u: &UsageStats| {
            rows.push([
                scope,
                mib(u.current_bytes),
                mib(u.peak_bytes),
                u.current_count.to_string(),
                u.peak_count.to_string(),
                u.allocations.to_string(),
                u.frees.to_string(),
                u.evictions.to_string(),
                u.chunked_requests.to_string(),
            ]);
        };
        for i in &s.instances {
            row(
                format!(
                    "instance {} ({}, cap {} MiB)",
                    i.instance,
                    i.group,
                    mib(i.cap)
                ),
                &i.usage,
            );
        }
        for (name, usage) in &s.groups {
            row(format!("group {name}"), usage);
        }
        row("total".to_owned(), &s.total);

        let mut widths = header.map(str::len);
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
        line(f, &header)?;
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
    fn peaks_follow_current() {
        let mut u = UsageStats::default();
        u.allocated(100);
        u.allocated(50);
        u.freed(100, true);
        assert_eq!((u.current_bytes, u.peak_bytes), (50, 150));
        assert_eq!((u.current_count, u.peak_count), (1, 2));
        assert_eq!((u.allocations, u.frees, u.evictions), (2, 1, 1));
    }

    #[test]
    fn report_is_a_table() {
        let mut total = UsageStats::default();
        total.allocated(3 << 20);
        let stats = MemoryStats {
            backend: "simulated",
            device: MemInfo {
                free: 1 << 30,
                total: 8 << 30,
            },
            limit_mode: LimitMode::Passive,
            total,
            groups: BTreeMap::from([("default".to_owned(), total)]),
            instances: vec![],
        };
        let text = stats.report().to_string();
        assert!(text.contains("group default"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("total") && l.contains("3.00"))
        );
    }
}
