//! Byte counts as users read them in errors and reports.

use std::fmt;

/// A byte count that prints as `1234567 B (1.18 MiB)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        let n = self.0;
        if n < 1024 {
            return write!(f, "{n} B");
        }
        let mut value = n as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{n} B ({value:.2} {})", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_print_exact_and_binary() {
        assert_eq!(Bytes(12).to_string(), "12 B");
        assert_eq!(Bytes(1536).to_string(), "1536 B (1.50 KiB)");
        assert_eq!(Bytes(3 << 30).to_string(), "3221225472 B (3.00 GiB)");
    }
}
