//! Statistics per cell of a results file.

use crate::experiment::Better;
use crate::plan::PLAIN;
use crate::record::{Results, RunRecord};
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
    /// Slowdown against plain (>1 is worse: loaded/plain for lower-is-better
    /// figures, plain/loaded for higher-is-better ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<f64>,
    /// 95% bootstrap interval of the slowdown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_ci: Option<(f64, f64)>,
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
    let svals: Vec<String> = res
        .header
        .sweep
        .as_ref()
        .map(|s| s.values.clone())
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
            let (num, den) = match first.better {
                Better::Lower => (&v, &pv),
                Better::Higher => (&pv, &v),
            };
            let s = stats::mean(num) / stats::mean(den);
            let ci = stats::bootstrap_ratio_ci(num, den, stats::RESAMPLES, stats::SEED);
            (Some(s), Some(ci), stats::mann_whitney(&v, &pv, None))
        } else {
            (None, None, None)
        };
        let ev: Vec<(f64, f64)> = runs
            .iter()
            .filter_map(|r| r.aggressor.as_ref()?.evidence.as_ref())
            .map(|e| (e.bw_bytes, e.cmd_per_s))
            .collect();
        let (bw, cmd) = if ev.is_empty() {
            (None, None)
        } else {
            let n = ev.len() as f64;
            (
                Some(ev.iter().map(|e| e.0).sum::<f64>() / n),
                Some(ev.iter().map(|e| e.1).sum::<f64>() / n),
            )
        };
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
            mwu,
            aggressor_bw_bytes: bw,
            aggressor_cmd_per_s: cmd,
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
        "slowdown [95% CI]".into(),
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
            (Some(s), Some((lo, hi))) => format!(
                "{:+.2}% [{:+.2}, {:+.2}]",
                (s - 1.0) * 100.0,
                (lo - 1.0) * 100.0,
                (hi - 1.0) * 100.0
            ),
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
    let mut widths = [0usize; 11];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
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
