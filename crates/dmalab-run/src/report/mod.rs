//! `dmalab report`: one self-contained HTML file (inline SVG, no scripts,
//! nothing fetched) and CSV, rendered from a results file. One module per
//! section; the drawing itself is [`crate::draw`], shared with the throttle
//! report. Nothing else in the crate calls into the report.

pub mod attribution;
mod bars;
pub mod counters;
pub mod csv;
pub mod document;
mod failed;
mod groups;
mod histograms;
mod stats_table;
mod summary;
mod sweep;

use crate::analysis;
use crate::draw::{esc, PALETTE};
use crate::plan::PLAIN;
use crate::record::Results;
use std::fmt::Write;

/// The page stylesheet, shared with the throttle report.
pub use crate::draw::STYLE;

/// A rendered report.
pub struct Report {
    /// The HTML document.
    pub html: String,
    /// Number of plots (SVG elements of class `plot`) in it.
    pub plots: usize,
}

/// Series labels in plot order: the loads, or in sweep mode plain and
/// `aggressor@value` for each swept value, in the order of the sweep's
/// axis (numbers and sizes by value).
fn load_labels(res: &Results) -> Vec<String> {
    match &res.header.sweep {
        Some(s) => std::iter::once(PLAIN.to_string())
            .chain(
                crate::sweep_axis::SweepAxis::for_report(&s.values)
                    .ordered(&s.values)
                    .into_iter()
                    .map(|v| format!("{}@{v}", s.aggressor)),
            )
            .collect(),
        None => res.header.loads.clone(),
    }
}

/// The series label of a load (and sweep value).
fn label(load: &str, sweep_value: &Option<String>) -> String {
    match sweep_value {
        Some(v) => format!("{load}@{v}"),
        None => load.to_string(),
    }
}

fn color(loads: &[String], load: &str) -> &'static str {
    let i = loads.iter().position(|l| l == load).unwrap_or(loads.len());
    PALETTE[i % PALETTE.len()]
}

/// A victim's figure in words for an axis title, from its JSON pointer:
/// `/result/bw_bytes` -> "bandwidth", `/result/total/all/mean_ns` -> "mean
/// latency", `wall_s` -> "run time". The unit goes in the title beside it.
pub fn metric_words(metric: &str) -> String {
    let leaf = metric.rsplit('/').next().unwrap_or(metric);
    let words = match leaf {
        "wall_s" | "wall_ns" | "elapsed_ns" | "runtime_ns" => "run time",
        "bw_bytes" | "data_bw_bytes" => "bandwidth",
        "mean_ns" => "mean latency",
        "iops" | "cmd_per_s" => "command rate",
        "ops_per_s" => "operations per second",
        other => {
            let stem = other
                .strip_suffix("_ns")
                .or_else(|| other.strip_suffix("_bytes"))
                .or_else(|| other.strip_suffix("_s"))
                .unwrap_or(other);
            return stem.replace('_', " ");
        }
    };
    words.to_string()
}

/// Which bandwidth of the aggressor the sweep plots and the victim's
/// figure against the aggressor's bandwidth are drawn with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggressorFigure {
    /// Data bytes per second.
    Data,
    /// The thesis' combined bandwidth: data bytes plus 64 + 16 bytes of
    /// NVMe command and completion per command, per second (a flush load
    /// moves no data but is not idle).
    Combined,
}

/// How a report is drawn.
#[derive(Clone, Debug)]
pub struct Options {
    /// Noisy-cell threshold: coefficient of variation, percent.
    pub noisy_cv_pct: f64,
    /// The aggressor's figure; `None`: data, or combined when the
    /// aggressor moved no data but commands.
    pub aggressor_figure: Option<AggressorFigure>,
}

/// Renders the report with the default aggressor figure.
pub fn render(res: &Results, noisy_cv_pct: f64) -> Report {
    render_with(
        res,
        &Options {
            noisy_cv_pct,
            aggressor_figure: None,
        },
    )
}

/// Renders the report.
pub fn render_with(res: &Results, opts: &Options) -> Report {
    let noisy_cv_pct = opts.noisy_cv_pct;
    let cells = analysis::cells(res, noisy_cv_pct);
    let fig = sweep::resolve_figure(res, opts.aggressor_figure);
    let h = &res.header;
    let mut figs = Figures::default();
    let mut body = summary::meta(res);
    body.push_str(&summary::ddio_table(res));
    body.push_str(&bars::victim_bars(res, &cells, &mut figs));
    let (attrib, attrib_plots) = attribution::section(&cells);
    body.push_str(&attrib);
    figs.plots += attrib_plots;
    body.push_str(&histograms::latency_histograms(res, &mut figs));
    body.push_str(&sweep::sweep_plots(res, &cells, fig, &mut figs));
    body.push_str(&sweep::figure_against_bandwidth(res, fig, &mut figs));
    body.push_str(&stats_table::stats_table(&cells, noisy_cv_pct));
    body.push_str(&groups::section(res));
    body.push_str(&counters::section(res));
    body.push_str(&failed::failed_runs(res));
    let _ = writeln!(
        body,
        "<h2>Experiment file</h2><pre>{}</pre>",
        esc(&h.experiment_toml)
    );

    let plots = figs.plots;
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><meta name=\"generator\" content=\"dmalab {}\"><title>dmalab report: {}</title><style>{STYLE}</style></head>\n<body data-plots=\"{plots}\">\n{body}</body></html>\n",
        esc(&h.tool.version),
        esc(&h.experiment)
    );
    Report { html, plots }
}

/// Counts the plots as they are placed.
#[derive(Default)]
struct Figures {
    plots: usize,
}

impl Figures {
    /// Appends a plot with its caption to `body`; nothing when there is no
    /// plot.
    fn fig(&mut self, body: &mut String, svg: Option<String>, caption: &str) {
        if let Some(s) = svg {
            self.plots += 1;
            let _ = writeln!(
                body,
                "<figure>{s}<figcaption>{}</figcaption></figure>",
                esc(caption)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::failed::failed_runs;
    use super::summary::ddio_table;
    use super::sweep::sweep_plots;
    use super::*;

    #[test]
    fn figures_count_only_the_plots_placed() {
        let mut f = Figures::default();
        let mut body = String::new();
        f.fig(&mut body, None, "nothing");
        assert!(body.is_empty());
        f.fig(&mut body, Some("<svg/>".into()), "a <b>");
        assert_eq!(f.plots, 1);
        assert_eq!(
            body,
            "<figure><svg/><figcaption>a &lt;b&gt;</figcaption></figure>\n"
        );
    }

    /// A results file of one victim: a plain and a loaded run (with
    /// evidence), and a failed one.
    fn results() -> Results {
        let header = serde_json::json!({
            "record": "header", "schema_version": 1, "tool": {"name": "dmalab", "version": "0.1.0"},
            "experiment": "t", "experiment_path": "t.toml", "experiment_hash": "feedfacefeedface",
            "experiment_toml": "[x]", "started_at": "2026-11-22T00:00:00Z", "host": {"hostname": "h", "cpu_model": "cpu",
            "cpu_vendor": "v", "cpus_online": 2, "cpus_allowed": "0-1", "numa_nodes": 1, "kernel": "6.1",
            "mem_total_bytes": 1, "mem_available_bytes": 1, "steal_since_boot_pct": 0.0, "virtualized": true,
            "thp_enabled": "madvise", "clocksource": "kvm-clock"},
            "planned_runs": 3, "victims": [{"name": "v", "command": "exec", "metric": "wall_s", "unit": "s", "better": "lower"}],
            "configurations": ["default"], "loads": ["plain", "random"],
            "noisy_cv_pct": 5.0, "aggressor_cpus": "1", "victim_cpus": "0"
        });
        let run = |index: u64, load: &str, status: &str, value: Option<f64>| {
            let mut r = serde_json::json!({"record": "run", "experiment_hash": "feedfacefeedface", "index": index,
                "configuration": "default", "repetition": 1, "victim": "v", "load": load,
                "started_at": "2026-11-22T00:00:00Z", "status": status, "value": value, "metric": "wall_s",
                "unit": "s", "better": "lower", "victim_wall_ns": 1, "victim_argv": [], "victim_cpus": "0"});
            if load != PLAIN {
                r["aggressor"] = serde_json::json!({"argv": [], "evidence": {"window_ns": 1_000_000_000u64,
                    "data_bytes": 1u64 << 20, "commands": 256, "blocks": 256, "bw_bytes": 1048576.0,
                    "cmd_per_s": 256.0, "running_throughout": true, "samples": []}});
            }
            if status == "failed" {
                r["failure"] = serde_json::json!({"reason": "victim 'v' failed (exit status: 3)",
                    "exit_status": 3, "stderr_tail": "oops <&>\n"});
            }
            r.to_string()
        };
        let lines = [
            header.to_string(),
            run(0, PLAIN, "completed", Some(1.0)),
            run(1, "random", "completed", Some(1.5)),
            run(2, "random", "failed", None),
        ];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        crate::record::read(&p).unwrap()
    }

    #[test]
    fn sections_appear_with_their_data_only() {
        let res = results();
        let r = render(&res, 5.0);
        assert_eq!(
            r.plots,
            r.html.matches("<figure>").count(),
            "every placed plot is counted"
        );
        assert!(r.html.contains(&format!("data-plots=\"{}\"", r.plots)));
        assert!(r.html.contains("<h2>Victims under load</h2>"));
        assert!(r
            .html
            .contains("<h2>Victim figure against aggressor bandwidth</h2>"));
        assert!(!r.html.contains("<h2>Sweep over"), "no sweep");
        assert!(!r.html.contains("<h2>DDIO per configuration</h2>"));
        assert!(!r.html.contains("<h2>Latency distributions</h2>"));
        let failed = failed_runs(&res);
        assert!(failed.starts_with("<h2>Failed runs</h2>"), "{failed}");
        assert!(failed.contains("oops &lt;&amp;&gt;"), "escaped: {failed}");
        assert!(r.html.contains(&failed));
        assert_eq!(
            sweep_plots(
                &res,
                &analysis::cells(&res, 5.0),
                (AggressorFigure::Data, ""),
                &mut Figures::default()
            ),
            ""
        );
        assert_eq!(ddio_table(&res), "");
        assert!(r
            .html
            .contains("<tr><td>runs</td><td>3 recorded of 3 planned, 1 failed"));
        assert!(r
            .html
            .ends_with("<h2>Experiment file</h2><pre>[x]</pre>\n</body></html>\n"));
    }
}
