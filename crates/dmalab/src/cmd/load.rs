//! `dmalab load`: flags, validation into a resolved [`Plan`], the safety
//! guard, the run, and its output.

use crate::cmd::common::OutputArgs;
use anyhow::Context;
use dmalab_core::host::{DeviceInfo, HostInfo};
use dmalab_core::output::{Accept, OutputGuard};
use dmalab_core::safety::{check_write_target, Origin};
use dmalab_core::schema::{ResultDoc, RunStatus};
use dmalab_core::units::{parse_count, parse_count_rate, parse_duration, parse_rate, parse_size};
use dmalab_core::{cpus, UsageError};
use dmalab_load::buffer::{Fill, HugePages};
use dmalab_load::engine::EngineKind;
use dmalab_load::limiter::{Arrival, RateSpec};
use dmalab_load::pattern::{DeviceOffsets, Pattern, StreamConfig};
use dmalab_load::run::{CacheMode, CpuPolicy, Direction, Plan};
use dmalab_load::target::{self, PreparedTarget, TargetError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

/// Default size of a file dmalab creates (the scratch file too).
const DEFAULT_SIZE: &str = "256M";

/// Generate precisely shaped DMA load into one host buffer, through io_uring
/// with O_DIRECT on a file or block device (or NVMe passthrough).
///
/// With no --target, a 256 MiB scratch file in a temporary directory is
/// filled with data, read at random for 5 seconds and removed afterwards.
#[derive(clap::Args, Debug)]
pub struct Args {
    // Boxed: the flags are many, and the subcommand enum stays small.
    #[command(flatten)]
    inner: Box<LoadArgs>,
}

/// The flags of `dmalab load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// File or block device to move data to or from (a file that does not
    /// exist is created with --size bytes of data and removed afterwards
    /// unless --keep). Default: a scratch file in a temporary directory.
    #[arg(long, value_name = "PATH")]
    pub target: Option<PathBuf>,
    /// How commands reach the device.
    #[arg(long, value_enum, default_value_t = EngineKind::IoUring)]
    pub engine: EngineKind,
    /// Size of a file dmalab creates.
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Part of the target the device offsets stay in, from offset 0
    /// (default: all of it).
    #[arg(long, value_name = "SIZE")]
    pub region: Option<String>,
    /// Keep a file dmalab created.
    #[arg(long)]
    pub keep: bool,
    /// Memory access pattern.
    #[arg(long, value_enum, default_value_t = Pattern::Random)]
    pub pattern: Pattern,
    /// From memory's point of view: write = the device writes memory
    /// (storage reads), read = the device reads memory (storage writes).
    #[arg(long, value_enum, default_value_t = Direction::Write)]
    pub direction: Direction,
    /// Device offsets (default: sequential for storage reads, random for
    /// storage writes).
    #[arg(long, value_enum)]
    pub device_offsets: Option<DeviceOffsets>,
    /// Block size: the unit of patterns and accounting (a multiple of the
    /// device's logical block size).
    #[arg(long, default_value = "4K", value_name = "SIZE")]
    pub bs: String,
    /// Blocks per command for the random and full patterns.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_blocks: u32,
    /// Size of the DMA buffer (a multiple of --bs).
    #[arg(long, default_value = "64M", value_name = "SIZE")]
    pub buffer: String,
    /// Buffer contents: zero or random[:SEED].
    #[arg(long, default_value = "zero", value_name = "FILL")]
    pub fill: String,
    /// Worker threads, each with its own ring.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub workers: usize,
    /// CPUs the workers run on (e.g. 0, 0-3, 0,2).
    #[arg(long, value_name = "LIST")]
    pub cpus_allowed: Option<String>,
    /// shared: every worker on all listed CPUs; split: worker i on the i-th.
    #[arg(long, value_enum, default_value_t = CpuPolicy::Shared)]
    pub cpus_allowed_policy: CpuPolicy,
    /// Commands in flight per worker.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub iodepth: u32,
    /// Page size of the buffer (2m and 1g reserve hugetlb pages for the run
    /// and give them back afterwards).
    #[arg(long, value_enum, default_value_t = HugePages::None)]
    pub hugepages: HugePages,
    /// CPU reads of the buffer: once before the start, or always before each
    /// command (to keep DMA targets in the LLC with DDIO).
    #[arg(long, value_enum, default_value_t = CacheMode::None)]
    pub cache: CacheMode,
    /// Data rate limit, bytes per second (e.g. 100M/s).
    #[arg(long, value_name = "BYTES/s")]
    pub rate: Option<String>,
    /// Command rate limit, commands per second (e.g. 10k/s).
    #[arg(long, value_name = "N/s")]
    pub rate_iops: Option<String>,
    /// Budget period of the rate limits.
    #[arg(long, default_value = "100ms", value_name = "DURATION")]
    pub timeslot: String,
    /// Arrival process under a rate limit.
    #[arg(long, value_enum, default_value_t = Arrival::Uniform)]
    pub arrival: Arrival,
    /// Spend each timeslot's budget at its start (nvme-memload's way).
    #[arg(long)]
    pub burst: bool,
    /// Stop after this long (default 5s when no --commands or --blocks).
    #[arg(long, value_name = "DURATION")]
    pub runtime: Option<String>,
    /// Stop after this many commands.
    #[arg(long, value_name = "N")]
    pub commands: Option<String>,
    /// Stop after this many blocks.
    #[arg(long, value_name = "N")]
    pub blocks: Option<String>,
    /// Seed of the random pattern, device offsets and Poisson gaps.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,
    /// Allow writing to this exact existing file or device (only if every
    /// safety check passes).
    #[arg(long, value_name = "PATH")]
    pub allow_destroy: Option<PathBuf>,
    /// Keep live counters in this 4096-byte file (see docs/load.md).
    #[arg(long, value_name = "FILE")]
    pub live_stats: Option<PathBuf>,
    /// Create this 4096-byte rate-control file; limits written into it
    /// change --rate/--rate-iops while the load runs (see docs/throttle.md).
    #[arg(long, value_name = "FILE")]
    pub rate_control: Option<PathBuf>,
    /// Run the workers under SCHED_FIFO (priority 1) so pacing keeps its
    /// precision on a busy machine (needs root or CAP_SYS_NICE).
    #[arg(long)]
    pub realtime: bool,
    /// Record every DMA transfer (buffer address, length, direction, submit
    /// and completion times) into this dmalab-sim trace file.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Print the resolved plan and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Before a storage-write run, send Format NVM (no secure erase, same LBA
    /// format) to the namespace, as the thesis advises between write tests
    /// (--engine nvme; needs --allow-destroy for that device).
    #[arg(long)]
    pub format_before: bool,
    /// After the run, record the SHA-256 of the whole buffer
    /// (`buffer_sha256`): a storage read of what a storage write wrote
    /// brings back the same checksum.
    #[arg(long)]
    pub buffer_checksum: bool,
    /// No per-second lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Count hardware/software events from the workers' start to the last
    /// completion, per second on the load's clock: a recipe (software,
    /// core, skx-pcie, ...) or perf event specs (see docs/counters.md).
    #[arg(long, value_name = "RECIPE|EVENTS")]
    pub counters: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn positive(option: &str, v: u64) -> Result<u64, UsageError> {
    if v == 0 {
        return Err(UsageError::new(option, "must be greater than 0"));
    }
    Ok(v)
}

fn parse_fill(text: &str) -> Result<Fill, UsageError> {
    match text.split_once(':') {
        None if text == "zero" => Ok(Fill::Zero),
        None if text == "random" => Ok(Fill::Random { seed: 0 }),
        Some(("random", seed)) => seed.parse().map(|seed| Fill::Random { seed }).map_err(|_| {
            UsageError::new(
                "--fill",
                format!("'{seed}' is not a seed; use random:NUMBER"),
            )
        }),
        _ => Err(UsageError::new(
            "--fill",
            format!("'{text}' is not a fill; use zero, random or random:SEED"),
        )),
    }
}

/// What is known about the target before anything is created.
struct TargetInfo {
    path: Option<PathBuf>,
    exists: bool,
    kind: &'static str,
    size: u64,
    lbs: u64,
}

fn describe_target(a: &LoadArgs) -> Result<TargetInfo, UsageError> {
    let create_size = || -> Result<u64, UsageError> {
        positive(
            "--size",
            parse_size("--size", a.size.as_deref().unwrap_or(DEFAULT_SIZE))?,
        )
    };
    let Some(path) = &a.target else {
        if a.engine == EngineKind::Nvme {
            return Err(UsageError::new(
                "--target",
                "--engine nvme needs --target /dev/ngXnY",
            ));
        }
        let lbs = DeviceInfo::describe(&std::env::temp_dir())
            .map_or(512, |d| d.logical_block_size.max(512));
        return Ok(TargetInfo {
            path: None,
            exists: false,
            kind: if a.engine == EngineKind::Null {
                "none"
            } else {
                "file"
            },
            size: create_size()?,
            lbs,
        });
    };
    if !path.exists() {
        if a.engine == EngineKind::Nvme {
            return Err(UsageError::new(
                "--target",
                format!("{} does not exist", path.display()),
            ));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !parent.is_dir() {
            return Err(UsageError::new(
                "--target",
                format!(
                    "{} does not exist, so a file cannot be created in it",
                    parent.display()
                ),
            ));
        }
        let lbs = DeviceInfo::describe(&parent).map_or(512, |d| d.logical_block_size.max(512));
        return Ok(TargetInfo {
            path: Some(path.clone()),
            exists: false,
            kind: "file",
            size: create_size()?,
            lbs,
        });
    }
    if path.is_dir() {
        return Err(UsageError::new(
            "--target",
            format!(
                "{} is a directory; name a file in it (dmalab creates and removes it) or a block device",
                path.display()
            ),
        ));
    }
    let d = DeviceInfo::describe(path)
        .ok_or_else(|| UsageError::new("--target", format!("cannot use {}", path.display())))?;
    let kind = match d.kind.as_str() {
        "block" => "block",
        "char" => "char",
        _ => "file",
    };
    let mut size = d.size_bytes;
    let mut lbs = d.logical_block_size.max(512);
    if kind == "char" {
        if a.engine != EngineKind::Nvme {
            return Err(UsageError::new(
                "--target",
                format!(
                    "{} is a character device; only --engine nvme takes one (/dev/ngXnY)",
                    path.display()
                ),
            ));
        }
        match dmalab_core::safety::block_device_for_nvme_generic(path)
            .and_then(|b| DeviceInfo::describe(&b))
        {
            Some(b) => {
                size = b.size_bytes;
                lbs = b.logical_block_size.max(512);
            }
            None => {
                return Err(UsageError::new(
                    "--target",
                    format!(
                        "{} is not an NVMe generic namespace device (/dev/ngXnY with a matching /dev/nvmeXnY)",
                        path.display()
                    ),
                ))
            }
        }
    } else if a.engine == EngineKind::Nvme {
        return Err(UsageError::new(
            "--target",
            format!(
                "--engine nvme needs an NVMe generic character device (/dev/ngXnY), not {}",
                path.display()
            ),
        ));
    }
    if let Some(s) = &a.size {
        let s = parse_size("--size", s)?;
        if s != size {
            return Err(UsageError::new(
                "--size",
                format!(
                    "{} already exists ({size} bytes); --size only sizes a file dmalab creates: use --region to limit the part used",
                    path.display()
                ),
            ));
        }
    }
    Ok(TargetInfo {
        path: Some(path.clone()),
        exists: true,
        kind,
        size,
        lbs,
    })
}

/// Turns flags into a plan; nothing is created here.
fn plan(a: &LoadArgs, t: &TargetInfo) -> Result<Plan, UsageError> {
    let bs = positive("--bs", parse_size("--bs", &a.bs)?)?;
    if bs % t.lbs != 0 {
        return Err(UsageError::new(
            "--bs",
            format!("{bs} is not a multiple of the target's logical block size ({} bytes); use a multiple of it", t.lbs),
        ));
    }
    if bs > dmalab_load::buffer::PIECE_LIMIT {
        return Err(UsageError::new(
            "--bs",
            "must be at most 1G (the largest registered buffer piece)",
        ));
    }
    if a.max_blocks == 0 {
        return Err(UsageError::new("--max-blocks", "must be greater than 0"));
    }
    let cmd_blocks = if a.pattern.moves_data() && a.pattern != Pattern::Single {
        u64::from(a.max_blocks)
    } else {
        1
    };
    if cmd_blocks > Plan::piece_bytes(bs) / bs {
        return Err(UsageError::new(
            "--max-blocks",
            "one command may move at most 1 GiB; lower --max-blocks or --bs",
        ));
    }
    let buffer = positive("--buffer", parse_size("--buffer", &a.buffer)?)?;
    if buffer % bs != 0 {
        return Err(UsageError::new(
            "--buffer",
            format!("{buffer} bytes is not a multiple of --bs ({bs}); use a multiple of it"),
        ));
    }
    if a.pattern.moves_data() && buffer < cmd_blocks * bs {
        return Err(UsageError::new(
            "--buffer",
            format!(
                "{buffer} bytes is smaller than one command ({cmd_blocks} x {bs} bytes); use a larger --buffer or a smaller --max-blocks"
            ),
        ));
    }
    cpus::check_threads("--workers", a.workers)?;
    if a.iodepth == 0 || a.iodepth > 32768 {
        return Err(UsageError::new(
            "--iodepth",
            format!("{} is out of range; use 1 to 32768", a.iodepth),
        ));
    }
    let cpus_allowed = match &a.cpus_allowed {
        Some(l) => cpus::parse_cpu_list("--cpus-allowed", l)?,
        None => Vec::new(),
    };
    let fill = parse_fill(&a.fill)?;
    let region = match &a.region {
        Some(r) => positive("--region", parse_size("--region", r)?)?,
        None => t.size - t.size % bs,
    };
    if region % bs != 0 {
        return Err(UsageError::new(
            "--region",
            format!("{region} is not a multiple of --bs ({bs})"),
        ));
    }
    if region > t.size {
        return Err(UsageError::new(
            "--region",
            format!(
                "{region} bytes is larger than the target ({} bytes)",
                t.size
            ),
        ));
    }
    if a.pattern.moves_data() && region < cmd_blocks * bs {
        return Err(UsageError::new(
            if a.region.is_some() {
                "--region"
            } else {
                "--size"
            },
            format!(
                "the target region ({region} bytes) is smaller than one command ({} bytes)",
                cmd_blocks * bs
            ),
        ));
    }
    let rate_bytes_per_s = match &a.rate {
        Some(r) => Some(positive("--rate", parse_rate("--rate", r)?)?),
        None => None,
    };
    let rate_iops = match &a.rate_iops {
        Some(r) => Some(positive(
            "--rate-iops",
            parse_count_rate("--rate-iops", r)?,
        )?),
        None => None,
    };
    let timeslot = parse_duration("--timeslot", &a.timeslot)?;
    if timeslot.is_zero() {
        return Err(UsageError::new("--timeslot", "must be longer than 0"));
    }
    if a.burst && a.arrival == Arrival::Poisson {
        return Err(UsageError::new(
            "--burst",
            "cannot be combined with --arrival poisson; choose one",
        ));
    }
    if (a.burst || a.arrival == Arrival::Poisson)
        && rate_bytes_per_s.is_none()
        && rate_iops.is_none()
    {
        return Err(UsageError::new(
            if a.burst { "--burst" } else { "--arrival" },
            "needs a rate limit; add --rate or --rate-iops",
        ));
    }
    if let Some(p) = &a.rate_control {
        if rate_bytes_per_s.is_none() && rate_iops.is_none() {
            return Err(UsageError::new(
                "--rate-control",
                "changes a rate limit; add the starting --rate or --rate-iops",
            ));
        }
        dmalab_core::ratecontrol::check_replaceable(p)
            .map_err(|m| UsageError::new("--rate-control", m))?;
    }
    let runtime_ns = match &a.runtime {
        Some(r) => {
            let d = parse_duration("--runtime", r)?;
            if d.is_zero() {
                return Err(UsageError::new("--runtime", "must be longer than 0"));
            }
            Some(dmalab_core::schema::ns(d))
        }
        None if a.commands.is_none() && a.blocks.is_none() => Some(5_000_000_000),
        None => None,
    };
    let max_commands = match &a.commands {
        Some(c) => Some(positive("--commands", parse_count("--commands", c)?)?),
        None => None,
    };
    let max_total_blocks = match &a.blocks {
        Some(c) => Some(positive("--blocks", parse_count("--blocks", c)?)?),
        None => None,
    };
    if max_total_blocks.is_some() && !a.pattern.moves_data() {
        return Err(UsageError::new(
            "--blocks",
            "flush and noop move no blocks; use --commands or --runtime",
        ));
    }
    let device_offsets = a.device_offsets.unwrap_or(match a.direction {
        Direction::Write => DeviceOffsets::Sequential,
        Direction::Read => DeviceOffsets::Random,
    });
    let piece = Plan::piece_bytes(bs);
    Ok(Plan {
        engine: a.engine,
        target: t.path.clone(),
        target_kind: t.kind.into(),
        target_created: !t.exists && a.engine != EngineKind::Null,
        keep: a.keep,
        target_size_bytes: t.size,
        logical_block_size_bytes: t.lbs,
        direction: a.direction,
        stream: StreamConfig {
            pattern: a.pattern,
            write_storage: a.direction == Direction::Read,
            bs_bytes: bs,
            max_blocks: a.max_blocks,
            buffer_bytes: buffer,
            piece_bytes: piece,
            region_bytes: region,
            device_offsets,
            seed: a.seed,
        },
        buffer_pieces: buffer.div_ceil(piece),
        fill,
        workers: a.workers,
        cpus_allowed,
        cpus_allowed_policy: a.cpus_allowed_policy,
        iodepth: a.iodepth,
        hugepages: a.hugepages,
        mlock: true,
        cache: a.cache,
        rate: RateSpec {
            rate_bytes_per_s,
            rate_iops,
            timeslot_ns: dmalab_core::schema::ns(timeslot),
            arrival: a.arrival,
            burst: a.burst,
            seed: a.seed,
        },
        runtime_ns,
        max_commands,
        max_total_blocks,
        live_stats: a.live_stats.clone(),
        rate_control: a.rate_control.clone(),
        realtime_priority: a.realtime.then_some(1),
        trace: a.trace.clone(),
        buffer_checksum: a.buffer_checksum,
    })
}

/// `--engine nvme`: Identify the namespace (for the result header) and
/// check that one command fits its maximum transfer (MDTS), so a run is
/// refused up front rather than failing on its first command.
fn nvme_preflight(
    target: &std::path::Path,
    plan: &Plan,
) -> Result<dmalab_nvme::NvmeInfo, UsageError> {
    let cmd_blocks = match plan.stream.pattern {
        dmalab_load::pattern::Pattern::Random | dmalab_load::pattern::Pattern::Full => {
            u64::from(plan.stream.max_blocks)
        }
        _ => 1,
    };
    dmalab_load::engine::nvme::preflight(target, plan.stream.bs_bytes, cmd_blocks)
        .map_err(|(opt, msg)| UsageError::new(opt, msg))
}

fn target_error(e: TargetError) -> anyhow::Error {
    match e {
        TargetError::Usage(u) => u.into(),
        other => anyhow::Error::new(other),
    }
}

/// Runs `dmalab load`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let a = *args.inner;
    let started = SystemTime::now();
    let info = describe_target(&a)?;
    let mut plan = plan(&a, &info)?;
    let counters = super::counters::request("--counters", a.counters.as_deref())?;
    let nvme = match (&plan.target, plan.engine) {
        (Some(t), EngineKind::Nvme) => Some(nvme_preflight(t, &plan)?),
        _ => None,
    };

    // Safety: storage writes only to what we create, or to what the user
    // named with --allow-destroy and that passes every check.
    if plan.writes_storage() && plan.engine != EngineKind::Null && info.exists {
        if let Some(p) = &info.path {
            check_write_target(p, Origin::Existing, a.allow_destroy.as_deref()).map_err(|r| {
                UsageError::new(
                    if a.allow_destroy.is_some() {
                        "--allow-destroy"
                    } else {
                        "--target"
                    },
                    r.to_string(),
                )
            })?;
        }
    }
    // Every output before anything runs: none may be the target (or its
    // loop backing file), and --live-stats is a regular file or new.
    let mut guard = OutputGuard::new();
    if let Some(t) = &info.path {
        guard.protect("--target", t);
    }
    a.output.check(&mut guard)?;
    if let Some(o) = &a.trace {
        guard.check("--trace", o, Accept::FileOrStream)?;
    }
    if let Some(o) = &a.live_stats {
        guard.check("--live-stats", o, Accept::RegularFile)?;
    }
    if a.format_before && (plan.engine != EngineKind::Nvme || !plan.writes_storage()) {
        return Err(UsageError::new(
            "--format-before",
            "only formats before a storage-write run of the nvme engine; use it with --engine nvme --direction read",
        )
        .into());
    }
    if a.dry_run {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(ExitCode::SUCCESS);
    }
    if a.format_before {
        // The safety guard above passed and --allow-destroy named the device.
        if let Some(t) = &plan.target {
            let idx = dmalab_load::engine::nvme::format_before(t)
                .with_context(|| format!("--format-before: Format NVM of {}", t.display()))?;
            eprintln!(
                "dmalab: formatted {} (Format NVM, LBA format {idx}, no secure erase)",
                t.display()
            );
        }
    }

    // Pools and files a killed run left (its ledger) go first.
    dmalab_core::ledger::cleanup_at_start();
    // Prepare the target (this may create and fill a file).
    let mut prepared: Option<PreparedTarget> = match (plan.engine, &info.path, info.exists) {
        (EngineKind::Null, _, _) => None,
        (_, None, _) => Some(target::scratch(info.size).map_err(target_error)?),
        (_, Some(p), false) => {
            Some(target::create(p, info.size, "--target").map_err(target_error)?)
        }
        (_, Some(p), true) => {
            Some(target::existing(p, plan.engine == EngineKind::Nvme).map_err(target_error)?)
        }
    };
    if let Some(t) = &mut prepared {
        plan.target = Some(t.path.clone());
        if t.created && a.keep {
            t.keep();
            eprintln!("dmalab: keeping {}", t.path.display());
        }
    }
    let mut host = match &plan.target {
        Some(p) => HostInfo::collect().with_target(p),
        None => HostInfo::collect(),
    };
    if let (Some(n), Some(t)) = (&nvme, host.target.as_mut()) {
        dmalab_load::engine::nvme::fill_device_info(n, t);
    }
    let quiet = a.quiet;
    let mut on_sample = |s: &dmalab_load::result::Sample| {
        if !quiet {
            eprintln!("{}", s.line());
        }
    };
    // Only a live-stats file this run creates may be removed on failure.
    let live_stats_new = plan
        .live_stats
        .as_deref()
        .is_some_and(|p| std::fs::symlink_metadata(p).is_err());
    let mut counting = super::counters::LoadCounting::new(counters, &mut on_sample);
    let result =
        dmalab_load::run::run_observed(&plan, dmalab_core::signal::stop_flag(), &mut counting);
    if let (Some(ls), true) = (&plan.live_stats, live_stats_new) {
        let ours = std::fs::symlink_metadata(ls).is_ok_and(|m| m.file_type().is_file());
        if result.is_err() && ours {
            let _ = std::fs::remove_file(ls);
        }
    }
    let mut result = result.context("dmalab load")?;
    let mut text = result.text(plan.stream.bs_bytes);
    if let Some(n) = nvme {
        text = format!("{}{text}", dmalab_load::engine::nvme::header_line(&n));
        result.nvme = Some(n);
    }
    let counters = counting.finish(load_accounting(&plan, &result));
    if let Some(c) = &counters {
        text.push_str(&c.text());
    }
    let failed = result.first_error.is_some();
    let interrupted = result.interrupted;
    let result = super::counters::WithCounters { result, counters };
    let mut doc = ResultDoc::new("load", host, plan, result, started);
    doc.status = if failed {
        RunStatus::Failed
    } else if interrupted {
        RunStatus::Interrupted
    } else {
        RunStatus::Completed
    };
    print!("{text}");
    a.output.write(&doc, &text)?;
    drop(prepared);
    if failed {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The load's own accounting for the thesis' expected-vs-counted check
/// (storage and NVMe engines; the null engine moves nothing).
fn load_accounting(
    plan: &Plan,
    r: &dmalab_load::result::LoadResult,
) -> Option<dmalab_counters::check::LoadAccounting> {
    if plan.engine == EngineKind::Null {
        return None;
    }
    let blocks = if plan.stream.pattern.moves_data() {
        r.totals.blocks
    } else {
        0
    };
    // noop commands never reach the device: the thesis' baseline, whose
    // expected counts are zero.
    let commands = if plan.stream.pattern == Pattern::Noop {
        0
    } else {
        r.totals.commands
    };
    Some(dmalab_counters::check::LoadAccounting {
        bs_bytes: plan.stream.bs_bytes,
        commands,
        completions: commands,
        blocks_read_from_memory: if plan.direction == Direction::Read {
            blocks
        } else {
            0
        },
        blocks_written_to_memory: if plan.direction == Direction::Write {
            blocks
        } else {
            0
        },
    })
}
