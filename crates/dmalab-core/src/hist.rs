//! Latency distributions: an hdrhistogram with at most 1% relative error from
//! 1 ns to one hour, and its summary in the result schema.
//!
//! Every command that measures latency (load's per-command latency, probe's
//! per-access latency, page's per-fault latency) records into a [`LatHist`]
//! per thread, merges them, and stores a [`LatencySummary`]: fio-style
//! percentile keys, log-spaced buckets for plotting, and the full histogram in
//! the standard HdrHistogram V2 encoding (base64) so nothing is lost.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Highest trackable value: one hour in nanoseconds.
pub const MAX_NS: u64 = 3_600_000_000_000;
/// Two significant decimal digits: relative error at most 1%.
pub const SIGFIG: u8 = 2;

/// The percentiles every summary reports (fio reports a similar list).
pub const PERCENTILES: [f64; 9] = [1.0, 10.0, 50.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0];

/// A latency histogram in nanoseconds.
#[derive(Clone, Debug)]
pub struct LatHist {
    h: Histogram<u64>,
}

impl Default for LatHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatHist {
    /// An empty histogram covering 1 ns .. 1 h at 1% relative error.
    pub fn new() -> Self {
        // The bounds are constants that satisfy hdrhistogram's rules
        // (low >= 1, high >= 2*low, sigfig <= 5), so this cannot fail.
        let h = Histogram::new_with_bounds(1, MAX_NS, SIGFIG).expect("constant bounds are valid");
        Self { h }
    }

    /// Records one value; values outside 1 ns .. 1 h are clamped into range
    /// (a zero-latency sample after timer-cost subtraction counts as 1 ns).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.h.saturating_record(ns.clamp(1, MAX_NS));
    }

    /// Records `count` samples of the same value.
    #[inline]
    pub fn record_n(&mut self, ns: u64, count: u64) {
        // record_n only fails for out-of-range values, which we clamp away.
        let _ = self.h.record_n(ns.clamp(1, MAX_NS), count);
    }

    /// Adds another histogram into this one.
    pub fn merge(&mut self, other: &LatHist) {
        // Same bounds on both sides, so add cannot fail.
        let _ = self.h.add(&other.h);
    }

    /// Number of recorded samples.
    pub fn len(&self) -> u64 {
        self.h.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    /// The value at percentile `p` (0..=100).
    pub fn percentile(&self, p: f64) -> u64 {
        self.h.value_at_percentile(p)
    }

    /// Mean of the recorded values.
    pub fn mean(&self) -> f64 {
        self.h.mean()
    }

    /// Clears all samples.
    pub fn reset(&mut self) {
        self.h.reset();
    }

    /// The underlying hdrhistogram, for callers that need more.
    pub fn inner(&self) -> &Histogram<u64> {
        &self.h
    }

    /// Summarises with [`PERCENTILES`] and log-spaced plot buckets.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary::from_hist(self)
    }

    /// Encodes as base64 of the HdrHistogram V2 serialization.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        // Serializing into a Vec cannot fail for a valid histogram.
        let _ = V2Serializer::new().serialize(&self.h, &mut buf);
        base64::engine::general_purpose::STANDARD.encode(buf)
    }

    /// Decodes what [`LatHist::encode`] produced.
    pub fn decode(text: &str) -> Option<Self> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?;
        let h: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).ok()?;
        let mut out = Self::new();
        out.h.add(&h).ok()?;
        Some(out)
    }
}

/// One plot bucket: samples with `lo_ns <= value <= hi_ns`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Bucket {
    /// Lowest value in the bucket, nanoseconds.
    pub lo_ns: u64,
    /// Highest value in the bucket, nanoseconds.
    pub hi_ns: u64,
    /// Samples in the bucket.
    pub count: u64,
}

/// A latency distribution as it appears in every result.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest sample, nanoseconds.
    pub min_ns: u64,
    /// Largest sample, nanoseconds.
    pub max_ns: u64,
    /// Mean, nanoseconds.
    pub mean_ns: f64,
    /// Standard deviation, nanoseconds.
    pub stddev_ns: f64,
    /// Percentiles in fio's form: `{"99.000000": 1234}` (nanoseconds).
    pub percentile_ns: BTreeMap<String, u64>,
    /// Non-empty buckets, 2^(1/8) apart (about 9% wide), for plotting.
    pub buckets: Vec<Bucket>,
    /// The whole histogram, HdrHistogram V2 encoding in base64.
    pub hdr_v2_base64: String,
}

impl LatencySummary {
    /// A summary holding only `(lo_ns, hi_ns, count)` buckets and their
    /// sample count: what the text tables read (their tests, and results
    /// rebuilt from exported buckets).
    pub fn from_buckets(buckets: &[(u64, u64, u64)]) -> Self {
        LatencySummary {
            samples: buckets.iter().map(|b| b.2).sum(),
            buckets: buckets
                .iter()
                .map(|&(lo_ns, hi_ns, count)| Bucket {
                    lo_ns,
                    hi_ns,
                    count,
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// fio's percentile key format: `99.900000`.
pub fn percentile_key(p: f64) -> String {
    format!("{p:.6}")
}

impl LatencySummary {
    /// Builds the summary of a histogram.
    pub fn from_hist(h: &LatHist) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let percentile_ns = PERCENTILES
            .iter()
            .map(|&p| (percentile_key(p), h.percentile(p)))
            .collect();
        Self {
            samples: h.len(),
            min_ns: h.h.min(),
            max_ns: h.h.max(),
            mean_ns: h.mean(),
            stddev_ns: h.h.stdev(),
            percentile_ns,
            buckets: log_buckets(h),
            hdr_v2_base64: h.encode(),
        }
    }

    /// The value at a percentile that was reported, e.g. `p(99.0)`.
    pub fn p(&self, p: f64) -> Option<u64> {
        self.percentile_ns.get(&percentile_key(p)).copied()
    }
}

/// Bucket edges for plotting: integers 2^(k/8) apart, deduplicated, from 1
/// ns up past [`MAX_NS`].
fn plot_edges() -> Vec<u64> {
    let mut edges: Vec<u64> = Vec::new();
    let mut k = 0u32;
    loop {
        let e = 2f64.powf(f64::from(k) / 8.0).round() as u64;
        if edges.last() != Some(&e) {
            edges.push(e);
        }
        if e > MAX_NS {
            return edges;
        }
        k += 1;
    }
}

/// Groups the histogram into buckets whose edges grow by 2^(1/8); each
/// hdrhistogram bin counts in the bucket holding its lowest value.
fn log_buckets(h: &LatHist) -> Vec<Bucket> {
    let edges = plot_edges();
    let mut out: Vec<Bucket> = Vec::new();
    for v in h.h.iter_recorded() {
        let lo_value = h.h.lowest_equivalent(v.value_iterated_to()).max(1);
        // Index of the last edge <= lo_value.
        let i = edges.partition_point(|&e| e <= lo_value).saturating_sub(1);
        let (lo, hi) = (edges[i], edges.get(i + 1).map_or(u64::MAX, |e| e - 1));
        match out.last_mut() {
            Some(b) if b.lo_ns == lo => b.count += v.count_at_value(),
            _ => out.push(Bucket {
                lo_ns: lo,
                hi_ns: hi,
                count: v.count_at_value(),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_within_one_percent() {
        let mut h = LatHist::new();
        for v in 1..=100_000u64 {
            h.record(v * 10);
        }
        let s = h.summary();
        assert_eq!(s.samples, 100_000);
        let p50 = s.p(50.0).unwrap() as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 <= 0.01, "p50 {p50}");
        let p99 = s.p(99.0).unwrap() as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 <= 0.01, "p99 {p99}");
        assert!((s.mean_ns - 500_005.0).abs() / 500_005.0 < 0.01);
        assert_eq!(s.buckets.iter().map(|b| b.count).sum::<u64>(), 100_000);
        // Buckets are ordered and do not overlap.
        for w in s.buckets.windows(2) {
            assert!(w[0].hi_ns < w[1].lo_ns, "{:?}", w);
        }
    }

    #[test]
    fn extremes_clamped_and_error_bounded() {
        let mut h = LatHist::new();
        h.record(0);
        h.record(5);
        h.record(u64::MAX);
        assert_eq!(h.len(), 3);
        assert_eq!(h.percentile(0.0), 1);
        for v in [3u64, 77, 1234, 98_765, 5_000_000_007, 3_000_000_000_000] {
            let mut one = LatHist::new();
            one.record(v);
            let got = one.percentile(50.0) as f64;
            assert!((got - v as f64).abs() / v as f64 <= 0.01, "{v} -> {got}");
        }
    }

    #[test]
    fn merge_and_roundtrip() {
        let mut a = LatHist::new();
        let mut b = LatHist::new();
        a.record_n(100, 10);
        b.record_n(1000, 30);
        a.merge(&b);
        assert_eq!(a.len(), 40);
        let back = LatHist::decode(&a.encode()).unwrap();
        assert_eq!(back.len(), 40);
        assert_eq!(back.percentile(50.0), a.percentile(50.0));
        assert!(LatHist::decode("not base64!").is_none());
    }

    #[test]
    fn empty_summary() {
        let s = LatHist::new().summary();
        assert_eq!(s.samples, 0);
        assert!(s.buckets.is_empty());
    }
}
