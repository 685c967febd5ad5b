//! `dmalab sim synth|convert|stat`: the trace tools (docs/trace.md).

use super::trace_err;
use dmalab_core::output::{Accept, OutputGuard};
use dmalab_core::units::parse_size;
use dmalab_core::UsageError;
use dmalab_sim::engine::SimError;
use dmalab_sim::reqsize::RequestSizes;
use dmalab_sim::synth::{MsrReplay, RxRead, SynthSpec, Workload};
use dmalab_trace::{
    self as trace, Format, Record, RecordSource, TraceError, TraceReader, TraceStats, TraceWriter,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `dmalab sim synth WORKLOAD --output FILE`.
#[derive(clap::Args, Debug)]
pub(super) struct SynthArgs {
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
    /// Receive and transmit ring entries of 2 KiB (web), receive ring
    /// entries (rx).
    #[arg(long, default_value_t = 256)]
    ring: u64,
    /// Packets the NIC has written that the core has not read yet: the core
    /// reads a packet this many packets after it arrived (web, rx; below
    /// --ring).
    #[arg(long, default_value_t = 0)]
    inflight: u64,
    /// Packets received (rx).
    #[arg(long, default_value_t = 100_000)]
    packets: u64,
    /// Bytes per received packet, 1 to --buf-bytes (rx).
    #[arg(long, default_value_t = 1500)]
    packet_bytes: u64,
    /// Bytes from one receive buffer to the next (rx), whole 64-byte lines:
    /// 2048, a kernel driver's page halves; 2368, a DPDK mbuf (object
    /// header, mbuf, headroom, 2 KiB data room), whose odd 37 lines spread
    /// a ring over every LLC set index.
    #[arg(long, default_value_t = 2048)]
    buf_bytes: u64,
    /// What the core reads of each packet (rx).
    #[arg(long, value_enum, default_value = "whole")]
    rx_read: RxRead,
    /// Random references to 1 MiB of application state per packet (rx).
    #[arg(long, default_value_t = 0)]
    app_refs: u32,
    /// Share of responses read from disk first, percent (web).
    #[arg(long, default_value_t = 10)]
    disk_read_pct: u32,
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
pub(super) struct ConvertArgs {
    /// Input trace (either form; the form is detected).
    input: PathBuf,
    /// Output trace (written whole or not at all).
    output: PathBuf,
    /// Form of the output.
    #[arg(long, value_enum)]
    to: Format,
}

/// `dmalab sim stat TRACE`.
#[derive(clap::Args, Debug)]
pub(super) struct StatArgs {
    /// Trace file (either form).
    trace: PathBuf,
}

pub(super) fn synth(a: SynthArgs) -> anyhow::Result<ExitCode> {
    let spec = SynthSpec {
        workload: a.workload,
        size_bytes: parse_size("--size", &a.size)?,
        hash_bytes: parse_size("--hash-size", &a.hash_size)?,
        requests: a.requests,
        ring_entries: a.ring,
        cpu_gap_ns: a.cpu_gap_ns,
        packets: a.packets,
        inflight: a.inflight,
        packet_bytes: a.packet_bytes,
        buf_bytes: a.buf_bytes,
        rx_read: a.rx_read,
        app_refs: a.app_refs,
        disk_read_pct: a.disk_read_pct,
        seed: a.seed,
        msr: MsrReplay {
            span_bytes: parse_size("--span", &a.span)?,
            cpu_touch: !a.no_cpu_touch,
            max_requests: a.max_requests,
        },
    };
    spec.validate(a.input.is_some())?;
    let mut guard = OutputGuard::new();
    if let Some(p) = &a.input {
        guard.protect("--input", p);
    }
    guard.check("--output", &a.output, Accept::FileOrStream)?;
    let mut input = match (&a.input, a.workload) {
        (Some(p), Workload::Msr) => Some(std::io::BufReader::new(std::fs::File::open(p).map_err(
            |e| UsageError::new("--input", format!("cannot open {}: {e}", p.display())),
        )?)),
        _ => None,
    };
    let name = a
        .input
        .as_deref()
        .unwrap_or(Path::new(""))
        .display()
        .to_string();
    let msr = input
        .as_mut()
        .map(|i| (i as &mut dyn std::io::BufRead, name.as_str()));
    let out_err = out_err("--output", &a.output);
    let form = if a.text { Format::Text } else { Format::Binary };
    let w = TraceWriter::create_as(&a.output, form).map_err(&out_err)?;
    let n = match spec.write(msr, &w) {
        Ok(n) => n,
        // Dropping the writer removes its temporary file.
        Err(TraceError::Interrupted) => return Ok(nothing_written(&a.output)),
        Err(TraceError::Format { path, message }) => {
            return Err(UsageError::new("--input", format!("{path}: {message}")).into())
        }
        Err(e) => return Err(out_err(e)),
    };
    w.finish().map_err(&out_err)?;
    outln!("{n} records written to {}", a.output.display());
    Ok(ExitCode::SUCCESS)
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

/// An error writing the trace of `option`, naming the option's `path`
/// rather than the temporary file the trace is staged in.
fn out_err(option: &str, path: &Path) -> impl Fn(TraceError) -> anyhow::Error {
    let (option, path) = (option.to_string(), path.display().to_string());
    move |e| match e {
        TraceError::Io { cause, .. } => anyhow::anyhow!("{option}: cannot write {path}: {cause}"),
        other => anyhow::anyhow!("{option}: {path}: {other}"),
    }
}

fn open(path: &Path, what: &str) -> anyhow::Result<TraceReader> {
    check_file(path, what, "give a trace file")?;
    TraceReader::open(path).map_err(|e| trace_err(what, SimError::Trace(e)))
}

pub(super) fn convert(a: ConvertArgs) -> anyhow::Result<ExitCode> {
    open(&a.input, "IN")?;
    let mut guard = OutputGuard::new();
    guard.protect("IN", &a.input);
    guard.check("OUT", &a.output, Accept::FileOrStream)?;
    let input = a.input.display().to_string();
    let write_err = out_err("OUT", &a.output);
    let s = match trace::convert(&a.input, &a.output, a.to) {
        Err(TraceError::Interrupted) => return Ok(nothing_written(&a.output)),
        r => r.map_err(|e| match e {
            // Trouble writing: name OUT's path, not its hidden temporary file.
            TraceError::Io { ref path, .. } if *path != input => write_err(e),
            e => trace_err("IN", SimError::Trace(e)),
        })?,
    };
    outln!("{} records written to {}", s.records, a.output.display());
    Ok(ExitCode::SUCCESS)
}

pub(super) fn stat(a: StatArgs) -> anyhow::Result<ExitCode> {
    let mut rd = open(&a.trace, "TRACE")?;
    let (mut stats, mut sizes) = (TraceStats::default(), RequestSizes::default());
    let mut r = Record::default();
    while rd
        .next_record(&mut r)
        .map_err(|e| trace_err("TRACE", SimError::Trace(e)))?
    {
        stats.add(&r);
        sizes.add(&r);
    }
    outln!("{stats}");
    outln!("{sizes}");
    Ok(ExitCode::SUCCESS)
}

/// The trace argument `what` must name a file; `hint` says how to get one.
pub(super) fn check_file(path: &Path, what: &str, hint: &str) -> Result<(), UsageError> {
    if path.is_file() {
        return Ok(());
    }
    let message = format!("{} is not a file; {hint}", path.display());
    Err(UsageError::new(what, message))
}
