//! `dmalab page`: paging latency by fault class (pmbench done right), and
//! `dmalab page import FILE.xml` (pmbench reports into our schema).

use super::common::OutputArgs;
use anyhow::Context as _;
use dmalab_core::host::HostInfo;
use dmalab_core::output::{Accept, OutputGuard};
use dmalab_core::schema::{ResultDoc, RunStatus, ToolInfo};
use dmalab_core::units::{parse_duration, parse_size};
use dmalab_core::UsageError;
use dmalab_page::config::{ClassifyMethod, Offset, PageConfig, Pattern, SwapSpec, TimerKind};
use dmalab_page::run::{run_page, RunOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

/// Profile paging: time every access to a map larger than the memory it
/// may use, and classify each as hit, minor or major fault from the
/// kernel's own per-thread fault counters.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    run: Box<RunArgs>,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Read a pmbench XML report into dmalab's result schema.
    Import(ImportArgs),
    /// (internal) The measuring child process; reads its plan on stdin.
    #[command(name = "__worker", hide = true)]
    Worker,
}

/// `dmalab page import`.
#[derive(clap::Args, Debug)]
struct ImportArgs {
    /// The pmbench XML report (pmbench -f FILE).
    file: PathBuf,
    #[command(flatten)]
    output: OutputArgs,
}

/// The measuring run's flags.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Size of the anonymous map (pmbench -m).
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    map: String,
    /// Working set: the part of the map accessed (pmbench -s); default: the
    /// whole map.
    #[arg(long = "set", value_name = "SIZE")]
    set: Option<String>,
    /// Measuring threads (pmbench -j).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Share of reads in percent, the rest are writes (pmbench -r).
    #[arg(long, value_name = "PCT", default_value_t = 50)]
    read_pct: u32,
    /// Spatial access pattern (pmbench -p).
    #[arg(long, value_enum, default_value_t = Pattern::Uniform)]
    pattern: Pattern,
    /// Pattern shape (pmbench -e); meaning depends on --pattern.
    #[arg(long)]
    shape: Option<f64>,
    /// Byte offset inside each page: `random` (4-byte aligned) or a
    /// multiple of 4 below 4096 (pmbench -o).
    #[arg(long, default_value = "random")]
    offset: String,
    /// Timing method (pmbench -t).
    #[arg(long, value_enum, default_value_t = TimerKind::Rdtscp)]
    timer: TimerKind,
    /// Fault classification method.
    #[arg(long, value_enum, default_value_t = ClassifyMethod::Perf)]
    classify: ClassifyMethod,
    /// Skip the warm-up pass over the working set (pmbench -c).
    #[arg(long)]
    cold: bool,
    /// Fill the map with random data first (pmbench -i); defeats zram's
    /// same-filled-page and compression shortcuts.
    #[arg(long)]
    init_random: bool,
    /// Busy wait between accesses, e.g. 1us (pmbench -d, cycles there).
    #[arg(long, value_name = "DURATION", default_value = "0")]
    delay: String,
    /// How long to measure, e.g. 10s (pmbench's DURATION).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    runtime: String,
    /// Every write reads the word first (a read-modify-write).
    #[arg(long)]
    write_after_read: bool,
    /// Seed of the access pattern.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the measuring process in a new memory cgroup with this limit
    /// (needs root).
    #[arg(long, value_name = "SIZE")]
    memory_limit: Option<String>,
    /// Swap for the run: existing | zram[:SIZE[:ALGORITHM]] | file:PATH:SIZE
    /// | dev:PATH. Swap dmalab adds gets the highest priority and is removed
    /// afterwards.
    #[arg(long, value_name = "SPEC", default_value = "existing")]
    swap: String,
    /// vm.page-cluster for the run only (0: no swap-in clustering, as in the
    /// pmbench paper).
    #[arg(long, value_name = "N")]
    page_cluster: Option<u32>,
    /// Swappiness for the run only (the cgroup's on cgroup v1, else the
    /// global vm.swappiness, restored afterwards).
    #[arg(long, value_name = "N")]
    swappiness: Option<u32>,
    /// Raw latency of the swap medium, e.g. 5us: Table 2's OS overhead is
    /// the average major fault minus this.
    #[arg(long, value_name = "DURATION")]
    media_latency: Option<String>,
    /// Allow --swap dev:PATH to overwrite this exact device (only if every
    /// safety check of the device guard passes).
    #[arg(long, value_name = "PATH")]
    allow_destroy: Option<PathBuf>,
    /// Also write pmbench's XML report format to FILE.
    #[arg(long, value_name = "FILE")]
    xml: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

impl RunArgs {
    /// Validates the flags into a resolved plan.
    fn resolve(&self) -> Result<PageConfig, UsageError> {
        let map_bytes = parse_size("--map", &self.map)?;
        let set_bytes = match &self.set {
            Some(s) => parse_size("--set", s)?,
            None => map_bytes,
        };
        let pattern = self.pattern;
        let offset = Offset::parse(&self.offset)?;
        let runtime = parse_duration("--runtime", &self.runtime)?;
        let cfg = PageConfig {
            map_bytes,
            set_bytes,
            threads: self.threads,
            read_pct: self.read_pct,
            pattern,
            shape: self.shape.unwrap_or(pattern.default_shape()),
            offset,
            timer: self.timer,
            classify: self.classify,
            cold: self.cold,
            init_random: self.init_random,
            delay_ns: dmalab_core::schema::ns(parse_duration("--delay", &self.delay)?),
            runtime_ns: dmalab_core::schema::ns(runtime),
            write_after_read: self.write_after_read,
            seed: self.seed,
            memory_limit_bytes: self
                .memory_limit
                .as_deref()
                .map(|s| parse_size("--memory-limit", s))
                .transpose()?,
            swap: SwapSpec::parse(&self.swap)?,
            page_cluster: self.page_cluster,
            swappiness: self.swappiness,
            media_latency_ns: self
                .media_latency
                .as_deref()
                .map(|s| parse_duration("--media-latency", s).map(dmalab_core::schema::ns))
                .transpose()?,
            allow_destroy: self.allow_destroy.clone(),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl Args {
    /// True for the internal measuring child (`page __worker`).
    pub fn is_worker(&self) -> bool {
        matches!(self.sub, Some(Sub::Worker))
    }
}

/// Runs `dmalab page`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.sub {
        Some(Sub::Worker) => Ok(ExitCode::from(dmalab_page::run::worker_main() as u8)),
        Some(Sub::Import(a)) => import(a),
        None => measure(*args.run),
    }
}

fn measure(a: RunArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.resolve()?;
    let mut guard = OutputGuard::new();
    if let SwapSpec::File { path, .. } | SwapSpec::Dev { path, .. } = &cfg.swap {
        guard.protect("--swap", path);
    }
    if let Some(p) = &a.xml {
        guard.check("--xml", p, Accept::FileOrStream)?;
    }
    a.output.check(&mut guard)?;
    let started = SystemTime::now();
    let host = HostInfo::collect();
    let opts = RunOptions {
        worker_exe: std::env::current_exe().context("cannot find the dmalab executable")?,
        worker_args: vec!["page".into(), "__worker".into()],
        state_dir: PathBuf::from(dmalab_page::state::STATE_DIR),
    };
    let outcome = run_page(&cfg, &opts)?;
    let text = outcome.result.render_text();
    out!("{text}");
    for w in &outcome.warnings {
        eprintln!("dmalab: warning: {w}");
    }
    if let Some(path) = &a.xml {
        let xml = dmalab_page::xml::export(&cfg, &host, &outcome.result, outcome.interrupted);
        dmalab_core::output::write_atomic(path, xml.as_bytes())
            .with_context(|| format!("--xml: cannot write {}", path.display()))?;
    }
    let mut doc = ResultDoc::new("page", host, cfg, outcome.result, started);
    doc.warnings = outcome.warnings;
    if outcome.interrupted {
        doc.status = RunStatus::Interrupted;
    }
    a.output.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn import(a: ImportArgs) -> anyhow::Result<ExitCode> {
    let mut guard = OutputGuard::new();
    guard.protect("FILE", &a.file);
    a.output.check(&mut guard)?;
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| UsageError::new("FILE", format!("cannot read {}: {e}", a.file.display())))?;
    let im = dmalab_page::xml::import(&text)
        .map_err(|e| UsageError::new("FILE", format!("{}: {e}", a.file.display())))?;
    let summary = im.result.render_text();
    out!("{summary}");
    let started = SystemTime::now();
    let mut doc = ResultDoc::new("page import", im.host, im.config, im.result, started);
    doc.tool = ToolInfo {
        name: "pmbench".into(),
        version: im.version,
    };
    if im.interrupted {
        doc.status = RunStatus::Interrupted;
    }
    a.output.write(&doc, &summary)?;
    Ok(ExitCode::SUCCESS)
}
