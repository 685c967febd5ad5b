//! Single-command result documents (`dmalab load`, `probe`, `page`,
//! `stat`, `sim compare --output`): telling one from any other file, and
//! the figures that matter for each kind, listed once ([`key_figures`]);
//! the report's table and CSV and `compare` all read them.

use crate::draw;
use crate::views::doc;
use serde_json::Value;
use std::fmt::Write;
use std::path::Path;

/// Why a file cannot be reported or compared as result documents.
#[derive(Debug, thiserror::Error)]
pub enum DocError {
    /// Not a dmalab result document.
    #[error("{path}: not a dmalab result document ({why}); give a file written by a dmalab command's --output or `dmalab run`")]
    NotAResult {
        /// The file.
        path: String,
        /// What is missing.
        why: String,
    },
    /// Documents of different commands.
    #[error("{path}: a `{found}` result cannot be overlaid with `{expected}` results; give results of one command")]
    Mixed {
        /// The file that differs.
        path: String,
        /// The first file's command.
        expected: String,
        /// This file's command.
        found: String,
    },
}

/// A result document and the name it is shown under (its file stem).
pub struct Doc {
    /// Shown in legends and table heads.
    pub name: String,
    /// `load`, `probe latency`, `page`, ...
    pub command: String,
    /// The whole document.
    pub value: Value,
}

/// Parses `text` (the file at `path`) as one result document: a JSON
/// object with `schema_version`, `tool.name`, `command` and `result`.
pub fn parse(path: &Path, text: &str) -> Result<Doc, DocError> {
    let not = |why: &str| DocError::NotAResult {
        path: path.display().to_string(),
        why: why.to_string(),
    };
    let value: Value = serde_json::from_str(text).map_err(|_| not("not one JSON object"))?;
    from_value(path, value)
}

/// Checks a parsed JSON value as in [`parse`].
pub fn from_value(path: &Path, value: Value) -> Result<Doc, DocError> {
    let not = |why: &str| DocError::NotAResult {
        path: path.display().to_string(),
        why: why.to_string(),
    };
    if !value.is_object() {
        return Err(not("not a JSON object"));
    }
    if value["schema_version"].as_u64().is_none() || value["tool"]["name"].as_str().is_none() {
        return Err(not("no schema_version and tool"));
    }
    let command = value["command"]
        .as_str()
        .ok_or_else(|| not("no command"))?
        .to_string();
    if !value["result"].is_object() {
        return Err(not("no result"));
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    Ok(Doc {
        name,
        command,
        value,
    })
}

/// Checks that every document is of the first one's command.
pub fn same_command(docs: &[(String, Doc)]) -> Result<(), DocError> {
    let Some((_, first)) = docs.first() else {
        return Ok(());
    };
    for (path, d) in docs {
        if d.command != first.command {
            return Err(DocError::Mixed {
                path: path.clone(),
                expected: first.command.clone(),
                found: d.command.clone(),
            });
        }
    }
    Ok(())
}

/// A figure that matters: its words, its unit (`B/s`, `ns`, `%`,
/// `commands/s`, ...), whether higher is better, and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// In words: "data bandwidth", "p99 latency".
    pub what: String,
    /// The value's unit.
    pub unit: String,
    /// True when a larger value is better (bandwidths), false for
    /// latencies and times, None where neither is.
    pub higher_is_better: Option<bool>,
    /// The value, None where the document has none.
    pub value: Option<f64>,
}

fn fig(value: Option<f64>, what: &str, unit: &str, hib: Option<bool>) -> Figure {
    Figure {
        what: what.into(),
        unit: unit.into(),
        higher_is_better: hib,
        value,
    }
}

/// Mean and percentiles of a latency summary (fio's `percentile_ns`).
fn latency_figures(lat: Option<&doc::LatencySummary>, what: &str, out: &mut Vec<Figure>) {
    out.push(fig(
        lat.and_then(|l| l.mean_ns),
        &format!("mean {what}"),
        "ns",
        Some(false),
    ));
    for (p, name) in [
        ("50.000000", "p50"),
        ("99.000000", "p99"),
        ("99.900000", "p99.9"),
    ] {
        out.push(fig(
            lat.and_then(|l| l.percentile_ns.get(p).copied().flatten()),
            &format!("{name} {what}"),
            "ns",
            Some(false),
        ));
    }
}

/// The figures that matter in a document of `command`, in table order,
/// read through the command's view of its result ([`crate::views::doc`]).
pub fn key_figures(command: &str, doc: &Value) -> Vec<Figure> {
    let r = &doc["result"];
    let mut f = Vec::new();
    match command {
        "load" => load_figures(doc::read(r), &mut f),
        c if c.starts_with("probe") => {
            let v: doc::Probe = doc::read(r);
            f.push(fig(v.bw_bytes, "bandwidth", "B/s", Some(true)));
            latency_figures(v.per_access.as_ref(), "access latency", &mut f);
            f.push(fig(
                v.timer.as_ref().and_then(|t| t.subtracted_ns),
                "timer bracket subtracted",
                "ns",
                None,
            ));
        }
        "page" => page_figures(doc::read(r), &mut f),
        "stat" => stat_figures(doc::read(r), &mut f),
        "sim compare" => {
            let v: doc::SimCompare = doc::read(r);
            for s in v.schemes {
                let Some(name) = s.scheme else {
                    continue;
                };
                f.push(Figure {
                    what: format!("{name}: simulated time"),
                    unit: "ns".into(),
                    higher_is_better: Some(false),
                    value: s.total_ns,
                });
            }
        }
        // Any other command (no view: its result is not one this library
        // knows): the numbers at the top of its result.
        _ => top_numbers(r, &mut f),
    }
    f.retain(|x| x.value.is_some() || command == "page");
    f
}

/// `dmalab load`'s rates, command latency, CPU use and rate error.
fn load_figures(v: doc::Load, f: &mut Vec<Figure>) {
    let rates = v.rates.as_ref();
    f.push(fig(
        rates.and_then(|x| x.data_bw_bytes),
        "data bandwidth",
        "B/s",
        Some(true),
    ));
    f.push(fig(
        rates.and_then(|x| x.iops),
        "command rate",
        "commands/s",
        Some(true),
    ));
    latency_figures(v.lat_ns.as_ref(), "command latency", f);
    f.push(fig(
        v.cpu.as_ref().and_then(|c| c.cpu_pct),
        "CPU use",
        "% of a CPU",
        Some(false),
    ));
    let check = v.rate_check.as_ref();
    f.push(fig(
        check.and_then(|c| c.mean_error_pct),
        "rate error, mean",
        "%",
        Some(false),
    ));
    f.push(fig(
        check.and_then(|c| c.window_max_error_pct),
        "rate error, worst 1-s window",
        "%",
        Some(false),
    ));
}

/// `dmalab page`'s Table 2, fault-class shares and access latency.
fn page_figures(v: doc::Page, f: &mut Vec<Figure>) {
    let t2 = v.table2.unwrap_or_default();
    for (value, what, unit) in [
        (
            t2.avg_all_ns,
            "Table 2 (1): mean latency of all accesses",
            "ns",
        ),
        (
            t2.major_mode_ns,
            "Table 2 (2): most frequent major-fault latency",
            "ns",
        ),
        (
            t2.avg_major_ns,
            "Table 2 (3): mean major-fault latency",
            "ns",
        ),
        (t2.os_overhead_ns, "Table 2 (4): OS overhead", "ns"),
        (t2.os_overhead_pct, "Table 2 (5): OS overhead share", "%"),
        (
            t2.time_in_over_100us_pct,
            "run time in accesses > 100 µs",
            "%",
        ),
        (t2.time_in_over_1ms_pct, "run time in accesses ≥ 1 ms", "%"),
    ] {
        f.push(fig(value, what, unit, Some(false)));
    }
    let total = v.total.unwrap_or_default();
    for (class, c) in [
        ("hit", &total.hit),
        ("minor", &total.minor),
        ("major", &total.major),
    ] {
        f.push(fig(
            c.as_ref().and_then(|c| c.share_pct),
            &format!("{class} share of accesses"),
            "%",
            None,
        ));
    }
    let all = total.all.as_ref().and_then(|a| a.lat.as_ref());
    latency_figures(all, "access latency", f);
}

/// `dmalab stat`'s run time, counted events and derived metrics.
fn stat_figures(v: doc::Stat, f: &mut Vec<Figure>) {
    f.push(fig(v.wall_ns, "run time", "ns", Some(false)));
    let counters = v.counters.unwrap_or_default();
    for e in counters.events {
        let (Some(id), Some(value)) = (e.id, e.value) else {
            continue;
        };
        f.push(Figure {
            what: id,
            unit: e.unit.unwrap_or_default(),
            higher_is_better: None,
            value: Some(value),
        });
    }
    for m in counters.metrics {
        let (Some(n), Some(value)) = (m.name, m.value) else {
            continue;
        };
        f.push(Figure {
            what: n.replace('_', " "),
            unit: m.unit.unwrap_or_default(),
            higher_is_better: None,
            value: Some(value),
        });
    }
}

/// The numbers at the top of a result `r`, named after their keys.
fn top_numbers(r: &Value, f: &mut Vec<Figure>) {
    for (k, v) in r.as_object().into_iter().flatten() {
        if let Some(x) = v.as_f64() {
            let unit = if k.ends_with("_ns") {
                "ns"
            } else if k.ends_with("bw_bytes") {
                "B/s"
            } else {
                ""
            };
            f.push(Figure {
                what: k.replace('_', " "),
                unit: unit.into(),
                higher_is_better: None,
                value: Some(x),
            });
        }
    }
}

/// A value with its unit for a table: binary units for bandwidth.
pub fn fmt_figure(v: f64, unit: &str) -> String {
    match unit {
        "B/s" => draw::bw_fmt(v),
        "ns" => dmalab_core::units::fmt_ns(v),
        "commands/s" => format!("{v:.0} commands/s"),
        "%" => format!("{v:.2}%"),
        "" => draw::tick(v),
        u => format!("{} {u}", draw::tick(v)),
    }
}

/// The change of B against A in words: `−44.2% (worse)`.
pub fn fmt_change(a: f64, b: f64, higher_is_better: Option<bool>) -> String {
    if a == 0.0 || !a.is_finite() || !b.is_finite() {
        return String::new();
    }
    let c = b / a - 1.0;
    let sign = if c < 0.0 { "\u{2212}" } else { "+" };
    let judged = match higher_is_better {
        Some(h) if c != 0.0 => {
            if (c > 0.0) == h {
                " (better)"
            } else {
                " (worse)"
            }
        }
        _ => "",
    };
    format!("{sign}{:.2}%{judged}", (c * 100.0).abs())
}

/// `compare A B` of two documents of one command: the figures that matter,
/// each with the change of B against A, in words.
pub fn compare(a: &Doc, b: &Doc) -> String {
    let (fa, fb) = (
        key_figures(&a.command, &a.value),
        key_figures(&b.command, &b.value),
    );
    let mut rows = vec![(
        "figure".to_string(),
        a.name.clone(),
        b.name.clone(),
        "change".to_string(),
    )];
    for f in &fa {
        let v = fb.iter().find(|x| x.what == f.what).and_then(|x| x.value);
        let show = |x: Option<f64>| {
            x.map(|v| fmt_figure(v, &f.unit))
                .unwrap_or_else(|| "n/a".into())
        };
        let ch = match (f.value, v) {
            (Some(x), Some(y)) => fmt_change(x, y, f.higher_is_better),
            _ => String::new(),
        };
        rows.push((f.what.clone(), show(f.value), show(v), ch));
    }
    let w: Vec<usize> = (0..3)
        .map(|i| {
            rows.iter()
                .map(|r| [&r.0, &r.1, &r.2][i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!("{}: {} against {}\n", a.command, b.name, a.name);
    for r in rows {
        let pad =
            |s: &str, n: usize| format!("{s}{}", " ".repeat(n.saturating_sub(s.chars().count())));
        let _ = writeln!(
            out,
            "  {}  {}  {}  {}",
            pad(&r.0, w[0]),
            pad(&r.1, w[1]),
            pad(&r.2, w[2]),
            r.3
        )
        .map(|_| ());
    }
    out.lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect()
}
