//! The split of a batch across devices: one contiguous range of runs per
//! device, in device order, so that the devices finish together.
//!
//! A streamed chunk pipeline's time is set by its engines' throughput, not
//! by its memory (memory only sets the chunk length), so the runs are
//! shared in proportion to each device's [`Weight`], its throughput for
//! the batch ([`weights`] derives them from engine rates). Memory decides
//! only whether a device takes part: it must hold the batch's unchunkable
//! arrays and one run in each buffer set beside them, as its own planner
//! ([`plan_chunks`](super::plan_chunks)) requires. A split in proportion to
//! free memory would be wrong: two equal devices with 1 GiB and 3 GiB free
//! would take 0.75 of one device's time instead of 0.5.
//!
//! The arithmetic is exact (integers, 128-bit intermediates, largest
//! remainders with ties to the lower device index): every run is in exactly
//! one range, each device's share is within one run of its exact share,
//! and the same figures always give the same split.
//!
//! ```
//! use cubie_mem::plan::BatchSizes;
//! use cubie_mem::plan::split::{DeviceCapacity, Skip, Weight, split};
//!
//! // 1000 runs of 1 KiB each, 64 KiB of unchunkable arrays.
//! let sizes = BatchSizes {
//!     total_runs: 1000,
//!     chunkable_bytes: 1000 << 10,
//!     unchunkable_bytes: 64 << 10,
//!     depth: 2,
//! };
//! let devices = [
//!     DeviceCapacity { allocatable: 1 << 30, weight: Weight(2) },
//!     DeviceCapacity { allocatable: 3 << 30, weight: Weight(1) },
//!     DeviceCapacity { allocatable: 32 << 10, weight: Weight(1) }, // below the unchunkable arrays
//! ];
//! let split = split(&sizes, &devices)?;
//! assert_eq!(split.ranges(), [0..667, 667..1000, 1000..1000]);
//! assert!(matches!(split.skip(2), Some(Skip::CannotHoldUnchunkable { .. })));
//! # Ok::<(), cubie_mem::MemError>(())
//! ```

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

/// A device's throughput for a batch, relative to the other devices' of the
/// split: a device of weight 2 takes twice the runs of one of weight 1.
/// Only the ratios matter; weight 0 gives a device no runs
/// ([`Skip::ZeroWeight`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Weight(pub u64);

impl Weight {
    /// The weight of every device when their throughputs are unknown or
    /// equal.
    pub const EQUAL: Weight = Weight(1);
}

/// One device as the split sees it: what it can allocate and what it can
/// do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceCapacity {
    /// Bytes the device's planner may allocate for the batch: the first
    /// figure of its [`Budget::allocatable`](super::Budget::allocatable)
    /// (0 when its free memory is below the granule).
    pub allocatable: u64,
    /// Its throughput for the batch, relative to the other devices'.
    pub weight: Weight,
}

/// Why a device takes no part in a batch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// The device cannot hold one run in each buffer set beside the
    /// unchunkable arrays.
    CannotHoldOneRun {
        /// Bytes it needs: the unchunkable arrays and one run's chunkable
        /// bytes (rounded up) in each buffer set.
        needed: Bytes,
        /// Bytes it can allocate.
        allocatable: Bytes,
    },
    /// The device cannot hold the batch's unchunkable arrays with room to
    /// spare for a run.
    CannotHoldUnchunkable {
        /// Bytes of the unchunkable arrays.
        unchunkable: Bytes,
        /// Bytes it can allocate.
        allocatable: Bytes,
    },
    /// The device was given weight 0.
    ZeroWeight,
}

/// `cannot hold one run: needs 2048 B (2.00 KiB), can allocate 1000 B`, and
/// the like.
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
/// in device order, covering every run once; a device with no runs says
/// why ([`skip`](Self::skip)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    ranges: Vec<Range<usize>>,
    skipped: Vec<Option<Skip>>,
}

impl Split {
    /// Each device's runs, in device order: contiguous, covering
    /// `0..total_runs` once. A device that takes no part has an empty range.
    pub fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }

    /// Device `device`'s runs; `None` past the last device.
    pub fn range(&self, device: usize) -> Option<Range<usize>> {
        self.ranges.get(device).cloned()
    }

    /// Why device `device` takes no part; `None` when it takes part (or
    /// past the last device).
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

/// One line per device: `device 0: runs 0..667 (667 runs)`, or
/// `device 2: no runs: cannot hold the unchunkable arrays: ...`.
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

/// Splits the batch of `sizes` across `devices`: one contiguous range per
/// device, in device order, in proportion to the weights of the devices
/// that take part.
///
/// A device takes part when it can hold the batch's unchunkable arrays and
/// one run in each of the batch's buffer sets beside them (the rule of
/// [`plan_chunks`](super::plan_chunks), so that its planner can plan any
/// share it gets), and its weight is above 0; the others get an empty
/// range and a [`Skip`]. Device `i` among the participants gets
/// `floor(total_runs * w_i / W)` runs (`W` the participants' total weight),
/// and the runs left over (fewer than the participants) go one each to the
/// largest remainders, ties to the lower index: each share is within one
/// run of `total_runs * w_i / W`.
///
/// One device alone takes every run, whatever its memory and weight, so
/// that its own planner plans (or refuses) the batch exactly as without a
/// split. Errors: [`MemError::NoDeviceTakesPart`] when no device (or none
/// at all) can take part, naming each one's reason; [`MemError::ZeroRuns`]
/// and [`MemError::ZeroDepth`] for hand-made sizes, as the planner's.
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
            None => (device.weight.0 == 0).then_some(Skip::ZeroWeight),
        })
        .collect();
    let weight = |device: usize| match skipped[device] {
        Some(_) => 0,
        None => u128::from(devices[device].weight.0),
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

/// Why a device that can allocate `allocatable` bytes cannot take part in
/// the batch of `sizes`, or `None` when it can: the planner's rule
/// ([`plan_chunks`](super::plan_chunks)). An empty batch, and a batch
/// below `allocatable`, fit in one chunk; otherwise the device must hold
/// more than the unchunkable bytes `U`, and the room beside them must hold
/// one run in each of the `d` buffer sets:
/// `total_runs * (allocatable - U) >= d * C`.
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
