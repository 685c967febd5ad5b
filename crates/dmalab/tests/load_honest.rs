//! Results that say what they measured and no more (issue 33, "honest
//! states"): no NVMe command bytes where no NVMe command was sent, no data
//! rate for an engine that moves nothing, no rate error without a whole
//! window to judge.

use crate::load_util::load;

#[test]
fn null_engine_summary_names_no_data_and_no_completion_bytes() {
    let (code, stdout, stderr, _) = load(&["--engine", "null", "--runtime", "1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("null engine"), "{stdout}");
    assert!(stdout.contains("commands/s"), "{stdout}");
    assert!(!stdout.contains("completion"), "{stdout}");
    assert!(!stdout.contains("data"), "{stdout}");
}

#[test]
fn io_uring_on_a_file_claims_no_nvme_command_bytes() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let target = dir.path().join("x");
    let (code, stdout, stderr, _) = load(&[
        "--target",
        target.to_str().unwrap(),
        "--size",
        "16M",
        "--runtime",
        "1",
        "--buffer",
        "4M",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("io_uring engine"), "{stdout}");
    assert!(stdout.contains("  data "), "{stdout}");
    assert!(!stdout.contains("64 B command"), "{stdout}");
    assert!(!stdout.contains("combined"), "{stdout}");
}

#[test]
fn rate_check_under_a_whole_second_says_no_full_window() {
    // Regression: a run under 2 s printed `mean 0 (100.000% off) ...
    // over 0 windows`, an error figure with nothing behind it.
    let (code, stdout, stderr, json) =
        load(&["--engine", "null", "--rate", "10M", "--runtime", "0.5"]);
    assert_eq!(code, 0, "{stderr}");
    let rate = stdout
        .lines()
        .find(|l| l.starts_with("  rate "))
        .unwrap_or_else(|| panic!("no rate line in {stdout}"));
    assert!(rate.contains("no full 1-s window"), "{rate}");
    assert!(!rate.contains("% off"), "{rate}");
    let c = &json.expect("JSON written")["result"]["rate_check"];
    assert!(c["mean_error_pct"].is_null(), "{c}");
    assert!(c["mean_per_s"].is_null(), "{c}");
    assert!(c["window_max_error_pct"].is_null(), "{c}");
    assert!(
        c["no_window"]
            .as_str()
            .unwrap()
            .contains("no full 1-s window"),
        "{c}"
    );
}
