//! The victim and its metric stream: one figure per control interval.
//!
//! * `probe latency`: `dmalab probe latency --interval T --interval-json`,
//!   one JSON line per interval (mean and percentiles, nanoseconds).
//! * `exec`: any command; every output line the regex matches is one
//!   interval's figure (the first capture group, or the whole match), as
//!   `exec` victims of `dmalab run` read their figure.
//! * any of these with a counter recipe's metric
//!   (`--victim-counters RECIPE:METRIC`): the victim's own output is not
//!   read; its tasks (and their children) are counted from before their
//!   first instruction, and the metric over each interval is its figure.
//!
//! The victim runs in its own process group for the whole session, its
//! lines read by a thread that sends figures down a channel.

use crate::slo::Stat;
use regex::Regex;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Duration;

/// What the victim is.
#[derive(Clone, Debug)]
pub enum VictimSpec {
    /// `dmalab probe latency` with these extra flags.
    ProbeLatency {
        /// Flags after `probe latency` (size, pattern, pinning, ...).
        args: Vec<String>,
    },
    /// `dmalab probe bandwidth` with these extra flags.
    ProbeBandwidth {
        /// Flags after `probe bandwidth` (traffic, size, threads, pinning).
        args: Vec<String>,
    },
    /// Any program; the regex reads one figure per matching line.
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
        /// The first capture group (or the whole match) is the figure.
        regex: Regex,
    },
    /// One of the others, whose figure is a counter recipe's metric over
    /// its tasks.
    Counted {
        /// The victim that runs.
        inner: Box<VictimSpec>,
        /// The metric that is its figure.
        metric: CounterMetric,
    },
}

/// A counter recipe's metric (`RECIPE:METRIC`, e.g.
/// `software:cpus_utilized`).
#[derive(Clone, Copy, Debug)]
pub struct CounterMetric {
    /// The recipe, as `--counters` names it.
    pub recipe: &'static dmalab_counters::recipes::Recipe,
    /// The metric of the recipe.
    pub def: dmalab_counters::recipes::MetricDef,
}

impl CounterMetric {
    /// Parses `RECIPE:METRIC`; the error names `option` and lists what the
    /// recipe offers.
    pub fn parse(option: &str, text: &str) -> Result<Self, dmalab_core::UsageError> {
        use dmalab_core::UsageError as U;
        let names = || {
            dmalab_counters::recipes::RECIPES
                .iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some((r, m)) = text.split_once(':') else {
            return Err(U::new(
                option,
                format!(
                    "'{text}' is not RECIPE:METRIC, e.g. software:cpus_utilized (recipes: {})",
                    names()
                ),
            ));
        };
        let recipe = dmalab_counters::recipes::find(r.trim()).ok_or_else(|| {
            U::new(
                option,
                format!("no counter recipe '{r}' (recipes: {})", names()),
            )
        })?;
        let def = recipe
            .metrics
            .iter()
            .find(|d| d.name == m.trim())
            .copied()
            .ok_or_else(|| {
                U::new(
                    option,
                    format!(
                        "recipe {} has no metric '{m}' (it has {})",
                        recipe.name,
                        recipe
                            .metrics
                            .iter()
                            .map(|d| d.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
        Ok(Self { recipe, def })
    }

    /// The event ids the metric is computed from.
    fn events(&self) -> Vec<&'static str> {
        use dmalab_counters::recipes::Kind as K;
        match self.def.kind {
            K::Sum { events, .. } | K::Rate { events, .. } => events.to_vec(),
            K::Ratio { num, den, .. } => num.iter().chain(den).copied().collect(),
        }
    }
}

impl VictimSpec {
    /// A short description for records (`probe latency`, `exec: prog`).
    pub fn label(&self) -> String {
        match self {
            VictimSpec::ProbeLatency { .. } => "probe latency".into(),
            VictimSpec::ProbeBandwidth { .. } => "probe bandwidth".into(),
            VictimSpec::Exec { argv, .. } => format!("exec: {}", argv.join(" ")),
            VictimSpec::Counted { inner, metric } => format!(
                "{}, counters {}:{}",
                inner.label(),
                metric.recipe.name,
                metric.def.name
            ),
        }
    }

    /// The unit of its figures.
    pub fn unit(&self) -> &'static str {
        match self {
            VictimSpec::ProbeLatency { .. } => "ns",
            VictimSpec::ProbeBandwidth { .. } => "B/s",
            VictimSpec::Exec { .. } => "",
            VictimSpec::Counted { metric, .. } => metric.def.unit,
        }
    }

    /// Checks that `stat` is a figure this victim reports; the error names
    /// the option.
    pub fn check_stat(&self, stat: Stat) -> Result<(), dmalab_core::UsageError> {
        match (self, stat) {
            (VictimSpec::ProbeLatency { .. }, Stat::Value | Stat::Bw) => {
                Err(dmalab_core::UsageError::new(
                    "--slo",
                    format!(
                        "a probe latency victim reports mean, p50, p90, p99, p99.9 and max, not {}",
                        stat.name()
                    ),
                ))
            }
            (VictimSpec::ProbeBandwidth { .. }, s) if s != Stat::Bw => {
                Err(dmalab_core::UsageError::new(
                    "--slo",
                    "a probe bandwidth victim reports bw: write 'bw >= 0.8 x baseline' or 'bw >= 2G/s'",
                ))
            }
            (VictimSpec::Counted { metric, .. }, s) if s != Stat::Value => {
                Err(dmalab_core::UsageError::new(
                    "--slo",
                    format!(
                        "with --victim-counters the figure is the metric {} ({}): write 'value <= ...' or 'value >= ...', not '{}'",
                        metric.def.name,
                        metric.def.unit,
                        s.name()
                    ),
                ))
            }
            (VictimSpec::Exec { .. }, s) if s != Stat::Value => Err(dmalab_core::UsageError::new(
                "--slo",
                format!(
                    "an exec victim reports the figure its regex reads: write 'value <= ...' or 'value >= ...', not '{}'",
                    s.name()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// One interval's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Mean, ns.
    pub mean: Option<f64>,
    /// Median, ns.
    pub p50: Option<f64>,
    /// 90th percentile, ns.
    pub p90: Option<f64>,
    /// 99th percentile, ns.
    pub p99: Option<f64>,
    /// 99.9th percentile, ns.
    pub p99_9: Option<f64>,
    /// Largest, ns.
    pub max: Option<f64>,
    /// Bandwidth, bytes per second.
    pub bw: Option<f64>,
    /// An exec victim's figure.
    pub value: Option<f64>,
}

impl Figures {
    /// The figure `stat` names.
    pub fn get(&self, stat: Stat) -> Option<f64> {
        match stat {
            Stat::Mean => self.mean,
            Stat::P50 => self.p50,
            Stat::P90 => self.p90,
            Stat::P99 => self.p99,
            Stat::P99_9 => self.p99_9,
            Stat::Max => self.max,
            Stat::Bw => self.bw,
            Stat::Value => self.value,
        }
    }
}

/// One line of `probe latency --interval-json`, as the throttle reads it
/// (`dmalab_probe::latency::IntervalFigures`; the percentiles are absent
/// from an interval without accesses).
#[derive(serde::Deserialize)]
struct LatencyLine {
    mean_ns: Option<f64>,
    p50_ns: Option<f64>,
    p90_ns: Option<f64>,
    p99_ns: Option<f64>,
    p99_9_ns: Option<f64>,
    max_ns: Option<f64>,
}

/// One line of `probe bandwidth --interval-json`
/// (`dmalab_probe::bandwidth::BandwidthInterval`).
#[derive(serde::Deserialize)]
struct BandwidthLine {
    bw_bytes: f64,
}

/// Parses one line of `probe latency --interval-json`.
pub fn parse_probe_line(line: &str) -> Option<Figures> {
    let t = line.trim();
    if !t.starts_with('{') {
        return None;
    }
    let v: LatencyLine = serde_json::from_str(t).ok()?;
    Some(Figures {
        mean: v.mean_ns,
        p50: v.p50_ns,
        p90: v.p90_ns,
        p99: v.p99_ns,
        p99_9: v.p99_9_ns,
        max: v.max_ns,
        bw: None,
        value: None,
    })
}

/// Parses one line of `probe bandwidth --interval-json`.
pub fn parse_bandwidth_line(line: &str) -> Option<Figures> {
    let t = line.trim();
    if !t.starts_with('{') {
        return None;
    }
    let v: BandwidthLine = serde_json::from_str(t).ok()?;
    Some(Figures {
        bw: Some(v.bw_bytes),
        ..Figures::default()
    })
}

/// Parses one output line of an exec victim.
pub fn parse_exec_line(re: &Regex, line: &str) -> Option<Figures> {
    let c = re.captures(line)?;
    let m = c.get(1).or_else(|| c.get(0))?;
    let value: f64 = m.as_str().trim().parse().ok()?;
    value.is_finite().then_some(Figures {
        value: Some(value),
        ..Figures::default()
    })
}

/// Reads one output line of the victim.
type LineParser = Box<dyn Fn(&str) -> Option<Figures> + Send>;

/// A running victim.
pub struct Victim {
    child: Child,
    rx: Receiver<Figures>,
    stderr: PathBuf,
}

/// Why no figure came.
#[derive(Debug)]
pub enum NoFigure {
    /// The victim ended (its stderr's last lines).
    Ended(String),
    /// Nothing within the time limit.
    Timeout,
}

impl Victim {
    /// Starts the victim: `exe` is the dmalab binary, `interval` the control
    /// interval, `runtime` at least the session's length; stderr goes to a
    /// file in `dir`.
    pub fn start(
        spec: &VictimSpec,
        exe: &Path,
        interval: Duration,
        runtime: Duration,
        dir: &Path,
    ) -> std::io::Result<Self> {
        let stderr = dir.join("victim.stderr");
        let mut cmd = command(spec, exe, interval, runtime);
        if let VictimSpec::Counted { .. } = spec {
            cmd = held(&cmd);
        }
        cmd.stdin(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?);
        dmalab_core::process::prepare(&mut cmd, &setup());
        let (tx, rx) = channel();
        let parse: LineParser = match spec {
            VictimSpec::Counted { metric, .. } => {
                cmd.stdin(Stdio::piped()).stdout(Stdio::null());
                let child = start_counted(cmd, *metric, interval, tx)?;
                return Ok(Self { child, rx, stderr });
            }
            VictimSpec::ProbeLatency { .. } => Box::new(parse_probe_line),
            VictimSpec::ProbeBandwidth { .. } => Box::new(parse_bandwidth_line),
            VictimSpec::Exec { regex, .. } => {
                let re = regex.clone();
                Box::new(move |l| parse_exec_line(&re, l))
            }
        };
        cmd.stdout(Stdio::piped());
        let mut child = cmd.spawn()?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("victim has no stdout"))?;
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(f) = parse(&line) {
                    if tx.send(f).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Self { child, rx, stderr })
    }

    /// The next interval's figures.
    pub fn next(&mut self, timeout: Duration) -> Result<Figures, NoFigure> {
        match self.rx.recv_timeout(timeout) {
            Ok(f) => Ok(f),
            Err(RecvTimeoutError::Timeout) => Err(NoFigure::Timeout),
            Err(RecvTimeoutError::Disconnected) => {
                let _ = self.child.wait();
                Err(NoFigure::Ended(dmalab_core::process::tail_line(
                    &self.stderr,
                    TAIL_LINES,
                )))
            }
        }
    }

    /// Figures already received (drained without waiting).
    pub fn drain(&mut self) -> usize {
        self.rx.try_iter().count()
    }

    /// Stops the victim's process group (SIGTERM, then SIGKILL).
    pub fn stop(mut self) {
        stop_group(&mut self.child);
    }
}

/// The victim's command line (stdio and process group are the caller's).
fn command(spec: &VictimSpec, exe: &Path, interval: Duration, runtime: Duration) -> Command {
    match spec {
        VictimSpec::ProbeLatency { args } | VictimSpec::ProbeBandwidth { args } => {
            let mut c = Command::new(exe);
            let kind = if matches!(spec, VictimSpec::ProbeLatency { .. }) {
                "latency"
            } else {
                "bandwidth"
            };
            c.args(["probe", kind])
                .args(args)
                .arg("--interval")
                .arg(format!("{}ms", interval.as_millis()))
                .arg("--interval-json")
                .arg("--runtime")
                .arg(format!("{}s", runtime.as_secs().max(1)));
            c
        }
        VictimSpec::Exec { argv, .. } => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
        VictimSpec::Counted { inner, .. } => command(inner, exe, interval, runtime),
    }
}

/// `cmd` behind a shell that waits for one line on its standard input and
/// then execs it: the process (same pid before and after the exec) can be
/// counted from before the victim's first instruction. The shell runs on
/// the caller's thread, so the parent-death signal stays tied to the
/// session's main thread (a child forked on a short-lived thread would get
/// it when that thread ends). On EOF instead (the session died) the shell
/// exits without running the victim.
fn held(cmd: &Command) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", "read -r _ && exec \"$@\"", "dmalab-victim"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// Starts `cmd` (made by [`held`], stdin piped), opens the metric's
/// counters on it (inherited by every task it starts), lets it exec, and
/// samples the counters every `interval` on a thread that sends the metric
/// down `tx`. The thread ends when the victim has exited (the receiver
/// then sees the channel close) or the receiver is gone. Fails, naming the
/// reason, when this host cannot count an event the metric needs.
fn start_counted(
    mut cmd: Command,
    metric: CounterMetric,
    interval: Duration,
    tx: std::sync::mpsc::Sender<Figures>,
) -> std::io::Result<Child> {
    use dmalab_counters::session::{Request, Scope, Session};
    use std::io::Write;
    let roots = dmalab_counters::Roots::from_env();
    let req = Request::parse("--victim-counters", metric.recipe.name, &roots)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut child = cmd.spawn()?;
    let Ok(pid) = i32::try_from(child.id()) else {
        stop_group(&mut child);
        return Err(std::io::Error::other("the victim's pid is out of range"));
    };
    let mut session = Session::open(
        &req,
        &Scope::Task(pid),
        &roots,
        Path::new(dmalab_core::ledger::STATE_DIR),
    );
    let needed = metric.events();
    let lacking: Vec<String> = session
        .report()
        .unavailable
        .into_iter()
        .filter(|u| needed.contains(&u.id.as_str()))
        .map(|u| format!("{}: {}", u.id, u.message))
        .collect();
    if !lacking.is_empty() {
        stop_group(&mut child);
        return Err(std::io::Error::other(format!(
            "this host cannot count the metric {} of recipe {}: {}",
            metric.def.name,
            metric.recipe.name,
            lacking.join("; ")
        )));
    }
    session.start();
    // The line that lets the shell exec the victim; its stdin then ends.
    let go = child.stdin.take().map(|mut w| w.write_all(b"go\n"));
    if !matches!(go, Some(Ok(()))) {
        stop_group(&mut child);
        return Err(std::io::Error::other("cannot release the held victim"));
    }
    let pid = child.id();
    let name = metric.def.name;
    std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        for k in 1u32.. {
            let due = interval * k;
            if let Some(wait) = due.checked_sub(t0.elapsed()) {
                std::thread::sleep(wait);
            }
            if !running(pid) {
                break;
            }
            session.sample(t0.elapsed().as_secs_f64());
            let value = session
                .report()
                .series
                .last()
                .and_then(|p| p.metrics.iter().find(|m| m.name == name))
                .and_then(|m| m.value);
            if let Some(v) = value.filter(|v| v.is_finite()) {
                let f = Figures {
                    value: Some(v),
                    ..Figures::default()
                };
                if tx.send(f).is_err() {
                    break;
                }
            }
        }
        session.stop();
    });
    Ok(child)
}

/// True while `pid` is a live process (not gone, not a zombie).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// How the session's children are started: a group of their own, and
/// SIGTERM when the session dies (even by `kill -9`), so no victim or
/// aggressor outlives it.
pub fn setup() -> dmalab_core::process::Setup {
    dmalab_core::process::Setup {
        own_group: true,
        parent_death: Some(libc::SIGTERM),
        cpus: Vec::new(),
    }
}

/// How many of a child's last stderr lines an error message quotes.
pub const TAIL_LINES: usize = 5;

/// SIGTERM to the child's process group, a grace period, then SIGKILL.
pub fn stop_group(child: &mut Child) {
    dmalab_core::process::stop_group(child, libc::SIGTERM, Duration::from_secs(5));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_lines_and_exec_lines() {
        let f = parse_probe_line(
            r#"{"index":3,"start_ns":3000000000,"accesses":10,"mean_ns":91.5,"p50_ns":88,"p90_ns":100,"p99_ns":180,"p99_9_ns":400,"max_ns":900}"#,
        )
        .unwrap();
        assert_eq!(f.get(Stat::P99), Some(180.0));
        assert_eq!(f.get(Stat::Mean), Some(91.5));
        assert!(parse_probe_line(" intv  t_s").is_none());
        let b = parse_bandwidth_line(
            r#"{"index":0,"start_ns":0,"interval_ns":1000000000,"bw_bytes":5.5e9}"#,
        )
        .unwrap();
        assert_eq!(b.get(Stat::Bw), Some(5.5e9));
        let re = Regex::new(r"ops/s: ([0-9.]+)").unwrap();
        assert_eq!(
            parse_exec_line(&re, "tick ops/s: 1234.5").unwrap().value,
            Some(1234.5)
        );
        assert!(parse_exec_line(&re, "nothing here").is_none());
    }

    /// The interval lines are read from what the probe's own types write
    /// (`dmalab probe ... --interval-json` serializes them as they are).
    #[test]
    fn interval_lines_are_read_from_the_probes_own_types() {
        let l = dmalab_probe::latency::IntervalFigures {
            mean_ns: 91.5,
            p50_ns: Some(88),
            p90_ns: Some(100),
            p99_ns: Some(180),
            p99_9_ns: Some(400),
            max_ns: Some(900),
            ..Default::default()
        };
        let f = parse_probe_line(&serde_json::to_string(&l).unwrap()).unwrap();
        let got: Vec<Option<f64>> = [
            Stat::Mean,
            Stat::P50,
            Stat::P90,
            Stat::P99,
            Stat::P99_9,
            Stat::Max,
        ]
        .iter()
        .map(|s| f.get(*s))
        .collect();
        assert_eq!(
            got,
            [
                Some(91.5),
                Some(88.0),
                Some(100.0),
                Some(180.0),
                Some(400.0),
                Some(900.0)
            ]
        );
        let b = dmalab_probe::bandwidth::BandwidthInterval {
            bw_bytes: 5.5e9,
            ..Default::default()
        };
        let f = parse_bandwidth_line(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(f.get(Stat::Bw), Some(5.5e9));
    }

    #[test]
    fn an_exec_victim_streams_one_figure_per_matching_line() {
        let dir = tempfile::tempdir().unwrap();
        let spec = VictimSpec::Exec {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo v=1; echo noise; echo v=2.5".into(),
            ],
            regex: Regex::new(r"v=([0-9.]+)").unwrap(),
        };
        let mut v = Victim::start(
            &spec,
            Path::new("/bin/false"),
            Duration::from_secs(1),
            Duration::from_secs(1),
            dir.path(),
        )
        .unwrap();
        let t = Duration::from_secs(30);
        assert_eq!(v.next(t).unwrap().value, Some(1.0));
        assert_eq!(v.next(t).unwrap().value, Some(2.5));
        assert!(matches!(v.next(t), Err(NoFigure::Ended(_))));
        v.stop();
    }
}
