//! `dmalab probe`: memory latency histograms, bandwidth and loaded latency.
//!
//! The measuring flags are the options of the `dmalab-probe` crate
//! (`dmalab_probe::options`), which validates them into a resolved plan
//! (errors are `UsageError`s: exit 2) and measures; this file adds the
//! output flags, prints and writes the result.

use super::common::OutputArgs;
use anyhow::Context as _;
use dmalab_core::host::HostInfo;
use dmalab_core::schema::{ResultDoc, RunStatus};
use dmalab_probe::bandwidth::BandwidthInterval;
use dmalab_probe::latency::IntervalFigures;
use dmalab_probe::options::{BandwidthOptions, LatencyOptions, LoadedOptions};
use dmalab_probe::text;
use serde::Serialize;
use std::process::ExitCode;
use std::time::SystemTime;

/// Measure what the CPU sees: memory latency histograms and bandwidth.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: Box<Sub>,
    /// Count hardware/software events over the probe: a recipe (software,
    /// core, ...) or perf event specs, comma-separated (see docs/counters.md).
    #[arg(long, global = true, value_name = "RECIPE|EVENTS")]
    counters: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Per-access memory latency: a pointer chase (or another pattern) timed
    /// by a clock around many steps and by rdtscp around every access.
    Latency(LatencyArgs),
    /// MLC-style bandwidth: R, W2, W3, W5, W6 (non-temporal), copy, triad.
    Bandwidth(BandwidthArgs),
    /// Loaded latency: one chase thread against load threads whose delay is
    /// swept, tracing latency against bandwidth (MLC's --loaded_latency).
    Loaded(LoadedArgs),
}

/// `dmalab probe latency`.
#[derive(clap::Args, Debug)]
struct LatencyArgs {
    #[command(flatten)]
    opts: LatencyOptions,
    /// Print each --interval as one JSON line (the result's interval
    /// fields) instead of the table, for programs that read it live
    /// (`dmalab throttle`).
    #[arg(long, requires = "interval")]
    interval_json: bool,
    /// Measure a latency matrix: every CPU node against every memory node
    /// (one thread, --runtime per cell).
    #[arg(long)]
    matrix: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// `dmalab probe bandwidth`.
#[derive(clap::Args, Debug)]
struct BandwidthArgs {
    #[command(flatten)]
    opts: BandwidthOptions,
    /// Print each --interval as one JSON line instead of text, for programs
    /// that read it live (`dmalab throttle`).
    #[arg(long, requires = "interval")]
    interval_json: bool,
    #[command(flatten)]
    output: OutputArgs,
}

/// `dmalab probe loaded`.
#[derive(clap::Args, Debug)]
struct LoadedArgs {
    #[command(flatten)]
    opts: LoadedOptions,
    #[command(flatten)]
    output: OutputArgs,
}

/// Runs `dmalab probe`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !cfg!(target_arch = "x86_64") {
        anyhow::bail!("dmalab probe needs an x86_64 CPU (rdtscp, SSE2)");
    }
    // --output is checked before anything is measured; pools a killed
    // probe grew are given back first.
    let out = match &*args.cmd {
        Sub::Latency(a) => &a.output,
        Sub::Bandwidth(a) => &a.output,
        Sub::Loaded(a) => &a.output,
    };
    out.check(&mut dmalab_core::output::OutputGuard::new())?;
    dmalab_core::ledger::cleanup_at_start();
    super::counters::begin_probe(args.counters.as_deref())?;
    match *args.cmd {
        Sub::Latency(a) => latency(a),
        Sub::Bandwidth(a) => bandwidth(a),
        Sub::Loaded(a) => loaded(a),
    }
}

/// Writes the result document (and prints its warnings).
fn finish<C: Serialize, R: Serialize>(
    command: &str,
    (config, result, warnings): (C, R, Vec<String>),
    started: SystemTime,
    output: &OutputArgs,
    file_text: &str,
) -> anyhow::Result<ExitCode> {
    let result = super::counters::attach_probe(result);
    let mut doc = ResultDoc::new(command, HostInfo::collect(), config, result, started);
    if dmalab_core::signal::stop_requested() {
        doc.status = RunStatus::Interrupted;
    }
    if doc.host.virtualized {
        doc.warnings.push(
            "virtualised host: figures include the hypervisor's share (nested paging, steal time) and are noisier than on bare metal".into(),
        );
    }
    doc.warnings.extend(warnings);
    if !output.quiet {
        for w in &doc.warnings {
            eprintln!("dmalab: warning: {w}");
        }
    }
    output.write(&doc, file_text)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints one line at once (live output another program reads), on stdout
/// unless stdout carries the result document.
fn live(line: &str) {
    outln!("{line}");
}

fn latency(a: LatencyArgs) -> anyhow::Result<ExitCode> {
    let plan = a.opts.validate()?;
    let started = SystemTime::now();
    if a.matrix {
        let (result, warnings) = dmalab_probe::latency::run_matrix(&plan)?;
        let t = text::latency(&plan, &result);
        out!("{t}");
        return finish(
            "probe latency",
            (plan, result, warnings),
            started,
            &a.output,
            &t,
        );
    }
    let mut printed_header = false;
    let mut on_interval = |f: &IntervalFigures| {
        if a.interval_json {
            if let Ok(line) = serde_json::to_string(f) {
                live(&line);
            }
            return;
        }
        if !printed_header {
            live(&text::interval_header());
            printed_header = true;
        }
        live(&text::interval_line(f));
    };
    let (result, warnings) =
        dmalab_probe::latency::run(&plan, &mut on_interval).context("dmalab probe latency")?;
    let full = text::latency(&plan, &result);
    // Intervals were printed as they happened; do not repeat them.
    let mut shown = result.clone();
    shown.intervals.clear();
    out!("{}", text::latency(&plan, &shown));
    finish(
        "probe latency",
        (plan, result, warnings),
        started,
        &a.output,
        &full,
    )
}

fn bandwidth(a: BandwidthArgs) -> anyhow::Result<ExitCode> {
    let plan = a.opts.validate()?;
    let started = SystemTime::now();
    let mut on_interval = |i: &BandwidthInterval| match a.interval_json {
        true => live(&serde_json::to_string(i).unwrap_or_default()),
        false => live(&text::bandwidth_interval_line(i)),
    };
    let result = dmalab_probe::bandwidth::run_intervals(&plan, &mut on_interval)
        .context("dmalab probe bandwidth")?;
    let t = text::bandwidth(&plan, &result);
    out!("{t}");
    let mut warnings = Vec::new();
    if dmalab_core::signal::stop_requested() {
        warnings.push("interrupted: figures cover the part that ran".into());
    }
    finish(
        "probe bandwidth",
        (plan, result, warnings),
        started,
        &a.output,
        &t,
    )
}

fn loaded(a: LoadedArgs) -> anyhow::Result<ExitCode> {
    let plan = a.opts.validate()?;
    let started = SystemTime::now();
    outln!("{}", text::loaded_header());
    let mut on_point = |p: &dmalab_probe::loaded::LoadedPoint| live(&text::loaded_line(p));
    let (result, warnings) =
        dmalab_probe::loaded::run(&plan, &mut on_point).context("dmalab probe loaded")?;
    let t = text::loaded(&plan, &result);
    outln!(
        "{}",
        text::timing_lines(&result.tsc, &result.timer).trim_end()
    );
    finish(
        "probe loaded",
        (plan, result, warnings),
        started,
        &a.output,
        &t,
    )
}
