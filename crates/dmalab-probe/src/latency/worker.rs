//! One probe thread: its first-touched buffer, the chain or index list it
//! walks, and the clock and per-access loops over it.

use super::result::{ClockFigures, RoundFigures, ThreadLatency};
use super::{halted, median, LatencyPlan, Mode};
use crate::access::{build_chain, index_list, Pattern};
use crate::kernels;
use crate::mem::{Buffer, PageKind};
use crate::ProbeError;
use dmalab_core::hist::LatHist;
use dmalab_core::sys::clock::monotonic_ns;
use dmalab_core::sys::tsc::{rdtscp_fenced, TimerCost, TscInfo};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;

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
        let t0 = monotonic_ns();
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
        w.setup_ns = monotonic_ns() - t0;
        Ok(w)
    }

    /// hugetlbfs pages added to the kernel's pool for this buffer.
    pub fn hugetlb_pages_added(&self) -> u64 {
        self.buf.hugetlb_pages_added()
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
        let t_start = monotonic_ns();
        let mut accesses = 0u64;
        let (mut iv_acc, mut iv_t0) = (0u64, t_start);
        let mut iv_index = iv.map(|c| interval_of(c, rdtscp_fenced()));
        let mut chunk_means = Vec::new();
        loop {
            let t0 = monotonic_ns();
            self.steps(chunk);
            let t1 = monotonic_ns();
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
        let elapsed = monotonic_ns() - t_start;
        if let (Some(c), Some(idx)) = (iv, iv_index) {
            if iv_acc > 0 {
                let _ = c.tx.send(IntervalMsg {
                    index: idx,
                    accesses: iv_acc,
                    elapsed_ns: monotonic_ns() - iv_t0,
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
        let t_start = monotonic_ns();
        let mut accesses = 0u64;
        let mut iv_index = iv.map(|c| interval_of(c, rdtscp_fenced()));
        let mut t_batch = monotonic_ns();
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
            let t1 = monotonic_ns();
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
        let elapsed = monotonic_ns() - t_start;
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

fn interval_of(c: &IntervalCtx, now_tsc: u64) -> u64 {
    now_tsc
        .saturating_sub(c.start_tsc)
        .checked_div(c.cycles)
        .unwrap_or(0)
}

/// Runs one prepared thread in the plan's mode.
pub(super) fn run_thread(
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
        hugetlb_pages_added: Some(w.hugetlb_pages_added()).filter(|&n| n > 0),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_numbers_count_whole_intervals_from_the_start() {
        let (tx, _rx) = mpsc::channel();
        let c = IntervalCtx {
            start_tsc: 1_000,
            cycles: 100,
            tx: &tx,
        };
        assert_eq!(interval_of(&c, 1_000), 0);
        assert_eq!(interval_of(&c, 1_099), 0);
        assert_eq!(interval_of(&c, 1_100), 1);
        assert_eq!(interval_of(&c, 5_050), 40);
        // A reading from before the start (another CPU's TSC a little
        // behind) is interval 0, not a wrap-around.
        assert_eq!(interval_of(&c, 10), 0);
        let off = IntervalCtx { cycles: 0, ..c };
        assert_eq!(interval_of(&off, 9_999), 0);
    }
}
