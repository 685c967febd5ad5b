//! The flags of `dmalab load`, and their mapping into the library's
//! [`TargetRequest`] and [`Plan`] (parsing only: the rules live in
//! `Plan::validate` and the engines' drivers).

use crate::cmd::common::OutputArgs;
use dmalab_core::placement::PlacementSpec;
use dmalab_core::units::{parse_count, parse_count_rate, parse_duration, parse_rate, parse_size};
use dmalab_core::{cpus, UsageError};
use dmalab_load::buffer::{Fill, HugePages};
use dmalab_load::engine::gpu::GpuArgs;
use dmalab_load::engine::nvme::NvmeArgs;
use dmalab_load::engine::rdma::RdmaArgs;
use dmalab_load::engine::uring::UringArgs;
use dmalab_load::engine::{
    Driver, EngineFlags, EngineKind, EngineOptions, TargetInfo, TargetRequest,
};
use dmalab_load::limiter::{Arrival, RateSpec};
use dmalab_load::pattern::{DeviceOffsets, MaxBlocks, Pattern, StreamConfig};
use dmalab_load::plan::{CacheMode, CpuPolicy, Direction, Plan};
use std::path::PathBuf;

/// Generate precisely shaped DMA load into one host buffer, through io_uring
/// with O_DIRECT on a file or block device (or NVMe passthrough).
///
/// With no --target, a 256 MiB scratch file in a temporary directory is
/// filled with data, read at random for 5 seconds and removed afterwards.
#[derive(clap::Args, Debug)]
pub struct Args {
    // Boxed: the flags are many, and the subcommand enum stays small.
    #[command(flatten)]
    pub(super) inner: Box<LoadArgs>,
}

/// The flags of `dmalab load`.
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// File or block device to move data to or from (a file that does not
    /// exist is created with --size bytes of data and removed afterwards
    /// unless --keep). Default: a scratch file in a temporary directory.
    /// With --engine gpu: gpu:N.
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
    /// (storage reads), read = the device reads memory (storage writes),
    /// both = commands alternate (--engine gpu only).
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
    /// Blocks per command for the random and full patterns, or mdts: as
    /// many as the device's maximum transfer allows (--engine nvme, from
    /// Identify Controller and the namespace's LBA format).
    #[arg(long, default_value = "32", value_name = "N|mdts")]
    pub max_blocks: String,
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
    /// Bind the buffer to this NUMA node (mbind MPOL_BIND before its pages
    /// are touched; every page is checked afterwards with move_pages, and
    /// the run refused if one landed elsewhere). With --buffer-file: check
    /// that the file's pages are on this node.
    #[arg(long, visible_alias = "numa-node", value_name = "NODE")]
    pub membind: Option<usize>,
    /// Back the buffer with this file or DAX device (/dev/daxX.Y, e.g.
    /// persistent memory), mapped shared (MAP_SYNC where the file offers
    /// it). A path that does not exist is created and removed afterwards;
    /// an existing one must be at least --buffer long and named with
    /// --allow-destroy (the fill overwrites it); it is never truncated.
    #[arg(long, value_name = "PATH")]
    pub buffer_file: Option<PathBuf>,
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
    /// safety check passes): the target, or an existing --buffer-file (give
    /// the flag once for each).
    #[arg(long, value_name = "PATH")]
    pub allow_destroy: Vec<PathBuf>,
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
    /// and completion times) into this dmalab trace file.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Print the resolved plan and exit.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub nvme: NvmeArgs,
    /// After the run, record the SHA-256 of the whole buffer
    /// (`buffer_sha256`): a storage read of what a storage write wrote
    /// brings back the same checksum.
    #[arg(long)]
    pub buffer_checksum: bool,
    /// Count hardware/software events from the workers' start to the last
    /// completion, per second on the load's clock: a recipe (software,
    /// core, skx-pcie, ...) or perf event specs (see docs/counters.md).
    #[arg(long, value_name = "RECIPE|EVENTS")]
    pub counters: Option<String>,
    /// exact: --counters counted unscaled, which one load run can do only
    /// for a request of one event group (refused otherwise, naming the
    /// runs needed); multiplexed (default): scaled by running time.
    #[arg(long, value_name = "MODE", requires = "counters")]
    pub counters_mode: Option<String>,
    /// Exact mode with the rotation kept by the caller: this is run N
    /// (0-based) of it and counts event group N mod the number of groups
    /// (`dmalab run` passes its repetition here).
    #[arg(long, value_name = "N", requires = "counters")]
    pub counters_run: Option<usize>,
    #[command(flatten)]
    pub rdma: RdmaArgs,
    #[command(flatten)]
    pub gpu: GpuArgs,
    #[command(flatten)]
    pub uring: UringArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn positive(option: &str, v: u64) -> Result<u64, UsageError> {
    if v == 0 {
        return Err(UsageError::new(option, "must be greater than 0"));
    }
    Ok(v)
}

fn parsed<T>(
    option: &str,
    text: &Option<String>,
    parse: fn(&str, &str) -> Result<T, UsageError>,
) -> Result<Option<T>, UsageError> {
    text.as_deref().map(|t| parse(option, t)).transpose()
}

impl LoadArgs {
    /// What the flags say about the target.
    pub fn target_request(&self) -> Result<TargetRequest, UsageError> {
        let engine = self.engine_flags();
        let (option, size) = engine.target_size(self.engine, self.size.as_deref())?;
        let size_bytes = size.map(|t| parse_size(option, t)).transpose()?;
        engine.refuse_before_inspect(self.engine)?;
        Ok(TargetRequest {
            target: self.target.clone(),
            size_bytes,
            allow_destroy: self.target_allow_destroy(),
        })
    }

    /// The flags only one engine takes, each engine's group.
    fn engine_flags(&self) -> EngineFlags<'_> {
        EngineFlags {
            rdma: &self.rdma,
            gpu: &self.gpu,
            uring: &self.uring,
            nvme: &self.nvme,
        }
    }

    /// The `--allow-destroy` meant for the target: the first that does not
    /// name the buffer file.
    fn target_allow_destroy(&self) -> Option<PathBuf> {
        self.allow_destroy
            .iter()
            .find(|p| !self.names_buffer_file(p))
            .cloned()
    }

    fn names_buffer_file(&self, p: &std::path::Path) -> bool {
        self.buffer_file
            .as_deref()
            .is_some_and(|b| dmalab_core::safety::same_path(b, p))
    }

    /// Where the buffer lives, as the flags say.
    fn placement(&self) -> PlacementSpec {
        PlacementSpec {
            membind: self.membind,
            buffer_file: self.buffer_file.clone(),
            buffer_file_allowed: self.allow_destroy.iter().any(|p| self.names_buffer_file(p)),
        }
    }

    /// The plan the flags describe, on the inspected target; nothing is
    /// checked here beyond parsing (see [`Plan::validate`]).
    pub fn plan(&self, t: &TargetInfo, driver: &mut dyn Driver) -> Result<Plan, UsageError> {
        let bs = positive("--bs", parse_size("--bs", &self.bs)?)?;
        let max_blocks = match MaxBlocks::parse("--max-blocks", &self.max_blocks)? {
            MaxBlocks::Count(n) => n,
            MaxBlocks::Mdts => {
                MaxBlocks::Mdts.resolve("--max-blocks", bs, driver.max_transfer_bytes()?)?
            }
        };
        let buffer = positive("--buffer", parse_size("--buffer", &self.buffer)?)?;
        let region = match parsed("--region", &self.region, parse_size)? {
            Some(r) => positive("--region", r)?,
            None => t.size_bytes - t.size_bytes % bs,
        };
        let cpus_allowed = match &self.cpus_allowed {
            Some(l) => cpus::parse_cpu_list("--cpus-allowed", l)?,
            None => Vec::new(),
        };
        let timeslot = parse_duration("--timeslot", &self.timeslot)?;
        let runtime = parsed("--runtime", &self.runtime, parse_duration)?;
        let runtime_ns = match runtime {
            Some(d) => Some(dmalab_core::schema::ns(d)),
            None if self.commands.is_none() && self.blocks.is_none() => Some(5_000_000_000),
            None => None,
        };
        // Parsed before the engine's options, so that of two bad flags the
        // same one is named as before they were gathered into one value.
        let fill = Fill::parse("--fill", &self.fill)?;
        let rate = RateSpec {
            rate_bytes_per_s: parsed("--rate", &self.rate, parse_rate)?,
            rate_iops: parsed("--rate-iops", &self.rate_iops, parse_count_rate)?,
            timeslot_ns: dmalab_core::schema::ns(timeslot),
            arrival: self.arrival,
            burst: self.burst,
            seed: self.seed,
        };
        let max_commands = parsed("--commands", &self.commands, parse_count)?;
        let max_total_blocks = parsed("--blocks", &self.blocks, parse_count)?;
        let engine_options = self.engine_flags().options(self.engine)?;
        let direction = EngineOptions::memory_direction(engine_options.as_ref(), self.direction);
        let device_offsets = self.device_offsets.unwrap_or(match direction {
            Direction::Write | Direction::Both => DeviceOffsets::Sequential,
            Direction::Read => DeviceOffsets::Random,
        });
        let piece = Plan::piece_bytes(bs.min(dmalab_load::buffer::PIECE_LIMIT));
        Ok(Plan {
            engine: self.engine,
            target: t.path.clone(),
            target_kind: t.kind.clone(),
            target_created: t.creates,
            keep: self.keep,
            target_size_bytes: t.size_bytes,
            logical_block_size_bytes: t.logical_block_size,
            direction,
            stream: StreamConfig {
                pattern: self.pattern,
                write_storage: direction == Direction::Read,
                alternate: direction == Direction::Both,
                bs_bytes: bs,
                max_blocks,
                buffer_bytes: buffer,
                piece_bytes: piece,
                region_bytes: region,
                device_offsets,
                seed: self.seed,
            },
            buffer_pieces: buffer.div_ceil(piece),
            fill,
            workers: self.workers,
            cpus_allowed,
            cpus_allowed_policy: self.cpus_allowed_policy,
            iodepth: self.iodepth,
            hugepages: self.hugepages,
            placement: self.placement(),
            mlock: true,
            cache: self.cache,
            rate,
            runtime_ns,
            max_commands,
            max_total_blocks,
            live_stats: self.live_stats.clone(),
            rate_control: self.rate_control.clone(),
            realtime_priority: self.realtime.then_some(1),
            trace: self.trace.clone(),
            buffer_checksum: self.buffer_checksum,
            region_from_target: self.region.is_none(),
            engine_options,
        })
    }
}
