//! Timestamps around each access: the TSC (`rdtscp` or fenced `rdtsc`) on
//! x86-64, or `clock_gettime(CLOCK_MONOTONIC)` anywhere.
//!
//! pmbench reads the TSC frequency from CPUID leaves that AMD CPUs lack and
//! hangs there; we calibrate the TSC against CLOCK_MONOTONIC instead, which
//! works on every vendor and inside virtual machines. The calibration is the
//! one `dmalab probe` uses ([`dmalab_core::sys::tsc::calibrate`]), fed with
//! this timer's own tick reader.

use crate::config::TimerKind;
use dmalab_core::sys::clock::monotonic_ns;
use dmalab_core::sys::cpuinfo::has_cpu_flag;
use dmalab_core::sys::tsc::{calibrate, rdtsc_lfenced, rdtscp_bare, Clocks};
use std::time::Instant;

/// Calibration rounds and the length of each: three 20 ms windows, the
/// median kept (a window disturbed by preemption is an outlier).
const CALIBRATION_ROUNDS: usize = 3;
const CALIBRATION_WINDOW_NS: u64 = 20_000_000;

/// A started clock: converts its ticks to nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timer {
    kind: TimerKind,
    /// Nanoseconds per tick.
    ns_per_tick: f64,
    origin: Instant,
}

impl Timer {
    /// Sets up `kind`, calibrating the TSC over about 60 ms. Falls back to
    /// the clock (returned in the second field as a reason) where the TSC
    /// is not available.
    pub fn new(kind: TimerKind) -> (Self, Option<String>) {
        let origin = Instant::now();
        let clock = Self {
            kind: TimerKind::Clock,
            ns_per_tick: 1.0,
            origin,
        };
        if kind == TimerKind::Clock {
            return (clock, None);
        }
        if !cfg!(target_arch = "x86_64") {
            return (
                clock,
                Some(format!(
                    "--timer {}: not an x86-64 CPU; using clock",
                    kind.name()
                )),
            );
        }
        if kind == TimerKind::Rdtscp && !has_cpu_flag("rdtscp") {
            return (
                clock,
                Some("--timer rdtscp: the CPU lacks rdtscp; using clock".into()),
            );
        }
        let mut t = Self {
            kind,
            ns_per_tick: 1.0,
            origin,
        };
        let hz = calibrate(&mut Ticks(&t), CALIBRATION_WINDOW_NS, CALIBRATION_ROUNDS).tsc_hz;
        if !(hz.is_finite() && hz > 0.0) {
            return (
                clock,
                Some(format!(
                    "--timer {}: the TSC did not advance against the clock; using clock",
                    kind.name()
                )),
            );
        }
        t.ns_per_tick = 1e9 / hz;
        let warn = (!has_cpu_flag("constant_tsc")).then(|| {
            "the CPU does not report constant_tsc: TSC timings may drift with frequency changes"
                .to_string()
        });
        (t, warn)
    }

    /// The method actually in use.
    pub fn kind(&self) -> TimerKind {
        self.kind
    }

    /// Ticks per second.
    pub fn hz(&self) -> f64 {
        1e9 / self.ns_per_tick
    }

    /// A timestamp in ticks.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.kind {
            // new() picks these two only on x86-64, rdtscp only where the
            // CPU has it.
            TimerKind::Rdtscp => rdtscp_bare(),
            TimerKind::Rdtsc => rdtsc_lfenced(),
            TimerKind::Clock => self.origin.elapsed().as_nanos() as u64,
        }
    }

    /// Converts a tick difference to nanoseconds.
    #[inline(always)]
    pub fn ns(&self, ticks: u64) -> u64 {
        (ticks as f64 * self.ns_per_tick) as u64
    }
}

/// A timer's ticks paired with the monotonic clock, for the calibration.
struct Ticks<'a>(&'a Timer);

impl Clocks for Ticks<'_> {
    fn mono_ns(&mut self) -> u64 {
        monotonic_ns()
    }
    fn tsc(&mut self) -> u64 {
        self.0.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timers_agree_with_the_clock() {
        for kind in [TimerKind::Rdtscp, TimerKind::Rdtsc, TimerKind::Clock] {
            let (t, _) = Timer::new(kind);
            let w = Instant::now();
            let a = t.now();
            std::thread::sleep(Duration::from_millis(30));
            let b = t.now();
            let wall = w.elapsed().as_nanos() as f64;
            let got = t.ns(b - a) as f64;
            // Loose bound: a test must not assert wall-clock time tightly;
            // this only catches a wrong unit (x1000) or a dead counter.
            assert!(
                got > wall * 0.5 && got < wall * 2.0,
                "{kind:?}: {got} vs {wall}"
            );
        }
    }
}
