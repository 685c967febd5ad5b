//! The resolved plan of a `dmalab page` run: every pmbench parameter with
//! its default filled in, and the set-up (memory limit, swap, sysctls).
//!
//! The binary validates flags into a [`PageConfig`]; nothing past this point
//! knows about the command line.

use dmalab_core::units::parse_size;
use dmalab_core::UsageError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Page size the probe assumes (x86-64 and most arm64 kernels).
pub const PAGE_SIZE: u64 = 4096;

/// Spatial access pattern (which page each access goes to).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Deterministic walk with a fixed stride (pages), wrapping at the set end.
    Linear,
    /// Every page of the set equally likely (pmbench's default).
    Uniform,
    /// Bell-shaped around the middle of the set; `shape` is the standard
    /// deviation as a fraction of the set.
    Normal,
    /// Bounded Pareto over the set (hot pages at its start); `shape` is alpha.
    Pareto,
    /// Zipf over the set (page k with weight 1/k^shape).
    Zipf,
}

impl Pattern {
    /// Name as pmbench spells it (`-p`).
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Linear => "linear",
            Pattern::Uniform => "uniform",
            Pattern::Normal => "normal",
            Pattern::Pareto => "pareto",
            Pattern::Zipf => "zipf",
        }
    }

    /// The shape used when the user gives none.
    pub fn default_shape(self) -> f64 {
        match self {
            Pattern::Linear => 1.0,
            Pattern::Uniform => 0.0,
            Pattern::Normal => 0.125,
            Pattern::Pareto => 1.16,
            Pattern::Zipf => 1.0,
        }
    }
}

/// How each access is timed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    /// x86 `rdtscp` on both sides (waits for earlier instructions).
    Rdtscp,
    /// x86 `lfence; rdtsc; lfence`.
    Rdtsc,
    /// `clock_gettime(CLOCK_MONOTONIC)` through the vDSO (pmbench's `perfc`).
    Clock,
}

impl TimerKind {
    /// Name as pmbench spells it (`-t`); `clock` is pmbench's `perfc`.
    pub fn name(self) -> &'static str {
        match self {
            TimerKind::Rdtscp => "rdtscp",
            TimerKind::Rdtsc => "rdtsc",
            TimerKind::Clock => "clock",
        }
    }
}

/// How each access is classified as hit / minor fault / major fault.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum ClassifyMethod {
    /// `getrusage(RUSAGE_THREAD)` before and after every access: the kernel's
    /// own per-thread `min_flt`/`maj_flt` counters.
    Rusage,
    /// Per-thread perf software events page-faults-maj/-min with period 1
    /// into mmap'd rings: the same kernel accounting as `rusage`, but a hit
    /// costs two user-memory loads instead of two system calls.
    Perf,
    /// No classification (only to measure what the classifier costs).
    None,
}

/// The in-page offset of each access.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "kind", content = "bytes")]
pub enum Offset {
    /// Uniformly random, 4-byte aligned (pmbench's default, `-o -1`).
    Random,
    /// Fixed byte offset (a multiple of 4 below the page size).
    Fixed(u64),
}

impl Offset {
    /// Reads `--offset`: `random` (or pmbench's `-1`) or a byte offset;
    /// [`PageConfig::validate`] checks the offset's range.
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        match text.trim() {
            "random" | "-1" => Ok(Offset::Random),
            o => o.parse().map(Offset::Fixed).map_err(|_| {
                UsageError::new(
                    "--offset",
                    format!("'{o}' is neither 'random' nor a byte offset"),
                )
            }),
        }
    }
}

/// Which swap the run uses.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SwapSpec {
    /// The host's swap as it is (possibly none).
    Existing,
    /// A new zram device of `size_bytes` with `algorithm` (None: the kernel's
    /// default).
    Zram {
        /// Disk size of the zram device, bytes.
        size_bytes: Option<u64>,
        /// Compression algorithm, as in /sys/block/zramN/comp_algorithm.
        algorithm: Option<String>,
    },
    /// A new swap file at `path` of `size_bytes` (the file must not exist).
    File {
        /// Where the swap file is created.
        path: PathBuf,
        /// Its size, bytes.
        size_bytes: u64,
    },
    /// A block device the user names (its contents are overwritten).
    Dev {
        /// The block device.
        path: PathBuf,
    },
}

impl SwapSpec {
    /// Parses `--swap`: `existing`, `zram[:SIZE[:ALGORITHM]]`,
    /// `file:PATH:SIZE`, `dev:PATH`.
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        let opt = "--swap";
        let t = text.trim();
        if t == "existing" {
            return Ok(SwapSpec::Existing);
        }
        if t == "zram" || t.starts_with("zram:") {
            let mut parts = t.splitn(3, ':').skip(1);
            let size_bytes = match parts.next() {
                None | Some("") => None,
                Some(s) => Some(parse_size(opt, s)?),
            };
            if size_bytes == Some(0) {
                return Err(UsageError::new(opt, "zram size must be larger than 0"));
            }
            let algorithm = parts.next().filter(|a| !a.is_empty()).map(str::to_string);
            return Ok(SwapSpec::Zram {
                size_bytes,
                algorithm,
            });
        }
        if let Some(rest) = t.strip_prefix("file:") {
            let (path, size) = rest.rsplit_once(':').ok_or_else(|| {
                UsageError::new(
                    opt,
                    format!("'{text}' lacks a size; use file:PATH:SIZE, e.g. file:/var/tmp/dmalab.swap:1G"),
                )
            })?;
            if path.is_empty() {
                return Err(UsageError::new(
                    opt,
                    format!("'{text}' lacks a path; use file:PATH:SIZE"),
                ));
            }
            let size_bytes = parse_size(opt, size)?;
            if size_bytes < 40 * PAGE_SIZE {
                return Err(UsageError::new(
                    opt,
                    format!("swap file size {size_bytes} bytes is too small; use at least 160K (40 pages)"),
                ));
            }
            return Ok(SwapSpec::File {
                path: PathBuf::from(path),
                size_bytes,
            });
        }
        if let Some(path) = t.strip_prefix("dev:") {
            if path.is_empty() {
                return Err(UsageError::new(
                    opt,
                    format!("'{text}' lacks a device; use dev:/dev/XXX"),
                ));
            }
            return Ok(SwapSpec::Dev {
                path: PathBuf::from(path),
            });
        }
        Err(UsageError::new(
            opt,
            format!("unknown swap spec '{text}'; use existing, zram[:SIZE[:ALGORITHM]], file:PATH:SIZE or dev:PATH"),
        ))
    }

    /// True when dmalab adds a swap device for the run.
    pub fn adds_device(&self) -> bool {
        !matches!(self, SwapSpec::Existing)
    }
}

/// The fully resolved configuration of one `dmalab page` run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PageConfig {
    /// Size of the anonymous mapping, bytes (pmbench `-m`).
    pub map_bytes: u64,
    /// The part of the map the accesses go to, bytes (pmbench `-s`).
    pub set_bytes: u64,
    /// Measuring threads (pmbench `-j`).
    pub threads: usize,
    /// Share of accesses that are reads, percent (pmbench `-r`).
    pub read_pct: u32,
    /// Spatial pattern (pmbench `-p`).
    pub pattern: Pattern,
    /// Pattern shape (pmbench `-e`): stride for linear, stddev fraction for
    /// normal, alpha for pareto, exponent for zipf.
    pub shape: f64,
    /// In-page offset (pmbench `-o`).
    pub offset: Offset,
    /// Timing method (pmbench `-t`).
    pub timer: TimerKind,
    /// Fault classification method.
    pub classify: ClassifyMethod,
    /// Skip the warm-up pass over the working set (pmbench `-c`).
    pub cold: bool,
    /// Fill the whole map with random data first (pmbench `-i`).
    pub init_random: bool,
    /// Busy wait between accesses, nanoseconds (pmbench `-d`, in cycles there).
    pub delay_ns: u64,
    /// Measured duration, nanoseconds (pmbench's positional DURATION).
    pub runtime_ns: u64,
    /// Every write is a read then a write of the same word.
    pub write_after_read: bool,
    /// Seed of the access pattern generators.
    pub seed: u64,
    /// Memory limit of the measured process's cgroup, bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Swap used by the run.
    pub swap: SwapSpec,
    /// vm.page-cluster for the run (0 disables swap readahead clustering).
    pub page_cluster: Option<u32>,
    /// Swappiness for the run (the cgroup's on cgroup v1, else global).
    pub swappiness: Option<u32>,
    /// Raw media latency of the swap device, for the Table 2 OS overhead.
    pub media_latency_ns: Option<u64>,
    /// The exact device `--swap dev:PATH` may overwrite (`--allow-destroy`).
    #[serde(default)]
    pub allow_destroy: Option<PathBuf>,
}

impl PageConfig {
    /// Checks the combination of parameters; errors name the flag.
    pub fn validate(&self) -> Result<(), UsageError> {
        for (opt, v) in [("--map", self.map_bytes), ("--set", self.set_bytes)] {
            if v % PAGE_SIZE != 0 {
                return Err(UsageError::new(
                    opt,
                    format!("{v} bytes is not a whole number of 4K pages"),
                ));
            }
        }
        if self.map_bytes < PAGE_SIZE {
            return Err(UsageError::new("--map", "must be at least one page (4K)"));
        }
        if self.set_bytes < PAGE_SIZE {
            return Err(UsageError::new("--set", "must be at least one page (4K)"));
        }
        if self.set_bytes > self.map_bytes {
            return Err(UsageError::new(
                "--set",
                format!(
                    "working set of {} bytes is larger than the map of {} bytes; make --set at most --map",
                    self.set_bytes, self.map_bytes
                ),
            ));
        }
        if let Some(lim) = self.memory_limit_bytes {
            if lim > self.map_bytes {
                return Err(UsageError::new(
                    "--memory-limit",
                    format!(
                        "limit of {lim} bytes is larger than the map of {} bytes, so nothing would page; make it smaller than --map",
                        self.map_bytes
                    ),
                ));
            }
            if lim < 8 << 20 {
                return Err(UsageError::new(
                    "--memory-limit",
                    format!("limit of {lim} bytes leaves the measuring process no room to run; use at least 8M"),
                ));
            }
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(UsageError::new("--threads", "must be between 1 and 256"));
        }
        if self.read_pct > 100 {
            return Err(UsageError::new("--read-pct", "must be between 0 and 100"));
        }
        if self.runtime_ns == 0 {
            return Err(UsageError::new("--runtime", "must be longer than 0"));
        }
        if let Offset::Fixed(o) = self.offset {
            if o % 4 != 0 || o >= PAGE_SIZE {
                return Err(UsageError::new(
                    "--offset",
                    format!("{o} is not a multiple of 4 below 4096; use e.g. 0, 64 or random"),
                ));
            }
        }
        let shape_ok = match self.pattern {
            Pattern::Linear => self.shape >= 1.0 && self.shape.fract() == 0.0,
            Pattern::Uniform => true,
            Pattern::Normal => self.shape > 0.0 && self.shape.is_finite(),
            Pattern::Pareto | Pattern::Zipf => self.shape > 0.0 && self.shape.is_finite(),
        };
        if !shape_ok {
            let what = match self.pattern {
                Pattern::Linear => "a whole stride in pages, at least 1",
                Pattern::Normal => "a standard deviation as a fraction of the set, above 0",
                _ => "an exponent above 0",
            };
            return Err(UsageError::new(
                "--shape",
                format!(
                    "{} is not valid for pattern {}; give {what}",
                    self.shape,
                    self.pattern.name()
                ),
            ));
        }
        if let Some(pc) = self.page_cluster {
            if pc > 31 {
                return Err(UsageError::new(
                    "--page-cluster",
                    "must be between 0 and 31",
                ));
            }
        }
        if let Some(s) = self.swappiness {
            if s > 200 {
                return Err(UsageError::new("--swappiness", "must be between 0 and 200"));
            }
        }
        if let SwapSpec::Zram {
            size_bytes: Some(s),
            ..
        } = self.swap
        {
            if s < 40 * PAGE_SIZE {
                return Err(UsageError::new("--swap", "zram size must be at least 160K"));
            }
        }
        Ok(())
    }

    /// True when the run changes the host (needs root and cleanup).
    pub fn changes_host(&self) -> bool {
        self.memory_limit_bytes.is_some()
            || self.swap.adds_device()
            || self.page_cluster.is_some()
            || self.swappiness.is_some()
    }

    /// Pages in the working set.
    pub fn set_pages(&self) -> u64 {
        self.set_bytes / PAGE_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn base() -> PageConfig {
        PageConfig {
            map_bytes: 64 << 20,
            set_bytes: 64 << 20,
            threads: 1,
            read_pct: 50,
            pattern: Pattern::Uniform,
            shape: 0.0,
            offset: Offset::Random,
            timer: TimerKind::Clock,
            classify: ClassifyMethod::Rusage,
            cold: false,
            init_random: false,
            delay_ns: 0,
            runtime_ns: 1_000_000,
            write_after_read: false,
            seed: 1,
            memory_limit_bytes: None,
            swap: SwapSpec::Existing,
            page_cluster: None,
            swappiness: None,
            media_latency_ns: None,
            allow_destroy: None,
        }
    }

    #[test]
    fn swap_specs() {
        assert_eq!(SwapSpec::parse("existing").unwrap(), SwapSpec::Existing);
        assert_eq!(
            SwapSpec::parse("zram").unwrap(),
            SwapSpec::Zram {
                size_bytes: None,
                algorithm: None
            }
        );
        assert_eq!(
            SwapSpec::parse("zram:1G:lz4").unwrap(),
            SwapSpec::Zram {
                size_bytes: Some(1 << 30),
                algorithm: Some("lz4".into())
            }
        );
        assert_eq!(
            SwapSpec::parse("file:/tmp/a:b:1M").unwrap(),
            SwapSpec::File {
                path: "/tmp/a:b".into(),
                size_bytes: 1 << 20
            }
        );
        assert!(SwapSpec::parse("file:/tmp/x").is_err());
        assert!(SwapSpec::parse("dev:").is_err());
        let e = SwapSpec::parse("nvram").unwrap_err();
        assert_eq!(e.option, "--swap");
        assert!(e.message.contains("unknown swap spec"));
    }

    #[test]
    fn validation() {
        assert!(base().validate().is_ok());
        let mut c = base();
        c.set_bytes = c.map_bytes + PAGE_SIZE;
        assert_eq!(c.validate().unwrap_err().option, "--set");
        let mut c = base();
        c.memory_limit_bytes = Some(c.map_bytes * 2);
        assert_eq!(c.validate().unwrap_err().option, "--memory-limit");
        let mut c = base();
        c.pattern = Pattern::Linear;
        c.shape = 0.5;
        assert_eq!(c.validate().unwrap_err().option, "--shape");
        let mut c = base();
        c.offset = Offset::Fixed(3);
        assert_eq!(c.validate().unwrap_err().option, "--offset");
    }

    #[test]
    fn map_and_set_are_whole_pages() {
        let mut c = base();
        c.map_bytes += 100;
        let e = c.validate().unwrap_err();
        assert_eq!(e.option, "--map");
        assert!(
            e.message.contains("is not a whole number of 4K pages"),
            "{e}"
        );
        let mut c = base();
        c.set_bytes = 100;
        assert_eq!(c.validate().unwrap_err().option, "--set");
    }

    #[test]
    fn offsets() {
        assert_eq!(Offset::parse("random").unwrap(), Offset::Random);
        assert_eq!(Offset::parse(" -1 ").unwrap(), Offset::Random);
        assert_eq!(Offset::parse("128").unwrap(), Offset::Fixed(128));
        let e = Offset::parse("middle").unwrap_err();
        assert_eq!(e.option, "--offset");
        assert_eq!(e.message, "'middle' is neither 'random' nor a byte offset");
    }
}
