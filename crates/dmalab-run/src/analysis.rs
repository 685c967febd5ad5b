//! Statistics per cell of a results file.

use crate::experiment::Better;
use crate::plan::PLAIN;
use crate::record::{ControlOrder, Results, RunRecord};
use crate::stats::{self, Mwu, Summary};
use dmalab_core::schema::RunStatus;
use serde::{Deserialize, Serialize};

/// One cell: a victim under one load in one configuration (and at one
/// sweep value).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Configuration.
    pub configuration: String,
    /// Victim.
    pub victim: String,
    /// `plain` or the aggressor.
    pub load: String,
    /// Sweep value, in sweep mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_value: Option<String>,
    /// Unit of the figures.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
    /// Completed runs' figures, in run order.
    pub values: Vec<f64>,
    /// Failed runs.
    pub failed: usize,
    /// Statistics of `values` (None without values).
    pub summary: Option<Summary>,
    /// Slowdown factor against plain (>1 is worse: loaded/plain for
    /// lower-is-better figures, plain/loaded for higher-is-better ones).
    /// Not a change of the figure: see `change_pct`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
    /// 95% bootstrap interval of the slowdown factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_ci: Option<(f64, f64)>,
    /// The change of the figure itself against plain, percent of plain's
    /// mean (bandwidth 19.92 -> 11.07 GiB/s is -44.4), whatever its
    /// direction; `change` says whether that is worse or better.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_pct: Option<f64>,
    /// 95% bootstrap interval of `change_pct` (the slowdown's, mapped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_pct_ci: Option<(f64, f64)>,
    /// `worse`, `better` or `same`, from the figure's direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
    /// Mann-Whitney U test against plain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mwu: Option<Mwu>,
    /// Coefficient of variation above the threshold.
    pub noisy: bool,
    /// Mean aggressor bandwidth during the victim, bytes/s (evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggressor_bw_bytes: Option<f64>,
    /// Mean aggressor command rate during the victim, per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggressor_cmd_per_s: Option<f64>,
    /// Attribution against the aggressor's control cycle, for a loaded cell
    /// whose aggressor has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    /// Too few runs for the statistics printed beside them, in words
    /// (None when n is enough).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guardrail: Option<String>,
    /// Runs the quiet-host check found busy.
    #[serde(default)]
    pub busy_runs: usize,
    /// Means of the victim-side evidence over completed runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceSummary>,
    /// For a loaded cell whose victim waited for a CPU clearly more than
    /// without load: that, in words (the slowdown is then at least partly
    /// lost CPU time, not memory interference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_cpu: Option<String>,
    /// The configuration's `ddio` value when the host did not make it for
    /// some of the cell's runs (no DDIO control there): the cell then
    /// measured the host's own DDIO state, not the one its name says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddio_not_applied: Option<String>,
}

/// Means over a cell's completed runs of what the victim's process and CPUs
/// went through (`VictimEvidence`); a field is None when no run has it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSummary {
    /// Runs with evidence.
    pub runs: usize,
    /// Involuntary context switches (preemptions) per run.
    pub nonvoluntary_ctxt_switches: Option<f64>,
    /// Share of its run the victim waited for a CPU, percent.
    pub run_delay_pct: Option<f64>,
    /// CPU migrations per run.
    pub migrations: Option<f64>,
    /// Interrupts on the victim's CPUs per run.
    pub interrupts: Option<f64>,
    /// Softirqs on the victim's CPUs per run, all kinds.
    pub softirqs: Option<f64>,
    /// Steal time on the victim's CPUs per run, nanoseconds.
    pub steal_ns: Option<f64>,
    /// The aggressor's CPU time as a share of the victim's window, percent
    /// of one CPU.
    pub aggressor_cpu_pct: Option<f64>,
}

/// The mean of the values present (None when none is).
fn mean_of(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let x: Vec<f64> = v.flatten().filter(|x| x.is_finite()).collect();
    (!x.is_empty()).then(|| stats::mean(&x))
}

/// The evidence of completed runs, averaged.
pub fn evidence_summary(runs: &[&RunRecord]) -> Option<EvidenceSummary> {
    let ev: Vec<&crate::record::VictimEvidence> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Completed)
        .filter_map(|r| r.victim_evidence.as_deref())
        .collect();
    if ev.is_empty() {
        return None;
    }
    let f = |x: Option<u64>| x.map(|v| v as f64);
    Some(EvidenceSummary {
        runs: ev.len(),
        nonvoluntary_ctxt_switches: mean_of(ev.iter().map(|e| f(e.nonvoluntary_ctxt_switches))),
        run_delay_pct: mean_of(ev.iter().map(|e| e.wait_pct())),
        migrations: mean_of(ev.iter().map(|e| f(e.migrations))),
        interrupts: mean_of(ev.iter().map(|e| f(e.interrupts))),
        softirqs: mean_of(
            ev.iter()
                .map(|e| Some(e.softirqs.values().sum::<u64>() as f64)),
        ),
        steal_ns: mean_of(ev.iter().map(|e| f(e.steal_ns))),
        aggressor_cpu_pct: mean_of(ev.iter().map(|e| {
            let a = e.aggressor_cpu_ns? as f64;
            (e.window_ns > 0).then(|| 100.0 * a / e.window_ns as f64)
        })),
    })
}

/// Percentage points of its run a loaded victim must wait for a CPU beyond
/// its plain runs before the report says it lost CPU time.
pub const LOST_CPU_POINTS: f64 = 5.0;

/// Whether the evidence says a loaded victim lost CPU time against plain,
/// in words: its run-queue wait grew by [`LOST_CPU_POINTS`] or more, or
/// steal on its CPUs did by as much of its run.
pub fn lost_cpu(loaded: &EvidenceSummary, plain: &EvidenceSummary, wall_ns: f64) -> Option<String> {
    let mut why = Vec::new();
    if let (Some(l), Some(p)) = (loaded.run_delay_pct, plain.run_delay_pct) {
        if l - p >= LOST_CPU_POINTS {
            let pre = match (
                loaded.nonvoluntary_ctxt_switches,
                plain.nonvoluntary_ctxt_switches,
            ) {
                (Some(a), Some(b)) => format!(", preempted {a:.0} times per run (plain {b:.0})"),
                _ => String::new(),
            };
            why.push(format!(
                "waited for a CPU {l:.1}% of its run (plain {p:.1}%){pre}"
            ));
        }
    }
    if let (Some(l), Some(p)) = (loaded.steal_ns, plain.steal_ns) {
        if wall_ns > 0.0 && 100.0 * (l - p) / wall_ns >= LOST_CPU_POINTS {
            why.push(format!(
                "lost {:.1}% of its run to steal (plain {:.1}%)",
                100.0 * l / wall_ns,
                100.0 * p / wall_ns
            ));
        }
    }
    (!why.is_empty()).then(|| format!("the victim lost CPU time: {}", why.join("; ")))
}

/// How much of a loaded cell's slowdown its DMA caused: the cell against
/// its aggressor's control cycle (the same CPU-side work, paced at the same
/// command rate, moving no data into host memory).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// The control cycle's load name (`random/control`).
    pub control_load: String,
    /// Completed control runs.
    pub control_n: usize,
    /// Mean of the control runs' figures.
    pub control_mean: f64,
    /// The control's slowdown against plain (>1 is worse).
    pub control_slowdown: f64,
    /// Its 95% bootstrap interval.
    pub control_slowdown_ci: (f64, f64),
    /// The load's slowdown against its control (>1: the load hurt more than
    /// its CPU-side work alone): the DMA's effect.
    pub slowdown_vs_control: f64,
    /// Its 95% bootstrap interval.
    pub slowdown_vs_control_ci: (f64, f64),
    /// The control's change of the figure against plain, percent (the
    /// slowdown factor read as a change of the figure itself).
    #[serde(default)]
    pub control_change_pct: f64,
    /// Its 95% bootstrap interval.
    #[serde(default)]
    pub control_change_pct_ci: (f64, f64),
    /// The load's change of the figure against its control, percent.
    #[serde(default)]
    pub change_vs_control_pct: f64,
    /// Its 95% bootstrap interval.
    #[serde(default)]
    pub change_vs_control_pct_ci: (f64, f64),
    /// `(loaded - control) / (loaded - plain)` of the means: the part of
    /// the slowdown against plain that the DMA caused.
    pub dma_share: f64,
    /// Its 95% bootstrap interval (the three samples resampled apart).
    pub dma_share_ci: (f64, f64),
    /// The verdict in plain words.
    pub verdict: String,
    /// Control runs (completed) that ran after their load in the same
    /// repetition, and before it: the order alternates by repetition so
    /// that drift of the host cannot pass for attribution.
    #[serde(default)]
    pub control_order: ControlOrderCount,
}

/// How many control runs ran after and before their loads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlOrderCount {
    /// Load, then control (files from before the order alternated count
    /// here: that was their only order).
    pub after_load: usize,
    /// Control, then load.
    pub before_load: usize,
}

impl ControlOrderCount {
    /// Counts the completed control runs of `runs` by their order.
    pub fn of(runs: &[&RunRecord]) -> Self {
        let mut n = Self::default();
        for r in runs.iter().filter(|r| r.status == RunStatus::Completed) {
            match r.control.as_ref().and_then(|c| c.order) {
                Some(ControlOrder::BeforeLoad) => n.before_load += 1,
                _ => n.after_load += 1,
            }
        }
        n
    }

    /// In words: `2 after the load, 1 before`.
    pub fn describe(&self) -> String {
        format!(
            "{} after the load, {} before",
            self.after_load, self.before_load
        )
    }
}

/// Whether a change of a figure is for the worse or the better, by the
/// figure's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Slower, or less bandwidth.
    Worse,
    /// Faster, or more bandwidth.
    Better,
    /// Equal means.
    Same,
}

impl Change {
    /// From a slowdown factor (>1 is worse).
    pub fn of_slowdown(s: f64) -> Change {
        if s > 1.0 {
            Change::Worse
        } else if s < 1.0 {
            Change::Better
        } else {
            Change::Same
        }
    }

    /// The word printed beside the change.
    pub fn word(self) -> &'static str {
        match self {
            Change::Worse => "worse",
            Change::Better => "better",
            Change::Same => "same",
        }
    }
}

/// The change of the figure itself, percent, for a slowdown factor of
/// `s` (>1 is worse): a lower-is-better figure changed by `s - 1`, a
/// higher-is-better one by `1/s - 1` (a bandwidth whose slowdown factor is
/// 1.8 fell by 44.4%).
pub fn change_pct(s: f64, better: Better) -> f64 {
    let ratio = match better {
        Better::Lower => s,
        Better::Higher => 1.0 / s,
    };
    (ratio - 1.0) * 100.0
}

/// The interval of [`change_pct`] for a slowdown interval: the map is
/// monotone, so the percentile interval maps end to end (reversed for a
/// higher-is-better figure).
pub fn change_pct_ci((lo, hi): (f64, f64), better: Better) -> (f64, f64) {
    let (a, b) = (change_pct(lo, better), change_pct(hi, better));
    (a.min(b), a.max(b))
}

/// A change of the figure as text: `-44.43% worse`.
fn pct(s: f64, better: Better) -> String {
    format!(
        "{:+.2}% {}",
        change_pct(s, better),
        Change::of_slowdown(s).word()
    )
}

/// A change with its interval: `-44.43% [-46.00, -42.00] worse`.
fn pct_ci(s: f64, ci: (f64, f64), better: Better) -> String {
    let (lo, hi) = change_pct_ci(ci, better);
    format!(
        "{:+.2}% [{lo:+.2}, {hi:+.2}] {}",
        change_pct(s, better),
        Change::of_slowdown(s).word()
    )
}

/// The slowdown of `v` against `base` (>1 is worse) and its interval.
fn slowdown_of(v: &[f64], base: &[f64], better: Better) -> (f64, (f64, f64)) {
    let (num, den) = match better {
        Better::Lower => (v, base),
        Better::Higher => (base, v),
    };
    (
        stats::mean(num) / stats::mean(den),
        stats::bootstrap_ratio_ci(num, den, stats::RESAMPLES, stats::SEED),
    )
}

/// The attribution of a loaded sample against its control and plain.
pub fn attribute(
    control_load: &str,
    loaded: &[f64],
    control: &[f64],
    plain: &[f64],
    better: Better,
) -> Option<Attribution> {
    if loaded.is_empty() || control.is_empty() || plain.is_empty() {
        return None;
    }
    let (cs, cs_ci) = slowdown_of(control, plain, better);
    let (vs, vs_ci) = slowdown_of(loaded, control, better);
    let share = stats::dma_share(loaded, control, plain);
    let share_ci = stats::bootstrap_share_ci(loaded, control, plain, stats::RESAMPLES, stats::SEED);
    let n = loaded.len().min(control.len());
    let verdict = if n <= 2 {
        format!(
            "not attributable: n = {n} leaves no interval (control {})",
            pct(cs, better)
        )
    } else if vs_ci.0 > 1.0 {
        format!("DMA effect: {}", pct_ci(vs, vs_ci, better))
    } else if vs_ci.1 < 1.0 {
        format!(
            "the control slowed the victim more than the load ({}): not a faithful control here",
            pct_ci(vs, vs_ci, better)
        )
    } else {
        format!(
            "not distinguishable from the aggressor's CPU cost (control {})",
            pct(cs, better)
        )
    };
    Some(Attribution {
        control_load: control_load.to_string(),
        control_n: control.len(),
        control_mean: stats::mean(control),
        control_slowdown: cs,
        control_slowdown_ci: cs_ci,
        slowdown_vs_control: vs,
        slowdown_vs_control_ci: vs_ci,
        control_change_pct: change_pct(cs, better),
        control_change_pct_ci: change_pct_ci(cs_ci, better),
        change_vs_control_pct: change_pct(vs, better),
        change_vs_control_pct_ci: change_pct_ci(vs_ci, better),
        dma_share: share,
        dma_share_ci: share_ci,
        verdict,
        control_order: ControlOrderCount::default(),
    })
}

/// What a loaded cell's n cannot support, in words: no interval at n <= 2,
/// and no significant exact Mann-Whitney p-value against plain when even
/// fully separated samples of these sizes give p >= 0.05.
pub fn guardrail(n: usize, plain_n: usize) -> Option<String> {
    if n == 0 || plain_n == 0 {
        return None;
    }
    if n.min(plain_n) <= 2 {
        return Some(format!(
            "n = {}: too few runs for an interval",
            n.min(plain_n)
        ));
    }
    let min_p = stats::mwu_min_p(n, plain_n);
    (min_p >= 0.05).then(|| {
        format!("n = {n} vs {plain_n} cannot reach p < 0.05 (smallest exact p {min_p:.3})")
    })
}

/// The aggressor's data bandwidth (bytes/s) and command rate during a
/// run: from its live-stats evidence (the victim's window exactly), or,
/// for an aggressor without a live-stats file that reports `bw_bytes`
/// (`dmalab probe bandwidth`), its whole-run average and no command rate.
pub fn aggressor_rates(r: &RunRecord) -> Option<(f64, Option<f64>)> {
    let a = r.aggressor.as_ref()?;
    if let Some(e) = &a.evidence {
        return Some((e.bw_bytes, Some(e.cmd_per_s)));
    }
    let bw = crate::views::bandwidth_of(a.result.as_ref()?)?;
    Some((bw, None))
}

/// Figures of completed runs.
pub fn values(runs: &[&RunRecord]) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.status == RunStatus::Completed)
        .filter_map(|r| r.value)
        .filter(|v| v.is_finite())
        .collect()
}

/// Cells in plan order with their statistics.
pub fn cells(res: &Results, noisy_cv_pct: f64) -> Vec<Cell> {
    let mut keys: Vec<(String, String, String, Option<String>)> = Vec::new();
    for r in &res.runs {
        let k = r.cell();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // Plan order: configuration, victim, load, sweep value, as the header
    // lists them (unknown names last, in file order).
    let pos = |list: &[String], s: &str| list.iter().position(|x| x == s).unwrap_or(usize::MAX);
    let vnames: Vec<String> = res.header.victims.iter().map(|v| v.name.clone()).collect();
    // Sweep values in the order of their axis: numbers and sizes by value.
    let svals: Vec<String> = res
        .header
        .sweep
        .as_ref()
        .map(|s| {
            let axis = crate::sweep_axis::SweepAxis::for_report(&s.values);
            axis.ordered(&s.values).into_iter().cloned().collect()
        })
        .unwrap_or_default();
    keys.sort_by_key(|k| {
        (
            pos(&res.header.configurations, &k.0),
            pos(&vnames, &k.1),
            pos(&res.header.loads, &k.2),
            k.3.as_ref().map_or(0, |s| pos(&svals, s).saturating_add(1)),
        )
    });
    let mut out = Vec::new();
    for k in keys {
        let runs: Vec<&RunRecord> = res.runs.iter().filter(|r| r.cell() == k).collect();
        let plain: Vec<&RunRecord> = res
            .runs
            .iter()
            .filter(|r| {
                r.configuration == k.0
                    && r.victim == k.1
                    && r.load == PLAIN
                    && r.sweep_value.is_none()
            })
            .collect();
        let v = values(&runs);
        let pv = values(&plain);
        let first = runs[0];
        let summary = (!v.is_empty()).then(|| stats::summarize(&v));
        let loaded = k.2 != PLAIN;
        let (slowdown, slowdown_ci, mwu) = if loaded && !v.is_empty() && !pv.is_empty() {
            let (s, ci) = slowdown_of(&v, &pv, first.better);
            (Some(s), Some(ci), stats::mann_whitney(&v, &pv, None))
        } else {
            (None, None, None)
        };
        let change = slowdown.map(Change::of_slowdown);
        let change_pct_v = slowdown.map(|s| change_pct(s, first.better));
        let change_ci = slowdown_ci.map(|ci| change_pct_ci(ci, first.better));
        let control_load = crate::plan::control_load(&k.2);
        let attribution = if loaded && k.3.is_none() && crate::plan::controlled(&k.2).is_none() {
            let control: Vec<&RunRecord> = res
                .runs
                .iter()
                .filter(|r| {
                    r.configuration == k.0
                        && r.victim == k.1
                        && r.load == control_load
                        && r.sweep_value.is_none()
                })
                .collect();
            attribute(&control_load, &v, &values(&control), &pv, first.better).map(|mut a| {
                a.control_order = ControlOrderCount::of(&control);
                a
            })
        } else {
            None
        };
        let guard = if loaded {
            guardrail(v.len(), pv.len())
        } else {
            None
        };
        let evidence = evidence_summary(&runs);
        let wall: Vec<f64> = runs
            .iter()
            .filter(|r| r.status == RunStatus::Completed)
            .map(|r| r.victim_wall_ns as f64)
            .collect();
        let lost = match (loaded, &evidence, evidence_summary(&plain)) {
            (true, Some(l), Some(p)) if !wall.is_empty() => lost_cpu(l, &p, stats::mean(&wall)),
            _ => None,
        };
        let ev: Vec<(f64, Option<f64>)> = runs.iter().filter_map(|r| aggressor_rates(r)).collect();
        let cmds: Vec<f64> = ev.iter().filter_map(|e| e.1).collect();
        let bw = (!ev.is_empty()).then(|| ev.iter().map(|e| e.0).sum::<f64>() / ev.len() as f64);
        let cmd = (!cmds.is_empty()).then(|| cmds.iter().sum::<f64>() / cmds.len() as f64);
        out.push(Cell {
            noisy: summary
                .as_ref()
                .is_some_and(|s| s.n >= 2 && s.cv_pct > noisy_cv_pct),
            configuration: k.0,
            victim: k.1,
            load: k.2,
            sweep_value: k.3,
            unit: first.unit.clone(),
            better: first.better,
            failed: runs.len() - v.len(),
            values: v,
            summary,
            slowdown,
            slowdown_ci,
            change_pct: change_pct_v,
            change_pct_ci: change_ci,
            change,
            mwu,
            aggressor_bw_bytes: bw,
            aggressor_cmd_per_s: cmd,
            attribution,
            guardrail: guard,
            busy_runs: runs
                .iter()
                .filter(|r| r.quiet.as_ref().is_some_and(|q| q.busy))
                .count(),
            evidence,
            lost_cpu: lost,
            ddio_not_applied: runs
                .iter()
                .filter_map(|r| r.ddio.as_ref())
                .find(|d| !d.applied)
                .map(|d| d.requested.clone()),
        });
    }
    out
}

/// Formats a figure with its unit for the table.
pub fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "ns" => dmalab_core::units::fmt_ns(v),
        "B/s" => format!("{}/s", dmalab_core::units::fmt_bytes(v)),
        "s" => {
            if v < 1.0 {
                format!("{:.1} ms", v * 1e3)
            } else {
                format!("{v:.3} s")
            }
        }
        "" => format!("{v:.4}"),
        u => format!("{v:.4} {u}"),
    }
}

/// The statistics table as text (what `dmalab run` prints at the end).
pub fn text_table(cells: &[Cell]) -> String {
    let mut rows = vec![[
        "configuration".to_string(),
        "victim".into(),
        "load".into(),
        "n".into(),
        "mean".into(),
        "median".into(),
        "sd".into(),
        "95% CI".into(),
        "change vs plain [95% CI]".into(),
        "MWU p".into(),
        "flags".into(),
    ]];
    for c in cells {
        let load = match &c.sweep_value {
            Some(s) => format!("{}@{s}", c.load),
            None => c.load.clone(),
        };
        let (mean, med, sd, ci) = match &c.summary {
            Some(s) => (
                fmt_value(s.mean, &c.unit),
                fmt_value(s.median, &c.unit),
                fmt_value(s.sd, &c.unit),
                format!(
                    "{} .. {}",
                    fmt_value(s.ci_lo, &c.unit),
                    fmt_value(s.ci_hi, &c.unit)
                ),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let slow = match (c.slowdown, c.slowdown_ci) {
            // A collapsed interval (n <= 2) is not printed as if it were one.
            (Some(s), Some(_)) if c.values.len() <= 2 => {
                format!("{} [n too small]", pct(s, c.better))
            }
            (Some(s), Some(ci)) => pct_ci(s, ci, c.better),
            _ => "-".into(),
        };
        let p = c.mwu.map_or("-".into(), |m| format!("{:.3}", m.p));
        let mut flags = Vec::new();
        if c.noisy {
            flags.push("noisy".to_string());
        }
        if c.failed > 0 {
            flags.push(format!("{} failed", c.failed));
        }
        if let Some(g) = &c.guardrail {
            flags.push(g.clone());
        }
        if c.lost_cpu.is_some() {
            flags.push("victim lost CPU time".into());
        }
        if c.busy_runs > 0 {
            flags.push(format!(
                "busy host ({} of {} runs)",
                c.busy_runs,
                c.values.len() + c.failed
            ));
        }
        if let Some(d) = &c.ddio_not_applied {
            flags.push(format!("ddio {d} not applied"));
        }
        rows.push([
            c.configuration.clone(),
            c.victim.clone(),
            load,
            c.values.len().to_string(),
            mean,
            med,
            sd,
            ci,
            slow,
            p,
            flags.join(","),
        ]);
    }
    align(&rows)
}

/// Rows as left-aligned columns two spaces apart, trailing blanks trimmed
/// (the statistics and the attribution tables).
fn align<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The n an attribution's intervals rest on: the fewer of the loaded and
/// the control runs (as its verdict counts them).
pub fn attribution_n(c: &Cell, a: &Attribution) -> usize {
    c.values.len().min(a.control_n)
}

/// The attribution table (what `dmalab run` prints after the statistics
/// when the experiment has control cycles): per loaded cell with a control,
/// the slowdown against plain, the control's, the load's against its
/// control, the DMA-attributable share, and the verdict. None without
/// control cycles.
pub fn attribution_table(cells: &[Cell]) -> Option<String> {
    let mut rows = vec![[
        "configuration".to_string(),
        "victim".into(),
        "load".into(),
        "change vs plain [95% CI]".into(),
        "control vs plain".into(),
        "change vs control [95% CI]".into(),
        "DMA share [95% CI]".into(),
        "verdict".into(),
    ]];
    for c in cells {
        let Some(a) = &c.attribution else { continue };
        let fmt_share = |x: f64| {
            if x.is_finite() {
                format!("{:.2}", x)
            } else {
                "-".into()
            }
        };
        // At n <= 2 a bootstrap interval collapses: say so, as the
        // statistics table does, instead of printing one.
        let few = attribution_n(c, a) <= 2;
        rows.push([
            c.configuration.clone(),
            c.victim.clone(),
            c.load.clone(),
            match (c.slowdown, c.slowdown_ci) {
                (Some(s), Some(_)) if c.values.len() <= 2 => {
                    format!("{} [n too small]", pct(s, c.better))
                }
                (Some(s), Some(ci)) => pct_ci(s, ci, c.better),
                _ => "-".into(),
            },
            pct(a.control_slowdown, c.better),
            if few {
                format!("{} [n too small]", pct(a.slowdown_vs_control, c.better))
            } else {
                pct_ci(a.slowdown_vs_control, a.slowdown_vs_control_ci, c.better)
            },
            if few {
                format!("{} [n too small]", fmt_share(a.dma_share))
            } else {
                format!(
                    "{} [{}, {}]",
                    fmt_share(a.dma_share),
                    fmt_share(a.dma_share_ci.0),
                    fmt_share(a.dma_share_ci.1)
                )
            },
            match &c.lost_cpu {
                Some(l) => format!("{}; {l}", a.verdict),
                None => a.verdict.clone(),
            },
        ]);
    }
    if rows.len() == 1 {
        return None;
    }
    let order = cells.iter().filter_map(|c| c.attribution.as_ref()).fold(
        ControlOrderCount::default(),
        |n, a| ControlOrderCount {
            after_load: n.after_load + a.control_order.after_load,
            before_load: n.before_load + a.control_order.before_load,
        },
    );
    Some(format!(
        "{}control order: {} (alternated by repetition, so drift of the host falls on loads and controls alike)\n",
        align(&rows),
        order.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guardrails_say_what_n_cannot_support() {
        assert!(guardrail(2, 10)
            .unwrap()
            .contains("too few runs for an interval"));
        assert!(guardrail(3, 3).unwrap().contains("cannot reach p < 0.05"));
        assert_eq!(guardrail(4, 4), None, "4 vs 4 can reach p = 0.029");
        assert_eq!(guardrail(0, 4), None);
    }

    #[test]
    fn verdicts_follow_the_interval_against_the_control() {
        let plain = [100.0, 101.0, 99.0, 100.5, 99.5];
        let loaded = [150.0, 151.0, 149.0, 150.5, 149.5];
        // A control like plain: the whole slowdown is DMA.
        let a = attribute("r/control", &loaded, &plain, &plain, Better::Lower).unwrap();
        assert!(
            a.verdict.starts_with("DMA effect: +50.00%"),
            "{}",
            a.verdict
        );
        assert_eq!(a.dma_share, 1.0);
        // A control like the load: none of it is.
        let a = attribute("r/control", &loaded, &loaded, &plain, Better::Lower).unwrap();
        assert!(
            a.verdict.starts_with(
                "not distinguishable from the aggressor's CPU cost (control +50.00% worse)"
            ),
            "{}",
            a.verdict
        );
        assert!(a.dma_share_ci.0 <= 0.0 && 0.0 <= a.dma_share_ci.1);
        // n <= 2: no interval, said so.
        let a = attribute(
            "r/control",
            &loaded[..2],
            &plain[..2],
            &plain,
            Better::Lower,
        )
        .unwrap();
        assert!(
            a.verdict.starts_with("not attributable: n = 2"),
            "{}",
            a.verdict
        );
    }

    /// Issue 33: bandwidth 19.92 -> 11.07 GiB/s is a change of -44.43%,
    /// worse (its slowdown factor is 1.80), and a latency 100 -> 150 ns one
    /// of +50%, worse too; each interval maps end to end.
    #[test]
    fn a_change_is_the_change_of_the_figure_itself() {
        let s = 19.92 / 11.07;
        assert!((change_pct(s, Better::Higher) - -44.427_710_843_373_5).abs() < 1e-9);
        assert_eq!(pct(s, Better::Higher), "-44.43% worse");
        assert!((change_pct(1.5, Better::Lower) - 50.0).abs() < 1e-12);
        assert_eq!(pct(1.5, Better::Lower), "+50.00% worse");
        assert_eq!(pct(0.8, Better::Lower), "-20.00% better");
        assert_eq!(pct(0.8, Better::Higher), "+25.00% better");
        assert_eq!(
            pct_ci(2.0, (1.6, 2.5), Better::Higher),
            "-50.00% [-60.00, -37.50] worse"
        );
        assert_eq!(
            pct_ci(2.0, (1.6, 2.5), Better::Lower),
            "+100.00% [+60.00, +150.00] worse"
        );
    }

    #[test]
    fn attribution_table_prints_no_interval_at_n_2() {
        let plain = [100.0, 101.0];
        let loaded = [150.0, 151.0];
        let control = [120.0, 119.0];
        let cell = |values: &[f64], a: Option<Attribution>| {
            let mut c: Cell = serde_json::from_value(serde_json::json!({
                "configuration": "default", "victim": "v", "load": "r",
                "unit": "ns", "better": "lower", "values": values,
                "failed": 0, "summary": null, "noisy": false,
            }))
            .unwrap();
            let (s, ci) = slowdown_of(values, &plain, Better::Lower);
            c.slowdown = Some(s);
            c.slowdown_ci = Some(ci);
            c.change_pct = Some(change_pct(s, Better::Lower));
            c.change_pct_ci = Some(change_pct_ci(ci, Better::Lower));
            c.change = Some(Change::of_slowdown(s));
            c.attribution = a;
            c
        };
        let a = attribute("r/control", &loaded, &control, &plain, Better::Lower);
        let c2 = cell(&loaded, a);
        let t = attribution_table(std::slice::from_ref(&c2)).unwrap();
        let row = t.lines().nth(1).unwrap();
        assert_eq!(row.matches("[n too small]").count(), 3, "{t}");
        assert!(!row.contains(", "), "no interval printed: {t}");
        // The report's table says the same.
        let (html, _) = crate::report::attribution::section(&[c2]);
        assert_eq!(html.matches("[n too small]").count(), 3, "{html}");
        // With three runs each, the intervals are printed.
        let plain3 = [100.0, 101.0, 99.0];
        let loaded3 = [150.0, 151.0, 149.0];
        let a = attribute(
            "r/control",
            &loaded3,
            &[120.0, 119.0, 121.0],
            &plain3,
            Better::Lower,
        );
        let mut c = cell(&loaded3, a);
        let (s, ci) = slowdown_of(&loaded3, &plain3, Better::Lower);
        (c.slowdown, c.slowdown_ci) = (Some(s), Some(ci));
        let t = attribution_table(&[c]).unwrap();
        assert!(!t.contains("n too small"), "{t}");
    }

    #[test]
    fn lost_cpu_needs_five_more_points_of_run_queue_wait() {
        let plain = EvidenceSummary {
            run_delay_pct: Some(2.0),
            nonvoluntary_ctxt_switches: Some(3.0),
            ..Default::default()
        };
        let mut loaded = EvidenceSummary {
            run_delay_pct: Some(6.9),
            ..plain.clone()
        };
        assert_eq!(lost_cpu(&loaded, &plain, 1e9), None);
        loaded.run_delay_pct = Some(40.0);
        loaded.nonvoluntary_ctxt_switches = Some(90.0);
        let m = lost_cpu(&loaded, &plain, 1e9).unwrap();
        assert!(
            m.contains("waited for a CPU 40.0% of its run (plain 2.0%)"),
            "{m}"
        );
        assert!(m.contains("preempted 90 times per run (plain 3)"), "{m}");
    }
}
