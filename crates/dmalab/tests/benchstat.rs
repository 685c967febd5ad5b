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
