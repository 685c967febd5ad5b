//! The text `dmalab info` prints: one `key  value` line per fact, written
//! section by section (CPU and caches, the system and its memory, the
//! devices, the controls dmalab uses).

use super::HostReport;
use dmalab_core::units::fmt_bytes;

fn b(v: u64) -> String {
    fmt_bytes(v as f64)
}

fn yn(v: bool) -> &'static str {
    if v {
        "yes"
    } else {
        "no"
    }
}

/// The lines of the report: a key padded to one column, then its value.
struct Lines(String);

impl Lines {
    fn line(&mut self, k: &str, v: String) {
        self.0.push_str(&format!("{k:<17} {v}\n"));
    }
}

impl HostReport {
    /// The text `dmalab info` prints.
    pub fn render_text(&self) -> String {
        let mut out = Lines(String::new());
        self.cpu_text(&mut out);
        self.system_text(&mut out);
        self.memory_text(&mut out);
        self.storage_text(&mut out);
        self.devices_text(&mut out);
        self.controls_text(&mut out);
        out.0
    }

    /// The CPU, its topology, caches and NUMA nodes.
    fn cpu_text(&self, out: &mut Lines) {
        let c = &self.cpu;
        out.line(
            "cpu",
            format!(
                "{} ({} family {} model {:#x} stepping {})",
                c.model_name, c.vendor, c.family, c.model, c.stepping
            ),
        );
        out.line(
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
            out.line(
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
            out.line(
                &format!("node {}", n.node),
                format!(
                    "CPUs {}, {} memory ({} free)",
                    n.cpus,
                    b(n.mem_total_bytes),
                    b(n.mem_free_bytes)
                ),
            );
        }
        if let Some(note) = self.node_memory_note() {
            out.line("node memory", note);
        }
    }

    /// The kernel, virtualisation and privilege.
    fn system_text(&self, out: &mut Lines) {
        let y = &self.system;
        out.line("kernel", y.kernel_release.clone());
        out.line(
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
        out.line(
            "privileged",
            format!("{} (facts that need root say so)", yn(y.privileged)),
        );
    }

    /// Memory, hugepage pools, THP, swap and zram.
    fn memory_text(&self, out: &mut Lines) {
        let m = &self.memory;
        out.line(
            "memory",
            format!(
                "{} total, {} available",
                b(m.mem_total_bytes),
                b(m.mem_available_bytes)
            ),
        );
        for h in &m.hugepages {
            out.line(
                &format!("hugepages {}", b(h.page_bytes)),
                format!(
                    "{} total, {} free, {} reserved",
                    h.total, h.free, h.reserved
                ),
            );
        }
        out.line(
            "THP",
            format!("enabled {}, defrag {}", m.thp_enabled, m.thp_defrag),
        );
        if m.swaps.is_empty() {
            out.line("swap", "none active".into());
        }
        for w in &m.swaps {
            out.line(
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
            out.line(
                &z.name,
                if z.disksize_bytes == 0 {
                    "not set up".into()
                } else {
                    format!("{} ({})", b(z.disksize_bytes), z.algorithm)
                },
            );
        }
    }

    /// io_uring, the NVMe controllers and their namespaces, block devices.
    fn storage_text(&self, out: &mut Lines) {
        let u = &self.io_uring;
        out.line(
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
            out.line("", n.clone());
        }
        if self.nvme.is_empty() {
            out.line("nvme", "none".into());
        }
        for n in &self.nvme {
            out.line(
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
                out.line(
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
            out.line(
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
    }

    /// RDMA ports, GPUs and PCI functions.
    fn devices_text(&self, out: &mut Lines) {
        if self.rdma.is_empty() {
            out.line(
                "rdma",
                "none (/sys/class/infiniband is empty or absent)".into(),
            );
        }
        for r in &self.rdma {
            out.line(
                "rdma",
                format!(
                    "{} port {}: {}, {}, {}",
                    r.device, r.port, r.state, r.link_layer, r.rate
                ),
            );
        }
        let g = &self.gpu;
        out.line(
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
            out.line(
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
    }

    /// The controls dmalab uses: cgroups, resctrl, perf, DDIO.
    fn controls_text(&self, out: &mut Lines) {
        out.line(
            "cgroup",
            format!(
                "{}: {}",
                self.cgroup.version,
                self.cgroup.controllers.join(" ")
            ),
        );
        let r = &self.resctrl;
        out.line(
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
        out.line(
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
            out.line("ddio", l.to_string());
        }
    }
}
