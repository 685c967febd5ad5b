//! References per second: the file-copy workload, every scheme, DDR4-3200,
//! decoding the binary trace from memory included: each scheme alone, and
//! all seven in one run as `dmalab sim compare` does (decoded once).
//!
//! `cargo bench -p dmalab-sim` (criterion prints time per iteration and
//! the throughput in elements = line references per second).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use dmalab_sim::run::compare_source;
use dmalab_sim::synth::FileCopy;
use dmalab_sim::trace::{BinaryDecoder, BinaryEncoder, Kind, Record};
use dmalab_sim::{simulate, Scheme, SimConfig};
use std::path::Path;

fn trace_bytes() -> (Vec<u8>, u64) {
    let mut enc = BinaryEncoder::new(Vec::new()).expect("in memory");
    let mut lines = 0u64;
    FileCopy {
        total_bytes: 8 << 20,
        ..Default::default()
    }
    .generate(&mut |r: &Record| {
        // File copy's references are one line each; markers are not
        // references.
        if r.kind == Kind::Ref {
            lines += 1;
        }
        enc.write(r)
            .map_err(|e| dmalab_sim::trace::TraceError::Invalid(e.to_string()))
    })
    .expect("generates");
    (enc.into_inner(), lines)
}

fn bench(c: &mut Criterion) {
    let (bytes, records) = trace_bytes();
    let mut cfg = SimConfig::paper();
    cfg.set("dram.preset", "ddr4-3200").expect("preset");
    let mut g = c.benchmark_group("file-copy-8MiB-ddr4");
    g.sample_size(10);
    for s in Scheme::paper_set() {
        g.throughput(Throughput::Elements(records));
        g.bench_function(s.to_string(), |b| {
            b.iter(|| {
                let mut d = BinaryDecoder::new(&bytes[..], Path::new("mem")).expect("header");
                simulate(&cfg, s, &mut d).expect("runs")
            })
        });
    }
    g.throughput(Throughput::Elements(
        records * Scheme::paper_set().len() as u64,
    ));
    g.bench_function("all-seven", |b| {
        b.iter(|| {
            let mut d = BinaryDecoder::new(&bytes[..], Path::new("mem")).expect("header");
            compare_source(&cfg, &Scheme::paper_set(), &mut d).expect("runs")
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
