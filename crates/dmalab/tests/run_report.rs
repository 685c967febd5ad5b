//! `dmalab report` and `dmalab compare` through the binary. The report is
//! opened in headless Chromium through the DevTools protocol: no console
//! errors or exceptions, the expected number of plots, and a screenshot
//! kept under target/ as an artifact.

use crate::common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A deterministic pseudo-random number in 0..1.
fn rnd(state: &mut u64) -> f64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// A latency summary with log-normal-ish buckets around `center_ns`.
fn latency(center_ns: f64, spread: f64, st: &mut u64) -> Value {
    let mut buckets = Vec::new();
    let mut lo = 1u64;
    let mut samples = 0;
    while lo < 100_000 {
        let hi = ((lo as f64) * 1.09).ceil() as u64;
        let d = ((lo as f64).ln() - center_ns.ln()) / spread;
        let c = (1e5 * (-d * d / 2.0).exp() * (0.9 + 0.2 * rnd(st))) as u64;
        if c > 0 {
            buckets.push(json!({"lo_ns": lo, "hi_ns": hi - 1, "count": c}));
            samples += c;
        }
        lo = hi;
    }
    json!({"samples": samples, "mean_ns": center_ns, "buckets": buckets})
}

/// A results file: two configurations, loads plain/random/single, a
/// latency probe victim (with histograms) and an exec victim, 5 runs each,
/// evidence on loaded runs, one failed run.
fn synthetic(path: &Path, scale: f64) {
    let mut st = 42u64;
    let victims = json!([
        {"name": "lat", "command": "probe latency", "metric": "/result/per_access/mean_ns", "unit": "ns", "better": "lower"},
        {"name": "app", "command": "exec", "metric": "wall_s", "unit": "s", "better": "lower"}
    ]);
    let header = json!({
        "record": "header", "schema_version": 1, "tool": {"name": "dmalab", "version": "0.1.0"},
        "experiment": "synthetic", "experiment_path": "synthetic.toml", "experiment_hash": "0123456789abcdef0123",
        "experiment_toml": "# synthetic <test> & more\n", "started_at": "2026-11-22T00:00:00Z",
        "host": {"hostname": "h", "cpu_model": "cpu", "cpu_vendor": "v", "cpus_online": 2, "cpus_allowed": "0-1",
                 "numa_nodes": 1, "kernel": "6.1", "mem_total_bytes": 1, "mem_available_bytes": 1,
                 "steal_since_boot_pct": 0.0, "virtualized": true, "thp_enabled": "madvise", "clocksource": "kvm-clock"},
        "planned_runs": 60, "victims": victims, "configurations": ["default", "big buffer"],
        "loads": ["plain", "random", "single"], "noisy_cv_pct": 5.0, "aggressor_cpus": "1", "victim_cpus": "0"
    });
    let mut lines = vec![header.to_string()];
    let mut index = 0;
    for (ci, c) in ["default", "big buffer"].iter().enumerate() {
        for rep in 1..=5 {
            for v in ["lat", "app"] {
                for (li, l) in ["plain", "random", "single"].iter().enumerate() {
                    let slow = 1.0 + scale * (li as f64 * 0.03 + ci as f64 * 0.02);
                    let (value, result) = if v == "lat" {
                        let m = 90.0 * slow * (0.98 + 0.04 * rnd(&mut st));
                        (m, json!({"per_access": latency(m, 0.25, &mut st)}))
                    } else {
                        let s = 2.0 * slow * (0.97 + 0.06 * rnd(&mut st));
                        (s, json!({"wall_s": s}))
                    };
                    let failed = v == "app" && ci == 1 && rep == 3 && li == 2;
                    let mut r = json!({
                        "record": "run", "experiment_hash": "0123456789abcdef0123", "index": index,
                        "configuration": c, "repetition": rep, "victim": v, "load": l,
                        "started_at": "2026-11-22T00:00:00Z", "status": if failed {"failed"} else {"completed"},
                        "value": if failed { Value::Null } else { json!(value) },
                        "metric": if v == "lat" {"/result/per_access/mean_ns"} else {"wall_s"},
                        "unit": if v == "lat" {"ns"} else {"s"}, "better": "lower",
                        "victim_wall_ns": 2_000_000_000u64, "victim_argv": ["x"], "victim_cpus": "0",
                        "victim_result": result
                    });
                    if failed {
                        r["failure"] = json!({"reason": "victim 'app' failed (exit status: 139)", "exit_status": 139, "stderr_tail": "Segmentation fault <core dumped>\n"});
                    }
                    if li > 0 {
                        let bw = (1.2e9 + 0.4e9 * li as f64) * (0.95 + 0.1 * rnd(&mut st));
                        r["aggressor"] = json!({"argv": ["dmalab", "load"], "exit_status": 0, "evidence": {
                            "window_ns": 2_000_000_000u64, "data_bytes": (bw * 2.0) as u64, "commands": (bw * 2.0 / 4096.0) as u64,
                            "blocks": (bw * 2.0 / 4096.0) as u64, "bw_bytes": bw, "cmd_per_s": bw / 4096.0,
                            "running_throughout": true, "samples": []}});
                    }
                    lines.push(r.to_string());
                    index += 1;
                }
            }
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// A sweep results file: workers 1, 2, 4 with evidence, plus plain.
fn synthetic_sweep(path: &Path) {
    let mut st = 7u64;
    let header = json!({
        "record": "header", "schema_version": 1, "tool": {"name": "dmalab", "version": "0.1.0"},
        "experiment": "sweep", "experiment_path": "sweep.toml", "experiment_hash": "feedfacefeedface",
        "experiment_toml": "", "started_at": "2026-11-22T00:00:00Z", "host": {"hostname": "h", "cpu_model": "cpu",
        "cpu_vendor": "v", "cpus_online": 2, "cpus_allowed": "0-1", "numa_nodes": 1, "kernel": "6.1",
        "mem_total_bytes": 1, "mem_available_bytes": 1, "steal_since_boot_pct": 0.0, "virtualized": true,
        "thp_enabled": "madvise", "clocksource": "kvm-clock"},
        "planned_runs": 12, "victims": [{"name": "lat", "command": "probe latency", "metric": "/result/per_access/mean_ns", "unit": "ns", "better": "lower"}],
        "configurations": ["default"], "loads": ["plain", "random"],
        "sweep": {"aggressor": "random", "flag": "workers", "values": ["1", "2", "4"]},
        "noisy_cv_pct": 5.0, "aggressor_cpus": "1", "victim_cpus": "0"
    });
    let mut lines = vec![header.to_string()];
    let mut index = 0;
    for rep in 1..=3 {
        for (load, sv) in [
            ("plain", None),
            ("random", Some(1)),
            ("random", Some(2)),
            ("random", Some(4)),
        ] {
            let w = sv.unwrap_or(0) as f64;
            let m = (90.0 + 6.0 * w) * (0.98 + 0.04 * rnd(&mut st));
            let mut r = json!({"record": "run", "experiment_hash": "feedfacefeedface", "index": index, "configuration": "default",
                "repetition": rep, "victim": "lat", "load": load, "started_at": "2026-11-22T00:00:00Z", "status": "completed",
                "value": m, "metric": "/result/per_access/mean_ns", "unit": "ns", "better": "lower", "victim_wall_ns": 1,
                "victim_argv": [], "victim_cpus": "0", "victim_result": {"per_access": latency(m, 0.3, &mut st)}});
            if let Some(s) = sv {
                r["sweep_value"] = json!(s.to_string());
                let bw = 0.8e9 * (s as f64).sqrt() * (0.95 + 0.1 * rnd(&mut st));
                r["aggressor"] = json!({"argv": [], "evidence": {"window_ns": 1_000_000_000u64, "data_bytes": bw as u64,
                    "commands": (bw / 4096.0) as u64, "blocks": 0, "bw_bytes": bw, "cmd_per_s": bw / 4096.0, "running_throughout": true, "samples": []}});
            }
            lines.push(r.to_string());
            index += 1;
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn report(results: &Path, html: &Path) -> String {
    let out = common::dmalab()
        .arg("report")
        .arg(results)
        .arg("-o")
        .arg(html)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn report_is_self_contained_and_counts_its_plots() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    synthetic(&res, 1.0);
    let html = dir.path().join("r.html");
    let printed = report(&res, &html);
    // bars: 2 victims; histograms and their CDFs: lat x 2 configurations;
    // figure against bandwidth: 2 victims.
    assert!(printed.contains("(8 plots, 60 runs)"), "{printed}");
    let text = std::fs::read_to_string(&html).unwrap();
    assert_eq!(text.matches("<svg class=\"plot\"").count(), 8);
    for bad in ["<script", "http://", "https://", "<link", "@import", "<img"] {
        let n = text.matches(bad).count();
        // The SVG namespace URI is an identifier, not a fetch.
        let allowed = if bad == "http://" {
            text.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
        } else {
            0
        };
        assert_eq!(n, allowed, "{bad} in a self-contained report");
    }
    assert!(
        text.contains("&lt;test&gt; &amp; more"),
        "experiment text escaped"
    );
    assert!(
        text.contains("Segmentation fault &lt;core dumped&gt;"),
        "failed run listed"
    );
    // 60 runs, one failed: 59 dots in the bars.
    assert_eq!(text.matches("class=\"dot\"").count(), 59);

    // The sweep report adds bandwidth and command rate against workers.
    let sres = dir.path().join("s.jsonl");
    synthetic_sweep(&sres);
    let printed = report(&sres, &dir.path().join("s.html"));
    // bars (plain only), 1 histogram and its CDF (plain), the victim
    // normalized to plain, 2 aggressor sweep plots, 1 lat-vs-bw.
    assert!(printed.contains("(7 plots, 12 runs)"), "{printed}");
}

/// A sweep of `--bs` over `values` (as typed, in that order) with one
/// bandwidth victim: plain 10 GB/s, and under load 10 GB/s divided by
/// the value's rank by size plus one; the aggressor moves `data_bytes`
/// and 1000 commands per second; two repetitions.
fn synthetic_size_sweep(path: &Path, values: &[&str], ranks: &[u32], data_bytes: u64) {
    let header = json!({
        "record": "header", "schema_version": 1, "tool": {"name": "dmalab", "version": "0.1.0"},
        "experiment": "sizes", "experiment_path": "sizes.toml", "experiment_hash": "feedfacefeedface",
        "experiment_toml": "", "started_at": "2026-11-22T00:00:00Z", "host": {"hostname": "h", "cpu_model": "cpu",
        "cpu_vendor": "v", "cpus_online": 2, "cpus_allowed": "0-1", "numa_nodes": 1, "kernel": "6.1",
        "mem_total_bytes": 1, "mem_available_bytes": 1, "steal_since_boot_pct": 0.0, "virtualized": true,
        "thp_enabled": "madvise", "clocksource": "kvm-clock"},
        "planned_runs": 0, "victims": [{"name": "seq R", "command": "probe bandwidth", "metric": "/result/bw_bytes", "unit": "B/s", "better": "higher"}],
        "configurations": ["default"], "loads": ["plain", "nv"],
        "sweep": {"aggressor": "nv", "flag": "bs", "values": values},
        "noisy_cv_pct": 5.0, "aggressor_cpus": "1", "victim_cpus": "0"
    });
    let mut lines = vec![header.to_string()];
    let mut index = 0;
    for rep in 1..=2u32 {
        let loads = std::iter::once(None).chain(values.iter().zip(ranks).map(Some));
        for sv in loads {
            let value = 1e10 / (1 + sv.map_or(0, |s| *s.1)) as f64 * (1.0 + 0.01 * rep as f64);
            let mut r = json!({"record": "run", "experiment_hash": "feedfacefeedface", "index": index,
                "configuration": "default", "repetition": rep, "victim": "seq R",
                "load": if sv.is_some() {"nv"} else {"plain"}, "started_at": "2026-11-22T00:00:00Z",
                "status": "completed", "value": value, "metric": "/result/bw_bytes", "unit": "B/s",
                "better": "higher", "victim_wall_ns": 1, "victim_argv": [], "victim_cpus": "0"});
            if let Some((v, _)) = sv {
                r["sweep_value"] = json!(v);
                r["aggressor"] = json!({"argv": [], "evidence": {"window_ns": 1_000_000_000u64,
                    "data_bytes": data_bytes, "commands": 1000, "blocks": 0, "bw_bytes": data_bytes as f64,
                    "cmd_per_s": 1000.0, "running_throughout": true, "samples": []}});
            }
            lines.push(r.to_string());
            index += 1;
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Issue 32: sweep values written as sizes ("4K") dropped every sweep
/// plot without a word (4096 worked); and the report had no plot of the
/// victim normalized to plain, which examples/rdma-interference.toml
/// promised. Both through the binary, each figure as its own SVG file.
#[test]
fn report_draws_size_sweeps_and_the_victim_normalized_to_plain() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("sizes.jsonl");
    synthetic_size_sweep(&res, &["64K", "4K", "1M"], &[2, 1, 3], 1 << 30);
    let figs = dir.path().join("figs");
    let out = common::dmalab()
        .arg("report")
        .arg(&res)
        .arg("-o")
        .arg(dir.path().join("sizes.html"))
        .arg("--figures")
        .arg(&figs)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svgs: Vec<String> = std::fs::read_dir(&figs)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let find = |aria: &str| {
        svgs.iter()
            .find(|s| s.contains(&format!("aria-label=\"{aria}\"")))
            .unwrap_or_else(|| panic!("no figure '{aria}' among {} files", svgs.len()))
    };
    find("sweep bandwidth");
    find("sweep command rate");
    let svg = find("normalized: seq R");
    let at = svg
        .find("class=\"mean-line\" data-series=\"default\"")
        .expect("the line");
    let d_at = svg[..at].rfind("d=\"").unwrap() + 3;
    let d = &svg[d_at..d_at + svg[d_at..].find('"').unwrap()];
    let pts: Vec<(f64, f64)> = d
        .split_whitespace()
        .map(|p| {
            let (x, y) = p[1..].split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect();
    // 4K, 64K, 1M left to right (sizes by value, not as typed), the
    // victim's share of plain falling (1/2, 1/3, 1/4: y down the page).
    assert_eq!(pts.len(), 3, "{d}");
    assert!(
        pts.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1),
        "{d}"
    );
    assert!(svg.contains(">4K<") && svg.contains(">1M<"), "size ticks");
    assert!(svg.contains("class=\"reference\""), "plain = 1");
}

/// Issue 32: a flush sweep moves no data, and its aggressor was drawn at
/// zero; the thesis' combined bandwidth counts 80 B per command, chosen
/// when no data moved or with --aggressor-figure combined.
#[test]
fn report_aggressor_figure_combined_counts_a_flush_loads_commands() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("flush.jsonl");
    synthetic_size_sweep(&res, &["1", "2"], &[1, 2], 0);
    let html = |extra: &[&str]| {
        let out = dir.path().join("f.html");
        let o = common::dmalab()
            .arg("report")
            .arg(&res)
            .arg("-o")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::read_to_string(&out).unwrap()
    };
    let by_default = html(&[]);
    assert!(by_default.contains("aggressor 'nv': combined bandwidth against --bs"));
    // The dots' tooltips: 1000 commands of 80 B in one second, not zero.
    assert!(!by_default.contains("/ 0 B/s</title>"), "no zeros drawn");
    let combined = html(&["--aggressor-figure", "combined"]);
    assert!(combined.contains("aggressor 'nv': combined bandwidth against --bs"));
    assert!(!combined.contains("/ 0 B/s</title>"), "no zeros drawn");
    let data = html(&["--aggressor-figure", "data"]);
    assert!(data.contains("aggressor 'nv': data bandwidth against --bs"));
    assert!(data.contains("/ 0 B/s</title>"), "data: zeros");
    // Result documents have no aggressor: refused, with the flag named.
    let doc = dir.path().join("doc.json");
    let body =
        json!({"schema_version": 1, "command": "probe bandwidth", "result": {"bw_bytes": 1.0}});
    std::fs::write(&doc, serde_json::to_string_pretty(&body).unwrap()).unwrap();
    let o = common::dmalab()
        .arg("report")
        .arg(&doc)
        .args(["--aggressor-figure", "data", "-o"])
        .arg(dir.path().join("d.html"))
        .output()
        .unwrap();
    common::assert_usage_stderr(
        o.status.code(),
        &String::from_utf8_lossy(&o.stderr),
        "--aggressor-figure",
    );
}

/// Issue 27: a results file whose runs appear twice (two copies
/// concatenated) reported "120 runs" for 60, every run counted twice.
#[test]
fn report_counts_a_concatenated_files_runs_once_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let once = dir.path().join("once.jsonl");
    synthetic(&once, 1.0);
    let text = std::fs::read_to_string(&once).unwrap();
    let twice = dir.path().join("twice.jsonl");
    std::fs::write(&twice, format!("{text}{text}")).unwrap();
    let out = common::dmalab()
        .arg("report")
        .arg(&twice)
        .arg("-o")
        .arg(dir.path().join("t.html"))
        .arg("--runs-csv")
        .arg(dir.path().join("t.csv"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("(8 plots, 60 runs)"), "{printed}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "one warning: {err}");
    assert!(
        warnings[0].contains("60 run record(s) repeat a run"),
        "{err}"
    );
    // The per-run CSV has each run once: a header line and 60 rows.
    let csv = std::fs::read_to_string(dir.path().join("t.csv")).unwrap();
    assert_eq!(csv.lines().count(), 61, "{csv}");
    // The file as written has no warning.
    let out = common::dmalab()
        .arg("report")
        .arg(&once)
        .arg("-o")
        .arg(dir.path().join("o.html"))
        .output()
        .unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn csv_and_compare() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl");
    synthetic(&a, 1.0);
    synthetic(&b, 4.0);
    let csv = dir.path().join("cells.csv");
    let runs_csv = dir.path().join("runs.csv");
    let out = common::dmalab()
        .arg("report")
        .arg(&a)
        .arg("--csv")
        .arg(&csv)
        .arg("--runs-csv")
        .arg(&runs_csv)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dir.path().join("a.html").exists(),
        "default output beside the results"
    );
    let cells = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = cells.lines().collect();
    assert_eq!(lines.len(), 1 + 12, "{cells}");
    assert!(lines[0].starts_with("configuration,victim,load,sweep_value,unit,better,n,failed,mean"));
    assert!(
        cells.contains("\"big buffer\"") || cells.contains("big buffer,"),
        "{cells}"
    );
    assert_eq!(
        std::fs::read_to_string(&runs_csv).unwrap().lines().count(),
        61
    );

    let out = common::dmalab()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("big buffer/lat/single"))
        .expect("cell row");
    // single in big buffer: slowdown 1+0.08 (A) against 1+0.32 (B).
    assert!(row.contains("differs (p < 0.05)"), "{text}");
    let plain = text
        .lines()
        .find(|l| l.starts_with("default/lat/plain"))
        .unwrap();
    assert!(!plain.contains("differs"), "{text}");

    // Result documents of single commands compare field by field.
    let d1 = dir.path().join("d1.json");
    let d2 = dir.path().join("d2.json");
    std::fs::write(&d1, r#"{"schema_version":1,"command":"load","config":{"bs_bytes":4096},"result":{"bw_bytes":100.0}}"#).unwrap();
    std::fs::write(&d2, r#"{"schema_version":1,"command":"load","config":{"bs_bytes":4096},"result":{"bw_bytes":125.0}}"#).unwrap();
    let out = common::dmalab()
        .arg("compare")
        .arg(&d1)
        .arg(&d2)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("/result/bw_bytes: 100.0 -> 125.0 +25.00%"),
        "{text}"
    );
    // A results file against a document is refused.
    let err = common::assert_usage_error([Path::new("compare"), a.as_path(), d2.as_path()], "B: ");
    assert!(err.contains("is an experiment results file"), "{err}");

    // A results file that is not there, or a directory: bad input, one line,
    // and no report written.
    for missing in [
        dir.path().join("nope.results.jsonl"),
        dir.path().to_path_buf(),
    ] {
        let err = common::assert_usage_error([Path::new("report"), missing.as_path()], "RESULTS");
        assert!(err.starts_with("dmalab: error: RESULTS: "), "{err}");
    }
    assert!(!dir.path().join("nope.results.html").exists());
}

/// A minimal DevTools protocol client over one websocket.
struct Cdp {
    ws: tungstenite::WebSocket<TcpStream>,
    next: u64,
    events: Vec<Value>,
}

impl Cdp {
    fn connect(url: &str) -> Self {
        let hostport = url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let stream = TcpStream::connect(&hostport).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (ws, _) = tungstenite::client(url, stream).unwrap();
        Self {
            ws,
            next: 1,
            events: Vec::new(),
        }
    }

    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let m = self.read();
            if m["id"] == json!(id) {
                assert!(m.get("error").is_none(), "{method}: {m}");
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    fn read(&mut self) -> Value {
        loop {
            match self.ws.read().unwrap() {
                tungstenite::Message::Text(t) => return serde_json::from_str(&t).unwrap(),
                _ => continue,
            }
        }
    }

    fn wait_event(&mut self, method: &str) {
        if self.events.iter().any(|e| e["method"] == method) {
            return;
        }
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < Duration::from_secs(30), "no {method}");
            let m = self.read();
            let done = m["method"] == method;
            self.events.push(m);
            if done {
                return;
            }
        }
    }
}

/// Opens `html` in headless Chromium; returns (console errors, plot count,
/// PNG screenshot).
pub fn open_in_chromium(html: &Path, width: u32) -> (Vec<String>, u64, Vec<u8>) {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new("/usr/bin/chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-port=0",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("chromium printed its DevTools URL")
            .unwrap();
        if let Some(i) = line.find("ws://") {
            break line[i..].trim().to_string();
        }
    };
    // Keep draining stderr so chromium never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    let mut cdp = Cdp::connect(&url);
    let target = cdp.call(None, "Target.createTarget", json!({"url": "about:blank"}));
    let tid = target["targetId"].as_str().unwrap().to_string();
    let att = cdp.call(
        None,
        "Target.attachToTarget",
        json!({"targetId": tid, "flatten": true}),
    );
    let sid = att["sessionId"].as_str().unwrap().to_string();
    let s = Some(sid.as_str());
    cdp.call(s, "Runtime.enable", json!({}));
    cdp.call(s, "Log.enable", json!({}));
    cdp.call(s, "Page.enable", json!({}));
    cdp.call(
        s,
        "Emulation.setDeviceMetricsOverride",
        json!({"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
    );
    let abs = std::fs::canonicalize(html).unwrap();
    cdp.call(
        s,
        "Page.navigate",
        json!({"url": format!("file://{}", abs.display())}),
    );
    cdp.wait_event("Page.loadEventFired");
    let plots = cdp.call(s, "Runtime.evaluate", json!({"expression": "document.querySelectorAll('svg.plot').length", "returnByValue": true}));
    let plots = plots["result"]["value"].as_u64().unwrap();
    let h = cdp.call(
        s,
        "Runtime.evaluate",
        json!({"expression": "document.documentElement.scrollHeight", "returnByValue": true}),
    );
    let h = h["result"]["value"].as_u64().unwrap_or(900).min(16000);
    cdp.call(
        s,
        "Emulation.setDeviceMetricsOverride",
        json!({"width": width, "height": h, "deviceScaleFactor": 1, "mobile": false}),
    );
    let shot = cdp.call(s, "Page.captureScreenshot", json!({"format": "png"}));
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap())
        .unwrap();
    // One more round trip so late console messages arrive.
    cdp.call(s, "Runtime.evaluate", json!({"expression": "1"}));
    let mut errors = Vec::new();
    for e in &cdp.events {
        match e["method"].as_str() {
            Some("Runtime.exceptionThrown") => errors.push(e["params"].to_string()),
            Some("Runtime.consoleAPICalled") if e["params"]["type"] == "error" => {
                errors.push(e["params"].to_string())
            }
            Some("Log.entryAdded") if e["params"]["entry"]["level"] == "error" => {
                errors.push(e["params"].to_string())
            }
            _ => {}
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (errors, plots, png)
}

fn artifact_dir() -> PathBuf {
    // target/ of this workspace: the test binary lives in target/<profile>/deps.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    let d = target.join("test-artifacts");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn report_renders_in_headless_chromium_without_errors() {
    if !common::need("chromium", Path::new("/usr/bin/chromium").exists()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    synthetic(&res, 1.0);
    let html = dir.path().join("r.html");
    report(&res, &html);
    let (errors, plots, png) = open_in_chromium(&html, 1280);
    assert!(errors.is_empty(), "console errors: {errors:?}");
    assert_eq!(plots, 8);
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "a real screenshot"
    );
    let shot = artifact_dir().join("run-report-screenshot.png");
    std::fs::write(&shot, &png).unwrap();
    eprintln!("screenshot: {}", shot.display());
}
