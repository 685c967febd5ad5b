//! The timing model: replays a trace through the caches of one scheme and
//! the DRAM, and accounts for where the time went.
//!
//! State lives in [`crate::cache::Cache`] and [`crate::dram::Dram`]; this
//! module only decides which level a reference goes to (the scheme), when it
//! issues, and how long the stream waits (the timing), and counts (the
//! statistics, [`SchemeResult`]).
//!
//! One stream replays the trace in order. A record issues `gap` after the
//! previous one issued. A CPU read miss takes one of `cpu.outstanding_misses`
//! slots; the stream waits when they are all taken (with 1: on every miss).
//! DMA read misses do the same with `dma.outstanding_reads`. Writes to DRAM
//! (write-backs, DMA writes under snooping) are posted: the stream waits only
//! while the write queue is full. A hit costs the cache's hit latency. At the
//! end of a device-reads-memory transfer the stream waits for its reads.
//! Total time is when the last reference completes (queued writes included).

use crate::cache::{Cache, Victim, PENDING};
use crate::config::SimConfig;
use crate::dram::{Dram, DramStats, Ticket};
use crate::scheme::Scheme;
use crate::trace::{Kind, Record, RecordSource, Source, TraceError};
use serde::{Deserialize, Serialize};

/// Where the simulated time went, ns. The parts add up to the total.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Breakdown {
    /// Gaps between records (computation, device pacing).
    pub compute_ns: f64,
    /// Hit latencies in the LLC and the DMA cache.
    pub cache_hit_ns: f64,
    /// Waiting for CPU reads from memory (misses, write-allocate fills).
    pub cpu_read_mem_ns: f64,
    /// Waiting for a full write queue to take a write-back a CPU reference
    /// caused.
    pub cpu_writeback_mem_ns: f64,
    /// Waiting for DMA reads from memory (and prefetched lines in flight).
    pub dma_read_mem_ns: f64,
    /// Waiting for a full write queue to take a DMA write or a write-back a
    /// DMA reference caused.
    pub dma_write_mem_ns: f64,
    /// Draining the writes still queued when the trace ended.
    pub final_drain_ns: f64,
}

/// Hits and misses of one source.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SourceStats {
    /// Line references.
    pub refs: u64,
    /// Served by the LLC.
    pub llc_hits: u64,
    /// Served by the DMA cache.
    pub dma_cache_hits: u64,
    /// Went to memory: reads fetched from DRAM, DMA writes under snooping
    /// written to DRAM; a DMA write allocated in a cache without a fetch is
    /// counted under `allocations` instead.
    pub misses: u64,
    /// DMA writes that allocated a line (shared cache, DMA cache) without
    /// reading memory.
    pub allocations: u64,
}

/// DMA-cache activity.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DmaCacheStats {
    /// Lines moved from the DMA cache to the LLC (CPU touched them).
    pub to_llc: u64,
    /// Lines moved from the LLC to the DMA cache (DMA touched them).
    pub from_llc: u64,
    /// Dirty lines the DMA cache evicted (written back).
    pub dirty_evictions: u64,
    /// Prefetches issued.
    pub prefetches: u64,
    /// Prefetched lines used before eviction.
    pub prefetch_hits: u64,
    /// Prefetched lines evicted unused.
    pub prefetch_unused: u64,
}

/// Everything one scheme did on one trace.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SchemeResult {
    /// Scheme name (`snoop`, `shared`, `dma-cache-256K-pf`).
    pub scheme: String,
    /// Simulated time until the last reference completed, ns.
    pub total_ns: f64,
    /// The same in CPU cycles (`cpu.freq_mhz`).
    pub total_cycles: u64,
    /// Snooping's total time over this scheme's (above 1: faster than
    /// snooping); absent when snooping was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_vs_snoop: Option<f64>,
    /// Where the time went.
    pub breakdown_ns: Breakdown,
    /// CPU references.
    pub cpu: SourceStats,
    /// DMA references.
    pub dma: SourceStats,
    /// Dirty lines the LLC evicted (written back to memory).
    pub llc_dirty_evictions: u64,
    /// Of those, evictions a DMA reference caused (injection).
    pub llc_dirty_evictions_by_dma: u64,
    /// Cached copies DMA writes invalidated (snooping).
    pub snoop_invalidations: u64,
    /// DMA cache activity (DMA-cache schemes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dma_cache: Option<DmaCacheStats>,
    /// DRAM activity.
    pub dram: DramStats,
    /// Trace records read.
    pub records: u64,
    /// DMA transfers (begin markers and whole-transfer records).
    pub transfers: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cat {
    Hit,
    CpuRead,
    CpuWb,
    DmaRead,
    DmaWrite,
}

/// One scheme's machine: caches, DRAM, clock.
pub struct Machine {
    scheme: Scheme,
    line_shift: u32,
    llc: Cache,
    llc_ways: usize,
    ddio_ways: usize,
    dmac: Option<Cache>,
    dmac_ways: usize,
    prefetch: bool,
    pf_degree: u64,
    pf_block_shift: u32,
    dram: Dram,
    now: u64,
    llc_hit: u64,
    dmac_hit: u64,
    line_gap: u64,
    cpu_k: usize,
    dma_k: usize,
    cpu_slots: std::collections::VecDeque<Ticket>,
    dma_slots: std::collections::VecDeque<Ticket>,
    bd: [u64; 8],
    cpu: SourceStats,
    dma: SourceStats,
    llc_dirty_ev: u64,
    llc_dirty_ev_dma: u64,
    snoop_inv: u64,
    dcs: DmaCacheStats,
    records: u64,
    transfers: u64,
    freq_mhz: u32,
}

fn ps(ns: f64) -> u64 {
    (ns * 1000.0).round() as u64
}

impl Machine {
    /// Builds the machine for `scheme` under `cfg` (which must validate).
    pub fn new(cfg: &SimConfig, scheme: Scheme) -> Result<Self, String> {
        cfg.validate().map_err(|e| e.to_string())?;
        let l = &cfg.llc;
        let (dmac, prefetch) = match scheme {
            Scheme::DmaCache {
                size_bytes,
                prefetch,
            } => (
                Some(Cache::new(
                    size_bytes,
                    cfg.dma_cache.ways,
                    l.line_bytes,
                    cfg.dma_cache.replacement,
                )),
                prefetch,
            ),
            _ => (None, false),
        };
        let line_shift = l.line_bytes.trailing_zeros();
        Ok(Machine {
            scheme,
            line_shift,
            // Nothing enters the LLC before its data arrived.
            llc: Cache::without_fills(l.size_bytes, l.ways, l.line_bytes, l.replacement),
            llc_ways: l.ways as usize,
            ddio_ways: match scheme {
                Scheme::Shared => l.ddio_ways as usize,
                _ => l.ways as usize,
            },
            dmac_ways: cfg.dma_cache.ways as usize,
            dmac,
            prefetch,
            pf_degree: cfg.dma_cache.prefetch_degree as u64,
            pf_block_shift: cfg
                .dma_cache
                .prefetch_block_bytes
                .max(l.line_bytes as u64)
                .next_power_of_two()
                .trailing_zeros(),
            dram: Dram::new(&cfg.dram, l.line_bytes)?,
            now: 0,
            llc_hit: ps(l.hit_ns),
            dmac_hit: ps(cfg.dma_cache.hit_ns),
            line_gap: ps(cfg.dma.line_gap_ns),
            cpu_k: cfg.cpu.outstanding_misses as usize,
            dma_k: cfg.dma.outstanding_reads as usize,
            cpu_slots: Default::default(),
            dma_slots: Default::default(),
            bd: [0; 8],
            cpu: SourceStats::default(),
            dma: SourceStats::default(),
            llc_dirty_ev: 0,
            llc_dirty_ev_dma: 0,
            snoop_inv: 0,
            dcs: DmaCacheStats::default(),
            records: 0,
            transfers: 0,
            freq_mhz: cfg.cpu.freq_mhz,
        })
    }

    /// Moves the clock to `t` (if later), charging the wait to `cat`.
    #[inline]
    fn wait_until(&mut self, t: u64, cat: Cat) {
        if t > self.now {
            self.bd[cat as usize + 1] += t - self.now;
            self.now = t;
        }
    }

    #[inline]
    fn hit(&mut self, lat: u64) {
        self.bd[Cat::Hit as usize + 1] += lat;
        self.now += lat;
    }

    #[inline]
    fn addr(&self, line: u64) -> u64 {
        line << self.line_shift
    }

    /// Posts a write of `line` to DRAM.
    #[inline]
    fn mem_write(&mut self, line: u64, cat: Cat) {
        let acc = self.dram.write(self.addr(line), self.now);
        self.wait_until(acc, cat);
    }

    /// Issues a read of `line` and takes an outstanding slot of the source.
    #[inline]
    fn mem_read(&mut self, line: u64, dma: bool) -> Ticket {
        let cat = if dma { Cat::DmaRead } else { Cat::CpuRead };
        let (tk, acc) = self.dram.read(self.addr(line), self.now);
        self.wait_until(acc, cat);
        let (slots, k) = if dma {
            (&mut self.dma_slots, self.dma_k)
        } else {
            (&mut self.cpu_slots, self.cpu_k)
        };
        if k == 1 {
            // One slot (the paper's setting): the slots are always empty
            // here, and the stream waits for this read at once.
            let c = self.dram.completion(tk);
            self.wait_until(c, cat);
            return tk;
        }
        slots.push_back(tk);
        if slots.len() >= k {
            if let Some(oldest) = slots.pop_front() {
                let c = self.dram.completion(oldest);
                self.wait_until(c, cat);
            }
        }
        tk
    }

    /// Waits for a line whose fill may still be in flight (a prefetch).
    #[inline]
    fn await_fill(&mut self, fill: u64, cat: Cat) {
        if fill & PENDING != 0 {
            let c = self.dram.completion(fill & !PENDING);
            self.wait_until(c, cat);
        } else {
            self.wait_until(fill, cat);
        }
    }

    #[inline]
    fn llc_victim(&mut self, v: Option<Victim>, by_dma: bool) {
        if let Some(v) = v {
            if v.dirty {
                self.llc_dirty_ev += 1;
                if by_dma {
                    self.llc_dirty_ev_dma += 1;
                }
                self.mem_write(v.line, if by_dma { Cat::DmaWrite } else { Cat::CpuWb });
            }
        }
    }

    #[inline]
    fn dmac_victim(&mut self, v: Option<Victim>, by_dma: bool) {
        if let Some(v) = v {
            if v.unused_prefetch {
                self.dcs.prefetch_unused += 1;
            }
            if v.dirty {
                self.dcs.dirty_evictions += 1;
                self.mem_write(v.line, if by_dma { Cat::DmaWrite } else { Cat::CpuWb });
            }
        }
    }

    fn dmac_insert(&mut self, line: u64, dirty: bool, fill: u64, prefetched: bool, by_dma: bool) {
        let ways = self.dmac_ways;
        let v = self
            .dmac
            .as_mut()
            .and_then(|c| c.insert(line, dirty, fill, prefetched, ways));
        self.dmac_victim(v, by_dma);
    }

    /// One CPU line reference.
    #[inline]
    pub fn cpu_access(&mut self, line: u64, write: bool) {
        self.cpu.refs += 1;
        if let Some(s) = self.llc.lookup(line) {
            self.llc.touch(s, write);
            self.cpu.llc_hits += 1;
            self.hit(self.llc_hit);
            return;
        }
        if let Some(dc) = self.dmac.as_mut() {
            if let Some(s) = dc.lookup(line) {
                if dc.touch(s, false) {
                    self.dcs.prefetch_hits += 1;
                }
                let (dirty, fill) = dc.remove(s);
                self.await_fill(fill, Cat::CpuRead);
                self.cpu.dma_cache_hits += 1;
                self.dcs.to_llc += 1;
                let v = self
                    .llc
                    .insert(line, dirty || write, 0, false, self.llc_ways);
                self.llc_victim(v, false);
                self.hit(self.dmac_hit);
                return;
            }
        }
        self.cpu.misses += 1;
        let v = self.llc.insert(line, write, 0, false, self.llc_ways);
        self.llc_victim(v, false);
        self.mem_read(line, false);
    }

    /// One DMA line write (the device writes memory; whole lines).
    #[inline]
    pub fn dma_write(&mut self, line: u64) {
        self.dma.refs += 1;
        match self.scheme {
            Scheme::Snoop => {
                if let Some(s) = self.llc.lookup(line) {
                    self.llc.remove(s);
                    self.snoop_inv += 1;
                }
                self.dma.misses += 1;
                self.mem_write(line, Cat::DmaWrite);
            }
            Scheme::Shared => {
                if let Some(s) = self.llc.lookup(line) {
                    self.llc.touch(s, true);
                    self.dma.llc_hits += 1;
                } else {
                    self.dma.allocations += 1;
                    let v = self.llc.insert(line, true, 0, false, self.ddio_ways);
                    self.llc_victim(v, true);
                }
                self.hit(self.llc_hit);
            }
            Scheme::DmaCache { .. } => {
                let hit = self.dmac.as_mut().and_then(|dc| {
                    let s = dc.lookup(line)?;
                    if dc.touch(s, true) {
                        Some(true)
                    } else {
                        Some(false)
                    }
                });
                match hit {
                    Some(pf) => {
                        if pf {
                            self.dcs.prefetch_hits += 1;
                        }
                        self.dma.dma_cache_hits += 1;
                    }
                    None => {
                        if let Some(s) = self.llc.lookup(line) {
                            // The device overwrites the whole line: it moves
                            // to the DMA cache with no data to carry.
                            self.llc.remove(s);
                            self.dcs.from_llc += 1;
                            self.dma.llc_hits += 1;
                        } else {
                            self.dma.allocations += 1;
                        }
                        self.dmac_insert(line, true, 0, false, true);
                    }
                }
                self.hit(self.dmac_hit);
            }
        }
    }

    /// One DMA line read (the device reads memory).
    #[inline]
    pub fn dma_read(&mut self, line: u64) {
        self.dma.refs += 1;
        match self.scheme {
            Scheme::Snoop | Scheme::Shared => {
                if self.llc.lookup(line).is_some() {
                    self.dma.llc_hits += 1;
                    self.hit(self.llc_hit);
                } else {
                    self.dma.misses += 1;
                    self.mem_read(line, true);
                }
            }
            Scheme::DmaCache { .. } => {
                let found = self.dmac.as_mut().and_then(|dc| {
                    let s = dc.lookup(line)?;
                    let pf = dc.touch(s, false);
                    Some((pf, dc.fill(s)))
                });
                if let Some((pf, fill)) = found {
                    if pf {
                        self.dcs.prefetch_hits += 1;
                    }
                    self.await_fill(fill, Cat::DmaRead);
                    self.dma.dma_cache_hits += 1;
                    self.hit(self.dmac_hit);
                } else if let Some(s) = self.llc.lookup(line) {
                    let (dirty, _) = self.llc.remove(s);
                    self.dcs.from_llc += 1;
                    self.dma.llc_hits += 1;
                    self.dmac_insert(line, dirty, 0, false, true);
                    self.hit(self.dmac_hit);
                } else {
                    self.dma.misses += 1;
                    let tk = self.mem_read(line, true);
                    self.dmac_insert(line, false, PENDING | tk, false, true);
                }
                if self.prefetch {
                    self.prefetch_after(line);
                }
            }
        }
    }

    /// Sequential prefetch of the next `degree` lines into the DMA cache,
    /// within the block (page) of `line`.
    fn prefetch_after(&mut self, line: u64) {
        let block = self.addr(line) >> self.pf_block_shift;
        for k in 1..=self.pf_degree {
            let n = line + k;
            if self.addr(n) >> self.pf_block_shift != block {
                break;
            }
            let present = self.dmac.as_ref().is_some_and(|c| c.lookup(n).is_some())
                || self.llc.lookup(n).is_some();
            if present {
                continue;
            }
            self.dcs.prefetches += 1;
            // A prefetch does not take an outstanding slot: nobody waits on
            // it until the line is used.
            let (tk, acc) = self.dram.read(self.addr(n), self.now);
            self.wait_until(acc, Cat::DmaRead);
            self.dmac_insert(n, false, PENDING | tk, true, true);
        }
    }

    fn lines(&self, addr: u64, len: u64) -> (u64, u64) {
        let first = addr >> self.line_shift;
        let last = (addr.saturating_add(len.max(1) - 1)) >> self.line_shift;
        (first, last)
    }

    /// Waits for every outstanding DMA read (end of a device-reads transfer).
    fn drain_dma_reads(&mut self) {
        while let Some(tk) = self.dma_slots.pop_front() {
            let c = self.dram.completion(tk);
            self.wait_until(c, Cat::DmaRead);
        }
    }

    /// Replays one record.
    #[inline]
    pub fn step(&mut self, r: &Record) {
        self.records += 1;
        let g = r.gap_ns.saturating_mul(1000);
        self.now += g;
        self.bd[0] += g;
        match r.kind {
            Kind::Ref => {
                let (first, last) = self.lines(r.addr, r.len as u64);
                for line in first..=last {
                    match (r.source, r.write) {
                        (Source::Cpu, w) => self.cpu_access(line, w),
                        (Source::Dma, true) => self.dma_write(line),
                        (Source::Dma, false) => self.dma_read(line),
                    }
                }
            }
            Kind::Begin => self.transfers += 1,
            Kind::End => {
                if !r.write {
                    self.drain_dma_reads();
                }
            }
            Kind::Xfer => {
                self.transfers += 1;
                let (first, last) = self.lines(r.addr, r.len as u64);
                for line in first..=last {
                    if line != first {
                        self.now += self.line_gap;
                        self.bd[0] += self.line_gap;
                    }
                    if r.write {
                        self.dma_write(line)
                    } else {
                        self.dma_read(line)
                    }
                }
                if !r.write {
                    self.drain_dma_reads();
                }
            }
        }
    }

    /// Ends the run: waits for everything in flight and returns the result.
    pub fn finish(mut self) -> SchemeResult {
        while let Some(tk) = self.cpu_slots.pop_front() {
            let c = self.dram.completion(tk);
            self.wait_until(c, Cat::CpuRead);
        }
        self.drain_dma_reads();
        let end = self.dram.finish();
        if end > self.now {
            self.bd[6] += end - self.now;
            self.now = end;
        }
        let f = |i: usize| self.bd[i] as f64 / 1000.0;
        let total_ns = self.now as f64 / 1000.0;
        SchemeResult {
            scheme: self.scheme.to_string(),
            total_ns,
            total_cycles: (self.now as u128 * self.freq_mhz as u128 / 1_000_000) as u64,
            speedup_vs_snoop: None,
            breakdown_ns: Breakdown {
                compute_ns: f(0),
                cache_hit_ns: f(1),
                cpu_read_mem_ns: f(2),
                cpu_writeback_mem_ns: f(3),
                dma_read_mem_ns: f(4),
                dma_write_mem_ns: f(5),
                final_drain_ns: f(6),
            },
            cpu: self.cpu,
            dma: self.dma,
            llc_dirty_evictions: self.llc_dirty_ev,
            llc_dirty_evictions_by_dma: self.llc_dirty_ev_dma,
            snoop_invalidations: self.snoop_inv,
            dma_cache: self.dmac.is_some().then_some(self.dcs),
            dram: self.dram.stats(),
            records: self.records,
            transfers: self.transfers,
        }
    }
}

/// Runs one scheme over a trace.
pub fn simulate<S: RecordSource>(
    cfg: &SimConfig,
    scheme: Scheme,
    src: &mut S,
) -> Result<SchemeResult, SimError> {
    let mut m = Machine::new(cfg, scheme).map_err(SimError::Config)?;
    let mut r = Record::default();
    let mut span = TraceSpan::default();
    while src.next_record(&mut r)? {
        span.add(std::slice::from_ref(&r))?;
        m.step(&r);
    }
    Ok(m.finish())
}

/// The longest trace the simulator replays, in nanoseconds of the trace's
/// own time (its gaps and transfer lengths): 10^15 ns, 11.6 days. The
/// simulated clock counts picoseconds in 64 bits (213 days); the rest is
/// headroom for the stalls the model adds. A longer trace is refused, not
/// wrapped or overflowed.
pub const MAX_TRACE_SPAN_NS: u64 = 1_000_000_000_000_000;

/// The running time span of the records replayed so far.
#[derive(Default)]
pub(crate) struct TraceSpan {
    ns: u64,
    records: u64,
}

impl TraceSpan {
    /// Adds `recs`; an error once the span passes [`MAX_TRACE_SPAN_NS`].
    pub(crate) fn add(&mut self, recs: &[Record]) -> Result<(), SimError> {
        for r in recs {
            self.records += 1;
            self.ns = self.ns.saturating_add(r.gap_ns);
            if self.ns > MAX_TRACE_SPAN_NS {
                return Err(SimError::Trace(TraceError::Format {
                    path: "trace".into(),
                    message: format!(
                        "record {} takes the trace past 10^15 ns (11.6 days), the longest the simulator's picosecond clock replays; shorten the gaps",
                        self.records
                    ),
                }));
            }
        }
        Ok(())
    }
}

/// Fills `speedup_vs_snoop` from the `snoop` entry, if there is one.
pub fn fill_speedups(results: &mut [SchemeResult]) {
    let base = results
        .iter()
        .find(|r| r.scheme == "snoop")
        .map(|r| r.total_ns);
    if let Some(b) = base {
        for r in results.iter_mut() {
            r.speedup_vs_snoop = (r.total_ns > 0.0).then(|| b / r.total_ns);
        }
    }
}

/// Errors of a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The parameters cannot be simulated.
    #[error("{0}")]
    Config(String),
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
}
