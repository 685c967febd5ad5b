//! The command line as a whole: help, version, exit codes.

use crate::common;
use common::dmalab;

/// Regression: this test once looked for each name anywhere in the help
/// text, where "run", "load" and others also appear in descriptions, so
/// deleting subcommands would not fail it. It now reads the names of the
/// "Commands:" section and compares the whole list.
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
    let names: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // A command line is indented by two; a wrapped description by more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "load",
            "info",
            "probe",
            "page",
            "run",
            "report",
            "compare",
            "sim",
            "throttle",
            "cleanup",
            "fleet",
            "ddio",
            "stat",
            "rdma",
            "completions",
            "man",
            "help"
        ],
        "{text}"
    );
}

#[test]
fn unknown_flag_exits_2() {
    // Not `assert_usage_error`: an unknown flag is clap's own refusal, a
    // multi-line message with a usage hint, and that is what this pins.
    dmalab().arg("--no-such-flag").assert().code(2);
}

/// Clap refuses an unknown flag with its own usage text; a value clap takes
/// but dmalab refuses is one line naming the option, exit 2.
#[test]
fn bad_value_is_one_line_naming_the_option() {
    let err = common::assert_usage_error(["report", "--noisy-cv", "0", "x.jsonl"], "--noisy-cv");
    assert!(err.contains("must be above zero"), "{err}");
}
