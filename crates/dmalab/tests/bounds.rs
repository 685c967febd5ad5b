//! Issue 14, bounded inputs and honoured signals: one exit rule for
//! interrupted commands (128 + the signal number, results written and
//! marked `interrupted`), `sim` loops that stop on a signal, `page --delay`
//! that looks at the stop flag during the delay, and `report` that streams
//! its records. (Bad values of every option are pinned by the regression
//! cases of `tests/fuzz/regressions/`, run by `tests/fuzz.rs`.)

use crate::common;

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill has no memory arguments; the pid is our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

/// Waits for `child`; a child still running after a minute is killed and
/// the test fails (the signal was ignored).
fn wait(mut child: Child, what: &str) -> (ExitStatus, String) {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (st, err);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{what} did not stop after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn(args: &[&str], dir: &Path) -> Child {
    Command::new(common::dmalab_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn doc(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Waits until `path` exists (a command got going), at most a minute.
fn wait_for(path: &Path) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 14/15: `dmalab run` exited 130 after SIGINT and every other
/// command 0. Now every command exits 128 + the signal number.
#[test]
fn interrupted_load_exits_143_after_sigterm_with_its_result_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.json");
    let live = dir.path().join("live");
    let child = spawn(
        &[
            "load",
            "--engine",
            "null",
            "--runtime",
            "10m",
            "--quiet",
            "--live-stats",
            live.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    wait_for(&live);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, libc::SIGTERM);
    let (st, err) = wait(child, "dmalab load");
    assert_eq!(st.code(), Some(143), "{err}");
    assert_eq!(doc(&out)["status"], "interrupted");
}

/// Issue 14 item 10: `sim sweep` installed signal handlers but never
/// looked at them; an interrupted sweep ran to the end and said
/// `completed`.
#[test]
fn sim_sweep_stops_on_sigint_and_writes_what_it_has_marked_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    common::dmalab()
        .args(["sim", "synth", "web", "--requests", "200000", "--output"])
        .arg(&trace)
        .assert()
        .success();
    let out = dir.path().join("s.json");
    let values: Vec<String> = (0..200).map(|i| format!("{}K", 256 + 64 * i)).collect();
    let child = spawn(
        &[
            "sim",
            "sweep",
            trace.to_str().unwrap(),
            "--param",
            "llc.size_bytes",
            "--values",
            &values.join(","),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    signal(&child, libc::SIGINT);
    let (st, err) = wait(child, "dmalab sim sweep");
    assert_eq!(st.code(), Some(130), "{err}");
    let d = doc(&out);
    assert_eq!(d["status"], "interrupted", "{err}");
    let points = d["result"]["points"].as_array().unwrap().len();
    assert!(points < 200, "the sweep ran to the end: {points} points");
}

/// Issue 14 item 10: `sim synth` and `convert` ignored signals too. A trace
/// is written whole or not at all: after a signal nothing is left.
#[test]
fn sim_synth_stops_on_sigint_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("big.trace");
    let child = spawn(
        &[
            "sim",
            "synth",
            "file-copy",
            "--size",
            "64G",
            "--output",
            trace.to_str().unwrap(),
        ],
        dir.path(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    signal(&child, libc::SIGINT);
    let (st, err) = wait(child, "dmalab sim synth");
    assert_eq!(st.code(), Some(130), "{err}");
    assert!(err.contains("was not written"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Issue 14 item 11: `page --delay` looked at the runtime and the stop flag
/// only every 64 accesses; a SIGINT during a long delay ended 15 s later
/// with the worker SIGKILLed and no `--output` written.
#[test]
fn page_long_delay_honours_sigint_and_writes_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    let child = spawn(
        &[
            "page",
            "--map",
            "4M",
            "--delay",
            "20s",
            "--runtime",
            "10m",
            "--timer",
            "clock",
            "--classify",
            "none",
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    // Past the warm-up, into the first delay.
    std::thread::sleep(Duration::from_millis(2000));
    signal(&child, libc::SIGINT);
    let (st, err) = wait(child, "dmalab page");
    assert_eq!(st.code(), Some(130), "{err}");
    assert_eq!(doc(&out)["status"], "interrupted", "{err}");
}

/// Peak resident memory of a finished child, bytes (`wait4`'s rusage).
// The child is reaped by wait4, which std's Child cannot see.
#[allow(clippy::zombie_processes)]
fn run_measuring_peak(cmd: &mut Command) -> (ExitStatus, u64) {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data written by wait4; the pid is our child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as libc::pid_t);
    use std::os::unix::process::ExitStatusExt;
    (ExitStatus::from_raw(status), ru.ru_maxrss as u64 * 1024)
}

/// Issue 14 item 15: `report` held about 12x the results file in memory (a
/// 100 MB file: 1.3 GB). Records are now streamed and only what the report
/// uses is kept: peak memory stays below half the file's size.
#[test]
fn report_memory_stays_below_the_results_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("big.results.jsonl");
    write_big_results(&res, 1700);
    let len = std::fs::metadata(&res).unwrap().len();
    assert!(len > 40 << 20, "{len}");
    let (st, peak) = run_measuring_peak(
        Command::new(common::dmalab_bin())
            .arg("report")
            .arg(&res)
            .arg("-o")
            .arg(dir.path().join("r.html")),
    );
    assert!(st.success(), "{st:?}");
    assert!(
        peak < len / 2,
        "report peaked at {peak} bytes for a {len}-byte results file"
    );
    let (st, peak) = run_measuring_peak(
        Command::new(common::dmalab_bin())
            .arg("compare")
            .arg(&res)
            .arg(&res),
    );
    assert!(st.success(), "{st:?}");
    // compare holds what the report keeps twice (A and B, here the same
    // file read twice): still far below the file, where holding either
    // file whole would be several times it.
    assert!(
        peak < len * 3 / 5,
        "compare peaked at {peak} bytes for {len}"
    );
}

/// A results file of `runs` probe-latency runs whose victim documents
/// carry large interval series (as long `probe latency --interval` runs
/// do), with a small latency histogram the report draws.
fn write_big_results(path: &Path, runs: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let header = serde_json::json!({
        "record": "header", "schema_version": 1, "tool": {"name": "dmalab", "version": "0.1.0"},
        "experiment": "big", "experiment_path": "big.toml", "experiment_hash": "00",
        "experiment_toml": "", "started_at": "2026-11-24T00:00:00Z",
        "host": {"hostname": "h", "cpu_model": "c", "cpu_vendor": "v", "cpus_online": 2, "cpus_allowed": "0-1",
                 "numa_nodes": 1, "kernel": "6.1", "mem_total_bytes": 1, "mem_available_bytes": 1,
                 "steal_since_boot_pct": 0.0, "virtualized": true, "thp_enabled": "madvise", "clocksource": "tsc"},
        "planned_runs": runs, "victims": [{"name": "lat", "command": "probe latency",
            "metric": "/result/per_access/mean_ns", "unit": "ns", "better": "lower"}],
        "configurations": ["default"], "loads": ["plain", "rand"], "noisy_cv_pct": 5.0,
        "aggressor_cpus": "1", "victim_cpus": "0"
    });
    writeln!(f, "{header}").unwrap();
    let intervals: Vec<Value> = (0..400)
        .map(|i| serde_json::json!({"t_ns": i * 1_000_000u64, "mean_ns": 90.5 + i as f64, "p99_ns": 180, "accesses": 123456}))
        .collect();
    for i in 0..runs {
        let load = if i % 2 == 0 { "plain" } else { "rand" };
        let m = 90.0 + (i % 7) as f64;
        let r = serde_json::json!({
            "record": "run", "experiment_hash": "00", "index": i, "configuration": "default",
            "repetition": i / 2 + 1, "victim": "lat", "load": load, "started_at": "2026-11-24T00:00:00Z",
            "status": "completed", "value": m, "metric": "/result/per_access/mean_ns", "unit": "ns",
            "better": "lower", "victim_wall_ns": 1_000_000_000u64, "victim_argv": ["dmalab"], "victim_cpus": "0",
            "victim_result": {"per_access": {"mean_ns": m, "lat": {"buckets": [
                {"lo_ns": 64, "hi_ns": 128, "count": 1000}, {"lo_ns": 128, "hi_ns": 256, "count": 10}]}},
                "intervals": intervals}
        });
        writeln!(f, "{r}").unwrap();
    }
    f.flush().unwrap();
}

/// `dmalab throttle` with an exec victim that leaves `mark` when it
/// starts, a null-engine aggressor and a short session; `flags` replace or
/// add to these.
fn throttle_args(mark: &Path, flags: &[(&str, &str)]) -> Vec<String> {
    let victim = format!(
        "sh -c 'touch {}; while true; do echo 5; sleep 0.1; done'",
        mark.display()
    );
    let mut base: Vec<(&str, String)> = vec![
        ("--victim-exec", victim),
        ("--victim-regex", "([0-9]+)".into()),
        ("--aggressor", "--engine null --buffer 1M --size 16M".into()),
        ("--slo", "value <= 2 x baseline".into()),
        ("--max-rate", "1G/s".into()),
        ("--interval", "100ms".into()),
        ("--intervals", "3".into()),
        ("--baseline-intervals", "1".into()),
    ];
    for (f, v) in flags {
        base.retain(|(b, _)| b != f);
        base.push((f, v.to_string()));
    }
    let mut a = vec!["throttle".to_string(), "-q".into(), "--sweep".into()];
    for (f, v) in base {
        a.push(format!("{f}={v}"));
    }
    a
}

/// Issue 27 item 9: `throttle --sweep --sweep-points 4294967295` was
/// accepted and aborted (exit 134) allocating 34 GB after the closed loop
/// had run; `--intervals 18446744073709551615` was accepted. Every count
/// is bounded before the victim starts.
#[test]
fn throttle_refuses_out_of_range_counts_before_the_victim_starts() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("victim-started");
    for (flag, value, also) in [
        ("--sweep-points", "4294967295", None),
        ("--intervals", "18446744073709551615", None),
        ("--baseline-intervals", "4294967296", None),
        ("--warmup-intervals", "18446744073709551615", None),
        ("--sweep-repeat", "1000000", None),
        ("--sweep-intervals", "0", None),
        // Each within its range, together longer than the children's run
        // time can be.
        ("--intervals", "1000", Some(("--interval", "1d"))),
    ] {
        let mut flags = vec![(flag, value)];
        flags.extend(also);
        let err = common::assert_usage_error(throttle_args(&mark, &flags), flag);
        assert!(
            err.contains("out of range") || err.contains("366 days"),
            "{err}"
        );
        assert!(!mark.exists(), "{flag} {value}: the victim was started");
    }
}

/// Issue 27, messages: `throttle --aggressor '--workers 99999'` was
/// refused by the aggressor itself, exit 1, after the baseline had run.
/// The aggressor's flags are checked with load's own rules first.
#[test]
fn throttle_refuses_bad_aggressor_flags_before_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("victim-started");
    for (agg, names) in [
        ("--engine null --workers 99999", "--workers"),
        ("--engine null --bs 3", "--bs"),
        ("--engine null --no-such-flag", "--no-such-flag"),
    ] {
        let err = common::assert_usage_error(
            throttle_args(&mark, &[("--aggressor", agg)]),
            "--aggressor",
        );
        assert!(err.contains(names), "{err}");
        assert!(!mark.exists(), "{agg}: the victim was started");
    }
}
