//! `dmalab run` through the binary: experiment-file errors, failing and
//! timed-out victims, resume after a kill, a changed file refused, SIGINT,
//! and evidence from an aggressor's live-stats file.

use crate::common;

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn runs(path: &Path) -> Vec<Value> {
    records(path)
        .into_iter()
        .filter(|r| r["record"] == "run")
        .collect()
}

#[test]
fn unknown_key_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "e.toml",
        "[experiment]\nrepetitions = 2\n\n[[victim]]\nname = \"a\"\ncommand = \"exec\"\nrun = [\"true\"]\ntimout = \"5s\"\n",
    );
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .current_dir(dir.path()),
        "e.toml:8:",
    );
    assert!(err.contains("unknown key 'timout'"), "{err}");
    assert!(
        !dir.path().join("e.results.jsonl").exists(),
        "nothing written"
    );

    // A syntax error and an unknown table key, with their lines.
    let exp = write(
        dir.path(),
        "s.toml",
        "[experiment]\nrepetitions = 2\nwarmpu = \"1s\"\n",
    );
    let err = common::assert_usage_error([Path::new("run"), exp.as_path()], "s.toml:3:");
    assert!(err.contains("warmpu"), "{err}");
}

#[test]
fn unknown_flag_of_a_dmalab_command_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "e.toml",
        "[[aggressor]]\nname = \"random\"\ncommand = \"load\"\nno_such_flag = 3\n\n[[victim]]\nname = \"a\"\ncommand = \"exec\"\nrun = [\"true\"]\n",
    );
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .current_dir(dir.path()),
        "e.toml:4:",
    );
    // Refused while the file is read, naming the key and the command,
    // from `dmalab load`'s own config (not from its --help).
    assert!(
        err.contains("aggressor 'random': unknown key 'no_such_flag' for dmalab load; it takes: target, engine,"),
        "{err}"
    );
}

/// A key the runner sets itself, a switch given a value, an override no
/// aggressor's command takes, and a swept switch: each refused with exit
/// 2 and its line, before anything runs.
#[test]
fn keys_a_child_command_cannot_take_are_refused_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let victim = "\n[[victim]]\nname = \"a\"\ncommand = \"idle\"\nduration = \"1s\"\n";
    for (agg, extra, at, want) in [
        ("output = \"x.json\"", "", "e.toml:3:", "aggressor 'x': key 'output': dmalab run sets --output itself; remove it"),
        ("keep = \"yes\"", "", "e.toml:3:", "aggressor 'x': key 'keep': --keep of dmalab load is a switch; write keep = true (or false)"),
        ("bs = \"4K\"", "\n[[configuration]]\nname = \"c\"\niodeph = 4\n", "e.toml:12:", "configuration 'c': key 'iodeph': no aggressor's command has a flag --iodeph"),
        ("bs = \"4K\"", "\n[sweep]\naggressor = \"x\"\nflag = \"keep\"\nvalues = [1]\n", "e.toml:12:", "sweep.flag: `dmalab load` has no flag --keep that takes a value"),
    ] {
        let text = format!("[[aggressor]]\nname = \"x\"\n{agg}\n{victim}{extra}");
        let exp = write(dir.path(), "e.toml", &text);
        let err = common::assert_usage_error([Path::new("run"), exp.as_path()], at);
        assert!(err.contains(want), "{text}\n{err}");
    }
}

/// Regression: a value the aggressor's command refuses through clap was
/// reported with the last line of clap's message ("For more information,
/// try '--help'.") instead of its error line.
#[test]
fn aggressor_value_refused_by_clap_names_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "e.toml",
        "[[aggressor]]\nname = \"x\"\nengine = \"null\"\nworkers = \"zz\"\n\n[[victim]]\nname = \"a\"\ncommand = \"idle\"\nduration = \"1s\"\n",
    );
    let err = common::assert_usage_error([Path::new("run"), exp.as_path()], "e.toml:1:");
    assert!(
        err.contains("refused it: invalid value 'zz' for '--workers"),
        "{err}"
    );
}

#[test]
fn failing_and_timed_out_victims_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "f.toml",
        r#"
[experiment]
repetitions = 2
cooldown = "0s"

[[victim]]
name = "crash"
command = "exec"
run = ["sh", "-c", "echo starting; echo 'segfault at 0x0' >&2; exit 3"]

[[victim]]
name = "hang"
command = "exec"
run = ["sleep", "30"]
timeout = "300ms"

[[victim]]
name = "ok"
command = "exec"
run = ["sh", "-c", "echo 'score: 41.5 points'"]
regex = 'score: ([0-9.]+)'
unit = "points"
better = "higher"
"#,
    );
    let res = dir.path().join("f.jsonl");
    let out = common::dmalab()
        .args(["run", "--quiet", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = runs(&res);
    assert_eq!(rs.len(), 6);
    for r in &rs {
        match r["victim"].as_str().unwrap() {
            "crash" => {
                assert_eq!(r["status"], "failed");
                assert_eq!(r["failure"]["exit_status"], 3);
                assert!(r["failure"]["stderr_tail"]
                    .as_str()
                    .unwrap()
                    .contains("segfault at 0x0"));
            }
            "hang" => {
                assert_eq!(r["status"], "failed");
                assert!(
                    r["failure"]["reason"]
                        .as_str()
                        .unwrap()
                        .contains("timed out"),
                    "{r}"
                );
                assert_eq!(r["failure"]["signal"], 9);
            }
            _ => {
                assert_eq!(r["status"], "completed");
                assert_eq!(r["value"], 41.5);
                assert_eq!(r["better"], "higher");
            }
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("2 failed"), "{stdout}");
}

const SLOW: &str = r#"
[experiment]
repetitions = 3
warmup = "0s"
cooldown = "0s"

[[configuration]]
name = "one"
[[configuration]]
name = "two"

[[aggressor]]
name = "spin"
command = "exec"
run = ["sleep", "60"]

[[victim]]
name = "nap"
command = "exec"
run = ["sleep", "0.15"]
"#;

fn spawn_run(exp: &Path, res: &Path) -> std::process::Child {
    Command::new(common::dmalab_bin())
        .args(["run", "--quiet", "-o"])
        .arg(res)
        .arg(exp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_runs(res: &Path, n: usize) {
    let t0 = Instant::now();
    while runs(res).len() < n {
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn killed_run_resumes_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "slow.toml", SLOW);
    let res = dir.path().join("slow.jsonl");
    let mut child = spawn_run(&exp, &res);
    wait_for_runs(&res, 3);
    child.kill().unwrap();
    child.wait().unwrap();
    let before = std::fs::read_to_string(&res).unwrap();
    // A write torn by the kill: half a record at the end.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&res)
        .unwrap()
        .write_all(b"{\"record\":\"run\",\"ind")
        .unwrap();
    let n_before = before.lines().count() - 1;
    assert!((3..12).contains(&n_before), "{n_before}");

    let out = common::dmalab()
        .args(["run", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(&res).unwrap();
    assert!(
        after.starts_with(&before),
        "earlier records are kept as they were"
    );
    let rs = runs(&res);
    // plan: 2 configurations x 3 repetitions x (plain, spin)
    assert_eq!(rs.len(), 12);
    let mut idx: Vec<u64> = rs.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    idx.sort();
    assert_eq!(idx, (0..12).collect::<Vec<_>>(), "each run exactly once");
    assert_eq!(
        records(&res)
            .iter()
            .filter(|r| r["record"] == "header")
            .count(),
        1
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("resuming after {n_before} of 12")),
        "{err}"
    );
    // Cycle order: plain, then the load, repeated.
    let loads: Vec<&str> = rs.iter().map(|r| r["load"].as_str().unwrap()).collect();
    assert_eq!(&loads[..4], ["plain", "spin", "plain", "spin"]);

    // A rerun of a finished experiment adds nothing.
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&res).unwrap(), after);
}

#[test]
fn changed_experiment_is_refused_unless_restart() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "c.toml",
        "[experiment]\nrepetitions = 1\ncooldown = \"0s\"\n[[victim]]\nname = \"t\"\ncommand = \"exec\"\nrun = [\"true\"]\n",
    );
    let res = dir.path().join("c.jsonl");
    let ok = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
    let first = std::fs::read_to_string(&res).unwrap();
    write(
        dir.path(),
        "c.toml",
        "[experiment]\nrepetitions = 2\ncooldown = \"0s\"\n[[victim]]\nname = \"t\"\ncommand = \"exec\"\nrun = [\"true\"]\n",
    );
    let err = common::assert_usage_error_of(
        common::dmalab()
            .args(["run", "-q", "-o"])
            .arg(&res)
            .arg(&exp),
        "--restart",
    );
    assert!(err.contains("different version"), "{err}");
    assert_eq!(std::fs::read_to_string(&res).unwrap(), first, "untouched");

    let out = common::dmalab()
        .args(["run", "-q", "--restart", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(runs(&res).len(), 2);
    let kept: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".old"))
        .collect();
    assert_eq!(kept.len(), 1, "the old results are kept");
    assert_eq!(std::fs::read_to_string(kept[0].path()).unwrap(), first);
}

#[test]
fn sigint_stops_after_the_current_run() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "slow.toml", SLOW);
    let res = dir.path().join("slow.jsonl");
    let mut child = spawn_run(&exp, &res);
    wait_for_runs(&res, 1);
    common::signal(child.id(), 2);
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130));
    let n = runs(&res).len();
    assert!((1..12).contains(&n), "{n}");
    // Every record is whole, and the aggressor was stopped (no stray sleep 60).
    for r in runs(&res) {
        assert_eq!(r["status"], "completed", "{r}");
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("resume"), "{err}");
}

/// The name libtest knows [`fake_aggressor_entry`] by in the test binary
/// that holds this file: `run::fake_aggressor_entry` when it is a module of
/// `cmdline`. Regression: once the file moved into `cmdline`, `--exact
/// fake_aggressor_entry` matched no test, the aggressor exited at once and
/// the run was recorded as failed.
fn fake_aggressor_test_name() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::fake_aggressor_entry"),
        None => "fake_aggressor_entry".to_string(),
    }
}

/// Not a test of its own: the fake aggressor the evidence test starts (the
/// test binary re-executed; without the variable it returns at once).
/// Writes a live-stats file through `dmalab_core::livestats`, the writer `dmalab
/// load --live-stats` uses, so the layout cannot drift from the real one:
/// 1 MiB and 256 commands per 10 ms, until killed.
#[test]
fn fake_aggressor_entry() {
    use dmalab_core::livestats::Writer as LiveStats;
    use dmalab_core::sys::clock::monotonic_ns;
    let Ok(path) = std::env::var("DMALAB_FAKE_LIVE_STATS") else {
        return;
    };
    let live = LiveStats::create(Some(Path::new(&path))).unwrap();
    let start = monotonic_ns();
    live.set_running(start);
    loop {
        std::thread::sleep(Duration::from_millis(10));
        live.add(1 << 20, 256, 256, monotonic_ns() - start);
    }
}

#[test]
fn evidence_comes_from_the_aggressors_live_stats() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    let exp = write(
        dir.path(),
        "ev.toml",
        &format!(
            r#"
[experiment]
repetitions = 1
warmup = "50ms"
cooldown = "0s"

[[aggressor]]
name = "fake"
command = "exec"
run = ["env", "DMALAB_FAKE_LIVE_STATS={{live_stats}}", "{}", "{}", "--exact", "--nocapture"]

[[victim]]
name = "nap"
command = "exec"
run = ["sleep", "2.2"]
"#,
            me.display(),
            fake_aggressor_test_name()
        ),
    );
    let res = dir.path().join("ev.jsonl");
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = runs(&res);
    assert_eq!(rs.len(), 2);
    assert!(rs[0]["aggressor"].is_null(), "plain run has no aggressor");
    let ev = &rs[1]["aggressor"]["evidence"];
    assert_eq!(rs[1]["status"], "completed", "{}", rs[1]);
    assert_eq!(ev["running_throughout"], true);
    let window = ev["window_ns"].as_f64().unwrap();
    assert!(window >= 2.0e9, "{window}");
    let bytes = ev["data_bytes"].as_f64().unwrap();
    let cmds = ev["commands"].as_f64().unwrap();
    assert!(bytes > 0.0 && cmds > 0.0, "{ev}");
    // The fake writes 256 commands per MiB.
    assert!((bytes / cmds - 4096.0).abs() < 4096.0 * 0.02, "{ev}");
    let samples = ev["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2, "one per second: {ev}");
    let sum: u64 = samples
        .iter()
        .map(|s| s["data_bytes"].as_u64().unwrap())
        .sum();
    assert!(sum as f64 <= bytes, "samples are inside the window");
}

#[test]
fn sweep_with_the_real_load_generator_records_its_evidence() {
    // The null engine moves no data but counts commands and blocks as if
    // it did, through the same live-stats file: the whole path from
    // `dmalab load --live-stats` to the records runs without a device.
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "sw.toml",
        r#"
[experiment]
repetitions = 1
warmup = "100ms"
cooldown = "0s"

[[aggressor]]
name = "null"
command = "load"
engine = "null"
pattern = "single"
rate_iops = 20000
buffer = "1M"

[sweep]
aggressor = "null"
flag = "workers"
values = [1, 2]

[[victim]]
name = "alone"
command = "idle"
duration = "1.2s"
"#,
    );
    let res = dir.path().join("sw.jsonl");
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = runs(&res);
    assert_eq!(rs.len(), 3);
    assert_eq!(rs[0]["load"], "plain");
    for (r, w) in rs[1..].iter().zip(["1", "2"]) {
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["sweep_value"], w);
        let argv: Vec<&str> = common::aggressor_argv(r);
        assert!(common::has_flag(&argv, "--workers", w), "{argv:?}");
        assert!(
            argv.contains(&"--live-stats") && argv.contains(&"--cpus-allowed"),
            "{argv:?}"
        );
        let ev = &r["aggressor"]["evidence"];
        assert_eq!(ev["running_throughout"], true, "{ev}");
        let cmds = ev["commands"].as_f64().unwrap();
        let secs = ev["window_ns"].as_f64().unwrap() / 1e9;
        // Paced at 20,000 commands/s: within a generous 50% here (a busy
        // shared machine); the point is that the counters are read.
        assert!(cmds / secs > 10_000.0 && cmds / secs < 30_000.0, "{ev}");
        assert_eq!(ev["samples"].as_array().unwrap().len(), 1, "{ev}");
        // The aggressor's own result document was collected after SIGINT.
        assert!(r["aggressor"]["result"].is_object(), "{r}");
    }
    // The report draws the sweep plots.
    let html = dir.path().join("sw.html");
    let out = common::dmalab()
        .arg("report")
        .arg(&res)
        .arg("-o")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(
        text.contains("command rate against --workers"),
        "sweep plots drawn"
    );
}

#[test]
fn redis_recipe_runs_redis_benchmark_against_a_private_server() {
    if !common::need(
        "redis-server and redis-benchmark",
        common::have_program("redis-server") && common::have_program("redis-benchmark"),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "redis.toml",
        "[experiment]\nrepetitions = 1\ncooldown = \"0s\"\n[[victim]]\nname = \"redis\"\ncommand = \"redis\"\nrequests = 2000\nclients = 4\n",
    );
    let res = dir.path().join("redis.jsonl");
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = runs(&res);
    assert_eq!(rs[0]["status"], "completed", "{}", rs[0]);
    assert!(rs[0]["value"].as_f64().unwrap() > 0.0);
    let rps = &rs[0]["victim_result"]["requests_per_s"];
    assert!(
        rps["SET"].as_f64().unwrap() > 0.0 && rps["GET"].as_f64().unwrap() > 0.0,
        "{rps}"
    );
    // Persistence off: no dump file anywhere the server could write.
    assert!(!dir.path().join("dump.rdb").exists());
}

#[test]
fn missing_redis_says_how_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "redis.toml",
        "[experiment]\nrepetitions = 1\n\n[[victim]]\nname = \"redis\"\ncommand = \"redis\"\n",
    );
    let err = common::assert_usage_error_of(
        common::dmalab()
            .args(["run", "-q"])
            .arg(&exp)
            .current_dir(dir.path())
            .env("PATH", "/nonexistent"),
        "redis.toml:4:",
    );
    assert!(
        err.contains("apt-get install redis-server redis-tools"),
        "{err}"
    );
}

/// The thesis' examples parse, and every aggressor's flags (nvme-memload's
/// semantics: `iodepth = 1`, `timeslot = "1s"`) pass `dmalab load`'s own
/// rules: `run --dry-run` checks each one with `load --dry-run`.
#[test]
fn thesis_examples_plan_every_run_through_load() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for (file, runs, loads) in [
        (
            "thesis.toml",
            "180 runs planned; nothing was run (--dry-run)",
            &["plain", "random", "single"][..],
        ),
        (
            "thesis-bandwidth.toml",
            "25 runs planned; nothing was run (--dry-run)",
            &["nvme-memload"][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = common::dmalab()
            .current_dir(dir.path())
            .args(["run", "--dry-run"])
            .arg(examples.join(file))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{file}: {out}{err}");
        assert!(out.contains(runs), "{file}: {out}{err}");
        for load in loads {
            assert!(out.contains(load), "{file}: {load}: {out}");
        }
    }
}
