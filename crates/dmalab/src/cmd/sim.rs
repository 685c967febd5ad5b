//! `dmalab sim`: trace tools and the cache/DRAM simulator.

use anyhow::Context;
use dmalab_core::UsageError;
use dmalab_sim::trace::{self, Format, Record, RecordSource, TraceReader};
use std::path::PathBuf;
use std::process::ExitCode;

/// Trace-driven simulator of CPU and DMA traffic (see docs/sim.md).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    cmd: SimCmd,
}

#[derive(clap::Subcommand, Debug)]
enum SimCmd {
    /// Convert a trace between the binary and the text form.
    Convert(ConvertArgs),
    /// Count the records of a trace by kind and source.
    Stat(StatArgs),
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
        SimCmd::Convert(a) => convert(a),
        SimCmd::Stat(a) => stat(a),
    }
}

fn open(path: &std::path::Path, what: &str) -> anyhow::Result<TraceReader> {
    if !path.exists() {
        return Err(UsageError::new(
            what,
            format!("{} does not exist; give a trace file", path.display()),
        )
        .into());
    }
    TraceReader::open(path).with_context(|| format!("reading {}", path.display()))
}

fn convert(a: ConvertArgs) -> anyhow::Result<ExitCode> {
    open(&a.input, "IN")?;
    let to = match a.to {
        FormatArg::Binary => Format::Binary,
        FormatArg::Text => Format::Text,
    };
    let s = trace::convert(&a.input, &a.output, to)?;
    println!("{} records written to {}", s.records, a.output.display());
    Ok(ExitCode::SUCCESS)
}

fn stat(a: StatArgs) -> anyhow::Result<ExitCode> {
    let mut rd = open(&a.trace, "TRACE")?;
    let mut r = Record::default();
    let (mut cpu, mut dma, mut xfer, mut markers, mut t) = (0u64, 0u64, 0u64, 0u64, 0u64);
    while rd.next_record(&mut r)? {
        t += r.gap_ns;
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
