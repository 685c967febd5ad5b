//! `scripts/benchstat.py`, the statistics every `scripts/bench-*.sh`
//! prints (interleaving, per-pair ratios, rate errors, CPU per GiB): its
//! own unit tests, and its command line as the scripts call it.

use std::path::PathBuf;
use std::process::Command;

use crate::common::need;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/benchstat.py")
}

fn python() -> bool {
    need(
        "python3 (Debian python3)",
        Command::new("python3")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
    )
}

fn benchstat(args: &[&str]) -> (i32, String, String) {
    let o = Command::new("python3")
        .arg(script())
        .args(args)
        .output()
        .expect("run python3 scripts/benchstat.py");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn benchstat_unit_tests_pass() {
    if !python() {
        return;
    }
    let (rc, _, err) = benchstat(&["selftest"]);
    assert_eq!(rc, 0, "{err}");
    assert!(err.contains("OK"), "{err}");
}

#[test]
fn benchstat_ratio_is_the_median_and_range_of_pairs() {
    if !python() {
        return;
    }
    // Medians of the figures are equal (3 and 3); the pairs are not.
    let (rc, out, err) = benchstat(&["ratio", "1 6 1", "2 3 2"]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.trim(), "0.500 [0.500..2.000]");
}

#[test]
fn benchstat_orders_pairs_abba_then_baab() {
    if !python() {
        return;
    }
    assert_eq!(benchstat(&["order", "0"]).1.trim(), "A B B A");
    assert_eq!(benchstat(&["order", "3"]).1.trim(), "B A A B");
}

#[test]
fn benchstat_refuses_unmatched_pairs() {
    if !python() {
        return;
    }
    let (rc, out, err) = benchstat(&["ratio", "1 2", "1"]);
    assert_eq!(rc, 1, "{out}");
    assert!(err.contains("pairs must match"), "{err}");
}

/// `rusage OUT -- CMD` passes CMD's exit status through and writes its
/// CPU seconds, user + system.
#[test]
fn benchstat_rusage_passes_the_exit_status_through() {
    if !python() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("ru.json");
    let o = out.to_str().expect("utf-8 path");
    let (rc, _, err) = benchstat(&["rusage", o, "--", "sh", "-c", "exit 5"]);
    assert_eq!(rc, 5, "{err}");
    let ru: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("rusage file")).expect("json");
    let cpu = ru["cpu_s"].as_f64().expect("cpu_s");
    let parts = ru["user_s"].as_f64().expect("user_s") + ru["sys_s"].as_f64().expect("sys_s");
    assert!((cpu - parts).abs() < 1e-9, "{ru}");
    let (rc, _, err) = benchstat(&["rusage", o]);
    assert_eq!(rc, 2, "a missing command is refused: {err}");
}

/// Where perf is missing, scripts/bench-load.sh reads each run's CPU time
/// from the kernel's rusage of the child (`benchstat.py rusage`). An SQPOLL
/// run's poller is a kernel thread of dmalab's process (Linux >= 5.12), so
/// its CPU time must be in that figure: at least the poller's own time,
/// which dmalab reads from the thread's schedstat just before the ring
/// closes, plus the workers'.
#[test]
fn rusage_of_an_sqpoll_load_includes_its_poller() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !python() || !need("two CPUs (worker on 0, SQPOLL poller on 1)", cpus >= 2) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let ru_path = dir.path().join("ru.json");
    let result_path = dir.path().join("result.json");
    let target = dir.path().join("target.dat");
    let dmalab = crate::common::dmalab_bin();
    let args = [
        "rusage",
        ru_path.to_str().expect("utf-8 path"),
        "--",
        dmalab.to_str().expect("utf-8 path"),
        "load",
        "--target",
        target.to_str().expect("utf-8 path"),
        "--size",
        "4M",
        "--engine",
        "io_uring",
        "--sqpoll-cpu",
        "1",
        "--cpus-allowed",
        "0",
        "--bs",
        "4K",
        "--rate-iops",
        "100",
        "--runtime",
        "1",
        "-q",
        "--output",
        result_path.to_str().expect("utf-8 path"),
    ];
    let (rc, out, err) = benchstat(&args);
    assert_eq!(rc, 0, "{out}{err}");
    let ru: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ru_path).expect("rusage file"))
            .expect("json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&result_path).expect("result"))
            .expect("json");
    let r = &doc["result"];
    let poller_s = r["io_uring"]["sqpoll_thread_cpu_ns"]
        .as_f64()
        .expect("sqpoll_thread_cpu_ns")
        / 1e9;
    let workers_s = (r["cpu"]["usr_ns"].as_f64().expect("usr_ns")
        + r["cpu"]["sys_ns"].as_f64().expect("sys_ns"))
        / 1e9;
    let total_s = ru["cpu_s"].as_f64().expect("cpu_s");
    // The poller spins for the whole second (it idles only after 1 s
    // without work), so it has CPU time to find.
    assert!(poller_s > 0.02, "poller {poller_s} s: {r}");
    // rusage counts in clock ticks of user and system time scaled to the
    // exact runtime; 1% and 10 ms of slack for that rounding.
    assert!(
        total_s >= (poller_s + workers_s) * 0.99 - 0.01,
        "rusage {total_s} s < poller {poller_s} s + workers {workers_s} s"
    );
}
