//! The sweep plots (each victim's figure normalized to its run alone, and
//! the aggressor's bandwidth and command rate, against the swept value) and
//! each victim's figure against the aggressor's bandwidth.

use super::{metric_words, AggressorFigure, Figures};
use crate::analysis::{self, fmt_value, Cell};
use crate::draw::{bw_fmt, esc, rate_fmt, tick, AxisUnit, Canvas, Scale, PALETTE};
use crate::plan::PLAIN;
use crate::record::{Results, RunRecord};
use crate::stats;
use crate::sweep_axis::SweepAxis;
use dmalab_core::schema::RunStatus;
use dmalab_nvme::cmd::{CQE_BYTES as NVME_COMPLETION_BYTES, SQE_BYTES as NVME_COMMAND_BYTES};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A named, coloured set of (x, y, group) points; the line goes through
/// the mean point of each group. Groups are numbered in plot order (plain
/// 0, then each swept value in the order of its axis, or each load): a
/// missing number is a gap in the data.
struct Series {
    name: String,
    color: String,
    points: Vec<(f64, f64, u64)>,
    /// The 95% interval of a group's mean where it is not the bootstrap of
    /// its points' mean (a ratio to plain resamples plain as well).
    intervals: BTreeMap<u64, (f64, f64)>,
}

impl Series {
    fn new(name: &str, color: &str, points: Vec<(f64, f64, u64)>) -> Self {
        Self {
            name: name.to_string(),
            color: color.to_string(),
            points,
            intervals: BTreeMap::new(),
        }
    }
}

/// What an axis shows, in words, and the unit of its data (`B/s`, `ns`,
/// `s`, `commands/s` or anything else, drawn as is).
type Axis<'a> = (&'a str, &'a str);

/// The x axis of an XY plot: data on a linear axis from zero, or a sweep's
/// values on the sweep's own axis (linear, log2, sizes, categories).
enum XAxis<'a> {
    Data(Axis<'a>),
    Sweep(&'a str, &'a SweepAxis),
}

/// The canvas for `fit` (points that must show: data, interval ends, a
/// reference) on the x axis `x`, with the x and y axis units.
fn canvas(x: &XAxis, yunit: &str, fit: &[(f64, f64)]) -> Option<(Canvas, AxisUnit, AxisUnit)> {
    let (axis, xunit) = match x {
        XAxis::Data((_, u)) => return Canvas::linear_for(fit.iter().copied(), u, yunit),
        XAxis::Sweep(_, SweepAxis::Linear) => {
            return Canvas::linear_for(fit.iter().copied(), "", yunit)
        }
        XAxis::Sweep(_, a) => (*a, ""),
    };
    let pts: Vec<(f64, f64)> = fit
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if pts.is_empty() {
        return None;
    }
    let (xlo, xhi) = pts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.0), h.max(p.0))
        });
    let xs = match axis {
        SweepAxis::Categories(names) => Scale::Linear(-0.5, names.len() as f64 - 0.5),
        // A quarter of a doubling beyond the ends, so no dot sits on the
        // frame.
        _ => Scale::Log2(xlo / 2f64.powf(0.25), xhi * 2f64.powf(0.25)),
    };
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let uy = AxisUnit::for_unit(yunit, ymax);
    let ux = AxisUnit::for_unit(xunit, xhi);
    let cv = Canvas::with_units(720.0, 360.0, xs, uy.linear_to(ymax), &ux, &uy);
    Some((cv, ux, uy))
}

/// An XY plot of points (one per run) with, when `line_through_means`, a
/// line through each group's mean that breaks where a group has no data,
/// and the 95% interval of each mean as an error bar; `reference` draws a
/// dashed horizontal line at that y (plain = 1).
fn xy_plot(
    title: &str,
    x: XAxis,
    (ywhat, yunit): Axis,
    series: &[Series],
    line_through_means: bool,
    reference: Option<f64>,
    aria: &str,
) -> Option<String> {
    let mut fit: Vec<(f64, f64)> = Vec::new();
    for s in series {
        fit.extend(s.points.iter().map(|p| (p.0, p.1)));
        for (g, (_, hi)) in &s.intervals {
            if let Some(p) = s.points.iter().find(|p| p.2 == *g) {
                fit.push((p.0, *hi));
            }
        }
    }
    if fit.is_empty() {
        return None;
    }
    if let Some(r) = reference {
        fit.push((fit[0].0, r));
    }
    let (mut cv, ux, uy) = canvas(&x, yunit, &fit)?;
    let xwhat = match &x {
        XAxis::Data((w, _)) | XAxis::Sweep(w, _) => *w,
    };
    let own_ticks = matches!(&x, XAxis::Sweep(_, a) if *a != &SweepAxis::Linear);
    cv.axes(
        title,
        &ux.title(xwhat),
        &uy.title(ywhat),
        &|v| tick(v),
        &|v| tick(v),
        !own_ticks,
    );
    if let XAxis::Sweep(_, a) = &x {
        let ticks: Vec<f64> = match a {
            SweepAxis::Categories(names) => (0..names.len()).map(|i| i as f64).collect(),
            SweepAxis::Linear => Vec::new(),
            _ => cv.x.ticks(),
        };
        for t in ticks {
            cv.x_tick(t, &a.label(t));
        }
    }
    if let Some(r) = reference {
        let y = cv.py(r);
        let _ = write!(
            cv.body,
            r##"<path d="M{:.1},{y:.1} L{:.1},{y:.1}" class="reference" fill="none" stroke="#555" stroke-dasharray="6 4"><title>plain = {}</title></path>"##,
            cv.fx(0.0),
            cv.fx(1.0),
            tick(r)
        );
    }
    for s in series {
        let col = &s.color;
        if line_through_means {
            let mut by_g: BTreeMap<u64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
            for (x, y, g) in &s.points {
                let e = by_g.entry(*g).or_default();
                e.0.push(*x);
                e.1.push(*y);
            }
            let mut d = String::new();
            let mut prev: Option<u64> = None;
            for (g, (xs, ys)) in &by_g {
                let (x, y) = (stats::mean(xs), stats::mean(ys));
                let (px, py) = (cv.px(x), cv.py(y));
                let join = prev.is_some_and(|q| q + 1 == *g);
                let _ = write!(d, "{}{px:.1},{py:.1} ", if join { "L" } else { "M" });
                prev = Some(*g);
                let ci = match s.intervals.get(g) {
                    Some(ci) => Some(*ci),
                    None if ys.len() >= 2 => Some(stats::bootstrap_mean_ci(ys, 2000, 1)),
                    None => None,
                };
                if let Some((lo, hi)) = ci.filter(|c| c.0.is_finite() && c.1.is_finite()) {
                    let _ = write!(
                        cv.body,
                        r##"<path d="M{px:.1},{:.1} L{px:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}" class="whisker" style="stroke:{col}"/>"##,
                        cv.py(lo),
                        cv.py(hi),
                        px - 4.0,
                        cv.py(lo),
                        px + 4.0,
                        cv.py(lo),
                        px - 4.0,
                        cv.py(hi),
                        px + 4.0,
                        cv.py(hi)
                    );
                }
            }
            let _ = write!(
                cv.body,
                r##"<path d="{}" class="mean-line" data-series="{}" fill="none" stroke="{col}" stroke-width="2"/>"##,
                d.trim_end(),
                esc(&s.name)
            );
        }
        for (px, y, _) in &s.points {
            let xt = match &x {
                XAxis::Data((_, u)) => value_text(*px, u),
                XAxis::Sweep(_, a) => a.label(*px),
            };
            let _ = write!(
                cv.body,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{col}" fill-opacity="0.7"><title>{}: {} / {}</title></circle>"##,
                cv.px(*px),
                cv.py(*y),
                esc(&s.name),
                esc(&xt),
                esc(&value_text(*y, yunit))
            );
        }
    }
    cv.legend(
        &series
            .iter()
            .map(|s| (s.name.clone(), s.color.clone()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(aria))
}

/// A value with its unit, for a tooltip.
fn value_text(v: f64, unit: &str) -> String {
    match unit {
        "B/s" => bw_fmt(v),
        "commands/s" => rate_fmt(v),
        "" => tick(v),
        u => fmt_value(v, u),
    }
}

/// Bytes a command adds to the thesis' combined bandwidth: the NVMe
/// submission entry the device reads and the completion entry it writes.
const COMMAND_BYTES: f64 = (NVME_COMMAND_BYTES + NVME_COMPLETION_BYTES) as f64;

/// The aggressor's bandwidth in a run, as `fig` counts it: its data bytes
/// per second, or the thesis' combined bandwidth `(data bytes + commands *
/// (64 + 16) B) / time`, from the evidence of the victim's window (or, for
/// an aggressor without a live-stats file, its own result).
pub(super) fn aggressor_bw(r: &RunRecord, fig: AggressorFigure) -> Option<f64> {
    match fig {
        AggressorFigure::Data => analysis::aggressor_rates(r).map(|x| x.0),
        AggressorFigure::Combined => {
            let a = r.aggressor.as_ref()?;
            if let Some(e) = &a.evidence {
                return (e.window_ns > 0).then(|| {
                    (e.data_bytes as f64 + e.commands as f64 * COMMAND_BYTES)
                        / (e.window_ns as f64 / 1e9)
                });
            }
            let res = a.result.as_ref()?;
            crate::views::combined_bw_of(res).or_else(|| analysis::aggressor_rates(r).map(|x| x.0))
        }
    }
}

/// The aggressor figure the report draws: the one asked for, or without a
/// choice the data bandwidth, unless the aggressor moved no data in any
/// run but completed commands (a flush or noop load): then the combined
/// one, which counts them. The second value says why, for the captions.
pub(super) fn resolve_figure(
    res: &Results,
    asked: Option<AggressorFigure>,
) -> (AggressorFigure, &'static str) {
    if let Some(f) = asked {
        return (f, "");
    }
    let mut data = false;
    let mut commands = false;
    for r in res.runs.iter().filter(|r| r.status == RunStatus::Completed) {
        if let Some(e) = r.aggressor.as_ref().and_then(|a| a.evidence.as_ref()) {
            data |= e.data_bytes > 0;
            commands |= e.commands > 0;
        }
    }
    if commands && !data {
        (
            AggressorFigure::Combined,
            " The aggressor moved no data, only commands: its combined bandwidth is drawn (choose with --aggressor-figure).",
        )
    } else {
        (AggressorFigure::Data, "")
    }
}

impl AggressorFigure {
    /// The figure in words, for a title.
    fn words(self) -> &'static str {
        match self {
            AggressorFigure::Data => "data bandwidth",
            AggressorFigure::Combined => "combined bandwidth",
        }
    }

    /// How it is counted, for a caption.
    fn how(self) -> &'static str {
        match self {
            AggressorFigure::Data => "Data bytes the aggressor completed while each victim ran, per second (from its live-stats file)",
            AggressorFigure::Combined => "The thesis' combined bandwidth of the aggressor while each victim ran: (data bytes + commands * (64 B command + 16 B completion)) / time (from its live-stats file)",
        }
    }
}

/// The runs of a configuration that completed.
fn completed<'a>(res: &'a Results, c: &'a str) -> impl Iterator<Item = &'a RunRecord> {
    res.runs
        .iter()
        .filter(move |r| r.configuration == c && r.status == RunStatus::Completed)
}

/// Sweep: each victim's figure normalized to plain, and the aggressor's
/// bandwidth and command rate, against the swept value.
pub(super) fn sweep_plots(
    res: &Results,
    cells: &[Cell],
    fig: (AggressorFigure, &str),
    figs: &mut Figures,
) -> String {
    let h = &res.header;
    let Some(s) = &h.sweep else {
        return String::new();
    };
    let axis = SweepAxis::for_report(&s.values);
    let order = axis.ordered(&s.values);
    // Line groups in the axis' order, so that the line runs left to right
    // and a value without data breaks it instead of being bridged.
    let group = |sv: &str| order.iter().position(|v| *v == sv).map(|g| g as u64);
    let flag = s.flag.clone();
    let xwhat = format!("--{flag}");
    let mut section = String::new();
    normalized_plots(res, cells, &axis, &group, &xwhat, figs, &mut section);
    let mut bw = Vec::new();
    let mut cmd = Vec::new();
    for (ci, c) in h.configurations.iter().enumerate() {
        let mut pb = Vec::new();
        let mut pc = Vec::new();
        for r in completed(res, c) {
            let Some(sv) = r.sweep_value.as_deref() else {
                continue;
            };
            let (Some(x), Some(g), Some(bwv)) = (axis.x(sv), group(sv), aggressor_bw(r, fig.0))
            else {
                continue;
            };
            pb.push((x, bwv, g));
            if let Some(c) = analysis::aggressor_rates(r).and_then(|a| a.1) {
                pc.push((x, c, g));
            }
        }
        let col = PALETTE[(ci + 1) % PALETTE.len()];
        if !pb.is_empty() {
            bw.push(Series::new(c, col, pb));
            cmd.push(Series::new(c, col, pc));
        }
    }
    figs.fig(
        &mut section,
        xy_plot(
            &format!("aggressor '{}': {} against --{flag}", s.aggressor, fig.0.words()),
            XAxis::Sweep(&xwhat, &axis),
            (&format!("aggressor {}", fig.0.words()), "B/s"),
            &bw,
            true,
            None,
            "sweep bandwidth",
        ),
        &format!("{}; one dot per run, line through the means, error bars: 95% bootstrap interval of each mean; the line breaks where a value has no data.{}", fig.0.how(), fig.1),
    );
    figs.fig(
        &mut section,
        xy_plot(
            &format!("aggressor '{}': command rate against --{flag}", s.aggressor),
            XAxis::Sweep(&xwhat, &axis),
            ("aggressor command rate", "commands/s"),
            &cmd,
            true,
            None,
            "sweep command rate",
        ),
        "Commands the aggressor completed while each victim ran, per second.",
    );
    if section.is_empty() {
        return section;
    }
    format!("<h2>Sweep over --{}</h2>\n{section}", esc(&flag))
}

/// Each victim's figure under load divided by its mean alone (plain = 1),
/// one line per configuration, against the swept value: the RDMA paper's
/// Fig. 8 (MLC's throughput against the number of QPs, MLC alone = 1.00).
fn normalized_plots(
    res: &Results,
    cells: &[Cell],
    axis: &SweepAxis,
    group: &dyn Fn(&str) -> Option<u64>,
    xwhat: &str,
    figs: &mut Figures,
    section: &mut String,
) {
    let h = &res.header;
    for v in &h.victims {
        let mut series = Vec::new();
        for (ci, c) in h.configurations.iter().enumerate() {
            let in_cell = |x: &&Cell| x.configuration == *c && x.victim == v.name;
            let Some(plain) = cells
                .iter()
                .filter(in_cell)
                .find(|x| x.load == PLAIN && x.sweep_value.is_none())
            else {
                continue;
            };
            let base = &plain.values;
            if base.is_empty() {
                continue;
            }
            let m = stats::mean(base);
            if m == 0.0 || !m.is_finite() {
                continue;
            }
            let col = PALETTE[(ci + 1) % PALETTE.len()];
            let mut sr = Series::new(c, col, Vec::new());
            for cell in cells.iter().filter(in_cell) {
                let Some(sv) = cell.sweep_value.as_deref() else {
                    continue;
                };
                let (Some(x), Some(g)) = (axis.x(sv), group(sv)) else {
                    continue;
                };
                sr.points.extend(cell.values.iter().map(|y| (x, y / m, g)));
                if cell.values.len() >= 2 && base.len() >= 2 {
                    let ci = stats::bootstrap_ratio_ci(
                        &cell.values,
                        base,
                        stats::RESAMPLES,
                        stats::SEED,
                    );
                    sr.intervals.insert(g, ci);
                }
            }
            if !sr.points.is_empty() {
                series.push(sr);
            }
        }
        let words = metric_words(&v.metric);
        let better = match v.better {
            crate::experiment::Better::Lower => "lower is better",
            crate::experiment::Better::Higher => "higher is better",
        };
        figs.fig(
            section,
            xy_plot(
                &format!("{}: {words} normalized to plain against {xwhat} ({better})", v.name),
                XAxis::Sweep(xwhat, axis),
                (&format!("{words} / {words} alone"), ""),
                &series,
                true,
                Some(1.0),
                &format!("normalized: {}", v.name),
            ),
            &format!("{}'s {words} under load divided by its mean without load (plain = 1, dashed), one line per configuration; one dot per run, line through the ratio of the means, error bars: 95% bootstrap interval of that ratio (loaded and plain runs resampled); the line breaks where a value has no data.", v.name),
        );
    }
}

/// Each victim's figure against the bandwidth the aggressor delivered.
pub(super) fn figure_against_bandwidth(
    res: &Results,
    fig: (AggressorFigure, &str),
    figs: &mut Figures,
) -> String {
    let h = &res.header;
    let sweep = h
        .sweep
        .as_ref()
        .map(|s| (s, SweepAxis::for_report(&s.values)));
    let mut section = String::new();
    for v in &h.victims {
        let mut series = Vec::new();
        for (ci, c) in h.configurations.iter().enumerate() {
            let mut p = Vec::new();
            let mut any_evidence = false;
            for r in completed(res, c).filter(|r| r.victim == v.name) {
                let Some(val) = r.value else { continue };
                let x = if r.load == PLAIN {
                    0.0
                } else if let Some(bwv) = aggressor_bw(r, fig.0) {
                    any_evidence = true;
                    bwv
                } else {
                    continue;
                };
                // Line groups: plain 0, then one per swept value in the
                // axis' order, or one per load.
                let g = match (&r.sweep_value, &sweep) {
                    (Some(sv), Some((s, axis))) => {
                        1 + axis
                            .ordered(&s.values)
                            .iter()
                            .position(|x| *x == sv)
                            .unwrap_or(0) as u64
                    }
                    _ => h.loads.iter().position(|l| *l == r.load).unwrap_or(0) as u64,
                };
                p.push((x, val, g));
            }
            if any_evidence {
                series.push(Series::new(c, PALETTE[(ci + 1) % PALETTE.len()], p));
            }
        }
        let xwhat = format!("aggressor {} during the run", fig.0.words());
        figs.fig(
            &mut section,
            xy_plot(
                &format!("{}: figure against the aggressor's bandwidth", v.name),
                XAxis::Data((&xwhat, "B/s")),
                (&metric_words(&v.metric), &v.unit),
                &series,
                h.sweep.is_some(),
                None,
                &format!("latency vs bandwidth: {}", v.name),
            ),
            &format!("{}{}", if h.sweep.is_some() { "Each run's figure against the bandwidth the aggressor delivered while it ran (plain runs at zero); line through the means of each swept value, error bars: 95% bootstrap interval of each mean; the line breaks where a value has no data." } else { "Each run's figure against the bandwidth the aggressor delivered while it ran (plain runs at zero); no line: the loads are different aggressors, not points of one curve." }, fig.1),
        );
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Victim figure against aggressor bandwidth</h2>\n{section}")
}

#[cfg(test)]
mod tests {
    use super::super::{render_with, Options};
    use super::*;
    use serde_json::json;

    /// A sweep results file of one bandwidth victim (higher is better) in
    /// configurations `write` and `read`: plain at 10 GB/s, and under load
    /// at each of `values` (swept in that order) 10 / (1 + i) GB/s for the
    /// i-th value by size; three repetitions. The aggressor moves
    /// `data_bytes` and 1000 commands per second.
    fn sweep_results(values: &[&str], data_bytes: u64) -> Results {
        let header = json!({
            "record": "header", "schema_version": 1, "tool": {"name": "dmalab", "version": "0.1.0"},
            "experiment": "t", "experiment_path": "t.toml", "experiment_hash": "feedfacefeedface",
            "experiment_toml": "", "started_at": "2026-11-22T00:00:00Z", "host": {"hostname": "h", "cpu_model": "cpu",
            "cpu_vendor": "v", "cpus_online": 2, "cpus_allowed": "0-1", "numa_nodes": 1, "kernel": "6.1",
            "mem_total_bytes": 1, "mem_available_bytes": 1, "steal_since_boot_pct": 0.0, "virtualized": true,
            "thp_enabled": "madvise", "clocksource": "kvm-clock"},
            "planned_runs": 0, "victims": [{"name": "seq R", "command": "probe bandwidth", "metric": "/result/bw_bytes", "unit": "B/s", "better": "higher"}],
            "configurations": ["write", "read"], "loads": ["plain", "rdma"],
            "sweep": {"aggressor": "rdma", "flag": "bs", "values": values},
            "noisy_cv_pct": 5.0, "aggressor_cpus": "1", "victim_cpus": "0"
        });
        let axis = SweepAxis::for_report(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>());
        let mut lines = vec![header.to_string()];
        let mut index = 0;
        for c in ["write", "read"] {
            for rep in 1..=3u32 {
                let loads = std::iter::once(None).chain(values.iter().map(|v| Some(*v)));
                for sv in loads {
                    let slow = match sv {
                        None => 1.0,
                        Some(v) => {
                            let strings: Vec<String> =
                                values.iter().map(|v| v.to_string()).collect();
                            let i = axis.ordered(&strings).iter().position(|x| *x == v).unwrap();
                            1.0 + i as f64
                        }
                    };
                    let value = 1e10 / slow * (1.0 + 0.01 * rep as f64);
                    let mut r = json!({"record": "run", "experiment_hash": "feedfacefeedface", "index": index,
                        "configuration": c, "repetition": rep, "victim": "seq R",
                        "load": if sv.is_some() {"rdma"} else {"plain"},
                        "started_at": "2026-11-22T00:00:00Z", "status": "completed", "value": value,
                        "metric": "/result/bw_bytes", "unit": "B/s", "better": "higher", "victim_wall_ns": 1,
                        "victim_argv": [], "victim_cpus": "0"});
                    if let Some(v) = sv {
                        r["sweep_value"] = json!(v);
                        r["aggressor"] = json!({"argv": [], "evidence": {"window_ns": 1_000_000_000u64,
                            "data_bytes": data_bytes, "commands": 1000, "blocks": 0, "bw_bytes": data_bytes as f64,
                            "cmd_per_s": 1000.0, "running_throughout": true, "samples": []}});
                    }
                    lines.push(r.to_string());
                    index += 1;
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        crate::record::read(&p).unwrap()
    }

    fn render(res: &Results, fig: Option<AggressorFigure>) -> String {
        render_with(
            res,
            &Options {
                noisy_cv_pct: 5.0,
                aggressor_figure: fig,
            },
        )
        .html
    }

    /// The SVG element whose aria-label is `aria`.
    fn svg<'a>(html: &'a str, aria: &str) -> &'a str {
        let at = html
            .find(&format!("aria-label=\"{aria}\""))
            .unwrap_or_else(|| panic!("no plot '{aria}'"));
        let start = html[..at].rfind("<svg").unwrap();
        let end = at + html[at..].find("</svg>").unwrap();
        &html[start..end]
    }

    /// The vertices of the mean line of `series` in a plot: (x, y) pixels.
    fn line(svg: &str, series: &str) -> Vec<(f64, f64)> {
        let at = svg
            .find(&format!("class=\"mean-line\" data-series=\"{series}\""))
            .unwrap_or_else(|| panic!("no line {series} in {svg}"));
        let d_at = svg[..at].rfind("d=\"").unwrap() + 3;
        let d = &svg[d_at..d_at + svg[d_at..].find('"').unwrap()];
        d.split_whitespace()
            .map(|p| {
                assert!(p.starts_with('L') || p.starts_with('M'), "{d}");
                let (x, y) = p[1..].split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    /// Issue 32: sweep values with size suffixes dropped every sweep plot
    /// ("4K" did not parse as a number), and there was no plot of the
    /// victim normalized to plain; now sizes sit on a log2 axis in the
    /// order of their values, and each victim gets the paper's Fig. 8.
    #[test]
    fn size_sweeps_draw_the_victim_normalized_to_plain_in_value_order() {
        let res = sweep_results(&["64K", "4K", "1M"], 1 << 30);
        let html = render(&res, None);
        assert!(html.contains("<h2>Sweep over --bs</h2>"), "sweep section");
        let plot = svg(&html, "normalized: seq R");
        // A line per configuration through three means, one per value,
        // left to right in the order of the values (4K, 64K, 1M): the
        // ratios are 1, 1/2, 1/3, so y grows down the page.
        for c in ["write", "read"] {
            let l = line(plot, c);
            assert_eq!(l.len(), 3, "{l:?}");
            assert!(
                l[0].0 < l[1].0 && l[1].0 < l[2].0,
                "x in value order: {l:?}"
            );
            assert!(l[0].1 < l[1].1 && l[1].1 < l[2].1, "falling ratio: {l:?}");
            // log2: 4K -> 64K and 64K -> 1M are both four doublings.
            let (a, b) = (l[1].0 - l[0].0, l[2].0 - l[1].0);
            assert!((a - b).abs() < 0.2, "evenly spaced doublings: {l:?}");
        }
        // The plain reference at 1 and the size ticks.
        assert!(plot.contains("class=\"reference\""), "{plot}");
        for t in [">4K<", ">64K<", ">1M<"] {
            assert!(plot.contains(t), "tick {t}: {plot}");
        }
        // Error bars: one per value and configuration.
        assert_eq!(plot.matches("class=\"whisker\"").count(), 6, "{plot}");
        // The aggressor plots are drawn too.
        svg(&html, "sweep bandwidth");
        svg(&html, "sweep command rate");
    }

    /// Issue 32: the bars, the statistics table and the CSV listed swept
    /// sizes as written (64K, 4K, 1M); they follow the axis now.
    #[test]
    fn cells_and_bar_series_follow_the_values_not_the_file() {
        let res = sweep_results(&["64K", "4K", "1M"], 1 << 30);
        let order: Vec<String> = analysis::cells(&res, 5.0)
            .into_iter()
            .filter(|c| c.configuration == "write")
            .filter_map(|c| c.sweep_value)
            .collect();
        assert_eq!(order, ["4K", "64K", "1M"]);
        let html = render(&res, None);
        let bars = svg(&html, "bars: seq R");
        let at = |l: &str| {
            bars.find(&format!(">{l}</text>"))
                .unwrap_or_else(|| panic!("{l}"))
        };
        assert!(at("rdma@4K") < at("rdma@64K") && at("rdma@64K") < at("rdma@1M"));
    }

    #[test]
    fn normalized_means_are_the_ratio_to_plain() {
        // A linear axis (2 to 12) and the y of the first mean: ratio 1/1
        // sits on the dashed reference line.
        let res = sweep_results(&["2", "12", "6"], 1 << 30);
        let html = render(&res, None);
        let plot = svg(&html, "normalized: seq R");
        let l = line(plot, "write");
        let reference = plot.find("class=\"reference\"").unwrap();
        let d_at = plot[..reference].rfind("d=\"M").unwrap() + 4;
        let y_ref: f64 = plot[d_at..]
            .split([' ', '"'])
            .next()
            .unwrap()
            .split_once(',')
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert!((l[0].1 - y_ref).abs() < 0.2, "{l:?} against {y_ref}");
        // Linear: 2, 6, 12 are spaced 4 : 6.
        let (a, b) = (l[1].0 - l[0].0, l[2].0 - l[1].0);
        assert!((a / b - 4.0 / 6.0).abs() < 0.02, "{l:?}");
    }

    #[test]
    fn names_are_drawn_as_categories_in_file_order() {
        let res = sweep_results(&["single", "random"], 1 << 30);
        let html = render(&res, None);
        let plot = svg(&html, "normalized: seq R");
        let l = line(plot, "write");
        assert_eq!(l.len(), 2);
        assert!(l[0].0 < l[1].0);
        let (s, r) = (
            plot.find(">single<").unwrap(),
            plot.find(">random<").unwrap(),
        );
        assert!(s < r, "ticks in file order");
    }

    /// Issue 32: a flush sweep drew its aggressor's bandwidth as zeros;
    /// the combined figure counts its commands (80 B each).
    #[test]
    fn a_flush_sweep_draws_the_combined_bandwidth() {
        let res = sweep_results(&["1", "2"], 0);
        let (fig, why) = resolve_figure(&res, None);
        assert_eq!(fig, AggressorFigure::Combined);
        assert!(why.contains("--aggressor-figure"), "{why}");
        let r = res.runs.iter().find(|r| r.sweep_value.is_some()).unwrap();
        assert_eq!(aggressor_bw(r, AggressorFigure::Combined), Some(80_000.0));
        assert_eq!(aggressor_bw(r, AggressorFigure::Data), Some(0.0));
        let html = render(&res, None);
        assert!(html.contains("aggressor 'rdma': combined bandwidth against --bs"));
        // Asked for, data it is; with data moved, data by default.
        let html = render(&res, Some(AggressorFigure::Data));
        assert!(html.contains("aggressor 'rdma': data bandwidth against --bs"));
        let moved = sweep_results(&["1", "2"], 4096);
        assert_eq!(resolve_figure(&moved, None).0, AggressorFigure::Data);
        let r = moved.runs.iter().find(|r| r.sweep_value.is_some()).unwrap();
        assert_eq!(
            aggressor_bw(r, AggressorFigure::Combined),
            Some(4096.0 + 80_000.0)
        );
    }
}
