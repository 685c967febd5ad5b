//! A throttle session: the victim's baseline with the aggressor idle, one
//! closed loop per SLO, and (with a sweep) the open-loop frontier, all
//! against one running victim and one running aggressor whose rate the
//! session sets through its rate-control page.

use crate::actuator::{Actuator, IoMax, IoMaxKey, LoadActuator};
use crate::controller::{Controller, Params};
use crate::slo::{Slo, Stat};
use crate::victim::{stop_group, Figures, NoFigure, Victim, VictimSpec, TAIL_LINES};
use dmalab_core::ratecontrol::RateControl;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Errors of a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Bad input (names the option).
    #[error("{0}")]
    Usage(#[from] dmalab_core::UsageError),
    /// The victim or aggressor failed.
    #[error("{0}")]
    Child(String),
    /// An actuator failed.
    #[error(transparent)]
    Actuator(#[from] crate::actuator::ActuatorError),
    /// A file or process could not be made.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// What failed.
        cause: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SessionError {
    let what = what.into();
    move |cause| SessionError::Io { what, cause }
}

/// The open-loop sweep's shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepConfig {
    /// Fixed rates, evenly spaced from min to max rate (inclusive).
    pub points: usize,
    /// Passes over all points.
    pub repeat: usize,
    /// Intervals measured at each point (after one discarded).
    pub intervals_per_point: usize,
}

/// A cgroup v2 `io.max` actuator instead of a `dmalab load` aggressor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IoMaxConfig {
    /// The cgroup v2 directory whose processes' I/O is throttled.
    pub cgroup: PathBuf,
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// The key set (`rbps` or `wbps`).
    pub key: IoMaxKey,
}

/// The resolved configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    /// The victim, as a label.
    pub victim: String,
    /// The victim's figure unit (`ns`, or empty for exec figures).
    pub victim_unit: String,
    /// Flags of the aggressor's `dmalab load` (besides the ones the session
    /// adds: --rate, --runtime, --live-stats, --rate-control).
    pub aggressor_args: Vec<String>,
    /// Throttle a cgroup's I/O through `io.max` instead (no aggressor is
    /// started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_max: Option<IoMaxConfig>,
    /// Control interval, nanoseconds (also the victim's reporting interval).
    pub interval_ns: u64,
    /// Intervals discarded after each start or rate change of a sweep.
    pub warmup_intervals: usize,
    /// Intervals of baseline, aggressor idle.
    pub baseline_intervals: usize,
    /// Control intervals per SLO.
    pub intervals: usize,
    /// The SLOs, one closed loop each.
    pub slos: Vec<Slo>,
    /// Controller and its parameters (rates in bytes per second).
    pub controller: Params,
    /// Rate each closed loop starts at, bytes per second.
    pub start_rate_bytes_per_s: f64,
    /// The sweep, when asked for.
    pub sweep: Option<SweepConfig>,
    /// Settled: the rate target stays within this share of the settled rate
    /// (the median target of the loop's last third), or within half this
    /// share of the range the target covered if that is wider.
    pub settle_band: f64,
}

/// One control interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// End of the interval, seconds since the loop started.
    pub t_s: f64,
    /// Rate limit in force during the interval, bytes per second.
    pub rate_target_bytes_per_s: f64,
    /// Rate the aggressor delivered in the interval, bytes per second.
    pub delivered_bytes_per_s: Option<f64>,
    /// The victim's figure in the interval (the SLO's statistic), in the
    /// victim's unit.
    pub victim_metric: f64,
    /// The SLO's bound, same unit.
    pub slo_limit: f64,
    /// Normalised slack (positive: inside the bound).
    pub slack: f64,
    /// The bound was broken in this interval.
    pub violated: bool,
}

/// One closed loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopResult {
    /// The SLO.
    pub slo: Slo,
    /// The baseline of the SLO's statistic (aggressor idle), victim unit.
    pub baseline: f64,
    /// The bound, victim unit.
    pub slo_limit: f64,
    /// The time series.
    pub series: Vec<Point>,
    /// Median rate target over the last third of the loop, bytes/s; None
    /// (JSON null) when the loop never settled.
    pub settled_rate_bytes_per_s: Option<f64>,
    /// Median delivered rate over the last third, bytes/s; None when the
    /// loop never settled.
    pub settled_delivered_bytes_per_s: Option<f64>,
    /// Median victim figure over the last third, victim unit.
    pub settled_victim_metric: f64,
    /// Its slowdown against the baseline.
    pub settled_slowdown: f64,
    /// Seconds from the loop's start until the rate target stayed within
    /// the settle band around the settled rate (None: it never did).
    pub settle_time_s: Option<f64>,
    /// Intervals past the bound.
    pub violations: usize,
    /// violations / intervals.
    pub violation_share: f64,
    /// Intervals past the bound after settling.
    pub violations_after_settle: usize,
    /// Their share of the intervals after settling (None: never settled).
    pub violation_share_after_settle: Option<f64>,
    /// The intervals after settling meet the violation budget
    /// ([`crate::slo::within_budget`], the sweep frontier's rule too);
    /// None when the loop never settled (and in older results).
    #[serde(default)]
    pub within_violation_budget: Option<bool>,
    /// What the loop found (`not_recorded` in results written before
    /// dmalab recorded it, which still read and render).
    #[serde(default)]
    pub outcome: Outcome,
    /// The share of the victim's change at the maximum rate that the
    /// rate is answerable for, `(at max - at min) / (at max - baseline)`:
    /// the figure at the minimum rate is the control (the aggressor
    /// present, moving next to nothing), as the control cycle of `dmalab
    /// run` is. 1: all of it is the DMA's; 0: the aggressor's presence
    /// alone does it. None without figures at both ends (the loop's own
    /// intervals, or the sweep's) or when the victim did not change.
    #[serde(default)]
    pub dma_attributable_share: Option<f64>,
}

/// What a closed loop found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Outcome {
    /// A result from before the outcome was recorded.
    #[default]
    NotRecorded,
    /// It settled at a rate inside the range.
    Settled,
    /// It settled at the maximum rate with the SLO met: the victim needs
    /// no throttling in this range.
    HoldsAtMax,
    /// Past the bound at the minimum rate, where it settled: the slowdown
    /// is the aggressor's presence, not its rate; no rate limit can help.
    NoRateMeets {
        /// The victim's figure at the minimum rate over its baseline
        /// (0.81: a bandwidth at 81% of it; 1.3: a latency 30% above).
        figure_ratio_at_min: f64,
    },
    /// The rate was still moving in the loop's last third.
    NeverSettled,
}

impl Outcome {
    /// The one line that says it (`settled` is the settled rate, bytes/s).
    pub fn line(&self, settled: Option<f64>) -> String {
        use dmalab_core::units::fmt_bytes;
        match self {
            Outcome::Settled => format!(
                "settled at {}/s",
                settled.map_or("-".into(), fmt_bytes)
            ),
            Outcome::HoldsAtMax => "the SLO holds at the maximum rate".into(),
            Outcome::NoRateMeets { figure_ratio_at_min } => format!(
                "no rate meets the SLO: at the minimum rate the victim is at x{figure_ratio_at_min:.2}; see the control cycle in `dmalab run`"
            ),
            Outcome::NeverSettled => "never settled (raise --intervals)".into(),
            Outcome::NotRecorded => "outcome not recorded (a result from an older dmalab)".into(),
        }
    }
}

/// `(loaded - control) / (loaded - plain)`: the DMA-attributable share,
/// as `dmalab run` computes it. None when the loaded figure is within
/// 0.5% of the plain one (nothing to attribute).
pub fn dma_share(plain: f64, control: f64, loaded: f64) -> Option<f64> {
    let d = loaded - plain;
    (d.abs() > 0.005 * plain.abs() && control.is_finite()).then(|| (loaded - control) / d)
}

/// One fixed-rate measurement of the sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Pass number, from 0.
    pub repeat: usize,
    /// The fixed rate limit, bytes per second.
    pub rate_target_bytes_per_s: f64,
    /// Mean delivered rate, bytes per second.
    pub delivered_bytes_per_s: Option<f64>,
    /// Mean of each statistic over the point's intervals, victim unit.
    pub victim: BTreeMap<String, f64>,
    /// Each measured interval (empty in results from before they were
    /// recorded).
    #[serde(default)]
    pub intervals: Vec<SweepInterval>,
}

/// One measured interval of a sweep point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepInterval {
    /// Rate the aggressor delivered in the interval, bytes per second.
    pub delivered_bytes_per_s: Option<f64>,
    /// Each statistic an SLO uses, victim unit (absent: the victim
    /// reported none in the interval).
    pub victim: BTreeMap<String, f64>,
    /// Per SLO (its text), whether the interval was past its bound
    /// ([`Slo::violated`], as the closed loop judges its intervals).
    pub violated: BTreeMap<String, bool>,
}

impl SweepInterval {
    /// Whether the interval was past `slo`'s bound, as the sweep judged it
    /// ([`Slo::violated`]); an interval with no judgement for it counts as
    /// past, as one without a figure does.
    pub fn past(&self, slo: &Slo) -> bool {
        self.violated.get(&slo.text).copied().unwrap_or(true)
    }
}

/// Per SLO and fixed rate: the sweep's intervals (all passes) judged by
/// the violation budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrontierPoint {
    /// The fixed rate limit, bytes per second.
    pub rate_target_bytes_per_s: f64,
    /// Mean delivered rate over the passes, bytes per second.
    pub delivered_bytes_per_s: Option<f64>,
    /// Intervals measured at this rate, all passes.
    pub intervals: usize,
    /// Those past the bound.
    pub violations: usize,
    /// Mean of the SLO's statistic over them, victim unit.
    pub mean_victim_metric: f64,
    /// Within the budget ([`crate::slo::within_budget`]).
    pub meets: bool,
}

/// Per SLO: the frontier's verdict beside the loop's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrontierVerdict {
    /// The SLO.
    pub slo: String,
    /// Highest fixed rate whose intervals over all passes meet the SLO by
    /// the violation budget (`rule`), bytes/s (None: none did).
    pub best_fixed_rate_bytes_per_s: Option<f64>,
    /// Its delivered rate, bytes/s.
    pub best_fixed_delivered_bytes_per_s: Option<f64>,
    /// The loop's settled delivered rate as a share of that.
    pub closed_loop_share_of_best: Option<f64>,
    /// The loop's intervals after settling meet the same rule (None: it
    /// never settled).
    #[serde(default)]
    pub closed_loop_within_budget: Option<bool>,
    /// The rule a fixed rate met, in words (empty in older results,
    /// whose frontier took the mean of each pass).
    #[serde(default)]
    pub rule: String,
    /// Every fixed rate, judged.
    #[serde(default)]
    pub points: Vec<FrontierPoint>,
}

/// The session's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThrottleResult {
    /// Unit of the victim's figures.
    pub victim_unit: String,
    /// Baseline of each statistic used (median over the baseline).
    pub baseline: BTreeMap<String, f64>,
    /// The closed loops, one per SLO.
    pub loops: Vec<LoopResult>,
    /// The sweep's measurements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<SweepPoint>,
    /// Per SLO, the frontier's best fixed rate against the loop's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frontier: Vec<FrontierVerdict>,
    /// Stopped early (SIGINT/SIGTERM); figures cover what ran.
    pub interrupted: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Settling of a rate series: (settled rate, index from which every rate
/// stays within `band` of it). The settled rate is the median of the last
/// third; a series settled only if it stayed in the band for at least that
/// last third: a loop still moving at its end (one whose last interval
/// or two happen to lie near the median) has no settled rate, None both.
pub fn settling(rates: &[f64], band: f64) -> (Option<f64>, Option<usize>) {
    if rates.is_empty() {
        return (None, None);
    }
    let third = (rates.len() / 3).max(1);
    let tail = &rates[rates.len() - third..];
    let settled = median(tail.to_vec());
    let hi = rates.iter().cloned().fold(f64::MIN, f64::max);
    let lo = rates.iter().cloned().fold(f64::MAX, f64::min);
    let tol = (band * settled).max(band * (hi - lo) * 0.5).max(1.0);
    let mut from = None;
    for i in (0..rates.len()).rev() {
        if (rates[i] - settled).abs() <= tol {
            from = Some(i);
        } else {
            break;
        }
    }
    match from {
        Some(i) if i <= rates.len() - third => (Some(settled), Some(i)),
        _ => (None, None),
    }
}

/// Builds a loop's result from its series; `range` is the controller's
/// (min, max) rate, bytes/s.
pub fn summarize_loop(
    slo: &Slo,
    baseline: f64,
    limit: f64,
    series: Vec<Point>,
    interval_s: f64,
    band: f64,
    range: (f64, f64),
) -> LoopResult {
    let rates: Vec<f64> = series.iter().map(|p| p.rate_target_bytes_per_s).collect();
    let (settled, from) = settling(&rates, band);
    let n = series.len();
    let third = n - (n / 3).max(1).min(n);
    let last: &[Point] = &series[third..];
    let delivered: Vec<f64> = last
        .iter()
        .filter_map(|p| p.delivered_bytes_per_s)
        .collect();
    let metric = median(last.iter().map(|p| p.victim_metric).collect());
    let violations = series.iter().filter(|p| p.violated).count();
    let after: &[Point] = from.map_or(&[], |i| &series[i..]);
    let va = after.iter().filter(|p| p.violated).count();
    // The victim's median figure over the loop's intervals at one end.
    let at = |rate: f64| {
        let v: Vec<f64> = series
            .iter()
            .filter(|p| (p.rate_target_bytes_per_s - rate).abs() <= 1e-6 * rate)
            .map(|p| p.victim_metric)
            .collect();
        (!v.is_empty()).then(|| median(v))
    };
    let tail_target = median(last.iter().map(|p| p.rate_target_bytes_per_s).collect());
    let outcome = match settled {
        // Not settled, but back at the minimum for most of its last third,
        // where the victim's median figure is past the bound: the loop
        // tried a higher rate and came back. More intervals would not
        // change the answer, which is the one a settled loop gives
        // (issue 34: a busy host's latency victim at its bound at 20
        // MiB/s, 36 of 40 intervals there, read "raise --intervals").
        None => match at(range.0) {
            Some(m) if tail_target <= range.0 * (1.0 + band) && slo.slack(m, limit) < 0.0 => {
                Outcome::NoRateMeets {
                    figure_ratio_at_min: m / baseline,
                }
            }
            _ => Outcome::NeverSettled,
        },
        Some(s) => {
            let held = median(after.iter().map(|p| p.victim_metric).collect());
            let meets = slo.slack(held, limit) >= 0.0;
            if s <= range.0 * (1.0 + band) && !meets {
                Outcome::NoRateMeets {
                    figure_ratio_at_min: held / baseline,
                }
            } else if s >= range.1 / (1.0 + band) && meets {
                Outcome::HoldsAtMax
            } else {
                Outcome::Settled
            }
        }
    };
    let dma_attributable_share = match (at(range.0), at(range.1)) {
        (Some(lo), Some(hi)) => dma_share(baseline, lo, hi),
        _ => None,
    };
    LoopResult {
        slo: slo.clone(),
        baseline,
        slo_limit: limit,
        settled_rate_bytes_per_s: settled,
        settled_delivered_bytes_per_s: (settled.is_some() && !delivered.is_empty())
            .then(|| median(delivered)),
        settled_victim_metric: metric,
        settled_slowdown: slo.slowdown(metric, baseline),
        settle_time_s: from.map(|i| i as f64 * interval_s),
        violations,
        violation_share: if n > 0 {
            violations as f64 / n as f64
        } else {
            0.0
        },
        violations_after_settle: va,
        violation_share_after_settle: (!after.is_empty()).then(|| va as f64 / after.len() as f64),
        within_violation_budget: from.map(|_| crate::slo::within_budget(va, after.len())),
        outcome,
        dma_attributable_share,
        series,
    }
}

/// The frontier's verdict for one loop: per fixed rate, every interval of
/// every pass as the sweep judged it against the SLO's bound
/// ([`SweepInterval::past`]); the best fixed rate is the
/// highest whose intervals meet the violation budget, the rule the loop's
/// intervals after settling are held to ([`crate::slo::within_budget`]).
/// The mean of a pass does not decide: on the GPU plant of
/// `docs/bench/throttle-2026-11-27c.md` two pass means 1.0-1.4% under the
/// bound named a rate whose 1-second intervals scatter by about 7 ns
/// around it, past the bound in a large share of them.
pub fn verdict(l: &LoopResult, sweep: &[SweepPoint]) -> FrontierVerdict {
    let key = l.slo.stat.name();
    #[derive(Default)]
    struct Acc {
        figures: Vec<f64>,
        violations: usize,
        intervals: usize,
        delivered: Vec<f64>,
    }
    let mut by_rate: BTreeMap<u64, Acc> = BTreeMap::new();
    for p in sweep {
        let e = by_rate
            .entry(p.rate_target_bytes_per_s.round() as u64)
            .or_default();
        for i in &p.intervals {
            let v = i.victim.get(key).copied().unwrap_or(f64::NAN);
            e.intervals += 1;
            e.violations += usize::from(i.past(&l.slo));
            if v.is_finite() {
                e.figures.push(v);
            }
        }
        if let Some(d) = p.delivered_bytes_per_s {
            e.delivered.push(d);
        }
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let points: Vec<FrontierPoint> = by_rate
        .into_iter()
        .map(|(r, a)| FrontierPoint {
            rate_target_bytes_per_s: r as f64,
            delivered_bytes_per_s: mean(&a.delivered),
            intervals: a.intervals,
            violations: a.violations,
            mean_victim_metric: mean(&a.figures).unwrap_or(f64::NAN),
            meets: crate::slo::within_budget(a.violations, a.intervals),
        })
        .collect();
    let best = points.iter().rev().find(|p| p.meets);
    let best_d = best.and_then(|b| b.delivered_bytes_per_s);
    FrontierVerdict {
        slo: l.slo.text.clone(),
        best_fixed_rate_bytes_per_s: best.map(|b| b.rate_target_bytes_per_s),
        best_fixed_delivered_bytes_per_s: best_d,
        closed_loop_share_of_best: match (l.settled_delivered_bytes_per_s, best_d) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        },
        closed_loop_within_budget: l.within_violation_budget,
        rule: crate::slo::budget_rule(),
        points,
    }
}

/// The progress line of one sweep point: its rate, the mean figures, how
/// many intervals they cover (`n`) and how many were past each SLO's
/// bound (`violations`; named by SLO when there are several).
pub fn sweep_line(
    pass: usize,
    rate: f64,
    means: &BTreeMap<String, f64>,
    unit: &str,
    slos: &[Slo],
    intervals: &[SweepInterval],
) -> String {
    let count = |slo: &Slo| intervals.iter().filter(|i| i.past(slo)).count();
    let violations = match slos {
        [one] => count(one).to_string(),
        _ => slos
            .iter()
            .map(|s| format!("{} ({})", count(s), s.text))
            .collect::<Vec<_>>()
            .join(", "),
    };
    format!(
        "sweep pass {}: {}/s -> {} (n {}, violations {violations})",
        pass + 1,
        dmalab_core::units::fmt_bytes(rate),
        means
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}{unit}"))
            .collect::<Vec<_>>()
            .join(", "),
        intervals.len()
    )
}

/// A running `dmalab load` aggressor.
struct Aggressor {
    child: Child,
    stderr: PathBuf,
}

impl Aggressor {
    fn start(
        exe: &Path,
        args: &[String],
        rate: f64,
        runtime: Duration,
        dir: &Path,
    ) -> Result<(Self, LoadActuator), SessionError> {
        let live = dir.join("aggressor.live");
        let ctl = dir.join("aggressor.rate");
        let stderr = dir.join("aggressor.stderr");
        let mut cmd = Command::new(exe);
        dmalab_core::process::prepare(&mut cmd, &crate::victim::setup());
        let child = cmd
            .arg("load")
            .args(args)
            .arg("--rate")
            .arg(format!("{}", rate.round().max(1.0) as u64))
            .arg("--runtime")
            .arg(format!("{}s", runtime.as_secs().max(1)))
            .arg("--live-stats")
            .arg(&live)
            .arg("--rate-control")
            .arg(&ctl)
            .arg("-q")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).map_err(io("aggressor stderr file"))?)
            .spawn()
            .map_err(io("cannot start the aggressor (dmalab load)"))?;
        let mut a = Aggressor { child, stderr };
        // Wait until it runs: both pages mapped, live state running.
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = a.child.try_wait() {
                return Err(SessionError::Child(format!(
                    "the aggressor (dmalab load {}) ended before it ran ({st}): {}",
                    args.join(" "),
                    dmalab_core::process::tail_line(&a.stderr, TAIL_LINES)
                )));
            }
            let l = dmalab_core::livestats::Reader::open(&live).ok().flatten();
            let c = RateControl::open(&ctl).ok().flatten();
            if let (Some(l), Some(c)) = (l, c) {
                if l.snapshot()
                    .is_ok_and(|s| s.state == dmalab_core::livestats::State::Running)
                {
                    return Ok((a, LoadActuator::new(c, l)));
                }
            }
            if t0.elapsed() > Duration::from_secs(120) {
                stop_group(&mut a.child);
                return Err(SessionError::Child(format!(
                    "the aggressor did not start within 120 s: {}",
                    dmalab_core::process::tail_line(&a.stderr, TAIL_LINES)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) {
        stop_group(&mut self.child);
    }
}

/// Everything a session needs besides the configuration.
pub struct Setup<'a> {
    /// The dmalab binary (for the victim probe and the aggressor).
    pub exe: &'a Path,
    /// The victim.
    pub victim: &'a VictimSpec,
    /// Progress lines go here (stderr in the binary).
    pub progress: &'a mut dyn FnMut(&str),
}

fn next_figure(v: &mut Victim, interval: Duration) -> Result<Option<Figures>, SessionError> {
    if dmalab_core::signal::stop_requested() {
        return Ok(None);
    }
    match v.next(interval * 5 + Duration::from_secs(30)) {
        Ok(f) => Ok(Some(f)),
        Err(NoFigure::Ended(t)) => Err(SessionError::Child(format!(
            "the victim ended before the session did (give it a longer run time): {t}"
        ))),
        Err(NoFigure::Timeout) => Err(SessionError::Child(
            "the victim reported no interval for 5 control intervals and 30 s".into(),
        )),
    }
}

/// The run time the children (victim, aggressor) are started with: twice
/// the session's intervals and a margin (generous: they are stopped when
/// the session ends). None when it does not fit a `Duration`; `resolve`
/// refuses a plan whose run time the children would not take.
pub fn child_runtime(cfg: &Config) -> Option<Duration> {
    let interval = Duration::from_nanos(cfg.interval_ns);
    let per_point = match &cfg.sweep {
        Some(s) => s
            .points
            .checked_mul(s.repeat)?
            .checked_mul(s.intervals_per_point.checked_add(cfg.warmup_intervals)?)?,
        None => 0,
    };
    let total_intervals = cfg
        .baseline_intervals
        .checked_add(cfg.warmup_intervals.checked_mul(2)?)?
        .checked_add(cfg.slos.len().checked_mul(cfg.intervals)?)?
        .checked_add(per_point)?;
    let n = u32::try_from(total_intervals.checked_mul(2)?.checked_add(20)?).ok()?;
    interval
        .checked_mul(n)?
        .checked_add(Duration::from_secs(120))
}

/// Runs a session.
pub fn run(cfg: &Config, setup: Setup) -> Result<ThrottleResult, SessionError> {
    let interval = Duration::from_nanos(cfg.interval_ns);
    let runtime = child_runtime(cfg).ok_or_else(|| {
        SessionError::Child("the session is too long to start its children".into())
    })?;
    // Scratch files of the children (their pages and stderr), removed at
    // the end.
    let dir = tempfile::Builder::new()
        .prefix("dmalab-throttle-")
        .tempdir()
        .map_err(io("cannot make a scratch directory"))?;
    let mut victim = Victim::start(setup.victim, setup.exe, interval, runtime, dir.path())
        .map_err(io("cannot start the victim"))?;
    let res = session(cfg, &mut victim, setup, runtime, dir.path());
    victim.stop();
    res
}

fn session(
    cfg: &Config,
    victim: &mut Victim,
    setup: Setup,
    runtime: Duration,
    dir: &Path,
) -> Result<ThrottleResult, SessionError> {
    let interval = Duration::from_nanos(cfg.interval_ns);
    let progress = setup.progress;
    let mut result = ThrottleResult {
        victim_unit: cfg.victim_unit.clone(),
        baseline: BTreeMap::new(),
        loops: Vec::new(),
        sweep: Vec::new(),
        frontier: Vec::new(),
        interrupted: false,
    };
    let stats: Vec<Stat> = {
        let mut s: Vec<Stat> = cfg.slos.iter().map(|s| s.stat).collect();
        s.dedup();
        s
    };
    // Baseline, aggressor idle.
    progress(&format!(
        "baseline: {} intervals of {} ms, aggressor idle",
        cfg.baseline_intervals,
        interval.as_millis()
    ));
    let mut base: Vec<Figures> = Vec::new();
    for i in 0..cfg.warmup_intervals + cfg.baseline_intervals {
        let Some(f) = next_figure(victim, interval)? else {
            result.interrupted = true;
            return Ok(result);
        };
        if i >= cfg.warmup_intervals {
            base.push(f);
        }
    }
    for &s in &stats {
        let v = median(base.iter().filter_map(|f| f.get(s)).collect());
        if !v.is_finite() {
            return Err(SessionError::Child(format!(
                "the victim reported no {} during the baseline",
                s.name()
            )));
        }
        result.baseline.insert(s.name().to_string(), v);
    }
    progress(&format!(
        "baseline: {}",
        result
            .baseline
            .iter()
            .map(|(k, v)| format!("{k} {v:.1}{}", cfg.victim_unit))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if let Some(im) = &cfg.io_max {
        // Whatever a killed earlier run left is undone first; this run's old
        // limit is on disk before the first write.
        let state_dir =
            dmalab_core::ledger::LedgerDir::for_user().map_err(|e| SessionError::Io {
                what: "cannot use the host-change ledger".into(),
                cause: std::io::Error::other(e),
            })?;
        for e in state_dir.cleanup_dead().errors {
            progress(&format!("warning: cleanup of an earlier run: {e}"));
        }
        let mut ledger = dmalab_core::ledger::Changes::new(state_dir, "throttle");
        let mut act = IoMax::new(&im.cgroup, (im.major, im.minor), im.key)?;
        act.record_restore(&mut ledger)?;
        let out = closed_loops_and_sweep(cfg, victim, &mut act, &mut result, progress);
        let undone = ledger.undo_all();
        for e in &undone.errors {
            progress(&format!("warning: cleanup: {e}"));
        }
        for e in &undone.left_alone {
            progress(&format!("warning: cleanup: left alone: {e}"));
        }
        out?;
        return Ok(result);
    }
    let (aggr, mut act) = Aggressor::start(
        setup.exe,
        &cfg.aggressor_args,
        cfg.start_rate_bytes_per_s,
        runtime,
        dir,
    )?;
    let out = closed_loops_and_sweep(cfg, victim, &mut act, &mut result, progress);
    aggr.stop();
    out?;
    Ok(result)
}

/// The closed loop of every SLO in turn, then the open-loop sweep and
/// what it says about the loops.
fn closed_loops_and_sweep(
    cfg: &Config,
    victim: &mut Victim,
    act: &mut dyn Actuator,
    result: &mut ThrottleResult,
    progress: &mut dyn FnMut(&str),
) -> Result<(), SessionError> {
    // Figures from before the aggressor ran are not the loop's.
    victim.drain();
    for slo in &cfg.slos {
        closed_loop(cfg, slo, victim, act, result, progress)?;
        if result.interrupted {
            return Ok(());
        }
    }
    let Some(sw) = &cfg.sweep else {
        return Ok(());
    };
    sweep(cfg, sw, victim, act, result, progress)?;
    if result.interrupted {
        return Ok(());
    }
    let (lo, hi) = (cfg.controller.min_rate, cfg.controller.max_rate);
    result.frontier = result
        .loops
        .iter()
        .map(|l| verdict(l, &result.sweep))
        .collect();
    // The sweep's ends are a control measurement for loops that did not
    // visit both ends themselves.
    for l in &mut result.loops {
        if l.dma_attributable_share.is_none() {
            let at = |rate: f64| {
                let v: Vec<f64> = result
                    .sweep
                    .iter()
                    .filter(|p| (p.rate_target_bytes_per_s - rate).abs() <= 1e-6 * rate)
                    .filter_map(|p| p.victim.get(l.slo.stat.name()).copied())
                    .collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            if let (Some(a), Some(b)) = (at(lo), at(hi)) {
                l.dma_attributable_share = dma_share(l.baseline, a, b);
            }
        }
    }
    Ok(())
}

/// One SLO's closed loop: warm-up at the start rate, then
/// `cfg.intervals` steps of the controller, summarised into
/// `result.loops` (not where it is interrupted during the warm-up).
fn closed_loop(
    cfg: &Config,
    slo: &Slo,
    victim: &mut Victim,
    act: &mut dyn Actuator,
    result: &mut ThrottleResult,
    progress: &mut dyn FnMut(&str),
) -> Result<(), SessionError> {
    let interval = Duration::from_nanos(cfg.interval_ns);
    let interval_s = interval.as_secs_f64();
    let baseline = result.baseline[slo.stat.name()];
    let limit = slo.limit(baseline);
    let mut ctl = Controller::new(cfg.controller, cfg.start_rate_bytes_per_s)
        .with_baseline_slack(slo.slack(baseline, limit));
    act.set(ctl.rate())?;
    // The first interval is partly at the old rate.
    for _ in 0..cfg.warmup_intervals {
        if next_figure(victim, interval)?.is_none() {
            result.interrupted = true;
            return Ok(());
        }
    }
    act.delivered();
    progress(&format!(
        "closed loop: SLO {} (bound {limit:.1}{}), {:?} controller, {} intervals",
        slo.text, cfg.victim_unit, cfg.controller.kind, cfg.intervals
    ));
    let mut series = Vec::new();
    for k in 0..cfg.intervals {
        let Some(f) = next_figure(victim, interval)? else {
            result.interrupted = true;
            break;
        };
        let delivered = act.delivered();
        let m = f.get(slo.stat).unwrap_or(f64::NAN);
        let slack = if m.is_finite() {
            slo.slack(m, limit)
        } else {
            -1.0
        };
        let target = ctl.rate();
        series.push(Point {
            t_s: (k + 1) as f64 * interval_s,
            rate_target_bytes_per_s: target,
            delivered_bytes_per_s: delivered,
            victim_metric: m,
            slo_limit: limit,
            slack,
            violated: slo.violated(m, limit),
        });
        let next = ctl.step(slack);
        act.set(next)?;
    }
    let l = summarize_loop(
        slo,
        baseline,
        limit,
        series,
        interval_s,
        cfg.settle_band,
        (cfg.controller.min_rate, cfg.controller.max_rate),
    );
    progress(&format!(
        "closed loop: {} (delivered {}/s), slowdown {:.3}, settle time {}, violations {} of {} ({:.1}%; {} after settling)",
        l.outcome.line(l.settled_rate_bytes_per_s),
        l.settled_delivered_bytes_per_s
            .map_or("-".into(), dmalab_core::units::fmt_bytes),
        l.settled_slowdown,
        l.settle_time_s.map_or("never".into(), |t| format!("{t:.0} s")),
        l.violations,
        l.series.len(),
        100.0 * l.violation_share,
        crate::report::pct(l.violation_share_after_settle)
    ));
    result.loops.push(l);
    Ok(())
}

/// The open-loop sweep: `sw.points` rates from the controller's least to
/// its most, `sw.repeat` passes in alternating directions, into
/// `result.sweep`.
fn sweep(
    cfg: &Config,
    sw: &SweepConfig,
    victim: &mut Victim,
    act: &mut dyn Actuator,
    result: &mut ThrottleResult,
    progress: &mut dyn FnMut(&str),
) -> Result<(), SessionError> {
    let interval = Duration::from_nanos(cfg.interval_ns);
    let (lo, hi) = (cfg.controller.min_rate, cfg.controller.max_rate);
    let rates: Vec<f64> = (0..sw.points)
        .map(|i| {
            if sw.points == 1 {
                hi
            } else {
                lo + (hi - lo) * i as f64 / (sw.points - 1) as f64
            }
        })
        .collect();
    let stats: Vec<Stat> = cfg.slos.iter().map(|s| s.stat).collect();
    for rep in 0..sw.repeat {
        // Alternate the direction so slow drift does not favour one end.
        let order: Vec<f64> = if rep % 2 == 0 {
            rates.clone()
        } else {
            rates.iter().rev().cloned().collect()
        };
        for r in order {
            act.set(r)?;
            // Writing a lower io.max waits for the cgroup's throttled I/O
            // (the kernel freezes the queue): figures that queued up
            // meanwhile are the old rate's.
            victim.drain();
            for _ in 0..cfg.warmup_intervals {
                if next_figure(victim, interval)?.is_none() {
                    result.interrupted = true;
                    return Ok(());
                }
            }
            act.delivered();
            let mut figs = Vec::new();
            let mut intervals = Vec::new();
            let mut del = Vec::new();
            for _ in 0..sw.intervals_per_point {
                let Some(f) = next_figure(victim, interval)? else {
                    result.interrupted = true;
                    return Ok(());
                };
                let delivered = act.delivered();
                if let Some(d) = delivered {
                    del.push(d);
                }
                intervals.push(SweepInterval {
                    delivered_bytes_per_s: delivered,
                    victim: stats
                        .iter()
                        .filter_map(|&s| f.get(s).map(|v| (s.name().to_string(), v)))
                        .collect(),
                    violated: cfg
                        .slos
                        .iter()
                        .map(|slo| {
                            let limit = slo.limit(result.baseline[slo.stat.name()]);
                            let v = f.get(slo.stat).unwrap_or(f64::NAN);
                            (slo.text.clone(), slo.violated(v, limit))
                        })
                        .collect(),
                });
                figs.push(f);
            }
            let mut victim_figs = BTreeMap::new();
            for &s in &stats {
                let v: Vec<f64> = figs.iter().filter_map(|f| f.get(s)).collect();
                if !v.is_empty() {
                    victim_figs
                        .insert(s.name().to_string(), v.iter().sum::<f64>() / v.len() as f64);
                }
            }
            progress(&sweep_line(
                rep,
                r,
                &victim_figs,
                &cfg.victim_unit,
                &cfg.slos,
                &intervals,
            ));
            result.sweep.push(SweepPoint {
                repeat: rep,
                rate_target_bytes_per_s: r,
                delivered_bytes_per_s: (!del.is_empty())
                    .then(|| del.iter().sum::<f64>() / del.len() as f64),
                victim: victim_figs,
                intervals,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actuator_error_in_a_session_prints_its_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = SessionError::from(crate::actuator::ActuatorError::Io {
            path: "io.max".into(),
            cause: io,
        });
        assert_eq!(dmalab_core::error::chain_line(&e), "io.max: gone");
        let e = SessionError::from(dmalab_core::UsageError::new("--slo", "bad"));
        let u =
            std::error::Error::source(&e).and_then(|s| s.downcast_ref::<dmalab_core::UsageError>());
        assert_eq!(u, Some(&dmalab_core::UsageError::new("--slo", "bad")));
    }

    #[test]
    fn settling_finds_the_last_excursion() {
        let r = [10.0, 50.0, 90.0, 70.0, 61.0, 60.0, 59.0, 60.0, 60.5, 60.0];
        let (s, from) = settling(&r, 0.05);
        assert!(s.is_some_and(|s| (s - 60.0).abs() < 1.0), "{s:?}");
        assert_eq!(from, Some(4));
        // A rate that keeps swinging never settles.
        let (s, from) = settling(&[1.0, 100.0, 1.0, 100.0, 1.0, 100.0], 0.05);
        assert_eq!((s, from), (None, None));
    }

    #[test]
    fn a_loop_still_moving_in_its_last_third_never_settled() {
        // Regression (issue 34): the last two of nine rates near the
        // median of the last third counted as settled at interval 7.
        let r = [10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 400.0, 700.0, 700.0];
        assert_eq!(settling(&r, 0.1), (None, None));
        let slo = Slo::parse("--slo", "p99 <= 1.5 x baseline").unwrap();
        let pts: Vec<Point> = r
            .iter()
            .enumerate()
            .map(|(k, &rate)| Point {
                t_s: k as f64,
                rate_target_bytes_per_s: rate,
                delivered_bytes_per_s: Some(rate),
                victim_metric: 120.0,
                slo_limit: 150.0,
                slack: 0.2,
                violated: false,
            })
            .collect();
        let l = summarize_loop(&slo, 100.0, 150.0, pts, 1.0, 0.1, (10.0, 1000.0));
        assert_eq!(l.outcome, Outcome::NeverSettled);
        assert_eq!(l.settle_time_s, None);
        let j = serde_json::to_value(&l).unwrap();
        assert!(j["settled_rate_bytes_per_s"].is_null(), "{j}");
        assert!(j["settled_delivered_bytes_per_s"].is_null(), "{j}");
        assert_eq!(j["outcome"]["kind"], "never_settled");
        assert_eq!(
            l.outcome.line(l.settled_rate_bytes_per_s),
            "never settled (raise --intervals)"
        );
    }

    fn flat(rate: f64, metric: f64, n: usize) -> Vec<Point> {
        (0..n)
            .map(|k| Point {
                t_s: k as f64,
                rate_target_bytes_per_s: rate,
                delivered_bytes_per_s: Some(rate),
                victim_metric: metric,
                slo_limit: 90.0,
                slack: (metric - 90.0) / 90.0,
                violated: metric < 90.0,
            })
            .collect()
    }

    #[test]
    fn a_loop_held_at_the_minimum_past_the_bound_says_no_rate_meets_the_slo() {
        // Bandwidth at 81% of its baseline at the minimum rate (the
        // tmpfs-loop aggressor of the 2026-11-24 benchmark).
        let slo = Slo::parse("--slo", "bw >= 0.9 x baseline").unwrap();
        let mut pts = flat(1000.0, 70.0, 2);
        pts.extend(flat(10.0, 81.0, 10));
        let l = summarize_loop(&slo, 100.0, 90.0, pts, 1.0, 0.1, (10.0, 1000.0));
        assert_eq!(
            l.outcome,
            Outcome::NoRateMeets {
                figure_ratio_at_min: 0.81
            }
        );
        assert_eq!(
            l.outcome.line(l.settled_rate_bytes_per_s),
            "no rate meets the SLO: at the minimum rate the victim is at x0.81; see the control cycle in `dmalab run`"
        );
        // 19 of the 30 points lost at the maximum rate come with the
        // aggressor's presence (at the minimum): the DMA answers for 11.
        let share = l.dma_attributable_share.unwrap();
        assert!((share - 11.0 / 30.0).abs() < 1e-9, "{share}");
    }

    #[test]
    fn a_loop_that_keeps_coming_back_to_the_minimum_past_the_bound_says_no_rate_meets() {
        // Regression (issue 34, host run of 2026-11-27 19:30 UTC): the
        // loop sat at the minimum past the bound, tried 4x and 16x the
        // minimum in its last third and came back; it read "never settled
        // (raise --intervals)".
        let slo = Slo::parse("--slo", "mean <= 1.15 x baseline").unwrap();
        let lat = |rate: f64, metric: f64, n: usize| -> Vec<Point> {
            (0..n)
                .map(|k| Point {
                    t_s: k as f64,
                    rate_target_bytes_per_s: rate,
                    delivered_bytes_per_s: Some(rate),
                    victim_metric: metric,
                    slo_limit: 115.0,
                    slack: (115.0 - metric) / 115.0,
                    violated: metric > 115.0,
                })
                .collect()
        };
        let mut pts = lat(10.0, 120.0, 30);
        pts.extend(lat(40.0, 100.0, 2));
        pts.extend(lat(160.0, 150.0, 2));
        pts.extend(lat(10.0, 120.0, 6));
        let l = summarize_loop(&slo, 100.0, 115.0, pts, 1.0, 0.1, (10.0, 1000.0));
        assert_eq!(l.settled_rate_bytes_per_s, None);
        assert_eq!(
            l.outcome,
            Outcome::NoRateMeets {
                figure_ratio_at_min: 1.2
            }
        );
        // A loop that left the minimum for good is still moving.
        let mut pts = lat(10.0, 120.0, 30);
        pts.extend(lat(40.0, 100.0, 4));
        pts.extend(lat(160.0, 100.0, 6));
        let l = summarize_loop(&slo, 100.0, 115.0, pts, 1.0, 0.1, (10.0, 1000.0));
        assert_eq!(l.outcome, Outcome::NeverSettled);
    }

    #[test]
    fn a_loop_at_the_maximum_inside_the_bound_says_the_slo_holds_there() {
        let slo = Slo::parse("--slo", "bw >= 0.9 x baseline").unwrap();
        let l = summarize_loop(
            &slo,
            100.0,
            90.0,
            flat(1000.0, 99.0, 9),
            1.0,
            0.1,
            (10.0, 1000.0),
        );
        assert_eq!(l.outcome, Outcome::HoldsAtMax);
        assert_eq!(l.dma_attributable_share, None);
        let l = summarize_loop(
            &slo,
            100.0,
            90.0,
            flat(500.0, 95.0, 9),
            1.0,
            0.1,
            (10.0, 1000.0),
        );
        assert_eq!(l.outcome, Outcome::Settled);
        assert_eq!(
            l.outcome.line(l.settled_rate_bytes_per_s),
            "settled at 500 B/s"
        );
    }

    /// A sweep point of the p99 SLO `p99 <= 1.5 x baseline` (baseline 100,
    /// bound 150) with one interval per figure.
    fn sweep_point(repeat: usize, rate: f64, figs: &[f64]) -> SweepPoint {
        let slo = Slo::parse("--slo", "p99 <= 1.5 x baseline").unwrap();
        SweepPoint {
            repeat,
            rate_target_bytes_per_s: rate,
            delivered_bytes_per_s: Some(rate * 0.95),
            victim: [(
                "p99".to_string(),
                figs.iter().sum::<f64>() / figs.len() as f64,
            )]
            .into_iter()
            .collect(),
            intervals: figs
                .iter()
                .map(|&v| SweepInterval {
                    delivered_bytes_per_s: Some(rate * 0.95),
                    victim: [("p99".to_string(), v)].into_iter().collect(),
                    violated: [(slo.text.clone(), slo.violated(v, 150.0))]
                        .into_iter()
                        .collect(),
                })
                .collect(),
        }
    }

    /// A settled p99 loop at 400 B/s (380 delivered) whose intervals are
    /// past the bound where `bad(k)`.
    fn settled_loop(n: usize, bad: impl Fn(usize) -> bool) -> LoopResult {
        let slo = Slo::parse("--slo", "p99 <= 1.5 x baseline").unwrap();
        let pts: Vec<Point> = (0..n)
            .map(|k| Point {
                t_s: k as f64,
                rate_target_bytes_per_s: 400.0,
                delivered_bytes_per_s: Some(380.0),
                victim_metric: if bad(k) { 160.0 } else { 140.0 },
                slo_limit: 150.0,
                slack: 0.06,
                violated: bad(k),
            })
            .collect();
        summarize_loop(&slo, 100.0, 150.0, pts, 1.0, 0.05, (100.0, 1000.0))
    }

    #[test]
    fn the_frontier_picks_the_highest_rate_that_met_the_slo() {
        let l = settled_loop(9, |k| k == 0);
        assert_eq!(l.violations, 1);
        assert_eq!(l.settle_time_s, Some(0.0));
        let sweep = vec![
            sweep_point(0, 100.0, &[110.0, 112.0, 108.0]),
            sweep_point(0, 300.0, &[140.0, 141.0, 139.0]),
            sweep_point(0, 500.0, &[160.0, 158.0, 162.0]),
        ];
        let v = verdict(&l, &sweep);
        assert_eq!(v.best_fixed_rate_bytes_per_s, Some(300.0));
        let share = v.closed_loop_share_of_best.unwrap();
        assert!((share - 380.0 / 285.0).abs() < 1e-9);
        assert_eq!(v.points.len(), 3);
        assert_eq!((v.points[2].intervals, v.points[2].violations), (3, 3));
        assert!(!v.points[2].meets);
        assert_eq!(v.rule, crate::slo::budget_rule());
    }

    /// Issue 34 (the GPU record, docs/bench/throttle-2026-11-27c.md): a
    /// fixed rate whose pass means are under the bound while its intervals
    /// scatter past it is not one that meets the SLO. Before, the frontier
    /// took each pass's mean (here 146.7 and 145 against 150) and named
    /// 500 B/s the best fixed rate.
    #[test]
    fn a_noisy_rate_whose_mean_meets_the_bound_but_whose_intervals_do_not_is_not_the_best() {
        let l = settled_loop(30, |_| false);
        let sweep = vec![
            sweep_point(0, 100.0, &[120.0, 125.0, 118.0]),
            sweep_point(0, 300.0, &[135.0, 142.0, 131.0]),
            sweep_point(0, 500.0, &[138.0, 155.0, 147.0]),
            sweep_point(1, 500.0, &[152.0, 139.0, 144.0]),
            sweep_point(1, 300.0, &[133.0, 140.0, 137.0]),
            sweep_point(1, 100.0, &[119.0, 121.0, 117.0]),
        ];
        for p in &sweep {
            assert!(p.victim["p99"] < 150.0, "every pass mean meets: {p:?}");
        }
        let v = verdict(&l, &sweep);
        let at500 = &v.points[2];
        assert_eq!(at500.rate_target_bytes_per_s, 500.0);
        assert_eq!((at500.intervals, at500.violations), (6, 2));
        assert!(at500.mean_victim_metric < 150.0);
        assert!(!at500.meets);
        assert_eq!(v.best_fixed_rate_bytes_per_s, Some(300.0));
        assert_eq!(v.best_fixed_delivered_bytes_per_s, Some(285.0));
        assert_eq!(v.closed_loop_within_budget, Some(true));
    }

    /// The frontier and the loop use one rule: 20 intervals with one past
    /// the bound meet it, with two do not, whether they are a loop's
    /// intervals after settling or a fixed rate's.
    #[test]
    fn the_frontier_and_the_loop_share_the_violation_budget() {
        for (bad, meets) in [(&[5usize][..], true), (&[5, 12][..], false)] {
            let l = settled_loop(20, |k| bad.contains(&k));
            assert_eq!(l.settle_time_s, Some(0.0));
            assert_eq!(l.violations_after_settle, bad.len());
            assert_eq!(l.within_violation_budget, Some(meets), "{bad:?}");
            let figs: Vec<f64> = (0..20)
                .map(|k| if bad.contains(&k) { 160.0 } else { 140.0 })
                .collect();
            let sweep = vec![
                sweep_point(0, 400.0, &figs[..10]),
                sweep_point(1, 400.0, &figs[10..]),
            ];
            let v = verdict(&l, &sweep);
            assert_eq!(v.points[0].intervals, 20);
            assert_eq!(v.points[0].meets, meets, "{bad:?}");
            assert_eq!(v.closed_loop_within_budget, Some(meets));
            assert_eq!(v.points[0].meets, crate::slo::within_budget(bad.len(), 20));
        }
    }

    #[test]
    fn the_sweep_line_says_n_and_violations() {
        let slo = Slo::parse("--slo", "p99 <= 1.5 x baseline").unwrap();
        let p = sweep_point(1, 3.0 * 1048576.0, &[140.0, 160.0, 150.5]);
        let line = sweep_line(
            1,
            p.rate_target_bytes_per_s,
            &p.victim,
            "ns",
            std::slice::from_ref(&slo),
            &p.intervals,
        );
        assert_eq!(
            line,
            "sweep pass 2: 3.00 MiB/s -> p99 150.2ns (n 3, violations 2)"
        );
        let other = Slo::parse("--slo", "p99 <= 2 x baseline").unwrap();
        let line = sweep_line(0, 1.0, &p.victim, "ns", &[slo, other], &p.intervals);
        assert!(
            line.ends_with("(n 3, violations 2 (p99 <= 1.5 x baseline), 3 (p99 <= 2 x baseline))"),
            "an SLO without a judgement counts the interval: {line}"
        );
    }
}
