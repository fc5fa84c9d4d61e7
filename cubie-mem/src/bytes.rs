//! Byte counts as users read them in errors and reports.

use std::fmt;
use std::str::FromStr;

use crate::MemError;

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

/// Parses a byte size: a number with an optional binary or decimal unit,
/// case-insensitive (`1.5GiB`, `2 GB`); refused with [`MemError::Config`].
///
/// ```
/// use cubie_mem::Bytes;
///
/// assert_eq!("512MiB".parse::<Bytes>()?, Bytes(512 << 20));
/// assert_eq!("2 GB".parse::<Bytes>()?, Bytes(2_000_000_000));
/// assert_eq!("4096".parse::<Bytes>()?, Bytes(4096));
/// assert!("lots".parse::<Bytes>().is_err());
/// # Ok::<(), cubie_mem::MemError>(())
/// ```
impl FromStr for Bytes {
    type Err = MemError;

    fn from_str(text: &str) -> Result<Self, MemError> {
        parse_size(text).map(Bytes).ok_or_else(|| MemError::Config {
            name: "byte size".to_owned(),
            value: text.to_owned(),
            reason: "expected a byte size such as 8GiB, 512MiB, 2GB or 1048576".into(),
        })
    }
}

/// The byte count `text` names, if it is one.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        "tib" | "t" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if number.is_empty() {
        return None;
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(multiplier);
    }
    let value: f64 = number.parse().ok()?;
    let bytes = (value * multiplier as f64).floor();
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
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

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1KiB"), Some(1024));
        assert_eq!(parse_size("1.5 gib"), Some(3 << 29));
        assert_eq!(parse_size("8GiB"), Some(8 << 30));
        assert_eq!(parse_size("3kB"), Some(3000));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("MiB"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("99999999999999999999"), None);
    }
}
