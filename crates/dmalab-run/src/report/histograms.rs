//! Latency histograms: every completed run's buckets merged per load.

use super::{color, label, load_labels, Figures};
use crate::draw::{esc, Canvas, Scale};
use crate::plan::PLAIN;
use crate::record::{latency_for, Results, RunRecord};
use dmalab_core::schema::RunStatus;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Buckets of all runs merged: lo_ns -> (hi_ns, count).
fn merged_buckets(runs: &[&RunRecord]) -> BTreeMap<u64, (u64, u64)> {
    let mut m: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for r in runs {
        let Some(lat) = latency_for(r) else {
            continue;
        };
        for b in lat.buckets {
            // Counts come from the file: a sum past u64 stays at its top.
            let e = m.entry(b.lo_ns).or_insert((b.hi_ns, 0));
            e.1 = e.1.saturating_add(b.count);
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
        let d = cv.step_path(
            b.iter()
                .map(|(lo, (hi, c))| (*lo, *hi, *c as f64 / *total as f64)),
            floor,
        );
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

/// The latency distributions of every load, overlaid as CDFs.
fn cdf(res: &Results, victim: &str, config: &str) -> Option<String> {
    let labels = load_labels(res);
    let series: Vec<(String, String, crate::draw::Buckets)> = labels
        .iter()
        .map(|l| {
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
            let b = merged_buckets(&runs)
                .into_iter()
                .map(|(lo, (hi, c))| (lo, hi, c))
                .collect();
            (l.clone(), color(&labels, l).to_string(), b)
        })
        .collect();
    crate::draw::cdf_plot(
        &format!("{victim} in {config}: latency, cumulative, plain against load"),
        &series,
        &format!("cdf: {victim} {config}"),
    )
}

/// Latency histograms per victim and configuration.
pub(super) fn latency_histograms(res: &Results, figs: &mut Figures) -> String {
    let h = &res.header;
    let mut section = String::new();
    for v in &h.victims {
        for c in &h.configurations {
            figs.fig(&mut section, hist_plot(res, &v.name, c), "Histogram buckets of every completed run merged per load, as share of all accesses; latency on a log scale.");
            figs.fig(&mut section, cdf(res, &v.name, c), "The same buckets as cumulative curves, one per load: the share of accesses at or below each latency (overlaid histograms are hard to read; these are not).");
        }
    }
    if section.is_empty() {
        return section;
    }
    format!("<h2>Latency distributions</h2>\n{section}")
}
