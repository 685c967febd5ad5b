//! The sweep plots and each victim's figure against the aggressor's
//! bandwidth.

use super::{short_value, Figures};
use crate::analysis;
use crate::draw::{bw_fmt, esc, nice_max, rate_fmt, Canvas, Scale, PALETTE};
use crate::plan::PLAIN;
use crate::record::Results;
use dmalab_core::schema::RunStatus;
use std::collections::BTreeMap;
use std::fmt::Write;

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

/// Sweep: the aggressor's bandwidth and command rate against the swept
/// flag.
pub(super) fn sweep_plots(res: &Results, figs: &mut Figures) -> String {
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
pub(super) fn figure_against_bandwidth(res: &Results, figs: &mut Figures) -> String {
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
