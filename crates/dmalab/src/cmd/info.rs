//! `dmalab info`: what this host has for DMA experiments (the report lives
//! in `dmalab_host::info`; this file only dispatches). `dmalab info nvme
//! DEVICE` sends Identify Controller and Identify Namespace through the admin
//! passthrough and shows model, serial, firmware, MDTS and the LBA formats
//! with their relative performance and the one in use.

use super::common::OutputArgs;
use anyhow::Context;
use dmalab_core::host::HostInfo;
use dmalab_core::schema::ResultDoc;
use dmalab_core::UsageError;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

/// Describe the host (CPU, caches, NUMA, memory, io_uring, NVMe, block
/// devices, RDMA, GPUs, hugepages, swap, cgroups, resctrl, PMUs, DDIO), or a
/// device. Reads only; runs as any user.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    what: Option<What>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Identify an NVMe namespace: model, serial, firmware, MDTS, LBA formats
    /// (relative performance, the one in use). Needs root (admin passthrough).
    Nvme(NvmeArgs),
    /// What this host can count (PMUs, perf_event_paranoid, resctrl) and
    /// which `--counters` recipes apply.
    Counters(super::stat::InfoArgs),
}

/// `dmalab info nvme DEVICE`.
#[derive(clap::Args, Debug)]
struct NvmeArgs {
    /// The namespace: its generic character device (`/dev/ng0n1`) or its
    /// block device (`/dev/nvme0n1`).
    #[arg(value_name = "DEVICE")]
    device: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
}

/// The resolved configuration of `dmalab info nvme`.
#[derive(Serialize, Debug)]
struct InfoConfig {
    /// The device named on the command line.
    device: String,
}

/// Runs `dmalab info`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        None => host(args.output),
        Some(What::Nvme(a)) => nvme(a),
        Some(What::Counters(a)) => super::stat::info(a),
    }
}

/// The resolved configuration of `dmalab info` (it has no options).
#[derive(Serialize, Debug)]
struct HostConfig {}

fn host(output: OutputArgs) -> anyhow::Result<ExitCode> {
    output.check(&mut dmalab_core::output::OutputGuard::new())?;
    let started = SystemTime::now();
    let host = HostInfo::collect();
    let report = dmalab_host::info::HostReport::collect(&dmalab_host::HostRoot::system(), &host);
    let text = report.render_text();
    out!("{text}");
    let doc = ResultDoc::new("info", host, HostConfig {}, report, started);
    output.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn nvme(a: NvmeArgs) -> anyhow::Result<ExitCode> {
    a.output
        .check(&mut dmalab_core::output::OutputGuard::new())?;
    let started = SystemTime::now();
    let info = identify(&a.device)?;
    let text = info.render_text();
    out!("{text}");
    let host = HostInfo::collect().with_target(&a.device);
    let doc = ResultDoc::new(
        "info nvme",
        host,
        InfoConfig {
            device: a.device.display().to_string(),
        },
        info,
        started,
    );
    a.output.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

/// Opens and identifies `device`; a path that is missing or not an NVMe
/// namespace is bad input (exit 2), a failing command is not.
fn identify(device: &Path) -> anyhow::Result<dmalab_nvme::NvmeInfo> {
    if !device.exists() {
        return Err(UsageError::new(
            "DEVICE",
            format!(
                "{} does not exist; name an NVMe namespace such as /dev/ng0n1 (see `nvme list`)",
                device.display()
            ),
        )
        .into());
    }
    let dev = dmalab_nvme::NvmeDevice::open(device, false).map_err(|e| match e {
        dmalab_nvme::Error::NotNvme { .. } => {
            anyhow::Error::new(UsageError::new("DEVICE", e.to_string()))
        }
        other => anyhow::Error::new(other),
    })?;
    dev.info()
        .with_context(|| format!("identify {}", device.display()))
}
