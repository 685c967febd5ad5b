//! The report of one or several result documents of one command,
//! overlaid: the figures table (page: Table 2 side by side), latency
//! histograms and CDFs, per-second series, rate windows.

use super::Figures;
use crate::document::{fmt_change, fmt_figure, key_figures, Doc, Figure};
use crate::draw::{self, buckets_of, esc, Bar, Buckets, Line, PALETTE};
use crate::views::report::{self as view, Header, Latency};
use serde_json::Value;
use std::fmt::Write;

/// A latency summary of a document, read through its command's view.
type Summary = fn(&Value) -> Latency;

/// The latency summaries drawn for a command: (words, where each document
/// has it).
fn latency_summaries(command: &str) -> Vec<(&'static str, Summary)> {
    match command {
        "load" => vec![("command latency", |d| view::result::<view::Load>(d).lat_ns)],
        c if c.starts_with("probe") => vec![("access latency", |d| {
            view::result::<view::Probe>(d).per_access
        })],
        "page" => vec![
            ("access latency, all accesses", page_all),
            ("access latency, reads", |d| {
                view::result::<view::Page>(d).read.all.lat
            }),
            ("access latency, writes", |d| {
                view::result::<view::Page>(d).write.all.lat
            }),
        ],
        _ => Vec::new(),
    }
}

/// Page's latency of every access.
fn page_all(d: &Value) -> Latency {
    view::result::<view::Page>(d).total.all.lat
}

fn colour(i: usize) -> String {
    // The grey is the run report's `plain`; documents start at red.
    PALETTE[(i + 1) % PALETTE.len()].to_string()
}

/// A rendered document report.
pub struct DocReport {
    /// The HTML page.
    pub html: String,
    /// Number of plots in it.
    pub plots: usize,
}

/// Renders the report of one or several documents of one command.
pub fn render(docs: &[Doc]) -> DocReport {
    let command = docs.first().map(|d| d.command.clone()).unwrap_or_default();
    let mut figs = Figures::default();
    let headers: Vec<Header> = docs.iter().map(|d| Header::of(&d.value)).collect();
    let mut body = header(&command, docs, &headers);
    // The figures that matter, side by side (page: pmbench's Table 2).
    body.push_str(&figures_table(docs));
    let lat = latency_plots(&command, docs, &mut figs);
    if !lat.is_empty() {
        let _ = write!(body, "<h2>Latency distributions</h2>\n{lat}");
    }
    let series = series_plots(&command, docs, &mut figs);
    if !series.is_empty() {
        let _ = write!(body, "<h2>Over time and per scheme</h2>\n{series}");
    }
    for (d, h) in docs.iter().zip(&headers) {
        let _ = writeln!(
            body,
            "<h2>Configuration: {}</h2><pre>{}</pre>",
            esc(&d.name),
            esc(&serde_json::to_string_pretty(&h.config).unwrap_or_default())
        );
    }
    let plots = figs.plots;
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>dmalab report: {}</title><style>{}</style></head>\n<body data-plots=\"{plots}\">\n{body}</body></html>\n",
        esc(&command),
        draw::STYLE
    );
    DocReport { html, plots }
}

/// The title, one line per file (host, CPU, kernel, start, version), and
/// each file's warnings.
fn header(command: &str, docs: &[Doc], headers: &[Header]) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>dmalab report: {}</h1><table class=\"meta\">",
        esc(command)
    );
    let or_q = |s: &Option<String>| esc(s.as_deref().unwrap_or("?"));
    for (d, h) in docs.iter().zip(headers) {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{} · {} · {} CPUs · kernel {} · started {} · dmalab {}</td></tr>",
            esc(&d.name),
            or_q(&h.host.hostname),
            or_q(&h.host.cpu_model),
            h.host.cpus_online.unwrap_or(0),
            or_q(&h.host.kernel),
            or_q(&h.started_at),
            or_q(&h.tool.version),
        );
    }
    body.push_str("</table>\n");
    for (d, h) in docs.iter().zip(headers) {
        for w in h.warnings.iter().flatten() {
            let _ = write!(body, "<p><b>warning ({}):</b> {}</p>", esc(&d.name), esc(w));
        }
    }
    body
}

/// Latency distributions: a histogram of one file (by fault class for
/// page), CDFs wherever series are overlaid.
fn latency_plots(command: &str, docs: &[Doc], figs: &mut Figures) -> String {
    let mut lat = String::new();
    if command == "page" && docs.len() == 1 {
        let total = view::result::<view::Page>(&docs[0].value).total;
        let series: Vec<(String, String, Buckets)> = [
            ("hit", &total.hit),
            ("minor", &total.minor),
            ("major", &total.major),
        ]
        .iter()
        .enumerate()
        .map(|(i, (c, class))| (c.to_string(), colour(i), buckets_of(class.lat.buckets())))
        .collect();
        figs.fig(&mut lat, draw::histogram_plot("access latency by fault class", &series, "histogram by fault class"), "Share of all accesses in each latency bucket, one outline per fault class (hit, minor, major), as pmbench plots them.");
        figs.fig(
            &mut lat,
            draw::cdf_plot(
                "access latency by fault class, cumulative",
                &series,
                "cdf by fault class",
            ),
            "Share of each class's accesses at or below each latency.",
        );
    }
    for (words, summary) in latency_summaries(command) {
        let series: Vec<(String, String, Buckets)> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let lat = summary(&d.value);
                (d.name.clone(), colour(i), buckets_of(lat.buckets()))
            })
            .collect();
        if docs.len() == 1 {
            figs.fig(
                &mut lat,
                draw::histogram_plot(words, &series, &format!("histogram {words}")),
                "Share of accesses in each latency bucket, log-log.",
            );
        }
        figs.fig(
            &mut lat,
            draw::cdf_plot(
                &format!("{words}, cumulative"),
                &series,
                &format!("cdf {words}"),
            ),
            "Share of accesses at or below each latency, one curve per file.",
        );
    }
    lat
}

/// Per-second series (load, stat), rate windows, and the simulator's
/// schemes.
fn series_plots(command: &str, docs: &[Doc], figs: &mut Figures) -> String {
    let mut series = String::new();
    match command {
        "load" => load_series(docs, figs, &mut series),
        "stat" => stat_series(docs, figs, &mut series),
        "sim compare" => sim_bars(docs, figs, &mut series),
        _ => {}
    }
    series
}

/// Load's bandwidth and command rate per second, with the rate target.
fn load_series(docs: &[Doc], figs: &mut Figures, series: &mut String) {
    let loads: Vec<view::Load> = docs.iter().map(|d| view::result(&d.value)).collect();
    let lines = |f: fn(&view::LoadSample) -> Option<f64>| -> Vec<Line> {
        docs.iter()
            .zip(&loads)
            .enumerate()
            .map(|(i, (d, l))| (d.name.clone(), colour(i), samples(l, f)))
            .collect()
    };
    let bw = lines(|s| s.bw_bytes);
    figs.fig(series, draw::line_plot("data bandwidth per second", ("time", "s"), ("data bandwidth", "B/s"), &bw, &[], "bandwidth per second"), "Data bytes completed in each interval of the live series, per second; the line breaks where an interval is missing.");
    let iops = lines(|s| s.iops);
    let targets: Vec<Line> = docs
        .iter()
        .zip(&loads)
        .enumerate()
        .filter(|(_, (_, l))| l.rate_check)
        .map(|(i, (d, l))| {
            (
                format!("{} target", d.name),
                colour(i),
                samples(l, |s| s.rate_target_iops),
            )
        })
        .collect();
    figs.fig(
        series,
        draw::line_plot(
            "commands per second (rate windows)",
            ("time", "s"),
            ("command rate", "commands/s"),
            &iops,
            &targets,
            "commands per second",
        ),
        "Commands completed in each interval; dashed: the --rate target, where one was set.",
    );
}

/// Each counted event per second, one plot per event, one line per file.
fn stat_series(docs: &[Doc], figs: &mut Figures, series: &mut String) {
    let stats: Vec<view::Stat> = docs.iter().map(|d| view::result(&d.value)).collect();
    let mut ids: Vec<&String> = Vec::new();
    for s in stats.iter().flat_map(|s| &s.counters.series) {
        for k in s.events.keys() {
            if !ids.contains(&k) {
                ids.push(k);
            }
        }
    }
    for id in ids {
        let lines: Vec<Line> = docs
            .iter()
            .zip(&stats)
            .enumerate()
            .map(|(i, (d, st))| {
                let pts = st
                    .counters
                    .series
                    .iter()
                    .filter_map(|s| {
                        let t = s.t_s?;
                        let dt = s.interval_s.filter(|x| *x > 0.0);
                        let v = s.events.get(id).copied().flatten();
                        Some((t, v.zip(dt).map(|(v, dt)| v / dt)))
                    })
                    .collect();
                (d.name.clone(), colour(i), pts)
            })
            .collect();
        figs.fig(
            series,
            draw::line_plot(
                &format!("{id} per second"),
                ("time", "s"),
                (&format!("{id} per second"), ""),
                &lines,
                &[],
                &format!("stat {id}"),
            ),
            "Count in each interval, per second; the line breaks where an interval is missing.",
        );
    }
}

/// The simulated time of each scheme, one bar per file.
fn sim_bars(docs: &[Doc], figs: &mut Figures, series: &mut String) {
    let bars: Vec<Bar> = docs
        .iter()
        .enumerate()
        .flat_map(|(i, d)| {
            view::result::<view::SimCompare>(&d.value)
                .schemes
                .into_iter()
                .filter_map(move |s| {
                    Some((s.scheme?, d.name.clone(), colour(i), s.total_ns?, None))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    figs.fig(series, draw::bar_plot("simulated time per scheme (lower is better)", ("simulated time", "ns"), &bars, "sim schemes"), "Simulated time of the trace under each coherence scheme; one bar per file. A single simulation has no spread, so no error bars.");
}

/// A load's live series: `figure` over time; a sample without it is a gap.
fn samples(
    load: &view::Load,
    figure: fn(&view::LoadSample) -> Option<f64>,
) -> Vec<(f64, Option<f64>)> {
    load.samples
        .iter()
        .filter_map(|s| Some((s.t_s?, figure(s))))
        .collect()
}

/// The figures that matter, one column per file, with the change of each
/// against the first file.
fn figures_table(docs: &[Doc]) -> String {
    let Some(first) = docs.first() else {
        return String::new();
    };
    let cols: Vec<Vec<Figure>> = docs
        .iter()
        .map(|d| key_figures(&d.command, &d.value))
        .collect();
    let mut t = String::from("<h2>Figures</h2><table class=\"stats\"><tr><th>figure</th>");
    for (i, d) in docs.iter().enumerate() {
        let _ = write!(t, "<th>{}</th>", esc(&d.name));
        if i > 0 {
            let _ = write!(t, "<th>change against {}</th>", esc(&first.name));
        }
    }
    t.push_str("</tr>\n");
    for (row, f) in cols[0].iter().enumerate() {
        let _ = write!(t, "<tr><td class=\"l\">{}</td>", esc(&f.what));
        for (i, c) in cols.iter().enumerate() {
            let v = c
                .get(row)
                .filter(|x| x.what == f.what)
                .and_then(|x| x.value);
            let _ = write!(
                t,
                "<td>{}</td>",
                esc(&v
                    .map(|v| fmt_figure(v, &f.unit))
                    .unwrap_or_else(|| "n/a".into()))
            );
            if i > 0 {
                let ch = match (f.value, v) {
                    (Some(a), Some(b)) => fmt_change(a, b, f.higher_is_better),
                    _ => String::new(),
                };
                let _ = write!(t, "<td>{}</td>", esc(&ch));
            }
        }
        t.push_str("</tr>\n");
    }
    t.push_str("</table>\n");
    t
}

/// The figures table as CSV: one row per file and figure, the value in
/// the figure's own unit (bytes per second, nanoseconds, percent).
pub fn csv(docs: &[Doc]) -> String {
    let mut out = String::from("file,command,figure,unit,value\n");
    let q = |s: &str| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    for d in docs {
        for f in key_figures(&d.command, &d.value) {
            let _ = writeln!(
                out,
                "{},{},{},{},{}",
                q(&d.name),
                q(&d.command),
                q(&f.what),
                q(&f.unit),
                f.value.map(|v| v.to_string()).unwrap_or_default()
            );
        }
    }
    out
}
