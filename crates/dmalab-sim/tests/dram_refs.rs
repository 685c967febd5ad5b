//! Replays the DRAM check streams through dmalab's DRAM model and compares
//! with the figures DRAMsim3 and Ramulator 2 gave for the same streams
//! (committed in `tests/fixtures/sim/dram-refs.json` by `scripts/compare-dram.sh
//! --fixture`), within issue 16's bounds: saturated time within 10% of
//! the references' mean, light-load read latency within 15%, row hits
//! within 5% where the references agree with each other (within 5%).

use dmalab_sim::dramcheck::{replay, stream, StreamFigures, StreamKind};
use dmalab_sim::SimConfig;
use serde_json::Value;

fn figures(v: &Value) -> Option<StreamFigures> {
    serde_json::from_value(v.clone()).ok()
}

/// Every check of every run: (what, dmalab, refs' mean, bound, within).
fn checks() -> Vec<(String, f64, f64, f64, bool)> {
    let text = include_str!("../../../tests/fixtures/sim/dram-refs.json");
    let doc: Value = serde_json::from_str(text).expect("fixture is JSON");
    let n = doc["n"].as_u64().expect("n") as usize;
    let seed = doc["seed"].as_u64().expect("seed");
    let slots = doc["slots"].as_u64().expect("slots") as usize;
    let runs = doc["runs"].as_array().expect("runs");
    let light = runs
        .iter()
        .filter_map(|r| r["gap"].as_u64())
        .max()
        .expect("a run");
    let cfg = SimConfig::modern();
    let mut out = Vec::new();
    for r in runs {
        let kind = StreamKind::parse(r["stream"].as_str().expect("stream")).expect("kind");
        let gap = r["gap"].as_u64().expect("gap");
        let refs: Vec<StreamFigures> = ["dramsim3", "ramulator2"]
            .iter()
            .filter_map(|k| figures(&r[*k]))
            .collect();
        assert!(!refs.is_empty(), "{kind:?} gap {gap}: no reference figures");
        let mean =
            |f: fn(&StreamFigures) -> f64| refs.iter().map(f).sum::<f64>() / refs.len() as f64;
        let d = replay(&cfg.dram, &stream(kind, n, seed), gap, slots).expect("replay");
        let name = |what: &str| format!("{} gap {gap} {what}", kind.name());
        let mut check = |what: &str, ours: f64, theirs: f64, bound: f64| {
            let within = (ours / theirs - 1.0).abs() <= bound;
            out.push((name(what), ours, theirs, bound, within));
        };
        if gap == 0 {
            check("total_ns", d.total_ns, mean(|f| f.total_ns), 0.10);
        }
        if gap == light {
            check(
                "read_lat_mean_ns",
                d.read_lat_mean_ns,
                mean(|f| f.read_lat_mean_ns),
                0.15,
            );
        }
        let hits: Vec<f64> = refs.iter().map(|f| f.row_hits as f64).collect();
        let (lo, hi) = hits
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &h| (a.min(h), b.max(h)));
        if refs.len() > 1 && hi > 0.0 && hi / lo.max(1.0) <= 1.05 {
            check(
                "row_hits",
                d.row_hits as f64,
                mean(|f| f.row_hits as f64),
                0.05,
            );
        }
    }
    out
}

/// Checks out of bounds with the committed model, and why: asserted apart,
/// never by loosening the bound. Empty: every check is met since DRAMsim3 runs
/// with one 32-entry command queue for the rank, the comparison's window
/// (`scripts/compare-dram.sh`; with its own 8-entry per-bank queues it
/// switched rows 4x as often on the rows stream and was 27% slower there).
const KNOWN_UNMET: &[&str] = &[];

fn report(bad: &[&(String, f64, f64, f64, bool)]) {
    for (what, ours, theirs, bound, _) in bad {
        eprintln!(
            "{what}: dmalab {ours:.1}, references {theirs:.1} ({:+.1}%, bound {:.0}%)",
            (ours / theirs - 1.0) * 100.0,
            bound * 100.0
        );
    }
}

#[test]
fn dram_model_stays_within_the_references_bounds() {
    let all = checks();
    assert!(all.len() >= 8, "too few checks: {}", all.len());
    let bad: Vec<_> = all
        .iter()
        .filter(|c| !c.4 && !KNOWN_UNMET.contains(&c.0.as_str()))
        .collect();
    report(&bad);
    assert!(
        bad.is_empty(),
        "{} of {} checks out of bounds",
        bad.len(),
        all.len()
    );
}

#[test]
fn known_unmet_names_only_checks_that_exist_and_fail() {
    // A check that is met again must leave KNOWN_UNMET, so the list never
    // hides a regression.
    let all = checks();
    for name in KNOWN_UNMET {
        let c = all.iter().find(|c| c.0 == *name);
        assert!(c.is_some(), "KNOWN_UNMET names no check: {name}");
        assert!(c.is_some_and(|c| !c.4), "KNOWN_UNMET check is met: {name}");
    }
}
