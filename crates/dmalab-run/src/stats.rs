//! Statistics per cell (configuration × victim × load): mean, median,
//! standard deviation, a bootstrap confidence interval of the mean, the
//! slowdown against plain with its bootstrap interval, and a Mann-Whitney U
//! test against plain.
//!
//! Conventions follow scipy so that the committed script
//! `scripts/stats-expected.py` can produce the expected values of the tests:
//! sample standard deviation (ddof = 1); percentile bootstrap intervals with
//! numpy's linear interpolation; Mann-Whitney U two-sided, statistic U of
//! the first sample, normal approximation with continuity correction and
//! tie correction, exact distribution otherwise.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Bootstrap resamples.
pub const RESAMPLES: usize = 10_000;
/// Fixed seed, so the same results give the same intervals.
pub const SEED: u64 = 0x646d_616c_6162; // "dmalab"
/// Confidence level of every interval.
pub const LEVEL: f64 = 0.95;
/// Exact Mann-Whitney p-values when there are no ties and both samples
/// together hold at most this many values.
pub const EXACT_MAX_N: usize = 40;

/// Arithmetic mean (NaN for no values).
pub fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Median (mean of the two middle values for an even count).
pub fn median(x: &[f64]) -> f64 {
    let mut s = x.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Sample standard deviation (ddof = 1); 0 for a single value.
pub fn sd(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

/// Percentile of sorted data with linear interpolation (numpy's default).
pub fn percentile_sorted(s: &[f64], q: f64) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let pos = q / 100.0 * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

fn interval(mut stats: Vec<f64>) -> (f64, f64) {
    stats.retain(|v| v.is_finite());
    stats.sort_by(f64::total_cmp);
    let a = (1.0 - LEVEL) / 2.0 * 100.0;
    (
        percentile_sorted(&stats, a),
        percentile_sorted(&stats, 100.0 - a),
    )
}

fn resample_mean(x: &[f64], rng: &mut ChaCha8Rng) -> f64 {
    let n = x.len();
    let mut s = 0.0;
    for _ in 0..n {
        s += x[rng.gen_range(0..n)];
    }
    s / n as f64
}

/// 95% percentile-bootstrap interval of the mean.
pub fn bootstrap_mean_ci(x: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    if x.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    interval((0..resamples).map(|_| resample_mean(x, &mut rng)).collect())
}

/// 95% percentile-bootstrap interval of `mean(num) / mean(den)`, the two
/// samples resampled independently.
pub fn bootstrap_ratio_ci(num: &[f64], den: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    if num.is_empty() || den.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    interval(
        (0..resamples)
            .map(|_| {
                let d = resample_mean(den, &mut rng);
                let n = resample_mean(num, &mut rng);
                n / d
            })
            .collect(),
    )
}

/// The share of a slowdown its DMA caused:
/// `(mean(loaded) - mean(control)) / (mean(loaded) - mean(plain))`. 1 when
/// the control (the same CPU-side work without data moved into host
/// memory) left the victim as it was without load, 0 when it slowed the
/// victim as much as the load did. The same for either direction of a
/// figure (the signs cancel); NaN when the load changed nothing.
pub fn dma_share(loaded: &[f64], control: &[f64], plain: &[f64]) -> f64 {
    let (l, c, p) = (mean(loaded), mean(control), mean(plain));
    (l - c) / (l - p)
}

/// 95% percentile-bootstrap interval of [`dma_share`], the three samples
/// resampled independently (scipy's `bootstrap(..., paired=False)`).
/// Resamples whose loaded and plain means coincide (an infinite share) are
/// left out, as `interval` leaves out every non-finite value.
pub fn bootstrap_share_ci(
    loaded: &[f64],
    control: &[f64],
    plain: &[f64],
    resamples: usize,
    seed: u64,
) -> (f64, f64) {
    if loaded.is_empty() || control.is_empty() || plain.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    interval(
        (0..resamples)
            .map(|_| {
                let l = resample_mean(loaded, &mut rng);
                let c = resample_mean(control, &mut rng);
                let p = resample_mean(plain, &mut rng);
                (l - c) / (l - p)
            })
            .collect(),
    )
}

/// The smallest two-sided p-value the exact Mann-Whitney U test can give
/// for samples of `m` and `n` values: `2 / C(m + n, m)` (all of one sample
/// above all of the other). When it is 0.05 or more, no outcome of `m`
/// against `n` runs can be significant at 5%.
pub fn mwu_min_p(m: usize, n: usize) -> f64 {
    if m == 0 || n == 0 {
        return 1.0;
    }
    let mut c = 1.0f64;
    for k in 1..=m.min(n) {
        c = c * (m + n - m.min(n) + k) as f64 / k as f64;
    }
    (2.0 / c).min(1.0)
}

/// How a Mann-Whitney p-value was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MwuMethod {
    /// Exact null distribution (no ties, small samples).
    Exact,
    /// Normal approximation with continuity and tie correction.
    Asymptotic,
}

/// A Mann-Whitney U test result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mwu {
    /// U statistic of the first sample.
    pub u: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// How p was computed.
    pub method: MwuMethod,
}

/// Ranks (1-based, ties get their average rank) of `x` followed by `y`, and
/// the tie term sum(t^3 - t) over tie groups.
fn ranks(all: &[f64]) -> (Vec<f64>, f64) {
    let n = all.len();
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&a, &b| all[a].total_cmp(&all[b]));
    let mut r = vec![0.0; n];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[idx[j + 1]] == all[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    (r, tie_term)
}

/// Number of arrangements giving each U value for sample sizes m, n:
/// `counts[u]`, u in 0..=m*n (the classic recursion, in integers).
fn exact_counts(m: usize, n: usize) -> Vec<f64> {
    // f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u): build over n for each m.
    // Table over (i, j) kept as vectors of counts.
    let mut prev: Vec<Vec<f64>> = (0..=n).map(|_| vec![1.0]).collect(); // i = 0
    for i in 1..=m {
        let mut cur: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
        cur.push(vec![1.0]); // j = 0
        for j in 1..=n {
            let len = i * j + 1;
            let mut c = vec![0.0; len];
            // from (i-1, j) shifted by j: the largest x beats all j ys.
            for (u, &v) in prev[j].iter().enumerate() {
                c[u + j] += v;
            }
            for (u, &v) in cur[j - 1].iter().enumerate() {
                c[u] += v;
            }
            cur.push(c);
        }
        prev = cur;
    }
    prev.swap_remove(n)
}

extern "C" {
    fn erfc(x: f64) -> f64;
}

/// Survival function of the standard normal distribution.
pub fn norm_sf(z: f64) -> f64 {
    // SAFETY: erfc from the C math library is a pure function of a double.
    0.5 * unsafe { erfc(z / std::f64::consts::SQRT_2) }
}

/// Two-sided Mann-Whitney U test of `x` against `y`; `method` None picks
/// exact for small samples without ties, the normal approximation otherwise.
pub fn mann_whitney(x: &[f64], y: &[f64], method: Option<MwuMethod>) -> Option<Mwu> {
    let (n1, n2) = (x.len(), y.len());
    if n1 == 0 || n2 == 0 {
        return None;
    }
    let mut all = x.to_vec();
    all.extend_from_slice(y);
    let (r, tie_term) = ranks(&all);
    let r1: f64 = r[..n1].iter().sum();
    let u1 = r1 - (n1 * (n1 + 1)) as f64 / 2.0;
    let u2 = (n1 * n2) as f64 - u1;
    let u = u1.max(u2);
    let method = method.unwrap_or(if tie_term == 0.0 && n1 + n2 <= EXACT_MAX_N {
        MwuMethod::Exact
    } else {
        MwuMethod::Asymptotic
    });
    let p = match method {
        MwuMethod::Exact => {
            let counts = exact_counts(n1, n2);
            let total: f64 = counts.iter().sum();
            let k = u.round() as usize;
            let tail: f64 = counts[k.min(counts.len())..].iter().sum();
            2.0 * tail / total
        }
        MwuMethod::Asymptotic => {
            let n = (n1 + n2) as f64;
            let mu = (n1 * n2) as f64 / 2.0;
            let s = ((n1 * n2) as f64 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)))).sqrt();
            let z = (u - mu - 0.5) / s;
            if s == 0.0 {
                1.0
            } else {
                2.0 * norm_sf(z)
            }
        }
    };
    Some(Mwu {
        u: u1,
        p: p.clamp(0.0, 1.0),
        method,
    })
}

/// Statistics of one sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Values used (completed runs).
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Sample standard deviation.
    pub sd: f64,
    /// Coefficient of variation, percent.
    pub cv_pct: f64,
    /// Lower end of the 95% bootstrap interval of the mean.
    pub ci_lo: f64,
    /// Upper end of the 95% bootstrap interval of the mean.
    pub ci_hi: f64,
}

/// Summarises a sample.
pub fn summarize(x: &[f64]) -> Summary {
    let m = mean(x);
    let s = sd(x);
    let (lo, hi) = bootstrap_mean_ci(x, RESAMPLES, SEED);
    Summary {
        n: x.len(),
        mean: m,
        median: median(x),
        sd: s,
        cv_pct: if m != 0.0 { 100.0 * s / m.abs() } else { 0.0 },
        ci_lo: lo,
        ci_hi: hi,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basics() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(mean(&x), 2.5);
        assert_eq!(median(&x), 2.5);
        assert!((sd(&x) - 1.2909944487358056).abs() < 1e-12);
        assert_eq!(percentile_sorted(&x, 50.0), 2.5);
        assert_eq!(percentile_sorted(&x, 100.0), 4.0);
    }

    #[test]
    fn exact_counts_sum_to_binomial() {
        let c = exact_counts(3, 4);
        assert_eq!(c.len(), 13);
        assert_eq!(c.iter().sum::<f64>(), 35.0);
        // symmetric
        for u in 0..13 {
            assert_eq!(c[u], c[12 - u]);
        }
    }

    #[test]
    fn bootstrap_is_deterministic_and_brackets_the_mean() {
        let x = [10.0, 11.0, 9.5, 10.2, 10.8, 9.9];
        let a = bootstrap_mean_ci(&x, 2000, 7);
        let b = bootstrap_mean_ci(&x, 2000, 7);
        assert_eq!(a, b);
        assert!(a.0 < mean(&x) && mean(&x) < a.1);
    }

    #[test]
    fn dma_share_is_one_for_a_control_like_plain_and_zero_for_one_like_the_load() {
        let plain = [100.0, 101.0, 99.0];
        let loaded = [150.0, 151.0, 149.0];
        assert_eq!(dma_share(&loaded, &plain, &plain), 1.0);
        assert_eq!(dma_share(&loaded, &loaded, &plain), 0.0);
        // A higher-is-better figure: the signs cancel.
        assert_eq!(dma_share(&[50.0], &[75.0], &[100.0]), 0.5);
        let (lo, hi) = bootstrap_share_ci(&loaded, &loaded, &plain, 2000, 3);
        assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
    }

    #[test]
    fn smallest_exact_p_needs_four_runs_each() {
        assert_eq!(mwu_min_p(3, 3), 0.1);
        assert!((mwu_min_p(4, 4) - 2.0 / 70.0).abs() < 1e-15);
        assert!((mwu_min_p(2, 10) - 2.0 / 66.0).abs() < 1e-15);
        assert_eq!(mwu_min_p(1, 1), 1.0);
        // Against scipy: the exact p of fully separated samples.
        let x = [1.0, 2.0, 3.0];
        let y = [4.0, 5.0, 6.0];
        let m = mann_whitney(&y, &x, Some(MwuMethod::Exact)).unwrap();
        assert!((m.p - mwu_min_p(3, 3)).abs() < 1e-12);
    }

    #[test]
    fn identical_samples_are_not_different() {
        let x = [1.0, 1.0, 1.0];
        let m = mann_whitney(&x, &x, None).unwrap();
        assert_eq!(m.p, 1.0);
    }
}
