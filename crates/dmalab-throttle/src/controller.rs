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
//! * **PI** (the default): drives the slack to a set point `margin` (default
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
    #[default]
    Pi,
    /// Additive increase, multiplicative decrease (probes the bound).
    Aimd,
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
        if !(1.0..=64.0).contains(&self.pi_boost_max) {
            return Err(U::new("--pi-boost-max", "must be in [1, 64] (1: no boost)"));
        }
        Ok(())
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
}

impl Controller {
    /// Starts at `start` (clamped).
    pub fn new(p: Params, start: f64) -> Self {
        let rate = start.clamp(p.min_rate, p.max_rate);
        Self {
            integral: p.share_of_range(rate),
            p,
            rate,
            boost: 1.0,
        }
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
    struct Plant {
        k: f64,
        noise: Normal<f64>,
        rng: ChaCha8Rng,
        last_rate: f64,
    }

    impl Plant {
        fn new(k: f64, noise_sd: f64) -> Self {
            Self {
                k,
                noise: Normal::new(0.0, noise_sd).unwrap(),
                rng: ChaCha8Rng::seed_from_u64(1),
                last_rate: MIN,
            }
        }
        fn latency(&mut self, rate: f64) -> f64 {
            let seen = self.last_rate;
            self.last_rate = rate;
            BASE * (1.0 + self.k * (seen / MAX).powi(2)) * (1.0 + self.noise.sample(&mut self.rng))
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
            violations * 20 <= late.len(),
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
