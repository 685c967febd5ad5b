//! `dmalab stat [--counters ...] -- COMMAND`: counts a command like
//! `perf stat`, with dmalab's recipes and its result schema; and
//! `dmalab info counters`: what this host can count.
//!
//! The child is held between fork and exec (it writes its pid to a pipe and
//! waits for a byte on another), so its counters are open and started
//! before its first instruction, and its memory bandwidth group (recipe
//! `mbm`) holds it from the start.
//!
//! The command runs in a process group of its own, and every SIGINT,
//! SIGTERM and SIGHUP dmalab gets is passed on to that group
//! ([`dmalab_core::signal::GroupForwarder`]), so the command and whatever it
//! started stop; dmalab then prints what it counted and exits 128 + the
//! signal's number. (The spawn itself is `dmalab_counters::child`'s held
//! fork; issue 30 moves the spawners of page, run and throttle to one
//! helper in dmalab-core, which this forwarding belongs next to.)

use super::common::OutputArgs;
use super::counters::{state_dir, CountersOut};
use anyhow::Context;
use dmalab_core::host::HostInfo;
use dmalab_core::schema::ResultDoc;
use dmalab_core::UsageError;
use dmalab_counters::perfstat::{self, Form, RepeatSummary, StatOptions, StatPlan};
use dmalab_counters::session::{CounterReport, CountersMode, Request, Scope, Session};
use dmalab_counters::Roots;
use serde::Serialize;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime};

/// Run a command and count hardware and software events over it (like
/// `perf stat`), with dmalab's recipes; the summary goes to stderr, the
/// command's own output is left alone. Exits with the command's status.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A recipe (software, core, core-l3, hsx-pcie, skx-pcie, icx-pcie,
    /// spr-iio, skx-imc-dram, icx-imc-dram, spr-imc-dram, amd-df-dram,
    /// amd-umc-dram, mbm) or perf event specs, comma-separated.
    #[arg(long, default_value = "software", value_name = "RECIPE|EVENTS")]
    counters: String,
    /// exact: count each event group of the recipe in its own run (with
    /// -r, runs rotate over the groups), nothing multiplexed or scaled;
    /// multiplexed: every event in every run, scaled by its running time.
    #[arg(long, default_value = "multiplexed", value_name = "MODE")]
    counters_mode: String,
    /// Exact mode with the rotation kept by the caller: this is run N
    /// (0-based) of it and counts group N mod the number of groups (with
    /// -r, runs N, N+1, ...); `dmalab run` passes its repetition here.
    #[arg(long, value_name = "N")]
    counters_run: Option<usize>,
    /// Count system-wide on these CPUs instead of the command's tasks.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Attach to running processes instead of running a command, until
    /// they all exit (exit 0) or dmalab gets SIGINT/SIGTERM/SIGHUP (exit
    /// 128 + its number); the processes are never signalled.
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID]")]
    pid: Option<String>,
    /// Print each interval's counts every MS milliseconds (time, value,
    /// unit, event, like perf stat -I).
    #[arg(short = 'I', long, value_name = "MS")]
    interval: Option<u64>,
    /// Print CSV separated by SEP instead of text, in perf stat -x's field
    /// order.
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    field_separator: Option<String>,
    /// Print JSON lines instead of text: one object per interval, then
    /// the summary.
    #[arg(short = 'j', long)]
    json: bool,
    /// Run the command N times and print each count's mean with the
    /// standard deviation of the mean, relative (perf stat -r's `+-`).
    #[arg(short = 'r', long, value_name = "N", default_value_t = 1)]
    repeat: u32,
    #[command(flatten)]
    output: OutputArgs,
    /// The command and its arguments (`--` before it is optional: every
    /// word from the first that does not start with `-` is the command's;
    /// put `--` before a command whose name starts with `-`).
    // Not `allow_hyphen_values`: with it clap takes a short option whose
    // glued value holds a character that is not one of stat's short flags
    // (perf's `-x,`, `-I100`, `-r3`) for the command's first word.
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The resolved configuration of `dmalab stat`.
#[derive(Serialize, Debug)]
struct StatConfig {
    /// The command run (empty when attached with `--pid`).
    command: Vec<String>,
    /// `--counters`.
    counters: String,
    /// `--cpus`, resolved.
    cpus: Option<Vec<usize>>,
    /// `--pid`, resolved.
    pids: Option<Vec<i32>>,
    /// `--interval`, milliseconds.
    interval_ms: Option<u64>,
    /// `--repeat`.
    repeat: u32,
    /// `--counters-mode`.
    counters_mode: CountersMode,
    /// Counting groups of the request (exact mode counts one per run).
    counter_groups: usize,
}

/// What `dmalab stat` measured.
#[derive(Serialize)]
struct StatResult {
    /// The command's exit code (128 + signal number when killed); with
    /// `--repeat`, that of the last run made. 0 when attached.
    exit_code: i32,
    /// Wall time from start to exit, nanoseconds (the last run's).
    wall_ns: u64,
    /// The counters (the last run's).
    counters: CountersOut,
    /// With `--repeat` above 1: every count's spread over the runs.
    repeat: Option<RepeatSummary>,
}

/// One counted run (or one attach).
struct Counted {
    /// The command's exit code (128 + signal when killed).
    code: i32,
    /// What dmalab exits with.
    exit: i32,
    /// Stopped by a signal dmalab got: no further runs.
    signalled: bool,
    wall: Duration,
    report: CounterReport,
}

/// Prints what stat prints on stderr, unless `--quiet`.
struct Printer<'a> {
    quiet: bool,
    form: &'a Form,
}

impl Printer<'_> {
    fn interval(&self, s: &Session) {
        if self.quiet {
            return;
        }
        let Some(p) = s.last_point() else {
            return;
        };
        let line = match self.form {
            Form::Text => perfstat::render_interval(p, &s.report(), None),
            Form::Csv(sep) => perfstat::render_interval(p, &s.report(), Some(sep)),
            Form::JsonLines => perfstat::render_interval_json(p),
        };
        eprint!("{line}");
    }
}

/// Samples every `interval` (1 s without `-I`, for the result's series)
/// and prints the line when `-I` asked for one.
struct Ticker {
    every: Duration,
    print: bool,
    next: Duration,
}

impl Ticker {
    fn new(interval: Option<Duration>) -> Self {
        let every = interval.unwrap_or(Duration::from_secs(1));
        Self {
            every,
            print: interval.is_some(),
            next: every,
        }
    }

    fn tick(&mut self, t: Duration, s: &mut Session, p: &Printer) {
        if t < self.next {
            return;
        }
        s.sample(t.as_secs_f64());
        if self.print {
            p.interval(s);
        }
        // After a stall, the next line comes one interval from now rather
        // than a burst of empty ones.
        while self.next <= t {
            self.next += self.every;
        }
    }

    /// The last, partial interval (printed only when it has any length).
    fn finish(&mut self, t: Duration, s: &mut Session, p: &Printer) {
        s.sample(t.as_secs_f64());
        if self.print && s.last_point().is_some_and(|x| x.interval_s > 0.0) {
            p.interval(s);
        }
    }

    /// How long to sleep before looking again.
    fn nap(&self) -> Duration {
        Duration::from_millis(10).min(self.every)
    }
}

/// Runs `dmalab stat`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let started = SystemTime::now();
    let roots = Roots::from_env();
    let plan = StatOptions {
        pids: a.pid.clone(),
        interval_ms: a.interval,
        field_separator: a.field_separator.clone(),
        json: a.json,
        repeat: a.repeat,
    }
    .validate(!a.command.is_empty())?;
    let cpus = a
        .cpus
        .as_deref()
        .map(|l| dmalab_core::cpus::parse_cpu_list("--cpus", l))
        .transpose()?;
    let mut req = Request::parse("--counters", &a.counters, &roots)?;
    req.mode = CountersMode::parse("--counters-mode", &a.counters_mode)?;
    if let Some(c) = &cpus {
        req = req.for_scope("--counters", &Scope::Cpus(c.clone()))?;
    }
    let runs_given = if plan.attach.is_some() {
        1
    } else {
        plan.repeat
    };
    req.check_rotation(
        "--counters-mode",
        "--counters-run",
        a.counters_run,
        runs_given as usize,
    )?;
    let first_run = a.counters_run.unwrap_or(0);
    // Exact mode: run i counts group i mod N, so -r N counts each once.
    let for_run = |i: usize| match req.mode {
        CountersMode::Exact => req.for_run(first_run + i),
        CountersMode::Multiplexed => req.clone(),
    };
    if plan.attach.is_some() && cpus.is_some() {
        return Err(UsageError::new(
            "--cpus",
            "counts system-wide, and -p counts the processes attached to; give one of them",
        )
        .into());
    }
    if let Some(o) = &a.output.output {
        if o.parent()
            .is_some_and(|p| !p.as_os_str().is_empty() && !p.is_dir())
        {
            return Err(UsageError::new(
                "--output",
                format!("the directory of {} does not exist", o.display()),
            )
            .into());
        }
    }
    // SIGHUP too: a closed terminal must reach the command, which no
    // longer shares dmalab's process group.
    if let Err(e) = dmalab_core::signal::install_hangup() {
        eprintln!("dmalab: warning: could not catch SIGHUP: {e}");
    }
    let printer = Printer {
        quiet: a.output.quiet,
        form: &plan.form,
    };
    let mut runs: Vec<Counted> = Vec::new();
    match &plan.attach {
        Some(pids) => runs.push(attach(pids, &for_run(0), &roots, &plan, &printer)?),
        None => {
            for i in 0..plan.repeat as usize {
                let c = run_once(&a.command, &for_run(i), &roots, &cpus, &plan, &printer)?;
                // A run that failed or was stopped ends the series: its
                // counts are not of the same work.
                let stop = c.signalled || c.code != 0;
                runs.push(c);
                if stop {
                    break;
                }
            }
        }
    }
    let Some(last) = runs.last() else {
        anyhow::bail!("dmalab stat: no run was made");
    };
    let repeat = (plan.repeat > 1)
        .then(|| {
            let reports: Vec<CounterReport> = runs.iter().map(|r| r.report.clone()).collect();
            let walls: Vec<f64> = runs.iter().map(|r| r.wall.as_secs_f64()).collect();
            RepeatSummary::of(&reports, &walls, &req.metrics)
        })
        .flatten();
    let (code, exit, wall) = (last.code, last.exit, last.wall);
    let out = CountersOut {
        report: last.report.clone(),
        expected_vs_counted: Vec::new(),
    };
    let text = match &repeat {
        Some(r) => format!("{}{}", out.text(), r.render_text()),
        None => out.text(),
    };
    if !a.output.quiet {
        match (&plan.form, &repeat) {
            (Form::Text, _) => eprint!("{text}"),
            (Form::Csv(sep), Some(r)) => eprint!("{}", r.render_csv(sep, &out.report)),
            (Form::Csv(sep), None) => eprint!("{}", perfstat::render_csv(&out.report, sep)),
            (Form::JsonLines, r) => {
                let line = serde_json::json!({ "counters": &out.report, "repeat": r });
                eprintln!("{line}");
            }
        }
    }
    let doc = ResultDoc::new(
        "stat",
        HostInfo::collect(),
        StatConfig {
            command: a.command.clone(),
            counters: a.counters.clone(),
            cpus,
            pids: plan.attach.clone(),
            interval_ms: a.interval,
            repeat: plan.repeat,
            counters_mode: req.mode,
            counter_groups: req.group_count(),
        },
        StatResult {
            exit_code: code,
            wall_ns: wall.as_nanos() as u64,
            counters: out,
            repeat,
        },
        started,
    );
    a.output.write(&doc, &text)?;
    Ok(ExitCode::from(exit.clamp(0, 255) as u8))
}

/// Runs the command once, counted.
fn run_once(
    command: &[String],
    req: &Request,
    roots: &Roots,
    cpus: &Option<Vec<usize>>,
    plan: &StatPlan,
    printer: &Printer,
) -> anyhow::Result<Counted> {
    let Some((prog, args)) = command.split_first() else {
        anyhow::bail!("dmalab stat: no command");
    };
    let mut cmd = Command::new(prog);
    cmd.args(args);
    // Its own group (pgid = its pid, set before it is held), so that the
    // signals dmalab forwards reach its children as well.
    dmalab_core::process::prepare(
        &mut cmd,
        &dmalab_core::process::Setup {
            own_group: true,
            ..Default::default()
        },
    );
    let held = dmalab_counters::child::spawn_held(cmd).context("dmalab stat: fork")?;
    let scope = match cpus {
        Some(c) => Scope::Cpus(c.clone()),
        None => Scope::Task(held.pid.unwrap_or(-1)),
    };
    let mut session = held
        .pid
        .map(|_| Session::open(req, &scope, roots, state_dir()));
    if let Some(s) = &mut session {
        s.start();
    }
    // A command that reads the terminal gets its foreground (its group is
    // not dmalab's); taken back once it ended.
    let foreground = dmalab_core::signal::Foreground::lend(held.pid.unwrap_or(0));
    // Made before the command runs: a signal that arrives from here on
    // (or came earlier) is passed on at the first look.
    let mut forward = dmalab_core::signal::GroupForwarder::new(held.pid.unwrap_or(0));
    let t0 = Instant::now();
    let spawned = held.release();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(UsageError::new(
                "COMMAND",
                format!("cannot run {prog}: {e} (exit {code} in a shell)"),
            )
            .into());
        }
    };
    // Its group is out of reach of a kill of dmalab's own group (`dmalab
    // run` ending a victim that overstayed): should dmalab die first, this
    // ends the group too.
    let guard = dmalab_core::signal::GroupGuard::new(i32::try_from(child.id()).unwrap_or(0));
    // Intervals while the command runs; SIGINT/SIGTERM/SIGHUP are passed
    // on to its group, and dmalab waits for it to end.
    let mut ticker = Ticker::new(plan.interval);
    let status = loop {
        forward.forward();
        if let Some(st) = child.try_wait().context("dmalab stat: wait")? {
            break st;
        }
        if let Some(s) = &mut session {
            ticker.tick(t0.elapsed(), s, printer);
        }
        std::thread::sleep(ticker.nap());
    };
    let wall = t0.elapsed();
    drop(guard);
    drop(foreground);
    let Some(mut s) = session else {
        anyhow::bail!("dmalab stat: the command started without reporting its pid");
    };
    s.stop();
    ticker.finish(wall, &mut s, printer);
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    // Stopped by a signal dmalab passed on: exit as dmalab was asked to
    // stop (128 + its number), whatever the command made of it.
    let (exit, signalled) = match (forward.forwarded(), dmalab_core::signal::exit_code()) {
        (Some(_), Some(c)) => (i32::from(c), true),
        _ => (code, false),
    };
    Ok(Counted {
        code,
        exit,
        signalled,
        wall,
        report: s.report(),
    })
}

/// True once `pid` is gone or a zombie (its parent has not reaped it yet):
/// either way it runs no more.
fn ended(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command name, which may hold ')' itself.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("Z") | Some("X") | Some("x") | None)
}

/// Counts running processes until they all end or a signal arrives.
fn attach(
    pids: &[i32],
    req: &Request,
    roots: &Roots,
    plan: &StatPlan,
    printer: &Printer,
) -> anyhow::Result<Counted> {
    let scope = Scope::processes(pids).map_err(|(pid, e)| {
        UsageError::new(
            "--pid",
            format!("no process {pid} to attach to ({e}); give the pid of a running process"),
        )
    })?;
    let mut s = Session::open(req, &scope, roots, state_dir());
    if !s.counts_anything() {
        let why: Vec<String> = s
            .report()
            .unavailable
            .iter()
            .map(|u| format!("{}: {}", u.id, u.message))
            .collect();
        return Err(UsageError::new(
            "--pid",
            format!(
                "nothing can be counted in processes {pids:?} ({}); see `dmalab info counters`",
                why.join("; ")
            ),
        )
        .into());
    }
    s.start();
    let t0 = Instant::now();
    if !printer.quiet {
        eprintln!("dmalab stat: counting processes {pids:?} until they exit or SIGINT (Ctrl-C)");
    }
    let mut ticker = Ticker::new(plan.interval);
    while !dmalab_core::signal::stop_requested() && !pids.iter().all(|&p| ended(p)) {
        ticker.tick(t0.elapsed(), &mut s, printer);
        std::thread::sleep(ticker.nap());
    }
    let wall = t0.elapsed();
    s.stop();
    ticker.finish(wall, &mut s, printer);
    // The counts are whole either way; a signal that ended the attach
    // gives 128 + its number through main's one exit rule.
    Ok(Counted {
        code: 0,
        exit: 0,
        signalled: dmalab_core::signal::stop_requested(),
        wall,
        report: s.report(),
    })
}

/// `dmalab info counters`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    #[command(flatten)]
    output: OutputArgs,
}

/// The resolved configuration of `dmalab info counters`.
#[derive(Serialize, Debug)]
struct InfoConfig {
    /// Where PMUs were looked for.
    pmu_root: String,
    /// Where resctrl was looked for.
    resctrl_root: String,
}

/// Runs `dmalab info counters`.
pub fn info(a: InfoArgs) -> anyhow::Result<ExitCode> {
    let started = SystemTime::now();
    let roots = Roots::from_env();
    let report = dmalab_counters::host_report(&roots);
    let text = report.render_text();
    out!("{text}");
    let doc = ResultDoc::new(
        "info counters",
        HostInfo::collect(),
        InfoConfig {
            pmu_root: roots.pmu.display().to_string(),
            resctrl_root: roots.resctrl.display().to_string(),
        },
        report,
        started,
    );
    a.output.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}
