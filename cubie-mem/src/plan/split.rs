//! The split of a batch across devices: one contiguous range of runs per
//! device, in proportion to its throughput (its weight), so that the devices
//! finish together. Memory decides only whether a device takes part.
//!
//! The rules and examples are on the guide page
//! [the split across devices](crate::guide::device_split).

use std::cmp::Reverse;
use std::fmt;
use std::ops::Range;

use super::BatchSizes;
use crate::stats::counted;
use crate::{Bytes, MemError};

mod rates;
#[cfg(test)]
mod tests;

pub use rates::{Workload, weights};

/// The weight of every device when throughputs are unknown or equal.
pub(crate) const EQUAL_WEIGHT: u64 = 1;

/// One device as the split sees it: what it can allocate and do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceCapacity {
    /// Bytes the device's planner may allocate for the batch
    /// ([`Budget::allocatable`](super::Budget::allocatable)).
    pub allocatable: u64,
    /// Its throughput for the batch, relative to the other devices': weight
    /// 2 takes twice the runs of weight 1, and weight 0 takes none.
    pub weight: u64,
}

/// Why a device takes no part in a batch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// The device cannot hold one run per buffer set beside the unchunkable arrays.
    CannotHoldOneRun {
        /// Bytes it needs: the unchunkable arrays and one run per buffer set.
        needed: Bytes,
        /// Bytes it can allocate.
        allocatable: Bytes,
    },
    /// The device cannot hold the unchunkable arrays with room for a run.
    CannotHoldUnchunkable {
        /// Bytes of the unchunkable arrays.
        unchunkable: Bytes,
        /// Bytes it can allocate.
        allocatable: Bytes,
    },
    /// The device was given weight 0.
    ZeroWeight,
}

/// `cannot hold one run: needs 2048 B (2.00 KiB), can allocate 1000 B`.
impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::CannotHoldOneRun {
                needed,
                allocatable,
            } => write!(
                f,
                "cannot hold one run in each buffer set beside the unchunkable arrays: needs \
                 {needed}, can allocate {allocatable}"
            ),
            Skip::CannotHoldUnchunkable {
                unchunkable,
                allocatable,
            } => write!(
                f,
                "cannot hold the unchunkable arrays: needs more than {unchunkable}, can allocate \
                 {allocatable}"
            ),
            Skip::ZeroWeight => f.write_str("has weight 0"),
        }
    }
}

/// A batch split across devices: one contiguous range of runs per device,
/// covering every run once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    ranges: Vec<Range<usize>>,
    skipped: Vec<Option<Skip>>,
}

impl Split {
    /// Each device's runs, in device order; empty for a device left out.
    pub fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }

    /// Device `device`'s runs; `None` past the last device.
    pub fn range(&self, device: usize) -> Option<Range<usize>> {
        self.ranges.get(device).cloned()
    }

    /// Why device `device` takes no part; `None` when it takes part.
    pub fn skip(&self, device: usize) -> Option<&Skip> {
        self.skipped.get(device).and_then(Option::as_ref)
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.ranges.len()
    }

    /// Runs in the whole batch.
    pub fn total_runs(&self) -> usize {
        self.ranges.last().map_or(0, |r| r.end)
    }

    /// The devices that take part, with their runs, in device order.
    pub fn participants(&self) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
        self.ranges
            .iter()
            .enumerate()
            .filter(|(device, _)| self.skip(*device).is_none())
            .map(|(device, runs)| (device, runs.clone()))
    }
}

/// One line per device: `device 0: runs 0..667 (667 runs)`.
impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (device, runs) in self.ranges.iter().enumerate() {
            if device > 0 {
                f.write_str("\n")?;
            }
            match self.skip(device) {
                Some(skip) => write!(f, "device {device}: no runs: {skip}")?,
                None => write!(
                    f,
                    "device {device}: runs {runs:?} ({})",
                    counted(u64::try_from(runs.len()).unwrap_or(u64::MAX), "run")
                )?,
            }
        }
        Ok(())
    }
}

/// Splits the batch of `sizes` across `devices`, in proportion to the
/// weights of the devices that take part. The others get an empty range and
/// a [`Skip`]. [`MemError::NoDeviceTakesPart`] when none can.
pub fn split(sizes: &BatchSizes, devices: &[DeviceCapacity]) -> Result<Split, MemError> {
    sizes.check_plannable()?;
    if devices.len() == 1 {
        return Ok(Split {
            ranges: std::iter::once(0..sizes.total_runs).collect(),
            skipped: vec![None],
        });
    }
    let skipped: Vec<Option<Skip>> = devices
        .iter()
        .map(|device| match skip_reason(sizes, device.allocatable) {
            Some(skip) => Some(skip),
            None => (device.weight == 0).then_some(Skip::ZeroWeight),
        })
        .collect();
    let weight = |device: usize| match skipped[device] {
        Some(_) => 0,
        None => u128::from(devices[device].weight),
    };
    let total_weight: u128 = (0..devices.len()).map(weight).sum();
    if total_weight == 0 {
        return Err(MemError::NoDeviceTakesPart {
            reasons: skipped.into_iter().flatten().collect(),
        });
    }
    // total_runs and every weight are below 2^64: the products fit.
    let runs = sizes.total_runs as u128;
    let quotas: Vec<(u128, u128)> = (0..devices.len())
        .map(|device| {
            let exact = runs * weight(device);
            (exact / total_weight, exact % total_weight)
        })
        .collect();
    // Each share is floored by less than one run: fewer runs are left over
    // than there are participants.
    let floored: u128 = quotas.iter().map(|&(share, _)| share).sum();
    let left_over = usize::try_from(runs - floored).unwrap_or(0);
    let mut by_remainder: Vec<usize> = (0..devices.len())
        .filter(|&device| skipped[device].is_none())
        .collect();
    by_remainder.sort_by_key(|&device| (Reverse(quotas[device].1), device));
    let mut shares: Vec<u128> = quotas.iter().map(|&(share, _)| share).collect();
    for &device in by_remainder.iter().take(left_over) {
        shares[device] += 1;
    }
    let mut start = 0usize;
    let ranges = shares
        .into_iter()
        .map(|share| {
            // A share is at most total_runs, and the shares sum to it.
            let end = start
                .saturating_add(usize::try_from(share).unwrap_or(usize::MAX))
                .min(sizes.total_runs);
            let runs = start..end;
            start = end;
            runs
        })
        .collect();
    Ok(Split { ranges, skipped })
}

/// Why a device that can allocate `allocatable` bytes cannot take part, by
/// the planner's rule: `total_runs * (allocatable - U) >= d * C`.
fn skip_reason(sizes: &BatchSizes, allocatable: u64) -> Option<Skip> {
    let unchunkable = sizes.unchunkable_bytes;
    let total = sizes.total_bytes();
    if total == 0 || total < allocatable {
        return None;
    }
    if unchunkable > 0 && allocatable <= unchunkable {
        return Some(Skip::CannotHoldUnchunkable {
            unchunkable: Bytes(unchunkable),
            allocatable: Bytes(allocatable),
        });
    }
    // Here allocatable > U, or U == 0; and C > 0: with C == 0 the batch is
    // U > 0 bytes, at least allocatable, refused above.
    let runs = sizes.total_runs as u128;
    let per_sets = sizes.depth as u128 * u128::from(sizes.chunkable_bytes);
    let room = u128::from(allocatable - unchunkable);
    if runs * room >= per_sets {
        return None;
    }
    let one_run = per_sets.div_ceil(runs.max(1));
    Some(Skip::CannotHoldOneRun {
        needed: Bytes(
            u64::try_from(one_run)
                .unwrap_or(u64::MAX)
                .saturating_add(unchunkable),
        ),
        allocatable: Bytes(allocatable),
    })
}
