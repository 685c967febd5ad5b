//! Sizes, durations and rates as users type them, and as dmalab prints them.
//!
//! Sizes take binary suffixes (`4K`, `4k`, `4KiB` = 4096; `1G` = 2^30), since
//! every size dmalab deals with (blocks, buffers, caches) is a power-of-two
//! quantity; `kB`/`MB`/`GB` with a capital B after a lower-case or decimal
//! prefix are decimal, as fio treats `--bs=4kB` unless told otherwise: we keep
//! that out of the way by only accepting the forms below.

use crate::error::UsageError;
use std::time::Duration;

/// A number of bytes.
pub type Bytes = u64;
/// A duration in nanoseconds.
pub type Nanos = u64;

/// Parses a size such as `4096`, `4K`, `4k`, `4KiB`, `128KiB`, `1G`, `1.5G`,
/// `2T`, `10MB` (decimal), `10kB` (decimal). `option` names the flag for the
/// error message.
pub fn parse_size(option: &str, text: &str) -> Result<Bytes, UsageError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let bad = || {
        UsageError::new(
            option,
            format!("'{text}' is not a size; use a number of bytes with an optional suffix K, M, G, T (binary, e.g. 4K = 4096, 1GiB) or kB, MB, GB (decimal)"),
        )
    };
    if num.is_empty() {
        return Err(bad());
    }
    let mult: u64 = match suffix.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "Ki" | "kiB" => 1 << 10,
        "M" | "m" | "MiB" | "Mi" => 1 << 20,
        "G" | "g" | "GiB" | "Gi" => 1 << 30,
        "T" | "t" | "TiB" | "Ti" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| bad())?;
        let bytes = v * mult as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
            return Err(UsageError::new(
                option,
                format!("'{text}' is not a whole number of bytes"),
            ));
        }
        Ok(bytes as u64)
    } else {
        let v: u64 = num.parse().map_err(|_| bad())?;
        v.checked_mul(mult)
            .ok_or_else(|| UsageError::new(option, format!("'{text}' is too large")))
    }
}

/// Parses a duration: `5` (seconds), `5s`, `100ms`, `250us`, `1m`, `1h`,
/// `1m30s`. Zero is allowed here; callers that forbid it say so.
pub fn parse_duration(option: &str, text: &str) -> Result<Duration, UsageError> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let secs: f64 = t
            .parse()
            .map_err(|_| UsageError::new(option, format!("'{text}' is not a duration")))?;
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(t).map_err(|_| {
        UsageError::new(
            option,
            format!("'{text}' is not a duration; use e.g. 10s, 500ms, 250us, 2m or a plain number of seconds"),
        )
    })
}

/// Parses a byte rate: a size per second, with or without a trailing `/s`
/// (`100M`, `100M/s`, `1.5G/s`).
pub fn parse_rate(option: &str, text: &str) -> Result<Bytes, UsageError> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    parse_size(option, t)
}

/// Parses a count per second: `1000`, `1000/s`, `10k`, `2.5k/s`, `1M`
/// (decimal multipliers: IOPS are counts, not bytes).
pub fn parse_count_rate(option: &str, text: &str) -> Result<u64, UsageError> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    parse_count(option, t)
}

/// Parses a count with optional decimal multiplier `k`, `M`, `G`.
pub fn parse_count(option: &str, text: &str) -> Result<u64, UsageError> {
    let t = text.trim();
    let bad = || {
        UsageError::new(
            option,
            format!(
                "'{text}' is not a count; use a whole number, optionally with k, M or G (x1000)"
            ),
        )
    };
    let (num, mult) = match t.chars().last() {
        Some('k') | Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') | Some('m') => (&t[..t.len() - 1], 1e6),
        Some('G') | Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let n = v * mult;
    if !n.is_finite() || n < 0.0 || n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(n as u64)
}

/// Formats bytes with a binary suffix for humans: `4.00 KiB`, `1.50 GiB`.
pub fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Formats nanoseconds for humans: `85.2 ns`, `12.40 us`, `3.10 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("--bs", "4096").unwrap(), 4096);
        assert_eq!(parse_size("--bs", "4K").unwrap(), 4096);
        assert_eq!(parse_size("--bs", "4k").unwrap(), 4096);
        assert_eq!(parse_size("--bs", "128KiB").unwrap(), 128 << 10);
        assert_eq!(parse_size("--bs", "1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("--bs", "1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("--bs", "10MB").unwrap(), 10_000_000);
        assert!(parse_size("--bs", "4X").is_err());
        assert!(parse_size("--bs", "").is_err());
        assert!(parse_size("--bs", "K").is_err());
        assert!(parse_size("--bs", "0.3").is_err());
        let e = parse_size("--bs", "lots").unwrap_err();
        assert_eq!(e.option, "--bs");
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("--runtime", "5").unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(
            parse_duration("--runtime", "5s").unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(
            parse_duration("--runtime", "100ms").unwrap(),
            Duration::from_millis(100)
        );
        assert_eq!(
            parse_duration("--runtime", "1m30s").unwrap(),
            Duration::from_secs(90)
        );
        assert!(parse_duration("--runtime", "soon").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("--rate", "100M/s").unwrap(), 100 << 20);
        assert_eq!(parse_rate("--rate", "100M").unwrap(), 100 << 20);
        assert_eq!(parse_count_rate("--rate-iops", "10k/s").unwrap(), 10_000);
        assert_eq!(parse_count_rate("--rate-iops", "2.5k").unwrap(), 2_500);
        assert!(parse_count_rate("--rate-iops", "1.5").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_bytes(4096.0), "4.00 KiB");
        assert_eq!(fmt_bytes(12.0), "12 B");
        assert_eq!(fmt_ns(85.24), "85.2 ns");
        assert_eq!(fmt_ns(12_400.0), "12.40 us");
    }
}
