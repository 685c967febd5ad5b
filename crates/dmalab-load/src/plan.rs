//! The resolved plan of a load and the rules every plan obeys, whatever
//! the engine ([`Plan::validate`]). Rules that depend on a device (its
//! transfer limit, whether it may be written) belong to the engine's
//! [`Driver::preflight`](crate::engine::Driver::preflight).

use crate::buffer::{Fill, HugePages, PIECE_LIMIT};
use crate::engine::{EngineKind, EngineOptions};
use crate::limiter::{Arrival, RateSpec};
use crate::pattern::StreamConfig;
use dmalab_core::UsageError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Most commands in flight per worker (`--iodepth`).
pub const MAX_IODEPTH: u32 = 32768;

/// `--direction`, from memory's point of view (as in the thesis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The device writes memory: storage reads.
    Write,
    /// The device reads memory: storage writes.
    Read,
    /// The device both reads and writes memory: commands alternate (even
    /// commands as `write`, odd ones as `read`). Only `--engine gpu`.
    Both,
}

/// `--cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// The CPU does not touch the buffer.
    None,
    /// The CPU reads the whole buffer once before the first command.
    Once,
    /// The CPU reads each command's buffer region just before submitting it.
    Always,
}

/// `--cpus-allowed-policy` (as fio's `cpus_allowed_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum CpuPolicy {
    /// Every worker may run on every listed CPU.
    Shared,
    /// Worker i runs on the i-th listed CPU (round robin).
    Split,
}

/// The fully resolved configuration of a run (every default filled in).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The engine.
    pub engine: EngineKind,
    /// The target path (None for the null engine without a target).
    pub target: Option<PathBuf>,
    /// `file`, `block`, `char` or `none`.
    pub target_kind: String,
    /// True when dmalab created the target in this run.
    pub target_created: bool,
    /// Keep a created target afterwards.
    pub keep: bool,
    /// Size of the target, bytes.
    pub target_size_bytes: u64,
    /// Logical block size of the target, bytes.
    pub logical_block_size_bytes: u64,
    /// Direction, from memory's point of view.
    pub direction: Direction,
    /// The pattern stream's configuration (pattern, bs, buffer, region, ...).
    pub stream: StreamConfig,
    /// Number of registration pieces of the buffer.
    pub buffer_pieces: u64,
    /// Buffer contents.
    pub fill: Fill,
    /// Workers (threads, one ring each).
    pub workers: usize,
    /// CPUs the workers may use (empty: not pinned).
    pub cpus_allowed: Vec<usize>,
    /// How workers share the CPUs.
    pub cpus_allowed_policy: CpuPolicy,
    /// Commands in flight per worker at most.
    pub iodepth: u32,
    /// Page size of the buffer.
    pub hugepages: HugePages,
    /// Where the buffer's pages live (`--membind`, `--buffer-file`).
    #[serde(default)]
    pub placement: dmalab_core::placement::PlacementSpec,
    /// The buffer is locked in memory (always true).
    pub mlock: bool,
    /// Cache mode.
    pub cache: CacheMode,
    /// Rate limits.
    pub rate: RateSpec,
    /// Stop after this long, nanoseconds.
    pub runtime_ns: Option<u64>,
    /// Stop after this many commands.
    pub max_commands: Option<u64>,
    /// Stop after this many blocks.
    pub max_total_blocks: Option<u64>,
    /// Live counters file.
    pub live_stats: Option<PathBuf>,
    /// Rate-control file through which the limits change while running.
    #[serde(default)]
    pub rate_control: Option<PathBuf>,
    /// Workers run under SCHED_FIFO at this priority (None: normal).
    pub realtime_priority: Option<i32>,
    /// Record every DMA transfer into this dmalab trace file (dmalab-trace).
    pub trace: Option<PathBuf>,
    /// Compute the buffer's SHA-256 after the run (`--buffer-checksum`).
    #[serde(default)]
    pub buffer_checksum: bool,
    /// True when the region was not given and defaults to the whole target,
    /// so a region too small for one command is the target's size's fault
    /// (errors name `--size`, not `--region`). Not part of the result.
    #[serde(skip)]
    pub region_from_target: bool,
    /// The engine's own settings, under the engine's key (None: it takes
    /// none, or none was given). Carried, never read, here: only the
    /// engine's module looks inside.
    #[serde(flatten)]
    pub engine_options: Option<EngineOptions>,
}

impl Plan {
    /// True when data commands write to the target (`--direction read`,
    /// and every odd command of `both`).
    pub fn writes_storage(&self) -> bool {
        matches!(self.direction, Direction::Read | Direction::Both)
            && self.stream.pattern.moves_data()
    }

    /// CPUs for worker `i`.
    pub fn worker_cpus(&self, i: usize) -> Vec<usize> {
        if self.cpus_allowed.is_empty() {
            return Vec::new();
        }
        match self.cpus_allowed_policy {
            CpuPolicy::Shared => self.cpus_allowed.clone(),
            CpuPolicy::Split => vec![self.cpus_allowed[i % self.cpus_allowed.len()]],
        }
    }

    /// Checks the rules every plan obeys, whatever the engine: block size
    /// against the target's logical block size and the largest buffer
    /// piece, one command against the buffer and the region, the limits
    /// and stop conditions. Each error names the flag to change.
    pub fn validate(&self) -> Result<(), UsageError> {
        let s = &self.stream;
        let bs = s.bs_bytes;
        if bs == 0 {
            return Err(UsageError::new("--bs", "must be greater than 0"));
        }
        let lbs = self.logical_block_size_bytes.max(1);
        if !bs.is_multiple_of(lbs) {
            return Err(UsageError::new(
                "--bs",
                format!("{bs} is not a multiple of the target's logical block size ({lbs} bytes); use a multiple of it"),
            ));
        }
        if bs > PIECE_LIMIT {
            return Err(UsageError::new(
                "--bs",
                "must be at most 1G (the largest registered buffer piece)",
            ));
        }
        if s.max_blocks == 0 {
            return Err(UsageError::new("--max-blocks", "must be greater than 0"));
        }
        let cmd_blocks = s.command_blocks();
        if cmd_blocks > Plan::piece_bytes(bs) / bs {
            return Err(UsageError::new(
                "--max-blocks",
                "one command may move at most 1 GiB; lower --max-blocks or --bs",
            ));
        }
        let command_bytes = cmd_blocks * bs;
        if s.buffer_bytes == 0 {
            return Err(UsageError::new("--buffer", "must be greater than 0"));
        }
        if !s.buffer_bytes.is_multiple_of(bs) {
            return Err(UsageError::new(
                "--buffer",
                format!(
                    "{} bytes is not a multiple of --bs ({bs}); use a multiple of it",
                    s.buffer_bytes
                ),
            ));
        }
        if s.buffer_bytes < command_bytes {
            return Err(UsageError::new(
                "--buffer",
                format!(
                    "{} bytes is smaller than one command ({cmd_blocks} x {bs} bytes); use a larger --buffer or a smaller --max-blocks",
                    s.buffer_bytes
                ),
            ));
        }
        dmalab_core::cpus::check_threads("--workers", self.workers)?;
        if self.iodepth == 0 || self.iodepth > MAX_IODEPTH {
            return Err(UsageError::new(
                "--iodepth",
                format!("{} is out of range; use 1 to {MAX_IODEPTH}", self.iodepth),
            ));
        }
        if s.region_bytes == 0 && !self.region_from_target {
            return Err(UsageError::new("--region", "must be greater than 0"));
        }
        if !s.region_bytes.is_multiple_of(bs) {
            return Err(UsageError::new(
                "--region",
                format!("{} is not a multiple of --bs ({bs})", s.region_bytes),
            ));
        }
        if s.region_bytes > self.target_size_bytes {
            return Err(UsageError::new(
                "--region",
                format!(
                    "{} bytes is larger than the target ({} bytes)",
                    s.region_bytes, self.target_size_bytes
                ),
            ));
        }
        if s.region_bytes < command_bytes {
            return Err(UsageError::new(
                if self.region_from_target {
                    self.engine.size_option()
                } else {
                    "--region"
                },
                format!(
                    "the target region ({} bytes) is smaller than one command ({command_bytes} bytes)",
                    s.region_bytes
                ),
            ));
        }
        self.validate_placement()?;
        self.validate_rate()?;
        if self.runtime_ns == Some(0) {
            return Err(UsageError::new("--runtime", "must be longer than 0"));
        }
        if self.max_commands == Some(0) {
            return Err(UsageError::new("--commands", "must be greater than 0"));
        }
        if self.max_total_blocks == Some(0) {
            return Err(UsageError::new("--blocks", "must be greater than 0"));
        }
        if self.max_total_blocks.is_some() && !s.pattern.moves_data() {
            return Err(UsageError::new(
                "--blocks",
                "flush and noop move no blocks; use --commands or --runtime",
            ));
        }
        Ok(())
    }

    /// The buffer's placement: a node with memory, a buffer file that may
    /// be used. A buffer file brings its own pages, so it takes no
    /// `--hugepages`.
    fn validate_placement(&self) -> Result<(), UsageError> {
        let p = &self.placement;
        if p.buffer_file.is_some() && self.hugepages != HugePages::None {
            return Err(UsageError::new(
                "--buffer-file",
                "a buffer file brings its own pages (a DAX device maps in its own alignment); drop --hugepages",
            ));
        }
        p.validate(self.stream.buffer_bytes)
    }

    fn validate_rate(&self) -> Result<(), UsageError> {
        let r = &self.rate;
        if r.rate_bytes_per_s == Some(0) {
            return Err(UsageError::new("--rate", "must be greater than 0"));
        }
        if r.rate_iops == Some(0) {
            return Err(UsageError::new("--rate-iops", "must be greater than 0"));
        }
        if r.timeslot_ns == 0 {
            return Err(UsageError::new("--timeslot", "must be longer than 0"));
        }
        if r.burst && r.arrival == Arrival::Poisson {
            return Err(UsageError::new(
                "--burst",
                "cannot be combined with --arrival poisson; choose one",
            ));
        }
        if (r.burst || r.arrival == Arrival::Poisson) && !r.limited() {
            return Err(UsageError::new(
                if r.burst { "--burst" } else { "--arrival" },
                "needs a rate limit; add --rate or --rate-iops",
            ));
        }
        if let Some(p) = &self.rate_control {
            if !r.limited() {
                return Err(UsageError::new(
                    "--rate-control",
                    "changes a rate limit; add the starting --rate or --rate-iops",
                ));
            }
            dmalab_core::ratecontrol::check_replaceable(p)
                .map_err(|m| UsageError::new("--rate-control", m.to_string()))?;
        }
        Ok(())
    }

    /// Registration piece size for this plan's block size.
    pub fn piece_bytes(bs: u64) -> u64 {
        crate::pattern::piece_bytes(bs, PIECE_LIMIT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{DeviceOffsets, Pattern};

    fn plan() -> Plan {
        let bs = 4096;
        Plan {
            engine: EngineKind::Null,
            target: None,
            target_kind: "none".into(),
            target_created: false,
            keep: false,
            target_size_bytes: 1 << 20,
            logical_block_size_bytes: 512,
            direction: Direction::Write,
            stream: StreamConfig {
                pattern: Pattern::Random,
                write_storage: false,
                alternate: false,
                bs_bytes: bs,
                max_blocks: 4,
                buffer_bytes: 1 << 20,
                piece_bytes: Plan::piece_bytes(bs),
                region_bytes: 1 << 20,
                device_offsets: DeviceOffsets::Sequential,
                seed: 1,
            },
            buffer_pieces: 1,
            fill: Fill::Zero,
            workers: 1,
            cpus_allowed: Vec::new(),
            cpus_allowed_policy: CpuPolicy::Shared,
            iodepth: 16,
            hugepages: HugePages::None,
            placement: Default::default(),
            mlock: true,
            cache: CacheMode::None,
            rate: RateSpec {
                rate_bytes_per_s: None,
                rate_iops: None,
                timeslot_ns: 100_000_000,
                arrival: Arrival::Uniform,
                burst: false,
                seed: 1,
            },
            runtime_ns: Some(1_000_000_000),
            max_commands: None,
            max_total_blocks: None,
            live_stats: None,
            rate_control: None,
            realtime_priority: None,
            trace: None,
            buffer_checksum: false,
            region_from_target: false,
            engine_options: None,
        }
    }

    fn option_of(p: &Plan) -> String {
        p.validate().expect_err("must be refused").option
    }

    #[test]
    fn a_default_plan_is_valid() {
        plan().validate().unwrap();
    }

    #[test]
    fn block_size_rules() {
        let mut p = plan();
        p.logical_block_size_bytes = 4096;
        p.stream.bs_bytes = 2048;
        p.stream.buffer_bytes = 2048 * 8;
        assert_eq!(option_of(&p), "--bs");
        let mut p = plan();
        p.stream.bs_bytes = 2 << 30;
        assert_eq!(option_of(&p), "--bs");
        let mut p = plan();
        p.stream.bs_bytes = 0;
        assert_eq!(option_of(&p), "--bs");
    }

    #[test]
    fn one_command_must_fit_a_piece_the_buffer_and_the_region() {
        let mut p = plan();
        p.stream.max_blocks = 0;
        assert_eq!(option_of(&p), "--max-blocks");
        let mut p = plan();
        p.stream.max_blocks = (1 << 30) / 4096 + 1;
        assert_eq!(option_of(&p), "--max-blocks");
        let mut p = plan();
        p.stream.buffer_bytes = 4096 * 3;
        assert_eq!(option_of(&p), "--buffer");
        let mut p = plan();
        p.stream.buffer_bytes = 4096 * 4 + 512;
        assert_eq!(option_of(&p), "--buffer");
        let mut p = plan();
        p.stream.region_bytes = 4096 * 3;
        assert_eq!(option_of(&p), "--region");
        p.region_from_target = true;
        assert_eq!(option_of(&p), "--size");
        let mut p = plan();
        p.stream.region_bytes = 2 << 20;
        assert_eq!(option_of(&p), "--region");
        let mut p = plan();
        p.stream.region_bytes = 4096 * 4 + 512;
        assert_eq!(option_of(&p), "--region");
    }

    #[test]
    fn patterns_without_data_need_no_room_for_a_command() {
        let mut p = plan();
        p.stream.pattern = Pattern::Flush;
        p.stream.buffer_bytes = 4096;
        p.stream.region_bytes = 4096;
        p.validate().unwrap();
        p.max_total_blocks = Some(5);
        assert_eq!(option_of(&p), "--blocks");
    }

    #[test]
    fn single_moves_one_block_whatever_max_blocks_says() {
        let mut p = plan();
        p.stream.pattern = Pattern::Single;
        p.stream.max_blocks = 1000;
        p.stream.buffer_bytes = 4096;
        p.stream.region_bytes = 4096;
        p.validate().unwrap();
    }

    #[test]
    fn depth_workers_and_stops() {
        let mut p = plan();
        p.iodepth = 0;
        assert_eq!(option_of(&p), "--iodepth");
        p.iodepth = MAX_IODEPTH + 1;
        assert_eq!(option_of(&p), "--iodepth");
        let mut p = plan();
        p.workers = 0;
        assert_eq!(option_of(&p), "--workers");
        let mut p = plan();
        p.runtime_ns = Some(0);
        assert_eq!(option_of(&p), "--runtime");
        let mut p = plan();
        p.max_commands = Some(0);
        assert_eq!(option_of(&p), "--commands");
    }

    #[test]
    fn too_small_a_whole_target_names_the_engines_size_flag() {
        let mut p = plan();
        // One block of target, and commands of up to four.
        p.stream.region_bytes = 4096;
        p.target_size_bytes = 4096;
        p.region_from_target = true;
        // The flag comes from the engine, not from which engine fields the
        // plan happens to carry.
        for (kind, flag) in [
            (EngineKind::Rdma, "--rdma-remote-buffer"),
            (EngineKind::IoUring, "--size"),
            (EngineKind::Null, "--size"),
        ] {
            p.engine = kind;
            assert_eq!(option_of(&p), flag, "{kind:?}");
        }
        p.region_from_target = false;
        assert_eq!(option_of(&p), "--region");
    }

    #[test]
    fn both_is_refused_by_every_engine_but_gpu() {
        let mut p = plan();
        p.direction = Direction::Both;
        // Not an engine-independent rule ...
        p.validate().unwrap();
        // ... but each one-way engine's preflight refuses it first, before
        // it opens or connects to anything.
        for kind in [
            EngineKind::Null,
            EngineKind::IoUring,
            EngineKind::Nvme,
            EngineKind::Rdma,
        ] {
            p.engine = kind;
            let e = crate::engine::driver(kind, &Default::default())
                .preflight(&p)
                .unwrap_err();
            assert_eq!(e.option, "--direction", "{kind:?}");
            let text = e.to_string();
            assert!(
                text.contains("only for --engine gpu")
                    && text.contains(&format!("--engine {}", kind.as_str())),
                "{text}"
            );
        }
        p.engine = EngineKind::Gpu;
        let e = crate::engine::driver(EngineKind::Gpu, &Default::default())
            .preflight(&p)
            .unwrap_err();
        assert_ne!(e.option, "--direction", "{e}");
        // The one-way directions pass the refusal.
        for d in [Direction::Write, Direction::Read] {
            p.direction = d;
            p.engine = EngineKind::Null;
            crate::engine::driver(EngineKind::Null, &Default::default())
                .preflight(&p)
                .unwrap();
        }
    }

    #[test]
    fn engine_options_ride_under_the_engines_key_last_and_round_trip() {
        let mut p = plan();
        let j = serde_json::to_value(&p).unwrap();
        for key in ["engine_options", "gpu", "rdma", "uring", "nvme"] {
            assert!(j.get(key).is_none(), "{key}: {j}");
        }
        p.engine = EngineKind::IoUring;
        p.engine_options = Some(EngineOptions::Uring(Default::default()));
        let text = serde_json::to_string(&p).unwrap();
        // The key the result has always had, as the plan's last field.
        let at = text.find(",\"uring\":{").expect("uring key");
        assert!(text[at..].ends_with("}}"), "{text}");
        assert!(text[..at].ends_with("\"buffer_checksum\":false"), "{text}");
        let back: Plan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(j["uring"]["submit_batch"], 2, "{j}");
    }

    #[test]
    fn rate_rules() {
        let mut p = plan();
        p.rate.burst = true;
        assert_eq!(option_of(&p), "--burst");
        p.rate.rate_iops = Some(1000);
        p.validate().unwrap();
        p.rate.arrival = Arrival::Poisson;
        assert_eq!(option_of(&p), "--burst");
        p.rate.burst = false;
        p.validate().unwrap();
        p.rate.rate_iops = None;
        assert_eq!(option_of(&p), "--arrival");
        let mut p = plan();
        p.rate.timeslot_ns = 0;
        assert_eq!(option_of(&p), "--timeslot");
        let mut p = plan();
        p.rate_control = Some(PathBuf::from("/nonexistent/rc"));
        assert_eq!(option_of(&p), "--rate-control");
    }
}
