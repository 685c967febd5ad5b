//! `dmalab info`: one read-only report of what matters for DMA experiments
//! on this host. Every fact comes from /proc, /sys, /dev, CPUID or an
//! io_uring probe; nothing here changes the host (the io_uring probe makes
//! and closes a ring). Each fact that needs privileges says so instead of
//! failing, so the report runs as any user.

use crate::ddio;
use crate::{dir_names, read_trim, HostRoot};
use dmalab_core::host::HostInfo;
use dmalab_page::sysinfo::SwapEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// The CPU and its topology.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuFacts {
    /// `GenuineIntel`, `AuthenticAMD`.
    pub vendor: String,
    /// Model name.
    pub model_name: String,
    /// CPU family.
    pub family: u32,
    /// Model number.
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
    /// Packages (sockets).
    pub sockets: usize,
    /// Cores per socket.
    pub cores_per_socket: usize,
    /// Hardware threads per core (SMT when above 1).
    pub threads_per_core: usize,
    /// Logical CPUs online.
    pub cpus_online: usize,
    /// Online CPUs as a list (`0-15`).
    pub cpus_online_list: String,
    /// `/sys/devices/system/cpu/smt/control` (`on`, `off`, `notsupported`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smt_control: Option<String>,
}

/// One cache level (from cpu0's sysfs cache directory).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CacheFacts {
    /// Level (1, 2, 3).
    pub level: u32,
    /// `Data`, `Instruction`, `Unified`.
    pub kind: String,
    /// Size of one instance, bytes.
    pub size_bytes: u64,
    /// Ways of associativity.
    pub ways: u32,
    /// Line size, bytes.
    pub line_bytes: u32,
    /// CPUs sharing cpu0's instance.
    pub shared_cpu_list: String,
    /// Instances across all online CPUs.
    pub instances: usize,
}

/// One NUMA node.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeFacts {
    /// Node number.
    pub node: u32,
    /// Its CPUs.
    pub cpus: String,
    /// Its memory, bytes.
    pub mem_total_bytes: u64,
    /// Its free memory, bytes.
    pub mem_free_bytes: u64,
}

/// Kernel and virtualisation.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SystemFacts {
    /// `uname -r`.
    pub kernel_release: String,
    /// `/proc/version`.
    pub kernel_version: String,
    /// True when a hypervisor is present (the `hypervisor` CPU flag).
    pub virtualized: bool,
    /// Hypervisor vendor from CPUID leaf 0x40000000 (`KVM`, `Microsoft`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hypervisor_vendor: Option<String>,
    /// DMI system vendor and product.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dmi_product: Option<String>,
    /// True when this process runs as root.
    pub privileged: bool,
}

/// What io_uring can do here (probed).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct UringFacts {
    /// A ring could be set up.
    pub available: bool,
    /// `/proc/sys/kernel/io_uring_disabled` (0 allowed, 1 root/group only, 2 off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_sysctl: Option<String>,
    /// `IORING_OP_URING_CMD` (NVMe passthrough).
    pub uring_cmd: bool,
    /// `READ_FIXED`/`WRITE_FIXED` opcodes and buffer registration.
    pub fixed_buffers: bool,
    /// A ring with `IORING_SETUP_SQPOLL` could be set up.
    pub sqpoll: bool,
    /// Why something is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One PCI function.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PciFacts {
    /// Address.
    pub bdf: String,
    /// `vendor:device`, hex.
    pub id: String,
    /// Class code, hex.
    pub class: String,
    /// NUMA node it hangs off (-1: none reported).
    pub numa_node: i32,
    /// Bound driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

/// One NVMe namespace.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct NvmeNamespace {
    /// Block device name (`nvme0n1`).
    pub name: String,
    /// Size, bytes.
    pub size_bytes: u64,
    /// Logical block size, bytes.
    pub logical_block_size: u64,
    /// Generic character device (`/dev/ng0n1`).
    pub generic_device: String,
    /// Whether that device node exists.
    pub generic_present: bool,
}

/// One NVMe controller.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct NvmeController {
    /// `nvme0`.
    pub name: String,
    /// Model string.
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// Firmware revision.
    pub firmware: String,
    /// `pcie`, `tcp`, `rdma`, `loop`.
    pub transport: String,
    /// Its address (PCI address for PCIe).
    pub address: String,
    /// NUMA node, when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// Namespaces.
    pub namespaces: Vec<NvmeNamespace>,
}

/// One block device and what the write guard says about it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BlockFacts {
    /// Kernel name.
    pub name: String,
    /// Size, bytes.
    pub size_bytes: u64,
    /// Model or driver.
    pub model: String,
    /// Rotational.
    pub rotational: bool,
    /// Read-only.
    pub read_only: bool,
    /// `passes`, or the guard's refusal (`mounted: ...`). `not checked` for
    /// empty devices.
    pub write_guard: String,
}

/// One RDMA port.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RdmaPort {
    /// Device (`mlx5_0`).
    pub device: String,
    /// Port number.
    pub port: String,
    /// `4: ACTIVE`.
    pub state: String,
    /// `InfiniBand`, `Ethernet`.
    pub link_layer: String,
    /// `100 Gb/sec (4X EDR)`.
    pub rate: String,
}

/// GPUs as the NVIDIA driver exposes them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GpuFacts {
    /// `/dev/nvidia*` nodes.
    pub device_nodes: Vec<String>,
    /// First line of `/proc/driver/nvidia/version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// `Model:` of each `/proc/driver/nvidia/gpus/*/information`.
    pub models: Vec<String>,
}

/// One hugepage pool.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct HugePool {
    /// Page size, bytes.
    pub page_bytes: u64,
    /// Pages in the pool.
    pub total: u64,
    /// Free pages.
    pub free: u64,
    /// Reserved pages.
    pub reserved: u64,
}

/// Memory facts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MemoryFacts {
    /// Total memory, bytes.
    pub mem_total_bytes: u64,
    /// Available memory, bytes.
    pub mem_available_bytes: u64,
    /// Hugepage pools.
    pub hugepages: Vec<HugePool>,
    /// THP `enabled` (selected value).
    pub thp_enabled: String,
    /// THP `defrag` (selected value).
    pub thp_defrag: String,
    /// Active swap areas (`/proc/swaps`).
    pub swaps: Vec<SwapEntry>,
    /// zram devices.
    pub zram: Vec<ZramFacts>,
}

/// One zram device.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ZramFacts {
    /// `zram0`.
    pub name: String,
    /// Configured size, bytes (0: not set up).
    pub disksize_bytes: u64,
    /// Selected compression algorithm.
    pub algorithm: String,
}

/// cgroups.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CgroupFacts {
    /// `v1`, `v2` or `hybrid` (v1 controllers beside a v2 mount).
    pub version: String,
    /// Controllers usable (v2: the root's cgroup.controllers; v1: mounted).
    pub controllers: Vec<String>,
}

/// Intel RDT / AMD PQoS as the kernel's resctrl sees it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ResctrlFacts {
    /// CPU flags present among `cat_l3 cat_l2 cdp_l3 mba cqm_llc cqm_mbm_total cqm_mbm_local`.
    pub cpu_flags: Vec<String>,
    /// Cache allocation (CAT).
    pub cat: bool,
    /// Memory bandwidth allocation (MBA).
    pub mba: bool,
    /// Memory bandwidth monitoring (MBM).
    pub mbm: bool,
    /// Where resctrl is mounted, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mounted_at: Option<String>,
}

/// One perf PMU.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Pmu {
    /// Directory name under /sys/bus/event_source/devices.
    pub name: String,
    /// Its `type` number for perf_event_open.
    pub type_id: Option<u32>,
}

/// perf.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PerfFacts {
    /// `/proc/sys/kernel/perf_event_paranoid`.
    pub perf_event_paranoid: Option<i32>,
    /// PMUs present.
    pub pmus: Vec<Pmu>,
}

/// The whole report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct HostReport {
    /// CPU and topology.
    pub cpu: CpuFacts,
    /// Caches, L1 to LLC.
    pub caches: Vec<CacheFacts>,
    /// NUMA nodes.
    pub numa: Vec<NodeFacts>,
    /// Kernel, virtualisation, privilege.
    pub system: SystemFacts,
    /// Memory, hugepages, THP, swap, zram.
    pub memory: MemoryFacts,
    /// io_uring.
    pub io_uring: UringFacts,
    /// PCI functions and their NUMA node.
    pub pci: Vec<PciFacts>,
    /// NVMe controllers and namespaces.
    pub nvme: Vec<NvmeController>,
    /// Block devices and the write guard's verdict.
    pub block: Vec<BlockFacts>,
    /// RDMA ports.
    pub rdma: Vec<RdmaPort>,
    /// GPUs.
    pub gpu: GpuFacts,
    /// cgroups.
    pub cgroup: CgroupFacts,
    /// resctrl.
    pub resctrl: ResctrlFacts,
    /// perf PMUs.
    pub perf: PerfFacts,
    /// DDIO per Intel root port (see `dmalab ddio status`).
    pub ddio: ddio::Status,
}

fn num<T: std::str::FromStr>(p: &Path) -> Option<T> {
    read_trim(p)?.parse().ok()
}

fn selected(p: &Path) -> String {
    read_trim(p)
        .and_then(|s| {
            s.split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(['[', ']']).to_string())
                .or(Some(s))
        })
        .unwrap_or_else(|| "unavailable".into())
}

/// `32768K`, `2M`, `1024` -> bytes.
pub fn sysfs_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (n, mul) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().ok().map(|v| v * mul)
}

/// Expands a list the kernel wrote (`0-3,8`), e.g. the online CPUs. Not
/// `dmalab_core::cpus::parse_cpu_list`, which also checks the CPUs against
/// this process's affinity: the host's facts must not depend on it.
fn kernel_list(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            // Bounded: the kernel's own limit on CPU numbers (CONFIG_NR_CPUS).
            out.extend(a..=b.min(a + 8192));
        }
    }
    out
}

fn cpu_facts(root: &HostRoot, host: &HostInfo) -> CpuFacts {
    let id = ddio::topology::CpuId::read(root);
    let cpuinfo = fs::read_to_string(root.path("/proc/cpuinfo")).unwrap_or_default();
    let stepping = cpuinfo
        .lines()
        .find(|l| l.split(':').next().map(str::trim) == Some("stepping"))
        .and_then(|l| l.split_once(':')?.1.trim().parse().ok())
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

fn caches(root: &HostRoot) -> Vec<CacheFacts> {
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

fn numa(root: &HostRoot) -> Vec<NodeFacts> {
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
fn hypervisor_vendor(virtualized: bool) -> Option<String> {
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

fn system(root: &HostRoot, host: &HostInfo) -> SystemFacts {
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
        // SAFETY: geteuid has no arguments and cannot fail.
        privileged: unsafe { libc::geteuid() } == 0,
    }
}

fn memory(root: &HostRoot, host: &HostInfo) -> MemoryFacts {
    let hp = root.path("/sys/kernel/mm/hugepages");
    let hugepages = dir_names(&hp)
        .into_iter()
        .filter_map(|n| {
            let kb: u64 = n
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let d = hp.join(&n);
            Some(HugePool {
                page_bytes: kb * 1024,
                total: num(&d.join("nr_hugepages")).unwrap_or(0),
                free: num(&d.join("free_hugepages")).unwrap_or(0),
                reserved: num(&d.join("resv_hugepages")).unwrap_or(0),
            })
        })
        .collect();
    let zram = dir_names(&root.path("/sys/block"))
        .into_iter()
        .filter(|n| n.starts_with("zram"))
        .map(|n| {
            let d = root.path(&format!("/sys/block/{n}"));
            ZramFacts {
                disksize_bytes: num(&d.join("disksize")).unwrap_or(0),
                algorithm: selected(&d.join("comp_algorithm")),
                name: n,
            }
        })
        .collect();
    MemoryFacts {
        mem_total_bytes: host.mem_total_bytes,
        mem_available_bytes: host.mem_available_bytes,
        hugepages,
        thp_enabled: selected(&root.path("/sys/kernel/mm/transparent_hugepage/enabled")),
        thp_defrag: selected(&root.path("/sys/kernel/mm/transparent_hugepage/defrag")),
        swaps: dmalab_page::sysinfo::parse_swaps(
            &fs::read_to_string(root.path("/proc/swaps")).unwrap_or_default(),
        ),
        zram,
    }
}

fn io_uring_facts(root: &HostRoot) -> UringFacts {
    use io_uring::{opcode, IoUring, Probe};
    let mut f = UringFacts {
        disabled_sysctl: root.read("/proc/sys/kernel/io_uring_disabled"),
        ..UringFacts::default()
    };
    let ring = match IoUring::new(4) {
        Ok(r) => r,
        Err(e) => {
            f.notes.push(format!("io_uring_setup failed: {e}"));
            return f;
        }
    };
    f.available = true;
    let mut p = Probe::new();
    match ring.submitter().register_probe(&mut p) {
        Ok(()) => {
            f.uring_cmd = p.is_supported(opcode::UringCmd16::CODE);
            let fixed_ops =
                p.is_supported(opcode::ReadFixed::CODE) && p.is_supported(opcode::WriteFixed::CODE);
            let buf = vec![0u8; 4096];
            let iov = [libc::iovec {
                iov_base: buf.as_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            }];
            // SAFETY: `buf` outlives the registration, which is undone
            // before `buf` is dropped.
            let reg = unsafe { ring.submitter().register_buffers(&iov) };
            match reg {
                Ok(()) => {
                    let _ = ring.submitter().unregister_buffers();
                    f.fixed_buffers = fixed_ops;
                }
                Err(e) => f.notes.push(format!(
                    "registering a 4 KiB fixed buffer failed: {e} (RLIMIT_MEMLOCK?)"
                )),
            }
            drop(buf);
            if !f.uring_cmd {
                f.notes.push(
                    "no IORING_OP_URING_CMD (NVMe passthrough needs Linux 5.19 or newer)".into(),
                );
            }
        }
        Err(e) => f.notes.push(format!("IORING_REGISTER_PROBE failed: {e}")),
    }
    match IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder()
        .setup_sqpoll(10)
        .build(4)
    {
        Ok(_) => f.sqpoll = true,
        Err(e) => f.notes.push(format!(
            "SQPOLL ring refused: {e} (before Linux 5.11 it needs root)"
        )),
    }
    f
}

fn pci(root: &HostRoot) -> Vec<PciFacts> {
    let base = root.path("/sys/bus/pci/devices");
    dir_names(&base)
        .into_iter()
        .map(|bdf| {
            let d = base.join(&bdf);
            let h = |f: &str| {
                read_trim(&d.join(f))
                    .map(|s| s.trim_start_matches("0x").to_string())
                    .unwrap_or_default()
            };
            PciFacts {
                id: format!("{}:{}", h("vendor"), h("device")),
                class: h("class"),
                numa_node: num(&d.join("numa_node")).unwrap_or(-1),
                driver: fs::read_link(d.join("driver"))
                    .ok()
                    .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned())),
                bdf,
            }
        })
        .collect()
}

fn nvme(root: &HostRoot) -> Vec<NvmeController> {
    let base = root.path("/sys/class/nvme");
    let mut out = Vec::new();
    for name in dir_names(&base) {
        let d = base.join(&name);
        let t = |f: &str| read_trim(&d.join(f)).unwrap_or_default();
        let ctrl_no = name.trim_start_matches("nvme").to_string();
        let mut namespaces = Vec::new();
        for ns in dir_names(&d) {
            // nvme0n1 (or nvme0c0n1 with native multipath: the block
            // device is then nvme0n1).
            let Some(rest) = ns.strip_prefix(&name) else {
                continue;
            };
            let nsid = match rest.strip_prefix('n') {
                Some(n) => n.to_string(),
                None => match rest.strip_prefix('c').and_then(|r| r.split_once('n')) {
                    Some((_, n)) => n.to_string(),
                    None => continue,
                },
            };
            if nsid.is_empty() || !nsid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let nd = d.join(&ns);
            let generic = format!("/dev/ng{ctrl_no}n{nsid}");
            namespaces.push(NvmeNamespace {
                name: format!("nvme{ctrl_no}n{nsid}"),
                size_bytes: num::<u64>(&nd.join("size")).unwrap_or(0) * 512,
                logical_block_size: num(&nd.join("queue/logical_block_size")).unwrap_or(0),
                generic_present: root.path(&generic).exists(),
                generic_device: generic,
            });
        }
        out.push(NvmeController {
            model: t("model"),
            serial: t("serial"),
            firmware: t("firmware_rev"),
            transport: t("transport"),
            address: t("address"),
            numa_node: num(&d.join("numa_node")).or_else(|| num(&d.join("device/numa_node"))),
            namespaces,
            name,
        });
    }
    out
}

fn block(root: &HostRoot) -> Vec<BlockFacts> {
    let base = root.path("/sys/block");
    dir_names(&base)
        .into_iter()
        .map(|name| {
            let d = base.join(&name);
            let size_bytes = num::<u64>(&d.join("size")).unwrap_or(0) * 512;
            let model = read_trim(&d.join("device/model"))
                .filter(|m| !m.is_empty())
                .or_else(|| {
                    fs::read_link(d.join("device/driver"))
                        .ok()
                        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
                })
                .unwrap_or_else(|| {
                    name.trim_end_matches(|c: char| c.is_ascii_digit())
                        .to_string()
                });
            let node = root.path(&format!("/dev/{name}"));
            let write_guard = if size_bytes == 0 {
                "not checked: empty (no medium, not attached or not set up)".to_string()
            } else if !root.is_system() || !node.exists() {
                format!("not checked: no {}", node.display())
            } else {
                match dmalab_core::safety::check_block_device(&node) {
                    Ok(()) => "passes (with --allow-destroy naming it)".into(),
                    // SAFETY: geteuid has no arguments and cannot fail.
                    Err(r) if r.check == "readable" && unsafe { libc::geteuid() } != 0 => {
                        "not checked: reading it for signatures needs root".to_string()
                    }
                    Err(r) => format!("refused: {} check: {}", r.check, r.detail),
                }
            };
            BlockFacts {
                size_bytes,
                model,
                rotational: num::<u32>(&d.join("queue/rotational")) == Some(1),
                read_only: num::<u32>(&d.join("ro")) == Some(1),
                write_guard,
                name,
            }
        })
        .collect()
}

fn rdma(root: &HostRoot) -> Vec<RdmaPort> {
    let base = root.path("/sys/class/infiniband");
    let mut out = Vec::new();
    for dev in dir_names(&base) {
        let ports = base.join(&dev).join("ports");
        for port in dir_names(&ports) {
            let p = ports.join(&port);
            out.push(RdmaPort {
                device: dev.clone(),
                state: read_trim(&p.join("state")).unwrap_or_default(),
                link_layer: read_trim(&p.join("link_layer")).unwrap_or_default(),
                rate: read_trim(&p.join("rate")).unwrap_or_default(),
                port,
            });
        }
    }
    out
}

fn gpu(root: &HostRoot) -> GpuFacts {
    let gpus = root.path("/proc/driver/nvidia/gpus");
    GpuFacts {
        device_nodes: dir_names(&root.path("/dev"))
            .into_iter()
            .filter(|n| n.starts_with("nvidia"))
            .map(|n| format!("/dev/{n}"))
            .collect(),
        driver: fs::read_to_string(root.path("/proc/driver/nvidia/version"))
            .ok()
            .and_then(|t| t.lines().next().map(|l| l.trim().to_string())),
        models: dir_names(&gpus)
            .into_iter()
            .filter_map(|g| {
                let t = fs::read_to_string(gpus.join(g).join("information")).ok()?;
                t.lines()
                    .find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
            })
            .collect(),
    }
}

fn mounts(root: &HostRoot) -> Vec<(String, String, String)> {
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

fn cgroup(root: &HostRoot) -> CgroupFacts {
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

fn resctrl(root: &HostRoot) -> ResctrlFacts {
    let cpuinfo = fs::read_to_string(root.path("/proc/cpuinfo")).unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.split_whitespace().collect())
        .unwrap_or_default();
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

fn perf(root: &HostRoot) -> PerfFacts {
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

impl HostReport {
    /// Collects the report for the host under `root` (the running system
    /// for `HostRoot::system()`; CPUID, io_uring and the write guard are
    /// only asked on the running system).
    pub fn collect(root: &HostRoot, host: &HostInfo) -> Self {
        let regs = ddio::regs::Registers::files(root);
        Self {
            cpu: cpu_facts(root, host),
            caches: {
                let c = caches(root);
                if c.is_empty() && root.is_system() {
                    cpuid_caches(&ddio::topology::CpuId::read(root).vendor)
                } else {
                    c
                }
            },
            numa: numa(root),
            system: system(root, host),
            memory: memory(root, host),
            io_uring: if root.is_system() {
                io_uring_facts(root)
            } else {
                UringFacts::default()
            },
            pci: pci(root),
            nvme: nvme(root),
            block: block(root),
            rdma: rdma(root),
            gpu: gpu(root),
            cgroup: cgroup(root),
            resctrl: resctrl(root),
            perf: perf(root),
            ddio: ddio::status(root, &regs, None).unwrap_or_default(),
        }
    }

    /// The text `dmalab info` prints.
    pub fn render_text(&self) -> String {
        use dmalab_core::units::fmt_bytes;
        let b = |v: u64| fmt_bytes(v as f64);
        let yn = |v: bool| if v { "yes" } else { "no" };
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k:<17} {v}\n"));
        let c = &self.cpu;
        line(
            "cpu",
            format!(
                "{} ({} family {} model {:#x} stepping {})",
                c.model_name, c.vendor, c.family, c.model, c.stepping
            ),
        );
        line(
            "topology",
            format!(
                "{} socket(s) x {} core(s) x {} thread(s); {} CPUs online ({}); SMT {}",
                c.sockets,
                c.cores_per_socket,
                c.threads_per_core,
                c.cpus_online,
                c.cpus_online_list,
                c.smt_control
                    .clone()
                    .unwrap_or_else(|| if c.threads_per_core > 1 {
                        "on".into()
                    } else {
                        "off".into()
                    })
            ),
        );
        for k in &self.caches {
            line(
                &format!("L{} {}", k.level, k.kind.to_lowercase()),
                format!(
                    "{} x {} instance(s), {} ways, {} B lines, cpu0 shares with {}",
                    b(k.size_bytes),
                    k.instances,
                    k.ways,
                    k.line_bytes,
                    k.shared_cpu_list
                ),
            );
        }
        for n in &self.numa {
            line(
                &format!("node {}", n.node),
                format!(
                    "CPUs {}, {} memory ({} free)",
                    n.cpus,
                    b(n.mem_total_bytes),
                    b(n.mem_free_bytes)
                ),
            );
        }
        let y = &self.system;
        line("kernel", y.kernel_release.clone());
        line(
            "virtualised",
            match (&y.virtualized, &y.hypervisor_vendor) {
                (true, Some(v)) => format!("yes ({v})"),
                (v, _) => yn(*v).to_string(),
            } + &y
                .dmi_product
                .as_ref()
                .map(|d| format!("; {d}"))
                .unwrap_or_default(),
        );
        line(
            "privileged",
            format!("{} (facts that need root say so)", yn(y.privileged)),
        );
        let m = &self.memory;
        line(
            "memory",
            format!(
                "{} total, {} available",
                b(m.mem_total_bytes),
                b(m.mem_available_bytes)
            ),
        );
        for h in &m.hugepages {
            line(
                &format!("hugepages {}", b(h.page_bytes)),
                format!(
                    "{} total, {} free, {} reserved",
                    h.total, h.free, h.reserved
                ),
            );
        }
        line(
            "THP",
            format!("enabled {}, defrag {}", m.thp_enabled, m.thp_defrag),
        );
        if m.swaps.is_empty() {
            line("swap", "none active".into());
        }
        for w in &m.swaps {
            line(
                "swap",
                format!(
                    "{} ({}) {} ({} used), priority {}",
                    w.path.display(),
                    w.kind,
                    b(w.size_bytes),
                    b(w.used_bytes),
                    w.priority
                ),
            );
        }
        for z in &m.zram {
            line(
                &z.name,
                if z.disksize_bytes == 0 {
                    "not set up".into()
                } else {
                    format!("{} ({})", b(z.disksize_bytes), z.algorithm)
                },
            );
        }
        let u = &self.io_uring;
        line(
            "io_uring",
            if u.available {
                format!(
                    "yes; URING_CMD {}, fixed buffers {}, SQPOLL {}",
                    yn(u.uring_cmd),
                    yn(u.fixed_buffers),
                    yn(u.sqpoll)
                )
            } else {
                "no".into()
            } + &u
                .disabled_sysctl
                .as_ref()
                .map(|d| format!(" (io_uring_disabled={d})"))
                .unwrap_or_default(),
        );
        for n in &u.notes {
            line("", n.clone());
        }
        if self.nvme.is_empty() {
            line("nvme", "none".into());
        }
        for n in &self.nvme {
            line(
                &n.name,
                format!(
                    "{} (serial {}, firmware {}), {} {}{}",
                    n.model,
                    n.serial,
                    n.firmware,
                    n.transport,
                    n.address,
                    n.numa_node
                        .map(|x| format!(", node {x}"))
                        .unwrap_or_default()
                ),
            );
            for ns in &n.namespaces {
                line(
                    "",
                    format!(
                        "{}: {}, {} B blocks; {} {}",
                        ns.name,
                        b(ns.size_bytes),
                        ns.logical_block_size,
                        ns.generic_device,
                        if ns.generic_present {
                            "present"
                        } else {
                            "absent"
                        }
                    ),
                );
            }
        }
        for d in &self.block {
            line(
                &format!("block {}", d.name),
                format!(
                    "{} {}{}{}; write guard: {}",
                    b(d.size_bytes),
                    d.model,
                    if d.rotational { ", rotational" } else { "" },
                    if d.read_only { ", read-only" } else { "" },
                    d.write_guard
                ),
            );
        }
        if self.rdma.is_empty() {
            line(
                "rdma",
                "none (/sys/class/infiniband is empty or absent)".into(),
            );
        }
        for r in &self.rdma {
            line(
                "rdma",
                format!(
                    "{} port {}: {}, {}, {}",
                    r.device, r.port, r.state, r.link_layer, r.rate
                ),
            );
        }
        let g = &self.gpu;
        line(
            "gpu",
            if g.device_nodes.is_empty() && g.driver.is_none() {
                "none (no /dev/nvidia*, no /proc/driver/nvidia)".into()
            } else {
                format!(
                    "{}; {}; {}",
                    g.device_nodes.join(" "),
                    g.driver.clone().unwrap_or_default(),
                    g.models.join(", ")
                )
            },
        );
        for p in &self.pci {
            line(
                &format!("pci {}", p.bdf),
                format!(
                    "{} class {} node {}{}",
                    p.id,
                    p.class,
                    p.numa_node,
                    p.driver
                        .as_ref()
                        .map(|d| format!(" driver {d}"))
                        .unwrap_or_default()
                ),
            );
        }
        line(
            "cgroup",
            format!(
                "{}: {}",
                self.cgroup.version,
                self.cgroup.controllers.join(" ")
            ),
        );
        let r = &self.resctrl;
        line(
            "resctrl",
            format!(
                "CAT {}, MBA {}, MBM {}; {}",
                yn(r.cat),
                yn(r.mba),
                yn(r.mbm),
                r.mounted_at
                    .as_ref()
                    .map_or("not mounted".to_string(), |m| format!("mounted at {m}"))
            ),
        );
        let p = &self.perf;
        line(
            "perf",
            format!(
                "perf_event_paranoid {}; PMUs: {}",
                p.perf_event_paranoid
                    .map_or("unknown".into(), |v| v.to_string()),
                p.pmus
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
        for l in self.ddio.render_text().lines() {
            line("ddio", l.to_string());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_caches_agree_with_sysfs_here() {
        let root = HostRoot::system();
        let sysfs = caches(&root);
        let cpuid = cpuid_caches(&ddio::topology::CpuId::read(&root).vendor);
        if sysfs.is_empty() || cpuid.is_empty() {
            eprintln!("SKIPPED: no sysfs cache directory or no CPUID cache leaf here");
            return;
        }
        for c in &sysfs {
            let k = cpuid
                .iter()
                .find(|k| k.level == c.level && k.kind == c.kind)
                .unwrap_or_else(|| panic!("CPUID lacks L{} {}", c.level, c.kind));
            assert_eq!(
                (k.size_bytes, k.ways, k.line_bytes),
                (c.size_bytes, c.ways, c.line_bytes),
                "L{} {}",
                c.level,
                c.kind
            );
        }
    }

    #[test]
    fn sizes_from_sysfs() {
        assert_eq!(sysfs_size("32768K"), Some(32 << 20));
        assert_eq!(sysfs_size("2M"), Some(2 << 20));
        assert_eq!(sysfs_size("512"), Some(512));
        assert_eq!(sysfs_size("x"), None);
    }

    fn put(root: &HostRoot, abs: &str, text: &str) {
        let p = root.path(abs);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// Hardware this VM lacks (RDMA, a GPU, NVMe, resctrl), described from a
    /// fake tree with the kernel's file layouts.
    #[test]
    fn rdma_gpu_nvme_hugepages_resctrl_cgroup_from_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = ddio::fixture::intel_host(dir.path(), 1, 2).unwrap();
        put(&root, "/proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\nflags\t\t: fpu cat_l3 cdp_l3 mba cqm_llc cqm_mbm_total cqm_mbm_local\n");
        let ib = "/sys/class/infiniband/mlx5_0/ports/1";
        put(&root, &format!("{ib}/state"), "4: ACTIVE\n");
        put(&root, &format!("{ib}/link_layer"), "InfiniBand\n");
        put(&root, &format!("{ib}/rate"), "100 Gb/sec (4X EDR)\n");
        put(&root, "/dev/nvidia0", "");
        put(&root, "/dev/nvidiactl", "");
        put(
            &root,
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14\nGCC version: gcc\n",
        );
        put(
            &root,
            "/proc/driver/nvidia/gpus/0000:3b:00.0/information",
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 150\n",
        );
        let n = "/sys/class/nvme/nvme0";
        put(
            &root,
            &format!("{n}/model"),
            "Samsung SSD 980 PRO 1TB                 \n",
        );
        put(&root, &format!("{n}/serial"), "S5GXNF0R123456\n");
        put(&root, &format!("{n}/firmware_rev"), "5B2QGXA7\n");
        put(&root, &format!("{n}/transport"), "pcie\n");
        put(&root, &format!("{n}/address"), "0000:19:00.0\n");
        put(&root, &format!("{n}/nvme0n1/size"), "1953525168\n");
        put(
            &root,
            &format!("{n}/nvme0n1/queue/logical_block_size"),
            "512\n",
        );
        put(&root, &format!("{n}/nvme0n2/size"), "2048\n");
        put(&root, "/dev/ng0n1", "");
        let hp = "/sys/kernel/mm/hugepages/hugepages-2048kB";
        put(&root, &format!("{hp}/nr_hugepages"), "4\n");
        put(&root, &format!("{hp}/free_hugepages"), "3\n");
        put(&root, &format!("{hp}/resv_hugepages"), "1\n");
        put(
            &root,
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "always [madvise] never\n",
        );
        put(&root, "/proc/self/mountinfo", "25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n30 1 0:30 / /sys/fs/resctrl rw - resctrl resctrl rw\n");
        put(
            &root,
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        put(&root, "/proc/sys/kernel/perf_event_paranoid", "-1\n");
        put(
            &root,
            "/sys/bus/event_source/devices/uncore_iio_0/type",
            "45\n",
        );
        let r = HostReport::collect(&root, &HostInfo::default());
        assert_eq!(r.rdma.len(), 1);
        assert_eq!(
            (
                r.rdma[0].device.as_str(),
                r.rdma[0].port.as_str(),
                r.rdma[0].state.as_str()
            ),
            ("mlx5_0", "1", "4: ACTIVE")
        );
        assert_eq!(r.gpu.device_nodes, ["/dev/nvidia0", "/dev/nvidiactl"]);
        assert_eq!(r.gpu.models, ["NVIDIA H100 80GB HBM3"]);
        assert!(r.gpu.driver.as_deref().unwrap().contains("550.54.14"));
        let c = &r.nvme[0];
        assert_eq!(
            (c.model.as_str(), c.serial.as_str(), c.firmware.as_str()),
            ("Samsung SSD 980 PRO 1TB", "S5GXNF0R123456", "5B2QGXA7")
        );
        assert_eq!(c.namespaces.len(), 2);
        assert_eq!(c.namespaces[0].size_bytes, 1953525168 * 512);
        assert!(c.namespaces[0].generic_present);
        assert!(!c.namespaces[1].generic_present);
        assert_eq!(r.memory.hugepages[0].page_bytes, 2 << 20);
        assert_eq!(
            (
                r.memory.hugepages[0].total,
                r.memory.hugepages[0].free,
                r.memory.hugepages[0].reserved
            ),
            (4, 3, 1)
        );
        assert_eq!(r.memory.thp_enabled, "madvise");
        assert_eq!(r.cgroup.version, "v2");
        assert_eq!(
            r.cgroup.controllers,
            ["cpuset", "cpu", "io", "memory", "pids"]
        );
        assert!(r.resctrl.cat && r.resctrl.mba && r.resctrl.mbm);
        assert_eq!(r.resctrl.mounted_at.as_deref(), Some("/sys/fs/resctrl"));
        assert_eq!(r.perf.perf_event_paranoid, Some(-1));
        assert_eq!(r.perf.pmus[0].name, "uncore_iio_0");
        assert_eq!(r.perf.pmus[0].type_id, Some(45));
        assert_eq!(r.cpu.stepping, 8);
        assert_eq!(r.ddio.generation.as_deref(), Some("Sapphire Rapids"));
        let text = r.render_text();
        assert!(
            text.contains("nvme0n2: 1.00 MiB, 0 B blocks; /dev/ng0n2 absent"),
            "{text}"
        );
        assert!(
            text.contains(
                "rdma              mlx5_0 port 1: 4: ACTIVE, InfiniBand, 100 Gb/sec (4X EDR)"
            ),
            "{text}"
        );
    }

    #[test]
    fn fixture_host_is_described_from_its_own_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = ddio::fixture::intel_host(dir.path(), 2, 2).unwrap();
        fs::write(root.path("/sys/devices/system/cpu/online"), "0-3\n").unwrap();
        let r = HostReport::collect(&root, &HostInfo::default());
        assert_eq!(r.cpu.vendor, "GenuineIntel");
        assert_eq!(r.cpu.sockets, 2);
        assert_eq!(r.cpu.cpus_online, 4);
        assert_eq!(r.ddio.root_ports.len(), 2);
        assert_eq!(r.ddio.root_ports[0].ddio.as_deref(), Some("on"));
        assert!(r
            .pci
            .iter()
            .any(|p| p.bdf == ddio::fixture::NVME_DEVICE && p.id == "144d:a808"));
        assert!(r
            .render_text()
            .contains("ddio              root port 0000:16:00.0: DDIO on"));
    }
}
