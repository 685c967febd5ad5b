//! The sweep plots and each victim's figure against the aggressor's
//! bandwidth.

use super::{metric_words, Figures};
use crate::analysis::{self, fmt_value};
use crate::draw::{bw_fmt, esc, rate_fmt, tick, Canvas, PALETTE};
use crate::plan::PLAIN;
use crate::record::Results;
use crate::stats;
use dmalab_core::schema::RunStatus;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A named, coloured set of (x, y, group) points; the line goes through
/// the mean point of each group. Groups are numbered in plot order (plain
/// 0, then each swept value or load): a missing number is a gap in the data.
type Series = (String, String, Vec<(f64, f64, u64)>);

/// What an axis shows, in words, and the unit of its data (`B/s`, `ns`,
/// `s`, `commands/s` or anything else, drawn as is).
type Axis<'a> = (&'a str, &'a str);

/// An XY plot of points (one per run) with, when `line_through_means`, a
/// line through each group's mean that breaks where a group has no data,
/// and the 95% bootstrap interval of each mean as an error bar.
fn xy_plot(
    title: &str,
    (xwhat, xunit): Axis,
    (ywhat, yunit): Axis,
    series: &[Series],
    line_through_means: bool,
    aria: &str,
) -> Option<String> {
    let (mut cv, ux, uy) = Canvas::linear_for(
        series.iter().flat_map(|s| s.2.iter().map(|p| (p.0, p.1))),
        xunit,
        yunit,
    )?;
    cv.axes(
        title,
        &ux.title(xwhat),
        &uy.title(ywhat),
        &|v| tick(v),
        &|v| tick(v),
        true,
    );
    for (name, col, p) in series {
        if line_through_means {
            let mut by_g: BTreeMap<u64, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
            for (x, y, g) in p {
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
                if ys.len() >= 2 {
                    let (lo, hi) = stats::bootstrap_mean_ci(ys, 2000, 1);
                    let _ = write!(
                        cv.body,
                        r##"<path d="M{px:.1},{:.1} L{px:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}" class="whisker" stroke="{col}"/>"##,
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
                r##"<path d="{}" fill="none" stroke="{col}" stroke-width="2"/>"##,
                d.trim_end()
            );
        }
        for (x, y, _) in p {
            let _ = write!(
                cv.body,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{col}" fill-opacity="0.7"><title>{}: {} / {}</title></circle>"##,
                cv.px(*x),
                cv.py(*y),
                esc(name),
                esc(&value_text(*x, xunit)),
                esc(&value_text(*y, yunit))
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

/// A value with its unit, for a tooltip.
fn value_text(v: f64, unit: &str) -> String {
    match unit {
        "B/s" => bw_fmt(v),
        "commands/s" => rate_fmt(v),
        "" => tick(v),
        u => fmt_value(v, u),
    }
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
            // Groups in sweep order, so that a value without data breaks
            // the line instead of being bridged.
            let g = s.values.iter().position(|v| v == sv).unwrap_or(0) as u64;
            pb.push((x, bwv, g));
            if let Some(c) = cmdv {
                pc.push((x, c, g));
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
        xy_plot(&format!("aggressor '{}': data bandwidth against --{}", s.aggressor, flag), (&format!("--{flag}"), ""), ("aggressor data bandwidth", "B/s"), &bw, true, "sweep bandwidth"),
        "Data bytes the aggressor completed while each victim ran, per second (from its live-stats file); one dot per run, line through the means, error bars: 95% bootstrap interval of each mean; the line breaks where a value has no data.",
    );
    figs.fig(
        &mut section,
        xy_plot(
            &format!(
                "aggressor '{}': command rate against --{}",
                s.aggressor, flag
            ),
            (&format!("--{flag}"), ""),
            ("aggressor command rate", "commands/s"),
            &cmd,
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
        figs.fig(
            &mut section,
            xy_plot(
                &format!("{}: figure against the aggressor's bandwidth", v.name),
                ("aggressor data bandwidth during the run", "B/s"),
                (&metric_words(&v.metric), &v.unit),
                &series,
                h.sweep.is_some(),
                &format!("latency vs bandwidth: {}", v.name),
            ),
            if h.sweep.is_some() { "Each run's figure against the bandwidth the aggressor delivered while it ran (plain runs at zero); line through the means of each swept value, error bars: 95% bootstrap interval of each mean; the line breaks where a value has no data." } else { "Each run's figure against the bandwidth the aggressor delivered while it ran (plain runs at zero); no line: the loads are different aggressors, not points of one curve." },
        );
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Victim figure against aggressor bandwidth</h2>\n{section}")
}
