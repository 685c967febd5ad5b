//! Helpers shared by the integration tests.
//!
//! Tests that need something this kind of machine may lack (root, loop
//! devices, zram, QEMU) call [`need`]: it skips with a message naming what
//! is missing, except under `DMALAB_CI=1`, where a missing prerequisite is a
//! failure, so CI can never pass by skipping.
// Every test binary (see the `[[test]]` entries in Cargo.toml) uses a part
// of these helpers and none uses all of them.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod guest;
pub mod rdma_peer;

/// The argv a `dmalab run` record says its aggressor was started with.
pub fn aggressor_argv(run: &serde_json::Value) -> Vec<&str> {
    run["aggressor"]["argv"]
        .as_array()
        .expect("the record has an aggressor argv")
        .iter()
        .map(|a| a.as_str().expect("argv entries are strings"))
        .collect()
}

/// True when `argv` holds `flag` directly followed by `value`.
pub fn has_flag(argv: &[&str], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w == [flag, value])
}

/// True when the prerequisite is present. When it is not: under
/// `DMALAB_CI=1` panics, otherwise prints why the test is skipped and
/// returns false (the caller returns early).
pub fn need(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("DMALAB_CI").is_ok_and(|v| v == "1") {
        panic!("DMALAB_CI=1 and this test needs {what}, which is missing");
    }
    eprintln!("SKIPPED: this test needs {what}");
    false
}

/// True when running as root.
pub fn is_root() -> bool {
    dmalab_core::sys::is_root()
}

/// Skips (or fails under CI) unless root.
pub fn need_root() -> bool {
    need("root", is_root())
}

/// Path of the built `dmalab` binary.
pub fn dmalab_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("dmalab")
}

/// A `Command` for the built binary.
pub fn dmalab() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("dmalab").expect("dmalab binary is built")
}

/// True when `prog` is on PATH.
pub fn have_program(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(prog).is_file()))
}

/// Runs `dmalab ARGS` and asserts it refused bad input the house way: exit
/// 2, one stderr line `dmalab: error: ...` naming `option` (a flag, a field,
/// or a `FILE:LINE:` location). Returns that line for further checks.
pub fn assert_usage_error<I, S>(args: I, option: &str) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = dmalab();
    cmd.args(args);
    assert_usage_error_of(&mut cmd, option)
}

/// [`assert_usage_error`] for a prepared command (its own directory or
/// environment).
pub fn assert_usage_error_of(cmd: &mut assert_cmd::Command, option: &str) -> String {
    let out = cmd.output().expect("dmalab runs");
    assert_usage_output(&out, option)
}

/// The check of [`assert_usage_error`] on the output of a run already made,
/// for a test that also reads its stdout or had to start it itself.
pub fn assert_usage_output(out: &std::process::Output, option: &str) -> String {
    assert_usage_stderr(
        out.status.code(),
        &String::from_utf8_lossy(&out.stderr),
        option,
    )
}

/// The check of [`assert_usage_error`] on an exit status and stderr that
/// came back from elsewhere (a command run inside a test guest).
pub fn assert_usage_stderr(code: Option<i32>, err: &str, option: &str) -> String {
    assert_eq!(code, Some(2), "exit 2 on bad input; stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    assert!(
        lines[0].starts_with("dmalab: error: "),
        "the error line starts with `dmalab: error: `: {err}"
    );
    assert!(lines[0].contains(option), "the error names {option}: {err}");
    lines[0].to_string()
}

/// Sends `sig` to the process `pid` that the test started.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with plain integers, on a process of this test's.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Every record of the trace file `path`, in order.
pub fn trace_records(path: &std::path::Path) -> Vec<dmalab_trace::Record> {
    use dmalab_trace::RecordSource;
    let mut rd = dmalab_trace::TraceReader::open(path).unwrap();
    let mut r = dmalab_trace::Record::default();
    let mut out = Vec::new();
    while rd.next_record(&mut r).unwrap() {
        out.push(r);
    }
    out
}

/// Runs `cmd` (a `dmalab load` without `--output` or `--live-stats`) with
/// its result and live-stats page in `dir`, sends SIGINT once the page says
/// it runs, and checks what every interrupted load owes: exit 130, the
/// result written and marked interrupted, the page marked finished.
/// Returns the result document and the last snapshot. `what` names the case
/// in failure messages.
pub fn interrupt_running_load(
    mut cmd: std::process::Command,
    dir: &std::path::Path,
    what: &str,
) -> (serde_json::Value, dmalab_core::livestats::Snapshot) {
    let (out, live) = (dir.join("r.json"), dir.join("live"));
    let mut child = cmd
        .arg("--output")
        .arg(&out)
        .arg("--live-stats")
        .arg(&live)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until_load_runs(&live),
        "{what}: never saw the load running"
    );
    signal(child.id(), 2);
    let status = child.wait().unwrap();
    // Every interrupted command exits 128 + the signal number (issue 15).
    assert_eq!(status.code(), Some(130), "{what}: {status:?}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(j["status"], "interrupted", "{what}");
    let snap = dmalab_core::livestats::parse(&std::fs::read(&live).unwrap()).unwrap();
    assert_eq!(
        snap.state,
        dmalab_core::livestats::State::Finished,
        "{what}"
    );
    (j, snap)
}

/// Waits (at most 15 s) until the load writing the live-stats page `live`
/// says it is running and has counted commands; false when it never did.
pub fn wait_until_load_runs(live: &std::path::Path) -> bool {
    use dmalab_core::livestats::{parse, State};
    for _ in 0..300 {
        let snap = std::fs::read(live).ok().and_then(|b| parse(&b).ok());
        if snap.is_some_and(|s| s.state == State::Running && s.commands > 0) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}
