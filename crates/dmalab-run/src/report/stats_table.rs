//! The statistics table: one row per cell.

use crate::analysis::{fmt_value, Cell};
use crate::draw::{bw_fmt, esc, rate_fmt};
use std::fmt::Write;

/// The statistics table: one row per cell.
pub(super) fn stats_table(cells: &[Cell], noisy_cv_pct: f64) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        r#"<h2>Statistics</h2><p class="meta">Mean, median and sample standard deviation of completed runs; 95% percentile-bootstrap interval of the mean (10,000 resamples, fixed seed); change = the change of the figure's mean against plain (bandwidth that fell is negative), worse or better by the figure's direction, with its bootstrap interval (the slowdown factor is in the CSV); Mann-Whitney U two-sided against plain (exact without ties for small samples). Noisy: coefficient of variation above {noisy_cv_pct}%.</p>
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
            match &c.ddio_not_applied {
                Some(d) => format!(
                    "{} (ddio {d} not applied)",
                    esc(&c.configuration),
                    d = esc(d)
                ),
                None => esc(&c.configuration),
            },
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
