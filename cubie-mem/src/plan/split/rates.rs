//! Weights from engine rates: the inverse of a device's time per run.

use std::cmp::Ordering;
use std::time::Duration;

use super::EQUAL_WEIGHT;
use crate::backend::EngineRates;

/// The weight of the fastest device in [`weights`]: `2^62`, so that a
/// device `k` times slower gets `2^62 / k`, exactly when `k` divides it.
const FASTEST: u64 = 1 << 62;

/// Nanoseconds per second over 100: `t` ns at speed `p`% is `t / (p * 10^7)` s.
const SECOND_PER_PERCENT_NS: u64 = 10_000_000;

/// The work of one run on a device, for weighing devices by throughput
/// ([`weights`]). Only the ratios between devices matter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Workload {
    /// Bytes copied host to device.
    pub upload_bytes: u64,
    /// Bytes copied device to host.
    pub download_bytes: u64,
    /// Bytes the host stages (gathers and scatters); 0 when nothing is staged.
    pub host_bytes: u64,
    /// The kernels' time at 100% compute speed.
    pub compute: Duration,
}

impl Workload {
    /// The steady-state time of this work in a streamed pipeline on a
    /// device of `rates`: that of its slowest engine.
    pub fn time_on(&self, rates: &EngineRates) -> Duration {
        let time = self.slowest_engine(rates);
        // A time's denominator is at least 1 and its numerator below 2^64;
        // in nanoseconds it is below 2^94.
        let ns = (u128::from(time.num) * 1_000_000_000).div_ceil(u128::from(time.den));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The time of this work on its slowest engine, in seconds, exactly.
    fn slowest_engine(&self, rates: &EngineRates) -> Seconds {
        let compute_ns = u64::try_from(self.compute.as_nanos()).unwrap_or(u64::MAX);
        [
            Seconds::new(self.upload_bytes, rates.host_to_device()),
            Seconds::new(self.download_bytes, rates.device_to_host()),
            Seconds::new(self.host_bytes, rates.host()),
            Seconds::new(
                compute_ns,
                u64::from(rates.compute_percent()) * SECOND_PER_PERCENT_NS,
            ),
        ]
        .into_iter()
        .fold(Seconds::new(0, 1), Seconds::max)
    }
}

/// Each device's weight for `workload`: the inverse of its time per run,
/// exactly. With any rates unknown (`None`), every device gets
/// weight 1. See the guide page
/// [the split across devices](crate::guide::device_split).
pub fn weights(workload: &Workload, rates: &[Option<EngineRates>]) -> Vec<u64> {
    let times: Option<Vec<Seconds>> = rates
        .iter()
        .map(|r| r.map(|r| workload.slowest_engine(&r)))
        .collect();
    let Some(times) = times else {
        return vec![EQUAL_WEIGHT; rates.len()];
    };
    let Some(&fastest) = times.iter().min() else {
        return Vec::new();
    };
    if fastest.num == 0 {
        // Empty work: every time is 0.
        return vec![EQUAL_WEIGHT; rates.len()];
    }
    times
        .iter()
        .map(|time| {
            // fastest / time, as the fraction x / y with x <= y.
            let x = u128::from(fastest.num) * u128::from(time.den);
            let y = u128::from(time.num) * u128::from(fastest.den);
            scaled_fraction(x, y)
        })
        .collect()
}

/// `floor(2^62 * x / y)` for `0 < x <= y`, by binary long division (no
/// product overflows).
fn scaled_fraction(x: u128, y: u128) -> u64 {
    if x >= y {
        return FASTEST;
    }
    let (mut quotient, mut remainder) = (0u64, x);
    for _ in 0..FASTEST.trailing_zeros() {
        // remainder < y: doubling it and subtracting y stays below y.
        quotient <<= 1;
        if remainder >= y - remainder {
            remainder -= y - remainder;
            quotient |= 1;
        } else {
            remainder += remainder;
        }
    }
    quotient
}

/// A time in seconds, `num / den` exactly (`den >= 1`, both below 2^64,
/// so cross products fit 128 bits).
#[derive(Clone, Copy, Debug)]
struct Seconds {
    num: u64,
    den: u64,
}

impl Seconds {
    fn new(num: u64, den: u64) -> Self {
        Seconds {
            num,
            den: den.max(1),
        }
    }
}

impl Ord for Seconds {
    fn cmp(&self, other: &Self) -> Ordering {
        let left = u128::from(self.num) * u128::from(other.den);
        let right = u128::from(other.num) * u128::from(self.den);
        left.cmp(&right)
    }
}

impl PartialOrd for Seconds {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Seconds {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Seconds {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_compare_as_exact_fractions() {
        assert_eq!(Seconds::new(1, 2), Seconds::new(2, 4));
        assert_ne!(Seconds::new(1, 2), Seconds::new(1, 3));
        assert!(Seconds::new(1, 3) < Seconds::new(1, 2));
        assert!(Seconds::new(u64::MAX, 1) > Seconds::new(u64::MAX - 1, 1));
        assert_eq!(
            Seconds::new(5, 0),
            Seconds::new(5, 1),
            "a 0 denominator counts as 1"
        );
    }

    #[test]
    fn scaled_fractions_are_floored_exactly() {
        assert_eq!(scaled_fraction(1, 1), FASTEST);
        assert_eq!(scaled_fraction(1, 2), FASTEST / 2);
        assert_eq!(scaled_fraction(2, 3), 2 * FASTEST / 3);
        assert_eq!(scaled_fraction(0, 7), 0);
        assert_eq!(scaled_fraction(u128::MAX - 1, u128::MAX), FASTEST - 1);
        assert_eq!(scaled_fraction(1, u128::MAX), 0);
    }
}
