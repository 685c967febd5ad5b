//! The `ddio` key of `dmalab run` configurations on this host: every run
//! record says what was asked and why it was not set, the runs go on, and
//! the report has a DDIO table per configuration.

use crate::common;

use serde_json::Value;

#[test]
fn ddio_axis_records_that_this_host_cannot_and_runs_the_rest() {
    let intel = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("GenuineIntel"));
    if !common::need(
        "a CPU without DDIO control (this pins the development VM)",
        !intel,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("d.toml");
    std::fs::write(
        &exp,
        r#"
[experiment]
repetitions = 2
cooldown = "0s"

[matrix]
ddio = ["off", "ways:2"]

[[victim]]
name = "ok"
command = "exec"
run = ["sh", "-c", "echo 'score: 41.5 points'"]
regex = 'score: ([0-9.]+)'
unit = "points"
better = "higher"
"#,
    )
    .unwrap();
    let res = dir.path().join("d.jsonl");
    let out = common::dmalab()
        .args(["run", "--quiet", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("ddio off: not set: DDIO is not controllable here: not on this CPU"),
        "{stderr}"
    );
    let runs: Vec<Value> = std::fs::read_to_string(&res)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["record"] == "run")
        .collect();
    assert_eq!(runs.len(), 4);
    for r in &runs {
        assert_eq!(r["status"], "completed");
        let want = match r["configuration"].as_str().unwrap() {
            "ddio=off" => "off",
            "ddio=ways:2" => "ways:2",
            other => panic!("unexpected configuration {other}"),
        };
        assert_eq!(r["ddio"]["requested"], want);
        assert_eq!(r["ddio"]["applied"], false);
        assert!(r["ddio"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("DDIO is not controllable here: not on this CPU"));
    }
    let html = dir.path().join("d.html");
    common::dmalab()
        .arg("report")
        .arg(&res)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>DDIO per configuration</h2>"));
    assert!(page.contains(r#"<td class="l">ddio=ways:2</td><td>ways:2</td><td>0 of 2</td>"#));
}
