//! io_uring (probed), PCI functions, NVMe, block devices and the write
//! guard, RDMA ports, GPUs.

use super::*;

pub(super) fn io_uring_facts(root: &HostRoot) -> UringFacts {
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

pub(super) fn pci(root: &HostRoot) -> Vec<PciFacts> {
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

pub(super) fn nvme(root: &HostRoot) -> Vec<NvmeController> {
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

pub(super) fn block(root: &HostRoot) -> Vec<BlockFacts> {
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
                    Err(r) if r.check == "readable" && !dmalab_core::sys::is_root() => {
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

pub(super) fn rdma(root: &HostRoot) -> Vec<RdmaPort> {
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

pub(super) fn gpu(root: &HostRoot) -> GpuFacts {
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
