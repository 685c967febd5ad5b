//! The service-level objective: `STAT OP BOUND`.
//!
//! * `STAT`: which per-interval figure of the victim: `mean`, `p50`, `p90`,
//!   `p99`, `p99.9`, `max` (a latency probe's intervals), or `value` (the
//!   figure an exec victim's regex reads).
//! * `OP`: `<=` (lower is better: latency, run time) or `>=` (higher is
//!   better: bandwidth, operations per second).
//! * `BOUND`: `F x baseline` (F times the figure measured with the aggressor
//!   idle) or an absolute value: a time (`150ns`, `2.5us`, `1ms`) for latency
//!   figures, a plain number in the victim's own unit for `value`.

use dmalab_core::UsageError;
use serde::{Deserialize, Serialize};

/// Which per-interval figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// Mean latency.
    Mean,
    /// Median latency.
    P50,
    /// 90th percentile latency.
    P90,
    /// 99th percentile latency.
    P99,
    /// 99.9th percentile latency.
    P99_9,
    /// Largest latency.
    Max,
    /// Bandwidth, bytes per second (`probe bandwidth` victims).
    Bw,
    /// The regex's figure (exec victims).
    Value,
}

impl Stat {
    /// The name in an SLO.
    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::P99_9 => "p99.9",
            Stat::Max => "max",
            Stat::Bw => "bw",
            Stat::Value => "value",
        }
    }

    /// True for the latency figures (nanoseconds).
    pub fn is_latency(self) -> bool {
        !matches!(self, Stat::Value | Stat::Bw)
    }
}

/// `<=` or `>=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// The figure must stay at or below the bound.
    AtMost,
    /// The figure must stay at or above the bound.
    AtLeast,
}

/// The bound.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// A factor of the baseline.
    TimesBaseline(f64),
    /// An absolute value, in the figure's unit (nanoseconds for latency).
    Absolute(f64),
}

/// A parsed SLO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// As the user wrote it.
    pub text: String,
    /// The figure.
    pub stat: Stat,
    /// The comparison.
    pub op: Op,
    /// The bound.
    pub bound: Bound,
}

fn usage(option: &str, text: &str, why: &str) -> UsageError {
    UsageError::new(
        option,
        format!(
            "'{text}' {why}; write STAT OP BOUND, e.g. 'p99 <= 1.2 x baseline', 'mean <= 150ns' or 'value >= 0.9 x baseline'"
        ),
    )
}

/// Parses a time with a unit into nanoseconds (`150ns`, `2.5us`, `1ms`).
fn parse_ns(t: &str) -> Option<f64> {
    let t = t.trim();
    let (num, mult) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n, *m)))?;
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * mult)
}

impl Slo {
    /// Parses `text` (`option` names the flag in errors).
    pub fn parse(option: &str, text: &str) -> Result<Slo, UsageError> {
        let t = text.trim();
        let (lhs, op, rhs) = if let Some((l, r)) = t.split_once("<=") {
            (l, Op::AtMost, r)
        } else if let Some((l, r)) = t.split_once(">=") {
            (l, Op::AtLeast, r)
        } else {
            return Err(usage(option, text, "has no <= or >="));
        };
        let stat = match lhs.trim().to_ascii_lowercase().as_str() {
            "mean" => Stat::Mean,
            "p50" | "median" => Stat::P50,
            "p90" => Stat::P90,
            "p99" => Stat::P99,
            "p99.9" | "p999" => Stat::P99_9,
            "max" => Stat::Max,
            "bw" => Stat::Bw,
            "value" => Stat::Value,
            other => {
                return Err(usage(
                    option,
                    text,
                    &format!(
                        "names no figure '{other}' (mean, p50, p90, p99, p99.9, max, bw, value)"
                    ),
                ))
            }
        };
        let rhs = rhs.trim();
        let bound =
            if let Some(f) = rhs.strip_suffix("baseline") {
                let f = f.trim();
                let f = f
                    .strip_suffix('x')
                    .or_else(|| f.strip_suffix('*'))
                    .or_else(|| f.strip_suffix('×'))
                    .ok_or_else(|| usage(option, text, "needs 'F x baseline'"))?;
                let v: f64 = f
                    .trim()
                    .parse()
                    .map_err(|_| usage(option, text, "has no number before 'x baseline'"))?;
                if !(v.is_finite() && v > 0.0) {
                    return Err(usage(option, text, "needs a factor above 0"));
                }
                Bound::TimesBaseline(v)
            } else if stat == Stat::Bw {
                Bound::Absolute(dmalab_core::units::parse_rate(option, rhs).map_err(|_| {
                    usage(option, text, "needs a rate (e.g. 2G/s) or 'F x baseline'")
                })? as f64)
            } else if stat.is_latency() {
                Bound::Absolute(parse_ns(rhs).ok_or_else(|| {
                    usage(
                        option,
                        text,
                        "needs a time with a unit (ns, us, ms, s) or 'F x baseline'",
                    )
                })?)
            } else {
                let v: f64 = rhs
                    .parse()
                    .map_err(|_| usage(option, text, "needs a number or 'F x baseline'"))?;
                if !v.is_finite() {
                    return Err(usage(option, text, "needs a finite bound"));
                }
                Bound::Absolute(v)
            };
        if stat.is_latency() && op == Op::AtLeast {
            return Err(usage(option, text, "asks a latency to stay high; use <="));
        }
        if stat == Stat::Bw && op == Op::AtMost {
            return Err(usage(option, text, "asks a bandwidth to stay low; use >="));
        }
        Ok(Slo {
            text: t.to_string(),
            stat,
            op,
            bound,
        })
    }

    /// The bound's value given the baseline figure.
    pub fn limit(&self, baseline: f64) -> f64 {
        match self.bound {
            Bound::TimesBaseline(f) => f * baseline,
            Bound::Absolute(v) => v,
        }
    }

    /// Normalised slack of `value` against `limit`: positive when the SLO
    /// holds, `(limit - value) / limit` for `<=` and `(value - limit) /
    /// limit` for `>=`; -0.2 means 20% past the bound.
    pub fn slack(&self, value: f64, limit: f64) -> f64 {
        let l = limit.abs().max(f64::MIN_POSITIVE);
        match self.op {
            Op::AtMost => (limit - value) / l,
            Op::AtLeast => (value - limit) / l,
        }
    }

    /// Slowdown of `value` against `baseline` (1 = unharmed; 2 = twice as
    /// slow, or half the throughput for `>=` figures).
    pub fn slowdown(&self, value: f64, baseline: f64) -> f64 {
        match self.op {
            Op::AtMost => value / baseline.max(f64::MIN_POSITIVE),
            Op::AtLeast => baseline / value.max(f64::MIN_POSITIVE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_absolute() {
        let s = Slo::parse("--slo", "p99 <= 1.2 x baseline").unwrap();
        assert_eq!(
            (s.stat, s.op, s.bound),
            (Stat::P99, Op::AtMost, Bound::TimesBaseline(1.2))
        );
        assert!((s.limit(100.0) - 120.0).abs() < 1e-9);
        assert!((s.slack(132.0, 120.0) + 0.1).abs() < 1e-9);
        let s = Slo::parse("--slo", "mean<=2.5us").unwrap();
        assert_eq!(s.bound, Bound::Absolute(2500.0));
        let s = Slo::parse("--slo", "bw >= 2G/s").unwrap();
        assert_eq!(
            (s.op, s.bound),
            (Op::AtLeast, Bound::Absolute(2.0 * (1u64 << 30) as f64))
        );
        assert!(Slo::parse("--slo", "bw <= 1 x baseline").is_err());
        let s = Slo::parse("--slo", "value >= 0.8*baseline").unwrap();
        assert_eq!((s.op, s.bound), (Op::AtLeast, Bound::TimesBaseline(0.8)));
        assert!(s.slack(90.0, 80.0) > 0.0);
        assert!((s.slowdown(50.0, 100.0) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn bad_slos_name_the_flag_and_the_fix() {
        for bad in [
            "p99 < 1.2 x baseline",
            "p98 <= 1.2 x baseline",
            "p99 <= 150",
            "p99 <= -1 x baseline",
            "mean >= 1 x baseline",
            "value <= lots",
        ] {
            let e = Slo::parse("--slo", bad).unwrap_err();
            assert_eq!(e.option, "--slo");
            assert!(e.message.contains("e.g."), "{bad}: {e}");
        }
    }
}
