//! Running schemes over traces: compare, sweep, the paper's orderings, and
//! the text tables.

use crate::config::SimConfig;
use crate::engine::{fill_speedups, simulate, Machine, SchemeResult, SimError, TraceSpan};
use crate::scheme::Scheme;
use crate::trace::{Device, Record, RecordSource, TraceReader, VecSource};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The device-written data table again, one block per device the trace
/// tags (its stream: `nic-rx`, `disk-rd`, ...), with snooping's CPU misses
/// and DRAM traffic over each scheme's (`miss_x`, `dram_x`: how many times
/// fewer; `inf` when the scheme has none and snooping some). Nothing for a
/// trace whose device writes are all untagged: the totals say it all.
fn by_device_table(s: &mut String, results: &[SchemeResult]) {
    let tagged = results
        .iter()
        .flat_map(|r| &r.io_by_device)
        .any(|d| d.device != Device::Untagged.name());
    if !tagged {
        return;
    }
    let _ = writeln!(
        s,
        "
device-written data by stream (lines; miss_x, dram_x: snoop's CPU misses, DRAM traffic over the scheme's)"
    );
    let _ = writeln!(
        s,
        "{:<20} {:<10} {:>10} {:>7} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8}",
        "scheme",
        "stream",
        "dma_wr",
        "wr_hit",
        "leaked",
        "cpu_hit",
        "cpu_miss",
        "dram",
        "miss_x",
        "dram_x"
    );
    let snoop = results.iter().find(|r| r.scheme == "snoop");
    for dev in Device::ALL {
        let of = |r: &SchemeResult| {
            r.io_by_device
                .iter()
                .find(|d| d.device == dev.name())
                .map(|d| d.io)
        };
        for r in results {
            let Some(io) = of(r) else { continue };
            let base = snoop.and_then(of);
            let x = |b: Option<u64>, v: u64| match b {
                None => "-".to_string(),
                Some(0) => "-".to_string(),
                Some(_) if v == 0 => "inf".to_string(),
                Some(b) => format!("{:.1}", b as f64 / v as f64),
            };
            let _ = writeln!(
                s,
                "{:<20} {:<10} {:>10} {:>6.1}% {:>9} {:>9} {:>9} {:>10} {:>8} {:>8}",
                r.scheme,
                dev.stream(true),
                io.writes,
                pct(io.write_hits, io.writes),
                io.leaked,
                io.cpu_hits,
                io.cpu_misses,
                io.dram_lines(),
                x(base.map(|b| b.cpu_misses), io.cpu_misses),
                x(base.map(|b| b.dram_lines()), io.dram_lines()),
            );
        }
    }
}

/// Runs every scheme over the trace file; fills the speedups.
///
/// The file is read and decoded once: a chunk of records at a time, each
/// chunk replayed through every scheme's machine before the next is read
/// (the schemes do not interact, so this gives the same results as one
/// pass per scheme, and decoding is still part of the run).
pub fn compare_file(
    cfg: &SimConfig,
    schemes: &[Scheme],
    path: &Path,
) -> Result<Vec<SchemeResult>, SimError> {
    if schemes.is_empty() {
        return Ok(Vec::new());
    }
    let mut rd = TraceReader::open(path)?;
    compare_source(cfg, schemes, &mut rd)
}

/// Records per chunk [`compare_source`] decodes before replaying it
/// (32 bytes each: small enough to stay in the host's caches).
const CHUNK_RECORDS: usize = 1 << 14;

/// Runs every scheme over the records of `src`, decoding each record once
/// (see [`compare_file`]); fills the speedups. SIGINT or SIGTERM
/// ([`dmalab_core::signal`]) ends the replay after the current chunk, with
/// results for the records replayed so far.
pub fn compare_source<S: RecordSource>(
    cfg: &SimConfig,
    schemes: &[Scheme],
    src: &mut S,
) -> Result<Vec<SchemeResult>, SimError> {
    let mut machines = schemes
        .iter()
        .map(|&s| Machine::new(cfg, s).map_err(SimError::Config))
        .collect::<Result<Vec<_>, _>>()?;
    let mut chunk = vec![Record::default(); CHUNK_RECORDS];
    let mut span = TraceSpan::default();
    loop {
        let mut n = 0;
        while n < CHUNK_RECORDS && src.next_record(&mut chunk[n])? {
            n += 1;
        }
        span.add(&chunk[..n])?;
        for m in machines.iter_mut() {
            for r in &chunk[..n] {
                m.step(r);
            }
        }
        // A signal ends the replay here: the results cover the records
        // replayed so far, and the caller marks them interrupted.
        if n < CHUNK_RECORDS || dmalab_core::signal::stop_requested() {
            break;
        }
    }
    let mut out: Vec<SchemeResult> = machines.into_iter().map(Machine::finish).collect();
    fill_speedups(&mut out);
    Ok(out)
}

/// Runs every scheme over records held in memory; fills the speedups.
pub fn compare_records(
    cfg: &SimConfig,
    schemes: &[Scheme],
    recs: &[crate::trace::Record],
) -> Result<Vec<SchemeResult>, SimError> {
    let mut out = Vec::with_capacity(schemes.len());
    for &s in schemes {
        out.push(simulate(cfg, s, &mut VecSource::new(recs))?);
    }
    fill_speedups(&mut out);
    Ok(out)
}

/// The DMA-cache paper's findings, checked on one set of results. `None`
/// when a scheme the check needs was not run.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Orderings {
    /// The 256 KiB DMA cache with prefetch is faster than snooping.
    pub dma_cache_256k_pf_beats_snoop: Option<bool>,
    /// The shared cache is slower than snooping.
    pub shared_loses_to_snoop: Option<bool>,
    /// Every DMA cache under 128 KiB that was run is slower than snooping.
    pub small_dma_caches_lose_to_snoop: Option<bool>,
}

fn total(results: &[SchemeResult], name: &str) -> Option<f64> {
    results
        .iter()
        .find(|r| r.scheme == name)
        .map(|r| r.total_ns)
}

/// Checks the paper's orderings.
pub fn orderings(results: &[SchemeResult]) -> Orderings {
    let Some(snoop) = total(results, "snoop") else {
        return Orderings::default();
    };
    let small: Vec<f64> = results
        .iter()
        .filter(|r| {
            matches!(Scheme::parse(&r.scheme), Ok(Scheme::DmaCache { size_bytes, .. }) if size_bytes < 128 << 10)
        })
        .map(|r| r.total_ns)
        .collect();
    Orderings {
        dma_cache_256k_pf_beats_snoop: total(results, "dma-cache-256K-pf").map(|t| t < snoop),
        shared_loses_to_snoop: total(results, "shared").map(|t| t > snoop),
        small_dma_caches_lose_to_snoop: (!small.is_empty())
            .then(|| small.iter().all(|&t| t > snoop)),
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// The scheme table `dmalab sim compare` prints.
pub fn table(results: &[SchemeResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<20} {:>12} {:>8} {:>7} {:>7} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6}",
        "scheme",
        "total_us",
        "speedup",
        "cpu_hit",
        "dma_hit",
        "dirty_ev",
        "dram_rd",
        "dram_wr",
        "row_h",
        "row_m",
        "row_c"
    );
    // Without CPU references every scheme takes about the same time: a
    // column of 1.000 would read as a measured tie (see [`no_cpu_note`]).
    let no_cpu = no_cpu_note(results).is_some();
    for r in results {
        let rows =
            |f: fn(&crate::dram::RowStats) -> u64| f(&r.dram.read_rows) + f(&r.dram.write_rows);
        let acc = r.dram.reads + r.dram.writes;
        let dirty = r.llc_dirty_evictions + r.dma_cache.map_or(0, |d| d.dirty_evictions);
        let _ = writeln!(
            s,
            "{:<20} {:>12.1} {:>8} {:>6.1}% {:>6.1}% {:>9} {:>9} {:>9} {:>5.1}% {:>5.1}% {:>5.1}%",
            r.scheme,
            r.total_ns / 1000.0,
            r.speedup_vs_snoop
                .filter(|_| !no_cpu)
                .map_or("-".to_string(), |v| format!("{v:.3}")),
            pct(r.cpu.llc_hits + r.cpu.dma_cache_hits, r.cpu.refs),
            pct(r.dma.llc_hits + r.dma.dma_cache_hits, r.dma.refs),
            dirty,
            r.dram.reads,
            r.dram.writes,
            pct(rows(|x| x.hits), acc),
            pct(rows(|x| x.misses), acc),
            pct(rows(|x| x.conflicts), acc),
        );
    }
    if results.iter().any(|r| r.io.writes > 0) {
        let _ = writeln!(
            s,
            "\ndevice-written data (lines): DMA writes, share found in a cache, pushed out unread, a core's first reads served by a cache / by memory, DRAM traffic"
        );
        let _ = writeln!(
            s,
            "{:<20} {:>10} {:>7} {:>9} {:>9} {:>9} {:>10}",
            "scheme", "dma_wr", "wr_hit", "leaked", "cpu_hit", "cpu_miss", "dram"
        );
        for r in results {
            let io = &r.io;
            let _ = writeln!(
                s,
                "{:<20} {:>10} {:>6.1}% {:>9} {:>9} {:>9} {:>10}",
                r.scheme,
                io.writes,
                pct(io.write_hits, io.writes),
                io.leaked,
                io.cpu_hits,
                io.cpu_misses,
                io.dram_lines()
            );
        }
        by_device_table(&mut s, results);
    }
    let _ = writeln!(s, "\ntime breakdown, % of each scheme's total:");
    let _ = writeln!(
        s,
        "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "scheme", "compute", "hit", "cpu_rd", "cpu_wb", "dma_rd", "dma_wr", "drain"
    );
    for r in results {
        let b = &r.breakdown_ns;
        let p = |x: f64| {
            if r.total_ns > 0.0 {
                100.0 * x / r.total_ns
            } else {
                0.0
            }
        };
        let _ = writeln!(
            s,
            "{:<20} {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}%",
            r.scheme,
            p(b.compute_ns),
            p(b.cache_hit_ns),
            p(b.cpu_read_mem_ns),
            p(b.cpu_writeback_mem_ns),
            p(b.dma_read_mem_ns),
            p(b.dma_write_mem_ns),
            p(b.final_drain_ns)
        );
    }
    if let Some(base) = total(results, "snoop").filter(|&t| t > 0.0) {
        // The DMA-cache paper's Fig. 6: each scheme's parts against the
        // same yardstick, so a bar's height is 1 / speedup.
        let _ = writeln!(
            s,
            "\ntime breakdown, % of snoop's total (the DMA-cache paper's Fig. 6):"
        );
        let _ = writeln!(
            s,
            "{:<20} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "scheme", "compute", "hit", "cpu_rd", "cpu_wb", "dma_rd", "dma_wr", "drain", "total"
        );
        for r in results {
            let b = &r.breakdown_ns;
            let p = |x: f64| 100.0 * x / base;
            let _ = writeln!(
                s,
                "{:<20} {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}% {:>7.1}%",
                r.scheme,
                p(b.compute_ns),
                p(b.cache_hit_ns),
                p(b.cpu_read_mem_ns),
                p(b.cpu_writeback_mem_ns),
                p(b.dma_read_mem_ns),
                p(b.dma_write_mem_ns),
                p(b.final_drain_ns),
                p(r.total_ns)
            );
        }
    }
    s
}

/// A note for results of a trace with no CPU references (a `dmalab load
/// --trace` recording holds DMA transfers only): every scheme then takes
/// nearly the same time, and the speedups say nothing about the schemes.
pub fn no_cpu_note(results: &[SchemeResult]) -> Option<String> {
    let refs: u64 = results.iter().map(|r| r.cpu.refs).sum();
    (!results.is_empty() && refs == 0).then(|| {
        "\nnote: the trace has no CPU references (DMA only, as `dmalab load --trace` records): nothing reads what the devices wrote or writes what they read, so the schemes differ only in where DMA data sits and the speedup column is left out (-); add CPU references (e.g. `dmalab sim synth msr`) to compare the schemes\n".to_string()
    })
}

/// One point of a sweep.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SweepPoint {
    /// The swept parameter's value, as given.
    pub value: String,
    /// Every scheme's result at this value.
    pub results: Vec<SchemeResult>,
    /// The paper's orderings at this value.
    pub orderings: Orderings,
}

/// Runs every scheme of a list under one configuration.
pub type RunFn<'a> = dyn FnMut(&SimConfig, &[Scheme]) -> Result<Vec<SchemeResult>, SimError> + 'a;

/// Runs the schemes once per value of `key` (a dotted parameter name).
pub fn sweep(
    base: &SimConfig,
    key: &str,
    values: &[String],
    schemes: &[Scheme],
    run: &mut RunFn<'_>,
) -> Result<Vec<SweepPoint>, SimError> {
    let mut out = Vec::new();
    for v in values {
        let mut cfg = base.clone();
        cfg.set(key, v)
            .map_err(|e| SimError::Config(e.to_string()))?;
        let results = run(&cfg, schemes)?;
        out.push(SweepPoint {
            value: v.clone(),
            orderings: orderings(&results),
            results,
        });
        // A signal ends the sweep after the point in progress (cut short
        // itself by `compare_source`); the caller marks the result.
        if dmalab_core::signal::stop_requested() {
            break;
        }
    }
    Ok(out)
}

fn yn(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

/// The sweep table: speedup against snooping per scheme and value, and
/// whether the paper's orderings hold.
pub fn sweep_table(key: &str, points: &[SweepPoint]) -> String {
    let mut s = String::new();
    let Some(first) = points.first() else {
        return s;
    };
    let _ = write!(s, "{key:<16}");
    for r in &first.results {
        let _ = write!(s, " {:>17}", r.scheme);
    }
    let _ = writeln!(s, " {:>6} {:>6} {:>6}", "pf>sn", "sh<sn", "sm<sn");
    for p in points {
        let _ = write!(s, "{:<16}", p.value);
        // As in `sim compare`: without CPU references the speedups (and the
        // orderings drawn from them) say nothing, and 1.000 would read as a
        // measured tie.
        let no_cpu = no_cpu_note(&p.results).is_some();
        for r in &p.results {
            let cell = match r.speedup_vs_snoop {
                _ if no_cpu => "-".to_string(),
                Some(v) => format!("{v:.3}"),
                None => format!("{:.0}us", r.total_ns / 1000.0),
            };
            let _ = write!(s, " {cell:>17}");
        }
        let o = &p.orderings;
        let order = |v: Option<bool>| if no_cpu { "-" } else { yn(v) };
        let _ = writeln!(
            s,
            " {:>6} {:>6} {:>6}",
            order(o.dma_cache_256k_pf_beats_snoop),
            order(o.shared_loses_to_snoop),
            order(o.small_dma_caches_lose_to_snoop)
        );
    }
    s
}
