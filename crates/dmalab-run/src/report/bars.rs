//! The bar plots: each victim's figure per configuration and load.

use super::{color, label, load_labels, metric_words, Figures};
use crate::analysis::{fmt_value, Cell};
use crate::draw::{esc, tick, AxisUnit, Canvas, Scale};
use crate::experiment::Better;
use crate::record::Results;
use std::fmt::Write;

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
    let unit = meta.unit.clone();
    let uy = AxisUnit::for_unit(&unit, max);
    let nx = AxisUnit::NONE;
    let mut cv = Canvas::with_units(
        width,
        360.0,
        Scale::Linear(0.0, 1.0),
        uy.linear_to(max),
        &nx,
        &uy,
    );
    let better = if meta.better == Better::Lower {
        "lower is better"
    } else {
        "higher is better"
    };
    let words = metric_words(&meta.metric);
    cv.axes(
        &format!("{victim}: {words} per configuration ({better})"),
        "configuration",
        &uy.title(&words),
        &|_| String::new(),
        &|v| tick(v),
        false,
    );
    let group_w = 1.0 / configs.len() as f64;
    let bar_w = group_w * 0.8 / loads.len() as f64;
    let mut k = 0;
    for (gi, c) in configs.iter().enumerate() {
        let gx = cv.fx(group_w * (gi as f64 + 0.5));
        // A configuration whose DDIO setting the host could not make
        // measured the host's own state: say so under its name.
        let not_applied = cells
            .iter()
            .filter(|x| &x.configuration == *c)
            .find_map(|x| x.ddio_not_applied.as_deref());
        let name = match not_applied {
            Some(d) => format!("{c} (ddio {d} not applied)"),
            None => c.to_string(),
        };
        let _ = write!(
            cv.body,
            r##"<text x="{gx:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            cv.py(0.0) + 16.0,
            esc(&name)
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
/// and the change of the figure itself against plain (bandwidth -44%: the
/// slowdown factor is in the CSV, labelled as such); `names`
/// are the configuration and load.
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
    if let Some(c) = cell.change_pct.map(|p| p / 100.0) {
        let _ = write!(
            cv.body,
            r##"<text x="{:.1}" y="{:.1}" class="small" text-anchor="middle">{}</text>"##,
            x0 + bw / 2.0,
            cv.py(0.0) - 4.0,
            signed_pct(c)
        );
    }
}

/// A bar plot per victim: its figure under each load.
pub(super) fn victim_bars(res: &Results, cells: &[Cell], figs: &mut Figures) -> String {
    let h = &res.header;
    let mut section = String::new();
    for v in &h.victims {
        // An idle victim's figure is the duration it was told to sleep: a
        // bar of it says nothing (its counters are its result).
        if v.command == "idle" {
            continue;
        }
        let vc: Vec<&Cell> = cells.iter().filter(|c| c.victim == v.name).collect();
        figs.fig(
            &mut section,
            bar_plot(res, &v.name, &vc),
            &format!("Bars: mean of completed runs; dots: each run; whiskers: 95% bootstrap interval of the mean; labels: change of the figure itself against plain. Figure: {} ({}).", v.metric, v.command),
        );
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Victims under load</h2>\n{section}")
}

/// A change as a signed percentage with a true minus sign: `−44.4%`.
pub(super) fn signed_pct(c: f64) -> String {
    format!(
        "{}{:.1}%",
        if c < 0.0 { "\u{2212}" } else { "+" },
        (c * 100.0).abs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bandwidth_that_fell_reads_as_a_fall() {
        // quick.toml: 19.92 -> 11.07 GiB/s; the slowdown factor of a
        // higher-is-better figure is plain/loaded = 1.80.
        // The change is analysis' (one definition of a change).
        let c = crate::analysis::change_pct(19.92 / 11.07, Better::Higher) / 100.0;
        assert_eq!(signed_pct(c), "\u{2212}44.4%");
        let c = crate::analysis::change_pct(1.5, Better::Lower) / 100.0;
        assert_eq!(signed_pct(c), "+50.0%");
    }
}
