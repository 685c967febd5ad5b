//! The DMA-cache paper's findings, checked with the committed parameter set
//! (`params/paper.toml`) on the fixed-seed synthetic workloads.
//!
//! What holds is asserted. What does not hold with this model is asserted
//! too, in tests marked `#[ignore]` with the reason: `cargo test -p
//! dmalab-sim --test paper -- --ignored` shows them failing. docs/sim.md has
//! the figures and the sweep that shows where each ordering holds.

use dmalab_sim::engine::SchemeResult;
use dmalab_sim::run::{compare_records, orderings};
use dmalab_sim::synth::{FileCopy, TpchScan, WebServer};
use dmalab_sim::trace::Record;
use dmalab_sim::{Scheme, SimConfig};
use std::sync::OnceLock;

fn records(
    gen: impl FnOnce(&mut dyn FnMut(&Record) -> Result<(), dmalab_sim::trace::TraceError>),
) -> Vec<Record> {
    let mut v = Vec::new();
    gen(&mut |r: &Record| {
        v.push(*r);
        Ok(())
    });
    v
}

fn run(recs: &[Record]) -> Vec<SchemeResult> {
    compare_records(&SimConfig::paper(), &Scheme::paper_set(), recs).unwrap()
}

fn file_copy() -> &'static [SchemeResult] {
    static R: OnceLock<Vec<SchemeResult>> = OnceLock::new();
    R.get_or_init(|| {
        let w = FileCopy {
            total_bytes: 16 << 20,
            ..Default::default()
        };
        run(&records(|s| w.generate(s).unwrap()))
    })
}

fn tpch() -> &'static [SchemeResult] {
    static R: OnceLock<Vec<SchemeResult>> = OnceLock::new();
    R.get_or_init(|| {
        let w = TpchScan {
            total_bytes: 16 << 20,
            ..Default::default()
        };
        run(&records(|s| w.generate(s).unwrap()))
    })
}

fn web() -> &'static [SchemeResult] {
    static R: OnceLock<Vec<SchemeResult>> = OnceLock::new();
    R.get_or_init(|| {
        let w = WebServer {
            requests: 4000,
            ..Default::default()
        };
        run(&records(|s| w.generate(s).unwrap()))
    })
}

fn show(name: &str, r: &[SchemeResult]) -> String {
    let mut s = format!("{name}:\n");
    for x in r {
        s.push_str(&format!(
            "  {:<18} {:>12.1} us  speedup {:.3}\n",
            x.scheme,
            x.total_ns / 1000.0,
            x.speedup_vs_snoop.unwrap_or(0.0)
        ));
    }
    s
}

#[test]
fn dma_cache_256k_with_prefetch_beats_snooping_on_all_three() {
    for (name, r) in [("file copy", file_copy()), ("tpch", tpch()), ("web", web())] {
        assert_eq!(
            orderings(r).dma_cache_256k_pf_beats_snoop,
            Some(true),
            "{}",
            show(name, r)
        );
    }
}

#[test]
fn bigger_dma_caches_help_more_on_file_copy_and_tpch() {
    // A consequence of the paper's explanation (dirty lines evicted before
    // the CPU reads them): 32K < 64K < 128K < 256K in speed.
    for (name, r) in [("file copy", file_copy()), ("tpch", tpch())] {
        let t = |s: &str| r.iter().find(|x| x.scheme == s).unwrap().total_ns;
        let sizes = [
            "dma-cache-32K",
            "dma-cache-64K",
            "dma-cache-128K",
            "dma-cache-256K",
        ];
        for w in sizes.windows(2) {
            assert!(
                t(w[1]) < t(w[0]),
                "{} {} vs {}\n{}",
                name,
                w[1],
                w[0],
                show(name, r)
            );
        }
    }
}

#[test]
#[ignore = "does not hold with params/paper.toml: the shared cache is faster than snooping (docs/sim.md)"]
fn shared_cache_loses_to_snooping_on_file_copy_and_tpch() {
    for (name, r) in [("file copy", file_copy()), ("tpch", tpch())] {
        assert_eq!(
            orderings(r).shared_loses_to_snoop,
            Some(true),
            "{}",
            show(name, r)
        );
    }
}

#[test]
#[ignore = "does not hold with params/paper.toml: 32K and 64K DMA caches tie or beat snooping (docs/sim.md)"]
fn dma_caches_under_128k_lose_to_snooping_on_file_copy_and_tpch() {
    for (name, r) in [("file copy", file_copy()), ("tpch", tpch())] {
        assert_eq!(
            orderings(r).small_dma_caches_lose_to_snoop,
            Some(true),
            "{}",
            show(name, r)
        );
    }
}
