//! The figures of a latency run, as they appear in the result.

use dmalab_core::hist::LatencySummary;
use dmalab_core::sys::tsc::{TimerCost, TscInfo};
use serde::{Deserialize, Serialize};

/// Clock-mode figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockFigures {
    /// Accesses made.
    pub accesses: u64,
    /// Time they took, nanoseconds.
    pub elapsed_ns: u64,
    /// Mean per access, nanoseconds.
    pub mean_ns: f64,
    /// Median over the ~1 ms chunks of each chunk's mean per access,
    /// nanoseconds: robust to the chunks a preemption lands in.
    pub median_chunk_ns: f64,
}

/// One clock/per-access round pair (mode `both`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RoundFigures {
    /// Clock-mode mean of this round, nanoseconds.
    pub clock_mean_ns: f64,
    /// Per-access mean of this round (timer cost subtracted), nanoseconds.
    pub per_access_mean_ns: f64,
    /// Wall time per access of the timed loop (timer, recording and all),
    /// nanoseconds.
    pub per_access_loop_ns: f64,
    /// per_access_mean_ns / clock_mean_ns.
    pub ratio: f64,
    /// Clock mode's median chunk mean, nanoseconds.
    pub clock_median_chunk_ns: f64,
    /// Per-access median batch mean, nanoseconds.
    pub per_access_median_batch_ns: f64,
    /// Per-access loop's median batch wall time per access, nanoseconds.
    pub per_access_loop_median_ns: f64,
    /// per_access_median_batch_ns / clock_median_chunk_ns: the same
    /// comparison with preempted windows left out.
    pub robust_ratio: f64,
}

/// Figures of one thread.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadLatency {
    /// CPU it ran on.
    pub cpu: usize,
    /// Bytes of its buffer backed by transparent huge pages (THP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thp_backed_bytes: Option<u64>,
    /// hugetlbfs pages added to the kernel's pool for this thread's buffer
    /// (the pool is restored afterwards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hugetlb_pages_added: Option<u64>,
    /// First touch and chain construction, nanoseconds.
    pub setup_ns: u64,
    /// Clock-mode figures (all clock rounds together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockFigures>,
    /// Per-access distribution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_access: Option<LatencySummary>,
    /// Wall time per access of the timed loop, nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_access_loop_ns: Option<f64>,
    /// Round pairs (mode `both`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<RoundFigures>,
}

/// Percentiles of one interval, all threads merged.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalFigures {
    /// Interval number, from 0.
    pub index: u64,
    /// Start of the interval since the measurement began, nanoseconds.
    pub start_ns: u64,
    /// Accesses in the interval (all threads).
    pub accesses: u64,
    /// Mean, nanoseconds (per-access mean, or clock mean when only clock
    /// rounds ran in it).
    pub mean_ns: f64,
    /// Median, nanoseconds (per-access intervals only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ns: Option<u64>,
    /// 90th percentile, nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90_ns: Option<u64>,
    /// 99th percentile, nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ns: Option<u64>,
    /// 99.9th percentile, nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_9_ns: Option<u64>,
    /// Largest sample, nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<u64>,
}

/// A cell of the NUMA latency matrix.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MatrixCell {
    /// Node whose CPU ran the probe.
    pub cpu_node: usize,
    /// Node the buffer was bound to.
    pub mem_node: usize,
    /// Per-access mean, nanoseconds.
    pub mean_ns: f64,
    /// Per-access median, nanoseconds.
    pub p50_ns: u64,
}

/// Result of `dmalab probe latency`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencyResult {
    /// TSC calibration and CPUID view.
    pub tsc: TscInfo,
    /// Timer cost measured at start-up.
    pub timer: TimerCost,
    /// Clock-mode figures, all threads (mean over all their accesses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockFigures>,
    /// Per-access distribution, all threads merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_access: Option<LatencySummary>,
    /// Per-thread figures.
    pub threads: Vec<ThreadLatency>,
    /// Per-interval figures (with `--interval`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalFigures>,
    /// NUMA latency matrix (with `--matrix`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matrix: Vec<MatrixCell>,
    /// Per-access figures smaller than the timer can resolve (absent when
    /// none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_timer_resolution: Option<BelowResolution>,
}

/// The per-access figures that lie below the timer's resolution: once the
/// bracket is subtracted, a sample shorter than the bracket itself (or than
/// one TSC step) is noise around zero, not a latency.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BelowResolution {
    /// The resolution, nanoseconds: the larger of the subtracted bracket
    /// and one TSC step.
    pub resolution_ns: f64,
    /// The figures below it, by name (`mean`, `p50`, `p90`, `p99`,
    /// `p99.9`, `max`).
    pub figures: Vec<String>,
}

/// The figures of the per-access line, by name, in the order printed.
pub const PER_ACCESS_FIGURES: [&str; 6] = ["mean", "p50", "p90", "p99", "p99.9", "max"];

/// The value of the per-access figure `name` in `sum`, nanoseconds.
pub fn figure_ns(sum: &LatencySummary, name: &str) -> Option<f64> {
    match name {
        "mean" => Some(sum.mean_ns),
        "max" => Some(sum.max_ns as f64),
        p => p
            .strip_prefix('p')
            .and_then(|q| q.parse::<f64>().ok())
            .and_then(|q| sum.p(q))
            .map(|v| v as f64),
    }
}

impl BelowResolution {
    /// The resolution of a per-access sample under `timer` and `tsc`.
    pub fn resolution_ns(tsc: &TscInfo, timer: &TimerCost) -> f64 {
        let step = if tsc.tsc_hz > 0.0 {
            tsc.ns(timer.tsc_step_cycles as f64)
        } else {
            0.0
        };
        timer.subtracted_ns.max(step)
    }

    /// The figures of `sum` below `resolution_ns`; None when there is none
    /// (or no resolution was measured).
    pub fn of(sum: &LatencySummary, resolution_ns: f64) -> Option<Self> {
        if sum.samples == 0 || resolution_ns <= 0.0 {
            return None;
        }
        let figures: Vec<String> = PER_ACCESS_FIGURES
            .iter()
            .filter(|n| figure_ns(sum, n).is_some_and(|v| v < resolution_ns))
            .map(|n| n.to_string())
            .collect();
        (!figures.is_empty()).then_some(BelowResolution {
            resolution_ns,
            figures,
        })
    }
}
