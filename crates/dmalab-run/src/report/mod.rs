//! `dmalab report`: one self-contained HTML file (inline SVG, no scripts,
//! nothing fetched) and CSV, rendered from a results file.

pub mod attribution;
pub mod counters;
pub mod csv;
pub mod svg;

use crate::analysis::{self, fmt_value, Cell};
use crate::experiment::Better;
use crate::plan::PLAIN;
use crate::record::{Results, RunRecord};
use dmalab_core::schema::RunStatus;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;
use svg::{esc, nice_max, Canvas, Scale, PALETTE};

/// A rendered report.
pub struct Report {
    /// The HTML document.
    pub html: String,
    /// Number of plots (SVG elements of class `plot`) in it.
    pub plots: usize,
}

/// Series labels in plot order: the loads, or in sweep mode plain and
/// `aggressor@value` for each swept value.
fn load_labels(res: &Results) -> Vec<String> {
    match &res.header.sweep {
        Some(s) => std::iter::once(PLAIN.to_string())
            .chain(s.values.iter().map(|v| format!("{}@{v}", s.aggressor)))
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

fn short_value(v: f64, unit: &str) -> String {
    match unit {
        "B/s" => bw_fmt(v),
        "ns" => dmalab_core::units::fmt_ns(v),
        "s" if v != 0.0 && v.abs() < 1.0 => format!("{:.0} ms", v * 1e3),
        "s" => format!("{v:.1} s"),
        _ => {
            if v.abs() >= 1e4 || (v != 0.0 && v.abs() < 1e-2) {
                format!("{v:.2e}")
            } else {
                format!("{}", (v * 1000.0).round() / 1000.0)
            }
        }
    }
}

/// Small deterministic jitter for dots, in -1..1.
fn jitter(i: usize) -> f64 {
    let x = ((i as u64).wrapping_mul(2654435761) % 1000) as f64 / 1000.0;
    x * 2.0 - 1.0
}

/// The thesis' figure: bars of the mean per configuration and load, each
/// run as a dot, the 95% interval as a whisker.
fn bar_plot(res: &Results, victim: &str, cells: &[&Cell]) -> Option<String> {
    let meta = res.header.victims.iter().find(|v| v.name == victim)?;
    let configs: Vec<&String> = res
        .header
        .configurations
        .iter()
        .filter(|c| cells.iter().any(|x| &x.configuration == *c))
        .collect();
    let labels = load_labels(res);
    let loads: Vec<&String> = labels
        .iter()
        .filter(|l| cells.iter().any(|x| label(&x.load, &x.sweep_value) == **l))
        .collect();
    if configs.is_empty() || loads.is_empty() {
        return None;
    }
    let max = cells
        .iter()
        .flat_map(|c| {
            c.values
                .iter()
                .copied()
                .chain(c.summary.as_ref().map(|s| s.ci_hi))
        })
        .fold(0.0f64, f64::max);
    let width = (220.0 + configs.len() as f64 * (loads.len() as f64 * 46.0 + 40.0)).max(640.0);
    let mut cv = Canvas::new(
        width,
        340.0,
        Scale::Linear(0.0, 1.0),
        Scale::Linear(0.0, nice_max(max)),
    );
    let unit = meta.unit.clone();
    let better = if meta.better == Better::Lower {
        "lower is better"
    } else {
        "higher is better"
    };
    cv.axes(
        &format!(
            "{victim}: {} per configuration ({better})",
            if meta.metric == "wall_s" {
                "run time"
            } else {
                meta.metric.rsplit('/').next().unwrap_or("")
            }
        ),
        "configuration",
        &format!(
            "{} [{}]",
            meta.metric.rsplit('/').next().unwrap_or(""),
            unit
        ),
        &|_| String::new(),
        &|v| short_value(v, &unit),
        false,
    );
    let group_w = 1.0 / configs.len() as f64;
    let bar_w = group_w * 0.8 / loads.len() as f64;
    let mut k = 0;
    for (gi, c) in configs.iter().enumerate() {
        let gx = cv.fx(group_w * (gi as f64 + 0.5));
        let _ = write!(
            cv.body,
            r##"<text x="{gx:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            cv.py(0.0) + 16.0,
            esc(c)
        );
        for (li, l) in loads.iter().enumerate() {
            let Some(cell) = cells
                .iter()
                .find(|x| &x.configuration == *c && label(&x.load, &x.sweep_value) == **l)
            else {
                continue;
            };
            let x0 = cv.fx(group_w * gi as f64 + group_w * 0.1 + bar_w * li as f64);
            let bw = bar_w * cv.plot_w();
            let col = color(&labels, l);
            draw_bar(
                &mut cv,
                cell,
                (x0, bw),
                col,
                (c.as_str(), l.as_str()),
                &unit,
                &mut k,
            );
        }
    }
    cv.legend(
        &loads
            .iter()
            .map(|l| (l.to_string(), color(&labels, l).to_string()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(&format!("bars: {victim}")))
}

/// One bar of a bar plot at `x0` and `bw` wide: the mean with its 95%
/// interval, each run as a dot (`k` numbers the dots for their jitter),
/// and the change against plain; `names` are the configuration and load.
fn draw_bar(
    cv: &mut Canvas,
    cell: &Cell,
    (x0, bw): (f64, f64),
    col: &str,
    names: (&str, &str),
    unit: &str,
    k: &mut usize,
) {
    if let Some(s) = &cell.summary {
        let (y0, y1) = (cv.py(0.0), cv.py(s.mean));
        let _ = write!(
            cv.body,
            r##"<rect x="{:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="{col}" fill-opacity="0.55" stroke="{col}"><title>{} / {}: mean {} (n={})</title></rect>"##,
            x0 + 2.0,
            (bw - 4.0).max(1.0),
            (y0 - y1).max(0.0),
            esc(names.0),
            esc(names.1),
            esc(&fmt_value(s.mean, unit)),
            s.n
        );
        let xm = x0 + bw / 2.0;
        let _ = write!(
            cv.body,
            r##"<line x1="{xm:.1}" x2="{xm:.1}" y1="{:.1}" y2="{:.1}" class="whisker"/><line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" class="whisker"/><line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" class="whisker"/>"##,
            cv.py(s.ci_lo),
            cv.py(s.ci_hi),
            xm - 5.0,
            xm + 5.0,
            cv.py(s.ci_lo),
            cv.py(s.ci_lo),
            xm - 5.0,
            xm + 5.0,
            cv.py(s.ci_hi),
            cv.py(s.ci_hi)
        );
    }
    for v in &cell.values {
        *k += 1;
        let x = x0 + bw / 2.0 + jitter(*k) * bw * 0.25;
        let _ = write!(
            cv.body,
            r##"<circle cx="{x:.1}" cy="{:.1}" r="3" class="dot"><title>{}</title></circle>"##,
            cv.py(*v),
            esc(&fmt_value(*v, unit))
        );
    }
    if let Some(s) = cell.change_pct {
        let _ = write!(
            cv.body,
            r##"<text x="{:.1}" y="{:.1}" class="small" text-anchor="middle">{:+.1}%</text>"##,
            x0 + bw / 2.0,
            cv.py(0.0) - 4.0,
            s
        );
    }
}

/// The first latency summary (an object with `buckets` of `lo_ns`/`hi_ns`/
/// `count`) in a result, nearest the top.
pub fn find_latency(v: &Value) -> Option<&Value> {
    let mut queue = vec![v];
    while !queue.is_empty() {
        let mut next = Vec::new();
        for x in queue {
            match x {
                Value::Object(m) => {
                    if let Some(Value::Array(b)) = m.get("buckets") {
                        if b.first()
                            .is_some_and(|e| e.get("lo_ns").is_some() && e.get("count").is_some())
                        {
                            return Some(x);
                        }
                    }
                    next.extend(m.values());
                }
                Value::Array(a) => next.extend(a.iter()),
                _ => {}
            }
        }
        queue = next;
    }
    None
}

/// The latency summary that goes with a run's figure: the nearest one at or
/// under an ancestor of the metric's pointer (`/result/total/all/mean_ns`
/// -> `/total/all/lat`), else the first one nearest the top.
pub fn latency_for(r: &RunRecord) -> Option<&Value> {
    let res = r.victim_result.as_ref()?;
    let has = |v: &Value| {
        v.get("buckets")
            .and_then(|b| b.as_array())
            .is_some_and(|b| b.first().is_some_and(|e| e.get("lo_ns").is_some()))
    };
    let mut p = r.metric.strip_prefix("/result").unwrap_or("").to_string();
    while let Some((parent, _)) = p.rsplit_once('/') {
        p = parent.to_string();
        if let Some(v) = res.pointer(&p) {
            if has(v) {
                return Some(v);
            }
            if let Value::Object(m) = v {
                if let Some(child) = m.values().find(|c| has(c)) {
                    return Some(child);
                }
            }
        }
    }
    find_latency(res)
}

/// Buckets of all runs merged: lo_ns -> (hi_ns, count).
fn merged_buckets(runs: &[&RunRecord]) -> BTreeMap<u64, (u64, u64)> {
    let mut m: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for r in runs {
        let Some(lat) = latency_for(r) else {
            continue;
        };
        for b in lat["buckets"].as_array().into_iter().flatten() {
            let (Some(lo), Some(hi), Some(c)) = (
                b["lo_ns"].as_u64(),
                b["hi_ns"].as_u64(),
                b["count"].as_u64(),
            ) else {
                continue;
            };
            // Counts come from the file: a sum past u64 stays at its top.
            let e = m.entry(lo).or_insert((hi, 0));
            e.1 = e.1.saturating_add(c);
        }
    }
    m
}

/// pmbench's figure: latency histograms, log-scaled latency, plain against
/// each load overlaid.
fn hist_plot(res: &Results, victim: &str, config: &str) -> Option<String> {
    let mut series = Vec::new();
    let labels = load_labels(res);
    for l in &labels {
        let runs: Vec<&RunRecord> = res
            .runs
            .iter()
            .filter(|r| {
                r.victim == victim
                    && r.configuration == config
                    && label(&r.load, &r.sweep_value) == *l
                    && r.status == RunStatus::Completed
            })
            .collect();
        let b = merged_buckets(&runs);
        let total = b.values().fold(0u64, |t, x| t.saturating_add(x.1));
        if total > 0 {
            series.push((l.clone(), b, total));
        }
    }
    if series.is_empty() {
        return None;
    }
    let lo = series
        .iter()
        .filter_map(|s| s.1.keys().next().copied())
        .min()?
        .max(1) as f64;
    let hi = series
        .iter()
        .filter_map(|s| s.1.values().map(|x| x.0).max())
        .max()? as f64;
    let shares: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.values().map(move |x| x.1 as f64 / s.2 as f64))
        .filter(|v| *v > 0.0)
        .collect();
    let ymax = shares.iter().copied().fold(0.0, f64::max);
    let ymin = shares.iter().copied().fold(1.0, f64::min).max(1e-7);
    let xs = Scale::Log(
        10f64.powf(lo.log10().floor()),
        10f64.powf((hi * 1.01).log10().ceil()),
    );
    // Shares on a log scale, as pmbench plots counts: the rare slow
    // accesses in the tail, where load shows first, stay visible.
    let floor = 10f64.powf(ymin.log10().floor());
    let ys = Scale::Log(floor, 10f64.powf(ymax.log10().ceil()).max(floor * 10.0));
    let mut cv = Canvas::new(720.0, 320.0, xs, ys);
    cv.axes(
        &format!("{victim} in {config}: latency distribution, plain against load"),
        "latency (log scale)",
        "share of accesses (log scale)",
        &|v| {
            dmalab_core::units::fmt_ns(v)
                .replace(".0 ", " ")
                .replace(".00 ", " ")
        },
        &|v| {
            let pct = v * 100.0;
            let decimals = (-pct.log10().floor()).max(0.0) as usize;
            format!("{pct:.decimals$}%")
        },
        true,
    );
    for (l, b, total) in &series {
        let col = color(&labels, l);
        let base = cv.py(floor);
        // A step outline: contiguous buckets join at their edges; a gap
        // in the data drops to the baseline.
        let mut d = String::new();
        let mut prev_hi: Option<(u64, f64)> = None;
        for (lo, (hi, c)) in b {
            let y = cv.py((*c as f64 / *total as f64).max(floor));
            let (x0, x1) = (cv.px(*lo as f64), cv.px((*hi + 1) as f64));
            match prev_hi {
                Some((h, _)) if h + 1 == *lo => {
                    let _ = write!(d, "L{x0:.1},{y:.1} L{x1:.1},{y:.1} ");
                }
                Some((_, px1)) => {
                    let _ = write!(
                        d,
                        "L{px1:.1},{base:.1} M{x0:.1},{base:.1} L{x0:.1},{y:.1} L{x1:.1},{y:.1} "
                    );
                }
                None => {
                    let _ = write!(d, "M{x0:.1},{base:.1} L{x0:.1},{y:.1} L{x1:.1},{y:.1} ");
                }
            }
            prev_hi = Some((*hi, x1));
        }
        if let Some((_, px1)) = prev_hi {
            let _ = write!(d, "L{px1:.1},{base:.1}");
        }
        let fill = if l == PLAIN { "0.25" } else { "0" };
        let _ = write!(
            cv.body,
            r##"<path d="{d}" fill="{col}" fill-opacity="{fill}" stroke="{col}" stroke-width="1.4"><title>{} ({total} samples)</title></path>"##,
            esc(l)
        );
    }
    cv.legend(
        &series
            .iter()
            .map(|s| (s.0.clone(), color(&labels, &s.0).to_string()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(&format!("histogram: {victim} {config}")))
}

/// A named, coloured set of (x, y, group) points; the line goes through
/// the mean point of each group.
type Series = (String, String, Vec<(f64, f64, u64)>);

/// An XY plot of points (one per run) with a line through per-x means.
#[allow(clippy::too_many_arguments)]
fn xy_plot(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    fx: &dyn Fn(f64) -> String,
    fy: &dyn Fn(f64) -> String,
    line_through_means: bool,
    aria: &str,
) -> Option<String> {
    let pts: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| (p.0, p.1)))
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if pts.is_empty() {
        return None;
    }
    let xmax = pts.iter().map(|p| p.0).fold(0.0, f64::max);
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let mut cv = Canvas::new(
        720.0,
        320.0,
        Scale::Linear(0.0, nice_max(xmax)),
        Scale::Linear(0.0, nice_max(ymax)),
    );
    cv.axes(title, xlabel, ylabel, fx, fy, true);
    for (name, col, p) in series {
        if line_through_means {
            let mut by_g: BTreeMap<u64, (f64, f64, usize)> = BTreeMap::new();
            for (x, y, g) in p {
                let e = by_g.entry(*g).or_insert((0.0, 0.0, 0));
                e.0 += x;
                e.1 += y;
                e.2 += 1;
            }
            let mut means: Vec<(f64, f64)> = by_g
                .values()
                .map(|(x, s, n)| (x / *n as f64, s / *n as f64))
                .collect();
            means.sort_by(|a, b| a.0.total_cmp(&b.0));
            let d: Vec<String> = means
                .iter()
                .enumerate()
                .map(|(i, (x, y))| {
                    format!(
                        "{}{:.1},{:.1}",
                        if i == 0 { "M" } else { "L" },
                        cv.px(*x),
                        cv.py(*y)
                    )
                })
                .collect();
            let _ = write!(
                cv.body,
                r##"<path d="{}" fill="none" stroke="{col}" stroke-width="2"/>"##,
                d.join(" ")
            );
        }
        for (x, y, _) in p {
            let _ = write!(
                cv.body,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{col}" fill-opacity="0.7"><title>{}: {} / {}</title></circle>"##,
                cv.px(*x),
                cv.py(*y),
                esc(name),
                esc(&fx(*x)),
                esc(&fy(*y))
            );
        }
    }
    cv.legend(
        &series
            .iter()
            .map(|s| (s.0.clone(), s.1.clone()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(aria))
}

/// Bandwidth in decimal units, so that axis ticks (0.5, 1, 1.5 GB/s) read
/// as round numbers.
fn bw_fmt(v: f64) -> String {
    let (d, u) = if v >= 1e9 {
        (1e9, "GB/s")
    } else if v >= 1e6 {
        (1e6, "MB/s")
    } else if v >= 1e3 {
        (1e3, "kB/s")
    } else {
        (1.0, "B/s")
    };
    let x = v / d;
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0} {u}")
    } else {
        format!("{x:.2} {u}").replace("0 ", " ")
    }
}

fn rate_fmt(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M/s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k/s", v / 1e3)
    } else {
        format!("{v:.0}/s")
    }
}

/// The report's stylesheet (also used by the throttle report).
pub const STYLE: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.2em;margin-top:32px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9em}.meta td{padding:1px 12px 1px 0}
figure{margin:12px 0 20px 0}figcaption{font-size:.85em;color:#555;max-width:900px}
svg.plot{background:#fff;border:1px solid #e3e3e3;max-width:100%;height:auto}
svg .title{font-size:13px;font-weight:600}svg .tick{font-size:11px;fill:#444}svg .small{font-size:10px;fill:#333}
svg .label{font-size:12px;fill:#333}svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}
svg .dot{fill:#111;fill-opacity:.75}svg .whisker{stroke:#111;stroke-width:1.3}
div.scroll{overflow-x:auto}table.stats{border-collapse:collapse;font-size:.8em}table.stats th,table.stats td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
table.stats th{background:#f4f4f4}table.stats td.l{text-align:left}tr.noisy td{background:#fff6e0}td.sig{font-weight:600}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:.85em}
"#;

/// The facts of each host of a merged file, side by side (the first row
/// of the header above is the first host's).
fn hosts_table(h: &crate::record::Header) -> String {
    let mut t = String::from(
        r#"<h2>Hosts</h2><p class="meta">One row per results file merged by <code>dmalab fleet merge</code>; every figure below is grouped as <i>host · configuration</i>.</p>
<div class="scroll"><table class="stats"><tr><th>host</th><th>hostname</th><th>CPU</th><th>CPUs</th><th>NUMA nodes</th><th>memory</th><th>kernel</th><th>virtual</th><th>THP</th><th>clock source</th><th>steal since boot</th><th>dmalab</th><th>runs</th><th>started</th><th>results file</th></tr>
"#,
    );
    for m in &h.hosts {
        let x = &m.host;
        let _ = writeln!(
            t,
            r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{} ({})</td><td>{}</td><td>{}</td><td>{}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td class="l">{}</td><td>{:.2}%</td><td class="l">{}</td><td>{} of {}</td><td class="l">{}</td><td class="l">{}</td></tr>"#,
            esc(&m.name),
            esc(&x.hostname),
            esc(&x.cpu_model),
            esc(&x.cpu_vendor),
            x.cpus_online,
            x.numa_nodes,
            esc(&dmalab_core::units::fmt_bytes(x.mem_total_bytes as f64)),
            esc(&x.kernel),
            if x.virtualized { "yes" } else { "no" },
            esc(&x.thp_enabled),
            esc(&x.clocksource),
            x.steal_since_boot_pct,
            esc(&m.tool.version),
            m.recorded_runs,
            m.planned_runs,
            esc(&m.started_at),
            esc(&m.results_file)
        );
    }
    t.push_str("</table></div>\n");
    t
}

/// Renders the report.
pub fn render(res: &Results, noisy_cv_pct: f64) -> Report {
    let cells = analysis::cells(res, noisy_cv_pct);
    let h = &res.header;
    let mut figs = Figures::default();
    let mut body = meta(res);
    body.push_str(&ddio_table(res));
    body.push_str(&victim_bars(res, &cells, &mut figs));
    let (attrib, attrib_plots) = attribution::section(&cells);
    body.push_str(&attrib);
    figs.plots += attrib_plots;
    body.push_str(&latency_histograms(res, &mut figs));
    body.push_str(&sweep_plots(res, &mut figs));
    body.push_str(&figure_against_bandwidth(res, &mut figs));
    body.push_str(&stats_table(&cells, noisy_cv_pct));
    body.push_str(&counters::section(res));
    body.push_str(&failed_runs(res));
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

/// The title, the facts table (host, runs, placement, experiment), the
/// experiment's warnings and, for merged files, the hosts.
fn meta(res: &Results) -> String {
    let h = &res.header;
    let mut body = String::new();
    let failed = res
        .runs
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .count();
    let host_line = if h.hosts.is_empty() {
        format!(
            "{} · {} · {} CPUs · kernel {}{}",
            esc(&h.host.hostname),
            esc(&h.host.cpu_model),
            h.host.cpus_online,
            esc(&h.host.kernel),
            if h.host.virtualized {
                " · virtual machine"
            } else {
                ""
            }
        )
    } else {
        let mut names: Vec<String> = Vec::new();
        for m in &h.hosts {
            if !names.contains(&esc(&m.name)) {
                names.push(esc(&m.name));
            }
        }
        format!(
            "{} host{}: {} ({} results files merged; facts below)",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            h.hosts.len()
        )
    };
    let _ = write!(
        body,
        r#"<h1>dmalab report: {}</h1><table class="meta">
<tr><td>host</td><td>{}</td></tr>
<tr><td>runs</td><td>{} recorded of {} planned, {} failed · started {}</td></tr>
<tr><td>placement</td><td>aggressor on CPU {} · victims on CPU {}</td></tr>
<tr><td>experiment</td><td>{} (sha256 {}…) · dmalab {}</td></tr></table>
"#,
        esc(&h.experiment),
        host_line,
        res.runs.len(),
        h.planned_runs,
        failed,
        esc(&h.started_at),
        esc(&h.aggressor_cpus),
        esc(&h.victim_cpus),
        esc(&h.experiment_path),
        esc(&h.experiment_hash[..12.min(h.experiment_hash.len())]),
        esc(&h.tool.version)
    );
    for w in &h.warnings {
        let _ = write!(body, "<p><b>warning:</b> {}</p>", esc(w));
    }
    if !h.hosts.is_empty() {
        body.push_str(&hosts_table(h));
    }

    body
}

/// DDIO per configuration (the `ddio` key), when the experiment has one.
fn ddio_table(res: &Results) -> String {
    let h = &res.header;
    let mut body = String::new();
    if res.runs.iter().any(|r| r.ddio.is_some()) {
        body.push_str(r#"<h2>DDIO per configuration</h2><table class="stats"><tr><th>configuration</th><th>ddio</th><th>runs with it set</th><th>registers / why not</th></tr>"#);
        for c in &h.configurations {
            let runs: Vec<&RunRecord> = res.runs.iter().filter(|r| &r.configuration == c).collect();
            let Some(d) = runs.iter().find_map(|r| r.ddio.as_ref()) else {
                continue;
            };
            let applied = runs
                .iter()
                .filter(|r| r.ddio.as_ref().is_some_and(|d| d.applied))
                .count();
            let _ = writeln!(
                body,
                r#"<tr><td class="l">{}</td><td>{}</td><td>{applied} of {}</td><td class="l">{}</td></tr>"#,
                esc(c),
                esc(&d.requested),
                runs.len(),
                esc(&d.detail)
            );
        }
        body.push_str("</table>\n");
    }

    body
}

/// A bar plot per victim: its figure under each load.
fn victim_bars(res: &Results, cells: &[Cell], figs: &mut Figures) -> String {
    let h = &res.header;
    let mut section = String::new();
    for v in &h.victims {
        let vc: Vec<&Cell> = cells.iter().filter(|c| c.victim == v.name).collect();
        figs.fig(
            &mut section,
            bar_plot(res, &v.name, &vc),
            &format!("Bars: mean of completed runs; dots: each run; whiskers: 95% bootstrap interval of the mean; labels: change against plain. Figure: {} ({}).", v.metric, v.command),
        );
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Victims under load</h2>\n{section}")
}

/// Latency histograms per victim and configuration.
fn latency_histograms(res: &Results, figs: &mut Figures) -> String {
    let h = &res.header;
    let mut section = String::new();
    for v in &h.victims {
        for c in &h.configurations {
            figs.fig(&mut section, hist_plot(res, &v.name, c), "Histogram buckets of every completed run merged per load, as share of all accesses; latency on a log scale.");
        }
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Latency distributions</h2>\n{section}")
}

/// Sweep: the aggressor's bandwidth and command rate against the swept
/// flag.
fn sweep_plots(res: &Results, figs: &mut Figures) -> String {
    let h = &res.header;
    let Some(s) = &h.sweep else {
        return String::new();
    };
    let mut section = String::new();
    let mut bw = Vec::new();
    let mut cmd = Vec::new();
    for (ci, c) in h.configurations.iter().enumerate() {
        let mut pb = Vec::new();
        let mut pc = Vec::new();
        for r in res
            .runs
            .iter()
            .filter(|r| &r.configuration == c && r.status == RunStatus::Completed)
        {
            let (Some(sv), Some((bwv, cmdv))) =
                (r.sweep_value.as_ref(), analysis::aggressor_rates(r))
            else {
                continue;
            };
            let Ok(x) = sv.parse::<f64>() else { continue };
            pb.push((x, bwv, x.to_bits()));
            if let Some(c) = cmdv {
                pc.push((x, c, x.to_bits()));
            }
        }
        let col = PALETTE[(ci + 1) % PALETTE.len()].to_string();
        if !pb.is_empty() {
            bw.push((c.clone(), col.clone(), pb));
            cmd.push((c.clone(), col, pc));
        }
    }
    let flag = s.flag.clone();
    figs.fig(
        &mut section,
        xy_plot(&format!("aggressor '{}': data bandwidth against --{}", s.aggressor, flag), &flag, "data bandwidth", &bw, &|v| format!("{v}"), &bw_fmt, true, "sweep bandwidth"),
        "Data bytes the aggressor completed while each victim ran, per second (from its live-stats file); one dot per run, line through the means.",
    );
    figs.fig(
        &mut section,
        xy_plot(
            &format!(
                "aggressor '{}': command rate against --{}",
                s.aggressor, flag
            ),
            &flag,
            "commands per second",
            &cmd,
            &|v| format!("{v}"),
            &rate_fmt,
            true,
            "sweep command rate",
        ),
        "Commands the aggressor completed while each victim ran, per second.",
    );
    if section.is_empty() {
        return section;
    }
    format!("<h2>Sweep over --{}</h2>\n{section}", esc(&flag))
}

/// Each victim's figure against the bandwidth the aggressor delivered.
fn figure_against_bandwidth(res: &Results, figs: &mut Figures) -> String {
    let h = &res.header;
    let mut section = String::new();
    for v in &h.victims {
        let mut series = Vec::new();
        for (ci, c) in h.configurations.iter().enumerate() {
            let mut p = Vec::new();
            let mut any_evidence = false;
            for r in res.runs.iter().filter(|r| {
                r.victim == v.name && &r.configuration == c && r.status == RunStatus::Completed
            }) {
                let Some(val) = r.value else { continue };
                let x = if r.load == PLAIN {
                    0.0
                } else if let Some((bwv, _)) = analysis::aggressor_rates(r) {
                    any_evidence = true;
                    bwv
                } else {
                    continue;
                };
                // Line groups: one per load and sweep value (plain is 0).
                let g = match (&r.sweep_value, h.sweep.as_ref()) {
                    (Some(sv), Some(s)) => {
                        1 + s.values.iter().position(|x| x == sv).unwrap_or(0) as u64
                    }
                    _ => h.loads.iter().position(|l| *l == r.load).unwrap_or(0) as u64,
                };
                p.push((x, val, g));
            }
            if any_evidence {
                series.push((c.clone(), PALETTE[(ci + 1) % PALETTE.len()].to_string(), p));
            }
        }
        let unit = v.unit.clone();
        figs.fig(
            &mut section,
            xy_plot(
                &format!("{}: figure against the aggressor's bandwidth", v.name),
                "aggressor data bandwidth during the run",
                &format!("{} [{}]", v.metric.rsplit('/').next().unwrap_or(""), v.unit),
                &series,
                &bw_fmt,
                &|x| short_value(x, &unit),
                true,
                &format!("latency vs bandwidth: {}", v.name),
            ),
            "Each run's figure against the bandwidth the aggressor delivered while it ran (plain runs at zero).",
        );
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Victim figure against aggressor bandwidth</h2>\n{section}")
}

/// The statistics table: one row per cell.
fn stats_table(cells: &[Cell], noisy_cv_pct: f64) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        r#"<h2>Statistics</h2><p class="meta">Mean, median and sample standard deviation of completed runs; 95% percentile-bootstrap interval of the mean (10,000 resamples, fixed seed); change = the change of the figure's mean against plain (bandwidth that fell is negative), worse or better by the figure's direction, with its bootstrap interval; Mann-Whitney U two-sided against plain (exact without ties for small samples). Noisy: coefficient of variation above {noisy_cv_pct}%.</p>
<div class="scroll"><table class="stats"><tr><th>configuration</th><th>victim</th><th>load</th><th>n</th><th>failed</th><th>mean</th><th>median</th><th>sd</th><th>CV</th><th>95% CI</th><th>change vs plain</th><th>change 95% CI</th><th>MWU U</th><th>MWU p</th><th>aggressor bandwidth</th><th>aggressor commands</th></tr>
"#
    );
    for c in cells {
        let load = match &c.sweep_value {
            Some(s) => format!("{}@{s}", c.load),
            None => c.load.clone(),
        };
        let f = |v: f64| esc(&fmt_value(v, &c.unit));
        let (mean, med, sd, cvp, ci) = match &c.summary {
            Some(s) => (
                f(s.mean),
                f(s.median),
                f(s.sd),
                format!("{:.2}%", s.cv_pct),
                format!("{} – {}", f(s.ci_lo), f(s.ci_hi)),
            ),
            None => Default::default(),
        };
        let slow = c
            .change_pct
            .zip(c.change)
            .map(|(x, w)| format!("{x:+.2}% {}", w.word()))
            .unwrap_or_default();
        let sci = c
            .change_pct_ci
            .map(|(a, b)| format!("{a:+.2}% – {b:+.2}%"))
            .unwrap_or_default();
        let (u, p, sig) = match c.mwu {
            Some(m) => (
                format!("{}", m.u),
                format!(
                    "{:.4} ({})",
                    m.p,
                    if m.method == crate::stats::MwuMethod::Exact {
                        "exact"
                    } else {
                        "normal"
                    }
                ),
                m.p < 0.05,
            ),
            None => Default::default(),
        };
        let _ = writeln!(
            body,
            r#"<tr{}><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td>{}</td><td>{}</td><td>{mean}</td><td>{med}</td><td>{sd}</td><td>{cvp}{}</td><td>{ci}</td><td>{slow}</td><td>{sci}</td><td>{u}</td><td{}>{p}</td><td>{}</td><td>{}</td></tr>"#,
            if c.noisy { r#" class="noisy""# } else { "" },
            esc(&c.configuration),
            esc(&c.victim),
            esc(&load),
            c.values.len(),
            c.failed,
            if c.noisy { " noisy" } else { "" },
            if sig { r#" class="sig""# } else { "" },
            c.aggressor_bw_bytes.map(bw_fmt).unwrap_or_default(),
            c.aggressor_cmd_per_s.map(rate_fmt).unwrap_or_default()
        );
    }
    body.push_str("</table></div>\n");

    body
}

/// Failed runs with their reasons, when there are any.
fn failed_runs(res: &Results) -> String {
    let mut body = String::new();
    let failed: Vec<&RunRecord> = res
        .runs
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .collect();
    if !failed.is_empty() {
        body.push_str(r#"<h2>Failed runs</h2><table class="stats"><tr><th>run</th><th>configuration</th><th>victim</th><th>load</th><th>rep</th><th>reason</th><th>exit status</th><th>stderr (tail)</th></tr>"#);
        for r in failed {
            let f = r.failure.clone().unwrap_or_default();
            let _ = writeln!(
                body,
                r#"<tr><td>{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td>{}</td><td class="l"><pre>{}</pre></td></tr>"#,
                r.index,
                esc(&r.configuration),
                esc(&r.victim),
                esc(&r.load),
                r.repetition,
                esc(&f.reason),
                f.exit_status
                    .map(|s| s.to_string())
                    .or(f.signal.map(|s| format!("signal {s}")))
                    .unwrap_or_default(),
                esc(f
                    .stderr_tail
                    .lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
                    .as_str())
            );
        }
        body.push_str("</table>\n");
    }
    body
}

#[cfg(test)]
mod tests {
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
        assert_eq!(sweep_plots(&res, &mut Figures::default()), "");
        assert_eq!(ddio_table(&res), "");
        assert!(r
            .html
            .contains("<tr><td>runs</td><td>3 recorded of 3 planned, 1 failed"));
        assert!(r
            .html
            .ends_with("<h2>Experiment file</h2><pre>[x]</pre>\n</body></html>\n"));
    }
}
