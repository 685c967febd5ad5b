//! `dmalab fleet`: against a private single-node Slurm cluster started by
//! the test (see slurm_util), and, for what needs no Slurm, through the
//! rendered script and the per-node command lines.

mod common;
mod slurm_util;

use serde_json::Value;
use slurm_util::Cluster;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// One cluster at a time: they share this machine's node name and CPUs.
static CLUSTER: Mutex<()> = Mutex::new(());

/// Two configurations, two repetitions, plain and beside the null engine:
/// eight quick runs, four per configuration.
const NULL_EXPERIMENT: &str = r#"
[experiment]
name = "fleet-null"
repetitions = 2
warmup = "100ms"
cooldown = "0s"

[[aggressor]]
name = "null"
command = "load"
engine = "null"
pattern = "single"
rate_iops = 20000
buffer = "1M"

[[configuration]]
name = "one"
workers = 1

[[configuration]]
name = "two"
workers = 2

[[victim]]
name = "alone"
command = "idle"
duration = "VICTIM"
"#;

/// One plain run per configuration, no aggressor: the fastest experiment.
const TINY: &str = "[experiment]\nname = \"tiny\"\nrepetitions = 1\ncooldown = \"0s\"\n[[configuration]]\nname = \"one\"\n[[configuration]]\nname = \"two\"\n[[victim]]\nname = \"v\"\ncommand = \"idle\"\nduration = \"50ms\"\n";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn out_of(c: &mut assert_cmd::Command) -> (Option<i32>, String, String) {
    let o = c.output().unwrap();
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

#[test]
fn fleet_submits_runs_merges_and_reports_on_a_real_slurm() {
    let _one = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cl) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "null.toml",
        &NULL_EXPERIMENT.replace("VICTIM", "300ms"),
    );
    let res = dir.path().join("res");

    // A node list Slurm rejects: its message, exit 2, nothing left behind.
    let err = common::assert_usage_error_of(
        cl.dmalab()
            .args(["fleet", "submit", "--nodes", "nosuchnode", "--results"])
            .arg(&res)
            .arg(&exp),
        "Slurm rejected node 'nosuchnode'",
    );
    assert!(
        err.contains("Slurm rejected node 'nosuchnode'") && err.contains("Invalid node name"),
        "{err}"
    );
    assert!(
        !res.exists(),
        "a refused submit leaves no results directory"
    );

    // Without --nodes, the partition's nodes (from sinfo).
    let (code, out, err) = out_of(
        cl.dmalab()
            .args([
                "fleet",
                "submit",
                "--dry-run",
                "--partition",
                "debug",
                "--results",
            ])
            .arg(dir.path().join("dry"))
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("  {}: ", cl.node)), "{out}");
    let err = common::assert_usage_error_of(
        cl.dmalab()
            .args(["fleet", "submit", "--partition", "nosuch", "--results"])
            .arg(dir.path().join("none"))
            .arg(&exp),
        "--partition",
    );
    assert!(err.contains("--partition"), "{err}");

    let (code, job, err) = out_of(
        cl.dmalab()
            .args(["fleet", "submit", "--split", "configurations"])
            .args(["--max-running", "1", "--nodes", &cl.node, "--results"])
            .arg(&res)
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}\n{}", cl.logs());
    let job = job.trim().to_string();
    assert!(
        !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()),
        "stdout is the job ID: {job:?}"
    );
    let script = std::fs::read_to_string(res.join("fleet-1.sbatch")).unwrap();
    for l in [
        "#SBATCH --array=0-1%1",
        "#SBATCH --exclusive",
        &format!("#SBATCH --output={}/slurm-%A_%a.out", res.display()),
    ] {
        assert!(script.lines().any(|x| x == l), "{l} not in\n{script}");
    }
    // Accounting is off here: the states come from squeue and scontrol.
    let (code, st, err) = out_of(cl.dmalab().args(["fleet", "status"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(st.contains("squeue and scontrol (no accounting)"), "{st}");

    cl.wait_job(&job, Duration::from_secs(120));
    let (_, st, _) = out_of(cl.dmalab().args(["fleet", "status"]).arg(&res));
    let one = format!("{}.one.jsonl", cl.node);
    for l in [&one, &format!("{}.two.jsonl", cl.node)] {
        let row = st.lines().find(|x| x.starts_with(l.as_str())).unwrap_or("");
        assert!(
            row.contains(&format!("{job}_"))
                && row.contains("COMPLETED")
                && row.contains("4 of 4 complete"),
            "{st}"
        );
    }
    assert!(st.contains("2 of 2 results files complete"), "{st}");
    let task_out = std::fs::read_to_string(res.join(format!("slurm-{job}_0.out"))).unwrap();
    assert!(task_out.contains("dmalab fleet: task 0 on"), "{task_out}");

    let (code, out, err) = out_of(cl.dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("8 of 8 planned runs from 2 file(s)"), "{out}");
    assert!(!err.contains("missing"), "{err}");
    let merged = lines(&res.join("merged.jsonl"));
    let header = &merged[0];
    let hash = header["experiment_hash"].as_str().unwrap();
    let hosts = header["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "one entry per results file");
    for h in hosts {
        assert_eq!(h["name"], cl.node.as_str());
        assert_eq!(h["recorded_runs"], 4);
        assert!(h["host"]["cpus_online"].as_u64().unwrap() >= 1, "{h}");
    }
    assert_eq!(header["planned_runs"], 8);
    let runs = &merged[1..];
    assert_eq!(runs.len(), 8);
    let mut idx: Vec<u64> = runs.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    idx.sort();
    assert_eq!(idx, (0..8).collect::<Vec<u64>>(), "each planned run once");
    for r in runs {
        assert_eq!(r["record"], "run");
        assert_eq!(r["host"], cl.node.as_str(), "{r}");
        assert_eq!(r["experiment_hash"], hash);
        assert_eq!(r["status"], "completed", "{r}");
        assert!(["one", "two"].contains(&r["configuration"].as_str().unwrap()));
        assert!(["plain", "null"].contains(&r["load"].as_str().unwrap()));
        assert!(r["value"].as_f64().unwrap() >= 0.3, "{r}");
        if r["load"] == "null" {
            let ev = &r["aggressor"]["evidence"];
            assert!(ev["commands"].as_f64().unwrap() > 0.0, "{r}");
            let workers = if r["configuration"] == "one" {
                "1"
            } else {
                "2"
            };
            let argv: Vec<&str> = common::aggressor_argv(r);
            assert!(common::has_flag(&argv, "--workers", workers), "{argv:?}");
        }
    }

    // The report groups by host and lists the host facts.
    let html = res.join("merged.html");
    let csv = res.join("cells.csv");
    let (code, _, err) = out_of(
        cl.dmalab()
            .arg("report")
            .arg(res.join("merged.jsonl"))
            .arg("-o")
            .arg(&html)
            .arg("--csv")
            .arg(&csv),
    );
    assert_eq!(code, Some(0), "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Hosts</h2>"), "no host table");
    assert!(
        page.contains(&format!("1 host: {} (2 results files merged", cl.node)),
        "one host, however many files"
    );
    let cells = std::fs::read_to_string(&csv).unwrap();
    for c in ["one", "two"] {
        let g = format!("{} · {c},alone,", cl.node);
        assert_eq!(
            cells.lines().filter(|l| l.starts_with(&g)).count(),
            2,
            "{cells}"
        );
    }

    // Everything is complete: a second submit has nothing to do.
    let (code, out, err) = out_of(
        cl.dmalab()
            .args(["fleet", "submit", "--split", "configurations"])
            .args(["--nodes", &cl.node, "--results"])
            .arg(&res)
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "", "no job ID without a job");
    assert!(
        err.contains("skipped: complete (4 of 4 runs)") && err.contains("nothing to submit"),
        "{err}"
    );
}

#[test]
fn a_cancelled_task_shows_as_missing_and_a_resubmit_runs_only_it() {
    let _one = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cl) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "null.toml",
        &NULL_EXPERIMENT.replace("VICTIM", "1s"),
    );
    let res = dir.path().join("res");
    let submit = || {
        out_of(
            cl.dmalab()
                .args(["fleet", "submit", "--split", "configurations"])
                .args(["--max-running", "1", "--nodes", &cl.node, "--results"])
                .arg(&res)
                .arg(&exp),
        )
    };
    let (code, job, err) = submit();
    assert_eq!(code, Some(0), "{err}\n{}", cl.logs());
    let job = job.trim().to_string();
    // With %1 one task runs for seconds; the other waits: cancel that one.
    let pending = cl
        .command("squeue")
        .args(["-h", "-r", "-t", "PD", "-j", &job, "-o", "%i"])
        .output()
        .unwrap();
    let victim_task = text(&pending.stdout)
        .lines()
        .next()
        .map(str::trim)
        .unwrap_or_else(|| panic!("no pending task in {job}"))
        .to_string();
    let st = cl.command("scancel").arg(&victim_task).status().unwrap();
    assert!(st.success());
    cl.wait_job(&job, Duration::from_secs(120));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("fleet.json")).unwrap()).unwrap();
    let idx: usize = victim_task.rsplit('_').next().unwrap().parse().unwrap();
    let cancelled_file = format!(
        "{}.jsonl",
        m["submissions"][0]["tasks"][idx].as_str().unwrap()
    );

    let (_, st, _) = out_of(cl.dmalab().args(["fleet", "status"]).arg(&res));
    let row = st
        .lines()
        .find(|l| l.starts_with(&cancelled_file))
        .unwrap_or("");
    assert!(
        row.contains(&victim_task) && row.contains("CANCELLED") && row.contains("0 of 4 (no file)"),
        "{st}"
    );
    assert!(st.contains("1 of 2 results files complete"), "{st}");

    let (code, out, err) = out_of(cl.dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("4 of 8 planned runs from 1 file(s)"), "{out}");
    assert!(
        err.contains(&format!(
            "missing: node {} ({cancelled_file}): 0 of 4 runs, task {victim_task} CANCELLED",
            cl.node
        )),
        "{err}"
    );
    assert_eq!(lines(&res.join("merged.jsonl")).len(), 1 + 4);

    // Submitting again runs only the cancelled part.
    let (code, job2, err) = submit();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("skipped: complete (4 of 4 runs)"), "{err}");
    assert!(err.contains(": 1 task(s) on"), "{err}");
    let job2 = job2.trim().to_string();
    assert_ne!(job2, job);
    assert!(std::fs::read_to_string(res.join("fleet-2.sbatch"))
        .unwrap()
        .contains("#SBATCH --array=0%1"));
    cl.wait_job(&job2, Duration::from_secs(120));
    let (code, out, err) = out_of(cl.dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("8 of 8 planned runs from 2 file(s)"), "{out}");
    assert!(!err.contains("missing"), "{err}");
}

#[test]
fn without_sbatch_on_path_submit_says_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "tiny.toml", TINY);
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, _, err) = out_of(
        common::dmalab()
            .env("PATH", &empty)
            .args(["fleet", "submit", "--nodes", "n1", "--results"])
            .arg(dir.path().join("res"))
            .arg(&exp),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("sbatch is not on PATH") && err.contains("apt-get install slurm-client"),
        "{err}"
    );
    assert!(!dir.path().join("res").exists());
}

/// `--dry-run`: the script and the per-node command lines, nothing
/// submitted (no Slurm needed).
fn dry_run(dir: &Path, exp: &Path, nodes: &str, split: &str) -> (PathBuf, Vec<String>) {
    let res = dir.join("res");
    let (code, out, err) = out_of(
        common::dmalab()
            .args([
                "fleet",
                "submit",
                "--dry-run",
                "--split",
                split,
                "--nodes",
                nodes,
            ])
            .arg("--results")
            .arg(&res)
            .arg(exp),
    );
    assert_eq!(code, Some(0), "{err}");
    let cmds: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("  "))
        .filter_map(|l| l.trim().split_once(": ").map(|x| x.1.to_string()))
        .collect();
    (res, cmds)
}

fn sh(line: &str) -> std::process::Output {
    Command::new("bash").arg("-c").arg(line).output().unwrap()
}

#[test]
fn the_task_script_refuses_a_results_directory_that_is_not_shared() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "tiny.toml", TINY);
    let (res, cmds) = dry_run(dir.path(), &exp, "n1", "nodes");
    assert_eq!(cmds.len(), 1, "{cmds:?}");
    let script = res.join("fleet-1.sbatch");
    let task = |node: &str| {
        Command::new("bash")
            .arg(&script)
            .env("SLURM_ARRAY_TASK_ID", "0")
            .env("SLURMD_NODENAME", node)
            .output()
            .unwrap()
    };
    // On a node that sees another directory at that path, the marker
    // differs (or is absent).
    let marker = res.join(".dmalab-fleet-marker");
    let token = std::fs::read_to_string(&marker).unwrap();
    std::fs::write(&marker, "another directory\n").unwrap();
    let o = task("n1");
    // Not `common::assert_usage_output`: this refusal is the batch script's
    // own (`dmalab fleet: error: ...`), written before dmalab starts.
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("the results directory is not shared"),
        "{}",
        text(&o.stderr)
    );
    std::fs::remove_file(&marker).unwrap();
    let o = task("n1");
    assert!(
        text(&o.stderr).contains("not shared"),
        "{}",
        text(&o.stderr)
    );
    std::fs::write(&marker, token).unwrap();
    // A task placed on the wrong node says so.
    let o = task("n2");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("writes the results of node n1 but runs on n2"),
        "{}",
        text(&o.stderr)
    );
    // On its node with the shared directory it runs the experiment.
    let o = task("n1");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(lines(&res.join("n1.jsonl")).len(), 1 + 2);
}

#[test]
fn merge_refuses_another_experiments_results_and_duplicate_runs() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "tiny.toml", TINY);
    let (res, cmds) = dry_run(dir.path(), &exp, "n[1-2]", "configurations");
    assert_eq!(cmds.len(), 4, "{cmds:?}");
    // Without Slurm: each node's command line, run by hand.
    for c in &cmds {
        let o = sh(c);
        assert!(o.status.success(), "{c}: {}", text(&o.stderr));
    }
    let (code, out, err) = out_of(common::dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("4 of 4 planned runs from 4 file(s)"), "{out}");
    let merged = lines(&res.join("merged.jsonl"));
    let hosts: Vec<&str> = merged[1..]
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["n1", "n1", "n2", "n2"]);

    // A file holding runs another file of the same host also holds.
    let all = res.join("n1.all.jsonl");
    let o = sh(&format!(
        "{} run -q {} -o {}",
        common::dmalab_bin().display(),
        res.join("experiment.toml").display(),
        all.display()
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::rename(&all, res.join("n1.one.jsonl")).unwrap();
    let err = common::assert_usage_error_of(
        common::dmalab().args(["fleet", "merge"]).arg(&res),
        "of host n1 is in both n1.one.jsonl and n1.two.jsonl",
    );
    assert!(
        err.contains("of host n1 is in both n1.one.jsonl and n1.two.jsonl"),
        "{err}"
    );

    // Another experiment's results.
    std::fs::remove_file(res.join("n1.one.jsonl")).unwrap();
    let other = write(dir.path(), "other.toml", &TINY.replace("tiny", "other"));
    let o = sh(&format!(
        "{} run -q {} -o {}",
        common::dmalab_bin().display(),
        other.display(),
        res.join("stray.jsonl").display()
    ));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let before = std::fs::read(res.join("merged.jsonl")).unwrap();
    let err = common::assert_usage_error_of(
        common::dmalab().args(["fleet", "merge"]).arg(&res),
        "stray.jsonl holds results of another experiment 'other'",
    );
    assert!(
        err.contains("stray.jsonl holds results of another experiment 'other'"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(res.join("merged.jsonl")).unwrap(),
        before,
        "a refused merge writes nothing"
    );
}

#[test]
fn run_configuration_runs_only_that_configuration_and_refuses_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "tiny.toml", TINY);
    let res = dir.path().join("two.jsonl");
    let err = common::assert_usage_error_of(
        common::dmalab()
            .args(["run", "-q", "--configuration", "three", "-o"])
            .arg(&res)
            .arg(&exp),
        "--configuration:",
    );
    assert!(
        err.contains("--configuration:")
            && err.contains("has no configuration 'three'; it has: one, two"),
        "{err}"
    );
    assert!(!res.exists(), "nothing written for bad input");
    let (code, _, err) = out_of(
        common::dmalab()
            .args(["run", "-q", "--configuration", "two", "-o"])
            .arg(&res)
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}");
    let recs = lines(&res);
    assert_eq!(recs[0]["planned_runs"], 1);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1]["configuration"], "two");
    assert_eq!(
        recs[1]["index"], 1,
        "plan positions stay those of the whole plan"
    );
}

#[test]
fn a_task_that_does_not_see_the_shared_directory_fails_with_the_marker_error() {
    let _one = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(cl) = Cluster::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "null.toml",
        &NULL_EXPERIMENT.replace("VICTIM", "1s"),
    );
    let res = dir.path().join("res");
    let (code, job, err) = out_of(
        cl.dmalab()
            .args(["fleet", "submit", "--split", "configurations"])
            .args(["--max-running", "1", "--nodes", &cl.node, "--results"])
            .arg(&res)
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}\n{}", cl.logs());
    let job = job.trim().to_string();
    // Once the first task has passed its checks and writes results, the
    // directory the second task will see stops being the one submitted
    // to, as on a node where that path is a different file system.
    let started = |f: &str| res.join(f).exists();
    let (a, b) = (
        format!("{}.one.jsonl", cl.node),
        format!("{}.two.jsonl", cl.node),
    );
    let t0 = std::time::Instant::now();
    while !started(&a) && !started(&b) {
        assert!(t0.elapsed() < Duration::from_secs(60), "no task started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let failing = if started(&a) { b } else { a };
    std::fs::write(res.join(".dmalab-fleet-marker"), "elsewhere\n").unwrap();
    cl.wait_job(&job, Duration::from_secs(120));

    let (_, st, _) = out_of(cl.dmalab().args(["fleet", "status"]).arg(&res));
    let row = st.lines().find(|l| l.starts_with(&failing)).unwrap_or("");
    assert!(
        row.contains("FAILED (exit 2:0)") && row.contains("0 of 4 (no file)"),
        "{st}"
    );
    assert!(
        st.contains("last output line of slurm-")
            && st.contains(
                "the results directory is not shared between the submitting host and this node"
            ),
        "{st}"
    );
    let (code, out, err) = out_of(cl.dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("4 of 8 planned runs from 1 file(s)"), "{out}");
    assert!(
        err.contains(&format!("({failing}): 0 of 4 runs, task {job}_")) && err.contains("FAILED"),
        "{err}"
    );
}

#[test]
fn per_node_replicas_merge_as_hosts_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "tiny.toml", TINY);
    let res = dir.path().join("res");
    let (code, out, err) = out_of(
        common::dmalab()
            .args([
                "fleet",
                "submit",
                "--dry-run",
                "--per-node",
                "2",
                "--nodes",
                "n1",
            ])
            .arg("--results")
            .arg(&res)
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}");
    let cmds: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("  n1: "))
        .map(|l| &l[6..])
        .collect();
    assert_eq!(cmds.len(), 2, "{out}");
    assert!(
        cmds[0].ends_with("/n1.r1.jsonl") && cmds[1].ends_with("/n1.r2.jsonl"),
        "{cmds:?}"
    );
    for c in &cmds {
        assert!(sh(c).status.success(), "{c}");
    }
    let (code, _, err) = out_of(common::dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    let merged = lines(&res.join("merged.jsonl"));
    let hosts: Vec<&str> = merged[1..]
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["n1.r1", "n1.r1", "n1.r2", "n1.r2"]);
}

/// Two nodes' results, each run by its command line (no Slurm): the
/// results directory.
fn two_nodes(dir: &Path) -> PathBuf {
    let exp = write(dir, "tiny.toml", TINY);
    let (res, cmds) = dry_run(dir, &exp, "n[1-2]", "nodes");
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    for c in &cmds {
        let o = sh(c);
        assert!(o.status.success(), "{c}: {}", text(&o.stderr));
    }
    res
}

/// Issue 27 item 2: `fleet merge RES -o RES/n1.jsonl` left n1 out of the
/// inputs and replaced it with the merge of the others (exit 0, one node's
/// results gone). An output that is an input, by any name or link, or a
/// new file in RES that the next merge would read, is refused.
#[test]
fn merge_refuses_an_output_that_is_one_of_its_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let res = two_nodes(dir.path());
    let n1 = res.join("n1.jsonl");
    let before = std::fs::read(&n1).unwrap();
    let merge_to = |out: &Path| {
        let mut c = common::dmalab();
        c.args(["fleet", "merge"]).arg(&res).arg("-o").arg(out);
        c
    };
    let err = common::assert_usage_error_of(&mut merge_to(&n1), "-o");
    assert!(err.contains("one of the results files merged"), "{err}");
    // The same file by another path, by a symbolic link and by a hard link
    // from outside the directory.
    let other = dir.path().join("res/../res/./n1.jsonl");
    common::assert_usage_error_of(&mut merge_to(&other), "-o");
    let sym = dir.path().join("sym.jsonl");
    std::os::unix::fs::symlink(&n1, &sym).unwrap();
    common::assert_usage_error_of(&mut merge_to(&sym), "-o");
    let hard = dir.path().join("hard.jsonl");
    std::fs::hard_link(res.join("n2.jsonl"), &hard).unwrap();
    common::assert_usage_error_of(&mut merge_to(&hard), "-o");
    // A new file in the directory that the next merge would read as a
    // node's results.
    let new = res.join("all.jsonl");
    let err = common::assert_usage_error_of(&mut merge_to(&new), "-o");
    assert!(err.contains("write the merge outside"), "{err}");
    assert!(!new.exists());
    assert_eq!(std::fs::read(&n1).unwrap(), before, "n1's results kept");
    assert!(!res.join("merged.jsonl").exists(), "nothing written");

    // Outside the directory, or the default name inside it: merged.
    let out = dir.path().join("out.jsonl");
    let (code, printed, err) = out_of(&mut merge_to(&out));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        printed.contains("4 of 4 planned runs from 2 file(s)"),
        "{printed}"
    );
    let (code, printed, err) = out_of(&mut merge_to(&res.join("merged.jsonl")));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        printed.contains("4 of 4 planned runs from 2 file(s)"),
        "{printed}"
    );
    // Merging again over the earlier merge reads it as no node's results.
    let (code, printed, err) = out_of(common::dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        printed.contains("4 of 4 planned runs from 2 file(s)"),
        "{printed}"
    );
}

/// Issue 27 item 15: a node's file whose runs appear twice (copied onto
/// itself) stopped the merge ("run 0 ... is in both n1.jsonl and
/// n1.jsonl"); each run is now merged once, with one warning.
#[test]
fn merge_takes_a_run_recorded_twice_in_one_file_once_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let res = two_nodes(dir.path());
    let n1 = res.join("n1.jsonl");
    let t = std::fs::read_to_string(&n1).unwrap();
    std::fs::write(&n1, format!("{t}{t}")).unwrap();
    let (code, printed, err) = out_of(common::dmalab().args(["fleet", "merge"]).arg(&res));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        printed.contains("4 of 4 planned runs from 2 file(s)"),
        "{printed}"
    );
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("2 run record(s) repeat a run"),
        "{err}"
    );
    let merged = lines(&res.join("merged.jsonl"));
    assert_eq!(merged.len(), 1 + 4);
    assert_eq!(merged[0]["hosts"][0]["recorded_runs"], 2);
}

/// Issue 27 item 4: `fleet submit` pasted the experiment's name (and
/// --partition, --dmalab) raw into comments and `#SBATCH` lines of the
/// batch script, so `name = "x\ntouch /tmp/PWNED #"` ran a command on every
/// node. A value with a line break is refused before anything is written.
#[test]
fn submit_refuses_values_that_would_break_out_of_the_scripts_comments() {
    let dir = tempfile::tempdir().unwrap();
    let bad = TINY.replace("name = \"tiny\"", "name = \"x\\ntouch PWNED #\"");
    let exp = write(dir.path(), "bad.toml", &bad);
    let res = dir.path().join("res");
    let submit = |exp: &Path, extra: &[&str]| {
        let mut c = common::dmalab();
        c.current_dir(dir.path())
            .args(["fleet", "submit", "--dry-run"])
            .args(extra)
            .arg("--results")
            .arg(&res)
            .arg(exp);
        c
    };
    let err = common::assert_usage_error_of(&mut submit(&exp, &["--nodes=n1"]), "experiment.name");
    assert!(err.contains("control character"), "{err}");
    let good = write(dir.path(), "tiny.toml", TINY);
    for (opt, value) in [
        ("--partition", "debug\ntouch PWNED"),
        ("--dmalab", "/usr/bin/dmalab\ntouch PWNED\n"),
        ("--sbatch-arg", "--comment=a\ntouch PWNED"),
        ("--nodes", "n1\ntouch PWNED"),
    ] {
        let nodes: &[&str] = if opt == "--nodes" {
            &[]
        } else {
            &["--nodes=n1"]
        };
        let mut c = submit(&good, nodes);
        let err = common::assert_usage_error_of(c.arg(format!("{opt}={value}")), opt);
        assert!(err.contains(opt), "{err}");
    }
    assert!(!res.exists(), "nothing written for bad input");
    assert!(!dir.path().join("PWNED").exists());
}

/// The values the script may carry reach it quoted: shell characters in
/// the experiment's name, the partition, an sbatch option and the dmalab
/// path run nothing, whether bash reads the script or sbatch its
/// directives, and the task runs exactly the unit's command.
#[test]
fn the_script_quotes_every_value_and_runs_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let exp = write(
        d,
        "q.toml",
        &TINY.replace(
            "name = \"tiny\"",
            "name = \"x'$(touch PWNED1)`touch PWNED2` #\"",
        ),
    );
    // A fake dmalab that records its arguments, at a path full of shell
    // characters, and fake Slurm commands that say if anything called them.
    let bin = d.join("bin dir").join("it's $(touch PWNED3)");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("dmalab");
    let called = d.join("called");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{}'\n",
            called.display()
        ),
    )
    .unwrap();
    let fakes = d.join("fakes");
    std::fs::create_dir(&fakes).unwrap();
    for prog in ["srun", "sbatch", "scontrol"] {
        std::fs::write(fakes.join(prog), "#!/bin/sh\ntouch \"$0.CALLED\"\n").unwrap();
    }
    let sh_exec = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    sh_exec(&fake);
    for prog in ["srun", "sbatch", "scontrol"] {
        sh_exec(&fakes.join(prog));
    }
    let res = d.join("res");
    let (code, _, err) = out_of(
        common::dmalab()
            .current_dir(d)
            .args(["fleet", "submit", "--dry-run", "--nodes", "n1"])
            .arg("--partition=p'$(touch PWNED4)")
            .arg("--sbatch-arg=--comment=a b'$(touch PWNED5)")
            .arg("--dmalab")
            .arg(&fake)
            .arg("--results")
            .arg(&res)
            .arg(&exp),
    );
    assert_eq!(code, Some(0), "{err}");
    let script = res.join("fleet-1.sbatch");
    let o = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "bash -n: {}", text(&o.stderr));
    // Each #SBATCH line's words, as a shell (and sbatch, which reads the
    // same quotes) sees them.
    let t = std::fs::read_to_string(&script).unwrap();
    let mut words = Vec::new();
    for l in t.lines().filter_map(|l| l.strip_prefix("#SBATCH ")) {
        let o = Command::new("bash")
            .current_dir(d)
            .arg("-c")
            .arg(format!("printf '%s\\n' {l}"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{l}: {}", text(&o.stderr));
        words.extend(text(&o.stdout).lines().map(str::to_string));
    }
    for w in [
        "--partition=p'$(touch PWNED4)",
        "--comment=a b'$(touch PWNED5)",
    ] {
        assert!(
            words.iter().any(|x| x == w),
            "no directive {w:?} in {words:?}"
        );
    }
    // The task, as Slurm would start it on n1.
    let path = format!(
        "{}:{}",
        fakes.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .arg(&script)
        .current_dir(d)
        .env("PATH", &path)
        .env("SLURM_ARRAY_TASK_ID", "0")
        .env("SLURMD_NODENAME", "n1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let args = std::fs::read_to_string(&called).unwrap();
    let res_abs = res.canonicalize().unwrap();
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [
            "run".to_string(),
            res_abs.join("experiment.toml").display().to_string(),
            "--results".into(),
            res_abs.join("n1.jsonl").display().to_string(),
        ]
    );
    for n in 1..=5 {
        assert!(!d.join(format!("PWNED{n}")).exists(), "PWNED{n} was made");
    }
    for prog in ["srun", "sbatch", "scontrol"] {
        assert!(
            !fakes.join(format!("{prog}.CALLED")).exists(),
            "{prog} was run"
        );
    }
}

/// Issue 27 item 9: `fleet submit --per-node 4294967295` aborted making
/// four billion units.
#[test]
fn submit_bounds_the_tasks_per_node_and_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(dir.path(), "tiny.toml", TINY);
    let res = dir.path().join("res");
    for (per_node, nodes, opt) in [
        ("4294967295", "n1", "--per-node"),
        ("1001", "n1", "--per-node"),
        ("1000", "n[1-200]", "--per-node"),
        ("1", "n[0-99999][0-99999]", "--nodes"),
    ] {
        let err = common::assert_usage_error_of(
            common::dmalab()
                .args(["fleet", "submit", "--dry-run", "--per-node", per_node])
                .args(["--nodes", nodes, "--results"])
                .arg(&res)
                .arg(&exp),
            opt,
        );
        assert!(err.contains("100000") || err.contains("1 to 1000"), "{err}");
    }
    assert!(!res.exists());
}
