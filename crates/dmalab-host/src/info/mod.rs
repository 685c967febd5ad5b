//! `dmalab info`: one read-only report of what matters for DMA experiments
//! on this host. Every fact comes from /proc, /sys, /dev, CPUID or an
//! io_uring probe; nothing here changes the host (the io_uring probe makes
//! and closes a ring). Each fact that needs privileges says so instead of
//! failing, so the report runs as any user.

use crate::ddio;
use crate::{dir_names, read_trim, HostRoot};
use dmalab_core::host::HostInfo;
use dmalab_core::sys::swaps::SwapEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

mod cpu;
mod devices;
mod kernel;
mod memory;
mod text;

pub use cpu::cpuid_caches;
use cpu::*;
use devices::*;
use kernel::*;
use memory::*;

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
                    cpuid_caches(&ddio::topology::cpu_id(root).vendor)
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

    /// A warning when the NUMA nodes' `meminfo` files account for less
    /// than 90% of `/proc/meminfo`'s MemTotal. Seen on a Firecracker VM
    /// with an H100: node 0 said 4.34 GiB of 125.87 GiB, so a per-node
    /// figure there says nothing about where a buffer can be placed.
    pub fn node_memory_note(&self) -> Option<String> {
        use dmalab_core::units::fmt_bytes;
        let nodes: u64 = self.numa.iter().map(|n| n.mem_total_bytes).sum();
        let total = self.memory.mem_total_bytes;
        if self.numa.is_empty() || total == 0 || nodes as f64 >= 0.9 * total as f64 {
            return None;
        }
        Some(format!(
            "the nodes' meminfo holds {} of {} MemTotal ({:.1}%): this kernel does not count all memory per node, so per-node figures understate it",
            fmt_bytes(nodes as f64),
            fmt_bytes(total as f64),
            nodes as f64 / total as f64 * 100.0
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_caches_agree_with_sysfs_here() {
        let root = HostRoot::system();
        let sysfs = caches(&root);
        let cpuid = cpuid_caches(&ddio::topology::cpu_id(&root).vendor);
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
    fn node_memory_short_of_memtotal_is_said_not_silently_printed() {
        // The H100 VM: node 0's meminfo said 4550128 kB, /proc/meminfo
        // 131981020 kB.
        let mut r = HostReport::default();
        r.memory.mem_total_bytes = 131_981_020 * 1024;
        r.numa.push(NodeFacts {
            node: 0,
            cpus: "0-15".into(),
            mem_total_bytes: 4_550_128 * 1024,
            mem_free_bytes: 3_317_296 * 1024,
        });
        let text = r.render_text();
        assert!(
            text.contains(
                "node memory       the nodes' meminfo holds 4.34 GiB of 125.87 GiB MemTotal (3.4%)"
            ),
            "{text}"
        );
        r.numa[0].mem_total_bytes = r.memory.mem_total_bytes - (1 << 30);
        assert_eq!(r.node_memory_note(), None);
        assert!(!r.render_text().contains("node memory"));
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
