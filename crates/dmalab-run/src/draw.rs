//! Just enough SVG plotting for the reports (run, throttle, result
//! documents): axes (linear or log), bars with
//! dots and error bars, lines, step curves, legends. Inline, no scripts.

use std::fmt::Write;

/// Series colours; `plain` is always the first.
pub const PALETTE: [&str; 8] = [
    "#7a7a7a", "#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
];

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An axis scale.
#[derive(Clone, Copy, Debug)]
pub enum Scale {
    /// Linear from `lo` to `hi`.
    Linear(f64, f64),
    /// Log10 from `lo` to `hi` (both > 0).
    Log(f64, f64),
}

impl Scale {
    /// Position in 0..=1.
    pub fn frac(&self, v: f64) -> f64 {
        match *self {
            Scale::Linear(lo, hi) => {
                if hi > lo {
                    (v - lo) / (hi - lo)
                } else {
                    0.5
                }
            }
            Scale::Log(lo, hi) => {
                let (l, h) = (lo.log10(), hi.log10());
                if h > l {
                    (v.max(lo).log10() - l) / (h - l)
                } else {
                    0.5
                }
            }
        }
    }

    /// Tick values.
    pub fn ticks(&self) -> Vec<f64> {
        match *self {
            Scale::Linear(lo, hi) => {
                let span = (hi - lo).abs();
                if span <= 0.0 || !span.is_finite() {
                    return vec![lo];
                }
                let raw = span / 5.0;
                let mag = 10f64.powf(raw.log10().floor());
                let step = [1.0, 2.0, 2.5, 5.0, 10.0]
                    .iter()
                    .map(|m| m * mag)
                    .find(|s| span / s <= 6.0)
                    .unwrap_or(10.0 * mag);
                let mut t = (lo / step).ceil() * step;
                let mut out = Vec::new();
                while t <= hi + step * 1e-9 && out.len() < 20 {
                    out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
                    t += step;
                }
                out
            }
            Scale::Log(lo, hi) => {
                let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
                (a..=b)
                    .map(|e| 10f64.powi(e))
                    .filter(|v| *v >= lo * 0.999 && *v <= hi * 1.001)
                    .collect()
            }
        }
    }
}

/// A "nice" linear range from zero (or the data's minimum) up to max.
pub fn nice_max(max: f64) -> f64 {
    if max.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !max.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * mag >= max * 1.05 {
            return m * mag;
        }
    }
    10.0 * mag
}

/// A plot canvas with a plotting area and two scales.
pub struct Canvas {
    /// SVG body so far.
    pub body: String,
    w: f64,
    h: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    /// X scale.
    pub x: Scale,
    /// Y scale.
    pub y: Scale,
}

impl Canvas {
    /// A canvas of `w`×`h` pixels.
    pub fn new(w: f64, h: f64, x: Scale, y: Scale) -> Self {
        Self {
            body: String::new(),
            w,
            h,
            left: 78.0,
            right: 150.0,
            top: 34.0,
            bottom: 52.0,
            x,
            y,
        }
    }

    /// Pixel x of a value.
    pub fn px(&self, v: f64) -> f64 {
        self.left + self.x.frac(v) * (self.w - self.left - self.right)
    }

    /// Pixel y of a value.
    pub fn py(&self, v: f64) -> f64 {
        self.h - self.bottom - self.y.frac(v) * (self.h - self.top - self.bottom)
    }

    /// Pixel x of a fraction of the plot width.
    pub fn fx(&self, f: f64) -> f64 {
        self.left + f * (self.w - self.left - self.right)
    }

    /// Width of the plotting area in pixels.
    pub fn plot_w(&self) -> f64 {
        self.w - self.left - self.right
    }

    /// Title, axes, ticks and labels. `fx`/`fy` format tick values;
    /// `x_ticks` false leaves the x ticks to the caller (categories).
    pub fn axes(
        &mut self,
        title: &str,
        xlabel: &str,
        ylabel: &str,
        fxv: &dyn Fn(f64) -> String,
        fyv: &dyn Fn(f64) -> String,
        x_ticks: bool,
    ) {
        let (l, r, t, b) = (
            self.left,
            self.w - self.right,
            self.top,
            self.h - self.bottom,
        );
        let _ = write!(
            self.body,
            r##"<text x="{:.1}" y="20" class="title">{}</text>"##,
            l,
            esc(title)
        );
        for v in self.y.ticks() {
            let y = self.py(v);
            let _ = write!(
                self.body,
                r##"<line x1="{l:.1}" x2="{r:.1}" y1="{y:.1}" y2="{y:.1}" class="grid"/><text x="{:.1}" y="{:.1}" class="tick" text-anchor="end">{}</text>"##,
                l - 6.0,
                y + 4.0,
                esc(&fyv(v))
            );
        }
        if x_ticks {
            for v in self.x.ticks() {
                let x = self.px(v);
                let _ = write!(
                    self.body,
                    r##"<line x1="{x:.1}" x2="{x:.1}" y1="{t:.1}" y2="{b:.1}" class="grid"/><text x="{x:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
                    b + 16.0,
                    esc(&fxv(v))
                );
            }
        }
        let _ = write!(
            self.body,
            r##"<rect x="{l:.1}" y="{t:.1}" width="{:.1}" height="{:.1}" class="frame"/><text x="{:.1}" y="{:.1}" class="label" text-anchor="middle">{}</text><text transform="translate(16 {:.1}) rotate(-90)" class="label" text-anchor="middle">{}</text>"##,
            r - l,
            b - t,
            (l + r) / 2.0,
            self.h - 10.0,
            esc(xlabel),
            (t + b) / 2.0,
            esc(ylabel)
        );
    }

    /// A legend at the right.
    pub fn legend(&mut self, items: &[(String, String)]) {
        let x = self.w - self.right + 12.0;
        for (i, (name, color)) in items.iter().enumerate() {
            let y = self.top + 8.0 + i as f64 * 18.0;
            let _ = write!(
                self.body,
                r##"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{:.1}" class="tick">{}</text>"##,
                y - 10.0,
                x + 17.0,
                y,
                esc(name)
            );
        }
    }

    /// Finishes the SVG element.
    pub fn finish(self, aria: &str) -> String {
        format!(
            r##"<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{}">{}</svg>"##,
            esc(aria),
            self.body,
            w = self.w,
            h = self.h
        )
    }
}

/// Bandwidth in decimal units, so that axis ticks (0.5, 1, 1.5 GB/s) read
/// as round numbers.
pub fn bw_fmt(v: f64) -> String {
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

/// A command rate with its unit (`12k/s`).
pub fn rate_fmt(v: f64) -> String {
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
