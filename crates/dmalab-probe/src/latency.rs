//! `dmalab probe latency`: pointer chase (or another pattern) over a
//! first-touched buffer, timed two ways:
//! - **clock**: `CLOCK_MONOTONIC` around many steps; the average per access
//!   (the classic lmbench/MLC number, no timer in the loop);
//! - **per-access**: every access bracketed by `rdtscp; lfence`, the
//!   bracket's own median cost subtracted, converted with the calibrated TSC
//!   frequency and recorded into an hdrhistogram (1% relative error).

use crate::access::{build_chain, index_list, Pattern};
use crate::kernels;
use crate::mem::{Buffer, PageKind};
use crate::tsc::{mono_ns, rdtscp_fenced, TimerCost, TscInfo};
use crate::ProbeError;
use dmalab_core::hist::{LatHist, LatencySummary};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

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

/// What a per-access phase measured.
pub struct PerAccessRun {
    /// All samples.
    pub hist: LatHist,
    /// Wall time per access of the timed loop, nanoseconds.
    pub loop_ns: f64,
    /// Median over batches (2,048 samples) of each batch's mean,
    /// nanoseconds: robust to the batches a preemption lands in.
    pub median_batch_ns: f64,
    /// Median over batches of the loop's wall time per access (timing and
    /// recording included), nanoseconds.
    pub median_batch_loop_ns: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
}

/// What one thread walks.
enum Walk {
    Chain {
        start: usize,
        pos: usize,
        rw: bool,
    },
    List {
        base: usize,
        list: Vec<u32>,
        pos: usize,
    },
}

/// One prepared probe thread: its buffer and what it walks.
pub struct Worker {
    buf: Buffer,
    walk: Walk,
    zero: usize,
    /// Setup time, nanoseconds.
    pub setup_ns: u64,
}

/// Samples per timed batch.
const BATCH: usize = 2048;

/// Where a phase reports intervals.
pub struct IntervalCtx<'a> {
    /// TSC value the measurement began at.
    pub start_tsc: u64,
    /// Interval length in cycles (0: off).
    pub cycles: u64,
    /// Channel to the collector.
    pub tx: &'a mpsc::Sender<IntervalMsg>,
}

/// One thread's share of one interval.
pub struct IntervalMsg {
    /// Interval number.
    pub index: u64,
    /// Accesses.
    pub accesses: u64,
    /// Time covered, nanoseconds (clock intervals).
    pub elapsed_ns: u64,
    /// Samples (per-access intervals).
    pub hist: Option<LatHist>,
}

impl Worker {
    /// Maps and first-touches the buffer and builds the chain or list (call
    /// it on the thread, pinned, that will probe).
    pub fn prepare(
        size: usize,
        pages: PageKind,
        group_pages: usize,
        pattern: &Pattern,
        write_pct: u32,
        membind: Option<usize>,
        seed: u64,
    ) -> Result<Self, ProbeError> {
        let t0 = mono_ns();
        let mut buf = Buffer::new(size, pages, membind)?;
        let walk = match pattern {
            Pattern::Chase => Walk::Chain {
                start: build_chain(&mut buf, group_pages, write_pct, seed),
                pos: 0,
                rw: write_pct > 0,
            },
            p => Walk::List {
                base: buf.as_ptr() as usize,
                list: index_list(p, buf.lines(), write_pct, seed),
                pos: 0,
            },
        };
        let mut w = Worker {
            buf,
            walk,
            zero: std::hint::black_box(0),
            setup_ns: 0,
        };
        if let Walk::Chain { start, pos, .. } = &mut w.walk {
            *pos = *start;
        }
        // One warm lap (bounded) so the first measured steps are not
        // special: pages are touched, the chain is in whatever cache fits it.
        w.steps(w.buf.lines().min(1 << 22));
        w.setup_ns = mono_ns() - t0;
        Ok(w)
    }

    /// Bytes of the buffer on THP, for THP buffers.
    pub fn thp_backed_bytes(&self) -> Option<u64> {
        (self.buf.kind() == PageKind::Thp)
            .then(|| self.buf.thp_backed_bytes())
            .flatten()
    }

    fn steps(&mut self, n: usize) {
        // SAFETY: the chain/list was built over self.buf, which is alive.
        unsafe {
            match &mut self.walk {
                Walk::Chain { pos, rw: false, .. } => *pos = kernels::chase(*pos, n),
                Walk::Chain { pos, rw: true, .. } => *pos = kernels::chase_rw(*pos, n),
                Walk::List { base, list, pos } => {
                    std::hint::black_box(kernels::walk(*base, list, pos, n, self.zero));
                }
            }
        }
    }

    fn timed(&mut self, out: &mut [u32]) {
        // SAFETY: as in `steps`.
        unsafe {
            match &mut self.walk {
                Walk::Chain { pos, rw, .. } => *pos = kernels::chase_timed(*pos, out, *rw),
                Walk::List { base, list, pos } => {
                    std::hint::black_box(kernels::walk_timed(*base, list, pos, out, self.zero));
                }
            }
        }
    }

    /// Clock mode for `dur_ns`: returns the figures.
    pub fn run_clock(
        &mut self,
        dur_ns: u64,
        stop: &AtomicBool,
        iv: Option<&IntervalCtx>,
        tsc: &TscInfo,
    ) -> ClockFigures {
        let mut chunk = 1usize << 12;
        let t_start = mono_ns();
        let mut accesses = 0u64;
        let (mut iv_acc, mut iv_t0) = (0u64, t_start);
        let mut iv_index = iv.map(|c| interval_of(c, rdtscp_fenced()));
        let mut chunk_means = Vec::new();
        loop {
            let t0 = mono_ns();
            self.steps(chunk);
            let t1 = mono_ns();
            accesses += chunk as u64;
            iv_acc += chunk as u64;
            // Aim for about 1 ms per chunk so stops and intervals are prompt.
            let per = (t1 - t0).max(1) as f64 / chunk as f64;
            chunk_means.push(per);
            chunk = ((1e6 / per) as usize).clamp(256, 1 << 22);
            if let (Some(c), Some(idx)) = (iv, iv_index) {
                let now = interval_of(c, rdtscp_fenced());
                if now != idx {
                    let _ = c.tx.send(IntervalMsg {
                        index: idx,
                        accesses: iv_acc,
                        elapsed_ns: t1 - iv_t0,
                        hist: None,
                    });
                    iv_acc = 0;
                    iv_t0 = t1;
                    iv_index = Some(now);
                }
            }
            if t1 - t_start >= dur_ns || halted(stop) {
                break;
            }
        }
        let _ = tsc;
        let elapsed = mono_ns() - t_start;
        if let (Some(c), Some(idx)) = (iv, iv_index) {
            if iv_acc > 0 {
                let _ = c.tx.send(IntervalMsg {
                    index: idx,
                    accesses: iv_acc,
                    elapsed_ns: mono_ns() - iv_t0,
                    hist: None,
                });
            }
        }
        ClockFigures {
            accesses,
            elapsed_ns: elapsed,
            mean_ns: elapsed as f64 / accesses.max(1) as f64,
            // The first chunk is a small probe of the chunk size; skip it.
            median_chunk_ns: {
                let skip = 1.min(chunk_means.len());
                median(&mut chunk_means[skip..])
            },
        }
    }

    /// Per-access mode for `dur_ns`: returns the histogram and the loop's
    /// wall time per access.
    pub fn run_per_access(
        &mut self,
        dur_ns: u64,
        stop: &AtomicBool,
        iv: Option<&IntervalCtx>,
        tsc: &TscInfo,
        timer: &TimerCost,
    ) -> PerAccessRun {
        let mut batch_means = Vec::new();
        let mut batch_loops = Vec::new();
        let mut total = LatHist::new();
        let mut cur = LatHist::new();
        let mut samples = vec![0u32; BATCH];
        let ns_per_cycle = 1e9 / tsc.tsc_hz;
        let sub = timer.subtracted_cycles;
        let t_start = mono_ns();
        let mut accesses = 0u64;
        let mut iv_index = iv.map(|c| interval_of(c, rdtscp_fenced()));
        let mut t_batch = mono_ns();
        loop {
            self.timed(&mut samples);
            accesses += BATCH as u64;
            let mut sum = 0u64;
            for &c in &samples {
                let ns = (u64::from(c).saturating_sub(sub) as f64 * ns_per_cycle).round() as u64;
                cur.record(ns);
                sum += ns;
            }
            batch_means.push(sum as f64 / BATCH as f64);
            let t1 = mono_ns();
            batch_loops.push((t1 - t_batch) as f64 / BATCH as f64);
            t_batch = t1;
            if let (Some(c), Some(idx)) = (iv, iv_index) {
                let now = interval_of(c, rdtscp_fenced());
                if now != idx {
                    total.merge(&cur);
                    let _ = c.tx.send(IntervalMsg {
                        index: idx,
                        accesses: cur.len(),
                        elapsed_ns: 0,
                        hist: Some(std::mem::take(&mut cur)),
                    });
                    iv_index = Some(now);
                }
            }
            if t1 - t_start >= dur_ns || halted(stop) {
                break;
            }
        }
        let elapsed = mono_ns() - t_start;
        total.merge(&cur);
        if let (Some(c), Some(idx)) = (iv, iv_index) {
            if !cur.is_empty() {
                let _ = c.tx.send(IntervalMsg {
                    index: idx,
                    accesses: cur.len(),
                    elapsed_ns: 0,
                    hist: Some(cur),
                });
            }
        }
        PerAccessRun {
            hist: total,
            loop_ns: elapsed as f64 / accesses.max(1) as f64,
            median_batch_ns: median(&mut batch_means),
            median_batch_loop_ns: median(&mut batch_loops),
        }
    }
}

/// True when this run should stop: its own flag or SIGINT/SIGTERM.
pub fn halted(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed) || dmalab_core::signal::stop_requested()
}

fn interval_of(c: &IntervalCtx, now_tsc: u64) -> u64 {
    now_tsc
        .saturating_sub(c.start_tsc)
        .checked_div(c.cycles)
        .unwrap_or(0)
}

/// Start-up measurements shared by latency and loaded runs.
pub fn measure_timing() -> (TscInfo, TimerCost, Vec<String>) {
    let (tsc, warnings) = TscInfo::measure(20_000_000, 5);
    let timer = TimerCost::measure(20_000, tsc.tsc_hz);
    (tsc, timer, warnings)
}

/// Merges interval messages from `threads` threads, printing each interval
/// through `on_interval` as soon as every thread has reported it.
struct IntervalCollector {
    threads: usize,
    pending: std::collections::BTreeMap<u64, (usize, u64, u64, LatHist, bool)>,
    interval_ns: u64,
    out: Vec<IntervalFigures>,
}

impl IntervalCollector {
    fn add(&mut self, m: IntervalMsg, on: &mut dyn FnMut(&IntervalFigures)) {
        let e = self
            .pending
            .entry(m.index)
            .or_insert_with(|| (0, 0, 0, LatHist::new(), false));
        e.0 += 1;
        e.1 += m.accesses;
        e.2 += m.elapsed_ns;
        if let Some(h) = &m.hist {
            e.3.merge(h);
            e.4 = true;
        }
        // Intervals are complete when all threads reported them, or when a
        // later one has arrived from everyone (a thread may skip an index
        // it spent entirely in one long batch).
        let ready: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, v)| v.0 >= self.threads)
            .map(|(k, _)| *k)
            .collect();
        for k in ready {
            let older: Vec<u64> = self.pending.range(..=k).map(|(k, _)| *k).collect();
            for o in older {
                if let Some(v) = self.pending.remove(&o) {
                    let f = self.figures(o, v);
                    on(&f);
                    self.out.push(f);
                }
            }
        }
    }

    fn figures(&self, index: u64, v: (usize, u64, u64, LatHist, bool)) -> IntervalFigures {
        let (_, accesses, elapsed, h, has_hist) = v;
        let mut f = IntervalFigures {
            index,
            start_ns: index * self.interval_ns,
            accesses,
            ..Default::default()
        };
        if has_hist && !h.is_empty() {
            f.mean_ns = h.mean();
            f.p50_ns = Some(h.percentile(50.0));
            f.p90_ns = Some(h.percentile(90.0));
            f.p99_ns = Some(h.percentile(99.0));
            f.p99_9_ns = Some(h.percentile(99.9));
            f.max_ns = Some(h.inner().max());
        } else if accesses > 0 {
            // Clock intervals: every thread's elapsed time covers its own
            // accesses; the mean per access is total time over total count
            // per thread, i.e. elapsed/accesses summed the same way.
            f.mean_ns = elapsed as f64 / accesses as f64;
        }
        f
    }

    fn finish(mut self, on: &mut dyn FnMut(&IntervalFigures)) -> Vec<IntervalFigures> {
        let rest: Vec<u64> = self.pending.keys().copied().collect();
        for k in rest {
            if let Some(v) = self.pending.remove(&k) {
                let f = self.figures(k, v);
                on(&f);
                self.out.push(f);
            }
        }
        self.out
    }
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
    let mut collector = IntervalCollector {
        threads: n,
        pending: Default::default(),
        interval_ns: plan.interval_ns,
        out: Vec::new(),
    };
    let results: Vec<Result<ThreadLatency, ProbeError>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, &cpu) in plan.cpus.iter().enumerate() {
            let (barrier, tx, halt, start_tsc) =
                (barrier.clone(), tx.clone(), halt.clone(), start_tsc.clone());
            let (tsc, timer) = (&tsc, &timer);
            handles.push(s.spawn(move || {
                let prep = (|| {
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
                })();
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
    };
    Ok((result, warnings))
}

fn run_thread(
    w: &mut Worker,
    cpu: usize,
    plan: &LatencyPlan,
    stop: &AtomicBool,
    iv: Option<&IntervalCtx>,
    tsc: &TscInfo,
    timer: &TimerCost,
) -> ThreadLatency {
    let mut out = ThreadLatency {
        cpu,
        thp_backed_bytes: w.thp_backed_bytes(),
        hugetlb_pages_added: Some(w.buf.hugetlb_pages_added()).filter(|&n| n > 0),
        setup_ns: w.setup_ns,
        ..Default::default()
    };
    match plan.mode {
        Mode::Clock => out.clock = Some(w.run_clock(plan.runtime_ns, stop, iv, tsc)),
        Mode::PerAccess => {
            let r = w.run_per_access(plan.runtime_ns, stop, iv, tsc, timer);
            out.per_access = Some(r.hist.summary());
            out.per_access_loop_ns = Some(r.loop_ns);
        }
        Mode::Both => {
            let rounds = plan.rounds.max(1) as u64;
            let half = plan.runtime_ns / rounds / 2;
            let mut total = LatHist::new();
            let mut clock = ClockFigures::default();
            let mut loop_sum = 0.0;
            let mut clock_medians = Vec::new();
            for _ in 0..rounds {
                let c = w.run_clock(half, stop, iv, tsc);
                let PerAccessRun {
                    hist: h,
                    loop_ns,
                    median_batch_ns,
                    median_batch_loop_ns,
                } = w.run_per_access(half, stop, iv, tsc, timer);
                out.rounds.push(RoundFigures {
                    clock_mean_ns: c.mean_ns,
                    per_access_mean_ns: h.mean(),
                    per_access_loop_ns: loop_ns,
                    ratio: h.mean() / c.mean_ns,
                    clock_median_chunk_ns: c.median_chunk_ns,
                    per_access_median_batch_ns: median_batch_ns,
                    per_access_loop_median_ns: median_batch_loop_ns,
                    robust_ratio: median_batch_ns / c.median_chunk_ns,
                });
                clock_medians.push(c.median_chunk_ns);
                clock.accesses += c.accesses;
                clock.elapsed_ns += c.elapsed_ns;
                total.merge(&h);
                loop_sum += loop_ns;
                if halted(stop) {
                    break;
                }
            }
            clock.mean_ns = clock.elapsed_ns as f64 / clock.accesses.max(1) as f64;
            clock.median_chunk_ns = median(&mut clock_medians);
            out.clock = Some(clock);
            out.per_access = Some(total.summary());
            out.per_access_loop_ns = Some(loop_sum / out.rounds.len().max(1) as f64);
        }
    }
    out
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
