//! Experiment files: TOML read with serde, unknown keys rejected, every error
//! with the line it is about.
//!
//! The fixed structure (`[experiment]`, `[cpus]`, `[sweep]`, the reserved
//! keys of `[[aggressor]]` and `[[victim]]`) is checked here. The remaining
//! keys of a dmalab aggressor or victim are that command's flags
//! (`max_blocks = 8` becomes `--max-blocks 8`); which keys exist is for the
//! command's config to say (its library owns it, see [`crate::child`]), and
//! every key, override and swept flag is checked against it here, with its
//! line, before anything runs.

use crate::child::{ChildCatalog, ChildCommand};
use crate::error::ExpError;
use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

pub mod group;

/// Which direction of a figure is good.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Latencies and run times: smaller is better.
    Lower,
    /// Bandwidths and rates: larger is better.
    Higher,
}

/// The order in which runs are done within a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Plain, then each load, repeated (the thesis' cycles): slow drift of
    /// the machine hits every load alike.
    Cycle,
    /// All repetitions of plain, then all of the first load, and so on.
    Blocked,
}

/// A command-line flag for a child command, from a key of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Flag {
    /// The key as written (`max_blocks`).
    pub key: String,
    /// The value; `None` for a boolean switch set to true.
    pub values: Vec<String>,
    /// True for `key = true` (a switch without a value).
    pub switch: bool,
    /// Line in the experiment file.
    pub line: usize,
}

impl Flag {
    /// The flag's long name: `max_blocks` -> `--max-blocks`.
    pub fn long(&self) -> String {
        format!("--{}", self.key.replace('_', "-"))
    }
}

/// What an aggressor runs.
#[derive(Clone, Debug, PartialEq)]
pub enum AggressorKind {
    /// `dmalab load` (DMA load); evidence from its `--live-stats` file.
    Load,
    /// `dmalab probe bandwidth` (a CPU bandwidth antagonist).
    ProbeBandwidth,
    /// Any command; `{live_stats}` in its argv is replaced by the path of a
    /// live-stats file it is expected to keep up to date.
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// Several other aggressors of the file (their indices), started
    /// together, each pinned and paced on its own, stopped together
    /// (`members = [...]`; see [`group`]).
    Group {
        /// The members, in the order `members` lists them.
        members: Vec<usize>,
    },
}

/// What runs in an aggressor's control cycle: the same CPU-side work
/// without data moved into host memory, paced at the command rate the
/// aggressor reached in the same repetition (docs/run.md, "Control
/// cycles").
#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// The aggressor's own command with its engine's control
    /// ([`control_flags`]).
    Twin,
    /// Another aggressor of the file (its index), given `--rate-iops` (or
    /// `{rate_iops}` in an exec command) when it takes it.
    Aggressor(usize),
    /// A group's: its members' controls started together, one per member
    /// in the order `members` lists them (`Twin`: that member's twin;
    /// `Aggressor(j)`: the aggressor it names as its control, or a CPU
    /// bandwidth antagonist itself), each paced at the command rate its
    /// member reached in the group's run (see [`group::member_controls`]).
    Group(Vec<Control>),
}

/// The suffix of a control cycle's load name: `random/control`. A `/`
/// cannot appear in an aggressor's own name, so the two never collide.
pub const CONTROL_SUFFIX: &str = "/control";

/// One load that runs beside the victims.
#[derive(Clone, Debug, PartialEq)]
pub struct Aggressor {
    /// Name used in records and plots (`random`, `single`).
    pub name: String,
    /// What runs.
    pub kind: AggressorKind,
    /// Flags for the dmalab command (empty for exec).
    pub flags: Vec<Flag>,
    /// Its control cycle, when it has one.
    pub control: Option<Control>,
    /// Line of its `[[aggressor]]` table.
    pub line: usize,
}

/// The `dmalab load` flags of the twin that controls an aggressor with
/// `flags`, paced at `rate_iops` commands per second: the same workers,
/// iodepth, pattern, buffer, caching and CPUs, with what moves data into
/// host memory replaced per engine (docs/run.md justifies each):
///
/// - `io_uring` (the default engine): `--engine null`, whose commands are
///   io_uring NOPs on a ring driven exactly as the io_uring engine's.
/// - `nvme`: `--pattern flush`, the same passthrough commands on the same
///   queues carrying no data (the thesis' command path without transfers).
/// - `null`: itself (it moves no data already).
/// - `gpu`: `--gpu-copy d2d`, the same copies through the same streams,
///   events and waits, between two buffers in GPU memory (no host memory
///   touched).
/// - `rdma`: refused with the reason (see docs/run.md).
///
/// Any bandwidth limit is dropped and `--rate-iops` set: the twin matches
/// the aggressor's command rate, not its bytes.
pub fn control_flags(flags: &[Flag], rate_iops: Option<u64>) -> Result<Vec<Flag>, String> {
    let norm = |k: &str| k.replace('-', "_");
    let get = |k: &str| {
        flags
            .iter()
            .find(|f| norm(&f.key) == k)
            .and_then(|f| f.values.first().cloned())
    };
    let engine = get("engine").unwrap_or_else(|| "io_uring".into());
    let line = flags.first().map_or(0, |f| f.line);
    let set = |out: &mut Vec<Flag>, key: &str, value: String| {
        out.retain(|f| norm(&f.key) != key);
        out.push(Flag {
            key: key.into(),
            values: vec![value],
            switch: false,
            line,
        });
    };
    let mut out: Vec<Flag> = flags
        .iter()
        .filter(|f| !matches!(norm(&f.key).as_str(), "rate" | "rate_iops"))
        .cloned()
        .collect();
    match engine.as_str() {
        "io_uring" => {
            // The null engine describes a target but never creates one.
            out.retain(|f| !matches!(norm(&f.key).as_str(), "format_before" | "keep"));
            set(&mut out, "engine", "null".into());
        }
        "nvme" => {
            out.retain(|f| !matches!(norm(&f.key).as_str(), "format_before" | "allow_destroy"));
            set(&mut out, "pattern", "flush".into());
        }
        "null" => {}
        "gpu" => {
            // The same driver calls, streams, events, copy sizes, copies in
            // flight and wait mode; the copies stay in GPU memory.
            set(&mut out, "gpu_copy", "d2d".into());
        }
        "rdma" => return Err("the rdma engine has no faithful control: every RDMA operation, even one of zero bytes, makes the NIC fetch its work request from and write its completion into host memory, and a payload target in NIC memory (device memory) is not portable; name another aggressor as control = \"NAME\" or set control = \"none\"".into()),
        other => return Err(format!("engine '{other}' has no automatic control; name another aggressor as control = \"NAME\" or set control = \"none\"")),
    }
    if let Some(r) = rate_iops {
        set(&mut out, "rate_iops", r.max(1).to_string());
    }
    Ok(out)
}

impl AggressorKind {
    /// The dmalab command it runs, or None for exec.
    pub fn child(&self) -> Option<ChildCommand> {
        match self {
            AggressorKind::Load => Some(ChildCommand::Load),
            AggressorKind::ProbeBandwidth => Some(ChildCommand::ProbeBandwidth),
            AggressorKind::Exec { .. } | AggressorKind::Group { .. } => None,
        }
    }
}

/// The built-in Redis recipe: redis-server on loopback with persistence off,
/// driven by redis-benchmark; the figure is the benchmark's wall-clock time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RedisRecipe {
    /// Requests in total (`redis-benchmark -n`).
    pub requests: u64,
    /// Parallel client connections (`-c`).
    pub clients: u64,
    /// Tests to run (`-t`, e.g. `set,get`).
    pub tests: String,
    /// Value size in bytes (`-d`).
    pub data_size_bytes: u64,
    /// Requests per pipeline (`-P`).
    pub pipeline: u64,
    /// Key space (`-r`): random keys out of this many.
    pub keyspace: u64,
}

/// What a victim runs.
#[derive(Clone, Debug)]
pub enum VictimKind {
    /// `dmalab probe latency`.
    ProbeLatency,
    /// `dmalab probe bandwidth`.
    ProbeBandwidth,
    /// `dmalab page`.
    Page,
    /// Any command, timed wall-clock; a regex may pull the figure from stdout.
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
        /// The first capture group (or the whole match) is the figure.
        regex: Option<Regex>,
        /// `counters = "..."`: run it under `dmalab stat --counters` and
        /// record the counts beside its figure.
        counters: Option<String>,
    },
    /// redis-server + redis-benchmark.
    Redis(RedisRecipe),
    /// Nothing: waits, so the aggressor's figures alone are measured.
    Idle {
        /// How long to wait.
        duration: Duration,
    },
}

impl VictimKind {
    /// The `command` value that names this kind.
    pub fn label(&self) -> &'static str {
        match self {
            VictimKind::ProbeLatency => "probe latency",
            VictimKind::ProbeBandwidth => "probe bandwidth",
            VictimKind::Page => "page",
            VictimKind::Exec { .. } => "exec",
            VictimKind::Redis(_) => "redis",
            VictimKind::Idle { .. } => "idle",
        }
    }

    /// The dmalab command it runs, or None.
    pub fn child(&self) -> Option<ChildCommand> {
        match self {
            VictimKind::ProbeLatency => Some(ChildCommand::ProbeLatency),
            VictimKind::ProbeBandwidth => Some(ChildCommand::ProbeBandwidth),
            VictimKind::Page => Some(ChildCommand::Page),
            _ => None,
        }
    }

    /// Default figure: its name as a JSON pointer (into the child's result
    /// document, read through [`crate::views`], or into the runner's own
    /// measurement for exec/redis/idle), unit, and which direction is
    /// better.
    pub fn default_metric(&self) -> (&'static str, &'static str, Better) {
        match self {
            VictimKind::ProbeLatency => ("/result/per_access/mean_ns", "ns", Better::Lower),
            VictimKind::ProbeBandwidth => ("/result/bw_bytes", "B/s", Better::Higher),
            VictimKind::Page => ("/result/total/all/mean_ns", "ns", Better::Lower),
            VictimKind::Exec { regex: Some(_), .. } => ("regex", "", Better::Lower),
            VictimKind::Exec { .. } | VictimKind::Redis(_) | VictimKind::Idle { .. } => {
                ("wall_s", "s", Better::Lower)
            }
        }
    }
}

/// One workload whose slowdown is measured.
#[derive(Clone, Debug)]
pub struct Victim {
    /// Name used in records and plots.
    pub name: String,
    /// What runs.
    pub kind: VictimKind,
    /// Flags for the dmalab command (empty otherwise).
    pub flags: Vec<Flag>,
    /// JSON pointer to the figure in the child's result document
    /// (dmalab kinds), `wall_s` or `regex`.
    pub metric: String,
    /// Unit of the figure.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
    /// True when `metric` is the kind's default (fallbacks apply).
    pub metric_is_default: bool,
    /// Per-run time limit; a run past it is killed and recorded as failed.
    pub timeout: Duration,
    /// Explicit CPUs for this victim (default: the experiment's victim CPUs).
    pub cpus: Option<Vec<usize>>,
    /// Line of its `[[victim]]` table.
    pub line: usize,
}

/// A named set of flag overrides applied to every aggressor that accepts
/// them (the thesis' "default", "big buffer", "caching").
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    /// Name used in records and plots.
    pub name: String,
    /// Flags that replace the aggressors' own.
    pub overrides: Vec<Flag>,
    /// DDIO for this configuration's runs (`ddio = "on" | "off" |
    /// "ways:N"`), set before them and restored after (see `ddio_axis`).
    pub ddio: Option<dmalab_host::ddio::Setting>,
    /// Line where it is defined.
    pub line: usize,
}

/// Sweep mode: one aggressor flag (e.g. `workers`) over a list of values,
/// for bandwidth/command-rate and latency-versus-bandwidth curves.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// The aggressor that is swept.
    pub aggressor: String,
    /// The flag key that varies.
    pub flag: String,
    /// Its values, in order.
    pub values: Vec<String>,
    /// Also run each victim without load (x = 0 on the curves).
    pub include_plain: bool,
    /// Line of `[sweep]`.
    pub line: usize,
}

/// Where processes run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// CPUs of the aggressor (default: the last allowed CPU).
    pub aggressor: Vec<usize>,
    /// CPUs of the victims (default: every allowed CPU but the aggressor's).
    pub victims: Vec<usize>,
}

/// A parsed, checked experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// The file it came from.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// SHA-256 of its bytes, hex; results carry it so resume can refuse a
    /// changed file.
    pub hash: String,
    /// `experiment.name` or the file stem.
    pub name: String,
    /// Cycles per configuration (default 10).
    pub repetitions: u32,
    /// Time the aggressor runs before each victim starts.
    pub warmup: Duration,
    /// Pause after each run.
    pub cooldown: Duration,
    /// Noisy-cell threshold: coefficient of variation, percent.
    pub noisy_cv_pct: f64,
    /// Order of runs.
    pub order: Order,
    /// CPU placement.
    pub placement: Placement,
    /// Warnings found while reading (shown, and kept in the header).
    pub warnings: Vec<String>,
    /// Loads.
    pub aggressors: Vec<Aggressor>,
    /// Workloads.
    pub victims: Vec<Victim>,
    /// Configurations (at least one).
    pub configurations: Vec<Configuration>,
    /// Sweep mode, when given.
    pub sweep: Option<Sweep>,
    /// `counters_mode = "exact"`: every `counters` request (an aggressor's
    /// `--counters`, a victim's `counters`) counts one event group per
    /// repetition, repetition i the group i mod the number of groups (the
    /// thesis' one event per run, section 3.2); checked before the first
    /// run to have at least as many repetitions as groups.
    pub counters_exact: bool,
    /// The configs of the dmalab commands it starts, as it was read with.
    pub children: ChildCatalog,
}

type RawValue = Spanned<toml::Value>;
type RawTable = Spanned<BTreeMap<String, RawValue>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    experiment: Option<RawExperiment>,
    #[serde(default)]
    cpus: Option<RawCpus>,
    #[serde(default)]
    aggressor: Vec<RawTable>,
    #[serde(default)]
    victim: Vec<RawTable>,
    #[serde(default)]
    configuration: Vec<RawTable>,
    #[serde(default)]
    matrix: Option<RawTable>,
    #[serde(default)]
    sweep: Option<Spanned<RawSweep>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    name: Option<Spanned<String>>,
    repetitions: Option<Spanned<i64>>,
    warmup: Option<RawValue>,
    cooldown: Option<RawValue>,
    timeout: Option<RawValue>,
    noisy_cv_pct: Option<Spanned<f64>>,
    order: Option<Spanned<String>>,
    control: Option<Spanned<String>>,
    counters_mode: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCpus {
    aggressor: Option<Spanned<String>>,
    victims: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    aggressor: Spanned<String>,
    flag: Spanned<String>,
    values: Spanned<Vec<toml::Value>>,
    include_plain: Option<bool>,
}

/// Line (1-based) of a byte offset.
/// The most configurations a `[matrix]` may expand to: each is run for
/// every victim and repetition, so more is no experiment one would wait for,
/// and the bound keeps a mistyped matrix from exhausting memory.
pub const MAX_CONFIGURATIONS: u64 = 10_000;

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    children: &'a ChildCatalog,
}

impl Ctx<'_> {
    fn err(&self, offset: usize, msg: impl Into<String>) -> ExpError {
        ExpError::new(self.path, Some(line_of(self.text, offset)), msg)
    }
    fn line(&self, offset: usize) -> usize {
        line_of(self.text, offset)
    }
}

fn value_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

fn duration(ctx: &Ctx, field: &str, v: &RawValue) -> Result<Duration, ExpError> {
    let text = value_text(v.get_ref()).ok_or_else(|| {
        ctx.err(
            v.span().start,
            format!("{field}: expected a duration such as \"2s\" or \"500ms\""),
        )
    })?;
    dmalab_core::units::parse_duration(field, &text)
        .map_err(|e| ctx.err(v.span().start, format!("{field}: {}", e.message)))
}

fn flag_from(ctx: &Ctx, owner: &str, key: &str, v: &RawValue) -> Result<Option<Flag>, ExpError> {
    let line = ctx.line(v.span().start);
    let bad = || {
        ctx.err(
            v.span().start,
            format!("{owner}: key '{key}': expected a string, number, boolean or a list of them"),
        )
    };
    let flag = match v.get_ref() {
        toml::Value::Boolean(true) => Flag {
            key: key.into(),
            values: vec![],
            switch: true,
            line,
        },
        toml::Value::Boolean(false) => return Ok(None),
        toml::Value::Array(items) => {
            let values = items
                .iter()
                .map(value_text)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            Flag {
                key: key.into(),
                values,
                switch: false,
                line,
            }
        }
        other => Flag {
            key: key.into(),
            values: vec![value_text(other).ok_or_else(bad)?],
            switch: false,
            line,
        },
    };
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(ctx.err(
            v.span().start,
            format!("{owner}: '{key}' is not a flag name"),
        ));
    }
    Ok(Some(flag))
}

/// The keys of a dmalab command's table, each a flag its config takes,
/// in file order.
fn child_flags(
    ctx: &Ctx,
    owner: &str,
    cmd: ChildCommand,
    map: &BTreeMap<String, RawValue>,
) -> Result<Vec<Flag>, ExpError> {
    let mut flags = Vec::new();
    for (k, v) in map {
        if let Some(f) = flag_from(ctx, owner, k, v)? {
            cmd.check_flag(ctx.children, &f)
                .map_err(|why| ctx.err(v.span().start, format!("{owner}: {why}")))?;
            flags.push(f);
        }
    }
    flags.sort_by_key(|f| f.line);
    Ok(flags)
}

/// Takes a string key out of a raw table.
fn take_str(
    ctx: &Ctx,
    owner: &str,
    t: &mut BTreeMap<String, RawValue>,
    key: &str,
) -> Result<Option<(String, usize)>, ExpError> {
    match t.remove(key) {
        None => Ok(None),
        Some(v) => match v.get_ref() {
            toml::Value::String(s) => Ok(Some((s.clone(), v.span().start))),
            _ => Err(ctx.err(v.span().start, format!("{owner}: '{key}' must be a string"))),
        },
    }
}

/// Takes the `ddio` key (`"on"`, `"off"`, `"ways:N"`) out of a raw table.
fn take_ddio(
    ctx: &Ctx,
    owner: &str,
    t: &mut BTreeMap<String, RawValue>,
) -> Result<Option<dmalab_host::ddio::Setting>, ExpError> {
    let Some((text, at)) = take_str(ctx, owner, t, "ddio")? else {
        return Ok(None);
    };
    ddio_setting(ctx, owner, &text, at).map(Some)
}

fn ddio_setting(
    ctx: &Ctx,
    owner: &str,
    text: &str,
    at: usize,
) -> Result<dmalab_host::ddio::Setting, ExpError> {
    text.parse()
        .map_err(|e: dmalab_host::ddio::BadSetting| ctx.err(at, format!("{owner}: ddio: {e}")))
}

fn take_argv(
    ctx: &Ctx,
    owner: &str,
    t: &mut BTreeMap<String, RawValue>,
    table_start: usize,
) -> Result<Vec<String>, ExpError> {
    let v = t.remove("run").ok_or_else(|| {
        ctx.err(
            table_start,
            format!("{owner}: an exec command needs run = [\"program\", \"arg\", ...]"),
        )
    })?;
    let argv = match v.get_ref() {
        toml::Value::Array(a) => a.iter().map(value_text).collect::<Option<Vec<_>>>(),
        toml::Value::String(s) => Some(vec!["sh".into(), "-c".into(), s.clone()]),
        _ => None,
    };
    match argv {
        Some(a) if !a.is_empty() => Ok(a),
        _ => Err(ctx.err(
            v.span().start,
            format!(
                "{owner}: run must be a non-empty list of strings (argv) or a shell command string"
            ),
        )),
    }
}

fn take_u64(
    ctx: &Ctx,
    owner: &str,
    t: &mut BTreeMap<String, RawValue>,
    key: &str,
    default: u64,
) -> Result<u64, ExpError> {
    match t.remove(key) {
        None => Ok(default),
        Some(v) => match v.get_ref() {
            toml::Value::Integer(i) if *i > 0 => Ok(*i as u64),
            toml::Value::String(s) => dmalab_core::units::parse_size(key, s)
                .map_err(|e| ctx.err(v.span().start, format!("{owner}: {key}: {}", e.message))),
            _ => Err(ctx.err(
                v.span().start,
                format!("{owner}: {key} must be a positive whole number"),
            )),
        },
    }
}

fn reject_rest(
    ctx: &Ctx,
    owner: &str,
    t: &BTreeMap<String, RawValue>,
    allowed: &str,
) -> Result<(), ExpError> {
    if let Some((k, v)) = t.iter().min_by_key(|(_, v)| v.span().start) {
        return Err(ctx.err(
            v.span().start,
            format!("{owner}: unknown key '{k}'; allowed here: {allowed}"),
        ));
    }
    Ok(())
}

fn check_name(
    ctx: &Ctx,
    what: &str,
    name: &str,
    at: usize,
    seen: &mut Vec<String>,
) -> Result<(), ExpError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.=,+ ".contains(c))
    {
        return Err(ctx.err(
            at,
            format!("{what} name '{name}' must be letters, digits and _ - . = , + only"),
        ));
    }
    if name == "plain" {
        return Err(ctx.err(
            at,
            format!("{what} name 'plain' is reserved for runs without load"),
        ));
    }
    if seen.iter().any(|s| s == name) {
        return Err(ctx.err(at, format!("{what} name '{name}' is used twice")));
    }
    seen.push(name.to_string());
    Ok(())
}

/// Parses CPU placement against the CPUs this process may use. With
/// `cpus.victims = "rest"` (the default) the victims' CPUs are left to
/// [`rest_victims`], once every aggressor's CPUs are known; until then they
/// are every allowed CPU but `cpus.aggressor`'s. The bool: whether they
/// are "rest".
fn placement(ctx: &Ctx, raw: Option<RawCpus>) -> Result<(Placement, bool), ExpError> {
    let allowed = dmalab_core::cpus::allowed_cpus();
    let last = *allowed.last().unwrap_or(&0);
    let (agg_raw, vic_raw) = match raw {
        Some(r) => (r.aggressor, r.victims),
        None => (None, None),
    };
    let parse = |field: &str, v: &Spanned<String>| {
        dmalab_core::cpus::parse_cpu_list(field, v.get_ref())
            .map_err(|e| ctx.err(v.span().start, format!("{field}: {}", e.message)))
    };
    let aggressor = match &agg_raw {
        Some(v) if v.get_ref() != "last" => parse("cpus.aggressor", v)?,
        _ => vec![last],
    };
    let (victims, rest) = match &vic_raw {
        Some(v) if v.get_ref() != "rest" => (parse("cpus.victims", v)?, false),
        _ => (rest_of(&allowed, &aggressor), true),
    };
    Ok((Placement { aggressor, victims }, rest))
}

/// The CPUs of `allowed` outside `taken`.
fn rest_of(allowed: &[usize], taken: &[usize]) -> Vec<usize> {
    allowed
        .iter()
        .copied()
        .filter(|c| !taken.contains(c))
        .collect()
}

/// `cpus.victims = "rest"`: every allowed CPU that no aggressor runs on,
/// in any configuration or at any sweep value: not `cpus.aggressor`, not
/// an aggressor's or a group member's `cpus_allowed`, not an SQPOLL
/// poller's `sqpoll_cpu`. When that leaves none, the victims share every
/// allowed CPU, with a warning when a victim runs there (a group's
/// members are then refused on a victim's CPU by [`group::check_cpus`]).
fn rest_victims(exp: &Experiment, warnings: &mut Vec<String>) -> Vec<usize> {
    let allowed = dmalab_core::cpus::allowed_cpus();
    let taken = exp.all_aggressor_cpus();
    let rest = rest_of(&allowed, &taken);
    if !rest.is_empty() {
        return rest;
    }
    // Said only when a victim runs on them: an idle victim runs nothing,
    // and one with its own `cpus` does not take these.
    let shared = exp
        .victims
        .iter()
        .any(|v| v.cpus.is_none() && !matches!(v.kind, VictimKind::Idle { .. }));
    if !shared {
        return allowed;
    }
    let fmt = dmalab_core::cpus::format_cpu_list;
    warnings.push(if allowed.len() == 1 {
        format!(
            "only CPU {} is available: victims share it with the aggressor",
            fmt(&allowed)
        )
    } else {
        format!(
            "cpus.victims = \"rest\": aggressors run on every allowed CPU ({}; cpus.aggressor, cpus_allowed, sqpoll_cpu), so victims share them; set cpus.victims or free a CPU",
            fmt(&allowed)
        )
    });
    allowed
}

/// Reads and checks an experiment file; `children` are the configs of the
/// commands its aggressors and victims run.
pub fn load(path: &Path, children: &ChildCatalog) -> Result<Experiment, ExpError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ExpError::new(path, None, format!("cannot read the experiment file: {e}")))?;
    let text = String::from_utf8(bytes.clone())
        .map_err(|_| ExpError::new(path, None, "the experiment file is not UTF-8 text"))?;
    let mut exp = parse(path, &text, children)?;
    exp.hash = hex(&Sha256::digest(&bytes));
    Ok(exp)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses experiment text (`path` names it in errors), checking each
/// dmalab child's table against its config in `children`.
pub fn parse(path: &Path, text: &str, children: &ChildCatalog) -> Result<Experiment, ExpError> {
    let ctx = Ctx {
        path,
        text,
        children,
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        ExpError::new(path, line, e.message().trim().replace('\n', " "))
    })?;
    let mut warnings = Vec::new();

    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "experiment".into());
    let settings = settings(&ctx, raw.experiment, stem)?;
    let (placement, victims_rest) = placement(&ctx, raw.cpus)?;
    let (mut aggressors, raw_controls, raw_members) = aggressors(&ctx, raw.aggressor)?;
    group::resolve_members(&ctx, &mut aggressors, raw_members)?;
    let victims = victims(&ctx, raw.victim, settings.timeout)?;
    let configurations =
        configurations(&ctx, raw.configuration, raw.matrix, !aggressors.is_empty())?;
    let sweep = match raw.sweep {
        None => None,
        Some(s) => Some(sweep(&ctx, s, &aggressors)?),
    };
    resolve_controls(
        &ctx,
        &mut aggressors,
        raw_controls,
        settings.control_auto,
        sweep.is_some(),
        &mut warnings,
    )?;
    let mut exp = Experiment {
        path: path.to_path_buf(),
        text: text.to_string(),
        hash: hex(&Sha256::digest(text.as_bytes())),
        name: settings.name,
        repetitions: settings.repetitions,
        warmup: settings.warmup,
        cooldown: settings.cooldown,
        noisy_cv_pct: settings.noisy_cv_pct,
        order: settings.order,
        placement,
        warnings,
        aggressors,
        victims,
        configurations,
        sweep,
        counters_exact: settings.counters_exact,
        children: *children,
    };
    if victims_rest {
        let mut warnings = std::mem::take(&mut exp.warnings);
        exp.placement.victims = rest_victims(&exp, &mut warnings);
        exp.warnings = warnings;
    } else if exp
        .placement
        .victims
        .iter()
        .any(|c| exp.placement.aggressor.contains(c))
    {
        exp.warnings.push(
            "cpus.victims overlaps cpus.aggressor: scheduling will mix with interference".into(),
        );
    }
    check_children(&exp)?;
    group::check_cpus(&exp)?;
    Ok(exp)
}

/// The configurations' overrides, and every dmalab child's flags as each
/// run will give them: each override is a key of some aggressor's command,
/// and each aggressor's flags, in every configuration and at every sweep
/// value, are read into its command's config (the argv of its runs).
fn check_children(exp: &Experiment) -> Result<(), ExpError> {
    let err = |line: usize, msg: String| ExpError::new(&exp.path, Some(line), msg);
    for c in &exp.configurations {
        for f in &c.overrides {
            let takers: Vec<ChildCommand> = exp
                .aggressors
                .iter()
                .filter_map(|a| a.kind.child())
                .filter(|cmd| cmd.kind_of(&exp.children, &f.key).is_some())
                .collect();
            if takers.is_empty() {
                return Err(err(
                    f.line,
                    format!(
                        "configuration '{}': key '{}': no aggressor's command has a flag {}",
                        c.name,
                        f.key,
                        dmalab_core::child::long_flag(&f.key)
                    ),
                ));
            }
            for cmd in takers {
                cmd.check_flag(&exp.children, f)
                    .map_err(|why| err(f.line, format!("configuration '{}': {why}", c.name)))?;
            }
        }
    }
    for a in &exp.aggressors {
        let Some(cmd) = a.kind.child() else {
            continue;
        };
        let values: Vec<Option<&str>> = match &exp.sweep {
            Some(s) if s.aggressor == a.name => s.values.iter().map(|v| Some(v.as_str())).collect(),
            _ => vec![None],
        };
        for c in &exp.configurations {
            for sv in &values {
                cmd.argv(&exp.children, &exp.aggressor_flags(a, c, *sv))
                    .map_err(|why| {
                        err(
                            a.line,
                            format!(
                                "aggressor '{}' in configuration '{}': {why}",
                                a.name, c.name
                            ),
                        )
                    })?;
            }
        }
    }
    for v in &exp.victims {
        if let Some(cmd) = v.kind.child() {
            cmd.argv(&exp.children, &v.flags)
                .map_err(|why| err(v.line, format!("victim '{}': {why}", v.name)))?;
        }
    }
    Ok(())
}

/// `[experiment]`'s settings, defaults filled in.
struct Settings {
    name: String,
    repetitions: u32,
    warmup: Duration,
    cooldown: Duration,
    timeout: Duration,
    noisy_cv_pct: f64,
    order: Order,
    /// `control = "auto"`: every aggressor that has an automatic control
    /// gets one (with its offset for messages).
    control_auto: Option<usize>,
    /// `counters_mode = "exact"`.
    counters_exact: bool,
}

/// Reads `[experiment]`; the name defaults to the file's stem.
fn settings(ctx: &Ctx, raw: Option<RawExperiment>, stem: String) -> Result<Settings, ExpError> {
    let explicit = raw.as_ref().is_some_and(|e| e.name.is_some());
    if !explicit && stem.chars().any(char::is_control) {
        return Err(ctx.err(
            0,
            format!(
                "experiment.name: the file name '{}' holds a control character; give [experiment] name = \"...\" on one line",
                dmalab_core::text::shown(&stem)
            ),
        ));
    }
    let mut name = stem;
    let mut repetitions = 10u32;
    let mut warmup = Duration::from_secs(2);
    let mut cooldown = Duration::from_secs(1);
    let mut timeout = Duration::from_secs(600);
    let mut noisy_cv_pct = 5.0;
    let mut order = Order::Cycle;
    let mut control_auto = None;
    let mut counters_exact = false;
    if let Some(e) = raw {
        if let Some(m) = &e.counters_mode {
            counters_exact = match m.get_ref().as_str() {
                "exact" => true,
                "multiplexed" => false,
                other => {
                    return Err(ctx.err(
                        m.span().start,
                        format!("experiment.counters_mode: '{other}' is not a counters mode; use \"exact\" (one event group per repetition, never scaled) or \"multiplexed\" (the default)"),
                    ))
                }
            };
        }
        if let Some(c) = &e.control {
            match c.get_ref().as_str() {
                "auto" => control_auto = Some(c.span().start),
                "none" => {}
                other => {
                    return Err(ctx.err(
                        c.span().start,
                        format!("experiment.control: '{other}' is not a control setting; use \"auto\" (a control cycle for every aggressor that has one) or \"none\""),
                    ))
                }
            }
        }
        if let Some(n) = e.name {
            // The name is written into comments of generated scripts (the
            // fleet's batch script), where a line break would start a command.
            if n.get_ref().chars().any(char::is_control) {
                return Err(ctx.err(
                    n.span().start,
                    format!(
                        "experiment.name: '{}' holds a control character (a line break?); give the name on one line",
                        dmalab_core::text::shown(n.get_ref())
                    ),
                ));
            }
            name = n.into_inner();
        }
        if let Some(r) = e.repetitions {
            if *r.get_ref() < 1 || *r.get_ref() > 100_000 {
                return Err(ctx.err(
                    r.span().start,
                    format!(
                        "experiment.repetitions: {} is out of range; use 1 or more (default 10)",
                        r.get_ref()
                    ),
                ));
            }
            repetitions = *r.get_ref() as u32;
        }
        if let Some(v) = &e.warmup {
            warmup = duration(ctx, "experiment.warmup", v)?;
        }
        if let Some(v) = &e.cooldown {
            cooldown = duration(ctx, "experiment.cooldown", v)?;
        }
        if let Some(v) = &e.timeout {
            timeout = duration(ctx, "experiment.timeout", v)?;
            if timeout.is_zero() {
                return Err(ctx.err(v.span().start, "experiment.timeout: must be above zero"));
            }
        }
        if let Some(v) = e.noisy_cv_pct {
            if v.get_ref().partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                return Err(ctx.err(
                    v.span().start,
                    "experiment.noisy_cv_pct: must be above zero (default 5)",
                ));
            }
            noisy_cv_pct = *v.get_ref();
        }
        if let Some(o) = e.order {
            order = match o.get_ref().as_str() {
                "cycle" => Order::Cycle,
                "blocked" => Order::Blocked,
                other => {
                    return Err(ctx.err(
                        o.span().start,
                        format!("experiment.order: '{other}' is not an order; use cycle (plain, then each load, repeated) or blocked"),
                    ))
                }
            };
        }
    }
    Ok(Settings {
        name,
        repetitions,
        warmup,
        cooldown,
        timeout,
        noisy_cv_pct,
        order,
        control_auto,
        counters_exact,
    })
}

/// The `[[aggressor]]` tables, in order, names unique.
type Parsed = (
    Vec<Aggressor>,
    Vec<RawControl>,
    Vec<Option<group::RawMembers>>,
);

fn aggressors(ctx: &Ctx, tables: Vec<RawTable>) -> Result<Parsed, ExpError> {
    let mut seen = Vec::new();
    let mut out: Parsed = Default::default();
    for (i, t) in tables.into_iter().enumerate() {
        let (a, c, m) = aggressor(ctx, i, t, &mut seen)?;
        out.0.push(a);
        out.1.push(c);
        out.2.push(m);
    }
    Ok(out)
}

/// One `[[aggressor]]` table (the `i`th): its command, and its other keys
/// as flags of that command.
fn aggressor(
    ctx: &Ctx,
    i: usize,
    t: RawTable,
    seen: &mut Vec<String>,
) -> Result<(Aggressor, RawControl, Option<group::RawMembers>), ExpError> {
    let start = t.span().start;
    let mut map = t.into_inner();
    let owner_default = format!("aggressor #{}", i + 1);
    let (name, name_at) = take_str(ctx, &owner_default, &mut map, "name")?
        .ok_or_else(|| ctx.err(start, format!("{owner_default}: needs name = \"...\"")))?;
    check_name(ctx, "aggressor", &name, name_at, seen)?;
    let owner = format!("aggressor '{name}'");
    if let Some(members) = group::take_members(ctx, &owner, &mut map)? {
        let control = take_str(ctx, &owner, &mut map, "control")?;
        reject_rest(ctx, &owner, &map, "name, members, control")?;
        return Ok((
            Aggressor {
                name,
                kind: AggressorKind::Group {
                    members: Vec::new(),
                },
                flags: Vec::new(),
                control: None,
                line: line_of(ctx.text, start),
            },
            control,
            Some(members),
        ));
    }
    let (command, cmd_at) =
        take_str(ctx, &owner, &mut map, "command")?.unwrap_or_else(|| ("load".into(), start));
    let control = take_str(ctx, &owner, &mut map, "control")?;
    let kind = match command.as_str() {
        "load" => AggressorKind::Load,
        "probe bandwidth" => AggressorKind::ProbeBandwidth,
        "exec" => AggressorKind::Exec {
            argv: take_argv(ctx, &owner, &mut map, start)?,
        },
        other => {
            return Err(ctx.err(
                cmd_at,
                format!("{owner}: command '{other}' is not an aggressor; use load, \"probe bandwidth\" or exec"),
            ))
        }
    };
    let mut flags = Vec::new();
    match kind.child() {
        None => reject_rest(ctx, &owner, &map, "name, command, run, control")?,
        Some(cmd) => flags = child_flags(ctx, &owner, cmd, &map)?,
    }
    Ok((
        Aggressor {
            name,
            kind,
            flags,
            control: None,
            line: line_of(ctx.text, start),
        },
        control,
        None,
    ))
}

/// An aggressor's `control` key as written, with its offset.
type RawControl = Option<(String, usize)>;

/// Resolves each aggressor's `control` (its own key, else the experiment's
/// `control = "auto"`): a twin of its own command, another aggressor, or
/// none. An explicit `"auto"` that cannot be made is an error; the
/// experiment-wide one skips such aggressors with a warning.
fn resolve_controls(
    ctx: &Ctx,
    aggs: &mut [Aggressor],
    mut raw: Vec<RawControl>,
    auto: Option<usize>,
    sweep: bool,
    warnings: &mut Vec<String>,
) -> Result<(), ExpError> {
    let names: Vec<String> = aggs.iter().map(|a| a.name.clone()).collect();
    // Groups last: a group's control is made of its members' controls.
    let (plain, groups): (Vec<usize>, Vec<usize>) =
        (0..aggs.len()).partition(|&i| aggs[i].members().is_empty());
    for i in plain.into_iter().chain(groups) {
        let r = raw[i].take();
        let owner = format!("aggressor '{}'", names[i]);
        let (value, at, explicit) = match (r, auto) {
            (Some((v, at)), _) => (v, at, true),
            (None, Some(at)) => ("auto".to_string(), at, false),
            (None, None) => continue,
        };
        if sweep && value != "none" {
            return Err(ctx.err(
                at,
                format!(
                    "{owner}: control cycles are not made in sweep mode; remove control or [sweep]"
                ),
            ));
        }
        let a = &aggs[i];
        let control = match value.as_str() {
            "none" => None,
            "auto" => match &a.kind {
                AggressorKind::Load => match control_flags(&a.flags, None) {
                    Ok(_) => Some(Control::Twin),
                    Err(why) if explicit => {
                        return Err(ctx.err(at, format!("{owner}: control = \"auto\": {why}")))
                    }
                    Err(why) => {
                        warnings.push(format!("{owner} gets no control cycle: {why}"));
                        None
                    }
                },
                AggressorKind::Group { members } => match group::member_controls(aggs, members) {
                    Ok(c) => Some(Control::Group(c)),
                    Err(why) if explicit => {
                        return Err(ctx.err(at, format!("{owner}: control = \"auto\": {why}")))
                    }
                    Err(why) => {
                        warnings.push(format!("{owner} gets no control cycle: {why}"));
                        None
                    }
                },
                k => {
                    let why = match k {
                        AggressorKind::ProbeBandwidth => "a CPU bandwidth antagonist moves no device data, so there is nothing to control for",
                        _ => "an exec command has no automatic control",
                    };
                    if explicit {
                        return Err(ctx.err(
                            at,
                            format!("{owner}: control = \"auto\": {why}; name another aggressor as control = \"NAME\""),
                        ));
                    }
                    warnings.push(format!("{owner} gets no control cycle: {why}"));
                    None
                }
            },
            name => match names.iter().position(|n| n == name) {
                Some(j) if j != i => {
                    group::check_named_control(ctx, &owner, at, a, &aggs[j])?;
                    Some(Control::Aggressor(j))
                }
                Some(_) => {
                    return Err(ctx.err(
                        at,
                        format!("{owner}: control = \"{name}\" names the aggressor itself; name another aggressor (an identical copy is fine), \"auto\" or \"none\""),
                    ))
                }
                None => {
                    return Err(ctx.err(
                        at,
                        format!("{owner}: control = \"{name}\": no aggressor has that name; use \"auto\", \"none\" or one of: {}", names.join(", ")),
                    ))
                }
            },
        };
        aggs[i].control = control;
    }
    Ok(())
}

/// The `[[victim]]` tables, in order, names unique; at least one.
fn victims(
    ctx: &Ctx,
    tables: Vec<RawTable>,
    default_timeout: Duration,
) -> Result<Vec<Victim>, ExpError> {
    let mut seen = Vec::new();
    let victims = tables
        .into_iter()
        .enumerate()
        .map(|(i, t)| victim(ctx, i, t, default_timeout, &mut seen))
        .collect::<Result<Vec<_>, _>>()?;
    if victims.is_empty() {
        return Err(ExpError::new(
            ctx.path,
            None,
            "no victims: add at least one [[victim]] table",
        ));
    }
    Ok(victims)
}

/// One `[[victim]]` table (the `i`th): its command, figure, limits, and
/// (dmalab commands) its other keys as flags.
fn victim(
    ctx: &Ctx,
    i: usize,
    t: RawTable,
    default_timeout: Duration,
    seen: &mut Vec<String>,
) -> Result<Victim, ExpError> {
    let start = t.span().start;
    let mut map = t.into_inner();
    let owner_default = format!("victim #{}", i + 1);
    let (name, name_at) = take_str(ctx, &owner_default, &mut map, "name")?
        .ok_or_else(|| ctx.err(start, format!("{owner_default}: needs name = \"...\"")))?;
    check_name(ctx, "victim", &name, name_at, seen)?;
    let owner = format!("victim '{name}'");
    let (command, cmd_at) = take_str(ctx, &owner, &mut map, "command")?
        .ok_or_else(|| ctx.err(start, format!("{owner}: needs command = \"probe latency\", \"probe bandwidth\", \"page\", \"exec\", \"redis\" or \"idle\"")))?;
    let metric = take_str(ctx, &owner, &mut map, "metric")?;
    let unit = take_str(ctx, &owner, &mut map, "unit")?;
    let better = match take_str(ctx, &owner, &mut map, "better")? {
        None => None,
        Some((b, at)) => Some(match b.as_str() {
            "lower" => Better::Lower,
            "higher" => Better::Higher,
            _ => {
                return Err(ctx.err(
                    at,
                    format!("{owner}: better = '{b}': use \"lower\" or \"higher\""),
                ))
            }
        }),
    };
    let vt = match map.remove("timeout") {
        Some(v) => duration(ctx, &format!("{owner}: timeout"), &v)?,
        None => default_timeout,
    };
    let cpus = match take_str(ctx, &owner, &mut map, "cpus")? {
        None => None,
        Some((c, at)) => Some(
            dmalab_core::cpus::parse_cpu_list("cpus", &c)
                .map_err(|e| ctx.err(at, format!("{owner}: cpus: {}", e.message)))?,
        ),
    };
    let kind = victim_kind(ctx, &owner, &command, cmd_at, &mut map, start)?;
    let flags = match kind.child() {
        Some(cmd) => child_flags(ctx, &owner, cmd, &map)?,
        None => Vec::new(),
    };
    let (dm, du, db) = kind.default_metric();
    let metric_is_default = metric.is_none();
    let metric = metric.map(|m| m.0).unwrap_or_else(|| dm.to_string());
    if kind.child().is_some() && !metric.starts_with('/') {
        return Err(ctx.err(start, format!("{owner}: metric '{metric}' must be a JSON pointer into the result document, e.g. \"{dm}\"")));
    }
    Ok(Victim {
        name,
        unit: unit.map(|u| u.0).unwrap_or_else(|| du.to_string()),
        better: better.unwrap_or(db),
        metric,
        metric_is_default,
        kind,
        flags,
        timeout: vt,
        cpus,
        line: line_of(ctx.text, start),
    })
}

/// A victim's kind from its `command`, with the keys that kind owns taken
/// from `map` (exec, redis and idle victims take all their keys).
fn victim_kind(
    ctx: &Ctx,
    owner: &str,
    command: &str,
    cmd_at: usize,
    map: &mut BTreeMap<String, RawValue>,
    start: usize,
) -> Result<VictimKind, ExpError> {
    Ok(match command {
        "probe latency" => VictimKind::ProbeLatency,
        "probe bandwidth" => VictimKind::ProbeBandwidth,
        "page" => VictimKind::Page,
        "exec" => {
            let argv = take_argv(ctx, owner, map, start)?;
            let regex = match take_str(ctx, owner, map, "regex")? {
                None => None,
                Some((r, at)) => Some(Regex::new(&r).map_err(|e| {
                    ctx.err(at, format!("{owner}: regex: {}", e.to_string().replace('\n', " ")))
                })?),
            };
            let counters = take_str(ctx, owner, map, "counters")?.map(|c| c.0);
            reject_rest(ctx, owner, map, "name, command, run, regex, counters, metric, unit, better, timeout, cpus")?;
            VictimKind::Exec {
                argv,
                regex,
                counters,
            }
        }
        "redis" => {
            let r = RedisRecipe {
                requests: take_u64(ctx, owner, map, "requests", 100_000)?,
                clients: take_u64(ctx, owner, map, "clients", 50)?,
                tests: take_str(ctx, owner, map, "tests")?
                    .map(|t| t.0)
                    .unwrap_or_else(|| "set,get".into()),
                data_size_bytes: take_u64(ctx, owner, map, "data_size", 64)?,
                pipeline: take_u64(ctx, owner, map, "pipeline", 1)?,
                keyspace: take_u64(ctx, owner, map, "keyspace", 100_000)?,
            };
            reject_rest(
                ctx,
                owner,
                map,
                "name, command, requests, clients, tests, data_size, pipeline, keyspace, metric, unit, better, timeout, cpus",
            )?;
            VictimKind::Redis(r)
        }
        "idle" => {
            let d = match map.remove("duration") {
                Some(v) => duration(ctx, &format!("{owner}: duration"), &v)?,
                None => return Err(ctx.err(start, format!("{owner}: an idle victim needs duration = \"5s\""))),
            };
            reject_rest(ctx, owner, map, "name, command, duration, timeout, cpus")?;
            VictimKind::Idle { duration: d }
        }
        other => {
            return Err(ctx.err(
                cmd_at,
                format!("{owner}: command '{other}' is not a victim; use \"probe latency\", \"probe bandwidth\", page, exec, redis or idle"),
            ))
        }
    })
}

/// The configurations: the `[[configuration]]` tables, or the product of
/// `[matrix]`, or one named "default"; overrides need an aggressor.
fn configurations(
    ctx: &Ctx,
    tables: Vec<RawTable>,
    matrix: Option<RawTable>,
    have_aggressors: bool,
) -> Result<Vec<Configuration>, ExpError> {
    let mut seen = Vec::new();
    let mut configurations = tables
        .into_iter()
        .enumerate()
        .map(|(i, t)| configuration(ctx, i, t, &mut seen))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(m) = matrix {
        if !configurations.is_empty() {
            return Err(ctx.err(m.span().start, "[matrix] and [[configuration]] cannot both be given; list the configurations or their product, not both"));
        }
        configurations = product(ctx, &m)?;
    }
    if configurations.is_empty() {
        configurations.push(Configuration {
            name: "default".into(),
            overrides: Vec::new(),
            ddio: None,
            line: 1,
        });
    }
    if !have_aggressors && configurations.iter().any(|c| !c.overrides.is_empty()) {
        return Err(ExpError::new(
            ctx.path,
            Some(configurations[0].line),
            "configurations override aggressor flags, but there is no [[aggressor]]",
        ));
    }
    Ok(configurations)
}

/// One `[[configuration]]` table (the `i`th): its DDIO setting and flag
/// overrides.
fn configuration(
    ctx: &Ctx,
    i: usize,
    t: RawTable,
    seen: &mut Vec<String>,
) -> Result<Configuration, ExpError> {
    let start = t.span().start;
    let mut map = t.into_inner();
    let owner_default = format!("configuration #{}", i + 1);
    let (name, at) = take_str(ctx, &owner_default, &mut map, "name")?
        .ok_or_else(|| ctx.err(start, format!("{owner_default}: needs name = \"...\"")))?;
    check_name(ctx, "configuration", &name, at, seen)?;
    let owner = format!("configuration '{name}'");
    let ddio = take_ddio(ctx, &owner, &mut map)?;
    let mut overrides = Vec::new();
    for (k, v) in &map {
        if let Some(f) = flag_from(ctx, &owner, k, v)? {
            overrides.push(f);
        }
    }
    overrides.sort_by_key(|f| f.line);
    Ok(Configuration {
        name,
        overrides,
        ddio,
        line: line_of(ctx.text, start),
    })
}

/// One value of one `[matrix]` axis: its label, its flag, or its DDIO
/// setting.
type AxisItem = (String, Option<Flag>, Option<dmalab_host::ddio::Setting>);

/// The axes of `[matrix]`, in file order, every value checked.
fn matrix_axes(ctx: &Ctx, m: &RawTable) -> Result<Vec<Vec<AxisItem>>, ExpError> {
    let mut axes: Vec<(&String, &RawValue)> = m.get_ref().iter().collect();
    axes.sort_by_key(|(_, v)| v.span().start);
    // Every value is checked once, and the size of the product is
    // computed and bounded, before anything is expanded.
    let mut checked: Vec<Vec<AxisItem>> = Vec::new();
    let mut size: u64 = 1;
    for (k, v) in &axes {
        let items = match v.get_ref() {
            toml::Value::Array(a) if !a.is_empty() => a,
            _ => {
                return Err(ctx.err(
                    v.span().start,
                    format!("matrix: '{k}' must be a non-empty list of values"),
                ))
            }
        };
        size = size
            .checked_mul(items.len() as u64)
            .filter(|&n| n <= MAX_CONFIGURATIONS)
            .ok_or_else(|| {
                ctx.err(
                    v.span().start,
                    format!("matrix: the product of the lists is more than {MAX_CONFIGURATIONS} configurations; use shorter lists or fewer keys"),
                )
            })?;
        let mut axis = Vec::with_capacity(items.len());
        for item in items {
            let text_v = value_text(item).unwrap_or_else(|| item.to_string());
            let (f, ddio) = if k.as_str() == "ddio" {
                let d = ddio_setting(ctx, "matrix", &text_v, v.span().start)?;
                (None, Some(d))
            } else {
                let single = Spanned::new(v.span(), item.clone());
                (flag_from(ctx, "matrix", k, &single)?, None)
            };
            axis.push((format!("{k}={text_v}"), f, ddio));
        }
        checked.push(axis);
    }
    Ok(checked)
}

/// The configurations of `[matrix]`: the product of its axes, named
/// `key=value,key=value`.
fn product(ctx: &Ctx, m: &RawTable) -> Result<Vec<Configuration>, ExpError> {
    let checked = matrix_axes(ctx, m)?;
    type Cell = (String, Vec<Flag>, Option<dmalab_host::ddio::Setting>);
    let mut product: Vec<Cell> = vec![(String::new(), Vec::new(), None)];
    for axis in &checked {
        let mut next = Vec::with_capacity(product.len() * axis.len());
        for (pname, pflags, pddio) in &product {
            for (label, f, ddio) in axis {
                let n = if pname.is_empty() {
                    label.clone()
                } else {
                    format!("{pname},{label}")
                };
                let mut fl = pflags.clone();
                fl.extend(f.clone());
                next.push((n, fl, ddio.or(*pddio)));
            }
        }
        product = next;
    }
    let line = line_of(ctx.text, m.span().start);
    Ok(product
        .into_iter()
        .map(|(n, fl, ddio)| Configuration {
            name: n,
            overrides: fl,
            ddio,
            line,
        })
        .collect())
}

/// `[sweep]`: one flag of one dmalab aggressor over a list of values.
fn sweep(ctx: &Ctx, s: Spanned<RawSweep>, aggressors: &[Aggressor]) -> Result<Sweep, ExpError> {
    let start = s.span().start;
    let s = s.into_inner();
    let agg = s.aggressor.get_ref().clone();
    let Some(a) = aggressors.iter().find(|a| a.name == agg) else {
        return Err(ctx.err(
            s.aggressor.span().start,
            format!("sweep.aggressor: no aggressor is named '{agg}'"),
        ));
    };
    let Some(cmd) = a.kind.child() else {
        if matches!(a.kind, AggressorKind::Group { .. }) {
            return Err(ctx.err(s.aggressor.span().start, format!("sweep.aggressor: '{agg}' is a group, which has no flags of its own; sweep one of its members")));
        }
        return Err(ctx.err(s.aggressor.span().start, "sweep.aggressor: an exec aggressor has no flags to sweep; use a load or probe bandwidth aggressor"));
    };
    if cmd.kind_of(ctx.children, s.flag.get_ref()) != Some(dmalab_core::child::Kind::Values) {
        return Err(ctx.err(
            s.flag.span().start,
            format!(
                "sweep.flag: `dmalab {}` has no flag {} that takes a value",
                cmd.name(ctx.children),
                dmalab_core::child::long_flag(s.flag.get_ref())
            ),
        ));
    }
    let values = s
        .values
        .get_ref()
        .iter()
        .map(value_text)
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ctx.err(
                s.values.span().start,
                "sweep.values: must be a non-empty list of numbers or strings",
            )
        })?;
    // The report draws the values along an axis: numbers and sizes by
    // value, names as categories; a list that mixes them has no axis.
    crate::sweep_axis::SweepAxis::of(&values)
        .map_err(|e| ctx.err(s.values.span().start, format!("sweep.values: {e}")))?;
    Ok(Sweep {
        aggressor: agg,
        flag: s.flag.get_ref().clone(),
        values,
        include_plain: s.include_plain.unwrap_or(true),
        line: line_of(ctx.text, start),
    })
}

impl Experiment {
    /// The flags an aggressor gets in a configuration (and at a sweep
    /// value): its own, with the configuration's overrides replacing or
    /// adding keys the aggressor's command takes.
    pub fn aggressor_flags(
        &self,
        agg: &Aggressor,
        config: &Configuration,
        sweep_value: Option<&str>,
    ) -> Vec<Flag> {
        let accepts = |f: &Flag| {
            agg.kind
                .child()
                .is_some_and(|c| c.kind_of(&self.children, &f.key).is_some())
        };
        let norm = |k: &str| k.replace('-', "_");
        let mut flags = agg.flags.clone();
        let mut put = |f: Flag| {
            if let Some(slot) = flags.iter_mut().find(|g| norm(&g.key) == norm(&f.key)) {
                *slot = f;
            } else {
                flags.push(f);
            }
        };
        for o in &config.overrides {
            if accepts(o) {
                put(o.clone());
            }
        }
        if let (Some(s), Some(v)) = (&self.sweep, sweep_value) {
            if s.aggressor == agg.name {
                put(Flag {
                    key: s.flag.clone(),
                    values: vec![v.to_string()],
                    switch: false,
                    line: s.line,
                });
            }
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Experiment, ExpError> {
        parse(Path::new("t.toml"), text, &crate::child::test_catalog())
    }

    #[test]
    fn minimal_exec_experiment() {
        let e = p(r#"
[[victim]]
name = "true"
command = "exec"
run = ["true"]
"#)
        .unwrap();
        assert_eq!(e.repetitions, 10);
        assert_eq!(e.configurations.len(), 1);
        assert_eq!(e.victims[0].metric, "wall_s");
        assert_eq!(e.victims[0].better, Better::Lower);
        assert_eq!(e.name, "t");
    }

    #[test]
    fn unknown_top_level_key_has_line() {
        let e = p("[experiment]\nrepetitions = 3\nrepetitons = 4\n").unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("repetitons"), "{e}");
    }

    #[test]
    fn unknown_exec_key_has_line() {
        let e = p("[[victim]]\nname = \"a\"\ncommand = \"exec\"\nrun = [\"true\"]\nregx = \"x\"\n")
            .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.message.contains("unknown key 'regx'"), "{e}");
    }

    #[test]
    fn syntax_error_has_line() {
        let e = p("[experiment]\nrepetitions = = 3\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let e = p("[experiment]\nname = \"x\\ntouch /tmp/PWNED #\"\n[[victim]]\nname=\"a\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("experiment.name:"), "{e}");
        let e = p("[experiment]\nwarmup = \"soon\"\n[[victim]]\nname=\"a\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("experiment.warmup"), "{e}");
        let e = p("[[victim]]\nname=\"a\"\ncommand=\"fly\"\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        let e = p("[[victim]]\nname=\"plain\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap_err();
        assert!(e.message.contains("reserved"), "{e}");
        let e =
            p("[[victim]]\nname=\"a\"\ncommand=\"exec\"\nrun=[\"x\"]\nregex=\"(\"\n").unwrap_err();
        assert_eq!(e.line, Some(5));
    }

    #[test]
    fn ddio_key_in_configurations_and_matrix() {
        use dmalab_host::ddio::Setting;
        let e = p(r#"
[[aggressor]]
name = "random"
pattern = "random"

[[configuration]]
name = "ddio-off"
ddio = "off"
buffer = "4M"

[[configuration]]
name = "ddio-ways"
ddio = "ways:4"

[[victim]]
name = "lat"
command = "probe latency"
"#)
        .unwrap();
        assert_eq!(e.configurations[0].ddio, Some(Setting::Off));
        assert_eq!(e.configurations[0].overrides.len(), 1, "ddio is not a flag");
        assert_eq!(e.configurations[1].ddio, Some(Setting::Ways(4)));
        let e = p("[matrix]\nddio = [\"on\", \"off\"]\n[[aggressor]]\nname=\"r\"\n[[victim]]\nname=\"a\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap();
        let got: Vec<(&str, Option<Setting>)> = e
            .configurations
            .iter()
            .map(|c| (c.name.as_str(), c.ddio))
            .collect();
        assert_eq!(
            got,
            [
                ("ddio=on", Some(Setting::On)),
                ("ddio=off", Some(Setting::Off))
            ]
        );
        assert!(e.configurations.iter().all(|c| c.overrides.is_empty()));
        let err = p("[[configuration]]\nname=\"x\"\nddio = \"maybe\"\n[[victim]]\nname=\"a\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap_err();
        assert_eq!(err.line, Some(3));
        assert!(
            err.message
                .contains("configuration 'x': ddio: 'maybe' is not a DDIO setting"),
            "{err}"
        );
    }

    #[test]
    fn flags_and_matrix() {
        let e = p(r#"
[[aggressor]]
name = "random"
pattern = "random"
max_blocks = 8
burst = true
keep = false

[matrix]
buffer = ["4M", "1G"]
cache = ["none", "always"]

[[victim]]
name = "lat"
command = "probe latency"
size = "64M"
"#)
        .unwrap();
        let a = &e.aggressors[0];
        assert_eq!(a.kind, AggressorKind::Load);
        let args = ChildCommand::Load.argv(&e.children, &a.flags).unwrap();
        assert_eq!(
            args,
            ["--pattern", "random", "--max-blocks", "8", "--burst"]
        );
        let names: Vec<&str> = e.configurations.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "buffer=4M,cache=none",
                "buffer=4M,cache=always",
                "buffer=1G,cache=none",
                "buffer=1G,cache=always"
            ]
        );
        let f = e.aggressor_flags(a, &e.configurations[3], None);
        let args = ChildCommand::Load.argv(&e.children, &f).unwrap();
        assert_eq!(
            args,
            [
                "--pattern",
                "random",
                "--max-blocks",
                "8",
                "--buffer",
                "1G",
                "--cache",
                "always",
                "--burst"
            ]
        );
        assert_eq!(
            ChildCommand::ProbeLatency
                .argv(&e.children, &e.victims[0].flags)
                .unwrap(),
            ["--size", "64M"]
        );
    }

    /// Issue 14 item 8: a `[matrix]` of 10^6 configurations was expanded in
    /// full (1.5 GB) before the first was checked.
    #[test]
    fn huge_matrix_is_refused_before_expansion() {
        let ten = "[1,2,3,4,5,6,7,8,9,10]";
        let mut t = String::from("[[aggressor]]\nname=\"r\"\n[matrix]\n");
        for k in ["workers", "iodepth", "max_blocks", "seed", "size", "region"] {
            t.push_str(&format!("{k} = {ten}\n"));
        }
        t.push_str("[[victim]]\nname=\"i\"\ncommand=\"idle\"\nduration=\"1s\"\n");
        let e = p(&t).unwrap_err();
        assert!(e.message.contains("10000 configurations"), "{e}");
        // The line of the key that crossed the bound (the fifth list).
        assert_eq!(e.line, Some(8), "{e}");
        // Lists whose product overflows u64 are refused the same way.
        let big = format!("[{}]", vec!["1"; 70_000].join(","));
        let mut t = String::from("[[aggressor]]\nname=\"r\"\n[matrix]\n");
        for k in ["workers", "iodepth", "max_blocks", "seed", "size"] {
            t.push_str(&format!("{k} = {big}\n"));
        }
        t.push_str("[[victim]]\nname=\"i\"\ncommand=\"idle\"\nduration=\"1s\"\n");
        let e = p(&t).unwrap_err();
        assert!(e.message.contains("configurations"), "{e}");
    }

    /// Issue 14 item 4: a duration that overflows `Duration` panicked.
    #[test]
    fn huge_duration_in_experiment_is_an_error() {
        let e = p("[experiment]\nwarmup = 1e308\n[[victim]]\nname=\"a\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("366 days"), "{e}");
        let e = p("[[victim]]\nname=\"a\"\ncommand=\"idle\"\nduration=\"99999999999999999999s\"\n")
            .unwrap_err();
        assert!(e.message.contains("366 days"), "{e}");
    }

    #[test]
    fn sweep_must_name_an_aggressor() {
        let e = p("[[aggressor]]\nname=\"r\"\n[sweep]\naggressor=\"x\"\nflag=\"workers\"\nvalues=[1,2]\n[[victim]]\nname=\"i\"\ncommand=\"idle\"\nduration=\"1s\"\n").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
    }

    /// Issue 32: sizes are sweep values like numbers (kept as typed, for
    /// the child's flag); a list mixing numbers and names is refused at
    /// its line, since the report has no axis for it.
    #[test]
    fn sweep_values_take_sizes_and_refuse_numbers_mixed_with_names() {
        let file = |values: &str| {
            format!("[[aggressor]]\nname=\"r\"\n[sweep]\naggressor=\"r\"\nflag=\"bs\"\nvalues={values}\n[[victim]]\nname=\"i\"\ncommand=\"idle\"\nduration=\"1s\"\n")
        };
        let e = p(&file("[\"64K\", 4096, \"1M\"]")).unwrap();
        assert_eq!(e.sweep.unwrap().values, ["64K", "4096", "1M"]);
        let e = p(&file("[\"4K\", \"random\"]")).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(
            e.to_string()
                .contains("sweep.values: 'random' is neither a number nor a size, but '4K' is"),
            "{e}"
        );
        let e = p(&file("[4096, \"4K\"]")).unwrap_err();
        assert!(e.to_string().contains("the same value"), "{e}");
        // Names alone are categories.
        assert!(p(&file("[\"x\", \"y\"]")).is_ok());
    }

    const VICTIM: &str = "[[victim]]\nname=\"i\"\ncommand=\"idle\"\nduration=\"1s\"\n";

    /// Issue 30: a key the child command does not take is refused while
    /// the file is read (no child is run to learn its flags), with its
    /// line, the key and the command; an override and a victim's key alike.
    #[test]
    fn keys_a_child_command_lacks_are_refused_when_the_file_is_read() {
        let e = p(&format!(
            "[[aggressor]]\nname=\"quick\"\niodeph=3\n{VICTIM}"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert!(
            e.message
                .starts_with("aggressor 'quick': unknown key 'iodeph' for dmalab load; it takes:"),
            "{e}"
        );
        let e = p("[[victim]]\nname=\"v\"\ncommand=\"probe latency\"\nsize=\"8M\"\niodepth=4\n")
            .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(
            e.message
                .starts_with("victim 'v': unknown key 'iodepth' for dmalab probe latency;"),
            "{e}"
        );
        let e = p(&format!(
            "[[aggressor]]\nname=\"b\"\ncommand=\"probe bandwidth\"\n[[configuration]]\nname=\"c\"\niodepth=4\n{VICTIM}"
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(
            e.message
                .contains("no aggressor's command has a flag --iodepth"),
            "{e}"
        );
        // The same key is fine for the command that takes it, dashes or not.
        let e = p(&format!(
            "[[aggressor]]\nname=\"quick\"\nmax-blocks=3\n{VICTIM}"
        ))
        .unwrap();
        assert_eq!(
            ChildCommand::Load
                .argv(&e.children, &e.aggressors[0].flags)
                .unwrap(),
            ["--max-blocks", "3"]
        );
    }

    #[test]
    fn controls_resolve_per_aggressor_and_from_the_experiment() {
        let e = p(&format!(
            "[experiment]\ncontrol = \"auto\"\n[[aggressor]]\nname=\"r\"\n[[aggressor]]\nname=\"x\"\ncommand=\"exec\"\nrun=[\"true\"]\n[[aggressor]]\nname=\"y\"\ncommand=\"exec\"\nrun=[\"true\"]\ncontrol=\"x\"\n[[aggressor]]\nname=\"n\"\ncontrol=\"none\"\n{VICTIM}"
        ))
        .unwrap();
        let c: Vec<Option<Control>> = e.aggressors.iter().map(|a| a.control.clone()).collect();
        assert_eq!(
            c,
            [Some(Control::Twin), None, Some(Control::Aggressor(1)), None]
        );
        // The experiment-wide auto skips the exec aggressor, and says why.
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("aggressor 'x' gets no control cycle")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn impossible_controls_are_refused_with_their_line() {
        for (agg, want) in [
            (
                "name=\"r\"\ncommand=\"exec\"\nrun=[\"true\"]\ncontrol=\"auto\"",
                "exec command has no automatic control",
            ),
            ("name=\"r\"\ncontrol=\"r\"", "names the aggressor itself"),
            (
                "name=\"r\"\ncontrol=\"nobody\"",
                "no aggressor has that name",
            ),
            (
                "name=\"r\"\nengine=\"rdma\"\ncontrol=\"auto\"",
                "no faithful control",
            ),
        ] {
            let e = p(&format!("[[aggressor]]\n{agg}\n{VICTIM}")).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
            assert!(e.line.is_some_and(|l| l >= 2), "{e}");
        }
        let e = p(&format!("[experiment]\ncontrol = \"always\"\n{VICTIM}")).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        // No control cycles in sweep mode.
        let e = p(&format!("[[aggressor]]\nname=\"r\"\ncontrol=\"auto\"\n[sweep]\naggressor=\"r\"\nflag=\"workers\"\nvalues=[1]\n{VICTIM}")).unwrap_err();
        assert!(e.to_string().contains("sweep mode"), "{e}");
    }

    fn flag(key: &str, value: &str) -> Flag {
        Flag {
            key: key.into(),
            values: vec![value.into()],
            switch: false,
            line: 1,
        }
    }

    fn value_of<'a>(flags: &'a [Flag], key: &str) -> Option<&'a str> {
        flags
            .iter()
            .find(|f| f.key == key)
            .map(|f| f.values[0].as_str())
    }

    #[test]
    fn control_flags_per_engine() {
        // io_uring (the default): the null engine, paced, without the
        // aggressor's bandwidth limit; everything else kept.
        let agg = [
            flag("pattern", "random"),
            flag("workers", "2"),
            flag("rate", "100M"),
        ];
        let t = control_flags(&agg, Some(15_400)).unwrap();
        assert_eq!(value_of(&t, "engine"), Some("null"));
        assert_eq!(value_of(&t, "rate_iops"), Some("15400"));
        assert_eq!(value_of(&t, "rate"), None);
        assert_eq!(value_of(&t, "pattern"), Some("random"));
        assert_eq!(value_of(&t, "workers"), Some("2"));
        // nvme: the same engine, flush commands.
        let t = control_flags(
            &[flag("engine", "nvme"), flag("pattern", "random")],
            Some(10),
        )
        .unwrap();
        assert_eq!(value_of(&t, "engine"), Some("nvme"));
        assert_eq!(value_of(&t, "pattern"), Some("flush"));
        // null: itself, paced.
        let t = control_flags(&[flag("engine", "null")], Some(5)).unwrap();
        assert_eq!(
            (value_of(&t, "engine"), value_of(&t, "rate_iops")),
            (Some("null"), Some("5"))
        );
        // gpu: the same copies within GPU memory, paced, without the
        // aggressor's bandwidth limit; streams and wait mode kept.
        let t = control_flags(
            &[
                flag("engine", "gpu"),
                flag("direction", "both"),
                flag("iodepth", "4"),
                flag("gpu-wait", "block"),
                flag("rate", "1G"),
            ],
            Some(42),
        )
        .unwrap();
        assert_eq!(value_of(&t, "gpu_copy"), Some("d2d"));
        assert_eq!(value_of(&t, "rate_iops"), Some("42"));
        assert_eq!(value_of(&t, "rate"), None);
        assert_eq!(value_of(&t, "direction"), Some("both"));
        assert_eq!(value_of(&t, "iodepth"), Some("4"));
        assert_eq!(value_of(&t, "gpu-wait"), Some("block"));
        // rdma: refused with the reason.
        assert!(control_flags(&[flag("engine", "rdma")], None)
            .unwrap_err()
            .contains("no faithful control"));
    }
}
