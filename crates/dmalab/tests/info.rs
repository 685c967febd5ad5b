//! `dmalab info` against the system's own tools, as root and as an
//! unprivileged user: lscpu (CPU, topology, caches, hypervisor), swapon
//! (/proc/swaps), lsblk (block devices and sizes).

use crate::common;

use common::{dmalab, have_program, is_root, need};
use serde_json::Value;
use std::process::Command;

fn tool_json(prog: &str, args: &[&str]) -> Value {
    let out = Command::new(prog).args(args).output().expect(prog);
    assert!(out.status.success(), "{prog} {args:?} failed");
    serde_json::from_slice(&out.stdout).expect("tool JSON")
}

/// lscpu -J's `field: data` pairs, flattened (newer versions nest them).
fn lscpu_fields(v: &Value, out: &mut Vec<(String, String)>) {
    if let Some(arr) = v.as_array() {
        for e in arr {
            if let (Some(f), Some(d)) = (e["field"].as_str(), e["data"].as_str()) {
                out.push((f.trim_end_matches(':').to_string(), d.to_string()));
            }
            lscpu_fields(&e["children"], out);
        }
    }
}

fn num(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(u64::MAX)
}

/// Runs `dmalab info --output` (as `nobody` when `as_nobody`) and returns
/// the result document.
fn info_doc(as_nobody: bool) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("info.json");
    let mut cmd = if as_nobody {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(common::dmalab_bin());
        c
    } else {
        Command::new(common::dmalab_bin())
    };
    let o = cmd.arg("info").arg("--output").arg(&out).output().unwrap();
    assert!(
        o.status.success(),
        "dmalab info failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    for key in [
        "cpu", "topology", "kernel", "io_uring", "cgroup", "resctrl", "perf", "ddio",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(key)),
            "no '{key}' line in:\n{text}"
        );
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["command"], "info");
    assert_eq!(doc["schema_version"], 1);
    doc["result"].clone()
}

fn compare_with_system_tools(r: &Value) {
    let mut f = Vec::new();
    lscpu_fields(&tool_json("lscpu", &["-J"])["lscpu"], &mut f);
    let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let cpu = &r["cpu"];
    assert_eq!(get("Vendor ID").as_deref(), cpu["vendor"].as_str());
    assert_eq!(get("Model name").as_deref(), cpu["model_name"].as_str());
    let n = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
    assert_eq!(n("CPU(s)"), cpu["cpus_online"].as_u64());
    assert_eq!(n("Thread(s) per core"), cpu["threads_per_core"].as_u64());
    assert_eq!(n("Core(s) per socket"), cpu["cores_per_socket"].as_u64());
    assert_eq!(n("Socket(s)"), cpu["sockets"].as_u64());
    assert_eq!(
        n("NUMA node(s)"),
        Some(r["numa"].as_array().unwrap().len() as u64)
    );
    if let Some(h) = get("Hypervisor vendor") {
        assert_eq!(Some(h.as_str()), r["system"]["hypervisor_vendor"].as_str());
    }
    // Caches: per-instance size and ways of each level and kind.
    let caches = tool_json("lscpu", &["-C", "-J", "-B"]);
    for c in caches["caches"].as_array().unwrap() {
        let level = c["level"].as_u64().unwrap();
        let kind = c["type"].as_str().unwrap();
        let ours = r["caches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["level"].as_u64() == Some(level) && x["kind"] == kind)
            .unwrap_or_else(|| panic!("no L{level} {kind} cache in dmalab info"));
        assert_eq!(
            num(&c["one-size"]),
            ours["size_bytes"].as_u64().unwrap(),
            "L{level} {kind}"
        );
        assert_eq!(
            num(&c["ways"]),
            ours["ways"].as_u64().unwrap(),
            "L{level} {kind}"
        );
    }
    // Swap: the areas swapon lists (it reads /proc/swaps), sizes in bytes.
    let sw = Command::new("swapon")
        .args(["--show=NAME,SIZE", "--bytes", "--noheadings", "--raw"])
        .output()
        .unwrap();
    let listed: Vec<(String, u64)> = String::from_utf8_lossy(&sw.stdout)
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.to_string(), b.trim().parse().ok()?))
        })
        .collect();
    let ours: Vec<(String, u64)> = r["memory"]["swaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["path"].as_str().unwrap().to_string(),
                s["size_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed.len(), ours.len(), "swapon {listed:?} vs {ours:?}");
    for (name, size) in &listed {
        // swapon counts the header page; /proc/swaps does not.
        assert!(
            ours.iter().any(|(n, s)| n == name && size - s <= 4096),
            "{name} {size} not in {ours:?}"
        );
    }
    // Block devices: every one lsblk lists, with its size; the ones lsblk
    // leaves out are empty.
    let lsblk = tool_json("lsblk", &["-J", "-b", "-d", "-o", "NAME,SIZE"]);
    let ours = r["block"].as_array().unwrap();
    let lsblk_names: Vec<&str> = lsblk["blockdevices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let name = d["name"].as_str().unwrap();
            let mine = ours
                .iter()
                .find(|b| b["name"] == name)
                .unwrap_or_else(|| panic!("{name} missing from dmalab info"));
            assert_eq!(mine["size_bytes"].as_u64(), Some(num(&d["size"])), "{name}");
            name
        })
        .collect();
    for b in ours {
        if !lsblk_names.contains(&b["name"].as_str().unwrap()) {
            assert_eq!(b["size_bytes"], 0, "{b} is missing from lsblk");
        }
    }
    // DDIO: the report says what the library finds on this host, for any
    // vendor (AMD and Intel client parts: not on this CPU; a Xeon guest: no
    // root port or MSR).
    let host = dmalab_host::HostRoot::system();
    let st = dmalab_host::ddio::status(
        &host,
        &dmalab_host::ddio::regs::Registers::files(&host),
        None,
    )
    .unwrap();
    assert_eq!(r["ddio"]["controllable"], st.controllable);
    assert_eq!(
        r["ddio"]["reasons"][0].as_str(),
        st.reasons.first().map(String::as_str)
    );
}

#[test]
fn info_agrees_with_lscpu_swapon_and_lsblk() {
    if !need(
        "lscpu, lsblk and swapon",
        have_program("lscpu") && have_program("lsblk") && have_program("swapon"),
    ) {
        return;
    }
    let r = info_doc(false);
    assert_eq!(r["system"]["privileged"], is_root());
    compare_with_system_tools(&r);
}

#[test]
fn info_runs_unprivileged_and_agrees_there_too() {
    if !need(
        "root (to drop to nobody with setpriv)",
        is_root() && have_program("setpriv"),
    ) {
        return;
    }
    let r = info_doc(true);
    assert_eq!(r["system"]["privileged"], false);
    compare_with_system_tools(&r);
}

#[test]
fn info_nvme_subcommand_is_still_there() {
    let out = dmalab().args(["info", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.lines().any(|l| l.trim_start().starts_with("nvme ")),
        "{help}"
    );
    common::assert_usage_error(["info", "nvme", "/nonexistent/ng9n9"], "/nonexistent/ng9n9");
}
