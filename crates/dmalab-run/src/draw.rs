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
    /// Log2 from `lo` to `hi` (both > 0): sizes and doubling counts, with
    /// a tick at powers of two.
    Log2(f64, f64),
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
            Scale::Log2(lo, hi) => {
                let (l, h) = (lo.log2(), hi.log2());
                if h > l {
                    (v.max(lo).log2() - l) / (h - l)
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
            Scale::Log2(lo, hi) => {
                if !(lo > 0.0 && hi.is_finite()) {
                    return vec![lo];
                }
                let (a, b) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
                // Every power of two, or every 2nd, 3rd... so that at most
                // nine ticks share the axis.
                let step = ((b - a) / 9 + 1).max(1) as usize;
                (a..=b).step_by(step).map(|e| 2f64.powi(e)).collect()
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
    /// Data units per axis unit on x and y (a value is divided by it before
    /// it is placed), so that the scales and their ticks are in the unit the
    /// axis title names.
    div: (f64, f64),
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
            div: (1.0, 1.0),
        }
    }

    /// A canvas whose scales are in the axis units `ux` and `uy`: data
    /// values given to [`Canvas::px`] and [`Canvas::py`] are in the data's
    /// own unit (bytes per second, nanoseconds) and are converted.
    pub fn with_units(w: f64, h: f64, x: Scale, y: Scale, ux: &AxisUnit, uy: &AxisUnit) -> Self {
        let mut c = Self::new(w, h, x, y);
        c.div = (ux.div, uy.div);
        c
    }

    /// Pixel x of a value (in the data's unit).
    pub fn px(&self, v: f64) -> f64 {
        self.left + self.x.frac(v / self.div.0) * (self.w - self.left - self.right)
    }

    /// Pixel y of a value (in the data's unit).
    pub fn py(&self, v: f64) -> f64 {
        self.h - self.bottom - self.y.frac(v / self.div.1) * (self.h - self.top - self.bottom)
    }

    /// A histogram's step outline as SVG path data: buckets `(lo, hi,
    /// share)` (`hi` inclusive, in order) join at their edges where they
    /// are contiguous; a gap in the data drops to the baseline `floor`
    /// (the share at the bottom of the axis) instead of being bridged.
    pub fn step_path(
        &self,
        buckets: impl IntoIterator<Item = (u64, u64, f64)>,
        floor: f64,
    ) -> String {
        let base = self.py(floor);
        let mut d = String::new();
        let mut prev: Option<(u64, f64)> = None;
        for (lo, hi, share) in buckets {
            let y = self.py(share.max(floor));
            let (x0, x1) = (self.px(lo as f64), self.px((hi + 1) as f64));
            match prev {
                Some((h, _)) if h + 1 == lo => {
                    let _ = write!(d, "L{x0:.1},{y:.1} L{x1:.1},{y:.1} ");
                }
                Some((_, px1)) => {
                    let _ = write!(
                        d,
                        "L{px1:.1},{base:.1} M{x0:.1},{base:.1} L{x0:.1},{y:.1} L{x1:.1},{y:.1} "
                    );
                }
                None => {
                    let _ = write!(d, "M{x0:.1},{base:.1} L{x0:.1},{y:.1} L{x1:.1},{y:.1} ");
                }
            }
            prev = Some((hi, x1));
        }
        if let Some((_, px1)) = prev {
            let _ = write!(d, "L{px1:.1},{base:.1}");
        }
        d
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
            let y = self.py(v * self.div.1);
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
                self.x_tick(v * self.div.0, &fxv(v));
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

    /// A vertical grid line at `v` (in the data's unit) with its label
    /// under the axis: the ticks [`Canvas::axes`] draws, or a caller's own
    /// (categories, sizes).
    pub fn x_tick(&mut self, v: f64, label: &str) {
        let (t, b) = (self.top, self.h - self.bottom);
        let x = self.px(v);
        let _ = write!(
            self.body,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{t:.1}" y2="{b:.1}" class="grid"/><text x="{x:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            b + 16.0,
            esc(label)
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
            r##"<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {w} {h}" preserveAspectRatio="xMidYMid meet" font-family="Helvetica, Arial, sans-serif" role="img" aria-label="{}"><style>{SVG_STYLE}</style>{}</svg>"##,
            esc(aria),
            self.body,
            w = self.w,
            h = self.h
        )
    }
}

/// Bandwidth in binary units (`19.92 GiB/s`), as every dmalab table
/// prints it; axes use [`AxisUnit::bandwidth`] instead, with the unit in
/// the title.
pub fn bw_fmt(v: f64) -> String {
    let u = AxisUnit::bandwidth(v);
    if u.div == 1.0 {
        format!("{v:.0} {}", u.name)
    } else {
        format!("{:.2} {}", v / u.div, u.name)
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
svg .title{font-size:15px;font-weight:600}svg .tick{font-size:13px;fill:#333}svg .small{font-size:12px;fill:#333}
svg .label{font-size:14px;fill:#222}svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}
svg .dot{fill:#111;fill-opacity:.75}svg .whisker{stroke:#111;stroke-width:1.3}
figure{max-width:760px}table.stats{border-collapse:collapse;font-size:.8em;max-width:100%}table.stats th,table.stats td{border:1px solid #ddd;padding:3px 6px;text-align:right;overflow-wrap:anywhere}
@media print{body{max-width:none;margin:0}table.stats{font-size:7pt;width:100%}figure{break-inside:avoid}}
table.stats th{background:#f4f4f4}table.stats td.l{text-align:left}tr.noisy td{background:#fff6e0}td.sig{font-weight:600}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:.85em}
"#;

/// The stylesheet inside every SVG, so that a figure saved on its own
/// (`report --figures DIR`) keeps its fonts and lines.
pub const SVG_STYLE: &str = ".title{font-size:15px;font-weight:600}.tick{font-size:13px;fill:#333}.small{font-size:12px;fill:#333}.label{font-size:14px;fill:#222}.grid{stroke:#eee}.frame{fill:none;stroke:#999}.dot{fill:#111;fill-opacity:.75}.whisker{stroke:#111;stroke-width:1.3}";

/// The unit an axis is drawn in: its name for the axis title and how many
/// of the data's own units make one of it.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisUnit {
    /// As printed in the title: `GiB/s`, `µs`.
    pub name: &'static str,
    /// Data units per axis unit.
    pub div: f64,
}

impl AxisUnit {
    /// Plain numbers, no unit.
    pub const NONE: AxisUnit = AxisUnit { name: "", div: 1.0 };

    /// Binary bandwidth units (bytes per second in), chosen so that `max`
    /// is at least 1 in them.
    pub fn bandwidth(max: f64) -> Self {
        let steps = [
            ("B/s", 1.0),
            ("KiB/s", 1024.0),
            ("MiB/s", 1048576.0),
            ("GiB/s", 1073741824.0),
            ("TiB/s", 1099511627776.0),
        ];
        Self::pick(&steps, max)
    }

    /// Time units (nanoseconds in).
    pub fn nanoseconds(max: f64) -> Self {
        Self::pick(&[("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9)], max)
    }

    /// Time units (seconds in).
    pub fn seconds(max: f64) -> Self {
        Self::pick(&[("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)], max)
    }

    /// Per-second rates with a decimal multiplier (`k`, `M`) in front of
    /// `what` (commands per second in).
    pub fn per_second(max: f64, what: &'static str) -> Self {
        let (name, div) = match what {
            "commands" => {
                if max >= 1e6 {
                    ("million commands/s", 1e6)
                } else if max >= 1e3 {
                    ("thousand commands/s", 1e3)
                } else {
                    ("commands/s", 1.0)
                }
            }
            _ => ("per second", 1.0),
        };
        Self { name, div }
    }

    /// The unit for a value in the data unit `unit` (`B/s`, `ns`, `s`,
    /// `commands/s`, or anything else, drawn as is).
    pub fn for_unit(unit: &str, max: f64) -> Self {
        match unit {
            "commands/s" => Self::per_second(max, "commands"),
            "B/s" => Self::bandwidth(max),
            "ns" => Self::nanoseconds(max),
            "s" => Self::seconds(max),
            _ => Self::NONE,
        }
    }

    fn pick(steps: &[(&'static str, f64)], max: f64) -> Self {
        let mut best = steps[0];
        for s in steps {
            if max.abs() >= s.1 {
                best = *s;
            }
        }
        Self {
            name: best.0,
            div: best.1,
        }
    }

    /// An axis title: `what (unit)`, or `what` alone without a unit.
    pub fn title(&self, what: &str) -> String {
        if self.name.is_empty() {
            what.to_string()
        } else {
            format!("{what} ({})", self.name)
        }
    }

    /// The axis scale from zero to a round number above `max` (data units).
    pub fn linear_to(&self, max: f64) -> Scale {
        Scale::Linear(0.0, nice_max(max / self.div))
    }
}

/// A tick label: a number in the axis unit, as short as it reads exactly.
pub fn tick(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() >= 1e7 {
        return format!("{v:.1e}");
    }
    if v.abs() < 1e-3 {
        return format!("{v}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Latency buckets of one series: (lo_ns, hi_ns, count), in order.
pub type Buckets = Vec<(u64, u64, u64)>;

/// Latency buckets (lo_ns, hi_ns, count) as one series: merged by
/// `lo_ns` (the first `hi_ns` of each kept) and in order.
pub fn buckets_of(buckets: impl IntoIterator<Item = (u64, u64, u64)>) -> Buckets {
    let mut m: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for (lo, hi, c) in buckets {
        let e = m.entry(lo).or_insert((hi, 0));
        e.1 = e.1.saturating_add(c);
    }
    m.into_iter().map(|(lo, (hi, c))| (lo, hi, c)).collect()
}

/// A log latency axis from the series' smallest to largest bucket: decades
/// in the unit of the smallest, so the ticks read 0.1, 1, 10, 100.
fn latency_axis(series: &[(String, String, Buckets)]) -> Option<(Scale, AxisUnit)> {
    let lo = series
        .iter()
        .filter_map(|s| s.2.first().map(|b| b.0))
        .min()?
        .max(1) as f64;
    let hi = series
        .iter()
        .filter_map(|s| s.2.last().map(|b| b.1))
        .max()? as f64;
    // The unit of the middle decade, so that the ticks stay short.
    let u = AxisUnit::nanoseconds((lo * hi.max(lo)).sqrt());
    let (a, b) = (
        10f64.powf((lo / u.div).log10().floor()),
        10f64.powf(((hi + 1.0) * 1.01 / u.div).log10().ceil()),
    );
    Some((Scale::Log(a, b.max(a * 10.0)), u))
}

/// Latency distributions as cumulative curves, one per series (the view
/// that stays readable when several are overlaid): the share of accesses
/// at or below each latency, read at each bucket's upper edge.
pub fn cdf_plot(title: &str, series: &[(String, String, Buckets)], aria: &str) -> Option<String> {
    let series: Vec<_> = series
        .iter()
        .filter(|s| s.2.iter().any(|b| b.2 > 0))
        .cloned()
        .collect();
    let (xs, ux) = latency_axis(&series)?;
    let share = AxisUnit {
        name: "%",
        div: 0.01,
    };
    let mut cv = Canvas::with_units(720.0, 380.0, xs, Scale::Linear(0.0, 100.0), &ux, &share);
    cv.axes(
        title,
        &format!("latency ({}, log scale)", ux.name),
        "accesses at or below (%)",
        &|v| tick(v),
        &|v| tick(v),
        true,
    );
    for (name, col, b) in &series {
        let total = b.iter().fold(0u64, |t, x| t.saturating_add(x.2)) as f64;
        let mut d = String::new();
        let mut cum = 0u64;
        for (i, (lo, hi, c)) in b.iter().enumerate() {
            let y0 = cv.py(cum as f64 / total);
            cum = cum.saturating_add(*c);
            let y1 = cv.py(cum as f64 / total);
            let (x0, x1) = (cv.px(*lo as f64), cv.px((*hi + 1) as f64));
            let _ = write!(
                d,
                "{}{x0:.1},{y0:.1} L{x1:.1},{y1:.1} ",
                if i == 0 { "M" } else { "L" }
            );
        }
        let _ = write!(
            cv.body,
            r##"<path d="{}" fill="none" stroke="{col}" stroke-width="2"><title>{} ({} samples)</title></path>"##,
            d.trim_end(),
            esc(name),
            total
        );
    }
    cv.legend(
        &series
            .iter()
            .map(|s| (s.0.clone(), s.1.clone()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(aria))
}

/// Latency histograms as step outlines on log-log axes (pmbench's view):
/// the share of accesses in each bucket; a gap in the buckets drops to the
/// baseline instead of being bridged.
pub fn histogram_plot(
    title: &str,
    series: &[(String, String, Buckets)],
    aria: &str,
) -> Option<String> {
    let series: Vec<_> = series
        .iter()
        .filter(|s| s.2.iter().any(|b| b.2 > 0))
        .cloned()
        .collect();
    let (xs, ux) = latency_axis(&series)?;
    let shares: Vec<f64> = series
        .iter()
        .flat_map(|s| {
            let t = s.2.iter().fold(0u64, |t, x| t.saturating_add(x.2)) as f64;
            s.2.iter().map(move |b| b.2 as f64 / t)
        })
        .filter(|v| *v > 0.0)
        .collect();
    let ymax = shares.iter().copied().fold(0.0, f64::max) * 100.0;
    let ymin = (shares.iter().copied().fold(1.0, f64::min) * 100.0).max(1e-5);
    let floor = 10f64.powf(ymin.log10().floor());
    let ys = Scale::Log(floor, 10f64.powf(ymax.log10().ceil()).max(floor * 10.0));
    let share = AxisUnit {
        name: "%",
        div: 0.01,
    };
    let mut cv = Canvas::with_units(720.0, 380.0, xs, ys, &ux, &share);
    cv.axes(
        title,
        &format!("latency ({}, log scale)", ux.name),
        "share of accesses (%, log scale)",
        &|v| tick(v),
        &|v| tick(v),
        true,
    );
    for (i, (name, col, b)) in series.iter().enumerate() {
        let total = b.iter().fold(0u64, |t, x| t.saturating_add(x.2)) as f64;
        let d = cv.step_path(
            b.iter().map(|&(lo, hi, c)| (lo, hi, c as f64 / total)),
            floor / 100.0,
        );
        let fill = if i == 0 { "0.2" } else { "0" };
        let _ = write!(
            cv.body,
            r##"<path d="{d}" fill="{col}" fill-opacity="{fill}" stroke="{col}" stroke-width="1.6"><title>{} ({total} samples)</title></path>"##,
            esc(name)
        );
    }
    cv.legend(
        &series
            .iter()
            .map(|s| (s.0.clone(), s.1.clone()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(aria))
}

/// One line of a [`line_plot`]: name, colour, and (x, y) points where a
impl Canvas {
    /// The 720 x 360 canvas with linear axes from 0 that fits `points`
    /// (the data's own units; points that are not finite are ignored),
    /// each axis in the unit [`AxisUnit::for_unit`] picks for its largest
    /// value; `None` when no point is finite. Line plots and the sweep's
    /// XY plots start here.
    pub fn linear_for(
        points: impl IntoIterator<Item = (f64, f64)>,
        xunit: &str,
        yunit: &str,
    ) -> Option<(Canvas, AxisUnit, AxisUnit)> {
        let pts: Vec<(f64, f64)> = points
            .into_iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        if pts.is_empty() {
            return None;
        }
        let xmax = pts.iter().map(|p| p.0).fold(0.0, f64::max);
        let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max);
        let (ux, uy) = (
            AxisUnit::for_unit(xunit, xmax),
            AxisUnit::for_unit(yunit, ymax),
        );
        let cv = Canvas::with_units(
            720.0,
            360.0,
            ux.linear_to(xmax),
            uy.linear_to(ymax),
            &ux,
            &uy,
        );
        Some((cv, ux, uy))
    }
}

/// `None` y is a gap (the line stops and starts again after it).
pub type Line = (String, String, Vec<(f64, Option<f64>)>);

/// Lines over x (time, an index), each broken where its data is missing;
/// `dashed` lines (targets) are drawn dashed. Units are the data's
/// (`B/s`, `ns`, `s`, or anything else, drawn as is).
pub fn line_plot(
    title: &str,
    (xwhat, xunit): (&str, &str),
    (ywhat, yunit): (&str, &str),
    lines: &[Line],
    dashed: &[Line],
    aria: &str,
) -> Option<String> {
    let all = lines.iter().chain(dashed.iter());
    let (mut cv, ux, uy) = Canvas::linear_for(
        all.flat_map(|l| l.2.iter().filter_map(|(x, y)| y.map(|y| (*x, y)))),
        xunit,
        yunit,
    )?;
    let unit_words = |u: &AxisUnit, unit: &str, what: &str| {
        if u.name.is_empty() && !unit.is_empty() {
            format!("{what} ({unit})")
        } else {
            u.title(what)
        }
    };
    cv.axes(
        title,
        &unit_words(&ux, xunit, xwhat),
        &unit_words(&uy, yunit, ywhat),
        &|v| tick(v),
        &|v| tick(v),
        true,
    );
    for (set, dash) in [(lines, ""), (dashed, r#" stroke-dasharray="6 4""#)] {
        for (name, col, p) in set {
            let mut d = String::new();
            let mut open = false;
            for (x, y) in p {
                match y {
                    Some(y) if y.is_finite() => {
                        let _ = write!(
                            d,
                            "{}{:.1},{:.1} ",
                            if open { "L" } else { "M" },
                            cv.px(*x),
                            cv.py(*y)
                        );
                        open = true;
                    }
                    _ => open = false,
                }
            }
            let _ = write!(
                cv.body,
                r##"<path d="{}" fill="none" stroke="{col}" stroke-width="2"{dash}><title>{}</title></path>"##,
                d.trim_end(),
                esc(name)
            );
            for (x, y) in p {
                if let Some(y) = y.filter(|y| y.is_finite()) {
                    let _ = write!(
                        cv.body,
                        r##"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{col}"/>"##,
                        cv.px(*x),
                        cv.py(y)
                    );
                }
            }
        }
    }
    cv.legend(
        &lines
            .iter()
            .chain(dashed.iter())
            .map(|s| (s.0.clone(), s.1.clone()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(aria))
}

/// One bar of a [`bar_plot`]: category, series, colour, value and, when
/// the value is a mean, its error bar (low, high).
pub type Bar = (String, String, String, f64, Option<(f64, f64)>);

/// Grouped bars: one group per category, one bar per series in it.
pub fn bar_plot(
    title: &str,
    (ywhat, yunit): (&str, &str),
    bars: &[Bar],
    aria: &str,
) -> Option<String> {
    let max = bars
        .iter()
        .map(|b| b.4.map_or(b.3, |e| e.1.max(b.3)))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let mut cats: Vec<&str> = Vec::new();
    let mut names: Vec<(&str, &str)> = Vec::new();
    for b in bars {
        if !cats.contains(&b.0.as_str()) {
            cats.push(&b.0);
        }
        if !names.iter().any(|n| n.0 == b.1) {
            names.push((&b.1, &b.2));
        }
    }
    if cats.is_empty() {
        return None;
    }
    let uy = AxisUnit::for_unit(yunit, max);
    let width = (240.0 + cats.len() as f64 * (names.len() as f64 * 30.0 + 30.0)).max(640.0);
    let mut cv = Canvas::with_units(
        width,
        360.0,
        Scale::Linear(0.0, 1.0),
        uy.linear_to(max),
        &AxisUnit::NONE,
        &uy,
    );
    let ytitle = if uy.name.is_empty() && !yunit.is_empty() {
        format!("{ywhat} ({yunit})")
    } else {
        uy.title(ywhat)
    };
    cv.axes(title, "", &ytitle, &|_| String::new(), &|v| tick(v), false);
    let gw = 1.0 / cats.len() as f64;
    let bw = gw * 0.8 / names.len() as f64;
    for (gi, c) in cats.iter().enumerate() {
        let _ = write!(
            cv.body,
            r##"<text x="{:.1}" y="{:.1}" class="tick" text-anchor="middle">{}</text>"##,
            cv.fx(gw * (gi as f64 + 0.5)),
            cv.py(0.0) + 18.0,
            esc(c)
        );
        for (ni, (n, col)) in names.iter().enumerate() {
            let Some(b) = bars.iter().find(|b| b.0 == *c && b.1 == *n) else {
                continue;
            };
            let x0 = cv.fx(gw * gi as f64 + gw * 0.1 + bw * ni as f64);
            let w = bw * cv.plot_w();
            let (y0, y1) = (cv.py(0.0), cv.py(b.3));
            let _ = write!(
                cv.body,
                r##"<rect x="{:.1}" y="{y1:.1}" width="{:.1}" height="{:.1}" fill="{col}" fill-opacity="0.6" stroke="{col}"><title>{} / {}: {}</title></rect>"##,
                x0 + 1.0,
                (w - 2.0).max(1.0),
                (y0 - y1).max(0.0),
                esc(c),
                esc(n),
                tick(b.3 / uy.div)
            );
            if let Some((lo, hi)) = b.4 {
                let xm = x0 + w / 2.0;
                let _ = write!(
                    cv.body,
                    r##"<path d="M{xm:.1},{:.1} L{xm:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}" class="whisker"/>"##,
                    cv.py(lo),
                    cv.py(hi),
                    xm - 4.0,
                    cv.py(lo),
                    xm + 4.0,
                    cv.py(lo),
                    xm - 4.0,
                    cv.py(hi),
                    xm + 4.0,
                    cv.py(hi)
                );
            }
        }
    }
    cv.legend(
        &names
            .iter()
            .map(|n| (n.0.to_string(), n.1.to_string()))
            .collect::<Vec<_>>(),
    );
    Some(cv.finish(aria))
}

/// Each plot of a report page on its own (`report --figures DIR`): a file
/// name (`03-cdf-lat_ns`, numbered in page order, from the plot's label)
/// and the SVG element, which carries its own stylesheet.
pub fn split_figures(html: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(a) = rest.find("<svg class=\"plot\"") {
        let Some(len) = rest[a..].find("</svg>") else {
            break;
        };
        let svg = &rest[a..a + len + "</svg>".len()];
        let label = svg
            .split("aria-label=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("figure");
        let slug: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .split('-')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        out.push((
            format!(
                "{:02}-{}",
                out.len() + 1,
                if slug.is_empty() { "figure" } else { &slug }
            ),
            format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{svg}\n"),
        ));
        rest = &rest[a + len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_scale_places_doublings_evenly_with_ticks_at_powers_of_two() {
        let s = Scale::Log2(4096.0, 1048576.0);
        assert_eq!(s.frac(4096.0), 0.0);
        assert_eq!(s.frac(1048576.0), 1.0);
        // 4K, 64K, 1M: 64K is halfway (2^12, 2^16, 2^20).
        assert!((s.frac(65536.0) - 0.5).abs() < 1e-12);
        assert_eq!(
            s.ticks(),
            (12..=20).map(|e| 2f64.powi(e)).collect::<Vec<_>>()
        );
        // A wide range thins its ticks to at most nine.
        let t = Scale::Log2(1.0, 2f64.powi(30)).ticks();
        assert!(t.len() <= 9 && t.len() >= 5, "{t:?}");
        assert_eq!(t[0], 1.0);
    }
}
