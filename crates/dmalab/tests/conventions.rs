//! What a researcher quotes and scripts: the signs of changes, units on
//! figures, and the fio/perf output conventions, through the binary.

use crate::common;

use std::path::Path;

/// A bandwidth victim that reads 19.92 GiB/s alone and 11.07 GiB/s while
/// the aggressor runs (it looks for the aggressor's process), five
/// repetitions.
fn bandwidth_experiment(dir: &Path) -> std::path::PathBuf {
    // `slee[p]` matches the aggressor's command line and not the victim's
    // own, which spells the pattern with brackets.
    let exp = dir.join("signs.toml");
    std::fs::write(
        &exp,
        r#"
[experiment]
repetitions = 5
warmup = "200ms"
cooldown = "0s"

[[aggressor]]
name = "hog"
command = "exec"
run = ["sleep", "60.4817"]

[[victim]]
name = "bw"
command = "exec"
run = ["sh", "-c", "if pgrep -f 'slee[p] 60.4817' >/dev/null; then echo 'bw 11.07'; else echo 'bw 19.92'; fi"]
regex = 'bw ([0-9.]+)'
unit = "GiB/s"
better = "higher"
"#,
    )
    .unwrap();
    exp
}

/// Issue 33: bandwidth 19.92 -> 11.07 GiB/s was printed as `+80%` "change
/// against plain" (the slowdown factor plain/loaded). The change of the
/// figure is -44.43%, and it is worse.
#[test]
fn a_bandwidth_drop_reads_as_a_negative_change_that_is_worse() {
    if !common::need("pgrep", common::have_program("pgrep")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = bandwidth_experiment(dir.path());
    let res = dir.path().join("signs.jsonl");
    let out = common::dmalab()
        .args(["run", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("change vs plain [95% CI]"), "{text}");
    let row = text
        .lines()
        .find(|l| l.contains(" hog "))
        .unwrap_or_else(|| panic!("no row of the loaded cell: {text}"));
    assert!(row.contains("-44.43% [-44.43, -44.43] worse"), "{row}");
    assert!(!row.contains("+79.95"), "the slowdown factor is no change: {row}");

    // The CSV names both: the change of the figure and the slowdown factor.
    let csv = dir.path().join("cells.csv");
    let out = common::dmalab()
        .arg("report")
        .arg(&res)
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let csv = std::fs::read_to_string(&csv).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row = lines
        .find(|l| l.contains(",hog,"))
        .unwrap_or_else(|| panic!("{csv}"));
    let row: Vec<&str> = row.split(',').collect();
    let col = |name: &str| {
        let i = head
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}: {head:?}"));
        row[i]
    };
    let num = |name: &str| col(name).parse::<f64>().unwrap();
    assert!((num("change_pct") - (11.07 / 19.92 - 1.0) * 100.0).abs() < 1e-9);
    assert!((num("slowdown_factor") - 19.92 / 11.07).abs() < 1e-9);
    assert_eq!(col("change"), "worse");
}
