//! VRAM shares: the manual pool (instances with a fixed proportion) and the
//! auto pool (instances splitting what is left evenly).

use std::collections::BTreeSet;
use std::fmt;

use crate::MemError;
use crate::ids::InstanceId;

/// The auto pool's smallest fraction of device memory while it has members.
pub const MIN_AUTOPOOL_SIZE: f64 = 0.05;

/// Tolerance for sums of proportions, so that `0.1 + 0.2 + 0.7` fills the pool.
const EPSILON: f64 = 1e-9;

/// A proportion as messages print it: six significant digits, trimmed
/// (`0.3`, `1e-6`). A value that would round to 1 without being 1 prints in full.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Proportion(pub(crate) f64);

impl fmt::Display for Proportion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: usize = 6;
        let p = self.0;
        if p == 0.0 {
            return f.pad("0");
        }
        if !p.is_finite() {
            return f.pad(&p.to_string());
        }
        // The exponent after rounding to DIGITS significant digits.
        let scientific = format!("{:.*e}", DIGITS - 1, p);
        let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
        let exponent: i32 = exponent.parse().unwrap_or(0);
        let short = if (-3..6).contains(&exponent) {
            let decimals = usize::try_from(DIGITS as i32 - 1 - exponent).unwrap_or(0);
            trim_zeros(&format!("{p:.decimals$}")).to_owned()
        } else {
            format!("{}e{exponent}", trim_zeros(mantissa))
        };
        if short.trim_start_matches('-') == "1" && p.abs() != 1.0 {
            return f.pad(&p.to_string());
        }
        f.pad(&short)
    }
}

/// `number` without the trailing zeros of its fraction.
fn trim_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// A warning raised by an accepted change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ShareWarning {
    /// The manual pool leaves less than the minimum auto pool, which is empty.
    AutoPoolBelowMinimum { remaining: f64 },
}

/// Which pool (manual or auto) an instance is in, and each one's proportion.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shares {
    /// The manual pool in the order its members joined it, the order its
    /// proportions are summed in: float sums depend on it.
    manual: Vec<(InstanceId, f64)>,
    auto: BTreeSet<InstanceId>,
}

fn check_proportion(proportion: f64) -> Result<(), MemError> {
    if (0.0..=1.0).contains(&proportion) {
        Ok(())
    } else {
        Err(MemError::InvalidProportion { proportion })
    }
}

impl Shares {
    /// Sum of the manual pool's proportions (`0.0`, not `-0.0`, when empty).
    pub(crate) fn manual_sum(&self) -> f64 {
        self.manual.iter().fold(0.0, |sum, &(_, p)| sum + p)
    }

    /// The fraction left to the auto pool.
    pub(crate) fn auto_sum(&self) -> f64 {
        (1.0 - self.manual_sum()).max(0.0)
    }

    /// Registers `id` with `proportion` (`None` or 0: the auto pool).
    pub(crate) fn add(
        &mut self,
        id: InstanceId,
        proportion: Option<f64>,
    ) -> Result<Option<ShareWarning>, MemError> {
        match proportion {
            Some(p) => {
                check_proportion(p)?;
                if p == 0.0 {
                    self.add_auto(id).map(|()| None)
                } else {
                    self.add_manual(id, p)
                }
            }
            None => self.add_auto(id).map(|()| None),
        }
    }

    fn add_manual(&mut self, id: InstanceId, p: f64) -> Result<Option<ShareWarning>, MemError> {
        let manual_sum = self.manual_sum();
        let after = manual_sum + p;
        if after > 1.0 + EPSILON {
            return Err(MemError::ManualPoolOverflow {
                requested: p,
                manual_sum,
            });
        }
        let remaining = (1.0 - after).max(0.0);
        let mut warning = None;
        if after > 1.0 - MIN_AUTOPOOL_SIZE + EPSILON {
            if !self.auto.is_empty() {
                return Err(MemError::AutoPoolStarved {
                    requested: p,
                    manual_sum,
                    remaining,
                    auto_members: self.auto.len(),
                    minimum: MIN_AUTOPOOL_SIZE,
                });
            }
            warning = Some(ShareWarning::AutoPoolBelowMinimum { remaining });
        }
        self.manual.push((id, p));
        Ok(warning)
    }

    fn add_auto(&mut self, id: InstanceId) -> Result<(), MemError> {
        let manual_sum = self.manual_sum();
        let remaining = 1.0 - manual_sum;
        if remaining <= MIN_AUTOPOOL_SIZE + EPSILON {
            return Err(MemError::AutoPoolFull {
                manual_sum,
                remaining: remaining.max(0.0),
                minimum: MIN_AUTOPOOL_SIZE,
            });
        }
        self.auto.insert(id);
        Ok(())
    }

    /// Removes `id` from the manual or the auto pool, whichever holds it.
    pub(crate) fn remove(&mut self, id: InstanceId) {
        self.manual.retain(|&(member, _)| member != id);
        self.auto.remove(&id);
    }

    fn manual_share(&self, id: InstanceId) -> Option<f64> {
        self.manual
            .iter()
            .find_map(|&(member, p)| (member == id).then_some(p))
    }

    /// Whether `id` is in the manual pool.
    pub(crate) fn is_manual(&self, id: InstanceId) -> bool {
        self.manual_share(id).is_some()
    }

    /// The proportion of `id`: its manual share, or an even split of the auto pool.
    pub(crate) fn proportion(&self, id: InstanceId) -> Option<f64> {
        if let Some(p) = self.manual_share(id) {
            return Some(p);
        }
        self.auto
            .contains(&id)
            .then(|| self.auto_sum() / self.auto.len() as f64)
    }

    /// Moves `id` to the manual pool with `proportion`; on error nothing changes.
    pub(crate) fn set_manual(
        &mut self,
        id: InstanceId,
        proportion: f64,
    ) -> Result<Option<ShareWarning>, MemError> {
        check_proportion(proportion)?;
        let mut trial = self.clone();
        trial.remove(id);
        let warning = trial.add_manual(id, proportion)?;
        *self = trial;
        Ok(warning)
    }

    /// Moves `id` from the manual pool to the auto pool; on error nothing changes.
    pub(crate) fn set_auto(&mut self, id: InstanceId) -> Result<(), MemError> {
        let mut trial = self.clone();
        trial.remove(id);
        trial.add_auto(id)?;
        *self = trial;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids<const N: usize>() -> [InstanceId; N] {
        std::array::from_fn(|_| InstanceId::fresh())
    }

    #[test]
    fn auto_members_split_the_rest_evenly() {
        let [i1, i2, i3] = ids::<3>();
        let mut s = Shares::default();
        s.add(i1, Some(0.5)).unwrap();
        s.add(i2, None).unwrap();
        s.add(i3, Some(0.0)).unwrap();
        assert_eq!(s.proportion(i1), Some(0.5));
        assert_eq!(s.proportion(i2), Some(0.25));
        assert_eq!(s.proportion(i3), Some(0.25));
        s.remove(i3);
        assert_eq!(s.proportion(i2), Some(0.5));
    }

    #[test]
    fn manual_pool_limits() {
        let [i1, i2, i3] = ids::<3>();
        let mut s = Shares::default();
        assert!(matches!(
            s.add(i1, Some(1.5)),
            Err(MemError::InvalidProportion { .. })
        ));
        assert!(matches!(
            s.add(i1, Some(-0.1)),
            Err(MemError::InvalidProportion { .. })
        ));
        assert!(matches!(
            s.add(i1, Some(f64::NAN)),
            Err(MemError::InvalidProportion { .. })
        ));
        s.add(i1, Some(0.6)).unwrap();
        assert!(matches!(
            s.add(i2, Some(0.5)),
            Err(MemError::ManualPoolOverflow { .. })
        ));
        // 0.6 + 0.37 = 0.97 > 0.95 with an empty auto pool: a warning
        assert!(matches!(
            s.add(i2, Some(0.37)),
            Ok(Some(ShareWarning::AutoPoolBelowMinimum { .. }))
        ));
        assert!(matches!(
            s.add(i3, None),
            Err(MemError::AutoPoolFull { .. })
        ));
    }

    #[test]
    fn starving_a_non_empty_auto_pool_is_an_error() {
        let [i1, i2] = ids::<2>();
        let mut s = Shares::default();
        s.add(i1, None).unwrap();
        assert!(matches!(
            s.add(i2, Some(0.96)),
            Err(MemError::AutoPoolStarved { .. })
        ));
        assert!(s.add(i2, Some(0.95)).is_ok());
    }

    #[test]
    fn exact_sums_are_not_overflows() {
        let [i1, i2, i3] = ids::<3>();
        let mut s = Shares::default();
        s.add(i1, Some(0.1)).unwrap();
        s.add(i2, Some(0.2)).unwrap();
        assert!(s.add(i3, Some(0.7)).is_ok());
    }

    #[test]
    fn moves_between_pools_are_all_or_nothing() {
        let [i1, i2] = ids::<2>();
        let mut s = Shares::default();
        s.add(i1, None).unwrap();
        s.add(i2, Some(0.5)).unwrap();
        s.set_manual(i1, 0.3).unwrap();
        assert!(s.is_manual(i1));
        assert!(s.set_manual(i1, 0.6).is_err());
        assert_eq!(s.proportion(i1), Some(0.3));
        s.set_auto(i1).unwrap();
        assert_eq!(s.proportion(i1), Some(0.5));
    }

    #[test]
    fn proportions_print_readably() {
        let printed = |p: f64| Proportion(p).to_string();
        assert_eq!(printed(0.0), "0");
        assert_eq!(printed(-0.0), "0");
        assert_eq!(printed(1e-6), "1e-6");
        assert_eq!(printed(1.5e-7), "1.5e-7");
        assert_eq!(printed(0.001), "0.001");
        assert_eq!(printed(0.000_999_999_9), "0.001");
        assert_eq!(printed(0.6), "0.6");
        assert_eq!(printed(1.0 - 0.97), "0.03");
        assert_eq!(printed(0.1 + 0.2), "0.3");
        assert_eq!(printed(0.123_456_78), "0.123457");
        assert_eq!(printed(1.0), "1");
        assert_eq!(printed(1.5), "1.5");
        assert_eq!(printed(-0.1), "-0.1");
        assert_eq!(printed(2e9), "2e9");
        // Near 1 without being 1: printed in full.
        assert_eq!(printed(1.000_000_001), "1.000000001");
        assert_eq!(printed(0.999_999_999_9), "0.9999999999");
        assert_eq!(printed(f64::NAN), "NaN");
        assert_eq!(printed(f64::NEG_INFINITY), "-inf");
        assert_eq!(format!("[{:>5}]", Proportion(0.5)), "[  0.5]");
    }

    #[test]
    fn an_empty_manual_pool_sums_to_positive_zero() {
        let s = Shares::default();
        assert!(s.manual_sum().is_sign_positive());
        assert_eq!(s.auto_sum(), 1.0);
    }

    #[test]
    fn manual_proportions_are_summed_in_the_order_members_joined() {
        let [a, b, c, auto] = ids::<4>();
        let mut s = Shares::default();
        s.add(a, Some(0.1)).unwrap();
        s.add(b, Some(0.2)).unwrap();
        s.add(c, Some(0.3)).unwrap();
        s.add(auto, None).unwrap();
        // 0.1 + 0.2 + 0.3 rounds up: the auto pool gets 0.3999999999999999.
        assert_eq!(s.proportion(auto), Some(1.0 - (0.1 + 0.2 + 0.3)));
        // Setting a's proportion again moves it to the end of the manual pool:
        // 0.2 + 0.3 + 0.1 is exactly 0.6, and the auto pool 0.4, as in cubie.
        s.set_manual(a, 0.1).unwrap();
        assert_eq!(s.proportion(auto), Some(0.4));
        assert_eq!(s.proportion(a), Some(0.1));
    }
}
