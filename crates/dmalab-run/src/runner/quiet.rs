//! The quiet-host check before each run: other runnable tasks on the
//! victim's and the aggressor's CPUs, and steal time there, over a short
//! window. A run taken on a busy host is flagged in its record; with
//! `--require-quiet` the runner waits (bounded) for quiet, or fails the run
//! with the reason.

use crate::record::QuietCheck;
use dmalab_core::sys::sched;
use std::time::{Duration, Instant};

/// The window one check samples.
pub(super) const WINDOW: Duration = Duration::from_millis(200);
/// Samples of the runnable tasks in that window.
const SAMPLES: u32 = 5;
/// A host with this many other runnable tasks on the run's CPUs, on
/// average, is busy: half a CPU's worth of someone else's work.
pub(super) const BUSY_RUNNABLE: f64 = 0.5;
/// A host whose run CPUs lost this much of their time to steal is busy.
pub(super) const BUSY_STEAL_PCT: f64 = 5.0;
/// How long `--require-quiet` waits for quiet before it fails a run.
pub(super) const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// Whether a check's figures say busy, and why, in words.
pub(super) fn verdict(runnable_mean: f64, steal_pct: f64) -> Option<String> {
    let mut why = Vec::new();
    if runnable_mean >= BUSY_RUNNABLE {
        why.push(format!(
            "{runnable_mean:.1} other runnable tasks on the run's CPUs on average (limit {BUSY_RUNNABLE})"
        ));
    }
    if steal_pct >= BUSY_STEAL_PCT {
        why.push(format!(
            "{steal_pct:.1}% steal on the run's CPUs (limit {BUSY_STEAL_PCT}%)"
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// One check of `cpus` over [`WINDOW`], leaving out this process.
pub(super) fn check(cpus: &[usize]) -> QuietCheck {
    let me = std::process::id() as i32;
    let stat0 = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let t0 = Instant::now();
    let mut runnable = 0usize;
    for i in 0..SAMPLES {
        runnable += sched::runnable_on(cpus, me);
        if i + 1 < SAMPLES {
            std::thread::sleep(WINDOW / SAMPLES);
        }
    }
    let stat1 = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let total = sched::parse_total_ticks_on(&stat1, cpus)
        .saturating_sub(sched::parse_total_ticks_on(&stat0, cpus));
    let steal = sched::parse_steal_ticks_on(&stat1, cpus)
        .saturating_sub(sched::parse_steal_ticks_on(&stat0, cpus));
    let steal_pct = if total > 0 {
        100.0 * steal as f64 / total as f64
    } else {
        0.0
    };
    let runnable_mean = runnable as f64 / SAMPLES as f64;
    let busy = verdict(runnable_mean, steal_pct);
    QuietCheck {
        window_ns: dmalab_core::schema::ns(t0.elapsed()),
        runnable_mean,
        steal_pct,
        busy: busy.is_some(),
        reason: busy,
        waited_ns: 0,
    }
}

/// Checks until quiet or `limit` has passed (zero: once).
pub(super) fn check_until_quiet(cpus: &[usize], limit: Duration) -> QuietCheck {
    let t0 = Instant::now();
    loop {
        let mut q = check(cpus);
        q.waited_ns = dmalab_core::schema::ns(t0.elapsed());
        if !q.busy || t0.elapsed() >= limit || dmalab_core::signal::stop_requested() {
            return q;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_when_others_run_or_steal_is_high() {
        assert_eq!(verdict(0.0, 0.0), None);
        assert_eq!(verdict(0.4, 4.9), None);
        assert!(verdict(0.5, 0.0).unwrap().contains("runnable"));
        assert!(verdict(0.0, 5.0).unwrap().contains("steal"));
    }

    #[test]
    fn a_spinning_task_on_the_checked_cpu_makes_it_busy() {
        // A child spinning on CPU 0: the check of CPU 0 must see it in at
        // least one of its samples (it leaves out only this process).
        let mut child = std::process::Command::new("taskset")
            .args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let q = check(&[0]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(q.runnable_mean >= 0.2, "{q:?}");
    }
}
