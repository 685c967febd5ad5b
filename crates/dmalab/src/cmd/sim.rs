//! `dmalab sim`: trace tools, synthetic workloads and the cache/DRAM
//! simulator (docs/sim.md).

use crate::cmd::common::OutputArgs;
use anyhow::Context;
use dmalab_core::host::HostInfo;
use dmalab_core::output::{Accept, OutputGuard};
use dmalab_core::schema::{CpuUsage, ResultDoc, RunStatus};
use dmalab_core::units::parse_size;
use dmalab_core::UsageError;
use dmalab_sim::engine::SimError;
use dmalab_sim::run::{self, Orderings, SweepPoint};
use dmalab_sim::synth::{FileCopy, MsrReplay, TpchScan, WebServer};
use dmalab_sim::trace::{self, Format, Record, RecordSource, TraceError, TraceReader, TraceWriter};
use dmalab_sim::{Scheme, SchemeResult, SimConfig};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

/// Trace-driven simulator of CPU and DMA traffic through an LLC, DDIO ways,
/// a DMA cache and DRAM banks (see docs/sim.md).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: SimCmd,
}

#[derive(clap::Subcommand, Debug)]
enum SimCmd {
    /// Run every scheme on one trace and print the scheme table.
    Compare(CompareArgs),
    /// Vary one parameter and run every scheme at each value.
    Sweep(SweepArgs),
    /// Generate a fixed-seed synthetic workload trace (or replay an MSR
    /// Cambridge CSV block trace as DMA transfers).
    Synth(SynthArgs),
    /// Convert a trace between the binary and the text form.
    Convert(ConvertArgs),
    /// Count the records of a trace by kind and source.
    Stat(StatArgs),
    /// Print the resolved parameters as TOML (a starting point for --params FILE).
    Params(ParamArgs),
}

/// Parameter selection shared by compare, sweep and params.
#[derive(clap::Args, Debug, Clone)]
struct ParamArgs {
    /// Parameter set: `paper` (the committed params/paper.toml), `modern`,
    /// or a TOML file.
    #[arg(long, default_value = "paper", value_name = "NAME|FILE")]
    params: String,
    /// Override one parameter, e.g. `--set llc.size_bytes=4M --set
    /// dram.preset=ddr5-4800` (repeatable; names as in `dmalab sim params`).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Schemes to run, comma separated: snoop, shared, dma-cache-SIZE,
    /// dma-cache-SIZE-pf (default: the paper's seven).
    #[arg(long, value_delimiter = ',')]
    schemes: Vec<String>,
}

/// `dmalab sim compare TRACE`.
#[derive(clap::Args, Debug)]
struct CompareArgs {
    /// Trace file (binary or text).
    trace: PathBuf,
    #[command(flatten)]
    p: ParamArgs,
    #[command(flatten)]
    out: OutputArgs,
}

/// `dmalab sim sweep TRACE --param KEY --values V,V,...`.
#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Trace file (binary or text).
    trace: PathBuf,
    /// The parameter to vary (e.g. llc.size_bytes, dram.preset,
    /// llc.ddio_ways, dram.page_policy).
    #[arg(long)]
    param: String,
    /// Its values, comma separated (e.g. 1M,2M,4M,8M).
    #[arg(long, value_delimiter = ',', required = true)]
    values: Vec<String>,
    #[command(flatten)]
    p: ParamArgs,
    #[command(flatten)]
    out: OutputArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    /// 128 KiB disk reads into scattered pages, copied by the CPU to a
    /// buffer and on into other pages, which the disk later reads.
    FileCopy,
    /// 128-512 KiB disk reads scanned by the CPU with hash-table probes.
    Tpch,
    /// Network packets in 2 KiB ring buffers, app work, responses sent from
    /// the page cache, small disk reads.
    Web,
    /// An MSR Cambridge CSV block trace (--input) replayed as DMA transfers.
    Msr,
}

/// `dmalab sim synth WORKLOAD --output FILE`.
#[derive(clap::Args, Debug)]
struct SynthArgs {
    /// Workload.
    #[arg(value_enum)]
    workload: Workload,
    /// Trace to write (written whole or not at all).
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
    /// Write the text form instead of the binary one.
    #[arg(long)]
    text: bool,
    /// Bytes the disk reads (file-copy, tpch).
    #[arg(long, default_value = "64M")]
    size: String,
    /// Requests (web).
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// Receive and transmit ring entries of 2 KiB (web).
    #[arg(long, default_value_t = 256)]
    ring: u64,
    /// Hash-table size (tpch).
    #[arg(long, default_value = "2M")]
    hash_size: String,
    /// CPU time between references, ns.
    #[arg(long, default_value_t = 0)]
    cpu_gap_ns: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// MSR Cambridge CSV file (msr).
    #[arg(long, value_name = "CSV")]
    input: Option<PathBuf>,
    /// Host memory disk offsets fold into (msr).
    #[arg(long, default_value = "1G")]
    span: String,
    /// Leave out the CPU references that produce and consume the data (msr).
    #[arg(long)]
    no_cpu_touch: bool,
    /// Replay at most this many requests, 0 for all (msr).
    #[arg(long, default_value_t = 0)]
    max_requests: u64,
}

/// `dmalab sim convert IN OUT --to text|binary`.
#[derive(clap::Args, Debug)]
struct ConvertArgs {
    /// Input trace (either form; the form is detected).
    input: PathBuf,
    /// Output trace (written whole or not at all).
    output: PathBuf,
    /// Form of the output.
    #[arg(long, value_enum)]
    to: FormatArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum FormatArg {
    /// 16-byte binary records.
    Binary,
    /// One record a line.
    Text,
}

/// `dmalab sim stat TRACE`.
#[derive(clap::Args, Debug)]
struct StatArgs {
    /// Trace file (either form).
    trace: PathBuf,
}

/// Runs `dmalab sim`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        SimCmd::Compare(a) => compare(a),
        SimCmd::Sweep(a) => sweep(a),
        SimCmd::Synth(a) => synth(a),
        SimCmd::Convert(a) => convert(a),
        SimCmd::Stat(a) => stat(a),
        SimCmd::Params(a) => params(a),
    }
}

/// The resolved configuration of a compare or sweep run.
#[derive(Serialize, Debug)]
struct SimRunConfig {
    /// Trace file.
    trace: String,
    /// Parameter set named by --params.
    params_name: String,
    /// Every parameter after --set overrides.
    params: SimConfig,
    /// Schemes run.
    schemes: Vec<String>,
    /// Swept parameter (sweep only).
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep_param: Option<String>,
}

/// `dmalab sim compare` result.
#[derive(Serialize, Debug)]
struct CompareResult {
    /// One entry per scheme.
    schemes: Vec<SchemeResult>,
    /// The DMA-cache paper's orderings on these results.
    orderings: Orderings,
    /// Line references simulated, all schemes together.
    refs_simulated: u64,
    /// Wall time of the simulation, trace decoding included, ns.
    wall_ns: u64,
    /// Line references simulated per second of wall time.
    refs_per_sec: f64,
    /// CPU time (user + system) the simulation used, ns: on a busy host
    /// this, not the wall time, says how fast the simulator is.
    cpu_ns: u64,
    /// Line references simulated per second of CPU time.
    refs_per_cpu_sec: f64,
}

/// `dmalab sim sweep` result.
#[derive(Serialize, Debug)]
struct SweepResult {
    /// One point per value.
    points: Vec<SweepPoint>,
    /// Wall time, ns.
    wall_ns: u64,
}

fn resolve(p: &ParamArgs) -> anyhow::Result<(SimConfig, Vec<Scheme>)> {
    let mut cfg = match p.params.as_str() {
        "paper" | "modern" => {
            SimConfig::named(&p.params).map_err(|e| UsageError::new("--params", e.message))?
        }
        file => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                UsageError::new(
                    "--params",
                    format!("cannot read '{file}' ({e}); name paper, modern or a TOML file"),
                )
            })?;
            SimConfig::from_toml(&text)
                .map_err(|e| UsageError::new("--params", format!("{file}: {}", e.message)))?
        }
    };
    let mut pairs = Vec::new();
    for s in &p.sets {
        let (k, v) = s.split_once('=').ok_or_else(|| {
            UsageError::new(
                "--set",
                format!("'{s}' is not KEY=VALUE (e.g. llc.size_bytes=4M)"),
            )
        })?;
        pairs.push((k.trim(), v.trim()));
    }
    // Checked once after all are applied, so their order does not matter.
    cfg.set_all(pairs)
        .map_err(|e| UsageError::new("--set", e.to_string()))?;
    let schemes = if p.schemes.is_empty() {
        Scheme::paper_set()
    } else {
        p.schemes
            .iter()
            .map(|s| Scheme::parse(s.trim()).map_err(|m| UsageError::new("--schemes", m)))
            .collect::<Result<Vec<_>, _>>()?
    };
    Scheme::check_total(&schemes, cfg.llc.size_bytes)
        .map_err(|m| UsageError::new("--schemes", m))?;
    Ok((cfg, schemes))
}

/// Bad trace content is bad input (exit 2); I/O trouble is not.
fn trace_err(what: &str, e: SimError) -> anyhow::Error {
    match e {
        SimError::Trace(TraceError::Format { path, message }) => {
            UsageError::new(what, format!("{path}: {message}")).into()
        }
        SimError::Config(m) => UsageError::new("--params", m).into(),
        other => anyhow::Error::new(other),
    }
}

fn check_trace(path: &Path) -> anyhow::Result<()> {
    if !path.is_file() {
        return Err(UsageError::new(
            "TRACE",
            format!(
                "{} is not a file; make one with `dmalab sim synth file-copy --output fc.trace`",
                path.display()
            ),
        )
        .into());
    }
    Ok(())
}

/// The guard of compare and sweep: the trace and a --params file are inputs.
fn guard_inputs(trace: &Path, p: &ParamArgs) -> OutputGuard {
    let mut g = OutputGuard::new();
    g.protect("TRACE", trace);
    if !matches!(p.params.as_str(), "paper" | "modern") {
        g.protect("--params", Path::new(&p.params));
    }
    g
}

fn compare(a: CompareArgs) -> anyhow::Result<ExitCode> {
    check_trace(&a.trace)?;
    a.out.check(&mut guard_inputs(&a.trace, &a.p))?;
    let (cfg, schemes) = resolve(&a.p)?;
    let started = SystemTime::now();
    let t0 = Instant::now();
    let c0 = CpuUsage::process();
    let results = run::compare_file(&cfg, &schemes, &a.trace).map_err(|e| trace_err("TRACE", e))?;
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let cpu = CpuUsage::process().since(&c0);
    let cpu_ns = cpu.usr_ns + cpu.sys_ns;
    let refs_per_cpu_sec = refs_per_cpu(&results, cpu_ns);
    let refs: u64 = results.iter().map(|r| r.cpu.refs + r.dma.refs).sum();
    let refs_per_sec = refs as f64 / (wall_ns.max(1) as f64 / 1e9);
    let orderings = run::orderings(&results);
    let mut text = format!(
        "trace {} ({} records), params {}, DRAM {}, LLC {} KiB {}-way\n\n",
        a.trace.display(),
        results.first().map_or(0, |r| r.records),
        a.p.params,
        cfg.dram.preset,
        cfg.llc.size_bytes >> 10,
        cfg.llc.ways
    );
    text.push_str(&run::table(&results));
    text.push_str(&format!(
        "\nsimulated {refs} line references in {:.3} s: {:.1} M refs/s ({:.1} M refs per CPU second)\n",
        wall_ns as f64 / 1e9,
        refs_per_sec / 1e6,
        refs_per_cpu_sec / 1e6
    ));
    let interrupted = dmalab_core::signal::stop_requested();
    if interrupted {
        text.push_str(INTERRUPTED_NOTE);
    }
    print!("{text}");
    let mut doc = ResultDoc::new(
        "sim compare",
        HostInfo::collect(),
        SimRunConfig {
            trace: a.trace.display().to_string(),
            params_name: a.p.params.clone(),
            params: cfg,
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
            sweep_param: None,
        },
        CompareResult {
            schemes: results,
            orderings,
            refs_simulated: refs,
            wall_ns,
            refs_per_sec,
            cpu_ns,
            refs_per_cpu_sec,
        },
        started,
    );
    mark_interrupted(&mut doc.status, interrupted);
    a.out.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn refs_per_cpu(results: &[SchemeResult], cpu_ns: u64) -> f64 {
    let refs: u64 = results.iter().map(|r| r.cpu.refs + r.dma.refs).sum();
    refs as f64 / (cpu_ns.max(1) as f64 / 1e9)
}

fn sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    check_trace(&a.trace)?;
    a.out.check(&mut guard_inputs(&a.trace, &a.p))?;
    let (cfg, schemes) = resolve(&a.p)?;
    // Check every value before the long part starts.
    for v in &a.values {
        let mut c = cfg.clone();
        c.set(&a.param, v)
            .map_err(|e| UsageError::new("--values", e.to_string()))?;
        Scheme::check_total(&schemes, c.llc.size_bytes)
            .map_err(|m| UsageError::new("--values", m))?;
    }
    let started = SystemTime::now();
    let t0 = Instant::now();
    let trace = a.trace.clone();
    let points = run::sweep(&cfg, &a.param, &a.values, &schemes, &mut |c, s| {
        run::compare_file(c, s, &trace)
    })
    .map_err(|e| trace_err("TRACE", e))?;
    let mut text = format!(
        "trace {}, params {}; speedup against snooping; pf>sn: dma-cache-256K-pf beats snoop, sh<sn: shared loses, sm<sn: DMA caches under 128K lose\n\n{}",
        a.trace.display(),
        a.p.params,
        run::sweep_table(&a.param, &points)
    );
    let interrupted = dmalab_core::signal::stop_requested();
    if interrupted {
        text.push_str(&format!(
            "\ninterrupted by a signal: {} of {} values run, the last one on part of the trace\n",
            points.len(),
            a.values.len()
        ));
    }
    print!("{text}");
    let mut doc = ResultDoc::new(
        "sim sweep",
        HostInfo::collect(),
        SimRunConfig {
            trace: a.trace.display().to_string(),
            params_name: a.p.params.clone(),
            params: cfg,
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
            sweep_param: Some(a.param.clone()),
        },
        SweepResult {
            points,
            wall_ns: t0.elapsed().as_nanos() as u64,
        },
        started,
    );
    mark_interrupted(&mut doc.status, interrupted);
    a.out.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn synth(a: SynthArgs) -> anyhow::Result<ExitCode> {
    let size = parse_size("--size", &a.size)?;
    if size == 0 {
        return Err(UsageError::new("--size", "must be above 0").into());
    }
    let hash = parse_size("--hash-size", &a.hash_size)?;
    if a.workload == Workload::Web && a.ring == 0 {
        return Err(UsageError::new("--ring", "must be at least 1").into());
    }
    let span = parse_size("--span", &a.span)?;
    let mut guard = OutputGuard::new();
    if let Some(p) = &a.input {
        guard.protect("--input", p);
    }
    guard.check("--output", &a.output, Accept::FileOrStream)?;
    let input = match (a.workload, &a.input) {
        (Workload::Msr, None) => {
            return Err(UsageError::new(
                "--input",
                "the msr workload needs --input FILE.csv (an MSR Cambridge block trace)",
            )
            .into())
        }
        (Workload::Msr, Some(p)) => Some(std::fs::File::open(p).map_err(|e| {
            UsageError::new("--input", format!("cannot open {}: {e}", p.display()))
        })?),
        _ => None,
    };
    // Binary straight to the writer; text via a temporary binary trace: a
    // hidden file named after this process beside the output (never a
    // name the user may own), in the ledger while it exists.
    let bin_path = if a.text {
        let name = a
            .output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".into());
        dmalab_core::output::tmp_beside(&a.output.with_file_name(format!("{name}.bin")))
    } else {
        a.output.clone()
    };
    let _staged = a.text.then(|| Staged::new(&bin_path));
    let out_err = out_err("--output", &a.output);
    let w = TraceWriter::create(&bin_path).map_err(&out_err)?;
    let mut n = 0u64;
    let mut sink = |r: &Record| {
        trace::check_stop(n)?;
        n += 1;
        w.write_record(r)
    };
    let generated = generate(&a, size, hash, span, input, &mut sink, &out_err);
    if interrupted(&generated) {
        // Dropping the writer removes its temporary file.
        drop(w);
        return Ok(nothing_written(&a.output));
    }
    generated?;
    w.finish().map_err(&out_err)?;
    if a.text {
        let r = trace::convert(&bin_path, &a.output, Format::Text);
        if matches!(r, Err(TraceError::Interrupted)) {
            return Ok(nothing_written(&a.output));
        }
        r.map_err(&out_err)?;
    }
    println!("{n} records written to {}", a.output.display());
    Ok(ExitCode::SUCCESS)
}

/// Generates the workload `a` names into `sink`. Trouble writing names the
/// output's path (`out_err`); a stop for a signal stays a
/// `TraceError::Interrupted` so the caller can tell it apart.
fn generate(
    a: &SynthArgs,
    size: u64,
    hash: u64,
    span: u64,
    input: Option<std::fs::File>,
    sink: dmalab_sim::synth::Sink<'_>,
    out_err: &dyn Fn(TraceError) -> anyhow::Error,
) -> anyhow::Result<()> {
    let wrap = |e: TraceError| match e {
        TraceError::Interrupted => anyhow::Error::new(e),
        e => out_err(e),
    };
    match a.workload {
        Workload::FileCopy => FileCopy {
            total_bytes: size,
            cpu_gap_ns: a.cpu_gap_ns,
            seed: a.seed,
            ..Default::default()
        }
        .generate(sink)
        .map_err(wrap)?,
        Workload::Tpch => TpchScan {
            total_bytes: size,
            hash_bytes: hash,
            cpu_gap_ns: a.cpu_gap_ns,
            seed: a.seed,
            ..Default::default()
        }
        .generate(sink)
        .map_err(wrap)?,
        Workload::Web => WebServer {
            requests: a.requests,
            ring_entries: a.ring,
            cpu_gap_ns: a.cpu_gap_ns,
            seed: a.seed,
            ..Default::default()
        }
        .generate(sink)
        .map_err(wrap)?,
        Workload::Msr => {
            let p = a.input.clone().unwrap_or_default();
            let f = input.context("msr input")?;
            MsrReplay {
                span_bytes: span,
                cpu_touch: !a.no_cpu_touch,
                max_requests: a.max_requests,
            }
            .generate(std::io::BufReader::new(f), &p.display().to_string(), sink)
            .map_err(|e| match e {
                TraceError::Format { path, message } => {
                    anyhow::Error::new(UsageError::new("--input", format!("{path}: {message}")))
                }
                o => wrap(o),
            })?;
        }
    }
    Ok(())
}

/// The line a compare cut short by a signal ends its text with.
const INTERRUPTED_NOTE: &str =
    "\ninterrupted by a signal: the figures cover the part of the trace replayed so far\n";

/// Marks a result cut short by a signal: never `completed`.
fn mark_interrupted(status: &mut RunStatus, interrupted: bool) {
    if interrupted {
        *status = RunStatus::Interrupted;
    }
}

/// True when a trace loop stopped for a signal.
fn interrupted(r: &anyhow::Result<()>) -> bool {
    r.as_ref().is_err_and(|e| {
        e.chain().any(|c| {
            matches!(
                c.downcast_ref::<TraceError>(),
                Some(TraceError::Interrupted)
            )
        })
    })
}

/// A trace is written whole or not at all: after a signal, say that nothing
/// was written (the exit status says which signal).
fn nothing_written(output: &Path) -> ExitCode {
    eprintln!(
        "dmalab sim: interrupted by a signal; {} was not written",
        output.display()
    );
    ExitCode::SUCCESS
}

/// A staging file of this process: in the ledger while it may exist,
/// removed (and forgotten) on every way out.
struct Staged(PathBuf);

impl Staged {
    fn new(path: &Path) -> Self {
        dmalab_core::ledger::add_file(path);
        Self(path.to_path_buf())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        dmalab_core::ledger::forget_file(&self.0);
    }
}

/// An error writing the trace of `option`, naming the option's `path`
/// rather than the temporary file the trace is staged in.
fn out_err(option: &str, path: &Path) -> impl Fn(TraceError) -> anyhow::Error {
    let (option, path) = (option.to_string(), path.display().to_string());
    move |e| match e {
        TraceError::Io { source, .. } => anyhow::anyhow!("{option}: cannot write {path}: {source}"),
        other => anyhow::anyhow!("{option}: {path}: {other}"),
    }
}

fn open(path: &Path, what: &str) -> anyhow::Result<TraceReader> {
    if !path.is_file() {
        return Err(UsageError::new(
            what,
            format!("{} is not a file; give a trace file", path.display()),
        )
        .into());
    }
    TraceReader::open(path).map_err(|e| trace_err(what, SimError::Trace(e)))
}

fn convert(a: ConvertArgs) -> anyhow::Result<ExitCode> {
    open(&a.input, "IN")?;
    let mut guard = OutputGuard::new();
    guard.protect("IN", &a.input);
    guard.check("OUT", &a.output, Accept::FileOrStream)?;
    let to = match a.to {
        FormatArg::Binary => Format::Binary,
        FormatArg::Text => Format::Text,
    };
    let input = a.input.display().to_string();
    let write_err = out_err("OUT", &a.output);
    let s = match trace::convert(&a.input, &a.output, to) {
        Err(TraceError::Interrupted) => return Ok(nothing_written(&a.output)),
        r => r.map_err(|e| match e {
            // Trouble writing: name OUT's path, not its hidden temporary file.
            TraceError::Io { ref path, .. } if *path != input => write_err(e),
            e => trace_err("IN", SimError::Trace(e)),
        })?,
    };
    println!("{} records written to {}", s.records, a.output.display());
    Ok(ExitCode::SUCCESS)
}

fn stat(a: StatArgs) -> anyhow::Result<ExitCode> {
    let mut rd = open(&a.trace, "TRACE")?;
    let mut r = Record::default();
    let (mut cpu, mut dma, mut xfer, mut markers, mut t) = (0u64, 0u64, 0u64, 0u64, 0u64);
    while rd
        .next_record(&mut r)
        .map_err(|e| trace_err("TRACE", SimError::Trace(e)))?
    {
        t = t.saturating_add(r.gap_ns);
        match (r.kind, r.source) {
            (trace::Kind::Ref, trace::Source::Cpu) => cpu += 1,
            (trace::Kind::Ref, trace::Source::Dma) => dma += 1,
            (trace::Kind::Xfer, _) => xfer += 1,
            _ => markers += 1,
        }
    }
    println!(
        "cpu_refs {cpu}\ndma_refs {dma}\ndma_transfers {xfer}\nmarkers {markers}\nspan_ns {t}"
    );
    Ok(ExitCode::SUCCESS)
}

fn params(p: ParamArgs) -> anyhow::Result<ExitCode> {
    let (cfg, _) = resolve(&p)?;
    print!("{}", cfg.to_toml());
    Ok(ExitCode::SUCCESS)
}
