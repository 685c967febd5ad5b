//! The report of one or several result documents of one command,
//! overlaid: the figures table (page: Table 2 side by side), latency
//! histograms and CDFs, per-second series, rate windows.

use super::Figures;
use crate::document::{fmt_change, fmt_figure, key_figures, Doc, Figure};
use crate::draw::{self, buckets_of, esc, Bar, Buckets, Line, PALETTE};
use serde_json::Value;
use std::fmt::Write;

/// The latency summaries drawn for a command: (pointer, words).
fn latency_summaries(command: &str) -> Vec<(&'static str, &'static str)> {
    match command {
        "load" => vec![("/lat_ns", "command latency")],
        c if c.starts_with("probe") => vec![("/per_access", "access latency")],
        "page" => vec![
            ("/total/all/lat", "access latency, all accesses"),
            ("/read/all/lat", "access latency, reads"),
            ("/write/all/lat", "access latency, writes"),
        ],
        _ => Vec::new(),
    }
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
    let mut body = String::new();
    let mut place = |body: &mut String, svg: Option<String>, caption: &str| {
        figs.fig(body, svg, caption);
    };
    let _ = write!(
        body,
        "<h1>dmalab report: {}</h1><table class=\"meta\">",
        esc(&command)
    );
    for d in docs {
        let v = &d.value;
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{} · {} · {} CPUs · kernel {} · started {} · dmalab {}</td></tr>",
            esc(&d.name),
            esc(v["host"]["hostname"].as_str().unwrap_or("?")),
            esc(v["host"]["cpu_model"].as_str().unwrap_or("?")),
            v["host"]["cpus_online"].as_u64().unwrap_or(0),
            esc(v["host"]["kernel"].as_str().unwrap_or("?")),
            esc(v["started_at"].as_str().unwrap_or("?")),
            esc(v["tool"]["version"].as_str().unwrap_or("?")),
        );
    }
    body.push_str("</table>\n");
    for d in docs {
        for w in d.value["warnings"].as_array().into_iter().flatten() {
            if let Some(w) = w.as_str() {
                let _ = write!(body, "<p><b>warning ({}):</b> {}</p>", esc(&d.name), esc(w));
            }
        }
    }

    // The figures that matter, side by side (page: pmbench's Table 2).
    body.push_str(&figures_table(docs));

    // Latency distributions: a histogram of one file (by fault class for
    // page), CDFs wherever series are overlaid.
    let mut lat = String::new();
    if command == "page" && docs.len() == 1 {
        let r = &docs[0].value["result"];
        let series: Vec<(String, String, Buckets)> = ["hit", "minor", "major"]
            .iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), colour(i), buckets_of(&r["total"][c]["lat"])))
            .collect();
        place(&mut lat, draw::histogram_plot("access latency by fault class", &series, "histogram by fault class"), "Share of all accesses in each latency bucket, one outline per fault class (hit, minor, major), as pmbench plots them.");
        place(
            &mut lat,
            draw::cdf_plot(
                "access latency by fault class, cumulative",
                &series,
                "cdf by fault class",
            ),
            "Share of each class's accesses at or below each latency.",
        );
    }
    for (ptr, words) in latency_summaries(&command) {
        let series: Vec<(String, String, Buckets)> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let lat = d.value["result"]
                    .pointer(ptr)
                    .cloned()
                    .unwrap_or(Value::Null);
                (d.name.clone(), colour(i), buckets_of(&lat))
            })
            .collect();
        if docs.len() == 1 {
            place(
                &mut lat,
                draw::histogram_plot(words, &series, &format!("histogram {words}")),
                "Share of accesses in each latency bucket, log-log.",
            );
        }
        place(
            &mut lat,
            draw::cdf_plot(
                &format!("{words}, cumulative"),
                &series,
                &format!("cdf {words}"),
            ),
            "Share of accesses at or below each latency, one curve per file.",
        );
    }
    if !lat.is_empty() {
        let _ = write!(body, "<h2>Latency distributions</h2>\n{lat}");
    }

    // Per-second series (load, stat) and rate windows.
    let mut series = String::new();
    if command == "load" {
        let bw: Vec<Line> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), colour(i), samples(&d.value, "bw_bytes")))
            .collect();
        place(&mut series, draw::line_plot("data bandwidth per second", ("time", "s"), ("data bandwidth", "B/s"), &bw, &[], "bandwidth per second"), "Data bytes completed in each interval of the live series, per second; the line breaks where an interval is missing.");
        let iops: Vec<Line> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), colour(i), samples(&d.value, "iops")))
            .collect();
        let targets: Vec<Line> = docs
            .iter()
            .enumerate()
            .filter(|(_, d)| d.value["result"]["rate_check"].is_object())
            .map(|(i, d)| {
                (
                    format!("{} target", d.name),
                    colour(i),
                    samples(&d.value, "rate_target_iops"),
                )
            })
            .collect();
        place(
            &mut series,
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
    if command == "stat" {
        let mut ids: Vec<String> = Vec::new();
        for d in docs {
            for s in d.value["result"]["counters"]["series"]
                .as_array()
                .into_iter()
                .flatten()
            {
                for k in s["events"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k)
                {
                    if !ids.contains(k) {
                        ids.push(k.clone());
                    }
                }
            }
        }
        for id in ids {
            let lines: Vec<Line> = docs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let pts = d.value["result"]["counters"]["series"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| {
                            let t = s["t_s"].as_f64()?;
                            let dt = s["interval_s"].as_f64().filter(|x| *x > 0.0);
                            Some((t, s["events"][&id].as_f64().zip(dt).map(|(v, dt)| v / dt)))
                        })
                        .collect();
                    (d.name.clone(), colour(i), pts)
                })
                .collect();
            place(
                &mut series,
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
    if command == "sim compare" {
        let bars: Vec<Bar> = docs
            .iter()
            .enumerate()
            .flat_map(|(i, d)| {
                d.value["result"]["schemes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(move |s| {
                        Some((
                            s["scheme"].as_str()?.to_string(),
                            d.name.clone(),
                            colour(i),
                            s["total_ns"].as_f64()?,
                            None,
                        ))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        place(&mut series, draw::bar_plot("simulated time per scheme (lower is better)", ("simulated time", "ns"), &bars, "sim schemes"), "Simulated time of the trace under each coherence scheme; one bar per file. A single simulation has no spread, so no error bars.");
    }
    if !series.is_empty() {
        let _ = write!(body, "<h2>Over time and per scheme</h2>\n{series}");
    }
    for d in docs {
        let _ = writeln!(
            body,
            "<h2>Configuration: {}</h2><pre>{}</pre>",
            esc(&d.name),
            esc(&serde_json::to_string_pretty(&d.value["config"]).unwrap_or_default())
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

/// The live series' `key` over time; a sample without it is a gap.
fn samples(doc: &Value, key: &str) -> Vec<(f64, Option<f64>)> {
    doc["result"]["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s["t_s"].as_f64()?, s[key].as_f64())))
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
