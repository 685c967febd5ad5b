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
use dmalab_counters::session::{Request, Scope, Session};
use dmalab_counters::Roots;
use serde::Serialize;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime};

/// Run a command and count hardware and software events over it (like
/// `perf stat`), with dmalab's recipes; the summary goes to stderr, the
/// command's own output is left alone. Exits with the command's status.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A recipe (software, core, skx-pcie, icx-pcie, spr-iio, amd-df-dram,
    /// amd-umc-dram, mbm) or perf event specs, comma-separated.
    #[arg(long, default_value = "software", value_name = "RECIPE|EVENTS")]
    counters: String,
    /// Count system-wide on these CPUs instead of the command's tasks.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// No summary on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    output: OutputArgs,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The resolved configuration of `dmalab stat`.
#[derive(Serialize, Debug)]
struct StatConfig {
    /// The command run.
    command: Vec<String>,
    /// `--counters`.
    counters: String,
    /// `--cpus`, resolved.
    cpus: Option<Vec<usize>>,
}

/// What `dmalab stat` measured.
#[derive(Serialize)]
struct StatResult {
    /// The command's exit code (128 + signal number when killed).
    exit_code: i32,
    /// Wall time from start to exit, nanoseconds.
    wall_ns: u64,
    /// The counters.
    counters: CountersOut,
}

/// Runs `dmalab stat`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let started = SystemTime::now();
    let roots = Roots::from_env();
    let req = Request::parse("--counters", &a.counters, &roots)?;
    let cpus = a
        .cpus
        .as_deref()
        .map(|l| dmalab_core::cpus::parse_cpu_list("--cpus", l))
        .transpose()?;
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
    let mut cmd = Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    // Its own group (pgid = its pid, set before it is held), so that the
    // signals dmalab forwards reach its children as well.
    cmd.process_group(0);
    let held = dmalab_counters::child::spawn_held(cmd).context("dmalab stat: fork")?;
    let scope = match &cpus {
        Some(c) => Scope::Cpus(c.clone()),
        None => Scope::Task(held.pid.unwrap_or(-1)),
    };
    let mut session = held
        .pid
        .map(|_| Session::open(&req, &scope, &roots, state_dir()));
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
                format!("cannot run {}: {e} (exit {code} in a shell)", a.command[0]),
            )
            .into());
        }
    };
    // Its group is out of reach of a kill of dmalab's own group (`dmalab
    // run` ending a victim that overstayed): should dmalab die first, this
    // ends the group too.
    let guard = dmalab_core::signal::GroupGuard::new(i32::try_from(child.id()).unwrap_or(0));
    // Per-second intervals while the command runs; SIGINT/SIGTERM/SIGHUP
    // are passed on to its group, and dmalab waits for it to end.
    let mut next = 1.0f64;
    let status = loop {
        forward.forward();
        if let Some(st) = child.try_wait().context("dmalab stat: wait")? {
            break st;
        }
        let t = t0.elapsed().as_secs_f64();
        if t >= next {
            if let Some(s) = &mut session {
                s.sample(t);
            }
            next += 1.0;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = t0.elapsed();
    drop(guard);
    drop(foreground);
    let Some(mut s) = session else {
        anyhow::bail!("dmalab stat: the command started without reporting its pid");
    };
    s.stop();
    s.sample(wall.as_secs_f64());
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    // Stopped by a signal dmalab passed on: exit as dmalab was asked to
    // stop (128 + its number), whatever the command made of it.
    let exit = match (forward.forwarded(), dmalab_core::signal::exit_code()) {
        (Some(_), Some(c)) => i32::from(c),
        _ => code,
    };
    let out = CountersOut {
        report: s.report(),
        expected_vs_counted: Vec::new(),
    };
    drop(s);
    let text = out.text();
    if !a.quiet {
        eprint!("{text}");
    }
    let doc = ResultDoc::new(
        "stat",
        HostInfo::collect(),
        StatConfig {
            command: a.command.clone(),
            counters: a.counters.clone(),
            cpus,
        },
        StatResult {
            exit_code: code,
            wall_ns: wall.as_nanos() as u64,
            counters: out,
        },
        started,
    );
    a.output.write(&doc, &text)?;
    Ok(ExitCode::from(exit.clamp(0, 255) as u8))
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
