//! Host RAM figures, which bound spilling and the staging pool.

/// Total and available host RAM, in bytes.
///
/// On Linux both come from `/proc/meminfo` (`MemTotal`, `MemAvailable`).
/// Where the figures cannot be read, [`SystemMemory::read`] gives `None` and
/// the rules that depend on them take their conservative branch: no spilling
/// by default, and no staging buffer beyond the first of each label.
///
/// ```
/// use cubie_mem::SystemMemory;
///
/// let text = "MemTotal:       16000000 kB\nMemFree:  1000 kB\nMemAvailable:    8000000 kB\n";
/// let ram = SystemMemory::parse_meminfo(text).unwrap();
/// assert_eq!(ram.total, 16_000_000 * 1024);
/// assert_eq!(ram.default_spill_threshold(), ram.total / 5 * 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemMemory {
    /// Bytes of RAM in all.
    pub total: u64,
    /// Bytes that can be allocated without swapping.
    pub available: u64,
}

impl SystemMemory {
    /// Percentage of total RAM above which host arrays spill, when no
    /// threshold is set.
    pub const DEFAULT_SPILL_PERCENT: u64 = 80;
    /// Percentage of total RAM the staging pool leaves available when it
    /// grows.
    pub const STAGING_FLOOR_PERCENT: u64 = 20;

    /// Reads the figures of this machine; `None` where they are unavailable.
    pub fn read() -> Option<SystemMemory> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let figures = SystemMemory::parse_meminfo(&text);
        if figures.is_none() {
            tracing::debug!("/proc/meminfo has no MemTotal or available figure");
        }
        figures
    }

    /// Parses the text of `/proc/meminfo`. Kernels without `MemAvailable`
    /// (before 3.14) get `MemFree + Buffers + Cached` instead.
    pub fn parse_meminfo(text: &str) -> Option<SystemMemory> {
        let field = |name: &str| {
            text.lines().find_map(|line| {
                let value = line.strip_prefix(name)?.strip_prefix(':')?.trim();
                let kib: u64 = value.strip_suffix("kB")?.trim().parse().ok()?;
                kib.checked_mul(1024)
            })
        };
        let total = field("MemTotal")?;
        let available = field("MemAvailable").or_else(|| {
            let free = field("MemFree")?;
            Some(
                free.saturating_add(field("Buffers").unwrap_or(0))
                    .saturating_add(field("Cached").unwrap_or(0)),
            )
        })?;
        Some(SystemMemory {
            total,
            available: available.min(total),
        })
    }

    /// The spill threshold when none is configured: 80% of total RAM.
    pub fn default_spill_threshold(&self) -> u64 {
        percent_of(self.total, Self::DEFAULT_SPILL_PERCENT)
    }

    /// Whether `bytes` more can be allocated while available RAM stays above
    /// 20% of total.
    pub fn can_grow_by(&self, bytes: u64) -> bool {
        self.available.saturating_sub(bytes) > percent_of(self.total, Self::STAGING_FLOOR_PERCENT)
    }
}

fn percent_of(bytes: u64, percent: u64) -> u64 {
    (u128::from(bytes) * u128::from(percent) / 100) as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn old_kernels_fall_back_to_free_plus_caches() {
        let text = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n";
        let ram = SystemMemory::parse_meminfo(text).unwrap();
        assert_eq!(ram.available, 310 * 1024);
    }

    #[test]
    fn malformed_text_gives_none() {
        assert_eq!(SystemMemory::parse_meminfo("MemTotal: lots\n"), None);
        assert_eq!(SystemMemory::parse_meminfo(""), None);
    }

    #[test]
    fn growth_keeps_a_fifth_free() {
        let ram = SystemMemory {
            total: 1000,
            available: 300,
        };
        assert!(ram.can_grow_by(99));
        assert!(!ram.can_grow_by(100));
        assert_eq!(ram.default_spill_threshold(), 800);
    }

    #[test]
    fn this_machine_reports_consistent_figures() {
        if let Some(ram) = SystemMemory::read() {
            assert!(ram.total > 0);
            assert!(ram.available <= ram.total);
        }
    }
}
