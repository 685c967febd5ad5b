//! `dmalab probe latency`: pointer chase (or another pattern) over a
//! first-touched buffer, timed two ways:
//! - **clock**: `CLOCK_MONOTONIC` around many steps; the average per access
//!   (the classic lmbench/MLC number, no timer in the loop);
//! - **per-access**: every access bracketed by `rdtscp; lfence`, the
//!   bracket's own median cost subtracted, converted with the calibrated TSC
//!   frequency and recorded into an hdrhistogram (1% relative error).
//!
//! The module is split by concern: [`result`] holds the figures that go
//! into the result, [`worker`] one pinned thread's buffer, walk and timed
//! loops, `intervals` the merging of live interval reports; this file
//! resolves nothing and only runs plans (threads, barriers, the NUMA matrix).
//! The pointer chain itself is built in [`crate::access`].

mod intervals;
pub mod result;
pub mod worker;

pub use result::{
    BelowResolution, ClockFigures, IntervalFigures, LatencyResult, MatrixCell, RoundFigures,
    ThreadLatency,
};
pub use worker::{IntervalCtx, IntervalMsg, PerAccessRun, Worker};

use crate::access::Pattern;
use crate::mem::PageKind;
use crate::ProbeError;
use dmalab_core::hist::LatHist;
use dmalab_core::sys::tsc::{rdtscp_fenced, TimerCost, TscInfo};
use intervals::IntervalCollector;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;
use worker::run_thread;

/// How accesses are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Clock around many steps; mean only.
    Clock,
    /// rdtscp+lfence around every access; full histogram.
    PerAccess,
    /// Alternate clock and per-access rounds on the same chain.
    Both,
}

impl Mode {
    /// Name as typed.
    pub fn name(self) -> &'static str {
        match self {
            Self::Clock => "clock",
            Self::PerAccess => "per-access",
            Self::Both => "both",
        }
    }
}

/// A fully resolved latency run (the `config` of the result).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyPlan {
    /// Buffer size per thread, bytes.
    pub size_bytes: usize,
    /// Page kind backing the buffer.
    pub pages: PageKind,
    /// Pages per chain group (0: one group over the whole buffer).
    pub group_pages: usize,
    /// Access pattern.
    pub pattern: Pattern,
    /// Share of accesses that also write, percent.
    pub write_pct: u32,
    /// CPU each thread is pinned to (one entry per thread).
    pub cpus: Vec<usize>,
    /// NUMA node the buffers are bound to, if any.
    pub membind: Option<usize>,
    /// Timing mode.
    pub mode: Mode,
    /// Clock/per-access rounds in mode `both`.
    pub rounds: usize,
    /// Measuring time (all rounds together), nanoseconds.
    pub runtime_ns: u64,
    /// Interval for live percentiles, nanoseconds (0: off).
    pub interval_ns: u64,
    /// Seed for the chain and the pattern.
    pub seed: u64,
}

/// Median of `v` (the upper one of an even count; 0 when empty); sorts `v`.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// True when this run should stop: its own flag or SIGINT/SIGTERM.
pub fn halted(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed) || dmalab_core::signal::stop_requested()
}

/// Start-up measurements shared by latency and loaded runs.
pub fn measure_timing() -> (TscInfo, TimerCost, Vec<String>) {
    let (tsc, warnings) = TscInfo::measure(20_000_000, 5);
    let timer = TimerCost::measure(20_000, tsc.tsc_hz);
    (tsc, timer, warnings)
}

/// Runs a latency plan. `on_interval` sees every interval as it completes.
/// Returns the result and warnings.
pub fn run(
    plan: &LatencyPlan,
    on_interval: &mut dyn FnMut(&IntervalFigures),
) -> Result<(LatencyResult, Vec<String>), ProbeError> {
    let (tsc, timer, mut warnings) = measure_timing();
    let halt = Arc::new(AtomicBool::new(false));
    let n = plan.cpus.len();
    let barrier = Arc::new(Barrier::new(n + 1));
    let (tx, rx) = mpsc::channel::<IntervalMsg>();
    let start_tsc = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let interval_cycles = (plan.interval_ns as f64 * tsc.tsc_hz / 1e9) as u64;
    let mut collector = IntervalCollector::new(n, plan.interval_ns);
    let results: Vec<Result<ThreadLatency, ProbeError>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, &cpu) in plan.cpus.iter().enumerate() {
            let (barrier, tx, halt, start_tsc) =
                (barrier.clone(), tx.clone(), halt.clone(), start_tsc.clone());
            let (tsc, timer) = (&tsc, &timer);
            handles.push(s.spawn(move || {
                // A panic while preparing is caught here: unwinding past
                // the barriers below would leave the main side waiting on
                // them for good (it once did, deaf to SIGTERM).
                let prep = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    dmalab_core::cpus::pin_current_thread(&[cpu]).map_err(|e| {
                        ProbeError::System(format!("cannot pin a probe thread to CPU {cpu}: {e}"))
                    })?;
                    Worker::prepare(
                        plan.size_bytes,
                        plan.pages,
                        plan.group_pages,
                        &plan.pattern,
                        plan.write_pct,
                        plan.membind,
                        plan.seed.wrapping_add(i as u64),
                    )
                }))
                .unwrap_or_else(|_| {
                    Err(ProbeError::System(
                        "a probe thread panicked while preparing its buffer".into(),
                    ))
                });
                if prep.is_err() {
                    halt.store(true, Ordering::Relaxed);
                }
                // Everyone passes both barriers, even a thread that failed,
                // so nobody waits forever; the main side stores start_tsc
                // between them.
                barrier.wait();
                barrier.wait();
                let mut w = prep?;
                let ctx = IntervalCtx {
                    start_tsc: start_tsc.load(Ordering::Relaxed),
                    cycles: interval_cycles,
                    tx: &tx,
                };
                let ivc = (interval_cycles > 0).then_some(&ctx);
                Ok(run_thread(&mut w, cpu, plan, &halt, ivc, tsc, timer))
            }));
        }
        drop(tx);
        barrier.wait();
        start_tsc.store(rdtscp_fenced(), Ordering::Relaxed);
        barrier.wait();
        for m in rx.iter() {
            collector.add(m, on_interval);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ProbeError::System("a probe thread panicked".into())))
            })
            .collect()
    });
    let mut threads = Vec::new();
    for r in results {
        threads.push(r?);
    }
    let intervals = collector.finish(on_interval);
    let mut merged = LatHist::new();
    let mut any_hist = false;
    let (mut c_acc, mut c_mean_sum, mut c_med_sum) = (0u64, 0.0, 0.0);
    let mut c_elapsed = 0u64;
    let mut n_clock = 0usize;
    for t in &threads {
        if let Some(s) = &t.per_access {
            if let Some(h) = LatHist::decode(&s.hdr_v2_base64) {
                merged.merge(&h);
                any_hist = true;
            }
        }
        if let Some(c) = &t.clock {
            c_acc += c.accesses;
            c_elapsed = c_elapsed.max(c.elapsed_ns);
            c_mean_sum += c.mean_ns;
            c_med_sum += c.median_chunk_ns;
            n_clock += 1;
        }
    }
    if dmalab_core::signal::stop_requested() {
        warnings.push("interrupted: figures cover the part that ran".into());
    }
    let result = LatencyResult {
        tsc,
        timer,
        clock: (n_clock > 0).then(|| ClockFigures {
            accesses: c_acc,
            elapsed_ns: c_elapsed,
            mean_ns: c_mean_sum / n_clock as f64,
            median_chunk_ns: c_med_sum / n_clock as f64,
        }),
        per_access: any_hist.then(|| merged.summary()),
        threads,
        intervals,
        matrix: Vec::new(),
        below_timer_resolution: None,
    };
    let resolution = BelowResolution::resolution_ns(&result.tsc, &result.timer);
    let result = LatencyResult {
        below_timer_resolution: result
            .per_access
            .as_ref()
            .and_then(|p| BelowResolution::of(p, resolution)),
        ..result
    };
    Ok((result, warnings))
}

/// The NUMA latency matrix over every online node ([`matrix`]), with the
/// timing calibration it was measured with, and warnings.
pub fn run_matrix(plan: &LatencyPlan) -> Result<(LatencyResult, Vec<String>), ProbeError> {
    let nodes = crate::mem::numa_nodes();
    let (tsc, timer, mut warnings) = measure_timing();
    if nodes.len() == 1 {
        warnings.push(format!(
            "this host has one NUMA node (node {}); the matrix is 1x1",
            nodes[0]
        ));
    }
    let matrix = matrix(plan, &nodes, &tsc, &timer)?;
    let result = LatencyResult {
        tsc,
        timer,
        matrix,
        ..Default::default()
    };
    Ok((result, warnings))
}

/// Runs a single-thread per-access probe for every (CPU node, memory node)
/// pair: the NUMA latency matrix. `runtime_ns` is per cell.
pub fn matrix(
    plan: &LatencyPlan,
    nodes: &[usize],
    tsc: &TscInfo,
    timer: &TimerCost,
) -> Result<Vec<MatrixCell>, ProbeError> {
    let stop = AtomicBool::new(false);
    let mut cells = Vec::new();
    for &cn in nodes {
        let Some(cpu) = crate::mem::node_cpus(cn).and_then(|c| {
            let allowed = dmalab_core::cpus::allowed_cpus();
            c.into_iter().find(|x| allowed.contains(x))
        }) else {
            continue;
        };
        for &mn in nodes {
            if halted(&stop) {
                return Ok(cells);
            }
            let cell = std::thread::scope(|s| {
                s.spawn(|| -> Result<MatrixCell, ProbeError> {
                    dmalab_core::cpus::pin_current_thread(&[cpu])
                        .map_err(|e| ProbeError::System(format!("cannot pin to CPU {cpu}: {e}")))?;
                    let mut w = Worker::prepare(
                        plan.size_bytes,
                        plan.pages,
                        plan.group_pages,
                        &plan.pattern,
                        plan.write_pct,
                        Some(mn),
                        plan.seed,
                    )?;
                    let h = w
                        .run_per_access(plan.runtime_ns, &stop, None, tsc, timer)
                        .hist;
                    Ok(MatrixCell {
                        cpu_node: cn,
                        mem_node: mn,
                        mean_ns: h.mean(),
                        p50_ns: h.percentile(50.0),
                    })
                })
                .join()
                .unwrap_or_else(|_| Err(ProbeError::System("matrix thread panicked".into())))
            })?;
            cells.push(cell);
        }
    }
    Ok(cells)
}

/// Short duration for humans.
pub fn dur(ns: u64) -> String {
    format!("{:?}", Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe thread that panicked while preparing (a group size past
    /// what `validate` lets through overflowed) left `run` waiting on its
    /// start barrier for good; now it is an error.
    #[test]
    fn a_thread_that_panics_while_preparing_is_an_error_not_a_hang() {
        let plan = LatencyPlan {
            size_bytes: 1 << 16,
            pages: PageKind::Small,
            group_pages: usize::MAX,
            pattern: Pattern::Chase,
            write_pct: 0,
            cpus: vec![dmalab_core::cpus::allowed_cpus()[0]],
            membind: None,
            mode: Mode::PerAccess,
            rounds: 1,
            runtime_ns: 10_000_000,
            interval_ns: 0,
            seed: 1,
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r = run(&plan, &mut |_| {}).map(|_| ());
            let _ = tx.send(r);
        });
        let r = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("run returned (it hung on the start barrier)");
        let e = r.unwrap_err().to_string();
        assert!(e.contains("panicked while preparing"), "{e}");
    }

    #[test]
    fn median_takes_the_upper_middle_and_zero_when_empty() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn mode_names_are_the_flag_values() {
        for (m, n) in [
            (Mode::Clock, "clock"),
            (Mode::PerAccess, "per-access"),
            (Mode::Both, "both"),
        ] {
            assert_eq!(m.name(), n);
            assert_eq!(serde_json::to_value(m).unwrap(), n);
        }
    }

    #[test]
    fn dur_is_short() {
        assert_eq!(dur(1_500_000_000), "1.5s");
        assert_eq!(dur(2_000_000), "2ms");
    }
}
