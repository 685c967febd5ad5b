//! The text summary and the HTML report of a throttle session: per loop,
//! the time series (rate target, delivered rate; victim figure against the
//! SLO's bound), and with a sweep the frontier: I/O throughput against
//! victim slowdown, every fixed-rate pass as a dot, their means as a line,
//! each loop's settled point marked.

use crate::session::{Config, FrontierVerdict, LoopResult, ThrottleResult};
use dmalab_core::units::fmt_bytes;
use dmalab_run::draw::{esc, nice_max, Canvas, Scale, PALETTE};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A share as a percentage, `-` for none.
pub fn pct(share: Option<f64>) -> String {
    share.map_or("-".into(), |s| format!("{:.1}%", 100.0 * s))
}

/// Bytes per second to MiB/s (the plots' rate unit).
fn mib(v: f64) -> f64 {
    v / (1 << 20) as f64
}

/// A short legend label for an SLO (`mean<=1.3x`).
fn short(slo: &str) -> String {
    slo.replace(" x baseline", "x").replace(' ', "")
}

/// The text summary.
pub fn text(cfg: &Config, r: &ThrottleResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dmalab throttle: victim {}, {:?} controller, interval {} ms, rate {}/s .. {}/s",
        cfg.victim,
        cfg.controller.kind,
        cfg.interval_ns / 1_000_000,
        fmt_bytes(cfg.controller.min_rate),
        fmt_bytes(cfg.controller.max_rate)
    );
    for (k, v) in &r.baseline {
        let _ = writeln!(s, "  baseline  {k} {v:.1} {}", r.victim_unit);
    }
    for l in &r.loops {
        let _ = writeln!(
            s,
            "  SLO {:<24} bound {:.1} {}  settled {}/s (delivered {}/s)  {} {:.1} (slowdown {:.3})  settle time {}  violations {}/{} ({:.1}%, {} after settling)",
            l.slo.text,
            l.slo_limit,
            r.victim_unit,
            l.settled_rate_bytes_per_s.map_or("-".into(), fmt_bytes),
            l.settled_delivered_bytes_per_s.map_or("-".into(), fmt_bytes),
            l.slo.stat.name(),
            l.settled_victim_metric,
            l.settled_slowdown,
            l.settle_time_s.map_or("never".into(), |t| format!("{t:.0} s")),
            l.violations,
            l.series.len(),
            100.0 * l.violation_share,
            pct(l.violation_share_after_settle)
        );
        let _ = writeln!(
            s,
            "    {}{}",
            l.outcome.line(l.settled_rate_bytes_per_s),
            l.dma_attributable_share.map_or(String::new(), |d| format!(
                " (DMA-attributable share of the change at the maximum rate: {d:.2})"
            ))
        );
    }
    for v in &r.frontier {
        let _ = writeln!(s, "{}", frontier_line(v));
        if !v.points.is_empty() {
            let _ = writeln!(
                s,
                "    fixed rates (violations/intervals): {}",
                v.points
                    .iter()
                    .map(|p| format!(
                        "{}/s {}/{}{}",
                        fmt_bytes(p.rate_target_bytes_per_s),
                        p.violations,
                        p.intervals,
                        if p.meets { "" } else { " (fails)" }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if r.interrupted {
        s.push_str("  interrupted: the figures cover what ran\n");
    }
    s
}

/// The frontier's line of the summary: the best fixed rate, its
/// intervals, the loop's share of it and the rule both were judged by.
fn frontier_line(v: &FrontierVerdict) -> String {
    let best = v.best_fixed_rate_bytes_per_s.and_then(|b| {
        v.points
            .iter()
            .find(|p| p.rate_target_bytes_per_s == b)
            .map(|p| {
                format!(
                    " ({} of {} intervals past the bound)",
                    p.violations, p.intervals
                )
            })
    });
    let rule = if v.rule.is_empty() {
        // A result from before the rule: each pass's mean decided.
        "the mean of each pass under the bound".to_string()
    } else {
        format!("{}, as the loop after settling", v.rule)
    };
    format!(
        "  frontier  {:<24} best fixed rate meeting it {}{}  closed loop delivers {} of it{}  rule: {rule}",
        v.slo,
        v.best_fixed_delivered_bytes_per_s
            .map_or("none".into(), |d| format!("{}/s", fmt_bytes(d))),
        best.unwrap_or_default(),
        v.closed_loop_share_of_best
            .map_or("-".into(), |x| format!("{x:.3}")),
        match v.closed_loop_within_budget {
            Some(true) => " (within the rule)",
            Some(false) => " (past the rule)",
            None => "",
        }
    )
}

fn polyline(c: &Canvas, pts: &[(f64, f64)], color: &str, dash: bool) -> String {
    let d: Vec<String> = pts
        .iter()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .map(|&(x, y)| format!("{:.1},{:.1}", c.px(x), c.py(y)))
        .collect();
    format!(
        r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.8"{}/>"##,
        d.join(" "),
        if dash {
            r#" stroke-dasharray="5 4""#
        } else {
            ""
        }
    )
}

/// Two stacked plots of one loop: rates, and the victim figure with the
/// bound.
pub fn loop_svgs(l: &LoopResult, unit: &str) -> (String, String) {
    let t_max = l.series.last().map_or(1.0, |p| p.t_s);
    let r_max = l
        .series
        .iter()
        .flat_map(|p| [Some(p.rate_target_bytes_per_s), p.delivered_bytes_per_s])
        .flatten()
        .map(mib)
        .fold(0.0, f64::max);
    let mut c = Canvas::new(
        860.0,
        260.0,
        Scale::Linear(0.0, t_max),
        Scale::Linear(0.0, nice_max(r_max)),
    );
    c.axes(
        &format!("Aggressor rate under SLO {}", l.slo.text),
        "time (s)",
        "MiB/s",
        &|v| format!("{v:.0}"),
        &|v| format!("{v:.0}"),
        true,
    );
    let target: Vec<(f64, f64)> = l
        .series
        .iter()
        .map(|p| (p.t_s, mib(p.rate_target_bytes_per_s)))
        .collect();
    let delivered: Vec<(f64, f64)> = l
        .series
        .iter()
        .filter_map(|p| p.delivered_bytes_per_s.map(|d| (p.t_s, mib(d))))
        .collect();
    let body =
        polyline(&c, &target, PALETTE[2], false) + &polyline(&c, &delivered, PALETTE[3], true);
    c.body.push_str(&body);
    c.legend(&[
        ("rate target".into(), PALETTE[2].into()),
        ("delivered".into(), PALETTE[3].into()),
    ]);
    let rates = c.finish("aggressor rate target and delivered rate over time");

    let m_max = l
        .series
        .iter()
        .map(|p| p.victim_metric)
        .chain([l.slo_limit, l.baseline])
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let mut c = Canvas::new(
        860.0,
        260.0,
        Scale::Linear(0.0, t_max),
        Scale::Linear(0.0, nice_max(m_max)),
    );
    c.axes(
        &format!("Victim {} against the bound", l.slo.stat.name()),
        "time (s)",
        &format!("{} ({unit})", l.slo.stat.name()),
        &|v| format!("{v:.0}"),
        &|v| format!("{v:.0}"),
        true,
    );
    let metric: Vec<(f64, f64)> = l.series.iter().map(|p| (p.t_s, p.victim_metric)).collect();
    let bound = [(0.0, l.slo_limit), (t_max, l.slo_limit)];
    let base = [(0.0, l.baseline), (t_max, l.baseline)];
    let mut body = polyline(&c, &metric, PALETTE[1], false)
        + &polyline(&c, &bound, PALETTE[0], true)
        + &polyline(&c, &base, PALETTE[4], true);
    for p in l.series.iter().filter(|p| p.violated) {
        let _ = write!(
            body,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{}"/>"##,
            c.px(p.t_s),
            c.py(p.victim_metric),
            PALETTE[1]
        );
    }
    c.body.push_str(&body);
    c.legend(&[
        ("victim".into(), PALETTE[1].into()),
        ("SLO bound".into(), PALETTE[0].into()),
        ("baseline".into(), PALETTE[4].into()),
    ]);
    (
        rates,
        c.finish("victim figure per interval against the SLO bound"),
    )
}

/// The frontier: delivered I/O rate (x) against victim slowdown (y) for
/// the fixed rates, with each loop's settled point.
pub fn frontier_svg(r: &ThrottleResult) -> Option<String> {
    if r.sweep.is_empty() {
        return None;
    }
    let stats: Vec<String> = {
        let mut s: Vec<String> = r
            .loops
            .iter()
            .map(|l| l.slo.stat.name().to_string())
            .collect();
        s.dedup();
        s
    };
    let slo_of = |stat: &str| r.loops.iter().find(|l| l.slo.stat.name() == stat);
    let slow = |stat: &str, v: f64| {
        let base = r.baseline.get(stat).copied().unwrap_or(f64::NAN);
        slo_of(stat).map_or(v / base, |l| l.slo.slowdown(v, base))
    };
    let x_max = r
        .sweep
        .iter()
        .filter_map(|p| p.delivered_bytes_per_s)
        .chain(
            r.loops
                .iter()
                .filter_map(|l| l.settled_delivered_bytes_per_s),
        )
        .map(mib)
        .fold(0.0, f64::max);
    let mut y_max: f64 = 1.0;
    for p in &r.sweep {
        for (k, &v) in &p.victim {
            y_max = y_max.max(slow(k, v));
        }
    }
    for l in &r.loops {
        y_max = y_max.max(l.settled_slowdown).max(l.slo_limit / l.baseline);
    }
    let mut c = Canvas::new(
        860.0,
        360.0,
        Scale::Linear(0.0, nice_max(x_max)),
        Scale::Linear(0.0, nice_max(y_max)),
    );
    c.axes(
        "I/O throughput against victim slowdown",
        "aggressor delivered MiB/s",
        "victim slowdown (x baseline)",
        &|v| format!("{v:.0}"),
        &|v| format!("{v:.2}"),
        true,
    );
    let mut legend = Vec::new();
    let mut body = String::new();
    for (i, stat) in stats.iter().enumerate() {
        let color = PALETTE[(1 + i) % PALETTE.len()];
        let mut by_rate: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
        for p in &r.sweep {
            if let (Some(d), Some(&v)) = (p.delivered_bytes_per_s, p.victim.get(stat)) {
                let (d, y) = (mib(d), slow(stat, v));
                let _ = write!(
                    body,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}" fill-opacity=".45"/>"##,
                    c.px(d),
                    c.py(y)
                );
                by_rate
                    .entry(p.rate_target_bytes_per_s.round() as u64)
                    .or_default()
                    .push((d, y));
            }
        }
        let mean: Vec<(f64, f64)> = by_rate
            .values()
            .map(|v| {
                let n = v.len() as f64;
                (
                    v.iter().map(|p| p.0).sum::<f64>() / n,
                    v.iter().map(|p| p.1).sum::<f64>() / n,
                )
            })
            .collect();
        body.push_str(&polyline(&c, &mean, color, false));
        legend.push((format!("fixed ({stat})"), color.to_string()));
    }
    for (i, l) in r.loops.iter().enumerate() {
        let color = PALETTE[(4 + i) % PALETTE.len()];
        let bound = l.slo_limit / l.baseline;
        let bound = if l.slo.op == crate::slo::Op::AtLeast {
            1.0 / bound
        } else {
            bound
        };
        body.push_str(&polyline(
            &c,
            &[(0.0, bound), (nice_max(x_max), bound)],
            color,
            true,
        ));
        if let Some(d) = l.settled_delivered_bytes_per_s {
            let (x, y) = (c.px(mib(d)), c.py(l.settled_slowdown));
            let _ = write!(
                body,
                r##"<path d="M{:.1},{:.1} l7,7 l-7,7 l-7,-7 z" fill="{color}" stroke="#111"/>"##,
                x,
                y - 7.0
            );
        }
        legend.push((format!("loop {}", short(&l.slo.text)), color.to_string()));
    }
    c.body.push_str(&body);
    c.legend(&legend);
    Some(c.finish(
        "frontier of I/O throughput against victim slowdown with the closed loops' settled points",
    ))
}

/// A document whose `result` is not a throttle result (serde's words).
#[derive(Debug, thiserror::Error)]
#[error("not a dmalab throttle result: {0}")]
pub struct NotAThrottleResult(serde_json::Error);

/// The whole HTML page of a throttle result document (`doc` is the JSON
/// the session wrote).
pub fn html(doc: &serde_json::Value) -> Result<(String, usize), NotAThrottleResult> {
    let r: ThrottleResult =
        serde_json::from_value(doc["result"].clone()).map_err(NotAThrottleResult)?;
    let mut plots = 0;
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>dmalab throttle</h1><p class=\"meta\">{} &middot; {} &middot; {}</p>",
        esc(doc["host"]["hostname"].as_str().unwrap_or("")),
        esc(doc["started_at"].as_str().unwrap_or("")),
        esc(doc["config"]["victim"].as_str().unwrap_or(""))
    );
    if let Some(svg) = frontier_svg(&r) {
        plots += 1;
        let _ = writeln!(
            body,
            "<h2>Frontier</h2><figure>{svg}<figcaption>Each dot is one pass at a fixed rate limit (the open loop); the line joins their means. Dashed lines are the SLO bounds; diamonds are where each closed loop settled (median of its last third).{}</figcaption></figure>",
            r.frontier
                .iter()
                .map(|v| format!(" {}.", esc(frontier_line(v).trim())))
                .collect::<String>()
        );
    }
    for l in &r.loops {
        let (a, b) = loop_svgs(l, &r.victim_unit);
        plots += 2;
        let _ = writeln!(
            body,
            "<h2>Closed loop: {}</h2><figure>{a}</figure><figure>{b}<figcaption>Dots mark intervals past the bound: {} of {} ({:.1}%; {} after settling). Settled at {}/s, settle time {}.</figcaption></figure>",
            esc(&l.slo.text),
            l.violations,
            l.series.len(),
            100.0 * l.violation_share,
            pct(l.violation_share_after_settle),
            l.settled_rate_bytes_per_s.map_or("-".into(), fmt_bytes),
            l.settle_time_s.map_or("never".into(), |t| format!("{t:.0} s"))
        );
    }
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"generator\" content=\"dmalab {}\"><title>dmalab throttle report</title><style>{}</style></head>\n<body data-plots=\"{plots}\">\n{body}</body></html>\n",
        esc(doc["tool"]["version"].as_str().unwrap_or("")),
        dmalab_run::draw::STYLE
    );
    Ok((html, plots))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{summarize_loop, Point, SweepPoint};
    use crate::slo::Slo;

    #[test]
    fn the_report_draws_series_frontier_and_settled_points() {
        let slo = Slo::parse("--slo", "p99 <= 1.5 x baseline").unwrap();
        let series: Vec<Point> = (0..12)
            .map(|k| Point {
                t_s: k as f64 + 1.0,
                rate_target_bytes_per_s: 1e8,
                delivered_bytes_per_s: Some(0.9e8),
                victim_metric: if k == 2 { 160.0 } else { 130.0 },
                slo_limit: 150.0,
                slack: 0.1,
                violated: k == 2,
            })
            .collect();
        let l = summarize_loop(&slo, 100.0, 150.0, series, 1.0, 0.1, (1e6, 1e9));
        let r = ThrottleResult {
            victim_unit: "ns".into(),
            baseline: [("p99".to_string(), 100.0)].into_iter().collect(),
            loops: vec![l],
            sweep: [(5e7, 110.0), (1e8, 130.0), (2e8, 180.0)]
                .iter()
                .map(|&(rate, m)| SweepPoint {
                    repeat: 0,
                    rate_target_bytes_per_s: rate,
                    delivered_bytes_per_s: Some(rate),
                    victim: [("p99".to_string(), m)].into_iter().collect(),
                    intervals: Vec::new(),
                })
                .collect(),
            frontier: Vec::new(),
            interrupted: false,
        };
        let doc = serde_json::json!({"result": r, "tool": {"version": "x"}});
        let (html, plots) = html(&doc).unwrap();
        assert_eq!(plots, 3);
        assert_eq!(html.matches("<svg").count(), 3);
        // One red dot for the one violation, one diamond for the loop.
        assert_eq!(html.matches("<circle").count(), 1 + 3);
        assert_eq!(html.matches("<path d=").count(), 1);
        assert!(html.contains("I/O throughput against victim slowdown"));
        let e = super::html(&serde_json::json!({"result": {}})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not a dmalab throttle result: missing field"),
            "{e}"
        );
    }
}
