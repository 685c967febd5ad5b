//! `dmalab compare A B`: the differences between two result files.
//!
//! Two experiment results files: per cell, the means side by side, the
//! change and a Mann-Whitney U test of B's runs against A's. Two single
//! result documents (`dmalab load/probe/page --output`): every number in
//! `/result` and every setting in `/config` that differs.

use crate::analysis::{self, fmt_value, Cell};
use crate::error::RunError;
use crate::experiment::Better;
use crate::record::{self, Results};
use crate::stats;
use serde_json::Value;
use std::path::Path;

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "buckets" || k == "hdr_v2_base64" {
                    continue;
                }
                flatten(
                    &format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1")),
                    x,
                    out,
                );
            }
        }
        Value::Array(a) if a.len() <= 64 => {
            for (i, x) in a.iter().enumerate() {
                flatten(&format!("{prefix}/{i}"), x, out);
            }
        }
        Value::Array(_) => {}
        other => out.push((prefix.to_string(), other.clone())),
    }
}

fn compare_docs(a: &Value, b: &Value, an: &str, bn: &str) -> String {
    let mut out = String::new();
    for part in ["config", "result"] {
        let (mut fa, mut fb) = (Vec::new(), Vec::new());
        flatten(&format!("/{part}"), &a[part], &mut fa);
        flatten(&format!("/{part}"), &b[part], &mut fb);
        let mut rows = Vec::new();
        for (k, va) in &fa {
            match fb.iter().find(|(kb, _)| kb == k) {
                Some((_, vb)) if va != vb => {
                    let change = match (va.as_f64(), vb.as_f64()) {
                        (Some(x), Some(y)) if x != 0.0 => format!("{:+.2}%", (y / x - 1.0) * 100.0),
                        _ => String::new(),
                    };
                    rows.push(format!("  {k}: {va} -> {vb} {change}"));
                }
                None => rows.push(format!("  {k}: {va} -> (absent)")),
                _ => {}
            }
        }
        for (k, vb) in &fb {
            if !fa.iter().any(|(ka, _)| ka == k) {
                rows.push(format!("  {k}: (absent) -> {vb}"));
            }
        }
        out.push_str(&format!(
            "{part}: {} difference(s) between {an} and {bn}\n",
            rows.len()
        ));
        for r in rows {
            out.push_str(&r);
            out.push('\n');
        }
    }
    out
}

/// Compares two files; returns the text to print. Two result documents of
/// one command show the figures that matter with their change; `all` (or
/// documents of two commands) shows every differing number and setting.
pub fn compare(a: &Path, b: &Path, all: bool) -> Result<String, RunError> {
    let (an, bn) = (a.display().to_string(), b.display().to_string());
    match (record::read_for_report(a), record::read_for_report(b)) {
        (Ok(mut ra), Ok(mut rb)) => {
            // A run recorded twice is one run (see Results::drop_duplicate_runs).
            let (da, db) = (ra.drop_duplicate_runs(), rb.drop_duplicate_runs());
            let mut out = String::new();
            for (name, d) in [("A", da), ("B", db)] {
                if d > 0 {
                    out.push_str(&format!(
                        "note: {name} repeats {d} run record(s); each run is counted once\n"
                    ));
                }
            }
            out.push_str(&compare_results(&ra, &rb, &an, &bn));
            Ok(out)
        }
        (ea, eb) => {
            let va = result_doc(a, ea)?;
            let vb = result_doc(b, eb)?;
            if va["command"] == vb["command"] && !all {
                let (Ok(da), Ok(db)) = (
                    crate::document::from_value(a, va.clone()),
                    crate::document::from_value(b, vb.clone()),
                ) else {
                    return Ok(compare_docs(&va, &vb, &an, &bn));
                };
                return Ok(format!(
                    "{}(every differing number and setting: dmalab compare --all)\n",
                    crate::document::compare(&da, &db)
                ));
            }
            let mut out = String::new();
            if va["command"] != vb["command"] {
                out.push_str(&format!(
                    "note: different commands: {} vs {}\n",
                    va["command"], vb["command"]
                ));
            }
            out.push_str(&compare_docs(&va, &vb, &an, &bn));
            Ok(out)
        }
    }
}

/// Two results files: the means of each cell side by side, the change,
/// and a Mann-Whitney U test of B's runs against A's.
fn compare_results(ra: &Results, rb: &Results, an: &str, bn: &str) -> String {
    let ca = analysis::cells(ra, ra.header.noisy_cv_pct);
    let cb = analysis::cells(rb, rb.header.noisy_cv_pct);
    let mut out = format!(
        "A = {an} ({} runs, {}), B = {bn} ({} runs, {})\n",
        ra.runs.len(),
        ra.header.started_at,
        rb.runs.len(),
        rb.header.started_at
    );
    if ra.header.experiment_hash != rb.header.experiment_hash {
        out.push_str("note: the two results come from different experiment files\n");
    }
    out.push_str(&aligned(cell_rows(&ca, &cb)));
    out
}

/// One row per cell of either file (header first): cell, mean A, mean B,
/// change, MWU p and a flag.
fn cell_rows(ca: &[Cell], cb: &[Cell]) -> Vec<[String; 6]> {
    let mut rows = vec![[
        "cell".to_string(),
        "mean A".into(),
        "mean B".into(),
        "B vs A".into(),
        "MWU p".into(),
        "".into(),
    ]];
    for x in ca {
        let key = format!(
            "{}/{}/{}{}",
            x.configuration,
            x.victim,
            x.load,
            x.sweep_value
                .as_ref()
                .map(|s| format!("@{s}"))
                .unwrap_or_default()
        );
        let Some(y) = cb.iter().find(|y| {
            (&y.configuration, &y.victim, &y.load, &y.sweep_value)
                == (&x.configuration, &x.victim, &x.load, &x.sweep_value)
        }) else {
            rows.push([
                key,
                x.summary
                    .as_ref()
                    .map(|s| fmt_value(s.mean, &x.unit))
                    .unwrap_or_default(),
                "(absent)".into(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            continue;
        };
        let (ma, mb) = (
            x.summary.as_ref().map(|s| s.mean),
            y.summary.as_ref().map(|s| s.mean),
        );
        // The change of the figure itself, and whether that is worse or
        // better by the figure's direction (a bandwidth that fell is worse).
        let change = match (ma, mb) {
            (Some(a), Some(b)) if a != 0.0 => {
                let s = match x.better {
                    Better::Lower => b / a,
                    Better::Higher => a / b,
                };
                format!(
                    "{:+.2}% {}",
                    (b / a - 1.0) * 100.0,
                    analysis::Change::of_slowdown(s).word()
                )
            }
            _ => String::new(),
        };
        let m = stats::mann_whitney(&y.values, &x.values, None);
        let p = m.map(|m| format!("{:.4}", m.p)).unwrap_or_default();
        let flag = if m.is_some_and(|m| m.p < 0.05) {
            "differs (p < 0.05)"
        } else {
            ""
        };
        rows.push([
            key,
            ma.map(|v| fmt_value(v, &x.unit)).unwrap_or_default(),
            mb.map(|v| fmt_value(v, &y.unit)).unwrap_or_default(),
            change,
            p,
            flag.into(),
        ]);
    }
    for y in cb {
        if !ca.iter().any(|x| {
            (&y.configuration, &y.victim, &y.load, &y.sweep_value)
                == (&x.configuration, &x.victim, &x.load, &x.sweep_value)
        }) {
            rows.push([
                format!("{}/{}/{}", y.configuration, y.victim, y.load),
                "(absent)".into(),
                y.summary
                    .as_ref()
                    .map(|s| fmt_value(s.mean, &y.unit))
                    .unwrap_or_default(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
    }
    rows
}

/// The rows as columns padded to their widest cell, two spaces apart.
fn aligned(rows: Vec<[String; 6]>) -> String {
    let mut out = String::new();
    let mut w = [0usize; 6];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// B's (or A's) result document, when the files are not two results
/// files: `prev` is the file read as a results file; one that is, beside
/// one that is not, is refused.
fn result_doc(p: &Path, prev: Result<Results, RunError>) -> Result<Value, RunError> {
    if prev.is_ok() {
        return Err(RunError::Usage(dmalab_core::UsageError::new(
            "B",
            format!("{} is an experiment results file but the other is not; compare two results files or two result documents", p.display()),
        )));
    }
    let text = std::fs::read_to_string(p).map_err(|e| RunError::io(p, e))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        RunError::Usage(dmalab_core::UsageError::new(
            p.display().to_string(),
            format!("neither a dmalab results file (JSON lines) nor a result document (JSON): {e}"),
        ))
    })?;
    if v.get("schema_version").is_none() || v.get("result").is_none() {
        return Err(RunError::Usage(dmalab_core::UsageError::new(
            p.display().to_string(),
            "this JSON is not a dmalab result document (no schema_version/result); write one with --output FILE --output-format json",
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_whose_runs_repeat_counts_each_run_once() {
        let seed = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fuzz/seeds/results-small.jsonl"),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        std::fs::write(&a, &seed).unwrap();
        std::fs::write(&b, format!("{seed}{seed}")).unwrap();
        let once = record::read(&a).unwrap().runs.len();
        let text = compare(&a, &b, true).unwrap();
        assert!(
            text.starts_with(&format!("note: B repeats {once} run record(s)")),
            "{text}"
        );
        assert!(
            text.contains(&format!("({once} runs, 2026-11-22T00:00:00Z), B =")),
            "{text}"
        );
        assert!(
            text.contains(&format!("B = {} ({once} runs", b.display())),
            "{text}"
        );
    }

    #[test]
    fn documents_differences() {
        let a = serde_json::json!({"config": {"bs_bytes": 4096}, "result": {"bw_bytes": 100.0, "lat": {"mean_ns": 5}}});
        let b = serde_json::json!({"config": {"bs_bytes": 8192}, "result": {"bw_bytes": 150.0, "lat": {"mean_ns": 5}}});
        let t = compare_docs(&a, &b, "a", "b");
        assert!(t.contains("/config/bs_bytes: 4096 -> 8192 +100.00%"), "{t}");
        assert!(
            t.contains("/result/bw_bytes: 100.0 -> 150.0 +50.00%"),
            "{t}"
        );
        assert!(!t.contains("mean_ns"), "{t}");
    }

    #[test]
    fn rows_are_aligned_in_columns_without_trailing_spaces() {
        let r = |a: &str, b: &str| {
            [
                a.to_string(),
                b.to_string(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]
        };
        assert_eq!(
            aligned(vec![r("cell", "mean A"), r("default/v/plain", "1")]),
            "cell             mean A\ndefault/v/plain  1\n"
        );
    }
}
