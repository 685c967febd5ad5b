//! Live rate control of `dmalab load` and `dmalab throttle`, through the
//! binary.

mod common;

use common::dmalab_bin;
use dmalab_core::ratecontrol::{Limits, RateControl};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

/// Waits (at most `limit`) for `f` to give Some.
fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_paced_load_follows_a_live_rate_change() {
    let dir = tempfile::tempdir().unwrap();
    let ctl_path = dir.path().join("rate");
    let out = dir.path().join("load.json");
    let mut child = Command::new(dmalab_bin())
        .args(["load", "--engine", "null", "--pattern", "single"])
        .args(["--rate-iops", "2000", "--runtime", "5s", "-q"])
        .arg("--rate-control")
        .arg(&ctl_path)
        .arg("--output")
        .arg(&out)
        .spawn()
        .unwrap();
    let ctl = wait_for(Duration::from_secs(30), || {
        RateControl::open(&ctl_path).ok().flatten()
    })
    .expect("the load creates its rate-control file");
    // Change the target somewhere in the run; when does not matter: the
    // checker judges every window against the limits in force during it.
    std::thread::sleep(Duration::from_millis(1500));
    ctl.set(Limits {
        rate_bytes_per_s: None,
        rate_iops: Some(500),
    });
    let applied = wait_for(Duration::from_secs(10), || (ctl.applied() == 2).then_some(()));
    let st = child.wait().unwrap();
    assert!(st.success());
    assert!(applied.is_some(), "the load never applied the change");
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let r = &j["result"];
    let changes = r["rate_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{r}");
    assert_eq!(changes[0]["rate_iops"], 500);
    let c = &r["rate_check"];
    let targets: Vec<f64> = c["windows_target_per_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let got: Vec<f64> = c["windows_per_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(targets.first(), Some(&2000.0), "{c}");
    assert_eq!(targets.last(), Some(&500.0), "{c}");
    // Every window within 2% of its own target, beyond what the VM's
    // pauses explain, and the whole run's count close to the schedule's.
    assert!(
        c["unexplained_max_error_pct"].as_f64().unwrap() <= 2.0,
        "delivered {got:?} against {targets:?}"
    );
    assert!(c["mean_error_pct"].as_f64().unwrap() <= 1.0, "{c}");
    // The per-second samples carry the target in force.
    let samples = r["samples"].as_array().unwrap();
    assert_eq!(samples[0]["rate_target_iops"], 2000);
    assert_eq!(samples.last().unwrap()["rate_target_iops"], 500);
}

#[test]
fn rate_control_needs_a_starting_rate_and_spares_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rate");
    let out = Command::new(dmalab_bin())
        .args(["load", "--engine", "null", "--runtime", "1s", "-q"])
        .arg("--rate-control")
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rate-control"), "{err}");
    assert!(!p.exists());
    std::fs::write(&p, b"precious").unwrap();
    let out = Command::new(dmalab_bin())
        .args(["load", "--engine", "null", "--runtime", "1s", "-q"])
        .args(["--rate-iops", "100"])
        .arg("--rate-control")
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&p).unwrap(), b"precious");
}
