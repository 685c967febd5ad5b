//! CPU, topology, caches (sysfs or CPUID), NUMA nodes, kernel and
//! virtualisation.

use super::*;

/// Expands a list the kernel wrote (`0-3,8`), e.g. the online CPUs; a list
/// the kernel could not have written gives none.
pub(super) fn kernel_list(text: &str) -> Vec<usize> {
    dmalab_core::cpus::parse_kernel_list(text).unwrap_or_default()
}

pub(super) fn cpu_facts(root: &HostRoot, host: &HostInfo) -> CpuFacts {
    let id = ddio::topology::cpu_id(root);
    let cpuinfo = fs::read_to_string(root.path("/proc/cpuinfo")).unwrap_or_default();
    let stepping = dmalab_core::sys::cpuinfo::cpuinfo_field(&cpuinfo, "stepping")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let online = root
        .read("/sys/devices/system/cpu/online")
        .unwrap_or_default();
    let cpus = kernel_list(&online);
    let mut packages = BTreeSet::new();
    let mut cores = BTreeSet::new();
    for c in &cpus {
        let t = root.path(&format!("/sys/devices/system/cpu/cpu{c}/topology"));
        let pkg: i64 = num(&t.join("physical_package_id")).unwrap_or(0);
        let core: i64 = num(&t.join("core_id")).unwrap_or(*c as i64);
        let die: i64 = num(&t.join("die_id")).unwrap_or(0);
        packages.insert(pkg);
        cores.insert((pkg, die, core));
    }
    let sockets = packages.len().max(1);
    let ncores = cores.len().max(1);
    CpuFacts {
        vendor: id.vendor,
        model_name: if id.model_name.is_empty() {
            host.cpu_model.clone()
        } else {
            id.model_name
        },
        family: id.family,
        model: id.model,
        stepping,
        sockets,
        cores_per_socket: ncores / sockets,
        threads_per_core: cpus.len().max(1) / ncores,
        cpus_online: cpus.len(),
        cpus_online_list: online,
        smt_control: root.read("/sys/devices/system/cpu/smt/control"),
    }
}

pub(super) fn caches(root: &HostRoot) -> Vec<CacheFacts> {
    let online = root
        .read("/sys/devices/system/cpu/online")
        .unwrap_or_default();
    let cpus = kernel_list(&online);
    let base = root.path("/sys/devices/system/cpu/cpu0/cache");
    let mut out = Vec::new();
    for idx in dir_names(&base)
        .into_iter()
        .filter(|n| n.starts_with("index"))
    {
        let d = base.join(&idx);
        let Some(level) = num::<u32>(&d.join("level")) else {
            continue;
        };
        let instances: BTreeSet<String> = cpus
            .iter()
            .filter_map(|c| {
                read_trim(&root.path(&format!(
                    "/sys/devices/system/cpu/cpu{c}/cache/{idx}/shared_cpu_list"
                )))
            })
            .collect();
        out.push(CacheFacts {
            level,
            kind: read_trim(&d.join("type")).unwrap_or_default(),
            size_bytes: read_trim(&d.join("size"))
                .and_then(|s| sysfs_size(&s))
                .unwrap_or(0),
            ways: num(&d.join("ways_of_associativity")).unwrap_or(0),
            line_bytes: num(&d.join("coherency_line_size")).unwrap_or(0),
            shared_cpu_list: read_trim(&d.join("shared_cpu_list")).unwrap_or_default(),
            instances: instances.len(),
        });
    }
    out
}

/// The caches as CPUID describes them (leaf 4 on Intel, 0x8000001D on AMD:
/// the same layout), for hosts without the sysfs cache directory. One
/// instance per entry; `shared_cpu_list` and `instances` are unknown there.
pub fn cpuid_caches(vendor: &str) -> Vec<CacheFacts> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid_count;
        let leaf = match vendor {
            "GenuineIntel" => 4,
            "AuthenticAMD" | "HygonGenuine" => 0x8000_001d,
            _ => return Vec::new(),
        };
        // SAFETY: CPUID exists on every x86_64 CPU; asking for the highest
        // supported leaf first keeps the queries in range.
        #[allow(unused_unsafe)]
        let max = unsafe { __cpuid_count(leaf & 0x8000_0000, 0) }.eax;
        if max < leaf {
            return Vec::new();
        }
        let mut out = Vec::new();
        for sub in 0..16 {
            // SAFETY: as above; `leaf` is supported.
            #[allow(unused_unsafe)]
            let r = unsafe { __cpuid_count(leaf, sub) };
            let kind = match r.eax & 0x1f {
                1 => "Data",
                2 => "Instruction",
                3 => "Unified",
                _ => break,
            };
            let ways = (r.ebx >> 22) + 1;
            let partitions = ((r.ebx >> 12) & 0x3ff) + 1;
            let line = (r.ebx & 0xfff) + 1;
            let sets = u64::from(r.ecx) + 1;
            out.push(CacheFacts {
                level: (r.eax >> 5) & 7,
                kind: kind.into(),
                size_bytes: u64::from(ways) * u64::from(partitions) * u64::from(line) * sets,
                ways,
                line_bytes: line,
                shared_cpu_list: String::new(),
                instances: 0,
            });
        }
        out
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = vendor;
        Vec::new()
    }
}

pub(super) fn numa(root: &HostRoot) -> Vec<NodeFacts> {
    let base = root.path("/sys/devices/system/node");
    let mut out = Vec::new();
    for n in dir_names(&base) {
        let Some(node) = n.strip_prefix("node").and_then(|x| x.parse::<u32>().ok()) else {
            continue;
        };
        let meminfo = fs::read_to_string(base.join(&n).join("meminfo")).unwrap_or_default();
        let kb = |key: &str| {
            meminfo
                .lines()
                .find(|l| l.contains(key))
                .and_then(|l| l.split_whitespace().rev().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(0, |v| v * 1024)
        };
        out.push(NodeFacts {
            node,
            cpus: read_trim(&base.join(&n).join("cpulist")).unwrap_or_default(),
            mem_total_bytes: kb("MemTotal:"),
            mem_free_bytes: kb("MemFree:"),
        });
    }
    out
}

/// Hypervisor vendor from CPUID leaf 0x40000000, as lscpu names it.
pub(super) fn hypervisor_vendor(virtualized: bool) -> Option<String> {
    if !virtualized {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID exists on every x86_64 CPU; leaf 0x40000000 is
        // reserved for hypervisors and only read when one is present.
        #[allow(unused_unsafe)]
        let r = unsafe { std::arch::x86_64::__cpuid(0x4000_0000) };
        let mut sig = Vec::with_capacity(12);
        for w in [r.ebx, r.ecx, r.edx] {
            sig.extend_from_slice(&w.to_le_bytes());
        }
        let sig = String::from_utf8_lossy(&sig)
            .trim_end_matches('\0')
            .to_string();
        let name = match sig.as_str() {
            "KVMKVMKVM" => "KVM",
            "Microsoft Hv" => "Microsoft",
            "VMwareVMware" => "VMware",
            "XenVMMXenVMM" => "Xen",
            "TCGTCGTCGTCG" => "TCG",
            "ACRNACRNACRN" => "ACRN",
            "bhyve bhyve " => "bhyve",
            " lrpepyh  vr" => "Parallels",
            other => return Some(other.trim().to_string()).filter(|s| !s.is_empty()),
        };
        Some(name.to_string())
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

pub(super) fn system(root: &HostRoot, host: &HostInfo) -> SystemFacts {
    let dmi = [
        root.read("/sys/class/dmi/id/sys_vendor"),
        root.read("/sys/class/dmi/id/product_name"),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>()
    .join(" ");
    SystemFacts {
        kernel_release: host.kernel.clone(),
        kernel_version: root.read("/proc/version").unwrap_or_default(),
        virtualized: host.virtualized,
        hypervisor_vendor: if root.is_system() {
            hypervisor_vendor(host.virtualized)
        } else {
            None
        },
        dmi_product: (!dmi.is_empty()).then_some(dmi),
        privileged: dmalab_core::sys::is_root(),
    }
}
