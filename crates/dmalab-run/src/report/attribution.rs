//! The report's attribution section: per loaded cell with a control cycle,
//! plain / control / loaded side by side (mean, 95% interval, each run),
//! the slowdown against plain and against the control, the DMA-attributable
//! share and the verdict; and, per cell, the victim-side evidence (its
//! preemptions, run-queue wait, migrations, interrupts, softirqs and steal
//! on its CPUs, the aggressor's CPU time), with the lost-CPU note beside
//! the slowdown where the evidence shows it.

use crate::analysis::{fmt_value, Cell};
use crate::draw::{esc, tick, AxisUnit, Canvas, Scale, PALETTE};
use crate::plan::PLAIN;
use std::fmt::Write;

/// A change of the figure, percent, with its sign.
fn pct(x: f64) -> String {
    format!("{x:+.2}%")
}

/// One plot: plain, control and loaded bars for one cell.
fn triple_plot(plain: &Cell, control: &Cell, loaded: &Cell) -> Option<String> {
    let bars = [(plain, "plain"), (control, "control"), (loaded, "loaded")];
    let top = bars
        .iter()
        .filter_map(|(c, _)| c.summary.as_ref().map(|s| s.ci_hi.max(s.mean)))
        .chain(bars.iter().flat_map(|(c, _)| c.values.iter().copied()))
        .fold(0.0f64, f64::max);
    if top <= 0.0 || !top.is_finite() {
        return None;
    }
    let unit = loaded.unit.as_str();
    // The axis is drawn in the unit its title names (GiB/s, µs), as the
    // victim bars are, so the ticks read in the title's unit.
    let uy = AxisUnit::for_unit(unit, top * 1.05);
    let mut cv = Canvas::with_units(
        460.0,
        260.0,
        Scale::Linear(0.0, 1.0),
        uy.linear_to(top * 1.05),
        &AxisUnit::NONE,
        &uy,
    );
    cv.axes(
        &format!(
            "{} · {} · {}",
            loaded.configuration, loaded.victim, loaded.load
        ),
        "",
        &uy.title(&loaded.victim),
        &|_| String::new(),
        &|v| tick(v),
        false,
    );
    let bw = cv.plot_w() / 3.0;
    for (i, (c, name)) in bars.iter().enumerate() {
        let x0 = cv.fx(0.0) + i as f64 * bw;
        let col = PALETTE[i % PALETTE.len()];
        if let Some(s) = &c.summary {
            let (y0, y1) = (cv.py(0.0), cv.py(s.mean));
            let xm = x0 + bw / 2.0;
            let _ = write!(
                cv.body,
                r##"<rect x="{:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="{col}" fill-opacity="0.55" stroke="{col}"><title>{name}: mean {} (n={})</title></rect><line x1="{xm:.1}" x2="{xm:.1}" y1="{:.1}" y2="{:.1}" class="whisker"/>"##,
                x0 + 8.0,
                (bw - 16.0).max(1.0),
                (y0 - y1).max(0.0),
                esc(&fmt_value(s.mean, unit)),
                s.n,
                cv.py(s.ci_lo),
                cv.py(s.ci_hi),
            );
        }
        for (k, v) in c.values.iter().enumerate() {
            let x = x0 + bw / 2.0 + ((k % 5) as f64 - 2.0) * bw * 0.06;
            let _ = write!(
                cv.body,
                r##"<circle cx="{x:.1}" cy="{:.1}" r="3" class="dot"><title>{}</title></circle>"##,
                cv.py(*v),
                esc(&fmt_value(*v, unit))
            );
        }
        let _ = write!(
            cv.body,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{name}</text>"##,
            x0 + bw / 2.0,
            cv.py(0.0) + 16.0
        );
    }
    Some(cv.finish(&format!(
        "plain, control and loaded: {} under {}",
        loaded.victim, loaded.load
    )))
}

/// The section; empty when no cell has a control cycle. Returns the HTML
/// and the number of plots in it.
pub fn section(cells: &[Cell]) -> (String, usize) {
    let attributed: Vec<&Cell> = cells.iter().filter(|c| c.attribution.is_some()).collect();
    let mut body = String::new();
    let mut plots = 0;
    if !attributed.is_empty() {
        body.push_str(r#"<h2>Attribution: DMA or the aggressor's CPU cost</h2><p class="meta">Each aggressor's control cycle runs the same CPU-side work (workers, iodepth, CPUs, pattern) paced at the command rate the aggressor reached, without moving data into host memory (docs/run.md). Controls run after their loads in odd repetitions (paced at that repetition's rate) and before them in even ones (paced at the previous repetition's), so a slow drift of the host falls on loads and controls alike; <i>control order</i> counts the control runs each way. Changes are of the figure itself (a bandwidth that fell is negative); vs control = the load against its control (worse: the DMA hurt); DMA share = (loaded − control) / (loaded − plain), with 95% bootstrap intervals, the samples resampled apart.</p>
<div class="scroll"><table class="stats"><tr><th>configuration</th><th>victim</th><th>load</th><th>vs plain</th><th>control vs plain</th><th>vs control</th><th>DMA share</th><th>control order</th><th>verdict</th></tr>
"#);
        for c in &attributed {
            let Some(a) = &c.attribution else { continue };
            let share = |x: f64| {
                if x.is_finite() {
                    format!("{x:.2}")
                } else {
                    "–".into()
                }
            };
            let vs_plain = match (c.change_pct, c.change_pct_ci) {
                (Some(s), Some(_)) if c.values.len() <= 2 => format!("{} [n too small]", pct(s)),
                (Some(s), Some((lo, hi))) => format!("{} [{} – {}]", pct(s), pct(lo), pct(hi)),
                _ => String::new(),
            };
            // At n <= 2 a bootstrap interval collapses: said, not drawn.
            let few = crate::analysis::attribution_n(c, a) <= 2;
            let ci = |x: String, (lo, hi): (String, String)| {
                if few {
                    format!("{x} [n too small]")
                } else {
                    format!("{x} [{lo} – {hi}]")
                }
            };
            let verdict = match &c.lost_cpu {
                Some(l) => format!("{}; {l}", a.verdict),
                None => a.verdict.clone(),
            };
            let _ = writeln!(
                body,
                r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td>{}</td><td>{} [{} – {}]</td><td>{}</td><td>{}</td><td class="l">{}</td><td class="l">{}</td></tr>"#,
                esc(&c.configuration),
                esc(&c.victim),
                esc(&c.load),
                esc(&vs_plain),
                pct(a.control_change_pct),
                pct(a.control_change_pct_ci.0),
                pct(a.control_change_pct_ci.1),
                esc(&ci(
                    pct(a.change_vs_control_pct),
                    (
                        pct(a.change_vs_control_pct_ci.0),
                        pct(a.change_vs_control_pct_ci.1)
                    )
                )),
                esc(&ci(
                    share(a.dma_share),
                    (share(a.dma_share_ci.0), share(a.dma_share_ci.1))
                )),
                esc(&a.control_order.describe()),
                esc(&verdict)
            );
        }
        body.push_str("</table></div>\n");
        for c in &attributed {
            let Some(a) = &c.attribution else { continue };
            let find = |load: &str| {
                cells.iter().find(|x| {
                    x.configuration == c.configuration
                        && x.victim == c.victim
                        && x.load == load
                        && x.sweep_value.is_none()
                })
            };
            if let (Some(p), Some(k)) = (find(PLAIN), find(&a.control_load)) {
                if let Some(svg) = triple_plot(p, k, c) {
                    plots += 1;
                    let _ = writeln!(
                        body,
                        "<figure>{svg}<figcaption>{}</figcaption></figure>",
                        esc(&format!(
                            "{} · {} under {}: {}",
                            c.configuration, c.victim, c.load, a.verdict
                        ))
                    );
                }
            }
        }
    }
    let with_ev: Vec<&Cell> = cells.iter().filter(|c| c.evidence.is_some()).collect();
    if !with_ev.is_empty() {
        body.push_str(r#"<h2>Victim-side evidence</h2><p class="meta">Means per run over the victim's exact window: its preemptions (involuntary context switches) and the share of its run it waited for a CPU (its main thread's run-queue wait), CPU migrations, interrupts and softirqs on its CPUs, steal on its CPUs, and the aggressor's CPU time as a share of one CPU.</p>
<div class="scroll"><table class="stats"><tr><th>configuration</th><th>victim</th><th>load</th><th>runs</th><th>preemptions</th><th>waited for a CPU</th><th>migrations</th><th>interrupts</th><th>softirqs</th><th>steal</th><th>aggressor CPU</th><th>note</th></tr>
"#);
        for c in with_ev {
            let Some(e) = &c.evidence else { continue };
            let n = |x: Option<f64>| x.map(|v| format!("{v:.0}")).unwrap_or_else(|| "–".into());
            let load = match &c.sweep_value {
                Some(s) => format!("{}@{s}", c.load),
                None => c.load.clone(),
            };
            let _ = writeln!(
                body,
                r#"<tr{}><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="l">{}</td></tr>"#,
                if c.lost_cpu.is_some() {
                    r#" class="noisy""#
                } else {
                    ""
                },
                esc(&c.configuration),
                esc(&c.victim),
                esc(&load),
                e.runs,
                n(e.nonvoluntary_ctxt_switches),
                e.run_delay_pct
                    .map(|v| format!("{v:.1}%"))
                    .unwrap_or_else(|| "–".into()),
                n(e.migrations),
                n(e.interrupts),
                n(e.softirqs),
                e.steal_ns
                    .map(|v| format!("{:.1} ms", v / 1e6))
                    .unwrap_or_else(|| "–".into()),
                e.aggressor_cpu_pct
                    .map(|v| format!("{v:.0}%"))
                    .unwrap_or_else(|| "–".into()),
                esc(c.lost_cpu.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</table></div>\n");
    }
    (body, plots)
}
