//! `--counters`, `dmalab stat` and `dmalab info counters` through the real
//! binary: the perf_event_open path with software events on this host,
//! every absence reason, fake PMU and resctrl trees under the test's own
//! root, the resctrl group's removal after `kill -9`, and `dmalab run`
//! recording counters that `dmalab report` shows.

mod common;

use common::{dmalab, dmalab_bin, have_program, is_root, need, need_root};
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&fs::read(p).unwrap()).unwrap()
}

fn event<'a>(c: &'a Value, id: &str) -> Option<&'a Value> {
    c["events"].as_array()?.iter().find(|e| e["id"] == id)
}

fn unavailable<'a>(c: &'a Value, id: &str) -> Option<&'a Value> {
    c["unavailable"].as_array()?.iter().find(|e| e["id"] == id)
}

fn stat_page_faults(dir: &Path, bs: &str) -> f64 {
    let out = dir.join(format!("stat-{bs}.json"));
    dmalab()
        .args(["stat", "--counters", "page-faults", "-q", "--output"])
        .arg(&out)
        .args([
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "count=1",
            "status=none",
        ])
        .arg(format!("bs={bs}"))
        .assert()
        .success();
    let d = read_json(&out);
    event(&d["result"]["counters"], "page-faults").unwrap()["value"]
        .as_f64()
        .unwrap()
}

/// dd's buffer of `bs` bytes is faulted in page by page as read() fills
/// it: 8 MiB more buffer is 2048 more page faults of the command (THP is
/// not used for it here: `madvise` mode, and dd does not ask).
#[test]
fn stat_counts_the_page_faults_of_the_pages_a_command_touches() {
    // Faults taken in kernel mode (read() filling the buffer) are only
    // counted for root; paranoid 2 limits others to user mode.
    if !need_root() || !need("dd", have_program("dd")) {
        return;
    }
    let thp = fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !need(
        "transparent huge pages not in [always] mode (the buffer would fault 2 MiB at a time)",
        !thp.contains("[always]"),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = stat_page_faults(dir.path(), "4M");
    let large = stat_page_faults(dir.path(), "12M");
    let extra = large - small;
    assert!(
        (2048.0 - 16.0..=2048.0 + 64.0).contains(&extra),
        "8 MiB more buffer gave {extra} more page faults ({small} -> {large}); expected 2048 (-16/+64)"
    );
}

#[test]
fn stat_passes_the_exit_code_and_writes_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    dmalab()
        .args(["stat", "--counters", "software,cycles", "--output"])
        .arg(&out)
        .args(["--", "sh", "-c", "echo hello; exit 3"])
        .assert()
        .code(3)
        .stdout("hello\n")
        .stderr(predicates::str::contains("task-clock"));
    let d = read_json(&out);
    assert_eq!(d["command"], "stat");
    assert_eq!(d["result"]["exit_code"], 3);
    let c = &d["result"]["counters"];
    assert_eq!(c["recipes"][0], "software");
    assert!(event(c, "task-clock").unwrap()["value"].as_f64().unwrap() > 0.0);
    // A hardware event is counted or said to be unavailable, never zero.
    match (event(c, "cycles"), unavailable(c, "cycles")) {
        (Some(e), None) => assert!(e["value"].as_f64().unwrap() > 0.0),
        (None, Some(u)) => assert!(!u["message"].as_str().unwrap().is_empty()),
        other => panic!("cycles neither counted nor explained: {other:?}"),
    }
}

#[test]
fn a_command_that_cannot_run_is_bad_input() {
    common::assert_usage_error(
        ["stat", "--", "/nonexistent/dmalab-no-such-command"],
        "COMMAND: cannot run",
    );
    common::assert_usage_error(
        ["stat", "--counters", "bogus", "--", "true"],
        "--counters: 'bogus' is neither a recipe nor an event",
    );
    dmalab()
        .args([
            "load",
            "--engine",
            "null",
            "--counters",
            "uncore_cha/event=0x35/",
        ])
        .env("DMALAB_PMU_ROOT", "/nonexistent")
        .args(["--runtime", "100ms", "-q"])
        .assert()
        .success()
        .stdout(predicates::str::contains(
            "not counted: uncore_cha/event=0x35/: no such PMU uncore_cha",
        ));
}

/// Paranoid level too high for a system-wide count, and the privilege
/// reason when the level would allow it, seen by an unprivileged user.
#[test]
fn unprivileged_absences_name_the_paranoid_level_and_privilege() {
    if !need_root() || !need("setpriv", have_program("setpriv")) {
        return;
    }
    let level: i32 = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if !need(
        "perf_event_paranoid of 1 or more (below, everyone may count system-wide)",
        level >= 1,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("paranoid");
    fs::write(&fake, "-1\n").unwrap();
    let bin = dmalab_bin();
    let run = |env: Option<&Path>| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args([
                "stat",
                "--counters",
                "page-faults",
                "--cpus",
                "0",
                "--",
                "true",
            ]);
        if let Some(p) = env {
            c.env("DMALAB_PERF_PARANOID", p);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = run(None);
    assert!(
        err.contains(&format!(
            "perf_event_paranoid is {level}, this needs 0 or less"
        )),
        "{err}"
    );
    // The kernel still refuses (its level is the real one): with a level
    // that would allow it, the reason is the missing privilege.
    let err = run(Some(&fake));
    assert!(
        err.contains("not permitted") && err.contains("CAP_PERFMON"),
        "{err}"
    );
}

fn write_fake_pmus(root: &Path) {
    let cpu = root.join("cpu");
    fs::create_dir_all(cpu.join("format")).unwrap();
    fs::create_dir_all(cpu.join("events")).unwrap();
    // A type no kernel has: opening it fails as an unknown PMU type would.
    fs::write(cpu.join("type"), "4000\n").unwrap();
    fs::write(cpu.join("format/event"), "config:0-7\n").unwrap();
    fs::write(cpu.join("format/umask"), "config:8-15\n").unwrap();
    fs::write(cpu.join("events/cache-misses"), "event=0x2e,umask=0x41\n").unwrap();
    let iio = root.join("uncore_iio_0");
    fs::create_dir_all(iio.join("format")).unwrap();
    fs::write(iio.join("type"), "4001\n").unwrap();
    fs::write(iio.join("cpumask"), "0\n").unwrap();
    fs::write(iio.join("format/event"), "config:0-7\n").unwrap();
    fs::write(iio.join("die0"), "0000:00\n").unwrap();
}

#[test]
fn info_counters_reads_a_fake_pmu_tree_and_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let pmu = dir.path().join("pmu");
    write_fake_pmus(&pmu);
    let cpuinfo = dir.path().join("cpuinfo");
    fs::write(
        &cpuinfo,
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Gold 6130 CPU\n",
    )
    .unwrap();
    let out = dir.path().join("info.json");
    dmalab()
        .args(["info", "counters", "--output"])
        .arg(&out)
        .env("DMALAB_PMU_ROOT", &pmu)
        .env("DMALAB_CPUINFO", &cpuinfo)
        .env("DMALAB_RESCTRL_ROOT", dir.path().join("no-resctrl"))
        .assert()
        .success()
        .stdout(predicates::str::contains("die0: root bus 0000:00"))
        .stdout(predicates::str::contains(
            "GenuineIntel family 0x6 model 0x55",
        ));
    let d = read_json(&out);
    let r = &d["result"];
    assert_eq!(r["pmus"].as_array().unwrap().len(), 2);
    let recipe = |n: &str| {
        r["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .unwrap()
            .clone()
    };
    let skx = recipe("skx-pcie");
    assert_eq!(skx["for_this_cpu"], true);
    // No uncore_cha in this tree: the recipe cannot count, and says why.
    assert_eq!(skx["events_ready"], 0);
    assert!(skx["reasons"][0]
        .as_str()
        .unwrap()
        .contains("no such PMU uncore_cha"));
    // Issue 31 item 4: the IO-hit umask no table lists is marked derived.
    let derived: Vec<&str> = skx["derived"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(derived.len(), 3, "{derived:?}");
    assert!(derived[0].starts_with("pcirdcur_hit: umask 0x14 (IO hit) is derived"));
    assert_eq!(recipe("icx-pcie")["derived"].as_array().unwrap().len(), 0);
    assert!(recipe("software")["events_ready"].as_u64().unwrap() >= 1);
    assert!(recipe("mbm")["reasons"][0]
        .as_str()
        .unwrap()
        .contains("resctrl"));
    // The fake core PMU's type is unknown to the kernel: refused by it.
    let core = recipe("core");
    assert_eq!(core["events_ready"], 0, "{core}");

    // An event this CPU does not list in cpu/events.
    let s = dir.path().join("s.json");
    dmalab()
        .args([
            "stat",
            "--counters",
            "cpu/no-such-event/,cpu/cache-misses/",
            "-q",
            "--output",
        ])
        .arg(&s)
        .args(["--", "true"])
        .env("DMALAB_PMU_ROOT", &pmu)
        .assert()
        .success();
    let c = &read_json(&s)["result"]["counters"];
    let u = unavailable(c, "cpu/no-such-event/").unwrap();
    assert_eq!(u["reason"]["reason"], "event_unknown");
    assert!(u["message"]
        .as_str()
        .unwrap()
        .contains("unknown on this CPU"));
    let u = unavailable(c, "cpu/cache-misses/").unwrap();
    assert_eq!(u["reason"]["reason"], "unsupported", "{u}");
}

#[test]
fn this_vm_says_what_it_cannot_count() {
    let has_cpu_pmu = Path::new("/sys/bus/event_source/devices/cpu").exists();
    let out = dmalab().args(["info", "counters"]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("software      ready"), "{text}");
    if !has_cpu_pmu {
        assert!(
            text.contains("hardware events: cannot be counted: no such PMU cpu"),
            "{text}"
        );
    }
}

#[test]
fn load_counters_follow_the_load_samples() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("l.json");
    dmalab()
        .args([
            "load",
            "--engine",
            "null",
            "--pattern",
            "noop",
            "--counters",
            "software",
            "--runtime",
            "2500ms",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicates::str::contains("counters over"));
    let d = read_json(&out);
    let r = &d["result"];
    let c = &r["counters"];
    let series = c["series"].as_array().unwrap();
    let samples = r["samples"].as_array().unwrap();
    assert_eq!(
        series.len(),
        samples.len(),
        "one counter interval per load sample"
    );
    for (a, b) in series.iter().zip(samples) {
        assert_eq!(a["t_s"], b["t_s"]);
    }
    let total = event(c, "context-switches").unwrap()["value"]
        .as_f64()
        .unwrap();
    let summed: f64 = series
        .iter()
        .map(|p| p["events"]["context-switches"].as_f64().unwrap_or(0.0))
        .sum();
    assert!((total - summed).abs() < 1e-6, "{total} vs {summed}");
    // The null engine moves nothing: no expected-vs-counted check.
    assert!(c.get("expected_vs_counted").is_none());
}

fn wait_for(p: &Path, secs: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        if p.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Held by the tests that make resctrl groups, so one test's `stat
/// --counters mbm`, which first undoes dead owners' ledgers, does not undo
/// the group the other killed on purpose while it is being looked at.
static RESCTRL_LEDGERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fake_resctrl(root: &Path) {
    fs::create_dir_all(root.join("info/L3_MON")).unwrap();
    fs::write(
        root.join("info/L3_MON/mon_features"),
        "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("mon_groups")).unwrap();
}

/// A fake resctrl whose counters a test thread advances (the kernel's part):
/// the group is made for the command, read and removed afterwards.
#[test]
fn stat_mbm_reads_a_resctrl_group_and_removes_it() {
    // The ledger lives in /run/dmalab.
    if !need_root() {
        return;
    }
    let _turn = RESCTRL_LEDGERS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("resctrl");
    fake_resctrl(&root);
    let out = dir.path().join("m.json");
    let mut child = Command::new(dmalab_bin())
        .args(["stat", "--counters", "mbm", "-q", "--output"])
        .arg(&out)
        .args(["--", "sleep", "1.5"])
        .env("DMALAB_RESCTRL_ROOT", &root)
        .spawn()
        .unwrap();
    let group = root.join(format!("mon_groups/dmalab-{}", child.id()));
    assert!(wait_for(&group, 10), "no group made");
    // The kernel's side: two L3 domains whose byte counters grow.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kernel = {
        let (group, done) = (group.clone(), done.clone());
        std::thread::spawn(move || {
            let mut total = 1_000_000u64;
            for (d, f) in [("mon_L3_00", 3), ("mon_L3_01", 1)] {
                let p = group.join("mon_data").join(d);
                fs::create_dir_all(&p).unwrap();
                fs::write(p.join("mbm_total_bytes"), format!("{}\n", total * f)).unwrap();
                fs::write(p.join("mbm_local_bytes"), format!("{total}\n")).unwrap();
            }
            // Only existing files are updated, so removing the group is
            // not raced by files created again.
            let update = |p: &Path, v: u64| {
                let _ = fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .open(p)
                    .and_then(|mut f| {
                        std::io::Write::write_all(&mut f, format!("{v}\n").as_bytes())
                    });
            };
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                total += 4096;
                for (d, f) in [("mon_L3_00", 3), ("mon_L3_01", 1)] {
                    let p = group.join("mon_data").join(d);
                    update(&p.join("mbm_total_bytes"), total * f);
                    update(&p.join("mbm_local_bytes"), total);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let st = child.wait().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    kernel.join().unwrap();
    assert!(st.success());
    assert!(!group.exists(), "group left behind");
    let c = &read_json(&out)["result"]["counters"];
    let m = c["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "mbm_total_bytes")
        .unwrap();
    let v = m["value"].as_f64().unwrap();
    // It grew while the command ran.
    assert!(v > 0.0, "{m}");
}

/// After `kill -9` the group stays; `dmalab cleanup` removes it.
#[test]
fn cleanup_removes_the_resctrl_group_of_a_killed_stat() {
    if !need_root() {
        return;
    }
    let _turn = RESCTRL_LEDGERS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("resctrl");
    fake_resctrl(&root);
    let mut child = Command::new(dmalab_bin())
        .args(["stat", "--counters", "mbm", "-q", "--", "sleep", "30"])
        .env("DMALAB_RESCTRL_ROOT", &root)
        .spawn()
        .unwrap();
    let group = root.join(format!("mon_groups/dmalab-{}", child.id()));
    assert!(wait_for(&group.join("tasks"), 10), "no group made");
    let sleeper: i32 = fs::read_to_string(group.join("tasks"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    common::signal(sleeper as u32, 9);
    assert!(group.exists());
    let ledger = Path::new("/run/dmalab").join(format!("proc-{}.json", child.id()));
    assert!(ledger.exists());
    // Every load, probe and run start undoes dead owners' ledgers too (the
    // same `cleanup_dead`), and other tests of this binary start them in
    // parallel: one of them may have removed the group first. Then
    // `dmalab cleanup` has nothing left, and the group and ledger must
    // already be gone; otherwise cleanup itself must say it removed them.
    let out = dmalab().arg("cleanup").assert().success();
    let said = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let removed_here = said.contains(&format!("removed resctrl group {}", group.display()));
    assert!(
        removed_here || said.contains("nothing to clean up"),
        "cleanup said: {said}"
    );
    assert!(!group.exists(), "the group outlived cleanup: {said}");
    assert!(!ledger.exists(), "the ledger outlived cleanup: {said}");
}

#[test]
fn run_records_counters_per_victim_run_and_report_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("c.toml");
    fs::write(
        &exp,
        r#"[experiment]
name = "ctr"
repetitions = 1
warmup = "200ms"
cooldown = "0s"
timeout = "30s"

[[aggressor]]
name = "noop"
command = "load"
engine = "null"
pattern = "noop"
counters = "software"

[[victim]]
name = "latency"
command = "probe latency"
size = "4M"
runtime = "300ms"
counters = "software,cycles"

[[victim]]
name = "sh"
command = "exec"
run = ["sh", "-c", "echo figure 42"]
regex = "figure ([0-9]+)"
counters = "software"
"#,
    )
    .unwrap();
    let results = dir.path().join("c.results.jsonl");
    dmalab()
        .args(["run"])
        .arg(&exp)
        .arg("--results")
        .arg(&results)
        .assert()
        .success();
    let text = fs::read_to_string(&results).unwrap();
    let runs: Vec<Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 4);
    for r in &runs {
        let c = &r["victim_result"]["counters"];
        if r["victim"] == "sh" {
            // Run under dmalab stat: its stdout still gives the figure.
            assert_eq!(r["value"], 42.0, "{r}");
            assert!(c["scope"].as_str().unwrap().starts_with("task "), "{r}");
            assert!(event(c, "task-clock").is_some(), "{r}");
            continue;
        }
        assert!(event(c, "task-clock").is_some(), "{r}");
        assert!(event(c, "cycles").is_some() || unavailable(c, "cycles").is_some());
        if r["load"] == "noop" {
            let a = &r["aggressor"]["result"]["counters"];
            assert!(event(a, "context-switches").is_some(), "{r}");
        }
    }
    // A counters request stat refuses is refused before anything runs.
    let bad = dir.path().join("bad.toml");
    fs::write(
        &bad,
        fs::read_to_string(&exp).unwrap().replace(
            "regex = \"figure ([0-9]+)\"\ncounters = \"software\"",
            "regex = \"figure ([0-9]+)\"\ncounters = \"bogus\"",
        ),
    )
    .unwrap();
    common::assert_usage_error_of(
        dmalab()
            .arg("run")
            .arg(&bad)
            .arg("--results")
            .arg(dir.path().join("bad.jsonl")),
        "victim 'sh': counters: --counters: 'bogus'",
    );
    assert!(!dir.path().join("bad.jsonl").exists());

    let html = dir.path().join("c.html");
    dmalab()
        .arg("report")
        .arg(&results)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
    let h = fs::read_to_string(&html).unwrap();
    assert!(h.contains("<h2>Counters</h2>"));
    assert!(h.contains("cpus_utilized"));
    let _ = is_root();
}

// ---- issue 31: per-socket sums.

/// Counters opened on CPUs are summed per socket as well as in total: with
/// a cpuinfo that puts CPU 0 on socket 0 and CPU 1 on socket 1,
/// `stat --cpus 0,1` gives each software event's count per socket, the
/// two adding up to the total, and the text shows the socket lines.
#[test]
fn stat_sums_cpu_counters_per_socket() {
    if !need_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cpuinfo = dir.path().join("cpuinfo");
    fs::write(
        &cpuinfo,
        "processor\t: 0\nvendor_id\t: GenuineIntel\nphysical id\t: 0\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nphysical id\t: 1\n\n",
    )
    .unwrap();
    let out = dir.path().join("s.json");
    let o = dmalab()
        .env("DMALAB_CPUINFO", &cpuinfo)
        .args([
            "stat",
            "--cpus",
            "0,1",
            "--counters",
            "context-switches,page-faults",
        ])
        .arg("--output")
        .arg(&out)
        .args(["--", "sh", "-c", "sleep 0.2 & sleep 0.2; wait"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = read_json(&out);
    let c = &d["result"]["counters"];
    for id in ["context-switches", "page-faults"] {
        let e = event(c, id).unwrap();
        let ps = e["per_socket"].as_array().unwrap();
        let sockets: Vec<u64> = ps.iter().map(|s| s["socket"].as_u64().unwrap()).collect();
        assert_eq!(sockets, [0, 1], "{e}");
        let sum: f64 = ps.iter().map(|s| s["value"].as_f64().unwrap()).sum();
        let total = e["value"].as_f64().unwrap();
        assert!((sum - total).abs() <= 1e-6 * total.max(1.0), "{e}");
        assert!(ps.iter().all(|s| s["value"].as_f64().unwrap() > 0.0), "{e}");
    }
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(text.contains("context-switches (socket 1)"), "{text}");
}

/// A recipe for another CPU model is not an unknown event: the line says
/// which CPUs the recipe is for, what this host is, and which recipes to
/// count with instead (here a Zen 2 host, from a cpuinfo of the test's
/// own); the run itself goes on with what it can count, exit 0 as before.
#[test]
fn a_recipe_for_another_cpu_says_what_this_host_is_and_what_to_use() {
    let dir = tempfile::tempdir().unwrap();
    let cpuinfo = dir.path().join("cpuinfo");
    fs::write(
        &cpuinfo,
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\nmodel name\t: AMD EPYC 7702 64-Core Processor\n\n",
    )
    .unwrap();
    let out = dir.path().join("s.json");
    let o = dmalab()
        .env("DMALAB_CPUINFO", &cpuinfo)
        .args(["stat", "--counters", "skx-pcie,page-faults", "--output"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("not counted: pcirdcur_hit:"))
        .unwrap_or_else(|| panic!("no line for pcirdcur_hit: {err}"));
    assert!(!line.contains("unknown"), "not an unknown event: {line}");
    for part in [
        "recipe skx-pcie is for Intel Skylake-SP",
        "this host is AMD EPYC 7702 64-Core Processor (AuthenticAMD family 0x17 model 0x31)",
        "count with a recipe for this CPU (",
        "amd-df-dram",
        "dmalab info counters",
    ] {
        assert!(line.contains(part), "{part:?} missing: {line}");
    }
    let d = read_json(&out);
    let u = unavailable(&d["result"]["counters"], "pcirdcur_hit").unwrap();
    assert_eq!(u["reason"]["reason"], "wrong_cpu", "{u}");
    let here: Vec<&str> = u["reason"]["recipes_here"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        here.contains(&"amd-df-dram") && !here.contains(&"skx-pcie"),
        "{here:?}"
    );
}

// ---- stat --cpus: the clocks counted on CPUs.

/// Regression: under `--cpus`, every event after the first of a PMU
/// joined its group opened disabled, and a CPU-wide group member enabled
/// after its leader was never scheduled: cpu-clock behind
/// context-switches read 0 ns with 0 ns running. Each CPU's cpu-clock is
/// that CPU's whole counting time, as `perf stat -a -C 0,1 -e cpu-clock`
/// gives it, so two CPUs give about twice the time counted, however busy
/// they were.
#[test]
fn stat_cpus_counts_cpu_clock_behind_another_event() {
    if !need_root()
        || !need(
            "two CPUs",
            std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2,
        )
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    dmalab()
        .args([
            "stat",
            "--cpus",
            "0,1",
            "--counters",
            "context-switches,page-faults,cpu-clock",
            "-q",
            "--output",
        ])
        .arg(&out)
        .args(["--", "sleep", "0.2"])
        .assert()
        .success();
    let c = &read_json(&out)["result"]["counters"];
    for id in ["context-switches", "page-faults", "cpu-clock"] {
        let e = event(c, id).unwrap_or_else(|| panic!("{id} not counted: {c}"));
        assert!(e["running_ns"].as_u64().unwrap() > 0, "{id} never ran: {e}");
    }
    let counted = c["counted_ns"].as_f64().unwrap();
    let clock = event(c, "cpu-clock").unwrap()["value"].as_f64().unwrap();
    let cpus = clock / counted;
    assert!(
        (1.5..=2.5).contains(&cpus),
        "cpu-clock on CPUs 0,1 is {clock} ns over {counted} ns counted: {cpus} CPUs' time, expected 2"
    );
}

/// task-clock is the CPU time of the tasks counted; a CPU-wide counter
/// has none, and the kernel would give each CPU's whole time instead. So
/// under `--cpus` a task-clock asked for by name is refused (exit 2, what
/// to count instead), and the `software` recipe (the default) counts
/// cpu-clock in its place, without its cpus_utilized, which would only
/// count the CPUs given.
#[test]
fn stat_cpus_refuses_task_clock_and_counts_the_recipe_with_cpu_clock() {
    let err = common::assert_usage_error(
        [
            "stat",
            "--cpus",
            "0",
            "--counters",
            "context-switches,task-clock",
            "--",
            "true",
        ],
        "--counters",
    );
    assert!(
        err.contains("task-clock") && err.contains("count cpu-clock instead"),
        "{err}"
    );
    if !need_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    dmalab()
        .args(["stat", "--cpus", "0", "-q", "--output"])
        .arg(&out)
        .args(["--", "sleep", "0.1"])
        .assert()
        .success();
    let c = &read_json(&out)["result"]["counters"];
    assert_eq!(c["recipes"][0], "software", "{c}");
    let ids: Vec<&str> = c["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "cpu-clock",
            "page-faults",
            "context-switches",
            "cpu-migrations"
        ],
        "{c}"
    );
    assert!(event(c, "cpu-clock").unwrap()["value"].as_f64().unwrap() > 0.0);
    let metrics: Vec<&str> = c["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(!metrics.contains(&"cpus_utilized"), "{metrics:?}");
    assert!(metrics.contains(&"context_switches_per_s"), "{metrics:?}");
}

// ---- issue 31: exact mode in `dmalab run`, one event group per repetition.

/// `counters_mode = "exact"` with two event groups over two repetitions:
/// repetition 1 counts `{page-faults,task-clock}` and repetition 2
/// `context-switches`, on the load aggressor and under the exec victim's
/// stat alike; every value says it is exact and which group of how many
/// it belongs to, and the report shows the repetitions behind each figure.
/// One repetition for two groups is refused before anything runs.
#[test]
fn run_exact_mode_rotates_event_groups_across_repetitions() {
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("x.toml");
    let text = r#"[experiment]
name = "exact"
repetitions = 2
warmup = "200ms"
cooldown = "0s"
timeout = "30s"
counters_mode = "exact"

[[aggressor]]
name = "noop"
command = "load"
engine = "null"
pattern = "noop"
counters = "{page-faults,task-clock},context-switches"

[[victim]]
name = "sh"
command = "exec"
run = ["sh", "-c", "echo figure 42"]
regex = "figure ([0-9]+)"
counters = "{page-faults,task-clock},context-switches"
"#;
    fs::write(&exp, text).unwrap();
    let results = dir.path().join("x.results.jsonl");
    dmalab()
        .arg("run")
        .arg(&exp)
        .arg("--results")
        .arg(&results)
        .assert()
        .success();
    let runs: Vec<Value> = fs::read_to_string(&results)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 4, "plain and noop, two repetitions");
    let ids = |c: &Value| -> Vec<String> {
        let mut v: Vec<String> = c["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let mut seen = 0;
    for r in &runs {
        assert_eq!(r["status"], "completed", "{r}");
        let rep = r["repetition"].as_u64().unwrap();
        let want: &[&str] = if rep == 1 {
            &["page-faults", "task-clock"]
        } else {
            &["context-switches"]
        };
        let mut sides = vec![&r["victim_result"]["counters"]];
        if r["load"] == "noop" {
            sides.push(&r["aggressor"]["result"]["counters"]);
        }
        for c in sides {
            assert_eq!(ids(c), want, "repetition {rep}: {c}");
            assert_eq!(
                c["exact_group"],
                serde_json::json!({"index": rep - 1, "of": 2, "run": rep - 1}),
                "{c}"
            );
            assert!(
                c["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|e| e["exact"] == true),
                "{c}"
            );
            seen += 1;
        }
        if r["load"] == "noop" {
            let argv: Vec<&str> = common::aggressor_argv(r);
            assert!(
                common::has_flag(&argv, "--counters-run", &(rep - 1).to_string()),
                "{argv:?}"
            );
        }
    }
    assert_eq!(seen, 6);
    let html = dir.path().join("x.html");
    dmalab()
        .arg("report")
        .arg(&results)
        .arg("-o")
        .arg(&html)
        .assert()
        .success();
    let h = fs::read_to_string(&html).unwrap();
    assert!(h.contains("exact (repetitions 2)"), "context-switches row");
    assert!(h.contains("exact (repetitions 1)"), "page-faults row");

    // One repetition cannot count two groups one at a time.
    let one = dir.path().join("one.toml");
    fs::write(&one, text.replace("repetitions = 2", "repetitions = 1")).unwrap();
    let e = common::assert_usage_error_of(
        dmalab()
            .arg("run")
            .arg(&one)
            .arg("--results")
            .arg(dir.path().join("one.jsonl")),
        "experiment.counters_mode: exact with 1 repetitions",
    );
    assert!(e.contains("2 event groups"), "{e}");
    assert!(!dir.path().join("one.jsonl").exists());
    let bad = dir.path().join("bad.toml");
    fs::write(&bad, text.replace("\"exact\"", "\"sometimes\"")).unwrap();
    common::assert_usage_error_of(
        dmalab()
            .arg("run")
            .arg(&bad)
            .arg("--results")
            .arg(dir.path().join("bad.jsonl")),
        "experiment.counters_mode: 'sometimes'",
    );
}

/// The report (which builds on any OS and does not link the Linux-only
/// counter crate) flags multiplexed runs at the same fraction the counter
/// crate's text does.
#[test]
fn report_and_counters_agree_on_the_multiplexing_threshold() {
    assert_eq!(
        dmalab_run::report::counters::MULTIPLEXED_BELOW,
        dmalab_counters::session::MULTIPLEXED_BELOW
    );
}

/// Processes still alive (not zombies) among `pids`, from /proc.
fn alive(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|p| {
            fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                let after = st.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
                !after.trim_start().starts_with('Z')
            })
        })
        .collect()
}

/// Issue 27 item 10: `dmalab stat -- CMD` waited for the command to end
/// by itself after SIGTERM/SIGINT (forever, for one that never ends), and
/// a grandchild kept running afterwards.
fn stat_passes_a_signal_on(sig: i32, want: i32) {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let out = dir.path().join("s.json");
    // A shell that starts a grandchild and waits for it, and ignores the
    // signal itself, as a command that outlives its own children would be
    // (so only the grandchild's end ends it).
    let script = format!(
        "sleep 1000 & trap '' {sig}; echo $$ $! > {p}.tmp; mv {p}.tmp {p}; wait; wait",
        p = pids.display()
    );
    let mut stat = Command::new(dmalab_bin())
        .args(["stat", "--counters", "software", "--output"])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !pids.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ids: Vec<i32> = fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(stat.id() as i32, sig) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = stat.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let left = alive(&ids);
    for p in &left {
        // SAFETY: kill(2) on processes this test started.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    let Some(status) = status else {
        let _ = stat.kill();
        panic!("dmalab stat did not stop on signal {sig}; still running: {left:?}");
    };
    let mut err = String::new();
    use std::io::Read as _;
    stat.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(128 + want), "{err}");
    assert!(
        left.is_empty(),
        "the command's processes outlived it: {left:?}"
    );
    assert!(
        err.contains("task-clock"),
        "it printed what it counted: {err}"
    );
    let d = read_json(&out);
    assert_eq!(d["command"], "stat");
}

#[test]
fn stat_passes_sigterm_to_the_command_and_its_children_and_exits_143() {
    stat_passes_a_signal_on(libc::SIGTERM, libc::SIGTERM);
}

#[test]
fn stat_passes_sighup_to_the_command_and_its_children_and_exits_129() {
    stat_passes_a_signal_on(libc::SIGHUP, libc::SIGHUP);
}

/// The command's own process group must not let it outlive a `kill -9` of
/// dmalab's group (what `dmalab run` does to a victim that overstays):
/// the command and its children go with dmalab.
#[test]
fn stat_killed_with_its_group_takes_the_commands_group_along() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!(
        "sleep 1000 & echo $$ $! > {p}.tmp; mv {p}.tmp {p}; wait",
        p = pids.display()
    );
    let mut stat = Command::new(dmalab_bin())
        .args([
            "stat",
            "--counters",
            "software",
            "-q",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .process_group(0)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !pids.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ids: Vec<i32> = fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // SAFETY: kill(2) on the process group of our own child.
    unsafe { libc::kill(-(stat.id() as i32), libc::SIGKILL) };
    let _ = stat.wait();
    let t0 = Instant::now();
    let mut left = alive(&ids);
    while !left.is_empty() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
        left = alive(&ids);
    }
    for p in &left {
        // SAFETY: kill(2) on processes this test started.
        unsafe { libc::kill(*p, libc::SIGKILL) };
    }
    assert!(
        left.is_empty(),
        "the command outlived dmalab stat: {left:?}"
    );
}

/// A new pseudo-terminal: its master and the path of its slave.
fn pty() -> (std::fs::File, std::ffi::CString) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt returns a new descriptor owned by the File below;
    // grantpt/unlockpt/ptsname_r act on it; buf has room for the name.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, buf.as_mut_ptr(), buf.len()), 0);
        let name = std::ffi::CStr::from_ptr(buf.as_ptr()).to_owned();
        (std::fs::File::from_raw_fd(m), name)
    }
}

/// In its own process group the command is a background job of the
/// terminal: one that reads it was stopped (SIGTTIN) and stat waited for
/// ever. stat lends it the terminal's foreground.
#[test]
fn stat_lends_the_terminal_to_a_command_that_reads_it() {
    use std::io::{Read as _, Write as _};
    use std::os::unix::process::CommandExt;
    let (mut master, slave) = pty();
    let mut cmd = Command::new(dmalab_bin());
    cmd.args(["stat", "--counters", "software", "-q", "--"])
        .args(["sh", "-c", "read x; echo got:$x"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec only async-signal-safe calls: dmalab
    // becomes a session leader whose controlling terminal is the pty, on
    // stdin, stdout and stderr.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::open(slave.as_ptr(), libc::O_RDWR);
            if fd < 0 || libc::ioctl(fd, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for to in 0..3 {
                libc::dup2(fd, to);
            }
            if fd > 2 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let mut stat = cmd.spawn().unwrap();
    master.write_all(b"hi\n").unwrap();
    // The master is read on a thread: what the pty shows, until "got:hi".
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reader = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut b = [0u8; 256];
        while let Ok(n) = reader.read(&mut b) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&b[..n]);
            if String::from_utf8_lossy(&seen).contains("got:hi") {
                let _ = tx.send(());
                break;
            }
        }
    });
    let answered = rx.recv_timeout(Duration::from_secs(60)).is_ok();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = stat.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.is_none() {
        // SAFETY: kill(2) on our own child's session (its group).
        unsafe { libc::kill(-(stat.id() as i32), libc::SIGKILL) };
        let _ = stat.wait();
    }
    assert!(answered, "the command never read the terminal");
    assert_eq!(status.and_then(|s| s.code()), Some(0));
}

// ---- issue 31 item 5: perf stat's -p, -I, -x, -r and a command without `--`.

const DD_ZERO: [&str; 5] = [
    "dd",
    "if=/dev/zero",
    "of=/dev/null",
    "count=1",
    "status=none",
];

/// `dmalab stat sh -c 'exit 3'` used to be refused (the command had to
/// follow `--`); `-c` is the command's option, not stat's.
#[test]
fn stat_takes_a_command_without_double_dash() {
    dmalab()
        .args(["stat", "-q", "sh", "-c", "echo hi; exit 3"])
        .assert()
        .code(3)
        .stdout("hi\n");
    common::assert_usage_error(["stat", "-q"], "COMMAND: missing");
    common::assert_usage_error(["stat", "-p", "1", "true"], "--pid:");
    common::assert_usage_error(["stat", "-p", "x"], "--pid: 'x' is not a process id");
    common::assert_usage_error(["stat", "-r", "2", "-p", "1"], "--repeat:");
    common::assert_usage_error(["stat", "-I", "1", "true"], "--interval:");
    common::assert_usage_error(["stat", "-p", "2147483647"], "--pid: no process 2147483647");
}

/// `dmalab stat --cpus 0,1 -x, CMD` ran `-x,` as the command: clap took a
/// short option whose glued value is not made of stat's own short flags
/// for the command's first word. perf's glued forms (`-x,`, `-I50`,
/// `-r2`) now mean what `-x ,` means, and an unknown option before the
/// command is refused instead of run.
#[test]
fn stat_takes_perfs_glued_short_options() {
    let dir = tempfile::tempdir().unwrap();
    let forms: [&[&str]; 3] = [&["-x,"], &["-x", ","], &["-x;"]];
    for (i, sep) in forms.into_iter().enumerate() {
        let out = dir.path().join(format!("x{i}.json"));
        let a = dmalab()
            .arg("stat")
            .args(sep)
            .args(["--counters", "page-faults", "-r2", "--output"])
            .arg(&out)
            .arg("true")
            .assert()
            .success();
        let sep = sep.concat();
        let sep = &sep[sep.len() - 1..];
        let rows = csv_rows(&a.get_output().stderr, sep);
        let pf = rows
            .iter()
            .find(|r| r.get(2).map(String::as_str) == Some("page-faults"))
            .unwrap_or_else(|| panic!("no page-faults row split by {sep:?} in {rows:?}"));
        assert!(pf[0].parse::<f64>().is_ok(), "{pf:?}");
        let d = read_json(&out);
        assert_eq!(d["config"]["command"][0], "true", "{d}");
        assert_eq!(d["config"]["repeat"], 2, "{d}");
    }
    let o = dmalab().args(["stat", "-z", "true"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("unexpected argument '-z'"), "{e}");
    if !need_root() {
        return;
    }
    let out = dir.path().join("cpus.json");
    let a = dmalab()
        .args(["stat", "--cpus", "0", "-x,", "--output"])
        .arg(&out)
        .arg("true")
        .assert()
        .success();
    let rows = csv_rows(&a.get_output().stderr, ",");
    assert!(
        rows.iter()
            .any(|r| r.get(2).map(String::as_str) == Some("cpu-clock")),
        "{rows:?}"
    );
    assert_eq!(
        read_json(&out)["config"]["command"],
        serde_json::json!(["true"])
    );
}

/// The CSV rows of `-x SEP`, split.
fn csv_rows(stderr: &[u8], sep: &str) -> Vec<Vec<String>> {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(|l| l.split(sep).map(str::to_string).collect())
        .collect()
}

/// `-x ;`: perf's field order (value, unit, event, run time, percent
/// counted, metric value, metric unit), the value the one in the result.
#[test]
fn stat_x_prints_perfs_csv() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let a = dmalab()
        .args(["stat", "-x", ";", "--counters", "page-faults,task-clock"])
        .arg("--output")
        .arg(&out)
        .args(DD_ZERO)
        .arg("bs=4M")
        .assert()
        .success();
    let rows = csv_rows(&a.get_output().stderr, ";");
    let d = read_json(&out);
    let c = &d["result"]["counters"];
    let pf = rows
        .iter()
        .find(|r| r.get(2).map(String::as_str) == Some("page-faults"))
        .unwrap_or_else(|| panic!("no page-faults row in {rows:?}"));
    assert_eq!(pf.len(), 7, "{pf:?}");
    assert_eq!(pf[1], "");
    let v: f64 = pf[0].parse().unwrap();
    assert_eq!(
        v,
        event(c, "page-faults").unwrap()["value"].as_f64().unwrap()
    );
    // A 4 MiB buffer is 1024 pages faulted in.
    assert!(v >= 1024.0, "{v}");
    assert!(pf[3].parse::<u64>().unwrap() > 0, "run time, ns: {pf:?}");
    assert_eq!(pf[4], "100.00");
    let tc = rows
        .iter()
        .find(|r| r.get(2).map(String::as_str) == Some("task-clock"))
        .unwrap();
    assert_eq!(tc[1], "ns");
}

/// `-I MS`: lines of interval deltas while the command runs, which add
/// up to the total; text, CSV and JSON lines.
#[test]
fn stat_interval_deltas_add_up_to_the_total() {
    if !need_root() || !need("dd", have_program("dd")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Two 8 MiB buffers with a pause between them: more than one interval.
    let script = "dd if=/dev/zero of=/dev/null bs=8M count=1 status=none; sleep 0.3; \
                  dd if=/dev/zero of=/dev/null bs=8M count=1 status=none";
    for form in ["text", "csv", "json"] {
        let out = dir.path().join(format!("{form}.json"));
        let mut cmd = dmalab();
        cmd.args(["stat", "-I", "50", "--counters", "page-faults", "--output"])
            .arg(&out);
        match form {
            "csv" => cmd.args(["-x", ","]),
            "json" => cmd.arg("-j"),
            _ => &mut cmd,
        };
        let a = cmd.args(["sh", "-c", script]).assert().success();
        let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
        let deltas: Vec<f64> = match form {
            "text" => err
                .lines()
                .filter(|l| {
                    l.trim_end().ends_with(" page-faults")
                        && l.trim_start().starts_with(|c: char| c.is_ascii_digit())
                })
                .filter(|l| l.split_whitespace().count() == 3)
                .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
                .collect(),
            "csv" => csv_rows(err.as_bytes(), ",")
                .into_iter()
                .filter(|r| r.len() == 8 && r[3] == "page-faults")
                .map(|r| r[1].parse().unwrap())
                .collect(),
            _ => err
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|j| j["events"]["page-faults"].as_f64())
                .collect(),
        };
        assert!(deltas.len() >= 2, "{form}: one interval or none: {err}");
        let total = event(&read_json(&out)["result"]["counters"], "page-faults").unwrap()["value"]
            .as_f64()
            .unwrap();
        assert_eq!(deltas.iter().sum::<f64>(), total, "{form}: {err}");
        assert!(total >= 2.0 * 2048.0, "{form}: two 8 MiB buffers: {total}");
    }
}

/// `-r 3`: three runs, each count's mean and perf's relative spread of
/// the mean, in the text, the CSV's variance field and the result.
#[test]
fn stat_repeat_reports_the_mean_and_spread() {
    if !need_root() || !need("dd", have_program("dd")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let a = dmalab()
        .args([
            "stat",
            "-r",
            "3",
            "-x",
            ",",
            "--counters",
            "page-faults",
            "--output",
        ])
        .arg(&out)
        .args(DD_ZERO)
        .arg("bs=8M")
        .assert()
        .success();
    let d = read_json(&out);
    let r = &d["result"]["repeat"];
    assert_eq!(r["runs"], 3);
    let pf = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "page-faults")
        .unwrap();
    let vals: Vec<f64> = pf["spread"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(vals.len(), 3);
    // The same work each run: 2048 pages of buffer, a few more of dd.
    for v in &vals {
        assert!((2048.0..2048.0 + 512.0).contains(v), "{vals:?}");
    }
    let mean = vals.iter().sum::<f64>() / 3.0;
    assert!((pf["spread"]["mean"].as_f64().unwrap() - mean).abs() < 1e-9);
    let sd = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let rel = 100.0 * sd / 3f64.sqrt() / mean;
    assert!((pf["spread"]["rel_spread_pct"].as_f64().unwrap() - rel).abs() < 1e-9);
    let rows = csv_rows(&a.get_output().stderr, ",");
    let row = rows
        .iter()
        .find(|r| r.get(2).map(String::as_str) == Some("page-faults"))
        .unwrap_or_else(|| panic!("no page-faults row: {rows:?}"));
    // value, unit, event, run ns, percent counted, then -r's variance.
    assert_eq!(row[5], format!("{rel:.2}%"), "{rows:?}");
}

/// A process that waits for a line on stdin, then runs `work`.
/// A shell that runs `work` once a line arrives on its stdin; returned
/// once it is blocked reading that line, so an attach made afterwards
/// counts none of the shell's own start-up and all of `work`.
fn waiting(work: &str) -> std::process::Child {
    let child = Command::new("sh")
        .args(["-c", &format!("read x; {work}")])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_blocked_in_read(child.id());
    child
}

/// Waits until `pid` sleeps in read(2) on fd 0 (`/proc/PID/syscall`
/// starts with the syscall number 0 and the fd 0x0). Before this, an
/// attach raced the shell's start-up: on a loaded host the attach could
/// come while the shell was still loading, and its start-up page faults
/// were counted in one attach and not in the other (seen once: 4046 more
/// faults instead of at least 4064).
fn wait_blocked_in_read(pid: u32) {
    let path = format!("/proc/{pid}/syscall");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Ok(text) = fs::read_to_string(&path) else {
            // No syscall file (a kernel without it): nothing to wait on.
            return;
        };
        if text.starts_with("0 0x0 ") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} never blocked reading its stdin ({path}: {text})"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Starts `dmalab stat -p PIDS` and returns once it says it counts.
fn attach_stat(pids: &str, out: &Path) -> std::process::Child {
    use std::io::BufRead as _;
    let mut stat = Command::new(dmalab_bin())
        .args(["stat", "--counters", "page-faults", "-p", pids, "--output"])
        .arg(out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = std::io::BufReader::new(stat.stderr.take().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.contains("counting processes"), "{line}");
    // Keep reading its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
    stat
}

fn attach_page_faults(dir: &Path, bs: &str) -> f64 {
    use std::io::Write as _;
    let work = format!("dd if=/dev/zero of=/dev/null bs={bs} count=1 status=none");
    let mut a = waiting(&work);
    let mut b = waiting(&work);
    let out = dir.join(format!("attach-{bs}.json"));
    let mut stat = attach_stat(&format!("{},{}", a.id(), b.id()), &out);
    for p in [&mut a, &mut b] {
        p.stdin.take().unwrap().write_all(b"go\n").unwrap();
        assert!(p.wait().unwrap().success());
    }
    assert!(stat.wait().unwrap().success(), "stat ends when both exit");
    let d = read_json(&out);
    assert_eq!(d["config"]["pids"][0], a.id());
    event(&d["result"]["counters"], "page-faults").unwrap()["value"]
        .as_f64()
        .unwrap()
}

/// `-p A,B`: the page faults of the children both processes start after
/// the attach; 8 MiB more buffer in each is 2 x 2048 more faults.
#[test]
fn stat_pid_counts_the_pages_attached_processes_touch() {
    if !need_root() || !need("dd", have_program("dd")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = attach_page_faults(dir.path(), "4M");
    let large = attach_page_faults(dir.path(), "12M");
    let extra = large - small;
    assert!(
        (4096.0 - 32.0..=4096.0 + 128.0).contains(&extra),
        "8 MiB more buffer in each of two processes gave {extra} more faults ({small} -> {large})"
    );
}

/// SIGINT ends an attach: the counts written, exit 130 as every dmalab
/// command a signal stopped, and the process left running (perf stat -p
/// leaves it alone too).
#[test]
fn stat_pid_stops_on_sigint_and_leaves_the_process_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.json");
    let mut target = waiting("true");
    let mut stat = attach_stat(&target.id().to_string(), &out);
    common::signal(stat.id(), libc::SIGINT);
    let st = stat.wait().unwrap();
    let alive = target.try_wait().unwrap().is_none();
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(st.code(), Some(130));
    assert!(alive, "the attached process was ended");
    let d = read_json(&out);
    assert!(event(&d["result"]["counters"], "page-faults").is_some());
}

// ---- issue 31 item 2: exact mode, one event group per run.

/// `--counters-mode exact -r 4` over two groups: runs 0 and 2 count
/// `{page-faults,task-clock}`, runs 1 and 3 `context-switches`; nothing is
/// multiplexed or scaled, and each value says so. Fewer runs than groups
/// is refused with the number needed.
#[test]
fn stat_exact_mode_rotates_event_groups_across_runs() {
    if !need_root() || !need("dd", have_program("dd")) {
        return;
    }
    let counters = "{page-faults,task-clock},context-switches";
    let e = common::assert_usage_error(
        [
            "stat",
            "--counters-mode",
            "exact",
            "--counters",
            counters,
            "-r",
            "1",
            "true",
        ],
        "--counters-mode:",
    );
    assert!(e.contains("2 event groups") && e.contains("-r 2"), "{e}");
    common::assert_usage_error(
        ["stat", "--counters-mode", "sometimes", "true"],
        "--counters-mode:",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    dmalab()
        .args([
            "stat",
            "-q",
            "--counters-mode",
            "exact",
            "--counters",
            counters,
        ])
        .args(["-r", "4", "--output"])
        .arg(&out)
        .args(DD_ZERO)
        .arg("bs=8M")
        .assert()
        .success();
    let d = read_json(&out);
    assert_eq!(d["config"]["counters_mode"], "exact");
    assert_eq!(d["config"]["counter_groups"], 2);
    let r = &d["result"]["repeat"];
    assert_eq!(r["runs"], 4);
    let values = |id: &str| -> Vec<f64> {
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("{id} in no run: {r}"))["spread"]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let pf = values("page-faults");
    assert_eq!(pf.len(), 2, "counted in runs 0 and 2 only: {pf:?}");
    assert!(pf.iter().all(|v| *v >= 2048.0), "an 8 MiB buffer: {pf:?}");
    assert_eq!(values("task-clock").len(), 2);
    assert_eq!(values("context-switches").len(), 2);
    // The last run (3) counted only the second group, exactly.
    let last = &d["result"]["counters"];
    let ids: Vec<&str> = last["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["context-switches"]);
    assert_eq!(event(last, "context-switches").unwrap()["exact"], true);
}

/// `load --counters-mode exact` counts in one run: a request of several
/// event groups is refused with the runs it needs; one group is counted
/// unscaled, each value marked exact.
#[test]
fn load_exact_mode_refuses_more_groups_than_runs() {
    let e = common::assert_usage_error(
        [
            "load",
            "--engine",
            "null",
            "--runtime",
            "100ms",
            "--counters",
            "page-faults,context-switches",
            "--counters-mode",
            "exact",
        ],
        "--counters-mode:",
    );
    assert!(
        e.contains("2 event groups") && e.contains("at least 2 runs"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("l.json");
    dmalab()
        .args(["load", "--engine", "null", "--runtime", "100ms", "-q"])
        .args([
            "--counters",
            "{page-faults,context-switches}",
            "--counters-mode",
            "exact",
        ])
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let d = read_json(&out);
    let c = &d["result"]["counters"];
    assert_eq!(event(c, "page-faults").unwrap()["exact"], true, "{c}");
    assert_eq!(event(c, "context-switches").unwrap()["exact"], true);
}
