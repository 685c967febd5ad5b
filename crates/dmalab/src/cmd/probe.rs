//! `dmalab probe`: memory latency histograms, bandwidth and loaded latency.
//!
//! Flags are validated here into a resolved plan (errors are `UsageError`s:
//! exit 2); the measuring lives in the `dmalab-probe` crate.

use super::common::OutputArgs;
use anyhow::Context as _;
use dmalab_core::cpus::{allowed_cpus, format_cpu_list, parse_cpu_list};
use dmalab_core::host::HostInfo;
use dmalab_core::schema::{ResultDoc, RunStatus};
use dmalab_core::units::{parse_duration, parse_size};
use dmalab_core::UsageError;
use dmalab_probe::access::Pattern;
use dmalab_probe::bandwidth::{BandwidthPlan, Traffic};
use dmalab_probe::latency::{LatencyPlan, LatencyResult, Mode};
use dmalab_probe::loaded::LoadedPlan;
use dmalab_probe::mem::{node_cpus, numa_nodes, PageKind, LINE};
use dmalab_probe::{text, ProbeError};
use serde::Serialize;
use std::io::Write as _;
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

/// Where threads run and memory lives.
#[derive(clap::Args, Debug, Clone)]
struct PlaceArgs {
    /// Pages backing the buffers: 4k, thp (transparent huge pages via
    /// madvise), 2m or 1g (hugetlbfs; the pool is raised for the run and
    /// restored afterwards).
    #[arg(long, default_value = "4k", value_name = "KIND")]
    pages: String,
    /// CPUs to pin threads to, in order (e.g. 0-3,6); default: the CPUs
    /// this process may use (those of --cpunodebind when given).
    #[arg(long, value_name = "LIST")]
    cpus_allowed: Option<String>,
    /// Bind the buffers to this NUMA node (mbind MPOL_BIND).
    #[arg(long, value_name = "NODE")]
    membind: Option<usize>,
    /// Run the threads on this NUMA node's CPUs.
    #[arg(long, value_name = "NODE")]
    cpunodebind: Option<usize>,
    /// Allow more threads than CPUs (they then share CPUs, and figures
    /// suffer).
    #[arg(long)]
    oversubscribe: bool,
}

/// `dmalab probe latency`.
#[derive(clap::Args, Debug)]
struct LatencyArgs {
    /// Buffer size per thread (e.g. 32K, 256M, 1G).
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    size: String,
    /// Access pattern: chase, uniform, sequential, normal, pareto, zipf.
    #[arg(long, default_value = "chase", value_name = "NAME")]
    pattern: String,
    /// Shape of normal (sd as a fraction of the buffer, default 0.1), pareto
    /// (alpha, 1.16) and zipf (s, 1.0).
    #[arg(long, value_name = "X")]
    shape: Option<f64>,
    /// Stride of --pattern sequential, bytes (multiple of 64).
    #[arg(long, default_value = "64", value_name = "BYTES")]
    stride: String,
    /// Pages per chain group: lines are permuted within a group of this many
    /// pages, groups visited in random order; 0 = one group over the whole
    /// buffer (TLB-hostile).
    #[arg(long, default_value_t = 16, value_name = "N")]
    group_pages: usize,
    /// Share of accesses that also write the line, percent (0-100).
    #[arg(long, default_value_t = 0, value_name = "PCT")]
    write_pct: u32,
    /// Probe threads, each with its own buffer, pinned one per CPU.
    #[arg(long, default_value_t = 1, value_name = "N")]
    threads: usize,
    /// Timing: per-access (histogram), clock (mean only), or both
    /// (alternating rounds on the same chain).
    #[arg(long, default_value = "per-access", value_name = "MODE")]
    mode: String,
    /// Rounds of clock/per-access in --mode both.
    #[arg(long, default_value_t = 1, value_name = "N")]
    rounds: usize,
    /// How long to measure (after setup).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    runtime: String,
    /// Print percentiles every DURATION while running (e.g. 1s), and keep
    /// them in the result.
    #[arg(long, value_name = "DURATION")]
    interval: Option<String>,
    /// Print each --interval as one JSON line (the result's interval
    /// fields) instead of the table, for programs that read it live
    /// (`dmalab throttle`).
    #[arg(long, requires = "interval")]
    interval_json: bool,
    /// Seed of the chain and patterns.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Measure a latency matrix: every CPU node against every memory node
    /// (one thread, --runtime per cell).
    #[arg(long)]
    matrix: bool,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// `dmalab probe bandwidth`.
#[derive(clap::Args, Debug)]
struct BandwidthArgs {
    /// Traffic: R, W2 (2 reads:1 write), W3 (3:1), W5 (1:1 in place), W6
    /// (non-temporal writes), copy, triad.
    #[arg(long, default_value = "R", value_name = "TYPE")]
    traffic: String,
    /// Size of each array of each thread.
    #[arg(long, default_value = "128M", value_name = "SIZE")]
    size: String,
    /// Threads, pinned one per CPU.
    #[arg(long, default_value_t = 1, value_name = "N")]
    threads: usize,
    /// Spin this many cycles (a dec/jnz loop) after every 64-byte line.
    #[arg(long, default_value_t = 0, value_name = "CYCLES")]
    delay: u32,
    /// How long to measure.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    runtime: String,
    /// Print the bandwidth of every DURATION while running (e.g. 1s).
    #[arg(long, value_name = "DURATION")]
    interval: Option<String>,
    /// Print each --interval as one JSON line instead of text, for programs
    /// that read it live (`dmalab throttle`).
    #[arg(long, requires = "interval")]
    interval_json: bool,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// `dmalab probe loaded`.
#[derive(clap::Args, Debug)]
struct LoadedArgs {
    /// Chase buffer size of the latency thread.
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    size: String,
    /// Size of each array of each load thread.
    #[arg(long, default_value = "128M", value_name = "SIZE")]
    bw_size: String,
    /// Traffic of the load threads (as in `probe bandwidth`).
    #[arg(long, default_value = "R", value_name = "TYPE")]
    traffic: String,
    /// Load threads; default: one per remaining CPU (at least one).
    #[arg(long, value_name = "N")]
    load_threads: Option<usize>,
    /// Delays to sweep, cycles per line, comma separated (an idle point
    /// with no load threads always comes first).
    #[arg(
        long,
        default_value = "5000,1000,500,200,100,50,20,10,0",
        value_name = "LIST"
    )]
    delays: String,
    /// Measuring time per point.
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    point_runtime: String,
    /// Pages per chain group (0 = whole buffer).
    #[arg(long, default_value_t = 16, value_name = "N")]
    group_pages: usize,
    /// Seed of the chain.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    place: PlaceArgs,
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

/// The most clock/per-access rounds: each keeps its figures, and a round
/// needs some time of its own.
const MAX_ROUNDS: usize = 10_000;

/// Turns a probe error into anyhow, keeping a `UsageError` findable (exit 2).
fn lift(e: ProbeError) -> anyhow::Error {
    match e {
        ProbeError::Usage(u) => u.into(),
        other => anyhow::Error::new(other),
    }
}

fn size_arg(option: &str, text: &str) -> Result<usize, UsageError> {
    let s = parse_size(option, text)?;
    if s < LINE as u64 {
        return Err(UsageError::new(
            option,
            format!(
                "{text} is smaller than one 64-byte cache line; use at least 64 bytes (e.g. 32K)"
            ),
        ));
    }
    if s / LINE as u64 >= 1 << 31 {
        return Err(UsageError::new(
            option,
            format!("{text} is too large (at most 128G per buffer)"),
        ));
    }
    usize::try_from(s).map_err(|_| UsageError::new(option, format!("{text} is too large")))
}

fn runtime_arg(option: &str, text: &str) -> Result<u64, UsageError> {
    let d = parse_duration(option, text)?;
    if d.is_zero() {
        return Err(UsageError::new(
            option,
            format!("'{text}' is zero; give a positive duration such as 5s"),
        ));
    }
    Ok(dmalab_core::schema::ns(d))
}

/// Resolves where `threads` threads run: one CPU each, in order.
fn place(p: &PlaceArgs, threads: usize, threads_opt: &str) -> Result<Vec<usize>, UsageError> {
    if threads == 0 {
        return Err(UsageError::new(threads_opt, "0 threads; use at least 1"));
    }
    let nodes = numa_nodes();
    for (opt, node) in [("--membind", p.membind), ("--cpunodebind", p.cpunodebind)] {
        if let Some(n) = node {
            if !nodes.contains(&n) {
                return Err(UsageError::new(
                    opt,
                    format!(
                        "node {n} is not online (this host has node{} {}); choose one of those",
                        if nodes.len() == 1 { "" } else { "s" },
                        format_cpu_list(&nodes)
                    ),
                ));
            }
        }
    }
    let cpus = match (&p.cpus_allowed, p.cpunodebind) {
        (Some(_), Some(_)) => {
            return Err(UsageError::new(
                "--cpunodebind",
                "give either --cpus-allowed or --cpunodebind, not both",
            ))
        }
        (Some(list), None) => parse_cpu_list("--cpus-allowed", list)?,
        (None, Some(n)) => {
            let allowed = allowed_cpus();
            let c: Vec<usize> = node_cpus(n)
                .unwrap_or_default()
                .into_iter()
                .filter(|c| allowed.contains(c))
                .collect();
            if c.is_empty() {
                return Err(UsageError::new(
                    "--cpunodebind",
                    format!("node {n} has no CPU this process may use; choose another node"),
                ));
            }
            c
        }
        (None, None) => allowed_cpus(),
    };
    if threads > cpus.len() && !p.oversubscribe {
        return Err(UsageError::new(
            threads_opt,
            format!(
                "{threads} threads but only {} CPU(s) available ({}); use at most {}, or add --oversubscribe to share CPUs",
                cpus.len(),
                format_cpu_list(&cpus),
                cpus.len()
            ),
        ));
    }
    // Sharing CPUs has a bound too: thread creation fails far past it.
    dmalab_core::cpus::check_threads(threads_opt, threads)?;
    Ok((0..threads).map(|i| cpus[i % cpus.len()]).collect())
}

fn pages_arg(p: &PlaceArgs) -> Result<PageKind, UsageError> {
    PageKind::parse("--pages", &p.pages)
}

fn finish<C: Serialize, R: Serialize>(
    command: &str,
    config: C,
    result: R,
    warnings: Vec<String>,
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
    for w in &doc.warnings {
        eprintln!("dmalab: warning: {w}");
    }
    output.write(&doc, file_text)?;
    Ok(ExitCode::SUCCESS)
}

fn latency(a: LatencyArgs) -> anyhow::Result<ExitCode> {
    let size = size_arg("--size", &a.size)?;
    let stride = usize::try_from(parse_size("--stride", &a.stride)?)
        .map_err(|_| UsageError::new("--stride", "too large"))?;
    let pattern = Pattern::parse(&a.pattern, a.shape, stride)?;
    if a.write_pct > 100 {
        return Err(UsageError::new(
            "--write-pct",
            format!("{} is not a percentage; use 0 to 100", a.write_pct),
        )
        .into());
    }
    let mode = match a.mode.as_str() {
        "per-access" => Mode::PerAccess,
        "clock" => Mode::Clock,
        "both" => Mode::Both,
        other => {
            return Err(UsageError::new(
                "--mode",
                format!("'{other}' is not a mode; use per-access, clock or both"),
            )
            .into())
        }
    };
    if a.rounds == 0 || a.rounds > MAX_ROUNDS {
        return Err(UsageError::new(
            "--rounds",
            format!("{} is out of range; use 1 to {MAX_ROUNDS}", a.rounds),
        )
        .into());
    }
    let pages = pages_arg(&a.place)?;
    let cpus = place(&a.place, a.threads, "--threads")?;
    let runtime_ns = runtime_arg("--runtime", &a.runtime)?;
    let interval_ns = match &a.interval {
        Some(t) => {
            let ns = runtime_arg("--interval", t)?;
            if ns < 10_000_000 {
                return Err(UsageError::new(
                    "--interval",
                    format!("'{t}' is shorter than 10ms; use e.g. 1s or 100ms"),
                )
                .into());
            }
            ns
        }
        None => 0,
    };
    let plan = LatencyPlan {
        size_bytes: size,
        pages,
        group_pages: a.group_pages,
        pattern,
        write_pct: a.write_pct,
        cpus,
        membind: a.place.membind,
        mode,
        rounds: a.rounds,
        runtime_ns,
        interval_ns,
        seed: a.seed,
    };
    let started = SystemTime::now();
    if a.matrix {
        return latency_matrix(plan, started, &a.output);
    }
    let mut printed_header = false;
    let json_lines = a.interval_json;
    let mut on_interval = |f: &dmalab_probe::latency::IntervalFigures| {
        let mut out = std::io::stdout().lock();
        if json_lines {
            if let Ok(line) = serde_json::to_string(f) {
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            return;
        }
        if !printed_header {
            let _ = writeln!(out, "{}", text::interval_header());
            printed_header = true;
        }
        let _ = writeln!(out, "{}", text::interval_line(f));
        let _ = out.flush();
    };
    let (result, warnings) = dmalab_probe::latency::run(&plan, &mut on_interval)
        .map_err(lift)
        .context("dmalab probe latency")?;
    let full = text::latency(&plan, &result);
    // Intervals were printed as they happened; do not repeat them.
    let mut shown = result.clone();
    shown.intervals.clear();
    print!("{}", text::latency(&plan, &shown));
    finish(
        "probe latency",
        plan,
        result,
        warnings,
        started,
        &a.output,
        &full,
    )
}

fn latency_matrix(
    plan: LatencyPlan,
    started: SystemTime,
    output: &OutputArgs,
) -> anyhow::Result<ExitCode> {
    let nodes = numa_nodes();
    let (tsc, timer, mut warnings) = dmalab_probe::latency::measure_timing();
    if nodes.len() == 1 {
        warnings.push(format!(
            "this host has one NUMA node (node {}); the matrix is 1x1",
            nodes[0]
        ));
    }
    let matrix = dmalab_probe::latency::matrix(&plan, &nodes, &tsc, &timer).map_err(lift)?;
    let result = LatencyResult {
        tsc,
        timer,
        matrix,
        ..Default::default()
    };
    let t = text::latency(&plan, &result);
    print!("{t}");
    finish("probe latency", plan, result, warnings, started, output, &t)
}

fn bandwidth(a: BandwidthArgs) -> anyhow::Result<ExitCode> {
    let traffic = Traffic::parse("--traffic", &a.traffic)?;
    let size = size_arg("--size", &a.size)?;
    let pages = pages_arg(&a.place)?;
    let cpus = place(&a.place, a.threads, "--threads")?;
    let runtime_ns = runtime_arg("--runtime", &a.runtime)?;
    let plan = BandwidthPlan {
        traffic,
        size_bytes: size,
        pages,
        cpus,
        membind: a.place.membind,
        delay_cycles: a.delay,
        runtime_ns,
        interval_ns: match &a.interval {
            Some(t) => {
                let ns = runtime_arg("--interval", t)?;
                if ns < 10_000_000 {
                    return Err(UsageError::new(
                        "--interval",
                        format!("'{t}' is shorter than 10ms; use e.g. 1s or 100ms"),
                    )
                    .into());
                }
                ns
            }
            None => 0,
        },
    };
    let started = SystemTime::now();
    let json_lines = a.interval_json;
    let mut on_interval = |i: &dmalab_probe::bandwidth::BandwidthInterval| {
        let mut out = std::io::stdout().lock();
        let line = if json_lines {
            serde_json::to_string(i).unwrap_or_default()
        } else {
            format!(
                "{:>5} {:>8.2} s  {}/s",
                i.index,
                i.start_ns as f64 / 1e9,
                dmalab_core::units::fmt_bytes(i.bw_bytes)
            )
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let result = dmalab_probe::bandwidth::run_intervals(&plan, &mut on_interval)
        .map_err(lift)
        .context("dmalab probe bandwidth")?;
    let t = text::bandwidth(&plan, &result);
    print!("{t}");
    let mut warnings = Vec::new();
    if dmalab_core::signal::stop_requested() {
        warnings.push("interrupted: figures cover the part that ran".into());
    }
    finish(
        "probe bandwidth",
        plan,
        result,
        warnings,
        started,
        &a.output,
        &t,
    )
}

fn loaded(a: LoadedArgs) -> anyhow::Result<ExitCode> {
    let traffic = Traffic::parse("--traffic", &a.traffic)?;
    let size = size_arg("--size", &a.size)?;
    let bw_size = size_arg("--bw-size", &a.bw_size)?;
    let pages = pages_arg(&a.place)?;
    let point_runtime_ns = runtime_arg("--point-runtime", &a.point_runtime)?;
    let mut delays = Vec::new();
    for d in a.delays.split(',') {
        let v: u32 = d.trim().parse().map_err(|_| {
            UsageError::new(
                "--delays",
                format!("'{d}' is not a number of cycles; use e.g. 5000,1000,100,0"),
            )
        })?;
        delays.push(v);
    }
    // CPUs the placement allows, to size the default number of load
    // threads; `place` below checks everything.
    let available = match (&a.place.cpus_allowed, a.place.cpunodebind) {
        (Some(l), _) => parse_cpu_list("--cpus-allowed", l)?.len(),
        (None, Some(n)) => node_cpus(n).map_or(1, |c| c.len()),
        (None, None) => allowed_cpus().len(),
    };
    let load_threads = a.load_threads.unwrap_or(available.saturating_sub(1).max(1));
    if load_threads == 0 {
        return Err(UsageError::new("--load-threads", "0 load threads; use at least 1").into());
    }
    let cpus = place(&a.place, load_threads + 1, "--load-threads").map_err(|e| {
        UsageError::new(
            e.option,
            format!("{} (one CPU goes to the latency thread)", e.message),
        )
    })?;
    let plan = LoadedPlan {
        size_bytes: size,
        bw_size_bytes: bw_size,
        pages,
        group_pages: a.group_pages,
        traffic,
        latency_cpu: cpus[0],
        load_cpus: cpus[1..].to_vec(),
        membind: a.place.membind,
        delays_cycles: delays,
        point_runtime_ns,
        seed: a.seed,
    };
    let started = SystemTime::now();
    println!("{}", text::loaded_header());
    let mut on_point = |p: &dmalab_probe::loaded::LoadedPoint| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", text::loaded_line(p));
        let _ = out.flush();
    };
    let (result, warnings) = dmalab_probe::loaded::run(&plan, &mut on_point)
        .map_err(lift)
        .context("dmalab probe loaded")?;
    let t = text::loaded(&plan, &result);
    println!(
        "{}",
        text::timing_lines(&result.tsc, &result.timer).trim_end()
    );
    finish(
        "probe loaded",
        plan,
        result,
        warnings,
        started,
        &a.output,
        &t,
    )
}
