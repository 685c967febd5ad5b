//! The rate limiter: when may the k-th command (counted across all workers)
//! be submitted?
//!
//! The limiter hands out *due times* (nanoseconds since the run's start); it
//! never looks at completions, so a worker with a free queue slot submits as
//! soon as its command is due, however many earlier commands are still in
//! flight (fio's inline pacing instead drains the queue before it sleeps).
//!
//! * uniform, paced (default): due times evenly spaced, computed exactly from
//!   the cumulative bytes and commands before each command
//!   (`due = max(bytes_before / rate, commands_before / rate_iops)`), so
//!   there is no drift however long the run; each `--timeslot` gets exactly
//!   its budget, spread evenly through the slot.
//! * `--burst`: nvme-memload's behaviour: each slot's budget is released at
//!   the slot's start (`due = slot_start(floor(bytes_before / budget))`).
//! * `--arrival poisson`: exponential gaps with the target mean. Gaps are
//!   drawn in blocks of about one second's worth of commands and scaled so
//!   each block's sum is exact: that is a Poisson process conditioned on the
//!   number of arrivals per block (its arrival times are uniform order
//!   statistics), which keeps the run's mean rate exact instead of wandering
//!   by 1/sqrt(n), while the gaps stay exponentially distributed.
//!
//! Live rate changes (`--rate-control FILE`): the limiter looks at the
//! control page's generation before each command; on a new generation it
//! restarts its schedule at the later of now and the last due time it
//! handed out, with the new limits, so the change takes effect with the next
//! command (well within one timeslot) and the exact, drift-free spacing
//! holds again from there. Every change is kept, with its time, so the rate
//! checker can judge each window against the limit in force.
//!
//! The clock is a trait so the unit tests run the limiter against a mock.

use dmalab_core::ratecontrol::{Limits, RateControl};
use dmalab_core::sys::clock::monotonic_ns;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// Nanoseconds since the run's start.
pub trait Clock: Send + Sync {
    /// Now.
    fn now_ns(&self) -> u64;
    /// Sleeps until `ns` (returns at once when it has passed).
    fn sleep_until(&self, ns: u64);
}

/// The real clock: CLOCK_MONOTONIC relative to a start instant.
///
/// A reading is one `clock_gettime` (vDSO) less the start in nanoseconds:
/// `Instant::elapsed` also normalises a `timespec` difference into a
/// `Duration` and converts that back, which cost about 100 instructions
/// per reading, and a worker reads the clock twice per command (callgrind,
/// `--iodepth 1`).
#[derive(Clone, Copy, Debug)]
pub struct MonoClock {
    start: Instant,
    /// `start` as a CLOCK_MONOTONIC reading, ns (what `Instant` reads on
    /// Linux).
    start_ns: u64,
}

impl MonoClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        Self::from_instant(Instant::now())
    }

    /// A clock whose zero is `start`.
    pub fn from_instant(start: Instant) -> Self {
        // `Instant` offers no reading of its own: its nanoseconds are now's
        // less the time since it. The two reads are a few ns apart, so
        // this clock's zero is that much before `start`, never after it.
        let now = monotonic_ns();
        let since = dmalab_core::schema::ns(start.elapsed());
        Self {
            start,
            start_ns: now.saturating_sub(since),
        }
    }

    /// The start instant.
    pub fn start(&self) -> Instant {
        self.start
    }
}

impl Default for MonoClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonoClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_ns)
    }

    fn sleep_until(&self, ns: u64) {
        let now = self.now_ns();
        if ns > now {
            std::thread::sleep(std::time::Duration::from_nanos(ns - now));
        }
    }
}

/// `--arrival`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// Evenly spaced.
    Uniform,
    /// Exponentially distributed gaps (a Poisson process).
    Poisson,
}

/// The resolved limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSpec {
    /// Byte rate limit, bytes per second.
    pub rate_bytes_per_s: Option<u64>,
    /// Command rate limit, commands per second.
    pub rate_iops: Option<u64>,
    /// Budget period, nanoseconds.
    pub timeslot_ns: u64,
    /// Arrival process.
    pub arrival: Arrival,
    /// Release each slot's budget at the slot's start.
    pub burst: bool,
    /// Seed of the Poisson gaps.
    pub seed: u64,
}

impl RateSpec {
    /// True when any limit is set.
    pub fn limited(&self) -> bool {
        self.rate_bytes_per_s.is_some() || self.rate_iops.is_some()
    }

    /// Seconds one command of `bytes` costs under the limits.
    fn cost_s(&self, bytes: u64) -> f64 {
        let b = self
            .rate_bytes_per_s
            .map_or(0.0, |r| bytes as f64 / r as f64);
        let c = self.rate_iops.map_or(0.0, |r| 1.0 / r as f64);
        b.max(c)
    }
}

/// A change of the limits while the load ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateChange {
    /// When the new limits took effect, nanoseconds since the start.
    pub t_ns: u64,
    /// Byte rate limit from then on, bytes per second.
    pub rate_bytes_per_s: Option<u64>,
    /// Command rate limit from then on, commands per second.
    pub rate_iops: Option<u64>,
}

/// Hands out due times.
#[derive(Debug)]
pub struct Limiter {
    spec: RateSpec,
    bytes_before: u128,
    commands_before: u128,
    // The schedule restarts at `origin_ns` with these counts after a change.
    origin_ns: u64,
    bytes_at_origin: u128,
    commands_at_origin: u128,
    last_due: u64,
    last_bytes: u64,
    control: Option<Arc<RateControl>>,
    generation: u64,
    // The control page is read at most once per POLL_NS.
    next_poll_ns: u64,
    changes: Vec<RateChange>,
    // Poisson state.
    rng: ChaCha8Rng,
    gaps: Vec<f64>,
    next_gap: usize,
    due_s: f64,
}

impl Limiter {
    /// A limiter for `spec` (with no limit every command is due at 0).
    pub fn new(spec: RateSpec) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
            spec,
            bytes_before: 0,
            commands_before: 0,
            origin_ns: 0,
            bytes_at_origin: 0,
            commands_at_origin: 0,
            last_due: 0,
            last_bytes: 0,
            control: None,
            generation: 0,
            next_poll_ns: 0,
            changes: Vec::new(),
            gaps: Vec::new(),
            next_gap: 0,
            due_s: 0.0,
        }
    }

    /// The spec.
    pub fn spec(&self) -> &RateSpec {
        &self.spec
    }

    /// Follows the limits in `control` from now on (`--rate-control`). Only
    /// the kinds of limit the spec has are taken from the page; a zero for
    /// one of them is ignored.
    pub fn with_control(mut self, control: Arc<RateControl>) -> Self {
        // Just created by this load; a failure here shows at the first poll.
        self.generation = control.generation().unwrap_or(0) & !1;
        let _ = control.mark_applied(self.generation);
        self.control = Some(control);
        self
    }

    /// Every change of the limits so far.
    pub fn changes(&self) -> &[RateChange] {
        &self.changes
    }

    /// Applies a new generation of the control page, if there is one;
    /// `now_ns` is the caller's clock (ns since the start). The page is
    /// read (`pread`, not a mapping: see `dmalab_core::ratecontrol`) at
    /// most once per millisecond. A page that can no longer be read (it
    /// was truncated or removed from under the load) is said once on
    /// stderr and let go of: the load keeps the limits it has.
    pub fn poll_control(&mut self, now_ns: u64) {
        const POLL_NS: u64 = 1_000_000;
        let Some(ctl) = &self.control else { return };
        if now_ns < self.next_poll_ns {
            return;
        }
        self.next_poll_ns = now_ns.saturating_add(POLL_NS);
        let read = match ctl.read() {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "dmalab: warning: --rate-control: {e}; the load keeps its current limits ({}) and no longer follows the file",
                    self.describe_limits()
                );
                self.control = None;
                return;
            }
        };
        let Some((g, l)) = read else { return };
        if g == self.generation {
            return;
        }
        self.generation = g;
        let _ = ctl.mark_applied(g);
        self.apply(l, now_ns);
    }

    fn describe_limits(&self) -> String {
        let mut v = Vec::new();
        if let Some(b) = self.spec.rate_bytes_per_s {
            v.push(format!("{b} bytes/s"));
        }
        if let Some(c) = self.spec.rate_iops {
            v.push(format!("{c} commands/s"));
        }
        v.join(", ")
    }

    fn apply(&mut self, l: Limits, now_ns: u64) {
        let b = self.spec.rate_bytes_per_s.and(l.rate_bytes_per_s);
        let c = self.spec.rate_iops.and(l.rate_iops);
        let (b, c) = (b.or(self.spec.rate_bytes_per_s), c.or(self.spec.rate_iops));
        if (b, c) == (self.spec.rate_bytes_per_s, self.spec.rate_iops) {
            return;
        }
        // Restart at now when the schedule is idle; otherwise at the last
        // command handed out, which then counts as the new schedule's
        // first (the next one is due one gap at the new rate after it).
        let t = now_ns.max(self.last_due);
        self.origin_ns = t;
        self.bytes_at_origin = self.bytes_before;
        self.commands_at_origin = self.commands_before;
        if now_ns <= self.last_due && self.commands_before > 0 {
            self.bytes_at_origin -= u128::from(self.last_bytes);
            self.commands_at_origin -= 1;
        }
        self.spec.rate_bytes_per_s = b;
        self.spec.rate_iops = c;
        self.due_s = self.due_s.max(t as f64 / 1e9);
        self.changes.push(RateChange {
            t_ns: t,
            rate_bytes_per_s: b,
            rate_iops: c,
        });
    }

    /// Due time (ns since start) of the next command, which moves `bytes`.
    pub fn due_ns(&mut self, bytes: u64) -> u64 {
        let due = if !self.spec.limited() {
            0
        } else if self.spec.arrival == Arrival::Poisson {
            self.poisson_due(bytes)
        } else if self.spec.burst {
            self.burst_due()
        } else {
            self.paced_due()
        };
        self.bytes_before += u128::from(bytes);
        self.commands_before += 1;
        self.last_due = due;
        self.last_bytes = bytes;
        due
    }

    fn paced_due(&self) -> u64 {
        let bytes = self.bytes_before - self.bytes_at_origin;
        let commands = self.commands_before - self.commands_at_origin;
        let b = self
            .spec
            .rate_bytes_per_s
            .map_or(0, |r| bytes * 1_000_000_000 / u128::from(r));
        let c = self
            .spec
            .rate_iops
            .map_or(0, |r| commands * 1_000_000_000 / u128::from(r));
        u64::try_from(b.max(c) + u128::from(self.origin_ns)).unwrap_or(u64::MAX)
    }

    fn burst_due(&self) -> u64 {
        let slot = u128::from(self.spec.timeslot_ns.max(1));
        // Budget per slot, at least one unit so the limiter always advances.
        let slot_of = |before: u128, rate: u64| {
            let budget = (u128::from(rate) * slot / 1_000_000_000).max(1);
            before / budget
        };
        let b = self
            .spec
            .rate_bytes_per_s
            .map_or(0, |r| slot_of(self.bytes_before - self.bytes_at_origin, r));
        let c = self.spec.rate_iops.map_or(0, |r| {
            slot_of(self.commands_before - self.commands_at_origin, r)
        });
        u64::try_from(b.max(c) * slot + u128::from(self.origin_ns)).unwrap_or(u64::MAX)
    }

    fn poisson_due(&mut self, bytes: u64) -> u64 {
        if self.next_gap == self.gaps.len() {
            // About one second's worth of commands per block, 64 at least.
            let n = ((1.0 / self.spec.cost_s(bytes.max(1))).round() as usize).clamp(64, 1 << 20);
            self.gaps.clear();
            for _ in 0..n {
                let e: f64 = Exp1.sample(&mut self.rng);
                self.gaps.push(e);
            }
            let sum: f64 = self.gaps.iter().sum();
            let scale = n as f64 / sum;
            for g in &mut self.gaps {
                *g *= scale;
            }
            self.next_gap = 0;
        }
        let gap = self.gaps[self.next_gap] * self.spec.cost_s(bytes);
        self.next_gap += 1;
        self.due_s += gap;
        (self.due_s * 1e9) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MonoClock reads CLOCK_MONOTONIC itself; its zero must still be its
    /// start instant (the run's other clocks count from that instant).
    #[test]
    fn mono_clock_counts_from_its_start_instant() {
        let start = Instant::now() - std::time::Duration::from_millis(50);
        let clock = MonoClock::from_instant(start);
        let before = dmalab_core::schema::ns(start.elapsed());
        let reading = clock.now_ns();
        let after = dmalab_core::schema::ns(start.elapsed());
        assert!(before >= 50_000_000, "{before}");
        // Between the two elapsed readings, less the few ns the zero may
        // lie before `start` (two reads at construction); 100 us of slack
        // for a preempted thread between the reads of `from_instant`.
        assert!(reading + 100_000 >= before, "{reading} < {before}");
        assert!(reading <= after + 100_000, "{reading} > {after}");
        assert_eq!(clock.start(), start);
    }
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock that only moves when told to (sleeping moves it).
    struct MockClock(AtomicU64);

    impl Clock for MockClock {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
        fn sleep_until(&self, ns: u64) {
            self.0.fetch_max(ns, Ordering::SeqCst);
        }
    }

    fn spec() -> RateSpec {
        RateSpec {
            rate_bytes_per_s: None,
            rate_iops: None,
            timeslot_ns: 100_000_000,
            arrival: Arrival::Uniform,
            burst: false,
            seed: 7,
        }
    }

    /// Drives the limiter the way a worker does: sleep until due, submit.
    fn run(l: &mut Limiter, clock: &MockClock, n: usize, bytes: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let due = l.due_ns(bytes);
                clock.sleep_until(due);
                clock.now_ns()
            })
            .collect()
    }

    #[test]
    fn unlimited_is_always_due() {
        let mut l = Limiter::new(spec());
        assert!((0..100).all(|_| l.due_ns(4096) == 0));
    }

    #[test]
    fn paced_iops_is_evenly_spaced() {
        let clock = MockClock(AtomicU64::new(0));
        let mut l = Limiter::new(RateSpec {
            rate_iops: Some(1000),
            ..spec()
        });
        let t = run(&mut l, &clock, 5, 4096);
        assert_eq!(t, vec![0, 1_000_000, 2_000_000, 3_000_000, 4_000_000]);
    }

    #[test]
    fn paced_bytes_no_drift() {
        let clock = MockClock(AtomicU64::new(0));
        // 3 commands per second of 4096 bytes: 1/3 s is not a whole number
        // of nanoseconds, yet command 3000 is due at exactly 1000 s.
        let mut l = Limiter::new(RateSpec {
            rate_bytes_per_s: Some(3 * 4096),
            ..spec()
        });
        let t = run(&mut l, &clock, 3001, 4096);
        assert_eq!(t[1], 333_333_333);
        assert_eq!(t[3000], 1_000_000_000_000);
    }

    #[test]
    fn both_limits_take_the_stricter() {
        let mut l = Limiter::new(RateSpec {
            rate_bytes_per_s: Some(1 << 20),
            rate_iops: Some(10),
            ..spec()
        });
        let t: Vec<u64> = (0..3).map(|_| l.due_ns(4096)).collect();
        assert_eq!(t, vec![0, 100_000_000, 200_000_000]);
    }

    #[test]
    fn burst_releases_budget_at_slot_start() {
        let clock = MockClock(AtomicU64::new(0));
        // 100 commands/s, 100 ms slots: 10 commands at each slot start.
        let mut l = Limiter::new(RateSpec {
            rate_iops: Some(100),
            burst: true,
            ..spec()
        });
        let t = run(&mut l, &clock, 25, 4096);
        assert!(t[..10].iter().all(|&x| x == 0));
        assert!(t[10..20].iter().all(|&x| x == 100_000_000));
        assert!(t[20..].iter().all(|&x| x == 200_000_000));
    }

    #[test]
    fn a_live_change_restarts_the_schedule_at_the_new_rate() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rate");
        let initial = Limits {
            rate_bytes_per_s: None,
            rate_iops: Some(1000),
        };
        let ctl = Arc::new(RateControl::create(&p, initial).unwrap());
        let clock = MockClock(AtomicU64::new(0));
        let mut l = Limiter::new(RateSpec {
            rate_iops: Some(1000),
            ..spec()
        })
        .with_control(ctl.clone());
        let mut times = Vec::new();
        for k in 0..20 {
            if k == 10 {
                // The writer halves the rate (and tries to add a byte
                // limit the load was not started with: ignored).
                RateControl::open(&p)
                    .unwrap()
                    .unwrap()
                    .set(Limits {
                        rate_bytes_per_s: Some(1),
                        rate_iops: Some(500),
                    })
                    .unwrap();
            }
            l.poll_control(clock.now_ns());
            let due = l.due_ns(4096);
            clock.sleep_until(due);
            times.push(clock.now_ns());
        }
        // 1 ms apart up to command 9 (at 9 ms); the change applies at the
        // last due time, then 2 ms apart.
        assert_eq!(times[9], 9_000_000);
        assert_eq!(times[10], 11_000_000);
        assert_eq!(times[19], 29_000_000);
        assert_eq!(
            l.changes(),
            &[RateChange {
                t_ns: 9_000_000,
                rate_bytes_per_s: None,
                rate_iops: Some(500)
            }]
        );
        assert_eq!(ctl.applied().unwrap(), 2);
        assert_eq!(l.spec().rate_bytes_per_s, None);
    }

    #[test]
    fn poisson_mean_exact_and_gaps_exponential() {
        let mut l = Limiter::new(RateSpec {
            rate_iops: Some(1000),
            arrival: Arrival::Poisson,
            ..spec()
        });
        let t: Vec<u64> = (0..10_000).map(|_| l.due_ns(4096)).collect();
        // Ten blocks of 1000 commands, each block exactly one second.
        let last = t[9_999] as f64;
        assert!((last - 10e9).abs() < 1e3, "{last}");
        let mut gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e6).collect();
        let ks = crate::check::ks_exponential(&mut gaps, 1.0);
        assert!(ks.p_value > 0.01, "{ks:?}");
    }
}
