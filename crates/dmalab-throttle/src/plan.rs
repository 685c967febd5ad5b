//! From the command line's text to a resolved [`Config`] and victim: every
//! rule about the options lives here (the binary only maps flags).

use crate::actuator::{device_number, IoMaxKey};
use crate::controller::{Kind, Params};
use crate::session::{Config, IoMaxConfig, SweepConfig};
use crate::slo::Slo;
use crate::victim::{CounterMetric, VictimSpec};
use dmalab_core::units::{parse_duration, parse_rate, MAX_DURATION};
use dmalab_core::UsageError;
use dmalab_run::child::ChildCatalog;
use regex::Regex;
use std::path::PathBuf;

/// `--intervals` when not given: enough for the model controller to settle
/// on the simulated plants (it settles within 10 intervals, and the session
/// counts a loop settled when its last third holds still; see the
/// controller's tests).
pub const DEFAULT_INTERVALS: usize = 40;

/// The options as given (text, unparsed).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--victim`: `probe latency [FLAGS]`.
    pub victim: Option<String>,
    /// `--victim-exec`: a command line.
    pub victim_exec: Option<String>,
    /// `--victim-regex`.
    pub victim_regex: Option<String>,
    /// `--victim-counters`: `RECIPE:METRIC`, the victim's figure.
    pub victim_counters: Option<String>,
    /// `--aggressor`: flags of `dmalab load`.
    pub aggressor: Option<String>,
    /// `--experiment`: take victim and aggressor from a `dmalab run` file.
    pub experiment: Option<PathBuf>,
    /// `--victim-name` in the experiment (default: the first).
    pub victim_name: Option<String>,
    /// `--aggressor-name` in the experiment (default: the first).
    pub aggressor_name: Option<String>,
    /// `--slo`, one or more.
    pub slo: Vec<String>,
    /// `--controller`.
    pub controller: Kind,
    /// `--interval`.
    pub interval: String,
    /// `--intervals`.
    pub intervals: usize,
    /// `--baseline-intervals`.
    pub baseline_intervals: usize,
    /// `--warmup-intervals`.
    pub warmup_intervals: usize,
    /// `--min-rate`.
    pub min_rate: String,
    /// `--max-rate`.
    pub max_rate: Option<String>,
    /// `--start-rate`.
    pub start_rate: Option<String>,
    /// `--aimd-increase`.
    pub aimd_increase: f64,
    /// `--aimd-decrease`.
    pub aimd_decrease: f64,
    /// `--pi-kp`.
    pub pi_kp: f64,
    /// `--pi-ki`.
    pub pi_ki: f64,
    /// `--pi-margin`.
    pub pi_margin: f64,
    /// `--pi-boost-max`.
    pub pi_boost_max: f64,
    /// `--model-margin`.
    pub model_margin: f64,
    /// `--model-probe`.
    pub model_probe: bool,
    /// `--settle-band`.
    pub settle_band: f64,
    /// `--sweep`.
    pub sweep: bool,
    /// `--sweep-points`.
    pub sweep_points: usize,
    /// `--sweep-repeat`.
    pub sweep_repeat: usize,
    /// `--sweep-intervals`.
    pub sweep_intervals: usize,
    /// `--io-max-cgroup`: throttle this cgroup v2's I/O instead of an
    /// aggressor.
    pub io_max_cgroup: Option<PathBuf>,
    /// `--io-max-device`: a block device or MAJ:MIN.
    pub io_max_device: Option<String>,
    /// `--io-max-key`: rbps or wbps.
    pub io_max_key: String,
}

/// Flags of `dmalab load` the session sets itself.
const OWN_FLAGS: [&str; 6] = [
    "--rate",
    "--rate-iops",
    "--runtime",
    "--live-stats",
    "--rate-control",
    "--output",
];

fn words(option: &str, text: &str) -> Result<Vec<String>, UsageError> {
    shlex::split(text).ok_or_else(|| {
        UsageError::new(
            option,
            format!("cannot split '{text}' into words (unbalanced quotes?)"),
        )
    })
}

fn check_aggressor(option: &str, args: &[String]) -> Result<(), UsageError> {
    for a in args {
        let name = a.split('=').next().unwrap_or(a);
        if OWN_FLAGS.contains(&name) {
            return Err(UsageError::new(
                option,
                format!("{name} is set by dmalab throttle (rates come from --min-rate/--max-rate/--start-rate); leave it out"),
            ));
        }
    }
    Ok(())
}

/// The victim and aggressor from a `dmalab run` experiment file.
fn from_experiment(
    o: &Options,
    path: &std::path::Path,
    children: &ChildCatalog,
) -> Result<(VictimSpec, Vec<String>), UsageError> {
    let exp = dmalab_run::experiment::load(path, children).map_err(|e| e.to_usage())?;
    let v = match &o.victim_name {
        Some(n) => exp.victims.iter().find(|v| &v.name == n).ok_or_else(|| {
            UsageError::new(
                "--victim-name",
                format!("{} has no victim '{n}'", path.display()),
            )
        })?,
        None => exp.victims.first().ok_or_else(|| {
            UsageError::new(
                "--experiment",
                format!("{} has no [[victim]]", path.display()),
            )
        })?,
    };
    // The session sets the probe's run time and interval itself.
    let kept: Vec<_> = v
        .flags
        .iter()
        .filter(|f| !["--runtime", "--interval"].contains(&f.long().as_str()))
        .cloned()
        .collect();
    let flags = match v.kind.child() {
        Some(cmd) => cmd.argv(&exp.children, &kept).map_err(|why| {
            UsageError::new("--experiment", format!("victim '{}': {why}", v.name))
        })?,
        None => Vec::new(),
    };
    let victim = match &v.kind {
        dmalab_run::experiment::VictimKind::ProbeLatency => VictimSpec::ProbeLatency { args: flags },
        dmalab_run::experiment::VictimKind::ProbeBandwidth => {
            VictimSpec::ProbeBandwidth { args: flags }
        }
        // Counters of an exec victim belong to `dmalab run`'s records; the
        // throttle reads only the victim's own figure.
        dmalab_run::experiment::VictimKind::Exec {
            argv,
            regex: Some(re),
            ..
        } => VictimSpec::Exec {
            argv: argv.clone(),
            regex: re.clone(),
        },
        other => {
            return Err(UsageError::new(
                "--victim-name",
                format!(
                    "victim '{}' is a {} victim; dmalab throttle needs a per-interval figure: a probe latency or probe bandwidth victim, or an exec victim with a regex",
                    v.name,
                    other.label()
                ),
            ))
        }
    };
    let a = match &o.aggressor_name {
        Some(n) => exp
            .aggressors
            .iter()
            .find(|a| &a.name == n)
            .ok_or_else(|| {
                UsageError::new(
                    "--aggressor-name",
                    format!("{} has no aggressor '{n}'", path.display()),
                )
            })?,
        None => exp.aggressors.first().ok_or_else(|| {
            UsageError::new(
                "--experiment",
                format!("{} has no [[aggressor]]", path.display()),
            )
        })?,
    };
    if a.kind != dmalab_run::experiment::AggressorKind::Load {
        return Err(UsageError::new(
            "--aggressor-name",
            format!(
                "aggressor '{}' is not a dmalab load; only a load's rate can be controlled",
                a.name
            ),
        ));
    }
    let kept: Vec<_> = a
        .flags
        .iter()
        .filter(|f| !OWN_FLAGS.contains(&f.long().as_str()))
        .cloned()
        .collect();
    let args = dmalab_run::child::ChildCommand::Load
        .argv(&exp.children, &kept)
        .map_err(|why| UsageError::new("--experiment", format!("aggressor '{}': {why}", a.name)))?;
    Ok((victim, args))
}

/// Resolves the options; `children` are the configs of the commands an
/// `--experiment` file's aggressor and victim run (the binary's catalog).
pub fn resolve(o: &Options, children: &ChildCatalog) -> Result<(Config, VictimSpec), UsageError> {
    let (victim, aggressor_args) = if let Some(path) = &o.experiment {
        if o.victim.is_some() || o.victim_exec.is_some() || o.aggressor.is_some() {
            return Err(UsageError::new(
                "--experiment",
                "takes the victim and aggressor from the file; drop --victim, --victim-exec and --aggressor (pick with --victim-name/--aggressor-name)",
            ));
        }
        from_experiment(o, path, children)?
    } else {
        (victim_from_flags(o)?, aggressor_from_flags(o)?)
    };
    let victim = match &o.victim_counters {
        None => victim,
        Some(text) => VictimSpec::Counted {
            inner: Box::new(victim),
            metric: CounterMetric::parse("--victim-counters", text)?,
        },
    };
    let io_max = io_max_config(o)?;
    check_aggressor("--aggressor", &aggressor_args)?;
    if o.slo.is_empty() {
        return Err(UsageError::new(
            "--slo",
            "needs an objective, e.g. --slo 'p99 <= 1.5 x baseline'",
        ));
    }
    if o.slo.len() > MAX_SLOS {
        return Err(UsageError::new(
            "--slo",
            format!(
                "{} objectives given; at most {MAX_SLOS} (one closed loop each)",
                o.slo.len()
            ),
        ));
    }
    check_counts(o)?;
    let slos = o
        .slo
        .iter()
        .map(|s| Slo::parse("--slo", s))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &slos {
        victim.check_stat(s.stat)?;
    }
    let interval = parse_duration("--interval", &o.interval)?;
    if interval.as_millis() < 100 {
        return Err(UsageError::new(
            "--interval",
            format!("'{}' is shorter than 100ms; use e.g. 1s", o.interval),
        ));
    }
    let (min, max, start) = rates(o)?;
    let params = controller_params(o, min, max)?;
    if !(o.settle_band > 0.0 && o.settle_band < 1.0) {
        return Err(UsageError::new(
            "--settle-band",
            "must be in (0, 1), e.g. 0.1",
        ));
    }
    let sweep = if o.sweep {
        Some(SweepConfig {
            points: o.sweep_points,
            repeat: o.sweep_repeat,
            intervals_per_point: o.sweep_intervals,
        })
    } else {
        None
    };
    let cfg = Config {
        victim: victim.label(),
        victim_unit: victim.unit().into(),
        aggressor_args,
        io_max,
        interval_ns: dmalab_core::schema::ns(interval),
        warmup_intervals: o.warmup_intervals,
        baseline_intervals: o.baseline_intervals,
        intervals: o.intervals,
        slos,
        controller: params,
        start_rate_bytes_per_s: start,
        sweep,
        settle_band: o.settle_band,
    };
    check_session_length(&cfg, &o.interval)?;
    Ok((cfg, victim))
}

/// The victim of a session without `--experiment`: `--victim` (a probe
/// and its flags; `probe latency` by default) or `--victim-exec` with its
/// regex.
fn victim_from_flags(o: &Options) -> Result<VictimSpec, UsageError> {
    let victim = match (&o.victim, &o.victim_exec) {
        (Some(_), Some(_)) => {
            return Err(UsageError::new(
                "--victim-exec",
                "give either --victim or --victim-exec, not both",
            ))
        }
        (None, Some(cmd)) => {
            let argv = words("--victim-exec", cmd)?;
            if argv.is_empty() {
                return Err(UsageError::new("--victim-exec", "is empty; name a program"));
            }
            let re = match (&o.victim_regex, &o.victim_counters) {
                (Some(re), _) => re.as_str(),
                // Its output is not read: the counters are its figure.
                (None, Some(_)) => "^$",
                (None, None) => return Err(UsageError::new(
                    "--victim-regex",
                    "an exec victim needs a regex whose first group is the per-interval figure, e.g. 'ops/s: ([0-9.]+)' (or --victim-counters RECIPE:METRIC)",
                )),
            };
            let regex = Regex::new(re).map_err(|e| {
                UsageError::new("--victim-regex", format!("'{re}' is not a regex: {e}"))
            })?;
            VictimSpec::Exec { argv, regex }
        }
        (v, None) => {
            let w = words("--victim", v.as_deref().unwrap_or("probe latency"))?;
            if w.len() < 2 || w[0] != "probe" || !["latency", "bandwidth"].contains(&w[1].as_str())
            {
                return Err(UsageError::new(
                    "--victim",
                    "must start with 'probe latency' or 'probe bandwidth' (its flags follow); for any other program use --victim-exec with --victim-regex",
                ));
            }
            let args = w[2..].to_vec();
            if args.iter().any(|a| {
                a.starts_with("--runtime") || a.starts_with("--interval") || a == "--matrix"
            }) {
                return Err(UsageError::new(
                    "--victim",
                    "--runtime, --interval and --matrix are set by dmalab throttle; leave them out",
                ));
            }
            if w[1] == "latency" {
                VictimSpec::ProbeLatency { args }
            } else {
                VictimSpec::ProbeBandwidth { args }
            }
        }
    };
    Ok(victim)
}

/// The aggressor's load flags of a session without `--experiment`
/// (none when `--io-max-cgroup` throttles a cgroup's I/O instead).
fn aggressor_from_flags(o: &Options) -> Result<Vec<String>, UsageError> {
    let aggressor = match (&o.aggressor, &o.io_max_cgroup) {
        (Some(_), Some(_)) => {
            return Err(UsageError::new(
                "--io-max-cgroup",
                "throttles I/O that dmalab does not generate; drop --aggressor (or drop --io-max-cgroup to throttle the aggressor)",
            ))
        }
        (Some(a), None) => words("--aggressor", a)?,
        (None, Some(_)) => Vec::new(),
        (None, None) => {
            return Err(UsageError::new(
                "--aggressor",
                "needs the flags of the dmalab load to throttle, e.g. '--engine io_uring --target /var/tmp/f --size 1G --bs 128k' (or --io-max-cgroup for a cgroup's I/O)",
            ))
        }
    };
    Ok(aggressor)
}

/// `--io-max-cgroup`: the cgroup, device and key whose io.max the session
/// sets, checked (None without the flag).
fn io_max_config(o: &Options) -> Result<Option<IoMaxConfig>, UsageError> {
    let io_max = match &o.io_max_cgroup {
        None => None,
        Some(cg) => {
            let key = IoMaxKey::parse("--io-max-key", &o.io_max_key)?;
            if !matches!(key, IoMaxKey::Rbps | IoMaxKey::Wbps) {
                return Err(UsageError::new(
                    "--io-max-key",
                    "the session's rates are bytes per second: use rbps or wbps",
                ));
            }
            let dev = o.io_max_device.as_deref().ok_or_else(|| {
                UsageError::new(
                    "--io-max-device",
                    "names the device io.max limits (a block device such as /dev/vdb, or MAJ:MIN)",
                )
            })?;
            let (major, minor) = device_number("--io-max-device", dev)?;
            if !cg.join("io.max").is_file() {
                return Err(UsageError::new(
                    "--io-max-cgroup",
                    format!(
                        "{} has no io.max: name a cgroup v2 directory whose parent's cgroup.subtree_control has +io (this host may mount cgroup v1 only)",
                        cg.display()
                    ),
                ));
            }
            Some(IoMaxConfig {
                cgroup: cg.clone(),
                major,
                minor,
                key,
            })
        }
    };
    Ok(io_max)
}

/// `--min-rate`, `--max-rate` and `--start-rate` (default: the minimum),
/// bytes per second, checked against each other.
fn rates(o: &Options) -> Result<(f64, f64, f64), UsageError> {
    let min = parse_rate("--min-rate", &o.min_rate)? as f64;
    let max = parse_rate(
        "--max-rate",
        o.max_rate.as_deref().ok_or_else(|| {
            UsageError::new(
                "--max-rate",
                "needs the highest rate the aggressor may get, e.g. 1G/s (the frontier sweeps up to it)",
            )
        })?,
    )? as f64;
    if max <= min {
        return Err(UsageError::new("--max-rate", "must be above --min-rate"));
    }
    let start = match &o.start_rate {
        Some(s) => parse_rate("--start-rate", s)? as f64,
        None => min,
    };
    if !(min..=max).contains(&start) {
        return Err(UsageError::new(
            "--start-rate",
            "must lie between --min-rate and --max-rate",
        ));
    }
    Ok((min, max, start))
}

/// The controller's parameters between `min` and `max`, with every tuning
/// flag, checked.
fn controller_params(o: &Options, min: f64, max: f64) -> Result<Params, UsageError> {
    let mut params = Params::defaults(o.controller, min, max);
    params.aimd_increase = o.aimd_increase;
    params.aimd_decrease = o.aimd_decrease;
    params.pi_kp = o.pi_kp;
    params.pi_ki = o.pi_ki;
    params.pi_margin = o.pi_margin;
    params.pi_boost_max = o.pi_boost_max;
    params.model_margin = o.model_margin;
    params.model_probe = o.model_probe;
    params.validate()?;
    Ok(params)
}

/// The children (victim, aggressor) are started for the whole session:
/// its length must fit their --runtime, or one would refuse to start after
/// the baseline ran. `interval` is the text of `--interval`.
fn check_session_length(cfg: &Config, interval: &str) -> Result<(), UsageError> {
    if crate::session::child_runtime(cfg).is_none_or(|d| d > MAX_DURATION) {
        return Err(UsageError::new(
            "--intervals",
            format!(
                "the session ({} loop(s) of {} intervals, {} baseline, {} warm-up, the sweep's) at {} per interval would run longer than 366 days; use fewer intervals or a shorter --interval",
                cfg.slos.len(),
                cfg.intervals,
                cfg.baseline_intervals,
                cfg.warmup_intervals,
                interval
            ),
        ));
    }
    Ok(())
}

/// The most objectives (`--slo`), each its own closed loop.
pub const MAX_SLOS: usize = 100;

/// Every count flag with its range: `(flag, value, least, most)`. A count
/// sizes a loop and, for the sweep, the table of rates, so each is bounded
/// here, before anything runs (`--sweep-points 4294967295` once passed and
/// aborted allocating 34 GB after the closed loop had run).
fn check_counts(o: &Options) -> Result<(), UsageError> {
    for (name, v, lo, hi) in [
        ("--intervals", o.intervals, 3, 100_000),
        ("--baseline-intervals", o.baseline_intervals, 1, 100_000),
        ("--warmup-intervals", o.warmup_intervals, 0, 1_000),
        ("--sweep-points", o.sweep_points, 2, 1_000),
        ("--sweep-repeat", o.sweep_repeat, 1, 100),
        ("--sweep-intervals", o.sweep_intervals, 1, 1_000),
    ] {
        if !(lo..=hi).contains(&v) {
            return Err(UsageError::new(
                name,
                format!("{v} is out of range; use {lo} to {hi}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_core::child::ChildSpec;

    dmalab_core::child_options! {
        /// A stand-in for `dmalab page`'s config, which the throttle never
        /// starts (and so does not depend on, even in its tests).
        pub struct PageStandIn for ["page"] {
            /// Any key.
            size: Values = "1G",
        }
        runner_sets { output: Values = "x.json" }
    }

    /// The binary's catalog, but for page.
    fn catalog() -> ChildCatalog {
        ChildCatalog {
            load: ChildSpec::of::<dmalab_load::child::LoadChildOptions>(),
            probe_latency: ChildSpec::of::<dmalab_probe::child::LatencyChildOptions>(),
            probe_bandwidth: ChildSpec::of::<dmalab_probe::child::BandwidthChildOptions>(),
            page: ChildSpec::of::<PageStandIn>(),
        }
    }

    fn ok() -> Options {
        Options {
            aggressor: Some("--engine null".into()),
            slo: vec!["p99 <= 1.5 x baseline".into()],
            controller: Kind::Pi,
            interval: "1s".into(),
            intervals: 30,
            baseline_intervals: 5,
            warmup_intervals: 1,
            min_rate: "1M".into(),
            max_rate: Some("100M/s".into()),
            aimd_increase: 0.05,
            aimd_decrease: 0.7,
            pi_kp: 0.1,
            pi_ki: 0.15,
            pi_margin: 0.1,
            pi_boost_max: 4.0,
            model_margin: 0.1,
            settle_band: 0.1,
            sweep_points: 5,
            sweep_repeat: 2,
            sweep_intervals: 3,
            io_max_key: "rbps".into(),
            ..Options::default()
        }
    }

    #[test]
    fn defaults_resolve() {
        let (c, v) = resolve(&ok(), &catalog()).unwrap();
        assert!(matches!(v, VictimSpec::ProbeLatency { ref args } if args.is_empty()));
        assert_eq!(c.start_rate_bytes_per_s, c.controller.min_rate);
        assert_eq!(c.aggressor_args, vec!["--engine", "null"]);
    }

    #[test]
    fn a_counter_metric_wraps_any_victim() {
        let mut o = ok();
        o.victim_exec = Some("sleep 100".into());
        o.victim_counters = Some("software:cpus_utilized".into());
        o.slo = vec!["value >= 0.5 x baseline".into()];
        let (c, v) = resolve(&o, &catalog()).unwrap();
        let VictimSpec::Counted { inner, metric } = v else {
            panic!("{v:?}")
        };
        assert!(matches!(*inner, VictimSpec::Exec { .. }));
        assert_eq!(metric.def.name, "cpus_utilized");
        assert_eq!(c.victim_unit, "CPUs");
    }

    #[test]
    fn bad_options_name_themselves() {
        type Change = Box<dyn Fn(&mut Options)>;
        let cases: Vec<(&str, Change)> = vec![
            (
                "--aggressor",
                Box::new(|o| o.aggressor = Some("--engine null --rate 5M".into())),
            ),
            ("--aggressor", Box::new(|o| o.aggressor = None)),
            ("--max-rate", Box::new(|o| o.max_rate = Some("1k".into()))),
            ("--max-rate", Box::new(|o| o.max_rate = None)),
            ("--slo", Box::new(|o| o.slo = vec!["value <= 3".into()])),
            ("--slo", Box::new(|o| o.slo.clear())),
            (
                "--slo",
                Box::new(|o| o.victim = Some("probe bandwidth".into())),
            ),
            (
                "--victim",
                Box::new(|o| o.victim = Some("page --map 1G".into())),
            ),
            (
                "--victim",
                Box::new(|o| o.victim = Some("probe latency --interval 1s".into())),
            ),
            (
                "--victim-regex",
                Box::new(|o| o.victim_exec = Some("sleep 1".into())),
            ),
            (
                "--victim-counters",
                Box::new(|o| o.victim_counters = Some("software".into())),
            ),
            (
                "--victim-counters",
                Box::new(|o| o.victim_counters = Some("nosuch:x".into())),
            ),
            (
                "--victim-counters",
                Box::new(|o| o.victim_counters = Some("software:nosuch".into())),
            ),
            (
                "--slo",
                Box::new(|o| o.victim_counters = Some("software:cpus_utilized".into())),
            ),
            ("--interval", Box::new(|o| o.interval = "10ms".into())),
            ("--pi-margin", Box::new(|o| o.pi_margin = 1.5)),
            ("--model-margin", Box::new(|o| o.model_margin = 0.0)),
            (
                "--start-rate",
                Box::new(|o| o.start_rate = Some("1G".into())),
            ),
            (
                "--sweep-points",
                Box::new(|o| {
                    o.sweep = true;
                    o.sweep_points = 4294967295;
                }),
            ),
            ("--sweep-points", Box::new(|o| o.sweep_points = 1)),
            ("--sweep-repeat", Box::new(|o| o.sweep_repeat = usize::MAX)),
            ("--sweep-intervals", Box::new(|o| o.sweep_intervals = 0)),
            ("--intervals", Box::new(|o| o.intervals = usize::MAX)),
            ("--intervals", Box::new(|o| o.intervals = 2)),
            (
                "--baseline-intervals",
                Box::new(|o| o.baseline_intervals = 100_001),
            ),
            (
                "--warmup-intervals",
                Box::new(|o| o.warmup_intervals = usize::MAX),
            ),
            (
                "--slo",
                Box::new(|o| o.slo = vec!["p99 <= 2 x baseline".into(); 101]),
            ),
            // Within each bound, but 1000 daily intervals outlast what the
            // children's --runtime takes.
            (
                "--intervals",
                Box::new(|o| {
                    o.interval = "1d".into();
                    o.intervals = 1000;
                }),
            ),
        ];
        for (opt, f) in cases {
            let mut o = ok();
            f(&mut o);
            let e = resolve(&o, &catalog()).unwrap_err();
            assert_eq!(e.option, opt, "{e}");
        }
    }

    #[test]
    fn victim_and_aggressor_come_from_an_experiment_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.toml");
        std::fs::write(
            &p,
            r#"
[[aggressor]]
name = "random"
command = "load"
pattern = "random"
size = "64M"
rate = "10M"

[[victim]]
name = "latency"
command = "probe latency"
size = "64M"
runtime = "2s"

[[victim]]
name = "ops"
command = "exec"
run = ["sh", "-c", "echo ops=1"]
regex = "ops=([0-9]+)"
"#,
        )
        .unwrap();
        let mut o = ok();
        o.aggressor = None;
        o.experiment = Some(p.clone());
        let (c, v) = resolve(&o, &catalog()).unwrap();
        // The session sets rate and runtime itself; the rest is written
        // by `dmalab load`'s config, in its order.
        assert_eq!(
            c.aggressor_args,
            vec!["--size", "64M", "--pattern", "random"]
        );
        assert!(matches!(v, VictimSpec::ProbeLatency { ref args } if args == &["--size", "64M"]));
        o.victim_name = Some("ops".into());
        o.slo = vec!["value >= 0.9 x baseline".into()];
        let (_, v) = resolve(&o, &catalog()).unwrap();
        assert!(matches!(v, VictimSpec::Exec { .. }));
        o.victim_name = Some("nope".into());
        assert_eq!(resolve(&o, &catalog()).unwrap_err().option, "--victim-name");
    }
}
