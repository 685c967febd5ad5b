//! Exact hit, miss and row-state counts on small hand-written text traces.
//! Every expected number is derived by hand in the comments.

use dmalab_sim::engine::SchemeResult;
use dmalab_sim::trace::{parse_text_line, Record, VecSource};
use dmalab_sim::{simulate, Scheme, SimConfig};

fn trace(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| parse_text_line(l).unwrap())
        .collect()
}

fn run(cfg: &SimConfig, scheme: &str, text: &str) -> SchemeResult {
    let recs = trace(text);
    simulate(
        cfg,
        Scheme::parse(scheme).unwrap(),
        &mut VecSource::new(&recs),
    )
    .unwrap()
}

/// The paper preset (DDR2-800: 8 banks, 8 KiB rows, rows every 64 KiB of a
/// bank) with an LLC of 2 sets x 2 ways.
fn tiny() -> SimConfig {
    let mut c = SimConfig::paper();
    c.llc.size_bytes = 256;
    c.llc.ways = 2;
    c.llc.ddio_ways = 2;
    c.dma_cache.ways = 2;
    c
}

const T1: &str = "
0 dma-w 0x0 128   # lines 0 and 1
0 cpu-r 0x0 64    # line 0
0 cpu-r 0x0 64
0 cpu-w 0x40 64   # line 1
0 dma-w 0x40 64
0 dma-r 0x0 64
";

#[test]
fn snooping_counts() {
    let r = run(&tiny(), "snoop", T1);
    // CPU: miss, hit, miss (write-allocate fill).
    assert_eq!((r.cpu.refs, r.cpu.llc_hits, r.cpu.misses), (3, 1, 2));
    // DMA: three line writes to memory, one read served by the cache.
    assert_eq!((r.dma.refs, r.dma.misses, r.dma.llc_hits), (4, 3, 1));
    // The DMA write to line 1 invalidated the CPU's dirty copy.
    assert_eq!(r.snoop_invalidations, 1);
    assert_eq!(r.llc_dirty_evictions, 0);
    assert_eq!((r.dram.reads, r.dram.writes), (2, 3));
    // Everything is in row 0 of bank 0. The first read finds the bank
    // closed, the second hits the open row. The writes stay queued (no more
    // than the low watermark of 8) until the end, then all hit row 0.
    assert_eq!(
        (
            r.dram.read_rows.hits,
            r.dram.read_rows.misses,
            r.dram.read_rows.conflicts
        ),
        (1, 1, 0)
    );
    assert_eq!(
        (
            r.dram.write_rows.hits,
            r.dram.write_rows.misses,
            r.dram.write_rows.conflicts
        ),
        (3, 0, 0)
    );
}

#[test]
fn shared_cache_counts() {
    let r = run(&tiny(), "shared", T1);
    // Both DMA lines are injected; everything afterwards hits.
    assert_eq!((r.cpu.refs, r.cpu.llc_hits, r.cpu.misses), (3, 3, 0));
    assert_eq!(
        (r.dma.refs, r.dma.allocations, r.dma.llc_hits, r.dma.misses),
        (4, 2, 2, 0)
    );
    assert_eq!((r.dram.reads, r.dram.writes), (0, 0));
}

#[test]
fn ddio_way_limit_confines_injection() {
    // One set of two ways; DMA may allocate in way 0 only.
    let mut c = tiny();
    c.llc.size_bytes = 128;
    c.llc.ddio_ways = 1;
    let r = run(
        &c,
        "shared",
        "
0 cpu-w 0x0 64    # line 0 -> way 0, dirty
0 cpu-r 0x40 64   # line 1 -> way 1
0 dma-w 0x80 64   # line 2 may only replace way 0: line 0 written back
0 dma-w 0xc0 64   # line 3 replaces line 2 (dirty): written back
0 cpu-r 0x40 64   # line 1 survived in way 1: hit
0 cpu-r 0x80 64   # line 2 is gone: miss; LRU victim is line 3 (dirty)
",
    );
    assert_eq!((r.cpu.refs, r.cpu.llc_hits, r.cpu.misses), (4, 1, 3));
    assert_eq!(r.dma.allocations, 2);
    assert_eq!(
        (r.llc_dirty_evictions, r.llc_dirty_evictions_by_dma),
        (3, 2)
    );
    assert_eq!((r.dram.reads, r.dram.writes), (3, 3));
}

#[test]
fn dma_cache_migrates_and_evicts() {
    let r = run(
        &tiny(),
        "dma-cache-128",
        "
0 dma-w 0x0 192   # lines 0,1,2 into the 2-line DMA cache: line 0 (dirty) written back
0 cpu-r 0x40 64   # line 1: DMA-cache hit, moves to the LLC
0 cpu-r 0x0 64    # line 0: memory
0 dma-r 0x40 64   # line 1: LLC hit, moves back to the DMA cache (free slot)
0 dma-r 0x100 64  # line 4: memory; evicts line 2 (all dirty: least recent dirty)
",
    );
    let d = r.dma_cache.unwrap();
    assert_eq!(
        (r.dma.refs, r.dma.allocations, r.dma.llc_hits, r.dma.misses),
        (5, 3, 1, 1)
    );
    assert_eq!((r.cpu.refs, r.cpu.dma_cache_hits, r.cpu.misses), (2, 1, 1));
    assert_eq!((d.to_llc, d.from_llc, d.dirty_evictions), (1, 1, 2));
    assert_eq!((r.dram.reads, r.dram.writes), (2, 2));
}

#[test]
fn sequential_prefetch_counts() {
    let mut c = tiny();
    c.dma_cache.ways = 4;
    c.dma_cache.prefetch_degree = 2;
    let t = "
0 dma-r 0x0 64
0 dma-r 0x40 64
0 dma-r 0x80 64
0 dma-r 0xc0 64
";
    // Without prefetch: four misses.
    let r = run(&c, "dma-cache-256", t);
    assert_eq!(
        (r.dma.misses, r.dma.dma_cache_hits, r.dram.reads),
        (4, 0, 4)
    );
    // With degree 2: line 0 misses and fetches 1, 2; each hit fetches one
    // more (3, 4, 5): 5 prefetches, 3 used, 6 DRAM reads; the 4-line cache
    // evicts lines 0 and 1 (clean, used) for 4 and 5.
    let r = run(&c, "dma-cache-256-pf", t);
    let d = r.dma_cache.unwrap();
    assert_eq!(
        (r.dma.misses, r.dma.dma_cache_hits, r.dram.reads),
        (1, 3, 6)
    );
    assert_eq!(
        (d.prefetches, d.prefetch_hits, d.prefetch_unused),
        (5, 3, 0)
    );
}

#[test]
fn row_conflicts_and_exact_time() {
    // DDR2-800, 2.5 ns clock, CL = tRCD = tRP = 5, tRAS = 18, burst 4; each
    // miss first looks up the LLC (10 ns; no on-chip path in the paper
    // set), so each read reaches the controller 10 ns after the last data.
    let r = run(
        &SimConfig::paper(),
        "snoop",
        "
0 cpu-r 0x0 64      # bank 0 row 0, closed: ACT 10, CAS 22.5, data 45 ns
0 cpu-r 0x10000 64  # bank 0 row 1, at 55: PRE at tRAS 55, ACT 67.5, CAS 80, data 102.5
0 cpu-r 0x40 64     # row 0 again, at 112.5: PRE 112.5 (tRAS), ACT 125, CAS 137.5, data 160
0 cpu-r 0x2000 64   # bank 1, closed, at 170: ACT 170, CAS 182.5, data 205
",
    );
    assert_eq!(
        (
            r.dram.read_rows.hits,
            r.dram.read_rows.misses,
            r.dram.read_rows.conflicts
        ),
        (0, 2, 2)
    );
    assert_eq!(r.total_ns, 205.0);
    assert_eq!(r.total_cycles, 205);
    assert_eq!(r.breakdown_ns.cpu_read_mem_ns, 205.0);
}

#[test]
fn whole_transfer_records_expand_to_lines() {
    let a = run(
        &tiny(),
        "snoop",
        "0 xfer-w 0x1000 256 900\n0 cpu-r 0x1000 64\n",
    );
    let b = run(
        &tiny(),
        "snoop",
        "0 begin-w 0x1000 256\n0 dma-w 0x1000 256\n0 end-w 0x1000 256\n0 cpu-r 0x1000 64\n",
    );
    assert_eq!((a.dma.refs, a.dram.writes, a.transfers), (4, 4, 1));
    assert_eq!((b.dma.refs, b.dram.writes, b.transfers), (4, 4, 1));
    assert_eq!(a.total_ns, b.total_ns);
}
