//! `dmalab sim`: the cache/DRAM simulator's runs (compare, sweep, params;
//! docs/sim.md). The trace tools (synth, convert, stat) are in `sim/tools.rs`.

use crate::cmd::common::OutputArgs;
use dmalab_core::host::HostInfo;
use dmalab_core::output::OutputGuard;
use dmalab_core::schema::{ResultDoc, RunStatus};
use dmalab_core::UsageError;
use dmalab_sim::engine::SimError;
use dmalab_sim::report::{CompareResult, SimRunConfig, SweepResult};
use dmalab_sim::select::{check_sweep_values, ParamChoice};
use dmalab_sim::{Scheme, SimConfig};
use dmalab_trace::TraceError;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

mod tools;

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
    Synth(tools::SynthArgs),
    /// Convert a trace between the binary and the text form.
    Convert(tools::ConvertArgs),
    /// Count the records of a trace by kind and source.
    Stat(tools::StatArgs),
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

/// Runs `dmalab sim`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        SimCmd::Compare(a) => compare(a),
        SimCmd::Sweep(a) => sweep(a),
        SimCmd::Synth(a) => tools::synth(a),
        SimCmd::Convert(a) => tools::convert(a),
        SimCmd::Stat(a) => tools::stat(a),
        SimCmd::Params(a) => params(a),
    }
}

impl ParamArgs {
    fn choice(&self) -> ParamChoice {
        ParamChoice {
            params: self.params.clone(),
            sets: self.sets.clone(),
            schemes: self.schemes.clone(),
        }
    }
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

/// Checks the trace and the outputs of compare and sweep (a --params file
/// is an input, too), then resolves the parameters.
fn prepare(
    trace: &Path,
    p: &ParamArgs,
    out: &OutputArgs,
) -> anyhow::Result<(SimConfig, Vec<Scheme>)> {
    let hint = "make one with `dmalab sim synth file-copy --output fc.trace`";
    tools::check_file(trace, "TRACE", hint)?;
    let choice = p.choice();
    let mut g = OutputGuard::new();
    g.protect("TRACE", trace);
    if let Some(file) = choice.params_file() {
        g.protect("--params", file);
    }
    out.check(&mut g)?;
    Ok(choice.resolve()?)
}

/// Prints a compare or sweep result's `text` and writes its document,
/// marked interrupted when a signal cut the run short.
fn finish<R: serde::Serialize>(
    command: &str,
    (config, result): (SimRunConfig, R),
    (text, interrupted): (String, bool),
    started: SystemTime,
    out: &OutputArgs,
) -> anyhow::Result<ExitCode> {
    out!("{text}");
    let mut doc = ResultDoc::new(command, HostInfo::collect(), config, result, started);
    if interrupted {
        doc.status = RunStatus::Interrupted;
    }
    out.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn compare(a: CompareArgs) -> anyhow::Result<ExitCode> {
    let (cfg, schemes) = prepare(&a.trace, &a.p, &a.out)?;
    let started = SystemTime::now();
    let result = CompareResult::run(&cfg, &schemes, &a.trace).map_err(|e| trace_err("TRACE", e))?;
    let config = SimRunConfig::new(&a.trace, &a.p.params, cfg, &schemes, None);
    let interrupted = dmalab_core::signal::stop_requested();
    let text = result.text(&config, interrupted);
    finish(
        "sim compare",
        (config, result),
        (text, interrupted),
        started,
        &a.out,
    )
}

fn sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let (cfg, schemes) = prepare(&a.trace, &a.p, &a.out)?;
    // Every value is checked before the long part starts.
    check_sweep_values(&cfg, &schemes, &a.param, &a.values)?;
    let started = SystemTime::now();
    let result = SweepResult::run(&cfg, &a.param, &a.values, &schemes, &a.trace)
        .map_err(|e| trace_err("TRACE", e))?;
    let config = SimRunConfig::new(&a.trace, &a.p.params, cfg, &schemes, Some(&a.param));
    let interrupted = dmalab_core::signal::stop_requested();
    let text = result.text(&config, a.values.len(), interrupted);
    finish(
        "sim sweep",
        (config, result),
        (text, interrupted),
        started,
        &a.out,
    )
}

fn params(p: ParamArgs) -> anyhow::Result<ExitCode> {
    out!("{}", p.choice().resolve()?.0.to_toml());
    Ok(ExitCode::SUCCESS)
}
