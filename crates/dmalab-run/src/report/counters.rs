//! The report's counters section: what `--counters` on a victim (a dmalab
//! probe) or an aggressor (dmalab load) counted over each run, averaged per
//! configuration, victim and load, with runs whose counters were
//! multiplexed (counted only part of the time and scaled) flagged.

use crate::analysis::fmt_value;
use crate::draw::esc;
use crate::record::{Results, RunRecord};
use crate::views::counters::{self, Counters};
use dmalab_core::schema::RunStatus;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Below this running fraction a run's counts are flagged as multiplexed:
/// the value `dmalab_counters::session::MULTIPLEXED_BELOW` uses for its
/// text (the report builds on any OS, so it does not link the Linux-only
/// counter crate; a test in dmalab's CLI tests keeps the two equal).
pub const MULTIPLEXED_BELOW: f64 = 0.99;

#[derive(Default)]
struct Acc {
    unit: String,
    values: Vec<f64>,
    /// How many of `values` were whole counts, never scaled.
    exact: usize,
    /// Exact mode (one event group per repetition): the repetitions that
    /// counted this figure.
    reps: Vec<u32>,
}

impl Acc {
    fn push(&mut self, v: f64, exact: bool, rep: Option<u32>) {
        self.values.push(v);
        self.exact += usize::from(exact);
        self.reps.extend(rep);
    }

    /// `exact`, `scaled` or `k of n exact`, and in exact mode the
    /// repetitions that counted it.
    fn how(&self) -> String {
        let n = self.values.len();
        let mut s = match self.exact {
            e if e == n => "exact".to_string(),
            0 => "scaled".to_string(),
            e => format!("{e} of {n} exact"),
        };
        if !self.reps.is_empty() {
            let reps: Vec<String> = self.reps.iter().map(u32::to_string).collect();
            let _ = write!(s, " (repetitions {})", reps.join(", "));
        }
        s
    }
}

#[derive(Default)]
struct Row {
    figures: BTreeMap<String, Acc>,
    runs: usize,
    multiplexed: usize,
    min_fraction: Option<f64>,
    not_counted: BTreeMap<String, String>,
}

/// Adds one run's counters. In exact mode (`exact_group` present) each
/// repetition counted one event group: its events are shown one by one,
/// with the repetitions that counted them.
fn collect(row: &mut Row, c: &Counters, repetition: u32) {
    row.runs += 1;
    let rep = c.exact_group.then_some(repetition);
    let whole = c.min_running_fraction.is_none_or(|f| f >= 1.0);
    if let Some(f) = c.min_running_fraction {
        if f < MULTIPLEXED_BELOW {
            row.multiplexed += 1;
        }
        row.min_fraction = Some(row.min_fraction.map_or(f, |m: f64| m.min(f)));
    }
    let with_values: Vec<_> = c.metrics.iter().filter(|m| m.value.is_some()).collect();
    for m in &with_values {
        let (Some(n), Some(v)) = (&m.name, m.value) else {
            continue;
        };
        let a = row.figures.entry(n.clone()).or_default();
        a.unit = m.unit.clone().unwrap_or_default();
        a.push(v, rep.is_some() || whole, rep);
    }
    if with_values.is_empty() || rep.is_some() {
        for e in &c.events {
            let (Some(n), Some(v)) = (&e.id, e.value) else {
                continue;
            };
            let a = row.figures.entry(n.clone()).or_default();
            a.unit = e.unit.clone().unwrap_or_default();
            a.push(v, e.exact.unwrap_or(false), rep);
        }
    }
    for x in &c.unavailable {
        if let (Some(id), Some(msg)) = (&x.id, &x.message) {
            row.not_counted.insert(id.clone(), msg.clone());
        }
    }
}

/// The counters of a run's victim and of its aggressor, read through
/// their view.
fn counters_of(r: &RunRecord) -> [(&'static str, Option<Counters>); 2] {
    [
        ("victim", r.victim_result.as_ref().and_then(counters::of)),
        (
            "aggressor",
            r.aggressor
                .as_ref()
                .and_then(|a| a.result.as_ref())
                .and_then(counters::of),
        ),
    ]
}

/// The HTML section, empty when no run counted anything.
pub fn section(res: &Results) -> String {
    let mut rows: BTreeMap<(String, String, String, &'static str), Row> = BTreeMap::new();
    for r in res.runs.iter().filter(|r| r.status == RunStatus::Completed) {
        for (side, c) in counters_of(r) {
            if let Some(c) = c {
                let load = match &r.sweep_value {
                    Some(v) => format!("{}@{v}", r.load),
                    None => r.load.clone(),
                };
                let row = rows
                    .entry((r.configuration.clone(), r.victim.clone(), load, side))
                    .or_default();
                collect(row, &c, r.repetition);
            }
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!(
        r#"<h2>Counters</h2><p class="meta">Counted over each run with <code>counters = "..."</code> on a victim (<code>dmalab probe</code>) or an aggressor (<code>dmalab load</code>); mean over completed runs. A run whose counters ran less than {:.0}% of the time (multiplexed, then scaled) is flagged. With <code>counters_mode = "exact"</code> each repetition counts one event group, and a figure's mean is over the repetitions that counted it.</p><table class="stats"><tr><th>configuration</th><th>victim</th><th>load</th><th>counted on</th><th>figure</th><th>mean</th><th>unit</th><th>runs</th><th>values</th><th>multiplexed</th></tr>"#,
        MULTIPLEXED_BELOW * 100.0
    );
    for ((config, victim, load, side), row) in &rows {
        let flag = if row.multiplexed > 0 {
            format!(
                r#"<span class="noisy">{} of {} runs (lowest {:.1}% counted)</span>"#,
                row.multiplexed,
                row.runs,
                row.min_fraction.unwrap_or(0.0) * 100.0
            )
        } else {
            "no".to_string()
        };
        for (name, a) in &row.figures {
            let mean = a.values.iter().sum::<f64>() / a.values.len().max(1) as f64;
            let _ = writeln!(
                s,
                r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td class="l">{}</td></tr>"#,
                esc(config),
                esc(victim),
                esc(load),
                side,
                esc(name),
                fmt_value(mean, &a.unit),
                esc(&a.unit),
                a.values.len(),
                a.how(),
                flag
            );
        }
        for (id, msg) in &row.not_counted {
            let _ = writeln!(
                s,
                r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td colspan="5" class="l">not counted: {}</td></tr>"#,
                esc(config),
                esc(victim),
                esc(load),
                side,
                esc(id),
                esc(msg)
            );
        }
    }
    s.push_str("</table>\n");
    s
}
