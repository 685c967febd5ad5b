//! What a researcher quotes and scripts: the signs of changes, units on
//! figures, and the fio/perf output conventions, through the binary.

use crate::common;

mod function_length;

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
    assert!(
        !row.contains("+79.95"),
        "the slowdown factor is no change: {row}"
    );

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

/// `dmalab load` on the null engine (100 ms unless `extra` says) with `extra` flags, in
/// `dir`: (exit code, stdout, stderr).
fn null_load(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = common::dmalab()
        .current_dir(dir)
        .args(["load", "--engine", "null"])
        .args(if extra.contains(&"--runtime") {
            &[][..]
        } else {
            &["--runtime", "100ms"][..]
        })
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON document on stdout, whole: nothing but it there.
fn document(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: not JSON alone: {stdout}"))
}

/// Issue 33: `--output -` wrote a file named `-`.
#[test]
fn output_dash_is_stdout_and_the_text_goes_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = null_load(dir.path(), &["--output", "-"]);
    assert_eq!(code, 0, "{err}");
    let d = document(&out);
    assert_eq!(d["command"], "load");
    assert!(d["result"]["totals"]["commands"].as_u64().unwrap() > 0);
    assert!(err.contains("dmalab load: null engine"), "{err}");
    assert!(!dir.path().join("-").exists(), "no file named -");
    // --output /dev/stdout is stdout too: the document alone, not mixed
    // with the text.
    let (code, out, err) = null_load(dir.path(), &["--output", "/dev/stdout"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(document(&out)["command"], "load");
}

/// Issue 33: `--output-format json` without `--output` was ignored.
#[test]
fn output_format_without_a_file_applies_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = null_load(dir.path(), &["--output-format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(document(&out)["command"], "load");
    // Terse CSV: a header and one row, named by JSON pointer, raw units.
    let (code, out, err) = null_load(dir.path(), &["--output-format", "csv"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let head: Vec<&str> = lines[0].split(',').collect();
    let row: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(head.len(), row.len(), "{out}");
    assert_eq!(&head[..2], ["command", "status"]);
    assert_eq!(&row[..2], ["load", "completed"]);
    let i = head.iter().position(|h| *h == "totals/commands").unwrap();
    assert!(row[i].parse::<u64>().unwrap() > 0, "{out}");
    // text is today's stdout.
    let (code, out, _) = null_load(dir.path(), &["--output-format", "text"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("dmalab load: null engine"), "{out}");
}

/// Issue 33: `load -q --output FILE` still printed the whole summary.
#[test]
fn quiet_prints_nothing_but_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = null_load(dir.path(), &["-q", "--output", "r.json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "", "the result is the file");
    assert_eq!(err, "");
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(d["command"], "load");
    // Without a file the summary is the result.
    let (code, out, err) = null_load(dir.path(), &["-q"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("dmalab load: null engine"), "{out}");
    assert_eq!(err, "", "no per-second lines");
    // And with the document on stdout, only the document.
    let (code, out, err) = null_load(dir.path(), &["-q", "--output", "-"]);
    assert_eq!(code, 0);
    assert_eq!(document(&out)["command"], "load");
    assert_eq!(err, "");
}

#[test]
fn completions_and_man_page_come_from_the_command_line() {
    let out = common::dmalab()
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("complete -F"), "{script}");
    assert!(
        script.contains("dmalab__subcmd__load)"),
        "the load subcommand"
    );
    assert!(script.contains("--output-format"), "its flags");
    common::assert_usage_error(["completions", "tcsh"], "<SHELL>");

    let out = common::dmalab().args(["man", "load"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH dmalab-load"),
        "{page}"
    );
    common::assert_usage_error(["man", "lod"], "COMMAND");
    if !common::need("man", common::have_program("man")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dmalab-load.1");
    std::fs::write(&p, page.as_bytes()).unwrap();
    let shown = std::process::Command::new("man")
        .env("MANWIDTH", "100")
        .arg("-l")
        .arg(&p)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("--runtime"), "{text}");
    assert!(text.contains("binary"), "the units paragraph: {text}");
}

/// Issue 33: `probe bandwidth` printed GB/s (10^9) where every other
/// command prints GiB/s, and load's per-second lines MiB/s beside a GiB/s
/// summary. One unit system: binary, with the unit on every figure; the
/// JSON keeps bytes.
#[test]
fn every_command_prints_rates_in_binary_units() {
    let out = common::dmalab()
        .args(["probe", "bandwidth", "--size", "1M", "--runtime", "100ms"])
        .args(["--output", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    let total = text
        .lines()
        .find(|l| l.starts_with("total: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        total.contains(" GiB/s ") || total.contains(" MiB/s "),
        "{total}"
    );
    assert!(!text.contains("GB/s"), "{text}");
    let d = document(&String::from_utf8_lossy(&out.stdout));
    let bw = d["result"]["bw_bytes"].as_f64().unwrap();
    let shown = dmalab_core::units::fmt_rate(bw);
    assert!(total.contains(&shown), "{shown} in {total}");

    // load's per-second lines in the summary's unit: a load that moves
    // data (the null engine's summary has no data line), on a file of a
    // disk-backed directory (O_DIRECT).
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let target = dir.path().join("t");
    let o = common::dmalab()
        .current_dir(dir.path())
        .args(["load", "--target", target.to_str().unwrap()])
        .args(["--size", "8M", "--buffer", "1M", "--runtime", "1100ms"])
        .output()
        .unwrap();
    let (code, out, err) = (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(code, 0, "{err}");
    let second = err
        .lines()
        .find(|l| l.contains(" blocks/s "))
        .unwrap_or_else(|| panic!("{err}"));
    let unit = |l: &str| {
        ["KiB/s", "MiB/s", "GiB/s", "TiB/s"]
            .into_iter()
            .find(|u| l.contains(u))
    };
    let data = out
        .lines()
        .find(|l| l.trim_start().starts_with("data "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(unit(second).is_some(), "{second}");
    assert!(unit(data).is_some(), "{data}");

    // Every command that takes a size says how sizes are read.
    for cmd in [
        &["load"][..],
        &["probe", "latency"],
        &["probe", "bandwidth"],
        &["page"],
    ] {
        let out = common::dmalab().args(cmd).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
        assert!(
            help.contains("kB, MB, GB, TB are decimal"),
            "{cmd:?}: {help}"
        );
    }
}

/// Runs `dmalab ARGS` under `script` (util-linux), whose pseudo-terminal is
/// the command's stdin, stdout and stderr; returns all it wrote.
fn in_a_pty(args: &str) -> String {
    let bin = common::dmalab_bin();
    let o = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!("{} {args}", bin.display()))
        .arg("/dev/null")
        .output()
        .expect("run script");
    assert!(o.status.success(), "{args}: {o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Issue 33 item 7: filling a scratch file ran silently (4 of the first
/// session's 9 s). On a terminal a bar shows the bytes written of the total
/// and the rate; under -q and beside a document on stdout (`--output -`)
/// there is none.
#[test]
fn a_fill_shows_a_bar_on_a_terminal_only() {
    if !common::need("script (util-linux)", common::have_program("script")) {
        return;
    }
    let tty = in_a_pty("load --size 32M --commands 10");
    assert!(
        tty.contains("filling the target") && tty.contains("/32.00 MiB") && tty.contains("MiB/s"),
        "{tty}"
    );
    assert!(tty.contains("dmalab load:"), "the summary follows: {tty}");
    for quiet in ["-q", "--output - --output-format json"] {
        let tty = in_a_pty(&format!("load --size 32M --commands 10 {quiet}"));
        assert!(!tty.contains("filling"), "{quiet}: {tty}");
        assert!(!tty.contains('\x1b'), "{quiet}: {tty}");
    }
}

/// Where stderr is no terminal (a pipe, a log, a test) the fill draws no bar
/// and writes no escape code, whatever the flags.
#[test]
fn a_fill_on_a_pipe_writes_no_bar_and_no_escapes() {
    let o = common::dmalab()
        .args(["load", "--size", "32M", "--commands", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("dmalab load:"), "{out}");
    for s in [&err, &out] {
        assert!(!s.contains("filling") && !s.contains('\x1b'), "{s}");
    }
}

/// `dmalab run`'s cycles: on a terminal one bar (runs done of planned, the
/// time left, the run going on), on a pipe one plain line per run and no
/// escape code, under -q neither.
#[test]
fn a_run_shows_a_bar_on_a_terminal_and_lines_on_a_pipe() {
    if !common::need("script (util-linux)", common::have_program("script")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("bar.toml");
    std::fs::write(
        &exp,
        r#"
[experiment]
repetitions = 2
warmup = "0s"
cooldown = "0s"

[[aggressor]]
name = "idle"
command = "exec"
run = ["sleep", "30"]

[[victim]]
name = "v"
command = "exec"
run = ["echo", "v 1.5"]
regex = 'v ([0-9.]+)'
unit = "s"
better = "lower"
"#,
    )
    .unwrap();
    let res = dir.path().join("bar.jsonl");
    let tty = in_a_pty(&format!(
        "run --restart -o {} {}",
        res.display(),
        exp.display()
    ));
    assert!(
        tty.contains("] 0/4 ETA") || tty.contains("] 1/4 ETA"),
        "{tty}"
    );
    assert!(!tty.contains("[1/4] "), "lines instead of a bar: {tty}");
    let o = common::dmalab()
        .args(["run", "--restart", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[1/4] ") && err.contains("[4/4] "), "{err}");
    assert!(!err.contains('\x1b'), "{err}");
    let tty = in_a_pty(&format!(
        "run -q --restart -o {} {}",
        res.display(),
        exp.display()
    ));
    assert!(!tty.contains("/4 ETA") && !tty.contains("[1/4]"), "{tty}");
}

/// Issue 33: the null engine's summary says it moves no bytes, but its
/// per-second lines still showed blocks/s and a data rate (53.97 GiB/s).
/// They show commands/s only, as its summary does.
#[test]
fn the_null_engine_per_second_lines_show_commands_only() {
    let o = common::dmalab()
        .args(["load", "--engine", "null", "--runtime", "1100ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let second = err
        .lines()
        .find(|l| l.contains(" commands/s"))
        .unwrap_or_else(|| panic!("no per-second line: {err}"));
    for moved in ["B/s", "blocks/s"] {
        assert!(!second.contains(moved), "{second}");
    }
}
