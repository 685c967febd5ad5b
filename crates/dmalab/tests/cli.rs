//! The command line as a whole: help, version, exit codes.

mod common;
use common::dmalab;

#[test]
fn help_lists_every_command() {
    let out = dmalab()
        .arg("--help")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8_lossy(&out);
    for c in [
        "load", "info", "probe", "page", "run", "report", "compare", "sim", "cleanup", "fleet",
        "ddio", "stat", "throttle",
    ] {
        assert!(text.contains(c), "--help lacks {c}:\n{text}");
    }
}

#[test]
fn unknown_flag_exits_2() {
    dmalab().arg("--no-such-flag").assert().code(2);
}
