//! Runs an experiment: child processes of the same binary (or any program),
//! pinned, timed, their results read back, one record appended per run.
//!
//! Every child gets its own process group, so a Ctrl-C at the terminal
//! reaches only `dmalab run`, which finishes the current run and stops;
//! and a parent-death signal, so a killed `dmalab run` leaves no aggressor
//! behind.

use crate::error::RunError;
use crate::experiment::{Aggressor, AggressorKind, Experiment, Flag, Victim, VictimKind};
use crate::livestats::{LiveStats, Snapshot, State};
use crate::plan::{self, PlannedRun, PLAIN};
use crate::progress::Progress;
use crate::record::{
    self, AggressorOutcome, Evidence, Failure, Header, RunRecord, Sample, SweepMeta, VictimMeta,
};
use dmalab_core::schema::{rfc3339, RunStatus, ToolInfo, SCHEMA_VERSION};
use dmalab_core::UsageError;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How `dmalab run` is asked to work.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The dmalab binary that runs the dmalab children (the running one).
    pub exe: PathBuf,
    /// The results file (JSON lines).
    pub results: PathBuf,
    /// Start over even when the results file is from another version of
    /// the experiment file (the old file is kept beside it).
    pub restart: bool,
    /// Check the experiment and print the plan, run nothing.
    pub dry_run: bool,
    /// Run only this configuration's part of the plan (one task of a
    /// `dmalab fleet` array split by configuration); None runs all of it.
    pub configuration: Option<String>,
}

/// What a session did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Runs in the plan.
    pub planned: usize,
    /// Runs already in the results file when this session started.
    pub resumed: usize,
    /// Runs this session recorded.
    pub recorded: usize,
    /// Of those, failed.
    pub failed: usize,
    /// Stopped early by SIGINT/SIGTERM.
    pub interrupted: bool,
}

fn usage(opt: impl Into<String>, msg: impl Into<String>) -> RunError {
    RunError::Usage(UsageError::new(opt, msg))
}

fn at(exp: &Experiment, line: usize) -> String {
    format!("{}:{line}", exp.path.display())
}

/// Long flags a dmalab subcommand accepts, from its `--help`.
fn help_flags(exe: &Path, words: &[&str]) -> Result<Vec<String>, RunError> {
    let out = Command::new(exe)
        .args(words)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            RunError::Other(format!(
                "cannot run {} {}: {e}",
                exe.display(),
                words.join(" ")
            ))
        })?;
    if !out.status.success() {
        return Err(RunError::Other(format!(
            "`dmalab {} --help` failed ({}); this build of dmalab lacks that command",
            words.join(" "),
            out.status
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let re =
        regex::Regex::new(r"--([a-z0-9][a-z0-9-]*)").map_err(|e| RunError::Other(e.to_string()))?;
    let mut flags: Vec<String> = re.captures_iter(&text).map(|c| c[1].to_string()).collect();
    flags.sort();
    flags.dedup();
    Ok(flags)
}

/// Flags `dmalab run` sets itself on dmalab children.
const RESERVED: [&str; 3] = ["output", "output-format", "live-stats"];

struct Validated {
    /// Flags per subcommand (`load`, `probe latency`, ...).
    help: BTreeMap<String, Vec<String>>,
}

impl Validated {
    fn accepts(&self, words: &[&str], key: &str) -> bool {
        self.help
            .get(&words.join(" "))
            .is_some_and(|f| f.iter().any(|x| *x == key.replace('_', "-")))
    }
}

fn on_path(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file()))
}

/// Checks everything that can be checked before the first run.
fn validate(exp: &Experiment, exe: &Path) -> Result<Validated, RunError> {
    let mut help = BTreeMap::new();
    let mut words_used: Vec<Vec<&str>> = Vec::new();
    for a in &exp.aggressors {
        if let Some(w) = a.kind.subcommand() {
            words_used.push(w);
        }
    }
    for v in &exp.victims {
        if let Some(w) = v.kind.subcommand() {
            words_used.push(w);
        }
    }
    for w in words_used {
        let k = w.join(" ");
        if let std::collections::btree_map::Entry::Vacant(e) = help.entry(k) {
            e.insert(help_flags(exe, &w)?);
        }
    }
    let val = Validated { help };
    let check = |owner: &str, words: &[&str], f: &Flag| -> Result<(), RunError> {
        let long = f.key.replace('_', "-");
        if RESERVED.contains(&long.as_str()) {
            return Err(usage(
                at(exp, f.line),
                format!(
                    "{owner}: key '{}': dmalab run sets --{long} itself; remove it",
                    f.key
                ),
            ));
        }
        if !val.accepts(words, &f.key) {
            let list = val
                .help
                .get(&words.join(" "))
                .map(|l| l.join(", --"))
                .unwrap_or_default();
            return Err(usage(
                at(exp, f.line),
                format!(
                    "{owner}: unknown key '{}': `dmalab {}` has no flag --{long} (it has --{list})",
                    f.key,
                    words.join(" ")
                ),
            ));
        }
        Ok(())
    };
    for a in &exp.aggressors {
        if let Some(w) = a.kind.subcommand() {
            for f in &a.flags {
                check(&format!("aggressor '{}'", a.name), &w, f)?;
            }
        } else if let AggressorKind::Exec { argv } = &a.kind {
            if !on_path(&argv[0]) {
                return Err(usage(
                    at(exp, a.line),
                    format!(
                        "aggressor '{}': program '{}' not found on PATH",
                        a.name, argv[0]
                    ),
                ));
            }
        }
    }
    for v in &exp.victims {
        if let Some(w) = v.kind.subcommand() {
            for f in &v.flags {
                check(&format!("victim '{}'", v.name), &w, f)?;
            }
        }
        match &v.kind {
            VictimKind::Exec { argv, .. } if !on_path(&argv[0]) => {
                return Err(usage(
                    at(exp, v.line),
                    format!(
                        "victim '{}': program '{}' not found on PATH",
                        v.name, argv[0]
                    ),
                ));
            }
            VictimKind::Exec {
                counters: Some(c), ..
            } => {
                // The request is checked once, by the stat that will run it.
                let out = Command::new(exe)
                    .args(["stat", "--counters", c, "--quiet", "--", "true"])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| RunError::Other(format!("cannot run {}: {e}", exe.display())))?;
                if !out.status.success() {
                    return Err(usage(
                        at(exp, v.line),
                        format!(
                            "victim '{}': counters: {}",
                            v.name,
                            String::from_utf8_lossy(&out.stderr)
                                .trim()
                                .trim_start_matches("dmalab: error: ")
                        ),
                    ));
                }
            }
            VictimKind::Redis(_) => {
                for prog in ["redis-server", "redis-benchmark"] {
                    if !on_path(prog) {
                        return Err(usage(
                            at(exp, v.line),
                            format!("victim '{}': the redis recipe needs {prog}, which is not installed; install it with `apt-get install redis-server redis-tools` (Debian/Ubuntu)", v.name),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    for c in &exp.configurations {
        for f in &c.overrides {
            let ok = exp
                .aggressors
                .iter()
                .any(|a| a.kind.subcommand().is_some_and(|w| val.accepts(&w, &f.key)));
            if !ok {
                return Err(usage(
                    at(exp, f.line),
                    format!(
                        "configuration '{}': key '{}': no aggressor's command has a flag --{}",
                        c.name,
                        f.key,
                        f.key.replace('_', "-")
                    ),
                ));
            }
        }
    }
    if let Some(s) = &exp.sweep {
        let a = exp.aggressors.iter().find(|a| a.name == s.aggressor);
        if let Some(w) = a.and_then(|a| a.kind.subcommand()) {
            if !val.accepts(&w, &s.flag) {
                return Err(usage(
                    at(exp, s.line),
                    format!(
                        "sweep.flag: `dmalab {}` has no flag --{}",
                        w.join(" "),
                        s.flag.replace('_', "-")
                    ),
                ));
            }
        }
    }
    // Let the aggressors check their own values where they can.
    for a in &exp.aggressors {
        let Some(w) = a.kind.subcommand() else {
            continue;
        };
        if !val.accepts(&w, "dry-run") {
            continue;
        }
        let values: Vec<Option<&str>> = match &exp.sweep {
            Some(s) if s.aggressor == a.name => s.values.iter().map(|v| Some(v.as_str())).collect(),
            _ => vec![None],
        };
        for c in &exp.configurations {
            for sv in &values {
                let flags = exp.aggressor_flags(a, c, *sv, &|f| val.accepts(&w, &f.key));
                let out = Command::new(exe)
                    .args(&w)
                    .args(flags.iter().flat_map(|f| f.args()))
                    .arg("--dry-run")
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| RunError::Other(format!("cannot run {}: {e}", exe.display())))?;
                if !out.status.success() {
                    let err = String::from_utf8_lossy(&out.stderr);
                    let last = err
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("")
                        .trim();
                    let last = last.strip_prefix("dmalab: error: ").unwrap_or(last);
                    return Err(usage(
                        at(exp, a.line),
                        format!("aggressor '{}' in configuration '{}': `dmalab {} --dry-run` refused it: {last}", a.name, c.name, w.join(" ")),
                    ));
                }
            }
        }
    }
    Ok(val)
}

/// The header of a new results file.
fn header(exp: &Experiment, planned: usize) -> Header {
    Header {
        record: "header".into(),
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo::this(),
        experiment: exp.name.clone(),
        experiment_path: exp.path.display().to_string(),
        experiment_hash: exp.hash.clone(),
        experiment_toml: exp.text.clone(),
        started_at: rfc3339(SystemTime::now()),
        host: dmalab_core::host::HostInfo::collect(),
        planned_runs: planned,
        victims: exp
            .victims
            .iter()
            .map(|v| VictimMeta {
                name: v.name.clone(),
                command: v.kind.label().into(),
                metric: v.metric.clone(),
                unit: v.unit.clone(),
                better: v.better,
            })
            .collect(),
        configurations: exp.configurations.iter().map(|c| c.name.clone()).collect(),
        loads: plan::load_names(exp),
        sweep: exp.sweep.as_ref().map(|s| SweepMeta {
            aggressor: s.aggressor.clone(),
            flag: s.flag.clone(),
            values: s.values.clone(),
        }),
        noisy_cv_pct: exp.noisy_cv_pct,
        aggressor_cpus: dmalab_core::cpus::format_cpu_list(&exp.placement.aggressor),
        victim_cpus: dmalab_core::cpus::format_cpu_list(&exp.placement.victims),
        warnings: exp.warnings.clone(),
        hosts: Vec::new(),
    }
}

/// Opens the results file: new (header written), resumed (torn tail cut,
/// done indices returned) or refused; also says whether an old file was
/// moved aside (--restart).
fn open_results(
    exp: &Experiment,
    opts: &RunOptions,
    runs: &[PlannedRun],
    planned: usize,
) -> Result<(Vec<bool>, bool), RunError> {
    let path = &opts.results;
    let mut done = vec![false; runs.len()];
    let mut renamed = false;
    let exists = std::fs::metadata(path)
        .map(|m| m.len() > 0)
        .unwrap_or(false);
    if exists {
        let keep_old = |why: &str| -> Result<(), RunError> {
            let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
                .to_string()
                .replace(':', "");
            let old = PathBuf::from(format!("{}.{stamp}.old", path.display()));
            std::fs::rename(path, &old).map_err(|e| RunError::io(path, e))?;
            eprintln!(
                "dmalab run: {why}; the old results are kept as {}",
                old.display()
            );
            Ok(())
        };
        match record::read(path) {
            Ok(res) if res.header.experiment_hash == exp.hash && !opts.restart => {
                // Cut a record torn by a kill, then skip what is done.
                let f = std::fs::OpenOptions::new().write(true).open(path).map_err(|e| RunError::io(path, e))?;
                f.set_len(res.complete_len).map_err(|e| RunError::io(path, e))?;
                f.sync_all().map_err(|e| RunError::io(path, e))?;
                for r in &res.runs {
                    let Some(p) = runs.get(r.index) else {
                        return Err(RunError::Other(format!("{}: run index {} is outside the plan of {} runs", path.display(), r.index, runs.len())));
                    };
                    let c = &exp.configurations[p.configuration].name;
                    let v = &exp.victims[p.victim].name;
                    let l = p.aggressor.map_or(PLAIN, |a| exp.aggressors[a].name.as_str());
                    if (&r.configuration, &r.victim, r.load.as_str(), &r.repetition, &r.sweep_value)
                        != (c, v, l, &p.repetition, &p.sweep_value)
                    {
                        return Err(RunError::Other(format!("{}: run {} does not match the plan; the results file was edited", path.display(), r.index)));
                    }
                    done[r.index] = true;
                }
                return Ok((done, false));
            }
            Ok(res) if !opts.restart => {
                return Err(usage(
                    "--restart",
                    format!(
                        "{} holds results of a different version of the experiment file (hash {}…, now {}…); resuming would mix them. Pass --restart to start over (the old file is kept), or choose another --results file",
                        path.display(),
                        &res.header.experiment_hash[..12.min(res.header.experiment_hash.len())],
                        &exp.hash[..12]
                    ),
                ))
            }
            Ok(_) => {
                keep_old("--restart")?;
                renamed = true;
            }
            Err(e) if !opts.restart => {
                return Err(usage("--results", format!("{e}; pass --restart to start over (the file is kept) or choose another file")))
            }
            Err(_) => {
                keep_old("--restart")?;
                renamed = true;
            }
        }
    }
    let h = header(exp, planned);
    dmalab_core::output::append_json_line(path, &h).map_err(|e| RunError::io(path, e))?;
    Ok((done, renamed))
}

/// The last `max` bytes of a file, lines intact where possible.
fn tail(path: &Path, max: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let mut b = Vec::new();
        let _ = f.read_to_end(&mut b);
        let start = b.len().saturating_sub(max);
        s = String::from_utf8_lossy(&b[start..]).into_owned();
        if start > 0 {
            if let Some(i) = s.find('\n') {
                s = s[i + 1..].to_string();
            }
        }
    }
    s
}

/// A spawned child in its own process group.
struct Spawned {
    child: std::process::Child,
    pid: i32,
    stdout: PathBuf,
    stderr: PathBuf,
}

fn spawn(argv: &[String], cpus: &[usize], dir: &Path, tag: &str) -> std::io::Result<Spawned> {
    let stdout = dir.join(format!("{tag}.stdout"));
    let stderr = dir.join(format!("{tag}.stderr"));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout)?)
        .stderr(std::fs::File::create(&stderr)?)
        .current_dir(dir);
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: c is inside the set (checked above).
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    let pin = !cpus.is_empty();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls on data prepared beforehand.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if pin && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id() as i32;
    Ok(Spawned {
        child,
        pid,
        stdout,
        stderr,
    })
}

fn killpg(pid: i32, sig: i32) {
    // SAFETY: signals our own child's process group (pgid = its pid).
    unsafe { libc::kill(-pid, sig) };
}

/// Waits for a child up to `timeout`; returns (status, end instant), or
/// None after killing it when the time is up.
fn wait_timeout(sp: Spawned, timeout: Duration) -> (Option<ExitStatus>, Instant, bool) {
    let pid = sp.pid;
    let mut child = sp.child;
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let st = child.wait();
        let t = Instant::now();
        let _ = tx.send((st.ok(), t));
    });
    match rx.recv_timeout(timeout) {
        Ok((st, t)) => {
            let _ = waiter.join();
            // Whatever the child left in its group goes too.
            killpg(pid, libc::SIGKILL);
            (st, t, false)
        }
        Err(_) => {
            killpg(pid, libc::SIGKILL);
            let r = rx.recv().ok();
            let _ = waiter.join();
            (r.and_then(|x| x.0), Instant::now(), true)
        }
    }
}

fn failure_from(reason: String, st: Option<ExitStatus>, stderr: &Path) -> Failure {
    Failure {
        reason,
        exit_status: st.and_then(|s| s.code()),
        signal: st.and_then(|s| s.signal()),
        stderr_tail: tail(stderr, 2000),
    }
}

/// Samples the aggressor's counters once per second while the victim runs.
struct Window {
    stats: Option<Arc<LiveStats>>,
    start: Option<Snapshot>,
    end: Option<Snapshot>,
    sampler: Option<(mpsc::Sender<()>, std::thread::JoinHandle<Vec<Sample>>)>,
    t0: Option<Instant>,
    t1: Option<Instant>,
}

impl Window {
    fn new(stats: Option<Arc<LiveStats>>) -> Self {
        Self {
            stats,
            start: None,
            end: None,
            sampler: None,
            t0: None,
            t1: None,
        }
    }

    /// The victim starts now.
    fn start(&mut self) {
        if let Some(ls) = &self.stats {
            let s0 = ls.snapshot();
            self.start = Some(s0);
            let ls = ls.clone();
            let (tx, rx) = mpsc::channel::<()>();
            let h = std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut prev = s0;
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_secs(1))
                {
                    let s = ls.snapshot();
                    out.push(Sample {
                        t_ns: s.taken_ns.saturating_sub(s0.taken_ns),
                        data_bytes: s.data_bytes.saturating_sub(prev.data_bytes),
                        commands: s.commands.saturating_sub(prev.commands),
                        interval_ns: s.taken_ns.saturating_sub(prev.taken_ns),
                    });
                    prev = s;
                }
                out
            });
            self.sampler = Some((tx, h));
        }
        self.t0 = Some(Instant::now());
    }

    /// The victim ended now.
    fn end(&mut self) {
        self.t1 = Some(Instant::now());
        if let Some(ls) = &self.stats {
            self.end = Some(ls.snapshot());
        }
    }

    fn wall_ns(&self) -> u64 {
        match (self.t0, self.t1) {
            (Some(a), Some(b)) => dmalab_core::schema::ns(b.duration_since(a)),
            _ => 0,
        }
    }

    fn evidence(mut self) -> Option<Evidence> {
        let samples = match self.sampler.take() {
            Some((tx, h)) => {
                let _ = tx.send(());
                h.join().unwrap_or_default()
            }
            None => Vec::new(),
        };
        let (a, b) = (self.start?, self.end?);
        let window_ns = b.taken_ns.saturating_sub(a.taken_ns).max(1);
        let secs = window_ns as f64 / 1e9;
        let data_bytes = b.data_bytes.saturating_sub(a.data_bytes);
        let commands = b.commands.saturating_sub(a.commands);
        Some(Evidence {
            window_ns,
            data_bytes,
            commands,
            blocks: b.blocks.saturating_sub(a.blocks),
            bw_bytes: data_bytes as f64 / secs,
            cmd_per_s: commands as f64 / secs,
            running_throughout: a.state == State::Running && b.state == State::Running,
            samples,
        })
    }
}

/// A running aggressor.
struct RunningAggressor {
    sp: Spawned,
    argv: Vec<String>,
    output: Option<PathBuf>,
    stats: Option<Arc<LiveStats>>,
}

fn secs_arg(d: Duration) -> String {
    format!("{}s", d.as_secs().max(1))
}

/// Starts an aggressor and waits until it runs plus the warm-up.
fn start_aggressor(
    exp: &Experiment,
    opts: &RunOptions,
    val: &Validated,
    a: &Aggressor,
    p: &PlannedRun,
    dir: &Path,
) -> Result<RunningAggressor, Box<(Failure, AggressorOutcome)>> {
    let live = dir.join("live-stats");
    let output = dir.join("aggressor.json");
    let (argv, live_stats, out) = match &a.kind {
        AggressorKind::Exec { argv } => {
            let uses = argv.iter().any(|x| x.contains("{live_stats}"));
            let argv = argv
                .iter()
                .map(|x| x.replace("{live_stats}", &live.display().to_string()))
                .collect();
            (argv, uses, None)
        }
        k => {
            let w = k.subcommand().unwrap_or_default();
            let c = &exp.configurations[p.configuration];
            let flags =
                exp.aggressor_flags(a, c, p.sweep_value.as_deref(), &|f| val.accepts(&w, &f.key));
            let mut argv = vec![opts.exe.display().to_string()];
            argv.extend(w.iter().map(|s| s.to_string()));
            argv.extend(flags.iter().flat_map(|f| f.args()));
            let has = |k: &str| flags.iter().any(|f| f.key.replace('_', "-") == k);
            if val.accepts(&w, "cpus-allowed") && !has("cpus-allowed") {
                argv.push("--cpus-allowed".into());
                argv.push(dmalab_core::cpus::format_cpu_list(&exp.placement.aggressor));
            }
            if val.accepts(&w, "runtime") && !has("runtime") {
                let longest = exp
                    .victims
                    .iter()
                    .map(|v| v.timeout)
                    .max()
                    .unwrap_or_default();
                argv.push("--runtime".into());
                argv.push(secs_arg(exp.warmup + longest + Duration::from_secs(120)));
            }
            let live_stats = val.accepts(&w, "live-stats");
            if live_stats {
                argv.push("--live-stats".into());
                argv.push(live.display().to_string());
            }
            let out = val.accepts(&w, "output").then(|| {
                argv.extend([
                    "--output".into(),
                    output.display().to_string(),
                    "--output-format".into(),
                    "json".into(),
                ]);
                output.clone()
            });
            (argv, live_stats, out)
        }
    };
    let mut outcome = AggressorOutcome {
        argv: argv.clone(),
        ..Default::default()
    };
    let mut sp = match spawn(&argv, &exp.placement.aggressor, dir, "aggressor") {
        Ok(s) => s,
        Err(e) => {
            return Err(Box::new((
                failure_from(
                    format!("aggressor '{}' could not start: {e}", a.name),
                    None,
                    Path::new(""),
                ),
                outcome,
            )))
        }
    };
    let died = |sp: &mut Spawned, outcome: &mut AggressorOutcome, what: &str| {
        let st = sp.child.try_wait().ok().flatten();
        outcome.exit_status = st.and_then(|s| s.code());
        outcome.stderr_tail = tail(&sp.stderr, 2000);
        failure_from(format!("aggressor '{}' {what}", a.name), st, &sp.stderr)
    };
    let mut stats = None;
    if live_stats {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = sp.child.try_wait() {
                let f = died(
                    &mut sp,
                    &mut outcome,
                    &format!("exited before it started its load ({st})"),
                );
                return Err(Box::new((f, outcome)));
            }
            if let Ok(Some(ls)) = LiveStats::open(&live) {
                if ls.snapshot().state != State::Starting {
                    stats = Some(Arc::new(ls));
                    break;
                }
            }
            if t0.elapsed() > Duration::from_secs(120) {
                killpg(sp.pid, libc::SIGKILL);
                let _ = sp.child.wait();
                let f = died(&mut sp, &mut outcome, "did not start its load within 120 s");
                return Err(Box::new((f, outcome)));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    std::thread::sleep(exp.warmup);
    if let Ok(Some(st)) = sp.child.try_wait() {
        let f = died(
            &mut sp,
            &mut outcome,
            &format!("exited during the warm-up ({st})"),
        );
        return Err(Box::new((f, outcome)));
    }
    Ok(RunningAggressor {
        sp,
        argv,
        output: out,
        stats,
    })
}

/// Stops an aggressor (SIGINT, then SIGKILL after 15 s) and collects its
/// result document.
fn stop_aggressor(mut ra: RunningAggressor) -> (AggressorOutcome, bool) {
    let early = ra.sp.child.try_wait().ok().flatten();
    let status = match early {
        Some(s) => Some(s),
        None => {
            killpg(ra.sp.pid, libc::SIGINT);
            let t0 = Instant::now();
            loop {
                match ra.sp.child.try_wait() {
                    Ok(Some(s)) => break Some(s),
                    Ok(None) if t0.elapsed() < Duration::from_secs(15) => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        killpg(ra.sp.pid, libc::SIGKILL);
                        break ra.sp.child.wait().ok();
                    }
                }
            }
        }
    };
    killpg(ra.sp.pid, libc::SIGKILL);
    let result = ra
        .output
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|d| d.get("result").cloned());
    (
        AggressorOutcome {
            argv: ra.argv,
            exit_status: status.and_then(|s| s.code()),
            result,
            evidence: None,
            stderr_tail: tail(&ra.sp.stderr, 2000),
        },
        early.is_some(),
    )
}

fn lookup_number(doc: &serde_json::Value, pointer: &str) -> Result<f64, String> {
    match doc.pointer(pointer) {
        Some(serde_json::Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| format!("{pointer} is not a finite number")),
        Some(serde_json::Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| format!("{pointer} is '{s}', not a number")),
        Some(other) => Err(format!("{pointer} is not a number but {}", short(other))),
        None => {
            // Say what is there, to help fix the pointer.
            let mut parent = pointer.rsplit_once('/').map_or("", |p| p.0).to_string();
            loop {
                if let Some(serde_json::Value::Object(m)) = doc.pointer(&parent) {
                    let keys: Vec<&str> = m.keys().map(|k| k.as_str()).take(30).collect();
                    return Err(format!("metric {pointer} is not in the result document (keys at '{parent}': {}); set metric = \"...\" in the victim", keys.join(", ")));
                }
                match parent.rsplit_once('/') {
                    Some((p, _)) => parent = p.to_string(),
                    None => return Err(format!("metric {pointer} is not in the result document")),
                }
            }
        }
    }
}

fn short(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..80])
    } else {
        s
    }
}

/// The victim's figure, its result, and its failure.
struct VictimOutcome {
    value: Option<f64>,
    result: Option<serde_json::Value>,
    failure: Option<Failure>,
    argv: Vec<String>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn redis_ping(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

/// An exec victim's command line, under `dmalab stat` when it has
/// `counters`: stat holds it until its counters are open, passes its
/// stdout and exit status through, and writes the counts beside it.
fn counted_argv(
    opts: &RunOptions,
    argv: &[String],
    counters: Option<&str>,
    dir: &Path,
) -> Vec<String> {
    let Some(c) = counters else {
        return argv.to_vec();
    };
    let mut v = vec![
        opts.exe.display().to_string(),
        "stat".into(),
        "--counters".into(),
        c.to_string(),
        "--quiet".into(),
        "--output".into(),
        dir.join("victim-counters.json").display().to_string(),
        "--".into(),
    ];
    v.extend(argv.iter().cloned());
    v
}

fn run_victim(
    exp: &Experiment,
    opts: &RunOptions,
    val: &Validated,
    v: &Victim,
    dir: &Path,
    w: &mut Window,
) -> VictimOutcome {
    let cpus = v
        .cpus
        .clone()
        .unwrap_or_else(|| exp.placement.victims.clone());
    let fail =
        |reason: String, st: Option<ExitStatus>, stderr: &Path, argv: Vec<String>| VictimOutcome {
            value: None,
            result: None,
            failure: Some(failure_from(reason, st, stderr)),
            argv,
        };
    let run_timed = |argv: &[String],
                     w: &mut Window,
                     tag: &str|
     -> Result<(ExitStatus, Spawned2), Box<VictimOutcome>> {
        w.start();
        let sp = match spawn(argv, &cpus, dir, tag) {
            Ok(s) => s,
            Err(e) => {
                w.end();
                return Err(Box::new(fail(
                    format!("victim '{}' could not start: {e}", v.name),
                    None,
                    Path::new(""),
                    argv.to_vec(),
                )));
            }
        };
        let (stdout, stderr) = (sp.stdout.clone(), sp.stderr.clone());
        let (st, end, timed_out) = wait_timeout(sp, v.timeout);
        w.t1 = Some(end);
        if let Some(ls) = &w.stats {
            w.end = Some(ls.snapshot());
        }
        if timed_out {
            return Err(Box::new(fail(
                format!(
                    "victim '{}' timed out after {:?} and was killed",
                    v.name, v.timeout
                ),
                st,
                &stderr,
                argv.to_vec(),
            )));
        }
        match st {
            Some(s) if s.success() => Ok((s, Spawned2 { stdout, stderr })),
            Some(s) => Err(Box::new(fail(
                format!("victim '{}' failed ({s})", v.name),
                Some(s),
                &stderr,
                argv.to_vec(),
            ))),
            None => Err(Box::new(fail(
                format!("victim '{}': lost its exit status", v.name),
                None,
                &stderr,
                argv.to_vec(),
            ))),
        }
    };
    match &v.kind {
        VictimKind::Idle { duration } => {
            w.start();
            std::thread::sleep(*duration);
            w.end();
            VictimOutcome {
                value: Some(w.wall_ns() as f64 / 1e9),
                result: Some(serde_json::json!({ "wall_s": w.wall_ns() as f64 / 1e9 })),
                failure: None,
                argv: vec![],
            }
        }
        VictimKind::Exec {
            argv,
            regex,
            counters,
        } => match run_timed(
            &counted_argv(opts, argv, counters.as_deref(), dir),
            w,
            "victim",
        ) {
            Err(o) => *o,
            Ok((_, s)) => {
                let wall_s = w.wall_ns() as f64 / 1e9;
                let out = std::fs::read_to_string(&s.stdout).unwrap_or_default();
                let mut result = serde_json::json!({ "wall_s": wall_s });
                if counters.is_some() {
                    if let Some(c) = std::fs::read(dir.join("victim-counters.json"))
                        .ok()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                        .and_then(|d| d.pointer("/result/counters").cloned())
                    {
                        result["counters"] = c;
                    }
                }
                let value = match regex {
                    None => Some(wall_s),
                    Some(re) => {
                        let got = re
                            .captures(&out)
                            .and_then(|c| c.get(1).or_else(|| c.get(0)))
                            .map(|m| m.as_str().trim().to_string());
                        match got.as_deref().map(str::parse::<f64>) {
                            Some(Ok(x)) => {
                                result["regex_value"] = serde_json::json!(x);
                                Some(x)
                            }
                            _ => {
                                return VictimOutcome {
                                    value: None,
                                    result: Some(result),
                                    failure: Some(Failure {
                                        reason: format!(
                                            "victim '{}': regex {} {} in its stdout",
                                            v.name,
                                            re.as_str(),
                                            if got.is_some() {
                                                "matched no number"
                                            } else {
                                                "did not match"
                                            }
                                        ),
                                        exit_status: Some(0),
                                        signal: None,
                                        stderr_tail: tail(&s.stdout, 2000),
                                    }),
                                    argv: argv.clone(),
                                };
                            }
                        }
                    }
                };
                VictimOutcome {
                    value,
                    result: Some(result),
                    failure: None,
                    argv: argv.clone(),
                }
            }
        },
        VictimKind::Redis(r) => {
            let port = match free_port() {
                Ok(p) => p,
                Err(e) => {
                    return fail(
                        format!("redis: no free port on 127.0.0.1: {e}"),
                        None,
                        Path::new(""),
                        vec![],
                    )
                }
            };
            let server: Vec<String> = [
                "redis-server",
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
                "--dir",
                &dir.display().to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut srv = match spawn(&server, &cpus, dir, "redis-server") {
                Ok(s) => s,
                Err(e) => return fail(format!("redis-server could not start: {e}; install it with `apt-get install redis-server`"), None, Path::new(""), server),
            };
            let t0 = Instant::now();
            while !redis_ping(port) {
                if t0.elapsed() > Duration::from_secs(20)
                    || matches!(srv.child.try_wait(), Ok(Some(_)))
                {
                    killpg(srv.pid, libc::SIGKILL);
                    let st = srv.child.wait().ok();
                    return fail(
                        "redis-server did not answer PING on 127.0.0.1 within 20 s".into(),
                        st,
                        &srv.stderr,
                        server,
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let bench: Vec<String> = vec![
                "redis-benchmark".into(),
                "-h".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
                "-n".into(),
                r.requests.to_string(),
                "-c".into(),
                r.clients.to_string(),
                "-t".into(),
                r.tests.clone(),
                "-d".into(),
                r.data_size_bytes.to_string(),
                "-P".into(),
                r.pipeline.to_string(),
                "-r".into(),
                r.keyspace.to_string(),
                "--csv".into(),
            ];
            let res = run_timed(&bench, w, "redis-benchmark");
            killpg(srv.pid, libc::SIGTERM);
            let _ = srv.child.wait();
            match res {
                Err(o) => *o,
                Ok((_, s)) => {
                    let wall_s = w.wall_ns() as f64 / 1e9;
                    let out = std::fs::read_to_string(&s.stdout).unwrap_or_default();
                    // --csv: "test","rps",... lines.
                    let mut rps = serde_json::Map::new();
                    for line in out.lines() {
                        let f: Vec<&str> = line.split(',').map(|x| x.trim_matches('"')).collect();
                        if f.len() >= 2 {
                            if let Ok(x) = f[1].parse::<f64>() {
                                rps.insert(f[0].to_string(), serde_json::json!(x));
                            }
                        }
                    }
                    let result = serde_json::json!({ "wall_s": wall_s, "requests_per_s": rps });
                    let value = if v.metric == "wall_s" {
                        Ok(wall_s)
                    } else {
                        lookup_number(&serde_json::json!({"result": result}), &v.metric)
                    };
                    match value {
                        Ok(x) => VictimOutcome {
                            value: Some(x),
                            result: Some(result),
                            failure: None,
                            argv: bench,
                        },
                        Err(m) => VictimOutcome {
                            value: None,
                            result: Some(result),
                            failure: Some(Failure {
                                reason: m,
                                ..Default::default()
                            }),
                            argv: bench,
                        },
                    }
                }
            }
        }
        k => {
            let words = k.subcommand().unwrap_or_default();
            let out = dir.join("victim.json");
            let mut argv = vec![opts.exe.display().to_string()];
            argv.extend(words.iter().map(|s| s.to_string()));
            argv.extend(v.flags.iter().flat_map(|f| f.args()));
            let has = |k: &str| v.flags.iter().any(|f| f.key.replace('_', "-") == k);
            if val.accepts(&words, "cpus-allowed") && !has("cpus-allowed") {
                argv.push("--cpus-allowed".into());
                argv.push(dmalab_core::cpus::format_cpu_list(&cpus));
            }
            argv.extend([
                "--output".into(),
                out.display().to_string(),
                "--output-format".into(),
                "json".into(),
            ]);
            match run_timed(&argv, w, "victim") {
                Err(o) => *o,
                Ok((_, s)) => {
                    let doc = std::fs::read(&out)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
                    let Some(doc) = doc else {
                        return fail(
                            format!("victim '{}' exited 0 but wrote no result document", v.name),
                            None,
                            &s.stderr,
                            argv,
                        );
                    };
                    let result = doc.get("result").cloned();
                    let mut found = lookup_number(&doc, &v.metric);
                    if v.metric_is_default {
                        for alt in v.kind.metric_fallbacks() {
                            if found.is_err() {
                                found = lookup_number(&doc, alt)
                                    .map_err(|_| found.clone().unwrap_err());
                            }
                        }
                    }
                    match found {
                        Ok(x) => VictimOutcome {
                            value: Some(x),
                            result,
                            failure: None,
                            argv,
                        },
                        Err(m) => VictimOutcome {
                            value: None,
                            result,
                            failure: Some(Failure {
                                reason: m,
                                ..Default::default()
                            }),
                            argv,
                        },
                    }
                }
            }
        }
    }
}

struct Spawned2 {
    stdout: PathBuf,
    #[allow(dead_code)]
    stderr: PathBuf,
}

/// Sleeps, waking early when a stop is requested.
fn nap(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && !dmalab_core::signal::stop_requested() {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
}

/// The per-run directory (the children's output files, the aggressor's
/// live stats): in the process ledger while it exists, so that `dmalab
/// cleanup` (or the next run's start) removes it after a `kill -9`.
struct RunDir(tempfile::TempDir);

impl RunDir {
    fn new() -> Result<Self, RunError> {
        let d = tempfile::Builder::new()
            .prefix("dmalab-run-")
            .tempdir()
            .map_err(|e| RunError::Other(format!("cannot create a temporary directory: {e}")))?;
        dmalab_core::ledger::add_dir(d.path());
        Ok(Self(d))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        dmalab_core::ledger::forget_dir(self.0.path());
    }
}

/// One run, start to record.
fn one_run(
    exp: &Experiment,
    opts: &RunOptions,
    val: &Validated,
    p: &PlannedRun,
) -> Result<RunRecord, RunError> {
    let dir = RunDir::new()?;
    let v = &exp.victims[p.victim];
    let started = SystemTime::now();
    let mut rec = RunRecord {
        record: "run".into(),
        experiment_hash: exp.hash.clone(),
        index: p.index,
        configuration: exp.configurations[p.configuration].name.clone(),
        repetition: p.repetition,
        victim: v.name.clone(),
        load: p
            .aggressor
            .map_or(PLAIN.to_string(), |a| exp.aggressors[a].name.clone()),
        sweep_value: p.sweep_value.clone(),
        started_at: rfc3339(started),
        status: RunStatus::Completed,
        value: None,
        metric: v.metric.clone(),
        unit: v.unit.clone(),
        better: v.better,
        victim_wall_ns: 0,
        victim_argv: vec![],
        victim_cpus: dmalab_core::cpus::format_cpu_list(
            v.cpus.as_deref().unwrap_or(&exp.placement.victims),
        ),
        victim_result: None,
        failure: None,
        aggressor: None,
        host: None,
        ddio: None,
    };
    let agg = match p.aggressor {
        None => None,
        Some(i) => match start_aggressor(exp, opts, val, &exp.aggressors[i], p, dir.path()) {
            Ok(a) => Some(a),
            Err(b) => {
                let (f, o) = *b;
                rec.status = RunStatus::Failed;
                rec.failure = Some(f);
                rec.aggressor = Some(o);
                return Ok(rec);
            }
        },
    };
    let mut w = Window::new(agg.as_ref().and_then(|a| a.stats.clone()));
    let vo = run_victim(exp, opts, val, v, dir.path(), &mut w);
    rec.victim_wall_ns = w.wall_ns();
    let evidence = w.evidence();
    rec.value = vo.value;
    rec.victim_result = vo.result;
    rec.victim_argv = vo.argv;
    if let Some(f) = vo.failure {
        rec.status = RunStatus::Failed;
        rec.failure = Some(f);
    }
    if let Some(a) = agg {
        let name = exp.aggressors[p.aggressor.unwrap_or(0)].name.clone();
        let (mut o, ended_early) = stop_aggressor(a);
        o.evidence = evidence;
        if ended_early && rec.status == RunStatus::Completed {
            rec.status = RunStatus::Failed;
            rec.failure = Some(Failure {
                reason: format!("aggressor '{name}' ended before the victim did, so part of the victim ran without load"),
                exit_status: o.exit_status,
                signal: None,
                stderr_tail: o.stderr_tail.clone(),
            });
        }
        rec.aggressor = Some(o);
    }
    Ok(rec)
}

/// The index of the configuration `--configuration` names, or None when
/// it names none (the whole plan).
pub fn select_configuration(
    exp: &Experiment,
    name: Option<&str>,
) -> Result<Option<usize>, RunError> {
    let Some(name) = name else { return Ok(None) };
    match exp.configurations.iter().position(|c| c.name == name) {
        Some(i) => Ok(Some(i)),
        None => Err(usage(
            "--configuration",
            format!(
                "{} has no configuration '{name}'; it has: {}",
                exp.path.display(),
                exp.configurations
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Runs (or resumes) an experiment.
pub fn run(
    exp: &Experiment,
    opts: &RunOptions,
    progress: &mut Progress,
) -> Result<Outcome, RunError> {
    let val = validate(exp, &opts.exe)?;
    let runs = plan::expand(exp);
    let selected = select_configuration(exp, opts.configuration.as_deref())?;
    let in_selection = |p: &PlannedRun| selected.is_none_or(|c| p.configuration == c);
    let planned = runs.iter().filter(|p| in_selection(p)).count();
    if opts.dry_run {
        for p in runs.iter().filter(|p| in_selection(p)) {
            let a = p
                .aggressor
                .map_or(PLAIN, |a| exp.aggressors[a].name.as_str());
            println!(
                "{:>4}  {}  rep {}  {}  {}{}",
                p.index,
                exp.configurations[p.configuration].name,
                p.repetition,
                exp.victims[p.victim].name,
                a,
                p.sweep_value
                    .as_ref()
                    .map(|s| format!(" @{s}"))
                    .unwrap_or_default()
            );
        }
        return Ok(Outcome {
            planned,
            ..Default::default()
        });
    }
    for w in &exp.warnings {
        eprintln!("dmalab run: warning: {w}");
    }
    // What a killed run left (its per-run directory) goes first.
    dmalab_core::ledger::cleanup_at_start();
    // One run per results file: a second would append the same records.
    let mut _lock = dmalab_core::lock::lock_results(&opts.results, "--results")?;
    let (done, renamed) = open_results(exp, opts, &runs, planned)?;
    if renamed {
        // --restart moved the locked file aside; lock the new one.
        _lock = dmalab_core::lock::lock_results(&opts.results, "--results")?;
    }
    let mut out = Outcome {
        planned,
        resumed: runs
            .iter()
            .filter(|p| in_selection(p) && done[p.index])
            .count(),
        ..Default::default()
    };
    progress.start(planned, out.resumed);
    let todo: Vec<&PlannedRun> = runs
        .iter()
        .filter(|p| in_selection(p) && !done[p.index])
        .collect();
    // Restores on drop too: an error below, a panic.
    let mut ddio = crate::ddio_axis::DdioAxis::default();
    for (k, p) in todo.iter().enumerate() {
        if dmalab_core::signal::stop_requested() {
            out.interrupted = true;
            break;
        }
        let label = format!(
            "{} rep {} {} {}{}",
            exp.configurations[p.configuration].name,
            p.repetition,
            exp.victims[p.victim].name,
            p.aggressor
                .map_or(PLAIN, |a| exp.aggressors[a].name.as_str()),
            p.sweep_value
                .as_ref()
                .map(|s| format!("@{s}"))
                .unwrap_or_default()
        );
        progress.begin(p.index, &label);
        let t0 = Instant::now();
        let ddio_rec = ddio.ensure(exp.configurations[p.configuration].ddio);
        let mut rec = one_run(exp, opts, &val, p)?;
        rec.ddio = ddio_rec;
        dmalab_core::output::append_json_line(&opts.results, &rec)
            .map_err(|e| RunError::io(&opts.results, e))?;
        out.recorded += 1;
        if rec.status != RunStatus::Completed {
            out.failed += 1;
        }
        progress.finish(&label, &rec, t0.elapsed());
        if k + 1 < todo.len() && !exp.cooldown.is_zero() {
            nap(exp.cooldown);
        }
    }
    match ddio.restore() {
        Ok(done) => {
            for d in done {
                eprintln!("dmalab run: ddio: {d}");
            }
        }
        Err(e) => eprintln!("dmalab run: warning: ddio: {e}"),
    }
    if dmalab_core::signal::stop_requested() && out.resumed + out.recorded < out.planned {
        out.interrupted = true;
    }
    progress.end();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_lookup_reads_numbers_and_explains_misses() {
        let doc = serde_json::json!({"result": {"per_access": {"mean_ns": 81.5, "samples": "12"}, "threads": []}});
        assert_eq!(lookup_number(&doc, "/result/per_access/mean_ns"), Ok(81.5));
        assert_eq!(lookup_number(&doc, "/result/per_access/samples"), Ok(12.0));
        let e = lookup_number(&doc, "/result/per_access/p50_ns").unwrap_err();
        assert!(
            e.contains("keys at '/result/per_access': mean_ns, samples"),
            "{e}"
        );
        let e = lookup_number(&doc, "/result/nothing/here").unwrap_err();
        assert!(e.contains("keys at '/result': per_access, threads"), "{e}");
        assert!(lookup_number(&doc, "/result/threads")
            .unwrap_err()
            .contains("not a number"));
    }

    #[test]
    fn tail_keeps_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("err");
        std::fs::write(&p, "first line\nsecond line\nthird\n").unwrap();
        assert_eq!(tail(&p, 14), "third\n");
        assert_eq!(tail(&p, 1000), "first line\nsecond line\nthird\n");
    }
}
