//! `dmalab probe` through the binary. Nothing here asserts a latency or a
//! bandwidth value: only relations that hold on any machine (an L1-sized
//! chase is at least 5x faster than one 8x the LLC), result structure, and
//! bad input.

mod common;

use serde_json::Value;
use std::fs;

fn json(path: &std::path::Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).expect("result written")).expect("valid JSON")
}

/// Size of the largest cache of CPU 0 (the LLC), from sysfs.
fn llc_bytes() -> Option<u64> {
    let mut best: Option<(u32, u64)> = None;
    for e in fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()? {
        let d = e.ok()?.path();
        let level: u32 = match fs::read_to_string(d.join("level")) {
            Ok(s) => s.trim().parse().ok()?,
            Err(_) => continue,
        };
        let size = fs::read_to_string(d.join("size")).ok()?;
        let size = size.trim();
        let bytes = if let Some(k) = size.strip_suffix('K') {
            k.parse::<u64>().ok()? << 10
        } else if let Some(m) = size.strip_suffix('M') {
            m.parse::<u64>().ok()? << 20
        } else {
            size.parse().ok()?
        };
        if best.is_none_or(|(l, _)| level > l) {
            best = Some((level, bytes));
        }
    }
    best.map(|(_, b)| b)
}

fn run_latency(size: &str, runtime: &str, out: &std::path::Path) -> Value {
    common::dmalab()
        .args(["probe", "latency", "--size", size, "--runtime", runtime])
        .args(["--mode", "both", "--output"])
        .arg(out)
        .assert()
        .success();
    json(out)
}

#[test]
fn l1_buffer_is_at_least_5x_faster_than_8x_llc() {
    let llc = llc_bytes();
    if !common::need(
        "cache sizes in /sys/devices/system/cpu/cpu0/cache",
        llc.is_some(),
    ) {
        return;
    }
    let big = llc.unwrap_or(8 << 20) * 8;
    let dir = tempfile::tempdir().unwrap();
    let small = run_latency("16K", "300ms", &dir.path().join("small.json"));
    let large = run_latency(&big.to_string(), "600ms", &dir.path().join("big.json"));
    let clock = |v: &Value| v["result"]["clock"]["mean_ns"].as_f64().unwrap();
    let p50 = |v: &Value| {
        v["result"]["per_access"]["percentile_ns"]["50.000000"]
            .as_f64()
            .unwrap()
    };
    assert!(
        clock(&large) >= 5.0 * clock(&small),
        "clock mean: L1 {} ns vs 8xLLC {} ns",
        clock(&small),
        clock(&large)
    );
    assert!(
        p50(&large) >= 5.0 * p50(&small).max(1.0),
        "per-access p50: L1 {} ns vs 8xLLC {} ns",
        p50(&small),
        p50(&large)
    );
}

#[test]
fn latency_result_has_percentiles_histogram_and_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let assert = common::dmalab()
        .args(["probe", "latency", "--size", "1M", "--runtime", "700ms"])
        .args(["--interval", "200ms", "--output"])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    assert!(stdout.contains("p99.9"), "{stdout}");
    assert!(stdout.contains("intv"), "no live interval table: {stdout}");
    let v = json(&out);
    assert_eq!(v["command"], "probe latency");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["config"]["size_bytes"], 1 << 20);
    let r = &v["result"];
    let pct = &r["per_access"]["percentile_ns"];
    for k in [
        "50.000000",
        "90.000000",
        "99.000000",
        "99.900000",
        "100.000000",
    ] {
        assert!(pct[k].is_u64(), "missing percentile {k}");
    }
    let samples = r["per_access"]["samples"].as_u64().unwrap();
    let buckets = r["per_access"]["buckets"].as_array().unwrap();
    let counted: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, samples);
    let intervals = r["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 2, "{intervals:?}");
    let in_intervals: u64 = intervals
        .iter()
        .map(|i| i["accesses"].as_u64().unwrap())
        .sum();
    assert_eq!(in_intervals, samples, "intervals lose or invent samples");
    assert!(r["timer"]["subtracted_cycles"].is_u64());
    assert!(r["tsc"]["tsc_hz"].as_f64().unwrap() > 0.0);
}

#[test]
fn patterns_and_writes_run() {
    let dir = tempfile::tempdir().unwrap();
    for (pattern, extra) in [
        ("uniform", vec![]),
        ("sequential", vec!["--stride", "128"]),
        ("normal", vec![]),
        ("pareto", vec![]),
        ("zipf", vec!["--shape", "0.9"]),
    ] {
        let out = dir.path().join(format!("{pattern}.json"));
        common::dmalab()
            .args(["probe", "latency", "--size", "256K", "--runtime", "100ms"])
            .args(["--pattern", pattern, "--write-pct", "30", "--mode", "clock"])
            .args(extra)
            .arg("--output")
            .arg(&out)
            .assert()
            .success();
        let v = json(&out);
        assert_eq!(v["config"]["pattern"]["name"], pattern);
        assert!(v["result"]["clock"]["accesses"].as_u64().unwrap() > 0);
    }
}

#[test]
fn text_output_format_writes_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.txt");
    common::dmalab()
        .args(["probe", "latency", "--size", "64K", "--runtime", "100ms"])
        .args(["--output-format", "text", "--output"])
        .arg(&out)
        .assert()
        .success();
    let t = fs::read_to_string(&out).unwrap();
    assert!(t.starts_with("dmalab probe latency:"), "{t}");
    assert!(t.contains("samples"));
}

#[test]
fn bandwidth_counts_reads_and_writes_per_thread() {
    let dir = tempfile::tempdir().unwrap();
    for traffic in ["R", "W2", "W3", "W5", "W6", "copy", "triad"] {
        let out = dir.path().join(format!("{traffic}.json"));
        common::dmalab()
            .args(["probe", "bandwidth", "--traffic", traffic, "--size", "1M"])
            .args(["--runtime", "100ms", "--output"])
            .arg(&out)
            .assert()
            .success();
        let v = json(&out);
        let r = &v["result"];
        let (rd, wr) = (
            r["read_bytes"].as_u64().unwrap(),
            r["write_bytes"].as_u64().unwrap(),
        );
        let (er, ew) = match traffic {
            "R" => (1, 0),
            "W2" | "triad" => (2, 1),
            "W3" => (3, 1),
            "W5" | "copy" => (1, 1),
            _ => (0, 1),
        };
        assert!(rd + wr > 0, "{traffic} moved nothing");
        assert_eq!(rd * ew, wr * er, "{traffic}: read {rd} written {wr}");
        assert_eq!(r["threads"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn bandwidth_random_access_for_every_mlc_traffic_counts_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    for (traffic, er, ew) in [
        ("R", 1, 0),
        ("W2", 2, 1),
        ("W3", 3, 1),
        ("W5", 1, 1),
        ("W6", 0, 1),
    ] {
        let out = dir.path().join(format!("{traffic}.json"));
        common::dmalab()
            .args(["probe", "bandwidth", "--traffic", traffic, "--size", "1M"])
            .args(["--access", "random", "--granularity", "128"])
            .args(["--runtime", "100ms", "--output"])
            .arg(&out)
            .assert()
            .success();
        let v = json(&out);
        assert_eq!(v["config"]["access"], "random", "{traffic}");
        assert_eq!(v["config"]["granularity_bytes"], 128, "{traffic}");
        let r = &v["result"];
        let (rd, wr) = (
            r["read_bytes"].as_u64().unwrap(),
            r["write_bytes"].as_u64().unwrap(),
        );
        assert!(rd + wr > 0, "{traffic} moved nothing");
        assert_eq!(rd * ew, wr * er, "{traffic}: read {rd} written {wr}");
    }
    bad(
        &[
            "probe",
            "bandwidth",
            "--traffic",
            "copy",
            "--access",
            "random",
        ],
        "--access",
    );
    bad(
        &[
            "probe",
            "bandwidth",
            "--access",
            "random",
            "--granularity",
            "100",
        ],
        "--granularity",
    );
}

/// Lines per second of a plain loop over `lines` 64-byte lines of `v`:
/// in order, or at lines a xorshift generator picks (its state never
/// depends on what was loaded). Each line is read whole.
fn reference_lines_per_s(v: &[u64], random: bool) -> f64 {
    let lines = v.len() / 8;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut acc = 0u64;
    let mut done = 0u64;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_millis(600) {
        for i in 0..1 << 16 {
            let l = if random {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % lines as u64) as usize
            } else {
                (done as usize + i) % lines
            };
            let line = &v[l * 8..l * 8 + 8];
            acc = acc.wrapping_add(line.iter().fold(0, |a, &b| a ^ b));
        }
        done += 1 << 16;
    }
    std::hint::black_box(acc);
    done as f64 / t0.elapsed().as_secs_f64()
}

#[test]
fn bandwidth_random_over_sequential_agrees_with_a_plain_random_loop() {
    // Arrays 8x the LLC, so neither walk lives in cache. What is compared
    // is random/sequential of dmalab against the same ratio of a loop
    // written here, in a loose band: never a time or a bandwidth.
    let size = llc_bytes().unwrap_or(32 << 20).max(8 << 20) * 8;
    let dir = tempfile::tempdir().unwrap();
    let bw = |access: &str| -> f64 {
        let out = dir.path().join(format!("{access}.json"));
        common::dmalab()
            .args(["probe", "bandwidth", "--traffic", "R", "--access", access])
            .args([
                "--size",
                &size.to_string(),
                "--runtime",
                "700ms",
                "--output",
            ])
            .arg(&out)
            .assert()
            .success();
        json(&out)["result"]["bw_bytes"].as_f64().unwrap()
    };
    let v: Vec<u64> = (0..size / 8).collect();
    // Best of two of each, interleaved: other work on the machine lowers a
    // figure, never raises it.
    let (mut seq, mut rnd, mut ref_seq, mut ref_rnd) = (0f64, 0f64, 0f64, 0f64);
    for _ in 0..2 {
        seq = seq.max(bw("sequential"));
        rnd = rnd.max(bw("random"));
        ref_seq = ref_seq.max(reference_lines_per_s(&v, false));
        ref_rnd = ref_rnd.max(reference_lines_per_s(&v, true));
    }
    let (ours, theirs) = (rnd / seq, ref_rnd / ref_seq);
    eprintln!("random/sequential: dmalab {ours:.3}, the plain loop {theirs:.3}");
    assert!(
        ours < 1.0 && (theirs / 3.0..theirs * 3.0).contains(&ours),
        "random/sequential: dmalab {ours:.3} ({rnd:.3e} / {seq:.3e} B/s), \
         the plain loop {theirs:.3} ({ref_rnd:.3e} / {ref_seq:.3e} lines/s)"
    );
}

#[test]
fn loaded_latency_sweep_produces_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("l.json");
    let a = common::dmalab()
        .args(["probe", "loaded", "--size", "1M", "--bw-size", "1M"])
        .args(["--delays", "1000,0", "--point-runtime", "200ms"])
        .args(["--load-threads", "1", "--oversubscribe", "--output"])
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        stdout.contains("load_GiB/s") && stdout.contains("idle"),
        "{stdout}"
    );
    let v = json(&out);
    let pts = v["result"]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 3);
    assert!(pts[0]["delay_cycles"].is_null());
    assert_eq!(pts[2]["delay_cycles"], 0);
    assert!(pts[2]["bw_bytes"].as_f64().unwrap() > 0.0);
    assert!(pts[1]["latency"]["samples"].as_u64().unwrap() > 0);
}

#[test]
fn numa_matrix_covers_every_node_pair() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.json");
    common::dmalab()
        .args(["probe", "latency", "--matrix", "--size", "1M"])
        .args(["--runtime", "100ms", "--output"])
        .arg(&out)
        .assert()
        .success();
    let v = json(&out);
    let nodes = v["host"]["numa_nodes"].as_u64().unwrap();
    let cells = v["result"]["matrix"].as_array().unwrap();
    assert_eq!(cells.len() as u64, nodes * nodes);
    if nodes == 1 {
        let w = v["warnings"].to_string();
        assert!(w.contains("one NUMA node"), "{w}");
    }
}

#[test]
fn transparent_huge_pages_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    common::dmalab()
        .args(["probe", "latency", "--pages", "thp", "--size", "8M"])
        .args(["--runtime", "100ms", "--output"])
        .arg(&out)
        .assert()
        .success();
    assert_eq!(json(&out)["config"]["pages"], "thp");
}

#[test]
fn hugetlbfs_pool_is_restored() {
    if !common::need_root() {
        return;
    }
    let nr = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    if !common::need("2 MiB hugetlbfs pages", std::path::Path::new(nr).exists()) {
        return;
    }
    let before = fs::read_to_string(nr).unwrap();
    let a = common::dmalab()
        .args(["probe", "latency", "--pages", "2m", "--size", "8M"])
        .args(["--runtime", "100ms"])
        .assert();
    let out = a.get_output();
    if !out.status.success() {
        // A host too fragmented to give 4 huge pages must say so clearly.
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains("could provide only"), "{e}");
    }
    assert_eq!(fs::read_to_string(nr).unwrap(), before, "pool not restored");
}

fn bad(args: &[&str], option: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never.json");
    common::assert_usage_error_of(
        common::dmalab().args(args).arg("--output").arg(&out),
        option,
    );
    assert!(!out.exists(), "{args:?} left a result behind");
}

#[test]
fn bad_input_exits_2_naming_the_option() {
    bad(&["probe", "latency", "--size", "32"], "--size");
    bad(&["probe", "latency", "--threads", "0"], "--threads");
    bad(&["probe", "latency", "--pattern", "spiral"], "--pattern");
    bad(
        &["probe", "latency", "--threads", "100000"],
        "--oversubscribe",
    );
    bad(&["probe", "latency", "--pages", "5k"], "--pages");
    bad(&["probe", "latency", "--membind", "4096"], "--membind");
    bad(&["probe", "latency", "--interval", "1ms"], "--interval");
    bad(&["probe", "latency", "--write-pct", "101"], "--write-pct");
    bad(&["probe", "latency", "--mode", "fast"], "--mode");
    bad(&["probe", "bandwidth", "--traffic", "W9"], "--traffic");
    bad(&["probe", "bandwidth", "--size", "1"], "--size");
    bad(&["probe", "bandwidth", "--threads", "0"], "--threads");
    bad(&["probe", "loaded", "--delays", "fast"], "--delays");
    bad(
        &["probe", "loaded", "--load-threads", "100000"],
        "--load-threads",
    );
}
