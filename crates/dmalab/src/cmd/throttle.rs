//! `dmalab throttle`: flags to [`dmalab_throttle::plan::Options`], resolve,
//! run the session, print and write the result.

use crate::cmd::common::OutputArgs;
use anyhow::Context;
use dmalab_throttle::controller::Kind;
use dmalab_throttle::plan::{resolve, Options};
use dmalab_throttle::session::{self, Setup};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

/// Hold a victim's SLO by throttling a DMA aggressor in a closed loop: the
/// victim's figure per interval (a `probe latency` victim, or any command
/// whose output a regex reads) is compared with the SLO, and a controller
/// sets the `dmalab load` aggressor's rate limit for the next interval.
/// The baseline is measured first with the aggressor idle. With --sweep,
/// also the open-loop frontier: the victim's slowdown at fixed rates.
/// See docs/throttle.md.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The victim: `probe latency` and its flags (e.g. 'probe latency
    /// --size 64M --cpus 0').
    #[arg(long, value_name = "'probe latency FLAGS'")]
    pub victim: Option<String>,
    /// A victim command instead; each output line --victim-regex matches
    /// is one interval's figure.
    #[arg(long, value_name = "COMMAND")]
    pub victim_exec: Option<String>,
    /// Regex whose first group (or whole match) is an exec victim's figure.
    #[arg(long, value_name = "REGEX")]
    pub victim_regex: Option<String>,
    /// The victim's figure is a counter recipe's metric over its tasks, per
    /// interval (e.g. software:cpus_utilized; SLO on 'value'); its output
    /// is then not read. DRAM bandwidth: skx-imc-dram:dram_bw_bytes,
    /// icx-imc-dram:dram_bw_bytes, spr-imc-dram:dram_bw_bytes (Intel),
    /// amd-umc-dram:dram_read_bw_bytes (AMD). Recipes: `dmalab info
    /// counters`.
    #[arg(long, value_name = "RECIPE:METRIC")]
    pub victim_counters: Option<String>,
    /// Flags of the `dmalab load` aggressor (without --rate or --runtime),
    /// e.g. '--engine io_uring --target /var/tmp/f --size 1G --bs 128k'.
    #[arg(long, value_name = "'LOAD FLAGS'", allow_hyphen_values = true)]
    pub aggressor: Option<String>,
    /// Take the victim and aggressor from a `dmalab run` experiment file.
    #[arg(long, value_name = "FILE")]
    pub experiment: Option<PathBuf>,
    /// Which [[victim]] of --experiment [default: the first].
    #[arg(long, value_name = "NAME")]
    pub victim_name: Option<String>,
    /// Which [[aggressor]] of --experiment [default: the first].
    #[arg(long, value_name = "NAME")]
    pub aggressor_name: Option<String>,
    /// The objective, STAT OP BOUND: 'p99 <= 1.5 x baseline', 'mean <=
    /// 150ns', 'value >= 0.9 x baseline'. Repeat for one closed loop each.
    #[arg(long, value_name = "SLO", required = true)]
    pub slo: Vec<String>,
    /// The controller: model learns the victim's figure against the rate
    /// and aims at the best rate that keeps a margin; pi and aimd are there
    /// for comparison.
    #[arg(long, value_enum, default_value_t = Kind::Model)]
    pub controller: Kind,
    /// Control interval (the victim reports once per interval).
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub interval: String,
    /// Control intervals per SLO (the model controller settles within 10
    /// on the simulated plants; a loop is settled once its last third holds
    /// still).
    #[arg(long, default_value_t = dmalab_throttle::plan::DEFAULT_INTERVALS, value_name = "N")]
    pub intervals: usize,
    /// Intervals of baseline, aggressor idle.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub baseline_intervals: usize,
    /// Intervals discarded after a start or a fixed-rate change.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub warmup_intervals: usize,
    /// Lowest rate the aggressor is given, bytes per second.
    #[arg(long, default_value = "1M/s", value_name = "BYTES/s")]
    pub min_rate: String,
    /// Highest rate the aggressor is given, bytes per second.
    #[arg(long, value_name = "BYTES/s")]
    pub max_rate: Option<String>,
    /// Rate each closed loop starts at [default: --min-rate].
    #[arg(long, value_name = "BYTES/s")]
    pub start_rate: Option<String>,
    /// AIMD: additive step per interval, share of (max - min).
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    pub aimd_increase: f64,
    /// AIMD: factor applied to the rate on a violation.
    #[arg(long, default_value_t = 0.7, value_name = "FACTOR")]
    pub aimd_decrease: f64,
    /// PI: proportional gain (share of the logarithmic rate range per unit
    /// of slack).
    #[arg(long, default_value_t = 0.1, value_name = "GAIN")]
    pub pi_kp: f64,
    /// PI: integral gain per interval (boosted up to 4x while the victim
    /// stays far inside its bound).
    #[arg(long, default_value_t = 0.15, value_name = "GAIN")]
    pub pi_ki: f64,
    /// PI: slack aimed for (0.1: 10% inside the bound).
    #[arg(long, default_value_t = 0.1, value_name = "SHARE")]
    pub pi_margin: f64,
    /// PI: largest factor on the integral gain while the victim stays far
    /// inside its bound (doubles each such interval; 1: no boost).
    #[arg(long, default_value_t = 4.0, value_name = "FACTOR")]
    pub pi_boost_max: f64,
    /// Model: share of the victim's interference budget (its slack with
    /// the aggressor idle) kept as a margin; at least twice the figure's
    /// noise.
    #[arg(long, default_value_t = 0.1, value_name = "SHARE")]
    pub model_margin: f64,
    /// Model: measure the victim at --min-rate, then at --max-rate, before
    /// the model takes over (learns the range at once; a steep victim is
    /// past its bound for up to two intervals at --max-rate).
    #[arg(long)]
    pub model_probe: bool,
    /// Settled: the rate target stays within this share of the settled rate
    /// (the median of the loop's last third).
    #[arg(long, default_value_t = 0.1, value_name = "SHARE")]
    pub settle_band: f64,
    /// Also measure the open-loop frontier at fixed rates.
    #[arg(long)]
    pub sweep: bool,
    /// Fixed rates of the sweep, evenly spaced from --min-rate to --max-rate.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub sweep_points: usize,
    /// Passes over the sweep's rates.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub sweep_repeat: usize,
    /// Intervals measured at each fixed rate and pass, each judged against
    /// the bound: a rate meets the SLO when at most 5% of its intervals
    /// (all passes) are past it, none in fewer than 20, as the loop after
    /// settling.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub sweep_intervals: usize,
    /// Throttle the I/O of this cgroup v2 (its io.max) instead of starting
    /// an aggressor: for I/O that dmalab does not generate.
    #[arg(long, value_name = "DIR")]
    pub io_max_cgroup: Option<PathBuf>,
    /// The device --io-max-cgroup limits: a block device or MAJ:MIN.
    #[arg(long, value_name = "DEV")]
    pub io_max_device: Option<String>,
    /// The io.max key set: rbps (reads) or wbps (writes).
    #[arg(long, default_value = "rbps", value_name = "KEY")]
    pub io_max_key: String,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `dmalab throttle`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let o = Options {
        victim: a.victim.clone(),
        victim_exec: a.victim_exec.clone(),
        victim_regex: a.victim_regex.clone(),
        victim_counters: a.victim_counters.clone(),
        aggressor: a.aggressor.clone(),
        experiment: a.experiment.clone(),
        victim_name: a.victim_name.clone(),
        aggressor_name: a.aggressor_name.clone(),
        slo: a.slo.clone(),
        controller: a.controller,
        interval: a.interval.clone(),
        intervals: a.intervals,
        baseline_intervals: a.baseline_intervals,
        warmup_intervals: a.warmup_intervals,
        min_rate: a.min_rate.clone(),
        max_rate: a.max_rate.clone(),
        start_rate: a.start_rate.clone(),
        aimd_increase: a.aimd_increase,
        aimd_decrease: a.aimd_decrease,
        pi_kp: a.pi_kp,
        pi_ki: a.pi_ki,
        pi_margin: a.pi_margin,
        pi_boost_max: a.pi_boost_max,
        model_margin: a.model_margin,
        model_probe: a.model_probe,
        settle_band: a.settle_band,
        sweep: a.sweep,
        sweep_points: a.sweep_points,
        sweep_repeat: a.sweep_repeat,
        sweep_intervals: a.sweep_intervals,
        io_max_cgroup: a.io_max_cgroup.clone(),
        io_max_device: a.io_max_device.clone(),
        io_max_key: a.io_max_key.clone(),
    };
    let (cfg, victim) = resolve(&o, &super::children::catalog())?;
    // The aggressor is a `dmalab load` child started after the baseline:
    // its flags are checked now, with load's own rules, and with the rate
    // and run-time flags the session adds.
    if cfg.io_max.is_none() {
        let mut argv = cfg.aggressor_args.clone();
        argv.extend([
            "--rate".to_string(),
            format!("{}", cfg.start_rate_bytes_per_s.round().max(1.0) as u64),
            "--runtime".into(),
            "1s".into(),
        ]);
        crate::cmd::load::check_flags("--aggressor", &argv)?;
    }
    if let Some(p) = &a.output.output {
        dmalab_core::output::output_target(p).map_err(|e| {
            dmalab_core::UsageError::new("--output", format!("cannot write {}: {e}", p.display()))
        })?;
    }
    a.output
        .check(&mut dmalab_core::output::OutputGuard::new())?;
    let exe = std::env::current_exe().context("cannot find the dmalab binary itself")?;
    let started = SystemTime::now();
    let quiet = a.output.quiet;
    let mut progress = |line: &str| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let result = session::run(
        &cfg,
        Setup {
            exe: &exe,
            victim: &victim,
            progress: &mut progress,
        },
    )
    .context("dmalab throttle")?;
    let text = dmalab_throttle::report::text(&cfg, &result);
    out!("{text}");
    let interrupted = result.interrupted;
    let mut doc = dmalab_core::schema::ResultDoc::new(
        "throttle",
        dmalab_core::host::HostInfo::collect(),
        cfg,
        result,
        started,
    );
    if interrupted {
        doc.status = dmalab_core::schema::RunStatus::Interrupted;
    }
    a.output.write(&doc, &text)?;
    // Interrupted runs keep what they measured and exit 0, as `load` does.
    Ok(ExitCode::SUCCESS)
}
