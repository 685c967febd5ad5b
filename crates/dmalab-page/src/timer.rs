//! Timestamps around each access: the TSC (`rdtscp` or fenced `rdtsc`) on
//! x86-64, or `clock_gettime(CLOCK_MONOTONIC)` anywhere.
//!
//! pmbench reads the TSC frequency from CPUID leaves that AMD CPUs lack and
//! hangs there; we calibrate the TSC against CLOCK_MONOTONIC instead, which
//! works on every vendor and inside virtual machines.

use crate::config::TimerKind;
use std::time::{Duration, Instant};

/// A started clock: converts its ticks to nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timer {
    kind: TimerKind,
    /// Nanoseconds per tick.
    ns_per_tick: f64,
    origin: Instant,
}

impl Timer {
    /// Sets up `kind`, calibrating the TSC over about 50 ms. Falls back to
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
        if kind == TimerKind::Rdtscp && !cpu_flag("rdtscp") {
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
        t.ns_per_tick = t.calibrate();
        let warn = (!cpu_flag("constant_tsc")).then(|| {
            "the CPU does not report constant_tsc: TSC timings may drift with frequency changes"
                .to_string()
        });
        (t, warn)
    }

    fn calibrate(&self) -> f64 {
        // Best of three 20 ms windows: the one least disturbed by preemption.
        let mut best = f64::NAN;
        for _ in 0..3 {
            let w0 = Instant::now();
            let c0 = self.now();
            while w0.elapsed() < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            let c1 = self.now();
            let w1 = w0.elapsed();
            let r = w1.as_nanos() as f64 / (c1.wrapping_sub(c0)).max(1) as f64;
            if best.is_nan() || r < best {
                best = r;
            }
        }
        best
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
            #[cfg(target_arch = "x86_64")]
            TimerKind::Rdtscp => {
                let mut aux = 0u32;
                // SAFETY: rdtscp exists (checked in new()); it only reads
                // the TSC and writes the aux value into our local.
                unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
            }
            #[cfg(target_arch = "x86_64")]
            TimerKind::Rdtsc => {
                // SAFETY: lfence and rdtsc are baseline x86-64 instructions
                // without memory operands.
                unsafe {
                    core::arch::x86_64::_mm_lfence();
                    let t = core::arch::x86_64::_rdtsc();
                    core::arch::x86_64::_mm_lfence();
                    t
                }
            }
            _ => self.origin.elapsed().as_nanos() as u64,
        }
    }

    /// Converts a tick difference to nanoseconds.
    #[inline(always)]
    pub fn ns(&self, ticks: u64) -> u64 {
        (ticks as f64 * self.ns_per_tick) as u64
    }
}

/// True when /proc/cpuinfo lists `flag` for the first CPU.
pub fn cpu_flag(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("flags"))
                .map(|l| l.split_whitespace().any(|f| f == flag))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

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
