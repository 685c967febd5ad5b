//! Runs an experiment: child processes of the same binary (or any program),
//! pinned, timed, their results read back, one record appended per run.
//!
//! Every child gets its own process group, so a Ctrl-C at the terminal
//! reaches only `dmalab run`, which finishes the current run and stops;
//! and a parent-death signal, so a killed `dmalab run` leaves no aggressor
//! behind.
//!
//! One concern per module: `validate` (everything checked before the first
//! run), `results` (the results file: header, resume, restart), `spawn`
//! (child processes), `aggressor` and `victim` (with `redis`, the redis
//! recipe), `evidence` (the aggressor's live counters around the victim).

mod aggressor;
mod evidence;
mod redis;
mod results;
mod spawn;
mod validate;
mod victim;

use crate::error::RunError;
use crate::experiment::Experiment;
use crate::plan::{self, PlannedRun, PLAIN};
use crate::progress::Progress;
use crate::record::{Failure, RunRecord};
use aggressor::{start_aggressor, stop_aggressor};
use dmalab_core::schema::{rfc3339, RunStatus};
use dmalab_core::UsageError;
use evidence::Window;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use validate::Validated;
use victim::run_victim;

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

/// A usage error naming `opt`.
fn usage(opt: impl Into<String>, msg: impl Into<String>) -> RunError {
    RunError::Usage(UsageError::new(opt, msg))
}

/// `FILE:LINE` of the experiment file, for messages.
fn at(exp: &Experiment, line: usize) -> String {
    format!("{}:{line}", exp.path.display())
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
    let val = validate::validate(exp, &opts.exe)?;
    let runs = plan::expand(exp);
    let selected = select_configuration(exp, opts.configuration.as_deref())?;
    let in_selection = |p: &PlannedRun| selected.is_none_or(|c| p.configuration == c);
    let planned = runs.iter().filter(|p| in_selection(p)).count();
    if opts.dry_run {
        for p in runs.iter().filter(|p| in_selection(p)) {
            println!("{}", plan_line(exp, p));
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
    let (done, renamed) = results::open_results(exp, opts, &runs, planned)?;
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
        let label = progress_label(exp, p);
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

/// A run of the plan as `--dry-run` prints it.
fn plan_line(exp: &Experiment, p: &PlannedRun) -> String {
    let a = p
        .aggressor
        .map_or(PLAIN, |a| exp.aggressors[a].name.as_str());
    format!(
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
    )
}

/// A run of the plan as the progress lines name it.
fn progress_label(exp: &Experiment, p: &PlannedRun) -> String {
    format!(
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
    )
}
