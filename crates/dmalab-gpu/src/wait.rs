//! How a worker waits for its copies (`--gpu-wait`), and the estimate of
//! when the oldest copy in flight completes that the `sleep` mode sizes its
//! sleeps from.
//!
//! `spin` and `block` are what CUDA calls `cudaDeviceScheduleSpin` and
//! `cudaDeviceScheduleBlockingSync`; `sleep` sits between them (where
//! `cudaDeviceScheduleYield` gives the CPU up between polls, `sleep` gives
//! it up for the time the copy is expected to take). For a tool
//! that measures what DMA does to *other* CPU work, a load generator that
//! keeps a CPU busy polling is itself an aggressor, so the choice is the
//! user's and the result records it.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a worker waits for a copy to complete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum GpuWait {
    /// Poll the copies' events continuously: the lowest latency, one CPU
    /// per worker kept busy.
    Spin,
    /// Poll, sleeping between polls for the time the oldest copy in flight
    /// is expected to take (from its bytes and the rate recently seen),
    /// never past the wait's timeout: little CPU. The default, chosen from
    /// measurements against `spin` and `block` (docs/gpu.md).
    #[default]
    Sleep,
    /// Sleep in the driver until the oldest copy's completion interrupt
    /// (events made with CU_EVENT_BLOCKING_SYNC, cuEventSynchronize); when
    /// a wait must end sooner than that copy, poll with sleeps as `sleep`.
    Block,
}

impl GpuWait {
    /// The name as `--gpu-wait` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuWait::Spin => "spin",
            GpuWait::Sleep => "sleep",
            GpuWait::Block => "block",
        }
    }
}

/// Shortest sleep: below it the system call costs more than it saves.
pub const MIN_NAP: Duration = Duration::from_micros(5);
/// Longest sleep before looking again, whatever the estimate says (one
/// stalled copy must not make the next waits oversleep for long).
pub const MAX_NAP: Duration = Duration::from_millis(10);
/// Sleep between polls while no copy has completed yet (no rate known).
pub const FIRST_NAP: Duration = Duration::from_micros(50);
/// Weight of the newest sample in the rate estimate, as a fraction 1/N.
const EWMA_N: f64 = 4.0;

/// The recent copy rate of one direction of one worker's queue, as
/// nanoseconds per byte, from the copies seen completing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pace {
    ns_per_byte: Option<f64>,
}

impl Pace {
    /// Takes `bytes` seen complete `busy` after the copy engine started on
    /// them (the later of their submission and the previous completion
    /// seen in that direction). Samples of no time are dropped.
    pub fn observe(&mut self, bytes: u64, busy: Duration) {
        if bytes == 0 || busy.is_zero() {
            return;
        }
        let x = busy.as_nanos() as f64 / bytes as f64;
        self.ns_per_byte = Some(match self.ns_per_byte {
            None => x,
            Some(old) => old + (x - old) / EWMA_N,
        });
    }

    /// How long a copy of `bytes` takes at the recent rate (None before
    /// any completion was seen).
    pub fn copy_time(&self, bytes: u64) -> Option<Duration> {
        let ns = (self.ns_per_byte? * bytes as f64).round();
        ns.is_finite()
            .then(|| Duration::from_nanos(ns.min(u64::MAX as f64) as u64))
    }
}

/// How long the `sleep` mode sleeps before polling again.
///
/// * `remaining`: time until the oldest copy in flight is expected to
///   complete (zero when it is due or late; None when no rate is known yet).
/// * `copy_time`: how long that copy is expected to take in all.
/// * `left`: time until the wait's timeout (None: no timeout).
///
/// Before the expected completion it sleeps 7/8 of the time left to it:
/// waking a little early, then polling in short naps, keeps the completion
/// times it sees (and so the rate it estimates) within a nap of the true
/// ones; sleeping the whole estimate would see each completion late, slow
/// the estimated rate, and sleep later and later. Once due, it naps 1/32 of
/// a copy. Always between [`MIN_NAP`] and [`MAX_NAP`], and never past the
/// timeout.
pub fn nap(
    remaining: Option<Duration>,
    copy_time: Option<Duration>,
    left: Option<Duration>,
) -> Duration {
    let d = match (remaining, copy_time) {
        (Some(r), _) if !r.is_zero() => r * 7 / 8,
        (Some(_), Some(c)) => c / 32,
        _ => FIRST_NAP,
    };
    let d = d.clamp(MIN_NAP, MAX_NAP);
    left.map_or(d, |l| d.min(l))
}

/// Whether the `sleep` mode polls without sleeping for now: only while the
/// oldest copy is the only one in flight (`alone`; the GPU then idles from
/// its completion until the next submission, so seeing it late costs
/// bandwidth, whereas with more in flight the next copies keep the link
/// busy), and only in its last stretch, from 1/8 of `copy_time` before the
/// expected completion to 1/8 after it (`remaining` before, `overdue`
/// after; a copy later than that is napped for, not spun on). Sleeping
/// through the end of a lone copy costs the link a wake-up per copy.
pub fn polls_last_stretch(
    alone: bool,
    remaining: Duration,
    overdue: Duration,
    copy_time: Duration,
) -> bool {
    alone && remaining <= copy_time / 8 && overdue <= copy_time / 8
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_rate_follows_the_completions_seen() {
        let mut p = Pace::default();
        assert_eq!(p.copy_time(1 << 20), None);
        // 64 MiB in 1.28 ms: 50 GiB/s-ish, 19.07 ps per byte.
        p.observe(64 << 20, 1280 * US);
        assert_eq!(p.copy_time(64 << 20), Some(1280 * US));
        assert_eq!(p.copy_time(32 << 20), Some(640 * US));
        // A slower copy moves the estimate a quarter of the way.
        p.observe(64 << 20, 2560 * US);
        assert_eq!(p.copy_time(64 << 20), Some(1600 * US));
        // Nothing learnt from nothing.
        p.observe(0, US);
        p.observe(4096, Duration::ZERO);
        assert_eq!(p.copy_time(64 << 20), Some(1600 * US));
    }

    #[test]
    fn a_nap_wakes_early_then_polls_in_small_steps() {
        // 1 ms to go: wake at 7/8 of it.
        assert_eq!(nap(Some(1000 * US), Some(1280 * US), None), 875 * US);
        // Due: 1/32 of the copy.
        assert_eq!(nap(Some(Duration::ZERO), Some(1280 * US), None), 40 * US);
        // Small copies: never below the floor.
        assert_eq!(nap(Some(2 * US), Some(4 * US), None), MIN_NAP);
        assert_eq!(nap(Some(Duration::ZERO), Some(4 * US), None), MIN_NAP);
        // No rate yet.
        assert_eq!(nap(None, None, None), FIRST_NAP);
        // A stale, huge estimate is capped.
        assert_eq!(nap(Some(Duration::from_secs(1)), None, None), MAX_NAP);
    }

    #[test]
    fn only_a_lone_copy_is_polled_through_its_last_eighth() {
        let c = 1280 * US;
        assert!(polls_last_stretch(true, 160 * US, Duration::ZERO, c));
        assert!(polls_last_stretch(true, Duration::ZERO, 160 * US, c));
        // Too early, too late, or others in flight keep the link busy.
        assert!(!polls_last_stretch(true, 161 * US, Duration::ZERO, c));
        assert!(!polls_last_stretch(true, Duration::ZERO, 161 * US, c));
        assert!(!polls_last_stretch(
            false,
            Duration::ZERO,
            Duration::ZERO,
            c
        ));
    }

    #[test]
    fn a_nap_never_passes_the_timeout() {
        assert_eq!(nap(Some(1000 * US), None, Some(100 * US)), 100 * US);
        assert_eq!(nap(None, None, Some(US)), US);
        assert_eq!(nap(None, None, Some(Duration::ZERO)), Duration::ZERO);
    }
}
