//! The `ddio` key of `dmalab run` configurations on this host: every run
//! record says what was asked and why it was not set, the runs go on, and
//! the report has a DDIO table per configuration.

use crate::common;

use serde_json::Value;

#[test]
fn ddio_axis_records_that_this_host_cannot_and_runs_the_rest() {
    // Whatever the vendor, this kind of machine cannot change DDIO: the
    // record carries the library's own refusal for this host.
    let host = dmalab_host::HostRoot::system();
    let regs = dmalab_host::ddio::regs::Registers::files(&host);
    let plan = dmalab_host::ddio::plan(&host, &regs, dmalab_host::ddio::Setting::Off, None);
    let Err(refusal) = plan else {
        common::need("a host where DDIO cannot be changed", false);
        return;
    };
    let why = format!("DDIO is not controllable here: {}", refusal.message);
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
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The table flags every cell whose DDIO setting was never made: its
    // figures are the host's own DDIO state, whatever the name says.
    for (config, want) in [("ddio=off", "off"), ("ddio=ways:2", "ways:2")] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(config))
            .unwrap_or_else(|| panic!("no {config} row in {stdout}"));
        assert!(row.contains(&format!("ddio {want} not applied")), "{row}");
    }
    assert!(
        stderr.contains(&format!("ddio off: not set: {why}")),
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
        // ways:2 may be refused for another reason (the MSR) than off.
        assert!(r["ddio"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("DDIO is not controllable here: "));
        if want == "off" {
            assert_eq!(r["ddio"]["detail"], why.as_str());
        }
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
    // The statistics table and the bar chart say it too.
    assert!(
        page.contains(r#"<td class="l">ddio=off (ddio off not applied)</td>"#),
        "statistics table row not flagged"
    );
    assert!(
        page.contains(r#"text-anchor="middle">ddio=ways:2 (ddio ways:2 not applied)</text>"#),
        "bar chart group not flagged"
    );
}
