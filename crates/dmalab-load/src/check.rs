//! The rate checker: did the run deliver the rate it was asked for?
//!
//! Independent of the limiter: it sees only per-command completion
//! timestamps and sizes (recorded by the workers as commands complete) and
//! the target, and computes the rate in every whole 1-second window, the
//! run's mean, and, for Poisson arrival, a Kolmogorov–Smirnov test of the
//! gaps between completions against the exponential distribution.
//!
//! "When the device can deliver the rate": the workers also report, per
//! window, how long a command that was due waited because every queue slot
//! was busy (the device was behind, not the pacer). While due commands wait
//! for h% of a window, the window can fall short by at most about h% for
//! the device's sake; the checker gives the worst error beyond that, the
//! pacer's share, next to the worst error over all windows.
//!
//! On a virtual machine the host may pause the whole guest for tens of
//! milliseconds (steal time): completions wait, the queue fills, and the
//! pause shows as held time. The steal per window, read from /proc/stat by
//! the per-second sampler, is reported beside it so a reader can tell a
//! paused VM from a slow device.

use serde::{Deserialize, Serialize};

/// Result of the KS test against an exponential distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KsResult {
    /// Number of gaps tested.
    pub n: usize,
    /// Mean of the exponential tested against, seconds.
    pub mean_gap_s: f64,
    /// The KS statistic D (largest CDF difference).
    pub d: f64,
    /// Asymptotic p-value (Kolmogorov distribution).
    pub p_value: f64,
    /// True when p >= 0.01 (not rejected at the 1% level).
    pub pass: bool,
}

/// What the checker found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateCheck {
    /// What was checked: `bytes` (for --rate) or `commands` (--rate-iops).
    pub unit: String,
    /// Target, units per second.
    pub target_per_s: f64,
    /// Rate in each whole 1-second window since the start, units per second.
    pub windows_per_s: Vec<f64>,
    /// Target of each window, units per second, when the limit changed
    /// during the run (`--rate-control`): the time-weighted mean of the
    /// limits in force during the window. Empty: `target_per_s` throughout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows_target_per_s: Vec<f64>,
    /// Largest |window - target| / target, percent (null with no whole
    /// window: see `no_window`).
    pub window_max_error_pct: Option<f64>,
    /// Per window, nanoseconds during which a due command waited because
    /// every queue slot was busy (the longest of any worker's): the device,
    /// not the pacer, held the rate back.
    pub windows_held_ns: Vec<u64>,
    /// Largest share of a window during which due commands waited for a
    /// slot, percent.
    pub held_max_pct: f64,
    /// Per window, nanoseconds the hypervisor took from the CPU that lost
    /// most (steal time at clock-tick resolution; 0 on bare metal). The
    /// per-second sample k stands for window k.
    #[serde(default)]
    pub windows_steal_ns: Vec<u64>,
    /// Largest share of a window stolen by the hypervisor, percent.
    #[serde(default)]
    pub steal_max_pct: f64,
    /// Largest window error beyond what the device's holds explain, percent:
    /// a window short by e% in which due commands waited for h% of it
    /// counts e - h (at least 0); a window over the target, which is a
    /// backlog made up, counts its error less its own and the previous
    /// window's held shares. 0 when the pacer met the rate wherever the
    /// device let it; equal to the window error where the device never
    /// held a command.
    pub unexplained_max_error_pct: f64,
    /// Mean rate over the whole windows, units per second (null with no
    /// whole window).
    pub mean_per_s: Option<f64>,
    /// |mean - target| / target, percent (null with no whole window).
    pub mean_error_pct: Option<f64>,
    /// Why the window statistics are null: the run ended before its first
    /// whole 1-second window, so there is nothing to judge the rate on
    /// (absent when there was at least one window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_window: Option<String>,
    /// KS test of the completion gaps (Poisson arrival only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ks: Option<KsResult>,
}

/// Checks completions `(time_ns since start, bytes)` against a target rate.
/// `held_ns[w]` is how long due commands waited for a free slot in window
/// `w` (missing windows: none). `end_ns` is when submission stopped; only
/// whole seconds before it count. With `poisson`, the gaps are tested
/// against an exponential whose mean is the target's.
pub fn check_rate(
    completions: &[(u64, u64)],
    held_ns: &[u64],
    steal_ns: &[u64],
    unit_bytes: bool,
    target_per_s: f64,
    end_ns: u64,
    poisson: bool,
) -> RateCheck {
    check_rate_schedule(
        completions,
        held_ns,
        steal_ns,
        unit_bytes,
        &[(0, target_per_s)],
        end_ns,
        poisson,
    )
}

/// The target of each whole 1-second window under `schedule` (`(from_ns,
/// target)`, sorted by time, the first from 0): the time-weighted mean of
/// the targets in force during the window.
pub fn window_targets(schedule: &[(u64, f64)], windows: usize) -> Vec<f64> {
    const W: u64 = 1_000_000_000;
    (0..windows as u64)
        .map(|w| {
            let (lo, hi) = (w * W, (w + 1) * W);
            let mut sum = 0.0;
            for (i, &(from, target)) in schedule.iter().enumerate() {
                let to = schedule.get(i + 1).map_or(u64::MAX, |n| n.0);
                let (a, b) = (from.max(lo), to.min(hi));
                if b > a {
                    sum += target * (b - a) as f64;
                }
            }
            sum / W as f64
        })
        .collect()
}

/// [`check_rate`] with a target that changes: `schedule` holds `(from_ns,
/// target)` pairs, sorted, the first from 0; each window is judged against
/// the time-weighted mean of the targets in force during it.
pub fn check_rate_schedule(
    completions: &[(u64, u64)],
    held_ns: &[u64],
    steal_ns: &[u64],
    unit_bytes: bool,
    schedule: &[(u64, f64)],
    end_ns: u64,
    poisson: bool,
) -> RateCheck {
    let target_per_s = schedule.first().map_or(1.0, |s| s.1);
    let mut times: Vec<(u64, u64)> = completions.to_vec();
    times.sort_unstable();
    let whole = (end_ns / 1_000_000_000) as usize;
    let mut windows = vec![0f64; whole];
    for &(t, b) in &times {
        let w = (t / 1_000_000_000) as usize;
        if w < whole {
            windows[w] += if unit_bytes { b as f64 } else { 1.0 };
        }
    }
    let targets = window_targets(schedule, whole);
    let err_at = |v: f64, t: f64| 100.0 * (v - t).abs() / t;
    let window_max_error_pct = windows
        .iter()
        .zip(&targets)
        .map(|(&w, &t)| err_at(w, t))
        .fold(0.0, f64::max);
    let pct = |h: u64| h as f64 / 1e7;
    // A per-window time series padded (or cut) to the whole windows, and
    // its largest share of a window.
    let per_window = |ns: &[u64]| -> (Vec<u64>, f64) {
        let v: Vec<u64> = (0..whole)
            .map(|w| ns.get(w).copied().unwrap_or(0))
            .collect();
        let max_pct = v.iter().map(|&h| pct(h)).fold(0.0, f64::max);
        (v, max_pct)
    };
    let (windows_held_ns, held_max_pct) = per_window(held_ns);
    let (windows_steal_ns, steal_max_pct) = per_window(steal_ns);
    let unexplained_max_error_pct = windows
        .iter()
        .enumerate()
        .map(|(k, &w)| {
            let mut held = pct(windows_held_ns[k]);
            if w > targets[k] && k > 0 {
                held += pct(windows_held_ns[k - 1]);
            }
            (err_at(w, targets[k]) - held).max(0.0)
        })
        .fold(0.0, f64::max);
    let mean_per_s = if whole > 0 {
        windows.iter().sum::<f64>() / whole as f64
    } else {
        0.0
    };
    let mean_target = if whole > 0 {
        targets.iter().sum::<f64>() / whole as f64
    } else {
        target_per_s
    };
    let ks = poisson.then(|| {
        let n = times.len().max(1) as f64;
        let mean_bytes = times.iter().map(|t| t.1 as f64).sum::<f64>() / n;
        let per_cmd = if unit_bytes { mean_bytes.max(1.0) } else { 1.0 };
        let mean_gap_s = per_cmd / mean_target;
        let mut gaps: Vec<f64> = times
            .windows(2)
            .map(|w| (w[1].0 - w[0].0) as f64 / 1e9)
            .collect();
        ks_exponential(&mut gaps, mean_gap_s)
    });
    RateCheck {
        unit: if unit_bytes { "bytes" } else { "commands" }.into(),
        target_per_s,
        windows_per_s: windows,
        windows_target_per_s: if schedule.len() > 1 {
            targets
        } else {
            Vec::new()
        },
        window_max_error_pct: (whole > 0).then_some(window_max_error_pct),
        windows_held_ns,
        held_max_pct,
        windows_steal_ns,
        steal_max_pct,
        unexplained_max_error_pct,
        mean_per_s: (whole > 0).then_some(mean_per_s),
        mean_error_pct: (whole > 0).then(|| err_at(mean_per_s, mean_target)),
        no_window: (whole == 0).then(|| {
            "no full 1-s window: the run ended before its first whole second (raise --runtime)"
                .to_string()
        }),
        ks,
    }
}

/// One-sample KS test of `samples` against Exp(mean). Sorts `samples`.
pub fn ks_exponential(samples: &mut [f64], mean: f64) -> KsResult {
    samples.sort_by(|a, b| a.total_cmp(b));
    let n = samples.len();
    let mut d = 0f64;
    for (i, &x) in samples.iter().enumerate() {
        let f = 1.0 - (-x / mean).exp();
        let lo = i as f64 / n as f64;
        let hi = (i + 1) as f64 / n as f64;
        d = d.max((f - lo).abs()).max((hi - f).abs());
    }
    let p_value = if n == 0 { 0.0 } else { kolmogorov_q(d, n) };
    KsResult {
        n,
        mean_gap_s: mean,
        d,
        p_value,
        pass: p_value >= 0.01,
    }
}

/// P(D > d) for n samples (Numerical Recipes' asymptotic form with the
/// Stephens correction).
fn kolmogorov_q(d: f64, n: usize) -> f64 {
    let sn = (n as f64).sqrt();
    let lambda = (sn + 0.12 + 0.11 / sn) * d;
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    let mut sign = 1.0;
    for j in 1..=100 {
        let j = j as f64;
        let term = sign * (-2.0 * j * j * lambda * lambda).exp();
        sum += term;
        if term.abs() < 1e-12 {
            break;
        }
        sign = -sign;
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_target_is_judged_per_window() {
        // 1000/s for 1.5 s, then 500/s: window 1 averages 750.
        let s = [(0, 1000.0), (1_500_000_000, 500.0)];
        assert_eq!(window_targets(&s, 3), vec![1000.0, 750.0, 500.0]);
        let mut c: Vec<(u64, u64)> = (0..1500).map(|k| (k * 1_000_000, 4096)).collect();
        c.extend((0..750).map(|k| (1_500_000_000 + k * 2_000_000, 4096)));
        let r = check_rate_schedule(&c, &[], &[], false, &s, 3_000_000_000, false);
        assert!(r.window_max_error_pct.unwrap() < 0.5, "{r:?}");
        assert_eq!(r.windows_target_per_s.len(), 3);
        // The same completions against the first target alone fail.
        let r = check_rate(&c, &[], &[], false, 1000.0, 3_000_000_000, false);
        assert!(r.window_max_error_pct.unwrap() > 40.0);
    }
    use rand::SeedableRng;
    use rand_distr::{Distribution, Exp1};

    #[test]
    fn exact_uniform_passes() {
        let c: Vec<(u64, u64)> = (0..3000).map(|i| (i * 1_000_000 + 50_000, 4096)).collect();
        let r = check_rate(&c, &[], &[], false, 1000.0, 3_000_000_000, false);
        assert_eq!(r.windows_per_s, vec![1000.0, 1000.0, 1000.0]);
        assert_eq!(r.window_max_error_pct.unwrap(), 0.0);
        let r = check_rate(&c, &[], &[], true, 4096.0 * 1000.0, 3_000_000_000, false);
        assert_eq!(r.mean_error_pct.unwrap(), 0.0);
    }

    #[test]
    fn the_device_holds_explain_only_their_share_of_the_error() {
        // Target 1000/s. Window 0 exact; window 1 10% short with 30 ms
        // (3%) of due commands waiting for a slot: 7% is the pacer's;
        // window 2 2% over, a made-up backlog, with 5 ms held in it and
        // 30 ms in window 1: fully explained; window 3 0.5% short with no
        // wait: all of it the pacer's.
        let mut c: Vec<(u64, u64)> = (0..1000).map(|i| (i * 1_000_000, 1)).collect();
        c.extend((0..900).map(|i| (1_000_000_000 + i * 1_100_000, 1)));
        c.extend((0..1020).map(|i| (2_000_000_000 + i * 980_000, 1)));
        c.extend((0..995).map(|i| (3_000_000_000 + i * 1_005_000, 1)));
        let held = [0, 30_000_000, 5_000_000];
        let r = check_rate(&c, &held, &[], false, 1000.0, 4_000_000_000, false);
        assert_eq!(r.windows_per_s, vec![1000.0, 900.0, 1020.0, 995.0]);
        assert_eq!(r.windows_held_ns, vec![0, 30_000_000, 5_000_000, 0]);
        assert!(
            (r.window_max_error_pct.unwrap() - 10.0).abs() < 1e-9,
            "{r:?}"
        );
        assert!((r.held_max_pct - 3.0).abs() < 1e-9, "{r:?}");
        assert!((r.unexplained_max_error_pct - 7.0).abs() < 1e-9, "{r:?}");
        // Held for a third of window 1: nothing left for the pacer but the
        // 0.5% of window 3.
        let held = [0, 300_000_000, 5_000_000];
        let r = check_rate(&c, &held, &[], false, 1000.0, 4_000_000_000, false);
        assert!((r.unexplained_max_error_pct - 0.5).abs() < 1e-9, "{r:?}");
        // No holds: the pacer owns every window's error.
        let r = check_rate(&c, &[], &[], false, 1000.0, 4_000_000_000, false);
        assert_eq!(r.unexplained_max_error_pct, r.window_max_error_pct.unwrap());
        assert_eq!(r.held_max_pct, 0.0);
    }

    #[test]
    fn steal_is_reported_per_whole_window_and_judges_nothing() {
        // Three whole windows; the sampler saw a fourth, partial second.
        let c: Vec<(u64, u64)> = (0..3000).map(|i| (i * 1_000_000, 1)).collect();
        let steal = [0, 40_000_000, 10_000_000, 90_000_000];
        let r = check_rate(&c, &[], &steal, false, 1000.0, 3_000_000_000, false);
        assert_eq!(r.windows_steal_ns, vec![0, 40_000_000, 10_000_000]);
        assert!((r.steal_max_pct - 4.0).abs() < 1e-9, "{r:?}");
        // Steal is evidence beside the error, not an excuse for it.
        assert_eq!(r.unexplained_max_error_pct, r.window_max_error_pct.unwrap());
        // Fewer samples than windows (a run cut short): zeros, not a panic.
        let r = check_rate(&c, &[], &steal[..1], false, 1000.0, 3_000_000_000, false);
        assert_eq!(r.windows_steal_ns, vec![0, 0, 0]);
    }

    #[test]
    fn a_run_without_a_whole_window_judges_nothing() {
        // 0.9 s of exact completions: no whole window, so no mean and no
        // error (not 0% and not 100%), and the reason says why.
        let c: Vec<(u64, u64)> = (0..900).map(|i| (i * 1_000_000, 1)).collect();
        let r = check_rate(&c, &[], &[], false, 1000.0, 900_000_000, false);
        assert!(r.windows_per_s.is_empty());
        assert_eq!(r.mean_per_s, None);
        assert_eq!(r.mean_error_pct, None);
        assert_eq!(r.window_max_error_pct, None);
        assert!(r
            .no_window
            .as_deref()
            .unwrap()
            .contains("no full 1-s window"));
        let r = check_rate(&c, &[], &[], false, 1000.0, 1_000_000_000, false);
        assert_eq!(r.no_window, None);
        assert_eq!(r.mean_error_pct, Some(10.0));
    }

    #[test]
    fn burst_in_one_window_fails() {
        // 2000 commands all in the first second: windows 2000, 0.
        let c: Vec<(u64, u64)> = (0..2000).map(|i| (i * 1000, 1)).collect();
        let r = check_rate(&c, &[], &[], false, 1000.0, 2_000_000_000, false);
        assert_eq!(r.window_max_error_pct.unwrap(), 100.0);
        assert_eq!(r.mean_error_pct.unwrap(), 0.0);
    }

    #[test]
    fn ks_accepts_exponential_and_rejects_uniform() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut e: Vec<f64> = (0..5000)
            .map(|_| {
                let x: f64 = Exp1.sample(&mut rng);
                x * 2.0
            })
            .collect();
        assert!(ks_exponential(&mut e, 2.0).pass);
        let mut u: Vec<f64> = vec![2.0; 5000];
        let r = ks_exponential(&mut u, 2.0);
        assert!(!r.pass && r.d > 0.3, "{r:?}");
        // The wrong mean is rejected too.
        assert!(!ks_exponential(&mut e, 2.2).pass);
    }
}
