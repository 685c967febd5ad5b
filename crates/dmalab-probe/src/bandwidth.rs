//! `dmalab probe bandwidth`: MLC-style traffic from pinned threads.
//!
//! Every thread owns its arrays (each `size` bytes, first-touched by the
//! thread itself on its CPU) and sweeps them line by line, forever, until
//! the run ends. Bytes are counted as the program moves them (STREAM's
//! convention): a regular store to a line not in cache also costs a read for
//! ownership on the memory bus, which is not counted; W6's non-temporal
//! stores do not.
//!
//! | traffic | per 64-byte line                       | reads : writes |
//! |---------|----------------------------------------|----------------|
//! | R       | load a                                 | 1 : 0          |
//! | W2      | c = a ^ b                              | 2 : 1          |
//! | W3      | d = a ^ b ^ c                          | 3 : 1          |
//! | W5      | a = a + 1 (in place)                   | 1 : 1          |
//! | W6      | stream constant to a (`movntdq`)       | 0 : 1 (NT)     |
//! | copy    | b = a                                  | 1 : 1          |
//! | triad   | a = b + 3.0 * c (f64)                  | 2 : 1          |

use crate::kernels;
use crate::latency::halted;
use crate::mem::{Buffer, PageKind, LINE};
use crate::ProbeError;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

/// A traffic type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Traffic {
    /// All reads.
    #[cfg_attr(feature = "clap", value(name = "R"))]
    R,
    /// 2 reads : 1 write.
    #[cfg_attr(feature = "clap", value(name = "W2"))]
    W2,
    /// 3 reads : 1 write.
    #[cfg_attr(feature = "clap", value(name = "W3"))]
    W3,
    /// 1 read : 1 write, in place.
    #[cfg_attr(feature = "clap", value(name = "W5"))]
    W5,
    /// Non-temporal writes only.
    #[cfg_attr(feature = "clap", value(name = "W6"))]
    W6,
    /// b = a.
    #[serde(rename = "copy")]
    Copy,
    /// a = b + s * c.
    #[serde(rename = "triad")]
    Triad,
}

impl Traffic {
    /// Name as in MLC.
    pub fn name(self) -> &'static str {
        match self {
            Self::R => "R",
            Self::W2 => "W2",
            Self::W3 => "W3",
            Self::W5 => "W5",
            Self::W6 => "W6",
            Self::Copy => "copy",
            Self::Triad => "triad",
        }
    }

    /// Arrays used.
    pub fn arrays(self) -> usize {
        match self {
            Self::R | Self::W5 | Self::W6 => 1,
            Self::Copy => 2,
            Self::W2 | Self::Triad => 3,
            Self::W3 => 4,
        }
    }

    /// (lines read, lines written) per step.
    pub fn lines_rw(self) -> (u64, u64) {
        match self {
            Self::R => (1, 0),
            Self::W2 | Self::Triad => (2, 1),
            Self::W3 => (3, 1),
            Self::W5 | Self::Copy => (1, 1),
            Self::W6 => (0, 1),
        }
    }
}

/// `--access`: how each thread walks its arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Line after line, wrapping at the end (MLC's default).
    #[default]
    Sequential,
    /// Blocks of `--granularity` bytes at random aligned offsets, each
    /// walked line by line (MLC's random mode at 64 B); the offsets come
    /// from a PRNG, never from loaded data, so loads overlap.
    Random,
}

impl Access {
    /// The name on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Random => "random",
        }
    }
}

/// Lines per chunk between progress updates and stop checks (256 KiB).
const CHUNK: usize = 4096;

/// One thread's arrays.
pub struct BwWorker {
    traffic: Traffic,
    arrays: Vec<Buffer>,
    pos: usize,
    sink: u64,
    /// The random walk (None: sequential).
    #[cfg(target_arch = "x86_64")]
    random: Option<kernels::bw::Random>,
}

impl BwWorker {
    /// Allocates and first-touches the arrays (call on the pinned thread),
    /// to be walked sequentially.
    pub fn prepare(
        traffic: Traffic,
        size: usize,
        pages: PageKind,
        membind: Option<usize>,
    ) -> Result<Self, ProbeError> {
        let arrays = (0..traffic.arrays())
            .map(|_| Buffer::new(size, pages, membind))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            traffic,
            arrays,
            pos: 0,
            sink: 0,
            #[cfg(target_arch = "x86_64")]
            random: None,
        })
    }

    /// Walks the arrays at random in blocks of `granularity` bytes (a
    /// multiple of 64) from here on, the generator seeded with `seed`.
    pub fn walk_randomly(&mut self, granularity: usize, seed: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            self.random = Some(kernels::bw::Random::new(
                self.arrays[0].lines(),
                granularity / LINE,
                seed,
            ));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (granularity, seed);
    }

    /// Runs one chunk with `delay` spin cycles after every line; returns
    /// the lines stepped.
    pub fn chunk(&mut self, delay: u32) -> usize {
        let lines = self.arrays[0].lines();
        #[cfg(target_arch = "x86_64")]
        if let Some(mut walk) = self.random.take() {
            // Random: the walk picks every offset from the arrays' start;
            // a chunk is a number of steps.
            let n = CHUNK.min(lines);
            let p = |i: usize| self.arrays[i].as_ptr();
            // SAFETY: every array is page aligned with `lines` lines, and
            // the walk's offsets are whole lines below blocks * block
            // lines <= lines (kernels::bw::Random).
            unsafe { self.step(p(0), p(1 % self.arrays.len()), n, delay, &mut walk) };
            self.random = Some(walk);
            return n;
        }
        let n = CHUNK.min(lines - self.pos);
        let off = self.pos * LINE;
        let p = |i: usize| -> *mut u8 {
            // SAFETY: off + n lines lies inside every array (same length).
            unsafe { self.arrays[i].as_ptr().add(off) }
        };
        #[cfg(target_arch = "x86_64")]
        // SAFETY: every pointer is 64-byte aligned (page aligned base plus
        // whole lines) with n lines valid; the arrays are ours.
        unsafe {
            let (a, b) = (p(0), p(1 % self.arrays.len()));
            self.step(a, b, n, delay, &mut kernels::bw::Sequential(0));
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (p, delay);
            unimplemented!("bandwidth kernels exist for x86_64 only");
        }
        std::hint::black_box(self.sink);
        self.pos += n;
        if self.pos >= lines {
            self.pos = 0;
        }
        n
    }

    /// `n` steps of this traffic over the arrays from `a` (the first array,
    /// offset as the walk expects) and `b` (the second, for copy), where
    /// `walk` says.
    ///
    /// # Safety
    /// Every offset `walk` gives in `n` steps is a whole line inside every
    /// array, counted from the pointers passed (the other arrays at the
    /// same distance from their start as `a` from the first's).
    #[cfg(target_arch = "x86_64")]
    unsafe fn step<W: kernels::bw::Walk>(
        &mut self,
        a: *mut u8,
        b: *mut u8,
        n: usize,
        delay: u32,
        walk: &mut W,
    ) {
        use kernels::bw;
        let delta = a as usize - self.arrays[0].as_ptr() as usize;
        let p = |i: usize| self.arrays[i].as_ptr().add(delta);
        match self.traffic {
            Traffic::R => self.sink ^= bw::read(a, n, delay, walk),
            Traffic::W2 => bw::w2(a, p(1), p(2), n, delay, walk),
            Traffic::W3 => bw::w3(a, p(1), p(2), p(3), n, delay, walk),
            Traffic::W5 => bw::w5(a, n, delay, walk),
            Traffic::W6 => bw::w6(a, n, delay, self.pos as u64, walk),
            // copy and triad stay sequential (the CLI offers random for
            // MLC's traffic types only).
            Traffic::Copy => bw::copy(a, b, n, delay),
            Traffic::Triad => bw::triad(a, p(1), p(2), n, delay),
        }
    }

    /// Runs until `stop`, adding lines stepped to `progress`.
    pub fn run_until(&mut self, delay: u32, stop: &AtomicBool, progress: &AtomicU64) {
        while !halted(stop) {
            let n = self.chunk(delay);
            progress.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Traffic type.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }
}

/// A resolved bandwidth run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BandwidthPlan {
    /// Traffic type.
    pub traffic: Traffic,
    /// Size of each array of each thread, bytes.
    pub size_bytes: usize,
    /// Page kind.
    pub pages: PageKind,
    /// CPU of each thread.
    pub cpus: Vec<usize>,
    /// NUMA node the arrays are bound to.
    pub membind: Option<usize>,
    /// Spin cycles after every line (about one cycle each).
    pub delay_cycles: u32,
    /// Measuring time, nanoseconds.
    pub runtime_ns: u64,
    /// Report the bandwidth every this many nanoseconds (0: never).
    #[serde(default)]
    pub interval_ns: u64,
    /// How the arrays are walked.
    #[serde(default)]
    pub access: Access,
    /// With random access: bytes walked in a row at each random offset
    /// (a multiple of 64).
    #[serde(default = "line_bytes")]
    pub granularity_bytes: usize,
}

fn line_bytes() -> usize {
    LINE
}

/// One interval's bandwidth, all threads.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BandwidthInterval {
    /// Interval number, from 0.
    pub index: u64,
    /// Start of the interval since the measurement began, nanoseconds.
    pub start_ns: u64,
    /// Length of the interval, nanoseconds.
    pub interval_ns: u64,
    /// Bytes read and written in it per second.
    pub bw_bytes: f64,
}

/// One thread's bandwidth.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadBandwidth {
    /// CPU it ran on.
    pub cpu: usize,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Time measured, nanoseconds.
    pub elapsed_ns: u64,
    /// (read + written) / time, bytes per second.
    pub bw_bytes: f64,
}

/// Result of `dmalab probe bandwidth`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BandwidthResult {
    /// Per-thread figures.
    pub threads: Vec<ThreadBandwidth>,
    /// Bytes read, all threads.
    pub read_bytes: u64,
    /// Bytes written, all threads.
    pub write_bytes: u64,
    /// Wall time of the measurement, nanoseconds.
    pub elapsed_ns: u64,
    /// Sum of the per-thread bandwidths, bytes per second.
    pub bw_bytes: f64,
    /// Measured cost of one delay iteration, TSC cycles (when a delay was
    /// asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_iteration_cycles: Option<f64>,
}

/// Starts one pinned thread per CPU, each preparing a [`BwWorker`]; returns
/// them (or the first error).
pub fn prepare_workers(
    traffic: Traffic,
    size: usize,
    pages: PageKind,
    membind: Option<usize>,
    cpus: &[usize],
) -> Result<Vec<BwWorker>, ProbeError> {
    std::thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                s.spawn(move || {
                    dmalab_core::cpus::pin_current_thread(&[cpu])
                        .map_err(|e| ProbeError::System(format!("cannot pin to CPU {cpu}: {e}")))?;
                    BwWorker::prepare(traffic, size, pages, membind)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ProbeError::System("bandwidth thread panicked".into())))
            })
            .collect()
    })
}

/// Runs `workers` pinned to `cpus` for `runtime_ns` (or until `stop`);
/// `on_start` is called once every worker is running.
pub fn run_workers(
    workers: &mut [BwWorker],
    cpus: &[usize],
    delay: u32,
    runtime_ns: u64,
    stop: &AtomicBool,
    on_start: &mut dyn FnMut(),
) -> BandwidthResult {
    run_workers_intervals(
        workers,
        cpus,
        delay,
        runtime_ns,
        stop,
        on_start,
        0,
        &mut |_| {},
    )
}

/// [`run_workers`], reporting the bandwidth of every `interval_ns` (when
/// above 0) to `on_interval` as it ends.
#[allow(clippy::too_many_arguments)]
pub fn run_workers_intervals(
    workers: &mut [BwWorker],
    cpus: &[usize],
    delay: u32,
    runtime_ns: u64,
    stop: &AtomicBool,
    on_start: &mut dyn FnMut(),
    interval_ns: u64,
    on_interval: &mut dyn FnMut(&BandwidthInterval),
) -> BandwidthResult {
    let bytes_per_line: Vec<u64> = workers
        .iter()
        .map(|w| {
            let (lr, lw) = w.traffic().lines_rw();
            (lr + lw) * LINE as u64
        })
        .collect();
    let progress: Vec<AtomicU64> = workers.iter().map(|_| AtomicU64::new(0)).collect();
    let local_stop = Arc::new(AtomicBool::new(false));
    let barrier = Barrier::new(workers.len() + 1);
    let t0 = std::thread::scope(|s| {
        for (i, w) in workers.iter_mut().enumerate() {
            let (cpu, prog, local_stop, barrier) = (cpus[i], &progress[i], &local_stop, &barrier);
            s.spawn(move || {
                let _ = dmalab_core::cpus::pin_current_thread(&[cpu]);
                barrier.wait();
                w.run_until(delay, local_stop, prog);
            });
        }
        barrier.wait();
        let t0 = dmalab_core::sys::clock::monotonic_ns();
        on_start();
        let end = t0 + runtime_ns;
        let total = || -> u64 {
            progress
                .iter()
                .zip(&bytes_per_line)
                .map(|(p, b)| p.load(Ordering::Relaxed) * b)
                .sum()
        };
        let (mut index, mut last_t, mut last_bytes) = (0u64, t0, 0u64);
        loop {
            let now = dmalab_core::sys::clock::monotonic_ns();
            if now >= end || halted(stop) {
                break;
            }
            let mut nap = (end - now).min(10_000_000);
            if interval_ns > 0 {
                let due = last_t + interval_ns;
                if now >= due {
                    let bytes = total();
                    on_interval(&BandwidthInterval {
                        index,
                        start_ns: last_t - t0,
                        interval_ns: now - last_t,
                        bw_bytes: (bytes - last_bytes) as f64 * 1e9 / (now - last_t).max(1) as f64,
                    });
                    (index, last_t, last_bytes) = (index + 1, now, bytes);
                    continue;
                }
                nap = nap.min(due - now);
            }
            std::thread::sleep(std::time::Duration::from_nanos(nap));
        }
        local_stop.store(true, Ordering::Relaxed);
        t0
    });
    let elapsed = dmalab_core::sys::clock::monotonic_ns() - t0;
    let mut r = BandwidthResult {
        elapsed_ns: elapsed,
        ..Default::default()
    };
    for (i, w) in workers.iter().enumerate() {
        let lines = progress[i].load(Ordering::Relaxed);
        let (lr, lw) = w.traffic().lines_rw();
        let t = ThreadBandwidth {
            cpu: cpus[i],
            read_bytes: lines * lr * LINE as u64,
            write_bytes: lines * lw * LINE as u64,
            elapsed_ns: elapsed,
            bw_bytes: (lines * (lr + lw) * LINE as u64) as f64 * 1e9 / elapsed.max(1) as f64,
        };
        r.read_bytes += t.read_bytes;
        r.write_bytes += t.write_bytes;
        r.bw_bytes += t.bw_bytes;
        r.threads.push(t);
    }
    r
}

/// Runs a bandwidth plan.
pub fn run(plan: &BandwidthPlan) -> Result<BandwidthResult, ProbeError> {
    run_intervals(plan, &mut |_| {})
}

/// Runs a bandwidth plan; `on_interval` sees each `plan.interval_ns` as it
/// ends.
pub fn run_intervals(
    plan: &BandwidthPlan,
    on_interval: &mut dyn FnMut(&BandwidthInterval),
) -> Result<BandwidthResult, ProbeError> {
    let mut workers = prepare_workers(
        plan.traffic,
        plan.size_bytes,
        plan.pages,
        plan.membind,
        &plan.cpus,
    )?;
    if plan.access == Access::Random {
        for (i, w) in workers.iter_mut().enumerate() {
            w.walk_randomly(plan.granularity_bytes, 0x9e37_79b9_7f4a_7c15 ^ i as u64);
        }
    }
    // One untimed lap warms the arrays and the code.
    for w in workers.iter_mut() {
        let lines = w.arrays[0].lines();
        let mut done = 0;
        while done < lines {
            done += w.chunk(0);
        }
    }
    let stop = AtomicBool::new(false);
    let mut r = run_workers_intervals(
        &mut workers,
        &plan.cpus,
        plan.delay_cycles,
        plan.runtime_ns,
        &stop,
        &mut || {},
        plan.interval_ns,
        on_interval,
    );
    if plan.delay_cycles > 0 {
        r.delay_iteration_cycles = Some(kernels::spin_cycles_per_iteration());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_by_ratio() {
        let cpu = dmalab_core::cpus::allowed_cpus()[0];
        let plan = BandwidthPlan {
            traffic: Traffic::W2,
            size_bytes: 1 << 20,
            pages: PageKind::Small,
            cpus: vec![cpu],
            membind: None,
            delay_cycles: 0,
            runtime_ns: 50_000_000,
            interval_ns: 0,
            access: Access::Sequential,
            granularity_bytes: 64,
        };
        let r = run(&plan).unwrap();
        assert!(r.read_bytes > 0);
        assert_eq!(r.read_bytes, 2 * r.write_bytes);
        assert!(r.bw_bytes > 0.0);
        // Intervals: numbered in order, each a share of the total.
        let plan = BandwidthPlan {
            runtime_ns: 200_000_000,
            interval_ns: 20_000_000,
            ..plan
        };
        let mut seen = Vec::new();
        let r = run_intervals(&plan, &mut |i| seen.push(i.clone())).unwrap();
        assert!(seen.len() >= 3, "{seen:?}");
        // A 20 ms interval may see nothing on a loaded 2-CPU machine (the
        // thread was not scheduled in it): numbering and the sum are the
        // rules, not a non-zero figure in every interval.
        assert!(seen
            .iter()
            .enumerate()
            .all(|(k, i)| i.index == k as u64 && i.bw_bytes >= 0.0));
        assert!(seen.iter().any(|i| i.bw_bytes > 0.0), "{seen:?}");
        let moved: f64 = seen
            .iter()
            .map(|i| i.bw_bytes * i.interval_ns as f64 / 1e9)
            .sum();
        assert!(moved <= (r.read_bytes + r.write_bytes) as f64 * 1.0001);
    }

    #[test]
    fn random_access_counts_like_sequential_for_every_mlc_traffic() {
        let cpu = dmalab_core::cpus::allowed_cpus()[0];
        for traffic in [
            Traffic::R,
            Traffic::W2,
            Traffic::W3,
            Traffic::W5,
            Traffic::W6,
        ] {
            let plan = BandwidthPlan {
                traffic,
                size_bytes: 1 << 20,
                pages: PageKind::Small,
                cpus: vec![cpu],
                membind: None,
                delay_cycles: 0,
                runtime_ns: 20_000_000,
                interval_ns: 0,
                access: Access::Random,
                granularity_bytes: 256,
            };
            let r = run(&plan).unwrap();
            let (lr, lw) = traffic.lines_rw();
            assert!(r.read_bytes + r.write_bytes > 0, "{traffic:?}");
            assert_eq!(r.read_bytes * lw, r.write_bytes * lr, "{traffic:?}");
        }
    }
}
