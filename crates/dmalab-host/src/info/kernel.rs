//! Mounts, cgroups, resctrl and perf PMUs.

use super::*;

pub(super) fn mounts(root: &HostRoot) -> Vec<(String, String, String)> {
    fs::read_to_string(root.path("/proc/self/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let dash = f.iter().position(|x| *x == "-")?;
            Some((
                dmalab_core::host::unescape_mount(f.get(4)?),
                f.get(dash + 1)?.to_string(),
                f.get(dash + 3).map_or(String::new(), |s| s.to_string()),
            ))
        })
        .collect()
}

pub(super) fn cgroup(root: &HostRoot) -> CgroupFacts {
    let m = mounts(root);
    let v2 = m.iter().find(|(_, t, _)| t == "cgroup2");
    let mut v1: Vec<String> = Vec::new();
    let known: Vec<String> = fs::read_to_string(root.path("/proc/cgroups"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    for (_, t, opts) in &m {
        if t == "cgroup" {
            for o in opts.split(',') {
                if known.iter().any(|k| k == o) && !v1.iter().any(|x| x == o) {
                    v1.push(o.to_string());
                }
            }
        }
    }
    let v2_ctl: Vec<String> = v2
        .and_then(|(mp, _, _)| fs::read_to_string(root.path(mp).join("cgroup.controllers")).ok())
        .map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let version = match (v1.is_empty(), v2.is_some()) {
        (true, true) => "v2",
        (false, false) => "v1",
        (false, true) => "hybrid",
        (true, false) => "none",
    };
    let mut controllers = v1;
    controllers.extend(v2_ctl);
    CgroupFacts {
        version: version.into(),
        controllers,
    }
}

pub(super) fn resctrl(root: &HostRoot) -> ResctrlFacts {
    let cpuinfo = fs::read_to_string(root.path("/proc/cpuinfo")).unwrap_or_default();
    let flags = dmalab_core::sys::cpuinfo::cpu_flags(&cpuinfo);
    let wanted = [
        "cat_l3",
        "cat_l2",
        "cdp_l3",
        "mba",
        "cqm_llc",
        "cqm_mbm_total",
        "cqm_mbm_local",
    ];
    let present: Vec<String> = wanted
        .iter()
        .filter(|w| flags.contains(w))
        .map(|w| w.to_string())
        .collect();
    let has = |f: &str| present.iter().any(|p| p == f);
    ResctrlFacts {
        cat: has("cat_l3") || has("cat_l2"),
        mba: has("mba"),
        mbm: has("cqm_mbm_total") || has("cqm_mbm_local"),
        mounted_at: mounts(root)
            .into_iter()
            .find(|(_, t, _)| t == "resctrl")
            .map(|(mp, _, _)| mp),
        cpu_flags: present,
    }
}

pub(super) fn perf(root: &HostRoot) -> PerfFacts {
    let base = root.path("/sys/bus/event_source/devices");
    PerfFacts {
        perf_event_paranoid: root
            .read("/proc/sys/kernel/perf_event_paranoid")
            .and_then(|s| s.parse().ok()),
        pmus: dir_names(&base)
            .into_iter()
            .map(|n| Pmu {
                type_id: num(&base.join(&n).join("type")),
                name: n,
            })
            .collect(),
    }
}
