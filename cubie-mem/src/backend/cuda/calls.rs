//! Counts of the driver calls the process made through the backend, by
//! function: what a pipeline chunk or an allocation costs the host on a
//! real driver (0.5 to 4 us a call), measured rather than guessed.

use std::collections::BTreeMap;
use std::fmt;

use super::CudaBackend;
use super::sys;

/// Driver calls made through every CUDA backend of the process, by the
/// function's `cuda.h` name (functions never called are left out). Take
/// one before and one after some work and subtract
/// ([`DriverCalls::since`]) to see what the work cost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverCalls {
    counts: BTreeMap<&'static str, u64>,
}

impl DriverCalls {
    /// The calls of `function` (`"cuEventRecord"`), 0 when never called.
    pub fn get(&self, function: &str) -> u64 {
        self.counts.get(function).copied().unwrap_or(0)
    }

    /// All calls, every function together.
    pub fn total(&self) -> u64 {
        self.counts
            .values()
            .fold(0u64, |sum, &count| sum.saturating_add(count))
    }

    /// The calls made after `earlier` (a count taken before this one).
    pub fn since(&self, earlier: &DriverCalls) -> DriverCalls {
        DriverCalls {
            counts: self
                .counts
                .iter()
                .map(|(&name, &count)| (name, count.saturating_sub(earlier.get(name))))
                .filter(|&(_, count)| count > 0)
                .collect(),
        }
    }

    /// Each function called, with its count, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(&name, &count)| (name, count))
    }
}

impl fmt::Display for DriverCalls {
    /// `total (name count, ...)`, the most called first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut by_count: Vec<_> = self.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        write!(f, "{}", self.total())?;
        for (index, (name, count)) in by_count.iter().enumerate() {
            let open = if index == 0 { " (" } else { ", " };
            write!(f, "{open}{name} {count}")?;
        }
        if !by_count.is_empty() {
            write!(f, ")")?;
        }
        Ok(())
    }
}

impl CudaBackend {
    /// The driver calls this process made through any CUDA backend so far
    /// (each call counts one relaxed atomic increment).
    pub fn driver_calls() -> DriverCalls {
        DriverCalls {
            counts: sys::call_counts()
                .into_iter()
                .filter(|&(_, count)| count > 0)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(counts: &[(&'static str, u64)]) -> DriverCalls {
        DriverCalls {
            counts: counts.iter().copied().collect(),
        }
    }

    #[test]
    fn calls_since_an_earlier_count_are_the_difference_by_function() {
        let earlier = calls(&[("cuEventRecord", 3), ("cuLaunchKernel", 1)]);
        let later = calls(&[
            ("cuEventRecord", 7),
            ("cuLaunchKernel", 1),
            ("cuStreamWaitEvent", 2),
        ]);
        let made = later.since(&earlier);
        assert_eq!(made.get("cuEventRecord"), 4);
        assert_eq!(made.get("cuLaunchKernel"), 0);
        assert_eq!(made.get("cuStreamWaitEvent"), 2);
        assert_eq!(made.total(), 6);
        assert_eq!(
            made.iter().count(),
            2,
            "functions not called since are left out"
        );
    }

    #[test]
    fn calls_display_as_their_total_then_the_most_called_first() {
        let made = calls(&[("cuEventRecord", 3), ("cuStreamWaitEvent", 5)]);
        assert_eq!(made.to_string(), "8 (cuStreamWaitEvent 5, cuEventRecord 3)");
        assert_eq!(DriverCalls::default().to_string(), "0");
    }

    #[test]
    fn a_call_made_through_the_bindings_is_counted() {
        let before = CudaBackend::driver_calls();
        // Counted whether or not a driver is loaded (without one it answers
        // NOT_INITIALIZED).
        let mut version = 0;
        // SAFETY: the out-pointer is a live c_int.
        let _ = unsafe { sys::cuDriverGetVersion(&mut version) };
        let made = CudaBackend::driver_calls().since(&before);
        assert!(made.get("cuDriverGetVersion") >= 1, "{made}");
    }
}
