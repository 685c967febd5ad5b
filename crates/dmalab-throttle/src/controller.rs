//! The controllers: from the victim's slack in the last interval to the
//! aggressor's rate limit for the next.
//!
//! The slack is normalised ([`crate::slo::Slo::slack`]): 0.1 means the
//! figure was 10% inside its bound, -0.2 that it was 20% past it. Rates are
//! in the actuator's unit (bytes/s for `dmalab load`) and always clamped to
//! `[min, max]`.
//!
//! * **AIMD** (TCP's rule): past the bound, multiply the rate by `decrease`
//!   (default 0.7); otherwise add `increase` x (max - min) (default 0.05).
//!   It probes the bound continually, so it keeps a sawtooth and violates
//!   about once per tooth (a quarter of the intervals against the
//!   simulated plant at the defaults); it needs no model of the plant.
//! * **PI**: drives the slack to a set point `margin` (default
//!   0.1, i.e. 10% inside the bound, so interval-to-interval noise rarely
//!   crosses it) with output `u = kp x e + I`, `I += ki x b x e`, where
//!   `e = slack - margin` (at least -1) and `u` in [0, 1] maps onto
//!   [min, max] **logarithmically** (`rate = min x (max/min)^u`): a step of
//!   `u` is the same factor on the rate anywhere in the range, so the loop
//!   gain at the set point of a power-law plant does not depend on how much
//!   interference there is, and 20 MiB/s is as reachable as 1.2 GiB/s.
//!   `b`, the **climb boost**, doubles (up to `boost_max`, default 4) every
//!   interval the victim stays far inside its bound (`e > margin / 2`) below
//!   the top of the range, and returns to 1 otherwise: a victim the
//!   aggressor barely affects would hold the error small and constant and
//!   the integral would otherwise climb a 60x range in 30 to 40 intervals;
//!   with the boost it takes about 10. Defaults kp 0.1, ki 0.15 (per
//!   interval). Anti-windup by back-calculation: when `u` is clamped, `I` is
//!   set so that `kp x e + I` equals the clamped output, so a long stretch at
//!   `min` or `max` leaves no stored error.
//! * **Model** (the default): learns the plant online and sets the rate
//!   from what it learned, with the victim's own figures as the feedback
//!   around it; see [`Model`]. It reaches `max` within a few intervals
//!   when the victim does not respond, and does not creep: the PI's step
//!   is the error times a gain, and a victim far inside a tight bound
//!   gives a small error (issue 34: 40 intervals at 3% of the range).

use serde::{Deserialize, Serialize};

/// PI: the error is bounded below by this (an interval more than 100% past
/// its bound counts as 100% past), so one outlier of a steep plant does not
/// empty the integral.
pub const PI_ERROR_MIN: f64 = -1.0;

/// Which controller (`--controller`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Proportional-integral with anti-windup (holds a margin inside the bound).
    Pi,
    /// Additive increase, multiplicative decrease (probes the bound).
    Aimd,
    /// Learns the victim's figure against the rate and aims at the rate
    /// that leaves a margin inside the bound.
    #[default]
    Model,
}

/// Parameters of both controllers (each uses its own).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Which controller.
    pub kind: Kind,
    /// Lowest rate, actuator units per second.
    pub min_rate: f64,
    /// Highest rate, actuator units per second.
    pub max_rate: f64,
    /// AIMD: additive step per interval, as a share of (max - min).
    pub aimd_increase: f64,
    /// AIMD: factor applied to the rate on a violation.
    pub aimd_decrease: f64,
    /// PI: proportional gain (share of the logarithmic rate range per unit
    /// of slack).
    pub pi_kp: f64,
    /// PI: integral gain per interval.
    pub pi_ki: f64,
    /// PI: slack the controller aims for (0.1 = 10% inside the bound).
    pub pi_margin: f64,
    /// PI: the largest factor the climb boost multiplies the integral gain
    /// by (1: no boost).
    #[serde(default = "default_boost_max")]
    pub pi_boost_max: f64,
    /// Model: the share of the victim's interference budget (the slack it
    /// has with the aggressor idle) kept unused as a margin; the margin is
    /// also at least twice the figure's measured noise.
    #[serde(default = "default_model_margin")]
    pub model_margin: f64,
    /// Model: measure the victim at `min_rate`, then at `max_rate`, before
    /// the model takes over (two intervals each); learns the plant's range
    /// at once, at the price of up to two intervals past the bound at
    /// `max_rate` on a steep plant.
    #[serde(default)]
    pub model_probe: bool,
}

/// `model_margin` of results written before it existed (and the default).
fn default_model_margin() -> f64 {
    0.1
}

/// `pi_boost_max` of results written before it existed (and the default).
fn default_boost_max() -> f64 {
    4.0
}

impl Params {
    /// Documented defaults for `kind` between `min_rate` and `max_rate`.
    pub fn defaults(kind: Kind, min_rate: f64, max_rate: f64) -> Self {
        Self {
            kind,
            min_rate,
            max_rate,
            aimd_increase: 0.05,
            aimd_decrease: 0.7,
            pi_kp: 0.1,
            pi_ki: 0.15,
            pi_margin: 0.1,
            pi_boost_max: default_boost_max(),
            model_margin: default_model_margin(),
            model_probe: false,
        }
    }

    /// PI: where `rate` lies in the logarithmic range, 0 at `min_rate`, 1 at
    /// `max_rate`.
    fn share_of_range(&self, rate: f64) -> f64 {
        (rate / self.min_rate).ln() / (self.max_rate / self.min_rate).ln()
    }

    /// PI: the rate at `share` of the logarithmic range.
    fn rate_at_share(&self, share: f64) -> f64 {
        self.min_rate * (self.max_rate / self.min_rate).powf(share)
    }

    /// Checks the parameters; the error names the option.
    pub fn validate(&self) -> Result<(), dmalab_core::UsageError> {
        use dmalab_core::UsageError as U;
        if !(self.min_rate > 0.0 && self.min_rate < self.max_rate) {
            return Err(U::new("--min-rate", "must be above 0 and below --max-rate"));
        }
        if !(self.aimd_increase > 0.0 && self.aimd_increase <= 1.0) {
            return Err(U::new("--aimd-increase", "must be in (0, 1]"));
        }
        if !(self.aimd_decrease > 0.0 && self.aimd_decrease < 1.0) {
            return Err(U::new("--aimd-decrease", "must be in (0, 1)"));
        }
        if !(self.pi_kp >= 0.0 && self.pi_kp.is_finite()) {
            return Err(U::new("--pi-kp", "must be 0 or more"));
        }
        if !(self.pi_ki > 0.0 && self.pi_ki.is_finite()) {
            return Err(U::new("--pi-ki", "must be above 0"));
        }
        if !(0.0..1.0).contains(&self.pi_margin) {
            return Err(U::new("--pi-margin", "must be in [0, 1)"));
        }
        if !(self.model_margin > 0.0 && self.model_margin < 1.0) {
            return Err(U::new("--model-margin", "must be in (0, 1), e.g. 0.1"));
        }
        if !(1.0..=64.0).contains(&self.pi_boost_max) {
            return Err(U::new("--pi-boost-max", "must be in [1, 64] (1: no boost)"));
        }
        Ok(())
    }
}

/// Model: observations kept (the newest learning intervals), so a plant
/// that changes slowly is forgotten within this many intervals (a sudden
/// change is caught by [`MODEL_CHANGE`]).
const MODEL_WINDOW: usize = 24;
/// Model: observations at one rate averaged (the newest): enough that the
/// settled rate's figure is known to a third of its noise, so the rate
/// does not wander on noise (with 6, it moved by 10% at 2% noise).
const MODEL_PER_RATE: usize = 12;
/// Model: a rate whose figure is known from this many intervals is not
/// left on one interval past the bound when the model still aims there.
const MODEL_KNOWN: usize = 4;
/// Model: rates closer than this factor are one point of the model (the
/// same rate: two rates 1% apart differ on a steep plant by more than the
/// noise, and one point made of both would count that as noise).
const MODEL_SAME_RATE: f64 = 1.001;
/// Model: a lower rate within this factor of the current one is not set.
const MODEL_DEADBAND_DOWN: f64 = 1.01;
/// Model: the largest factor one move raises the rate by above the highest
/// rate observed (the model extrapolates no further than it has seen).
const MODEL_UP: f64 = 4.0;
/// Model: assumed exponent of the plant when one point is known and the
/// rate goes up (a steep plant: the cautious guess upwards).
const MODEL_P_UP: f64 = 3.0;
/// Model: assumed exponent when one point is known and the rate goes down
/// (a linear plant: the cautious guess downwards).
const MODEL_P_DOWN: f64 = 1.0;
/// Model: the margin is at least this many standard deviations of the
/// figure's noise (2.5: under 1% of intervals past the bound at the aim
/// with normal noise, leaving room for the outliers a shared host adds;
/// 2 gave 6 to 8% past the bound at 2% noise with one interval in 20 at
/// three times it; more costs rate on a plant whose budget is small).
const MODEL_NOISE_MARGIN: f64 = 2.0;
/// Model: an observation this many standard deviations (or 15% of the
/// budget, if more) away from the others at its rate means the plant
/// changed: everything learned before is dropped.
const MODEL_CHANGE: f64 = 4.0;
/// Model: the exponents a fitted slope is held to.
const MODEL_P_RANGE: (f64, f64) = (0.5, 4.0);
/// Model: a new rate within this factor of the current one is not set (no
/// dithering on noise).
const MODEL_DEADBAND: f64 = 1.03;

/// The plant-learning controller.
///
/// The victim's figure in the bound's units is `1 - slack`; with the
/// aggressor idle its slack is `s0` (the baseline's), so the aggressor's
/// **interference** at rate `r` is `e(r) = s0 - slack(r)`, and the SLO
/// allows `e <= s0`. The model is a power law between observed points,
/// `e = c x r^p` (a straight line in log-log), fitted locally: the point
/// whose interference is nearest the aim and a partner at least 10% away
/// in rate (on the other side of the aim when there is one) give `p`,
/// held to [0.5, 4]. The aim is `e* = s0 - margin`,
/// `margin = max(model_margin x s0, 2 sigma)`, sigma the figure's noise
/// measured at repeated rates that met the bound (the feedback: a noisier
/// victim is given more room). An interference below the noise floor is
/// not measurable: it counts as the floor (an upper estimate), and while
/// nothing is measurable the rate rises by [`MODEL_UP`] per move.
///
/// After every change the controller holds the rate for one interval and
/// does not learn from it: its figure is partly the old rate's (a victim
/// reports at the end of an interval whose first part ran at the old
/// rate), and a plant that answers one interval late is learned right.
///
/// Robust to single intervals: a figure far from what its rate gave before
/// is set aside, and only a second one on the same side counts as a
/// changed plant (then what was learned is dropped); an interval past the
/// bound by no more than the margin steps the rate down 3%, or not at all
/// when the rate's figure is known from [`MODEL_KNOWN`] intervals.
#[derive(Clone, Debug)]
pub struct Model {
    /// Slack of the baseline (the aggressor idle).
    s0: f64,
    /// Learning observations (rate, slack), newest last.
    obs: std::collections::VecDeque<(f64, f64)>,
    /// The rate in force in the interval before the current one.
    prev_rate: f64,
    /// Probe rates still to visit.
    probe: Vec<f64>,
    /// A figure far from what its rate gave before, not learned yet:
    /// (rate, slack, whether it was worse). One such figure is an outlier
    /// (another tenant's moment) and is dropped; a second on the same side
    /// at the next learning interval means the plant changed.
    suspect: Option<(f64, f64, bool)>,
}

impl Model {
    fn new(p: &Params, start: f64) -> Self {
        Self {
            s0: f64::NAN,
            obs: Default::default(),
            prev_rate: start,
            probe: if p.model_probe {
                vec![p.max_rate, p.min_rate]
            } else {
                Vec::new()
            },
            suspect: None,
        }
    }

    /// Points of the model: (rate, mean slack of its newest observations,
    /// count), sorted by rate.
    fn points(&self) -> Vec<(f64, f64, usize)> {
        let mut groups: Vec<(f64, Vec<f64>)> = Vec::new();
        for &(r, s) in self.obs.iter().rev() {
            match groups
                .iter_mut()
                .find(|(g, _)| (r / g).max(g / r) < MODEL_SAME_RATE)
            {
                Some((_, v)) => {
                    if v.len() < MODEL_PER_RATE {
                        v.push(s)
                    }
                }
                None => groups.push((r, vec![s])),
            }
        }
        let mut pts: Vec<(f64, f64, usize)> = groups
            .into_iter()
            .map(|(r, v)| (r, v.iter().sum::<f64>() / v.len() as f64, v.len()))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    }

    /// The figure's noise: pooled standard deviation of the slack at
    /// repeated rates (0 until a rate was seen twice).
    fn sigma(&self) -> f64 {
        // The newest observations per rate only: a step in the plant is
        // not noise, and ages out of them within a few intervals.
        let mut groups: Vec<(f64, Vec<f64>)> = Vec::new();
        for &(r, s) in self.obs.iter().rev() {
            match groups
                .iter_mut()
                .find(|(g, _)| (r / g).max(g / r) < MODEL_SAME_RATE)
            {
                Some((_, v)) => {
                    if v.len() < MODEL_PER_RATE {
                        v.push(s)
                    }
                }
                None => groups.push((r, vec![s])),
            }
        }
        // Where the victim meets its bound, when it does somewhere: that is
        // where the margin has to hold, and a figure far past its bound is
        // noisier (a latency's jitter grows with it), which would give a
        // margin wider than the noise at the aim.
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        // (None yet: unknown, 0; a rate past its bound is left anyway.)
        let (mut ss, mut dof) = (0.0, 0usize);
        for (_, v) in groups.iter().filter(|(_, v)| v.len() > 1 && mean(v) >= 0.0) {
            let m = v.iter().sum::<f64>() / v.len() as f64;
            ss += v.iter().map(|x| (x - m).powi(2)).sum::<f64>();
            dof += v.len() - 1;
        }
        if dof == 0 {
            0.0
        } else {
            (ss / dof as f64).sqrt()
        }
    }

    /// The slack the model keeps unused: `model_margin` of the budget, at
    /// least [`MODEL_NOISE_MARGIN`] standard deviations of the figure's
    /// noise, at most half the budget (a noisier victim gets more room,
    /// but noise alone does not hold the aggressor at its minimum).
    fn margin(&self, p: &Params) -> f64 {
        let s0 = if self.s0.is_finite() { self.s0 } else { 1.0 };
        (p.model_margin * s0)
            .max(MODEL_NOISE_MARGIN * self.sigma())
            .min(0.5 * s0)
    }

    /// The rate the model aims at, from what it learned.
    fn aim(&self, p: &Params, current: f64) -> f64 {
        let s0 = if self.s0.is_finite() { self.s0 } else { 1.0 };
        let sigma = self.sigma();
        let aim = s0 - self.margin(p);
        let pts = self.points();
        if aim <= 0.0 || pts.is_empty() {
            // Not even no DMA meets the bound with a margin: the least.
            return if pts.is_empty() { current } else { p.min_rate };
        }
        let highest = pts.last().map_or(current, |q| q.0);
        // Interference per point, floored at what the noise lets one see.
        let floor = |n: usize| (0.08 * s0).max(2.0 * sigma / (n as f64).sqrt());
        let e: Vec<(f64, f64, bool)> = pts
            .iter()
            .map(|&(r, s, n)| {
                let e = s0 - s;
                (r, e.max(floor(n)), e > floor(n))
            })
            .collect();
        let Some(&(r_ref, e_ref, _)) = e
            .iter()
            .filter(|q| q.2)
            .min_by(|a, b| (a.1 / aim).ln().abs().total_cmp(&(b.1 / aim).ln().abs()))
        else {
            // Nothing measurable yet: the victim does not respond so far.
            return (highest * MODEL_UP).min(p.max_rate);
        };
        let up = aim > e_ref;
        // The current rate is where it should be, within what the noise
        // lets one tell apart: stay (no dithering on noise).
        if let Some(&(_, s, n)) = pts
            .iter()
            .find(|q| (q.0 / current).max(current / q.0) < MODEL_SAME_RATE)
        {
            let e_cur = s0 - s;
            // One-sided: below the aim by noise is fine; above it only by
            // a little, or the margin would erode.
            let se = sigma / (n as f64).sqrt();
            let below = (2.0 * se).max(0.02 * s0);
            if n > 1 && s >= 0.0 && e_cur >= aim - below && e_cur <= aim + se {
                return current;
            }
        }
        // A partner at least 10% away in rate, nearest the reference; a
        // measurable one first (a floored one only bounds the slope).
        let far = |q: &&(f64, f64, bool)| (q.0 / r_ref).ln().abs() >= 1.1f64.ln();
        let nearest = |a: &&(f64, f64, bool), b: &&(f64, f64, bool)| {
            (a.0 / r_ref)
                .ln()
                .abs()
                .total_cmp(&(b.0 / r_ref).ln().abs())
        };
        // A measurable point on the other side of the aim first: between
        // two points that bracket it the model interpolates, where a
        // nearer partner on the same side extrapolates a slope that noise
        // can flatten (issue 34: at 2% noise two points 45% apart gave
        // p = 0.5, and the rate jumped to 2.6x the best one).
        let bracket = |q: &&(f64, f64, bool)| q.2 && ((q.1 > aim) == up) && ((q.0 > r_ref) == up);
        let partner = e
            .iter()
            .filter(far)
            .filter(bracket)
            .min_by(nearest)
            .or_else(|| e.iter().filter(far).filter(|q| q.2).min_by(nearest))
            .or_else(|| e.iter().filter(far).min_by(nearest));
        let slope = partner.map(|&(r2, e2, seen)| ((e2 / e_ref).ln() / (r2 / r_ref).ln(), seen));
        let expo = match slope {
            // A partner below the noise floor counts as the floor, an
            // upper estimate: the slope to it is a lower estimate, which
            // is the bold guess upwards.
            Some((k, false)) if k.is_finite() && up => k.max(MODEL_P_UP).min(MODEL_P_RANGE.1),
            Some((k, _)) if k.is_finite() => k.clamp(MODEL_P_RANGE.0, MODEL_P_RANGE.1),
            // Falling interference with rate is noise: treat as flat.
            Some(_) => MODEL_P_RANGE.0,
            None if up => MODEL_P_UP,
            None => MODEL_P_DOWN,
        };
        let mut want = r_ref * (aim / e_ref).powf(1.0 / expo);
        if want > current {
            // Upwards on what the noise cannot explain away: the reference
            // taken one standard error worse.
            let n_ref = pts.iter().find(|q| q.0 == r_ref).map_or(1, |q| q.2);
            let pessimistic = e_ref + sigma / (n_ref as f64).sqrt();
            want = (r_ref * (aim / pessimistic).powf(1.0 / expo)).max(current);
        }
        want.min(highest * MODEL_UP)
    }

    fn step(&mut self, p: &Params, rate: f64, slack: f64) -> f64 {
        let steady = rate == self.prev_rate;
        self.prev_rate = rate;
        if !steady {
            // Held one interval: its figure is partly the old rate's.
            return rate;
        }
        // A figure far from what this rate gave so far: an outlier (another
        // tenant's moment) or a changed plant (a new phase). One such
        // figure is set aside and the rate kept, so the next interval tells
        // which: a second on the same side means the plant changed and
        // what was learned is stale; a figure like the old ones means the
        // first was an outlier, and it is never learned. Dropping what was
        // learned on one figure made every outlier a detour of several
        // intervals (issue 34: a dip out of the settling band at 2% noise).
        let suspect = self.suspect.take();
        if let Some(&(_, s, _)) = self
            .points()
            .iter()
            .find(|q| (q.0 / rate).max(rate / q.0) < MODEL_SAME_RATE)
        {
            let s0 = if self.s0.is_finite() { self.s0 } else { 1.0 };
            // Only where the rate met the bound on average: past it the
            // loop is on its way down whatever the figure, and holding a
            // rate there to look again costs a violation.
            if s >= 0.0 && (slack - s).abs() > (MODEL_CHANGE * self.sigma()).max(0.15 * s0) {
                let worse = slack < s;
                match suspect {
                    Some((r1, s1, w1)) if w1 == worse => {
                        self.obs.clear();
                        self.obs.push_back((r1, s1));
                    }
                    _ => {
                        self.suspect = Some((rate, slack, worse));
                        return rate;
                    }
                }
            }
        }
        self.obs.push_back((rate, slack));
        if self.obs.len() > MODEL_WINDOW {
            self.obs.pop_front();
        }
        while let Some(next) = self.probe.pop() {
            if (next / rate).max(rate / next) >= MODEL_SAME_RATE {
                return next;
            }
        }
        let want = self.aim(p, rate).clamp(p.min_rate, p.max_rate);
        // Feedback: past the bound, never stay or rise. The model, which
        // has learned this figure, still puts the aim here: the figure is
        // the noise the margin allows for, so a small step down, well
        // within the settling band. Going back to the highest lower rate
        // that met the bound (up to 9% down) made such intervals dips out
        // of the band at 2% noise.
        if slack < 0.0 && want >= rate && slack < -self.margin(p) {
            // Past the bound by more than the margin: not the noise the
            // margin is for; back to the highest lower rate that met the
            // bound, or three steps down.
            let lower = self
                .points()
                .iter()
                .filter(|q| q.0 < rate / MODEL_SAME_RATE && q.1 >= 0.0)
                .map(|q| q.0)
                .next_back();
            return lower
                .unwrap_or(rate / MODEL_DEADBAND.powi(3))
                .max(p.min_rate);
        }
        if slack < 0.0 && want >= rate {
            // Unless the rate's figure is known from enough intervals
            // (this one included) that the model's verdict is not this
            // figure's: then the violation is the noise the margin was
            // sized for, and a step would trade that knowledge for one
            // interval's.
            let known = self
                .points()
                .iter()
                .find(|q| (q.0 / rate).max(rate / q.0) < MODEL_SAME_RATE)
                .is_some_and(|q| q.2 >= MODEL_KNOWN && q.1 >= 0.0);
            if !known {
                return (rate / MODEL_DEADBAND).max(p.min_rate);
            }
        }
        // Up only by a step worth an interval's hold; down by any step
        // the model asks for (the margin is the SLO's).
        if want > rate / MODEL_DEADBAND_DOWN && want < rate * MODEL_DEADBAND {
            rate
        } else {
            want
        }
    }
}

/// A controller's state.
#[derive(Clone, Debug)]
pub struct Controller {
    p: Params,
    rate: f64,
    integral: f64,
    /// PI: the climb boost (1 to `pi_boost_max`).
    boost: f64,
    /// Model: what it learned.
    model: Model,
}

impl Controller {
    /// Starts at `start` (clamped).
    pub fn new(p: Params, start: f64) -> Self {
        let rate = start.clamp(p.min_rate, p.max_rate);
        Self {
            integral: p.share_of_range(rate),
            model: Model::new(&p, rate),
            p,
            rate,
            boost: 1.0,
        }
    }

    /// Model: the slack the victim's baseline figure has against the bound
    /// (its interference budget; without it the model assumes 1).
    pub fn with_baseline_slack(mut self, s0: f64) -> Self {
        self.model.s0 = s0;
        self
    }

    /// The rate now in force.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// One control step: the slack seen in the last interval in, the rate
    /// for the next out.
    pub fn step(&mut self, slack: f64) -> f64 {
        let p = &self.p;
        let slack = if slack.is_finite() { slack } else { -1.0 };
        self.rate = match p.kind {
            Kind::Model => self.model.step(p, self.rate, slack),
            Kind::Aimd => {
                if slack < 0.0 {
                    self.rate * p.aimd_decrease
                } else {
                    self.rate + p.aimd_increase * (p.max_rate - p.min_rate)
                }
            }
            Kind::Pi => {
                let e = (slack - p.pi_margin).max(PI_ERROR_MIN);
                let far_below = e > p.pi_margin / 2.0 && self.rate < p.max_rate;
                if !far_below {
                    self.boost = 1.0;
                }
                self.integral += p.pi_ki * self.boost * e;
                let u = p.pi_kp * e + self.integral;
                let clamped = u.clamp(0.0, 1.0);
                if clamped != u {
                    // Back-calculation: store no error the output cannot use.
                    self.integral = clamped - p.pi_kp * e;
                }
                if far_below {
                    self.boost = (self.boost * 2.0).min(p.pi_boost_max);
                }
                p.rate_at_share(clamped)
            }
        }
        .clamp(p.min_rate, p.max_rate);
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, Normal};

    const MAX: f64 = 1000.0;
    const MIN: f64 = 10.0;
    const BASE: f64 = 100.0;

    /// The simulated plant: victim latency = base x (1 + k (rate/max)^2) x
    /// (1 + noise), seen one interval late (the figure of interval i is the
    /// one the rate of interval i-1 caused), as a probe that reports at the
    /// end of each interval sees it.
    ///
    /// With `outliers(every)`, one interval in `every` (at random) draws its
    /// noise at three times the usual standard deviation: a host whose
    /// other tenants now and then take the victim's CPU or cache.
    struct Plant {
        k: f64,
        noise: Normal<f64>,
        rng: ChaCha8Rng,
        last_rate: f64,
        /// One interval in this many is an outlier (0: none).
        outlier_every: u32,
    }

    impl Plant {
        fn new(k: f64, noise_sd: f64) -> Self {
            Self::seeded(k, noise_sd, 1)
        }
        fn seeded(k: f64, noise_sd: f64, seed: u64) -> Self {
            Self {
                k,
                noise: Normal::new(0.0, noise_sd).unwrap(),
                rng: ChaCha8Rng::seed_from_u64(seed),
                last_rate: MIN,
                outlier_every: 0,
            }
        }
        fn outliers(mut self, every: u32) -> Self {
            self.outlier_every = every;
            self
        }
        fn latency(&mut self, rate: f64) -> f64 {
            use rand::Rng;
            let seen = self.last_rate;
            self.last_rate = rate;
            let mut n = self.noise.sample(&mut self.rng);
            if self.outlier_every > 0 && self.rng.gen_ratio(1, self.outlier_every) {
                n *= 3.0;
            }
            BASE * (1.0 + self.k * (seen / MAX).powi(2)) * (1.0 + n)
        }
        /// Rate at which latency is `limit` x (1 - margin)... solved.
        fn rate_for(&self, latency: f64) -> f64 {
            (((latency / BASE) - 1.0) / self.k).max(0.0).sqrt() * MAX
        }
    }

    /// SLO: latency <= 1.5 x BASE. Runs `n` steps; (rates, slacks).
    fn drive(c: &mut Controller, plant: &mut Plant, n: usize) -> (Vec<f64>, Vec<f64>) {
        drive_to(1.5, c, plant, n)
    }

    /// SLO: latency <= `bound` x BASE. Runs `n` steps; (rates, slacks).
    fn drive_to(
        bound: f64,
        c: &mut Controller,
        plant: &mut Plant,
        n: usize,
    ) -> (Vec<f64>, Vec<f64>) {
        let limit = bound * BASE;
        let (mut rates, mut slacks) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let m = plant.latency(c.rate());
            let s = (limit - m) / limit;
            slacks.push(s);
            rates.push(c.step(s));
        }
        (rates, slacks)
    }

    fn pi() -> Params {
        Params::defaults(Kind::Pi, MIN, MAX)
    }

    fn spread(x: &[f64]) -> f64 {
        let hi = x.iter().cloned().fold(f64::MIN, f64::max);
        let lo = x.iter().cloned().fold(f64::MAX, f64::min);
        hi - lo
    }

    #[test]
    fn pi_converges_to_the_rate_that_leaves_the_margin() {
        let mut plant = Plant::new(2.0, 0.0);
        let mut c = Controller::new(pi(), MIN);
        let (rates, _) = drive(&mut c, &mut plant, 60);
        // The set point: slack 0.1, latency 0.9 x 1.5 x BASE.
        let want = plant.rate_for(0.9 * 1.5 * BASE);
        let last = rates[59];
        assert!((last - want).abs() < 0.02 * want, "{last} vs {want}");
    }

    #[test]
    fn pi_has_no_sustained_oscillation() {
        // A steep plant (latency x5 at full rate) and no noise: the last
        // 30 of 100 intervals hold the rate within 1% of the range.
        let mut plant = Plant::new(4.0, 0.0);
        let mut c = Controller::new(pi(), MAX);
        let (rates, _) = drive(&mut c, &mut plant, 100);
        assert!(spread(&rates[70..]) < 0.01 * MAX, "{:?}", &rates[60..]);
    }

    #[test]
    fn pi_holds_the_slo_under_noise_after_settling() {
        // 3% noise per interval against a 10% margin: past the bound in at
        // most 5% of the intervals after the first 20.
        let mut plant = Plant::new(2.0, 0.03);
        let mut c = Controller::new(pi(), MIN);
        let (_, slacks) = drive(&mut c, &mut plant, 220);
        let late = &slacks[20..];
        let violations = late.iter().filter(|&&s| s < 0.0).count();
        assert!(
            crate::slo::within_budget(violations, late.len()),
            "{violations} of {}",
            late.len()
        );
    }

    #[test]
    fn pi_recovers_after_a_step_in_the_plant() {
        let mut plant = Plant::new(1.0, 0.0);
        let mut c = Controller::new(pi(), MIN);
        drive(&mut c, &mut plant, 60);
        let before = c.rate();
        // The interference doubles (another tenant, a cache-hostile phase).
        plant.k = 2.0;
        let (rates, slacks) = drive(&mut c, &mut plant, 60);
        let want = plant.rate_for(0.9 * 1.5 * BASE);
        assert!(want < before);
        assert!(
            (rates[59] - want).abs() < 0.02 * want,
            "{} vs {want}",
            rates[59]
        );
        // Violations only in the few intervals right after the step.
        assert!(slacks[15..].iter().all(|&s| s >= 0.0), "{slacks:?}");
    }

    /// The first interval from which every rate stays within 5% of `want`.
    fn settled_from(rates: &[f64], want: f64) -> Option<usize> {
        (0..rates.len()).find(|&i| rates[i..].iter().all(|r| (r - want).abs() <= 0.05 * want))
    }

    #[test]
    fn pi_climbs_fast_from_far_below_when_the_victim_barely_responds() {
        // Regression (bench 2026-11-24, SLO 1.3 x baseline): a victim the
        // aggressor hardly slows holds the error small and constant, and the
        // linear PI climbed 1% to 90% of the range in 38 intervals.
        let mut plant = Plant::new(0.05, 0.0);
        let mut c = Controller::new(pi(), MIN);
        let (rates, slacks) = drive_to(1.3, &mut c, &mut plant, 40);
        let at = rates.iter().position(|&r| r >= 0.9 * MAX);
        assert!(at.is_some_and(|i| i < 15), "{rates:?}");
        assert_eq!(c.rate(), MAX);
        assert!(slacks.iter().all(|&s| s >= 0.0));
    }

    #[test]
    fn pi_converges_from_far_below_and_far_above_on_every_plant() {
        // Plants from mild (x1.5 at full rate) to steep (x51): the linear PI
        // took 31 intervals on the mild one and never settled on the steep
        // ones (full swings between the clamps).
        for k in [0.5, 2.0, 4.0, 8.0, 20.0, 50.0] {
            for start in [MIN, MAX] {
                let mut plant = Plant::new(k, 0.0);
                plant.last_rate = start;
                let mut c = Controller::new(pi(), start);
                let (rates, slacks) = drive(&mut c, &mut plant, 80);
                let want = plant.rate_for(0.9 * 1.5 * BASE);
                let settled = settled_from(&rates, want);
                assert!(
                    settled.is_some_and(|i| i <= 20),
                    "k {k} from {start}: {settled:?}, {rates:?}"
                );
                // No sustained oscillation, and past the bound only while
                // approaching.
                assert!(spread(&rates[50..]) < 0.005 * want, "k {k}: {rates:?}");
                let v = slacks.iter().filter(|&&s| s < 0.0).count();
                assert!(v <= 5, "k {k} from {start}: {v} violations");
            }
        }
    }

    #[test]
    fn pi_recovers_after_a_tenfold_step_in_the_plant() {
        let mut plant = Plant::new(2.0, 0.0);
        let mut c = Controller::new(pi(), MIN);
        drive(&mut c, &mut plant, 60);
        plant.k = 20.0;
        let (rates, slacks) = drive(&mut c, &mut plant, 60);
        let want = plant.rate_for(0.9 * 1.5 * BASE);
        assert!(
            settled_from(&rates, want).is_some_and(|i| i <= 20),
            "{rates:?}"
        );
        assert!(slacks[20..].iter().all(|&s| s >= 0.0), "{slacks:?}");
        // And back: the interference goes away, the rate climbs again.
        plant.k = 2.0;
        let (rates, _) = drive(&mut c, &mut plant, 60);
        let want = plant.rate_for(0.9 * 1.5 * BASE);
        assert!(
            settled_from(&rates, want).is_some_and(|i| i <= 20),
            "{rates:?}"
        );
    }

    #[test]
    fn pi_clamps_and_does_not_wind_up() {
        // Unreachable: even the lowest rate breaks the bound.
        let mut c = Controller::new(pi(), MAX);
        for _ in 0..200 {
            let r = c.step(-0.5);
            assert!((MIN..=MAX).contains(&r));
        }
        assert_eq!(c.rate(), MIN);
        // The pressure ends: a windup integrator would sit at MIN for about
        // 200 x 0.6 x ki / ki intervals; ours leaves at once.
        let r1 = c.step(0.5);
        assert!(r1 > MIN, "{r1}");
        // Always inside the bound: the rate rises to MAX and stays.
        for _ in 0..200 {
            c.step(1.0);
        }
        assert_eq!(c.rate(), MAX);
        assert!(c.step(-0.05) < MAX, "no stored surplus delays the decrease");
    }

    /// The model controller on the simulated plant with the SLO
    /// `latency <= 1.5 x BASE`: the slack of the baseline is 1/3.
    fn model(start: f64, probe: bool) -> Controller {
        let mut p = Params::defaults(Kind::Model, MIN, MAX);
        p.model_probe = probe;
        Controller::new(p, start).with_baseline_slack(1.0 - 1.0 / 1.5)
    }

    /// Plants from insensitive (x1.0 at full rate) to x50.
    const PLANTS: [f64; 9] = [0.0, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0, 49.0];

    /// Issue 34, done when: from either end, with and without the probe,
    /// on every plant, the loop settles (the session's own rule) within
    /// 10 intervals, at 0.9 of the best fixed rate meeting the SLO or
    /// more, and is past the bound in at most 5% of the intervals after.
    /// The figure's noise is 1% per interval (a quiet host's mean
    /// latency); noisier figures and outlier intervals are the next
    /// tests'.
    #[test]
    fn model_settles_fast_near_the_best_rate_on_every_plant() {
        for k in PLANTS {
            for start in [MIN, MAX] {
                for probe in [false, true] {
                    let mut plant = Plant::new(k, 0.01);
                    plant.last_rate = start;
                    let mut c = model(start, probe);
                    let (rates, slacks) = drive(&mut c, &mut plant, 60);
                    let best = if k == 0.0 {
                        MAX
                    } else {
                        plant.rate_for(1.5 * BASE).min(MAX)
                    };
                    let (settled, from) = crate::session::settling(&rates, 0.1);
                    let at = format!("k {k} from {start} probe {probe}: {rates:.0?}");
                    let from = from.unwrap_or_else(|| panic!("never settled; {at}"));
                    assert!(from <= 10, "settled from {from}; {at}");
                    let settled = settled.unwrap_or(f64::NAN);
                    assert!(settled >= 0.9 * best, "{settled} of {best}; {at}");
                    // The slack of interval i is the rate of i-1's doing.
                    let after = &slacks[from + 1..];
                    let v = after.iter().filter(|&&s| s < 0.0).count();
                    assert!(
                        crate::slo::within_budget(v, after.len()),
                        "{v} of {}; {at}",
                        after.len()
                    );
                }
            }
        }
    }

    /// What one run of the model controller on a simulated plant came to,
    /// judged as the session judges a loop.
    struct Judged {
        /// The settled rate as a share of the best fixed rate meeting the
        /// SLO (0 when the loop never settled).
        share: f64,
        /// The interval the loop settled from (`usize::MAX`: never).
        from: usize,
        /// Share of the intervals past the bound after settling.
        violations: f64,
        /// The rates, for the message.
        rates: Vec<f64>,
    }

    /// Runs the model controller for `n` intervals on the plant `k` with
    /// `noise` (and one outlier interval in `outliers` at three times the
    /// noise, 0: none), from `start`, seeded.
    fn judge(
        k: f64,
        noise: f64,
        outliers: u32,
        start: f64,
        probe: bool,
        seed: u64,
        n: usize,
    ) -> Judged {
        let mut plant = Plant::seeded(k, noise, seed).outliers(outliers);
        plant.last_rate = start;
        let mut c = model(start, probe);
        let (rates, slacks) = drive(&mut c, &mut plant, n);
        let best = if k == 0.0 {
            MAX
        } else {
            plant.rate_for(1.5 * BASE).min(MAX)
        };
        let (settled, from) = crate::session::settling(&rates, 0.1);
        let from = from.unwrap_or(usize::MAX);
        // The slack of interval i is the rate of i-1's doing.
        let after = slacks.get(from.saturating_add(1)..).unwrap_or(&[]);
        let v = after.iter().filter(|&&s| s < 0.0).count();
        Judged {
            share: settled.map_or(0.0, |s| s / best),
            from,
            violations: if after.is_empty() {
                1.0
            } else {
                v as f64 / after.len() as f64
            },
            rates,
        }
    }

    /// Every run of the robustness tests: each plant from either end,
    /// with and without the probe, over five seeds, for `n` intervals.
    fn runs(noise: f64, outliers: u32, n: usize) -> Vec<(String, Judged)> {
        let mut all = Vec::new();
        for k in PLANTS {
            for start in [MIN, MAX] {
                for probe in [false, true] {
                    for seed in 1..=5 {
                        let at = format!("k {k} from {start} probe {probe} seed {seed}");
                        all.push((at, judge(k, noise, outliers, start, probe, seed, n)));
                    }
                }
            }
        }
        all
    }

    /// The runs that miss the goal, for the message.
    fn misses(all: &[(String, Judged)]) -> Vec<String> {
        all.iter()
            .filter(|(_, j)| {
                j.from > 10 || j.share < 0.9 || j.violations > crate::slo::VIOLATION_BUDGET
            })
            .map(|(at, j)| {
                format!(
                    "{at}: settled from {} at {:.3} of best, {:.3} past the bound; {:.0?}",
                    j.from, j.share, j.violations, j.rates
                )
            })
            .collect()
    }

    /// Share of the intervals after settling past the bound, over all runs.
    fn pooled_violations(all: &[(String, Judged)]) -> f64 {
        let (mut v, mut n) = (0.0, 0.0);
        for (_, j) in all.iter().filter(|(_, j)| j.from < j.rates.len()) {
            let after = (j.rates.len() - j.from - 1) as f64;
            v += j.violations * after;
            n += after;
        }
        v / n
    }

    /// Issue 34, robustness, regression: at 1% noise with one interval in
    /// 20 an outlier at three times the noise, every run (each plant, from
    /// either end, with and without the probe, five seeds) settles within
    /// 10 intervals at 0.9 of the best fixed rate or more, past the bound
    /// in at most 5% of the intervals after settling. Before, one far
    /// figure dropped all that was learned and a violation sent the rate
    /// back to the last lower rate that met the bound: 25 of the 180 runs
    /// missed (dips out of the settling band).
    #[test]
    fn model_settles_near_the_best_rate_despite_outlier_intervals() {
        let all = runs(0.01, 20, 100);
        let missed = misses(&all);
        assert!(
            missed.is_empty(),
            "{} runs missed:\n{}",
            missed.len(),
            missed.join("\n")
        );
    }

    /// Issue 34, robustness at 2% noise with the same outliers: the goal
    /// holds on average but not in every run. The window is narrow: on the
    /// quadratic plant 0.9 of the best rate leaves 6.3% of slack, 2.5
    /// standard deviations of the figure's noise at the aim, so a rate
    /// estimated from a dozen noisy intervals lands on either side of it.
    /// Measured (180 runs): 170 settle within 10 intervals, the settled
    /// rate is 0.918 of the best on average (0.87 at the 1st percentile),
    /// 2.3% of the intervals after settling are past the bound, and 134
    /// runs meet all three goals. Before: 123 settled within 10, 0.816 of
    /// the best on average, 108 met all three.
    #[test]
    fn model_holds_near_the_best_rate_on_average_at_two_percent_noise() {
        let all = runs(0.02, 20, 100);
        let n = all.len() as f64;
        let settled = all.iter().filter(|(_, j)| j.from <= 10).count() as f64;
        assert!(settled >= 0.9 * n, "{settled} of {n} settled within 10");
        let mean = all.iter().map(|(_, j)| j.share).sum::<f64>() / n;
        assert!(mean >= 0.9, "mean share of the best rate {mean:.3}");
        let v = pooled_violations(&all);
        assert!(
            v <= crate::slo::VIOLATION_BUDGET,
            "{v:.3} of the intervals past the bound"
        );
    }

    /// Where the goal stops holding: at 5% noise no controller can keep
    /// 0.9 of the best rate with at most 5% of intervals past the bound
    /// (there the quadratic plant is 6.3% inside the bound, which 5% noise
    /// crosses in one interval in ten; 0.88 of the best is the most that
    /// allows 5%). What still holds is the bound: measured, 3.0% of the
    /// intervals after settling past it, at 0.83 of the best rate (median
    /// of the runs that settled), 73 of 180 runs settled within 10.
    #[test]
    fn model_keeps_the_bound_at_five_percent_noise() {
        let all = runs(0.05, 20, 100);
        let v = pooled_violations(&all);
        assert!(
            v <= crate::slo::VIOLATION_BUDGET,
            "{v:.3} of the intervals past the bound"
        );
    }

    /// Issue 34, item 3: the default `--intervals` is enough for the loop
    /// to settle, by the session's own rule (its last third holds still),
    /// on every simulated plant at 1% noise with outliers, near the best
    /// rate. With 20 the rule's last third would start at interval 14.
    #[test]
    fn the_default_intervals_suffice_to_settle_on_every_plant() {
        let n = crate::plan::DEFAULT_INTERVALS;
        let all = runs(0.01, 20, n);
        let missed: Vec<String> = all
            .iter()
            .filter(|(_, j)| j.from > 10 || j.share < 0.9)
            .map(|(at, j)| {
                format!(
                    "{at}: settled from {} at {:.3}; {:.0?}",
                    j.from, j.share, j.rates
                )
            })
            .collect();
        assert!(
            missed.is_empty(),
            "with {n} intervals:\n{}",
            missed.join("\n")
        );
    }

    #[test]
    fn model_reaches_the_maximum_within_a_few_intervals_on_an_insensitive_victim() {
        // Regression (issue 34): a victim at 1.01x against a 1.15x bound
        // held the PI's error small; it crept 3% of the range in 40
        // intervals. Here at 1.01x (k 0.01) against 1.15x.
        let mut plant = Plant::new(0.01, 0.0);
        let p = Params::defaults(Kind::Model, MIN, MAX);
        let mut c = Controller::new(p, MIN).with_baseline_slack(1.0 - 1.0 / 1.15);
        let (rates, slacks) = drive_to(1.15, &mut c, &mut plant, 12);
        let at = rates.iter().position(|&r| r == MAX);
        assert!(at.is_some_and(|i| i <= 6), "{rates:?}");
        assert!(slacks.iter().all(|&s| s >= 0.0));
    }

    #[test]
    fn model_follows_a_tenfold_step_in_the_plant_both_ways() {
        let mut plant = Plant::new(2.0, 0.0);
        let mut c = model(MIN, false);
        drive(&mut c, &mut plant, 30);
        plant.k = 20.0;
        let (rates, slacks) = drive(&mut c, &mut plant, 30);
        let best = plant.rate_for(1.5 * BASE);
        let (settled, from) = crate::session::settling(&rates, 0.1);
        assert!(from.is_some_and(|i| i <= 10), "{rates:?}");
        assert!(
            settled.is_some_and(|s| s >= 0.9 * best && s <= best),
            "{rates:?}"
        );
        assert!(slacks[8..].iter().all(|&s| s >= 0.0), "{slacks:?}");
        plant.k = 2.0;
        let (rates, _) = drive(&mut c, &mut plant, 30);
        let best = plant.rate_for(1.5 * BASE);
        let (settled, from) = crate::session::settling(&rates, 0.1);
        assert!(from.is_some_and(|i| i <= 10), "{rates:?}");
        assert!(settled.is_some_and(|s| s >= 0.9 * best), "{rates:?}");
    }

    #[test]
    fn model_stays_at_the_minimum_when_no_rate_meets_the_slo() {
        // The aggressor's presence alone breaks the bound (the victim at
        // 3x whatever the rate): the model stops climbing.
        let mut c = model(MAX, false);
        for _ in 0..30 {
            c.step(-1.0);
        }
        assert_eq!(c.rate(), MIN);
        for _ in 0..10 {
            assert_eq!(c.step(-1.0), MIN);
        }
    }

    #[test]
    fn aimd_saws_around_the_bound_without_growing() {
        let mut plant = Plant::new(2.0, 0.0);
        let mut c = Controller::new(Params::defaults(Kind::Aimd, MIN, MAX), MIN);
        let (rates, slacks) = drive(&mut c, &mut plant, 200);
        let bound = plant.rate_for(1.5 * BASE);
        // A sawtooth below and just over the rate at the bound ...
        let late = &rates[100..];
        assert!(late
            .iter()
            .all(|&r| r > 0.5 * bound && r < bound + 0.1 * MAX));
        // ... whose teeth do not grow: the same spread in both quarters.
        let (a, b) = (spread(&rates[100..150]), spread(&rates[150..]));
        assert!(b <= a * 1.05 + 1.0, "{a} then {b}");
        // It violates at the top of each tooth (teeth of about four
        // intervals at the defaults): about a quarter of the intervals.
        let v = slacks[100..].iter().filter(|&&s| s < 0.0).count();
        assert!(v > 0 && v * 3 < 100, "{v}");
    }

    #[test]
    fn aimd_clamps() {
        let mut c = Controller::new(Params::defaults(Kind::Aimd, MIN, MAX), MAX);
        for _ in 0..100 {
            c.step(-1.0);
        }
        assert_eq!(c.rate(), MIN);
        for _ in 0..100 {
            c.step(1.0);
        }
        assert_eq!(c.rate(), MAX);
    }

    #[test]
    fn parameters_are_checked() {
        let mut p = pi();
        assert!(p.validate().is_ok());
        p.min_rate = MAX;
        assert_eq!(p.validate().unwrap_err().option, "--min-rate");
        let mut p = pi();
        p.aimd_decrease = 1.0;
        assert_eq!(p.validate().unwrap_err().option, "--aimd-decrease");
        let mut p = pi();
        p.pi_boost_max = 0.5;
        assert_eq!(p.validate().unwrap_err().option, "--pi-boost-max");
    }
}
