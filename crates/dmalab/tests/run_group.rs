//! Aggressor groups in `dmalab run` through the binary: two loads started
//! together, each pinned and paced on its own, each one's work recorded in
//! the victim's window with their sum; the file's refusals (unknown,
//! duplicate and nested members, shared CPUs, an SQPOLL poller on a
//! victim's CPU); and the worked example.

use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn runs(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "run")
        .collect()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// An io_uring load on a scratch file on CPU 0 (2,000 commands/s) and a
/// null load on CPU 1 (5,000 commands/s), each alone and as group `a+b`,
/// beside an idle victim.
fn two_loads(dir: &Path, group: &str) -> String {
    format!(
        r#"
[experiment]
repetitions = 1
warmup = "200ms"
cooldown = "0s"

[[aggressor]]
name = "a"
target = "{}"
size = "16M"
pattern = "single"
rate_iops = 2000
cpus_allowed = "0"

[[aggressor]]
name = "b"
engine = "null"
pattern = "single"
rate_iops = 5000
cpus_allowed = "1"

[[aggressor]]
name = "a+b"
{group}

[[victim]]
name = "idle"
command = "idle"
duration = "1.5s"
"#,
        dir.join("scratch-a").display()
    )
}

#[test]
fn a_group_records_each_members_work_in_the_victims_window_and_their_sum() {
    if !common::need(
        "two CPUs (one per member)",
        dmalab_core::cpus::allowed_cpus().len() >= 2,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "g.toml",
        &two_loads(dir.path(), "members = [\"a\", \"b\"]"),
    );
    let res = dir.path().join("g.jsonl");
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = runs(&res);
    let loads: Vec<&str> = rs.iter().map(|r| r["load"].as_str().unwrap()).collect();
    assert_eq!(loads, ["plain", "a", "b", "a+b"]);
    for r in &rs {
        assert_eq!(r["status"], "completed", "{r}");
    }
    let g = &rs[3];
    let members = g["aggressor"]["members"].as_array().unwrap();
    let names: Vec<&str> = members
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let wall = u(g, "victim_wall_ns") as f64;
    for (m, (cpu, rate)) in members.iter().zip([("0", 2000.0), ("1", 5000.0)]) {
        let argv: Vec<&str> = m["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        // Each member with its own CPU and rate, and its own live stats.
        assert!(common::has_flag(&argv, "--cpus-allowed", cpu), "{argv:?}");
        assert!(
            common::has_flag(&argv, "--rate-iops", &format!("{rate}")),
            "{argv:?}"
        );
        assert!(argv.contains(&"--live-stats"), "{argv:?}");
        let ev = &m["evidence"];
        assert_eq!(ev["running_throughout"], true, "{m}");
        // Counted between the victim's start and end: the window is the
        // victim's (snapshots taken right after its start and end).
        let w = u(ev, "window_ns") as f64;
        assert!(
            (w - wall).abs() < 0.1 * wall,
            "window {w} ns, victim {wall} ns: {m}"
        );
        // Paced on its own: within a generous half of its rate on a busy
        // shared machine; the two rates are 2.5x apart, so a member that
        // took the other's rate (or none) fails.
        let cps = ev["cmd_per_s"].as_f64().unwrap();
        assert!(cps > 0.5 * rate && cps < 1.5 * rate, "{rate}: {m}");
        assert!(m["result"].is_object(), "its result document: {m}");
    }
    // The group's evidence is its members' sum.
    let sum = &g["aggressor"]["evidence"];
    for key in ["data_bytes", "commands", "blocks"] {
        let total: u64 = members.iter().map(|m| u(&m["evidence"], key)).sum();
        assert_eq!(u(sum, key), total, "{key}: {g}");
        assert!(total > 0, "{key}: {g}");
    }
    assert_eq!(sum["running_throughout"], true);
    // The members alone ran pinned where their cpus_allowed says.
    assert!(common::has_flag(
        &common::aggressor_argv(&rs[1]),
        "--cpus-allowed",
        "0"
    ));
    // The table shows each member in the group beside itself alone.
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("configuration  victim  group"))
        .collect();
    assert_eq!(table.len(), 5, "{stdout}");
    assert!(
        table[1].contains("a+b") && table[1].contains(" a "),
        "{stdout}"
    );
    assert!(table[3].contains("sum"), "{stdout}");
    // And so does the report.
    let html = dir.path().join("g.html");
    common::dmalab()
        .arg("report")
        .arg(&res)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("<h2>Aggressor groups</h2>"), "section drawn");
}

/// Issue 32: a group's control cycle is its members' twins started
/// together, each paced at the command rate its member reached in the
/// group's run of the same repetition (or, when the control runs before
/// the load, of the latest earlier one); the group's slowdown is then
/// attributed as a single aggressor's is.
#[test]
fn a_groups_control_runs_each_members_twin_paced_at_its_rate_in_the_group() {
    if !common::need(
        "two CPUs (one per member)",
        dmalab_core::cpus::allowed_cpus().len() >= 2,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = two_loads(dir.path(), "members = [\"a\", \"b\"]\ncontrol = \"auto\"")
        .replace("repetitions = 1", "repetitions = 2")
        .replace("duration = \"1.5s\"", "duration = \"1s\"");
    let exp = write(dir.path(), "g.toml", &text);
    let res = dir.path().join("g.jsonl");
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = runs(&res);
    let loads: Vec<(u64, &str)> = rs
        .iter()
        .map(|r| (u(r, "repetition"), r["load"].as_str().unwrap()))
        .collect();
    assert_eq!(
        loads,
        [
            (1, "plain"),
            (1, "a"),
            (1, "b"),
            (1, "a+b"),
            (1, "a+b/control"),
            (2, "plain"),
            (2, "a+b/control"),
            (2, "a"),
            (2, "b"),
            (2, "a+b"),
        ],
        "controls after the loads in repetition 1, before them in 2"
    );
    for r in &rs {
        assert_eq!(r["status"], "completed", "{r}");
    }
    // Repetition 1's group run paces both repetitions' controls (the
    // second runs before its own load).
    let group1 = &rs[3]["aggressor"]["members"];
    for ctl in [&rs[4], &rs[6]] {
        let c = &ctl["control"];
        assert_eq!(c["of"], "a+b", "{c}");
        assert_eq!(c["kind"], "group", "{c}");
        assert_eq!(u(c, "paced_by_repetition"), 1, "{c}");
        let stood = c["members"].as_array().unwrap();
        let ran = ctl["aggressor"]["members"].as_array().unwrap();
        assert_eq!(stood.len(), 2, "{c}");
        assert_eq!(ran.len(), 2, "{ctl}");
        for (k, (name, cpu)) in [("a", "0"), ("b", "1")].into_iter().enumerate() {
            let (s, m) = (&stood[k], &ran[k]);
            assert_eq!(s["of"], name, "{c}");
            assert_eq!(s["kind"], "twin", "{c}");
            // Paced at the rate this member reached in the group's run.
            let reached = group1[k]["evidence"]["cmd_per_s"].as_f64().unwrap();
            assert_eq!(s["target_cmd_per_s"].as_f64(), Some(reached), "{c}");
            let rate = u(s, "rate_iops");
            assert_eq!(rate, reached.round() as u64, "{c}");
            assert_eq!(m["name"], name, "{m}");
            let argv: Vec<&str> = m["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert!(common::has_flag(&argv, "--engine", "null"), "{argv:?}");
            assert!(
                common::has_flag(&argv, "--rate-iops", &rate.to_string()),
                "{argv:?}"
            );
            assert!(common::has_flag(&argv, "--cpus-allowed", cpu), "{argv:?}");
            // And it ran at about that rate in the victim's window (the
            // members' rates are 2.5x apart: a twin paced at the other's,
            // or not at all, fails).
            let cps = m["evidence"]["cmd_per_s"].as_f64().unwrap();
            assert!(
                cps > 0.5 * rate as f64 && cps < 1.5 * rate as f64,
                "{rate}: {m}"
            );
        }
    }
    // The group's slowdown is attributed as one aggressor's: its row in
    // the attribution table, against its control.
    let attrib: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("configuration  victim  load  change vs plain"))
        .take_while(|l| !l.starts_with("control order"))
        .collect();
    assert!(attrib[0].contains("DMA share"), "{stdout}");
    assert!(
        attrib.iter().any(|l| l.contains(" a+b ")),
        "the group's attribution line: {stdout}"
    );
    let res_doc = dmalab_run::record::read(&res).unwrap();
    let cells = dmalab_run::analysis::cells(&res_doc, 5.0);
    let cell = cells.iter().find(|c| c.load == "a+b").unwrap();
    let a = cell.attribution.as_ref().expect("the group is attributed");
    assert_eq!(a.control_load, "a+b/control");
    assert_eq!(a.control_n, 2);
    // Each member's twin beside the member in the group, in the groups
    // table.
    let beside: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("a+b/control") && l.contains("in a+b "))
        .collect();
    assert_eq!(beside.len(), 3, "members a, b and the sum: {stdout}");
    // And the report draws the attribution of the group.
    let html = dir.path().join("g.html");
    common::dmalab()
        .arg("report")
        .arg(&res)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(
        text.contains("<h2>Attribution: DMA or the aggressor's CPU cost</h2>"),
        "attribution drawn"
    );
    assert!(text.contains("a+b/control"), "the control's cells");
}

/// A group's control needs a stand-in for every member: a member whose
/// engine has no control twin, and names no control, is refused with the
/// line of the group's `control`; the experiment-wide `control = "auto"`
/// skips such a group with a warning.
#[test]
fn a_group_member_without_a_control_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = two_loads(dir.path(), "members = [\"a\", \"b\"]\ncontrol = \"auto\"").replace(
        "name = \"b\"\nengine = \"null\"",
        "name = \"b\"\nengine = \"rdma\"",
    );
    let exp = write(dir.path(), "g.toml", &text);
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .current_dir(dir.path()),
        "g.toml:25:",
    );
    assert!(
        err.contains("aggressor 'a+b': control = \"auto\": member 'b': the rdma engine has no faithful control"),
        "{err}"
    );
    assert!(err.contains("give member 'b' control = \"NAME\""), "{err}");
    // A named control on a group is refused: its control is its members'.
    let exp = write(
        dir.path(),
        "g.toml",
        &two_loads(dir.path(), "members = [\"a\", \"b\"]\ncontrol = \"a\""),
    );
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .current_dir(dir.path()),
        "g.toml:25:",
    );
    assert!(
        err.contains("a group's control cycle is its members' controls"),
        "{err}"
    );
}

#[test]
fn bad_groups_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let on0 = two_loads(dir.path(), "members = [\"a\", \"b\"]")
        .replace("cpus_allowed = \"1\"", "cpus_allowed = \"0\"");
    for (text, at, want) in [
        (
            two_loads(dir.path(), "members = [\"a\", \"c\"]"),
            "g.toml:24:",
            "aggressor 'a+b': member 'c': no aggressor has that name",
        ),
        (
            two_loads(dir.path(), "members = [\"a\", \"b\", \"a\"]"),
            "g.toml:24:",
            "aggressor 'a+b': member 'a' is listed twice",
        ),
        (
            two_loads(dir.path(), "members = [\"a\", \"b\"]\n\n[[aggressor]]\nname = \"all\"\nmembers = [\"a+b\", \"b\"]"),
            "g.toml:28:",
            "aggressor 'all': member 'a+b' is itself a group",
        ),
        (
            on0.clone(),
            "g.toml:20:",
            "members 'a' and 'b' both run on CPU 0 (its cpus_allowed); give each member its own cpus_allowed",
        ),
        (
            on0.replace("[[victim]]\nname = \"idle\"\ncommand = \"idle\"\nduration = \"1.5s\"", "[cpus]\nvictims = \"0\"\n[[victim]]\nname = \"lat\"\ncommand = \"probe latency\""),
            "g.toml:13:",
            "member 'a' runs on CPU 0 (its cpus_allowed), a CPU of victim 'lat' (0)",
        ),
    ] {
        let exp = write(dir.path(), "g.toml", &text);
        let err = common::assert_usage_error_of(
            common::dmalab().arg("run").arg(&exp).current_dir(dir.path()),
            at,
        );
        assert!(err.contains(want), "{text}\n{err}");
        assert!(!dir.path().join("g.results.jsonl").exists(), "nothing ran");
    }
}

/// Issue 35: an SQPOLL poller pinned to a victim's CPU would spin beside
/// the victim; the file is refused naming the key, as is a member's poller
/// on another member's CPU.
#[test]
fn sqpoll_cpu_on_a_victims_cpu_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "p.toml",
        "[cpus]\nvictims = \"0\"\n\n[[aggressor]]\nname = \"r\"\nsqpoll_cpu = 0\n\n[[victim]]\nname = \"lat\"\ncommand = \"probe latency\"\n",
    );
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .current_dir(dir.path()),
        "p.toml:6:",
    );
    assert!(
        err.contains(
            "aggressor 'r' in configuration 'default': sqpoll_cpu = 0 is a CPU of victim 'lat' (0)"
        ),
        "{err}"
    );
    if !common::need(
        "two CPUs (one per member)",
        dmalab_core::cpus::allowed_cpus().len() >= 2,
    ) {
        return;
    }
    let text = two_loads(dir.path(), "members = [\"a\", \"b\"]").replace(
        "cpus_allowed = \"1\"",
        "cpus_allowed = \"1\"\nsqpoll_cpu = 0",
    );
    let exp = write(dir.path(), "g.toml", &text);
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .current_dir(dir.path()),
        "g.toml:21:",
    );
    assert!(
        err.contains("member 'b': sqpoll_cpu = 0 is a CPU of member 'a'"),
        "{err}"
    );
}

#[test]
fn the_two_devices_example_plans_each_device_alone_and_both_together() {
    if !common::need(
        "two CPUs (one per member)",
        dmalab_core::cpus::allowed_cpus().len() >= 2,
    ) {
        return;
    }
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-devices.toml");
    let dir = tempfile::tempdir().unwrap();
    let o = common::dmalab()
        .current_dir(dir.path())
        .args(["run", "--dry-run"])
        .arg(&example)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let loads: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("rep 1 "))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(loads, ["plain", "ssd", "nic", "nic+ssd"], "{out}");
    assert!(
        out.contains("12 runs planned; nothing was run (--dry-run)"),
        "{out}"
    );
}

/// Regression (issue 35): an aggressor whose SQPOLL poller is on a CPU of
/// its own (`sqpoll_cpu` outside `cpus_allowed`, away from the victims) was
/// started pinned to its workers' CPUs only, and `dmalab load` refused
/// the poller's CPU as "not one this process may use".
#[test]
fn an_sqpoll_poller_beside_its_workers_cpus_starts() {
    if !common::need(
        "two CPUs (workers and poller)",
        dmalab_core::cpus::allowed_cpus().len() >= 2,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = write(
        dir.path(),
        "sq.toml",
        &format!(
            "[experiment]\nrepetitions = 1\nwarmup = \"100ms\"\ncooldown = \"0s\"\n\n[[aggressor]]\nname = \"r\"\ntarget = \"{}\"\nsize = \"16M\"\npattern = \"single\"\nrate_iops = 1000\ncpus_allowed = \"0\"\nsqpoll_cpu = 1\n\n[[victim]]\nname = \"idle\"\ncommand = \"idle\"\nduration = \"1s\"\n",
            dir.path().join("scratch").display()
        ),
    );
    let res = dir.path().join("sq.jsonl");
    let out = common::dmalab()
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rs = runs(&res);
    assert_eq!(rs[1]["load"], "r");
    assert_eq!(rs[1]["status"], "completed", "{}", rs[1]);
    let argv = common::aggressor_argv(&rs[1]);
    assert!(common::has_flag(&argv, "--sqpoll-cpu", "1"), "{argv:?}");
    assert!(common::has_flag(&argv, "--cpus-allowed", "0"), "{argv:?}");
}

/// A control named by an aggressor (`control = "NAME"`) that runs on a
/// victim's CPU where the aggressor does not would slow the victim by
/// sharing its CPU, so the control cycle would overstate the aggressor's
/// CPU-side interference and understate the DMA's: refused before
/// anything runs, naming the control's line. The same control on the
/// aggressor's own CPU is accepted.
#[test]
fn a_named_control_on_a_victims_cpu_the_aggressor_leaves_alone_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = |ctl_cpu: &str| {
        format!(
            r#"
[cpus]
victims = "1"

[[aggressor]]
name = "a"
engine = "null"
pattern = "single"
rate_iops = 2000
cpus_allowed = "0"
control = "b"

[[aggressor]]
name = "b"
engine = "null"
pattern = "single"
rate_iops = 2000
cpus_allowed = "{ctl_cpu}"

[[victim]]
name = "lat"
command = "probe latency"
"#
        )
    };
    let exp = write(dir.path(), "c.toml", &file("1"));
    let err = common::assert_usage_error_of(
        common::dmalab()
            .arg("run")
            .arg(&exp)
            .arg("--dry-run")
            .current_dir(dir.path()),
        "c.toml:18:",
    );
    assert!(
        err.contains("aggressor 'a' in configuration 'default': its control 'b' runs on CPU 1, a CPU of victim 'lat' (1), where 'a' does not run (0)"),
        "{err}"
    );
    let exp = write(dir.path(), "c.toml", &file("0"));
    common::dmalab()
        .arg("run")
        .arg(&exp)
        .arg("--dry-run")
        .current_dir(dir.path())
        .assert()
        .success();
}
