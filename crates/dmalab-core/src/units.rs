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

/// The longest duration any option takes: 366 days. Far beyond any
/// measurement, and far below what `Instant + Duration` or a count of
/// nanoseconds in a `u64` (584 years) can hold, so no caller can overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// The refusal of a value with a leading minus sign, which every parser
/// here gives before trying to read the number.
fn negative(option: &str, text: &str, what: &str) -> Option<UsageError> {
    text.trim().starts_with('-').then(|| {
        UsageError::new(
            option,
            format!("'{text}' is negative; give a {what} of 0 or more"),
        )
    })
}

/// Parses a size such as `4096`, `4K`, `4k`, `4KiB`, `128KiB`, `1G`, `1.5G`,
/// `2T`, `10MB` (decimal), `10kB` (decimal). `option` names the flag for the
/// error message.
pub fn parse_size(option: &str, text: &str) -> Result<Bytes, UsageError> {
    if let Some(e) = negative(option, text, "size") {
        return Err(e);
    }
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
        let v: u64 = num.parse().map_err(|e: std::num::ParseIntError| {
            if *e.kind() == std::num::IntErrorKind::PosOverflow {
                UsageError::new(option, format!("'{text}' is too large"))
            } else {
                bad()
            }
        })?;
        v.checked_mul(mult)
            .ok_or_else(|| UsageError::new(option, format!("'{text}' is too large")))
    }
}

/// Parses a size and refuses one above `max` (for quantities that are
/// allocated or simulated: a cache, a map), naming `max` in the message.
pub fn parse_size_max(option: &str, text: &str, max: Bytes) -> Result<Bytes, UsageError> {
    let v = parse_size(option, text)?;
    check_size_max(option, v, max)
}

/// Refuses a size above `max` with a message that names the limit.
pub fn check_size_max(option: &str, v: Bytes, max: Bytes) -> Result<Bytes, UsageError> {
    if v > max {
        return Err(UsageError::new(
            option,
            format!(
                "{v} bytes is more than the limit of {}; use at most that",
                fmt_bytes(max as f64)
            ),
        ));
    }
    Ok(v)
}

/// Parses a duration: `5` (seconds), `5s`, `100ms`, `250us`, `1m`, `1h`,
/// `1m30s`. Zero is allowed here; callers that forbid it say so. Anything
/// longer than [`MAX_DURATION`] is refused, so no caller can overflow a
/// `Duration`, an `Instant` or a count of nanoseconds.
pub fn parse_duration(option: &str, text: &str) -> Result<Duration, UsageError> {
    if let Some(e) = negative(option, text, "duration") {
        return Err(e);
    }
    let t = text.trim();
    let too_long = || {
        UsageError::new(
            option,
            format!("'{text}' is longer than the limit of 366 days; use a shorter duration"),
        )
    };
    let d = if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let secs: f64 = t
            .parse()
            .map_err(|_| UsageError::new(option, format!("'{text}' is not a duration")))?;
        if !(secs.is_finite() && secs <= MAX_DURATION.as_secs_f64()) {
            return Err(too_long());
        }
        Duration::from_secs_f64(secs)
    } else {
        humantime::parse_duration(t).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_long(),
            _ => UsageError::new(
                option,
                format!("'{text}' is not a duration; use e.g. 10s, 500ms, 250us, 2m or a plain number of seconds"),
            ),
        })?
    };
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
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
    if let Some(e) = negative(option, text, "count") {
        return Err(e);
    }
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
    if !n.is_finite() || n < 0.0 || n.fract() != 0.0 {
        return Err(bad());
    }
    // u64::MAX as f64 rounds up to 2^64, which does not fit.
    if n >= u64::MAX as f64 {
        return Err(UsageError::new(option, format!("'{text}' is too large")));
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

/// Formats a byte rate for humans, in the one output unit every command
/// uses (binary, as sizes are): `19.92 GiB/s`, `48.22 MiB/s`.
pub fn fmt_rate(bytes_per_s: f64) -> String {
    format!("{}/s", fmt_bytes(bytes_per_s))
}

/// What every `--help` that takes a size or a rate says about its units:
/// one text, so that the commands cannot disagree.
pub const SIZE_HELP: &str = "Sizes and rates: K, M, G, T (or KiB, MiB, GiB, TiB) are binary (4K = 4096, 100M = 104857600); kB, MB, GB, TB are decimal (100MB = 100000000); a rate may end in /s. Output is binary: KiB, MiB/s, GiB/s.";

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

    /// Issue 14 item 4: durations that overflow `Duration` panicked.
    #[test]
    fn duration_overflow_is_a_usage_error() {
        for t in [
            "1e308",
            "18446744073709551616",
            "99999999999999999999999s",
            "600000000000y",
            "367d",
            "1e20",
        ] {
            let e = parse_duration("--runtime", t).unwrap_err();
            assert_eq!(e.option, "--runtime");
            assert!(
                e.message.contains("366 days") || e.message.contains("not a duration"),
                "{t}: {e}"
            );
        }
        assert_eq!(parse_duration("--runtime", "366d").unwrap(), MAX_DURATION);
        let e = parse_duration("--runtime", "-1").unwrap_err();
        assert!(e.message.contains("negative"), "{e}");
    }

    #[test]
    fn negative_and_huge_numbers_are_refused_clearly() {
        assert!(parse_size("--bs", "-1")
            .unwrap_err()
            .message
            .contains("negative"));
        assert!(parse_count("--commands", "-5")
            .unwrap_err()
            .message
            .contains("negative"));
        assert!(parse_size("--bs", "18446744073709551616")
            .unwrap_err()
            .message
            .contains("too large"));
        assert!(parse_count("--commands", "18446744073709551616")
            .unwrap_err()
            .message
            .contains("too large"));
        assert!(parse_size("--bs", "1e308").is_err());
        let e = parse_size_max("--set", "2G", 1 << 30).unwrap_err();
        assert!(e.message.contains("1.00 GiB"), "{e}");
        assert_eq!(parse_size_max("--set", "1G", 1 << 30).unwrap(), 1 << 30);
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
