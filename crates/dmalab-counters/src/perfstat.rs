//! `perf stat`'s everyday output forms over a [`CounterReport`]: the
//! spread of repeated runs (`-r`), interval lines (`-I`) and CSV (`-x`),
//! so a `perf stat` user reads dmalab's numbers the way they read perf's.
//!
//! The CSV fields follow perf-stat(1), "-x SEP": (interval time,) counter
//! value, unit, event name, counter run time, percentage of measurement
//! time counted, (variance with `-r`,) metric value, metric unit.

use crate::recipes::{compute, to_base, MetricDef, MetricValue};
use crate::session::{CounterReport, EventCount, SeriesPoint};
use dmalab_core::UsageError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Shortest `-I`: below it the reads themselves are much of the interval
/// (perf warns under 100 ms and refuses under 1 ms).
pub const MIN_INTERVAL_MS: u64 = 10;

/// Most `-r` runs.
pub const MAX_REPEAT: u32 = 10_000;

/// `dmalab stat`'s perf-stat options, as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatOptions {
    /// `-p`: processes to attach to, as given (`PID[,PID]`).
    pub pids: Option<String>,
    /// `-I`: milliseconds between interval lines.
    pub interval_ms: Option<u64>,
    /// `-x`: CSV separator.
    pub field_separator: Option<String>,
    /// `-j`: JSON lines.
    pub json: bool,
    /// `-r`: runs of the command.
    pub repeat: u32,
}

/// [`StatOptions`] checked: what `dmalab stat` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatPlan {
    /// Processes to attach to instead of running a command.
    pub attach: Option<Vec<i32>>,
    /// Interval lines every so often.
    pub interval: Option<Duration>,
    /// How lines are printed.
    pub form: Form,
    /// Runs of the command (1 when attaching).
    pub repeat: u32,
}

/// How `dmalab stat` prints on stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// perf's text.
    Text,
    /// perf's CSV with this separator (`-x`).
    Csv(String),
    /// One JSON object per line (`-j`).
    JsonLines,
}

impl StatOptions {
    /// Checks the options together; `has_command`: a command was given.
    pub fn validate(&self, has_command: bool) -> Result<StatPlan, UsageError> {
        let attach = self.pids.as_deref().map(parse_pids).transpose()?;
        match (&attach, has_command) {
            (Some(_), true) => {
                return Err(UsageError::new(
                    "--pid",
                    "attaches to running processes; give either -p PID or a command, not both",
                ))
            }
            (None, false) => {
                return Err(UsageError::new(
                    "COMMAND",
                    "missing; give a command to run (dmalab stat sleep 1) or -p PID to attach",
                ))
            }
            _ => {}
        }
        if self.repeat == 0 || self.repeat > MAX_REPEAT {
            return Err(UsageError::new(
                "--repeat",
                format!("{} runs; give 1 to {MAX_REPEAT}", self.repeat),
            ));
        }
        if self.repeat > 1 && attach.is_some() {
            return Err(UsageError::new(
                "--repeat",
                "repeats rerun a command, and processes attached to with -p cannot be rerun; drop -r or -p",
            ));
        }
        let interval = match self.interval_ms {
            Some(ms) if ms < MIN_INTERVAL_MS => {
                return Err(UsageError::new(
                    "--interval",
                    format!("{ms} ms is too short; give at least {MIN_INTERVAL_MS} ms"),
                ))
            }
            Some(ms) => Some(Duration::from_millis(ms)),
            None => None,
        };
        let form = match (&self.field_separator, self.json) {
            (Some(_), true) => {
                return Err(UsageError::new(
                    "--field-separator",
                    "CSV and --json are two forms of the same lines; choose one",
                ))
            }
            (Some(s), false) if s.is_empty() || s.contains('\n') => {
                return Err(UsageError::new(
                    "--field-separator",
                    "must be a non-empty string without a newline (perf uses -x ,)",
                ))
            }
            (Some(s), false) => Form::Csv(s.clone()),
            (None, true) => Form::JsonLines,
            (None, false) => Form::Text,
        };
        Ok(StatPlan {
            attach,
            interval,
            form,
            repeat: self.repeat,
        })
    }
}

/// `PID[,PID]` for `--pid`: positive, listed once each.
pub fn parse_pids(text: &str) -> Result<Vec<i32>, UsageError> {
    let mut pids: Vec<i32> = Vec::new();
    for p in text.split(',') {
        let pid = p
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                UsageError::new(
                    "--pid",
                    format!("'{p}' is not a process id; give PID[,PID] (e.g. -p 1234,1240)"),
                )
            })?;
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

/// The spread of one value over repeated runs, as `perf stat -r` reports
/// it: the mean, and the standard deviation of that mean relative to it
/// (perf's `( +- x% )`, `stddev_stats()` over `avg_stats()` in
/// tools/perf/util/stat.c).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// The value of each run, in run order.
    pub values: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// Sample standard deviation of the values (n - 1 in the divisor);
    /// 0 for one run.
    pub stddev: f64,
    /// Standard deviation of the mean: `stddev / sqrt(n)`.
    pub stddev_of_mean: f64,
    /// `stddev_of_mean` over `mean`, percent (perf's `+-`); 0 when the
    /// mean is 0.
    pub rel_spread_pct: f64,
}

impl Spread {
    /// The spread of `values`; `None` for none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let stddev = if values.len() > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        let stddev_of_mean = stddev / n.sqrt();
        let rel_spread_pct = if mean == 0.0 {
            0.0
        } else {
            100.0 * stddev_of_mean / mean.abs()
        };
        Some(Spread {
            values: values.to_vec(),
            mean,
            stddev,
            stddev_of_mean,
            rel_spread_pct,
        })
    }
}

/// One event over repeated runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventSpread {
    /// Event id.
    pub id: String,
    /// Unit of the values.
    pub unit: String,
    /// Over the runs that counted it.
    pub spread: Spread,
}

/// One metric over repeated runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricSpread {
    /// Metric name.
    pub name: String,
    /// Unit.
    pub unit: String,
    /// Over the runs where it had a value.
    pub spread: Spread,
}

/// What `-r N` adds: every event and metric's spread over the runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RepeatSummary {
    /// Runs made.
    pub runs: usize,
    /// Wall time of each run, seconds.
    pub elapsed_s: Spread,
    /// Each counted event, in the first run's order.
    pub events: Vec<EventSpread>,
    /// Each metric with a value in every run it could be computed in.
    pub metrics: Vec<MetricSpread>,
    /// The recipes' metrics computed over the events' means and the mean
    /// counting time: in exact mode, where a metric's events were counted
    /// in different runs, the only way to have it.
    pub metrics_of_means: Vec<MetricValue>,
}

impl RepeatSummary {
    /// Over the reports of the runs and their wall times (seconds), which
    /// must be as many; `None` when there are no runs. An event counted in
    /// only some runs (exact mode counts one group per run) has the spread
    /// of those; `defs` are computed again over the events' means
    /// ([`RepeatSummary::metrics_of_means`]).
    pub fn of(
        reports: &[CounterReport],
        elapsed_s: &[f64],
        defs: &[MetricDef],
    ) -> Option<RepeatSummary> {
        let first = reports.first()?;
        let mut ids: Vec<(&str, &str)> = Vec::new();
        for r in reports {
            for e in &r.events {
                if !ids.iter().any(|(i, _)| *i == e.id) {
                    ids.push((&e.id, &e.unit));
                }
            }
        }
        let events: Vec<EventSpread> = ids
            .iter()
            .filter_map(|&(id, unit)| {
                let v: Vec<f64> = reports
                    .iter()
                    .filter_map(|r| r.events.iter().find(|x| x.id == id).map(|x| x.value))
                    .collect();
                Some(EventSpread {
                    id: id.to_string(),
                    unit: unit.to_string(),
                    spread: Spread::of(&v)?,
                })
            })
            .collect();
        let metrics = first
            .metrics
            .iter()
            .filter_map(|m| {
                let v: Vec<f64> = reports
                    .iter()
                    .filter_map(|r| r.metrics.iter().find(|x| x.name == m.name)?.value)
                    .collect();
                Some(MetricSpread {
                    name: m.name.clone(),
                    unit: m.unit.clone(),
                    spread: Spread::of(&v)?,
                })
            })
            .collect();
        let counted_s: Vec<f64> = reports.iter().map(|r| r.counted_ns as f64 / 1e9).collect();
        let mean_s = Spread::of(&counted_s).map_or(0.0, |s| s.mean);
        let means: BTreeMap<String, Option<f64>> = events
            .iter()
            .map(|e| (e.id.clone(), Some(to_base(e.spread.mean, &e.unit))))
            .collect();
        Some(RepeatSummary {
            runs: reports.len(),
            elapsed_s: Spread::of(elapsed_s)?,
            events,
            metrics,
            metrics_of_means: compute(defs, &means, mean_s),
        })
    }

    /// The text summary: each mean with perf's `( +- x% )`.
    pub fn render_text(&self) -> String {
        let mut s = format!("means over {} runs:\n", self.runs);
        for e in &self.events {
            let unit = if e.unit == "count" { "" } else { &e.unit };
            s.push_str(&format!(
                "  {:>18} {:<4} {:<28} ( +- {:.2}% )\n",
                fmt_num(e.spread.mean),
                unit,
                e.id,
                e.spread.rel_spread_pct
            ));
        }
        for m in &self.metrics {
            s.push_str(&format!(
                "  {:>18} {:<8} {:<24} ( +- {:.2}% )\n",
                fmt_num(m.spread.mean),
                m.unit,
                m.name,
                m.spread.rel_spread_pct
            ));
        }
        for m in &self.metrics_of_means {
            if let (Some(v), false) = (m.value, self.metrics.iter().any(|x| x.name == m.name)) {
                s.push_str(&format!(
                    "  {:>18} {:<8} {} (of the means)\n",
                    fmt_num(v),
                    m.unit,
                    m.name
                ));
            }
        }
        s.push_str(&format!(
            "  {:.6} +- {:.6} seconds time elapsed ( +- {:.2}% )\n",
            self.elapsed_s.mean, self.elapsed_s.stddev_of_mean, self.elapsed_s.rel_spread_pct
        ));
        s
    }

    /// The CSV lines of the means, the variance field filled in.
    pub fn render_csv(&self, sep: &str, last: &CounterReport) -> String {
        let mut s = String::new();
        for e in &self.events {
            let Some(c) = last.events.iter().find(|x| x.id == e.id) else {
                continue;
            };
            let variance = format!("{:.2}%", e.spread.rel_spread_pct);
            s.push_str(&csv_line(sep, None, e.spread.mean, c, Some(&variance)));
        }
        s
    }
}

/// A CSV field: the separator or a newline inside one would break the
/// row, so they become spaces.
fn field(s: &str, sep: &str) -> String {
    s.replace(sep, " ").replace('\n', " ")
}

fn csv_line(
    sep: &str,
    t_s: Option<f64>,
    value: f64,
    e: &EventCount,
    variance: Option<&str>,
) -> String {
    let mut f: Vec<String> = Vec::new();
    if let Some(t) = t_s {
        f.push(format!("{t:.9}"));
    }
    f.push(fmt_plain(value, &e.unit));
    f.push(if e.unit == "count" {
        String::new()
    } else {
        field(&e.unit, sep)
    });
    f.push(field(&e.id, sep));
    f.push(e.running_ns.to_string());
    f.push(format!("{:.2}", e.running_fraction * 100.0));
    if let Some(v) = variance {
        f.push(v.to_string());
    }
    // Metric value and unit: dmalab's metrics are rows of their own.
    f.push(String::new());
    f.push(String::new());
    let mut line = f.join(sep);
    line.push('\n');
    line
}

/// The report's events as perf's CSV (`-x SEP`), then its metrics as rows
/// with an empty event-count part (value, unit, name).
pub fn render_csv(r: &CounterReport, sep: &str) -> String {
    let mut s = String::new();
    for e in &r.events {
        s.push_str(&csv_line(sep, None, e.value, e, None));
    }
    for m in &r.metrics {
        if let Some(v) = m.value {
            s.push_str(&format!(
                "{}{sep}{}{sep}{}\n",
                fmt_plain(v, ""),
                field(&m.unit, sep),
                field(&m.name, sep)
            ));
        }
    }
    for u in &r.unavailable {
        // perf writes "<not supported>" in the value field.
        s.push_str(&format!(
            "<not counted>{sep}{sep}{}{sep}0{sep}0.00{sep}{sep}\n",
            field(&u.id, sep)
        ));
    }
    s
}

/// One interval (`-I`): a line per event, `time value unit event` as
/// perf prints them, or with `sep` its CSV (time first). `report` gives
/// the events' order and units.
pub fn render_interval(p: &SeriesPoint, report: &CounterReport, sep: Option<&str>) -> String {
    let mut s = String::new();
    for e in &report.events {
        let Some(&v) = p.events.get(&e.id) else {
            continue;
        };
        // Series deltas are in base units: MiB events come back as bytes.
        let unit = base_unit(&e.unit);
        match sep {
            Some(sep) => {
                let row = EventCount {
                    unit: unit.to_string(),
                    ..e.clone()
                };
                s.push_str(&csv_line(sep, Some(p.t_s), v, &row, None));
            }
            None => s.push_str(&format!(
                "{:>15.9} {:>18} {:<5} {}\n",
                p.t_s,
                fmt_num(v),
                if unit == "count" { "" } else { unit },
                e.id
            )),
        }
    }
    for m in &p.metrics {
        if let Some(v) = m.value {
            match sep {
                Some(sep) => s.push_str(&format!(
                    "{:.9}{sep}{}{sep}{}{sep}{}\n",
                    p.t_s,
                    fmt_plain(v, ""),
                    field(&m.unit, sep),
                    field(&m.name, sep)
                )),
                None => s.push_str(&format!(
                    "{:>15.9} {:>18} {:<5} {}\n",
                    p.t_s,
                    fmt_num(v),
                    m.unit,
                    m.name
                )),
            }
        }
    }
    s
}

/// An interval as one JSON line: the [`SeriesPoint`] itself.
pub fn render_interval_json(p: &SeriesPoint) -> String {
    let mut s = serde_json::to_string(p).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}

/// The unit series deltas are in (see [`crate::recipes::to_base`]).
fn base_unit(unit: &str) -> &str {
    match unit {
        "MiB" | "KiB" | "GiB" => "bytes",
        u => u,
    }
}

/// A count as an integer, anything else with its fraction.
fn fmt_plain(v: f64, unit: &str) -> String {
    if (unit == "count" || unit.is_empty()) && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.6}")
    }
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures checked with Python's statistics module:
    /// mean([10, 12, 14]) = 12, stdev = 2, 2/sqrt(3) = 1.1547005,
    /// 100 * 1.1547005 / 12 = 9.6225045 %.
    #[test]
    fn options_are_checked_together() {
        let base = StatOptions {
            repeat: 1,
            ..StatOptions::default()
        };
        let p = base.validate(true).unwrap();
        assert_eq!((p.attach, p.form, p.repeat), (None, Form::Text, 1));
        assert!(base.validate(false).is_err());
        let attach = StatOptions {
            pids: Some("12, 40,12".into()),
            ..base.clone()
        };
        assert_eq!(attach.validate(false).unwrap().attach, Some(vec![12, 40]));
        assert!(attach.validate(true).is_err());
        for bad in ["", "0", "-3", "1,x"] {
            assert!(parse_pids(bad).is_err(), "{bad}");
        }
        let rep = StatOptions {
            repeat: 3,
            ..attach.clone()
        };
        assert!(rep
            .validate(false)
            .unwrap_err()
            .to_string()
            .contains("--repeat"));
        let zero = StatOptions {
            repeat: 0,
            ..base.clone()
        };
        assert!(zero.validate(true).is_err());
        let short = StatOptions {
            interval_ms: Some(MIN_INTERVAL_MS - 1),
            ..base.clone()
        };
        assert!(short.validate(true).is_err());
        let both = StatOptions {
            field_separator: Some(",".into()),
            json: true,
            ..base.clone()
        };
        assert!(both.validate(true).is_err());
        let csv = StatOptions {
            field_separator: Some(";".into()),
            interval_ms: Some(100),
            ..base
        };
        let p = csv.validate(true).unwrap();
        assert_eq!(p.form, Form::Csv(";".into()));
        assert_eq!(p.interval, Some(Duration::from_millis(100)));
    }

    #[test]
    fn spread_is_perfs_stddev_of_the_mean() {
        let s = Spread::of(&[10.0, 12.0, 14.0]).unwrap();
        assert_eq!(s.mean, 12.0);
        assert!((s.stddev - 2.0).abs() < 1e-12);
        assert!((s.stddev_of_mean - 1.154_700_538_379_251_5).abs() < 1e-12);
        assert!((s.rel_spread_pct - 9.622_504_486_493_762).abs() < 1e-9);
        let one = Spread::of(&[5.0]).unwrap();
        assert_eq!((one.stddev, one.rel_spread_pct), (0.0, 0.0));
        assert!(Spread::of(&[]).is_none());
        assert_eq!(Spread::of(&[0.0, 0.0]).unwrap().rel_spread_pct, 0.0);
    }

    fn count(id: &str, value: f64) -> EventCount {
        EventCount {
            id: id.into(),
            spec: id.into(),
            pmus: vec!["software".into()],
            counters: 1,
            value,
            unit: "count".into(),
            raw_count: value as u64,
            running_fraction: 1.0,
            running_ns: 2_000,
            exact: true,
            software: true,
            per_socket: Vec::new(),
        }
    }

    fn report(events: Vec<EventCount>) -> CounterReport {
        CounterReport {
            requested: "page-faults".into(),
            recipes: Vec::new(),
            cpu: Default::default(),
            scope: "task".into(),
            counted_ns: 1_000,
            events,
            metrics: Vec::new(),
            unavailable: Vec::new(),
            min_running_fraction: None,
            series: Vec::new(),
            exact_group: None,
            sockets: Vec::new(),
        }
    }

    #[test]
    fn csv_has_perfs_field_order_and_escapes_the_separator() {
        let r = report(vec![count("page-faults", 123.0), count("a;b", 4.0)]);
        let csv = render_csv(&r, ";");
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "123;;page-faults;2000;100.00;;");
        assert_eq!(lines[1], "4;;a b;2000;100.00;;");
        let reps = [
            report(vec![count("page-faults", 10.0)]),
            report(vec![count("page-faults", 14.0)]),
        ];
        let sum = RepeatSummary::of(&reps, &[1.0, 1.0], &[]).unwrap();
        assert_eq!(sum.runs, 2);
        assert_eq!(sum.events[0].spread.values, [10.0, 14.0]);
        // stdev 2*sqrt(2), of the mean 2, 100*2/12 = 16.67 %.
        assert_eq!(
            sum.render_csv(",", &reps[1]),
            "12,,page-faults,2000,100.00,16.67%,,\n"
        );
        assert!(sum.render_text().contains("( +- 16.67% )"));
    }

    #[test]
    fn interval_lines_take_the_points_deltas() {
        let r = report(vec![count("page-faults", 30.0)]);
        let p = SeriesPoint {
            t_s: 0.5,
            interval_s: 0.5,
            events: [("page-faults".to_string(), 7.0)].into_iter().collect(),
            metrics: Vec::new(),
        };
        assert_eq!(
            render_interval(&p, &r, Some(",")),
            "0.500000000,7,,page-faults,2000,100.00,,\n"
        );
        let text = render_interval(&p, &r, None);
        assert!(text.trim_start().starts_with("0.500000000"), "{text}");
        assert!(text.trim_end().ends_with(" page-faults"), "{text}");
        let j: serde_json::Value = serde_json::from_str(&render_interval_json(&p)).unwrap();
        assert_eq!(j["events"]["page-faults"], 7.0);
    }
}
