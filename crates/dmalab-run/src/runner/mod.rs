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
mod quiet;
mod redis;
mod results;
mod spawn;
mod validate;
mod victim;

use crate::error::RunError;
use crate::experiment::Control;
use crate::experiment::{Experiment, Victim};
use crate::plan::{self, PlannedRun};
use crate::progress::Progress;
use crate::record::{AggressorOutcome, ControlOrder, ControlRecord, Failure, RunRecord};
use aggressor::{
    start_aggressor, start_group, stop_aggressor, stop_members, ControlArgs, MemberStart,
    RunningAggressor,
};
use dmalab_core::schema::{rfc3339, RunStatus};
use dmalab_core::UsageError;
use evidence::Window;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
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
    /// Wait (up to a minute) for a quiet host before each run, and fail the
    /// run with the reason when it stays busy; false: check, flag, go on.
    pub require_quiet: bool,
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
            .map_err(RunError::TempDir)?;
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

/// What a loaded run reached, as its control cycle needs it: whether it
/// completed, the command rate the aggressor reached in the victim's
/// window, and for a group each member's (in the group's order).
#[derive(Clone, Debug, Default)]
struct Reached {
    completed: bool,
    cmd_per_s: Option<f64>,
    members: Vec<Option<f64>>,
}

/// The loaded runs: (configuration, repetition, victim, aggressor) -> what
/// each reached.
type Rates = HashMap<(usize, u32, usize, usize), Reached>;

/// Notes a loaded run's outcome in `rates` (records of other runs are
/// ignored).
fn note_rate(exp: &Experiment, rates: &mut Rates, rec: &RunRecord) {
    if rec.sweep_value.is_some() || rec.control.is_some() {
        return;
    }
    let (Some(c), Some(v), Some(a)) = (
        exp.configurations
            .iter()
            .position(|c| c.name == rec.configuration),
        exp.victims.iter().position(|v| v.name == rec.victim),
        exp.aggressors.iter().position(|a| a.name == rec.load),
    ) else {
        return;
    };
    let members = rec
        .aggressor
        .iter()
        .flat_map(|o| &o.members)
        .map(|m| m.outcome.evidence.as_ref().map(|e| e.cmd_per_s))
        .collect();
    rates.insert(
        (c, rec.repetition, v, a),
        Reached {
            completed: rec.status == RunStatus::Completed,
            cmd_per_s: crate::analysis::aggressor_rates(rec).and_then(|r| r.1),
            members,
        },
    );
}

/// What a control cycle starts (one load, or a group's members' stand-ins,
/// each with how it differs from a plain start) and its record, or why it
/// cannot run.
fn control_plan<'e>(
    exp: &'e Experiment,
    p: &PlannedRun,
    rates: &Rates,
) -> Result<(Vec<MemberStart<'e>>, ControlRecord), String> {
    let i = p.aggressor.unwrap_or(0);
    let a = &exp.aggressors[i];
    let Some(control) = &a.control else {
        return Err(format!("aggressor '{}' has no control", a.name));
    };
    let order = plan::control_order(exp, p.repetition);
    let rate_of = |r: u32| rates.get(&(p.configuration, r, p.victim, i));
    let (reached, paced_by) = match order {
        // After the load: the rate it reached in this repetition.
        ControlOrder::AfterLoad => match rate_of(p.repetition) {
            Some(r) if r.completed => (r, p.repetition),
            Some(_) => {
                return Err(format!(
                    "aggressor '{}''s run in repetition {} failed, so there is no command rate to pace its control at",
                    a.name, p.repetition
                ))
            }
            None => {
                return Err(format!(
                    "aggressor '{}' has no recorded run in repetition {}, so there is no command rate to pace its control at",
                    a.name, p.repetition
                ))
            }
        },
        // Before the load: the rate of the latest earlier repetition whose
        // loaded run completed (this repetition's has not run yet).
        ControlOrder::BeforeLoad => match (1..p.repetition)
            .rev()
            .find_map(|r| rate_of(r).filter(|x| x.completed).map(|x| (x, r)))
        {
            Some(t) => t,
            None => {
                return Err(format!(
                    "repetition {} runs aggressor '{}''s control before its load, and no earlier repetition's run of it completed, so there is no command rate to pace the control at",
                    p.repetition, a.name
                ))
            }
        },
    };
    // What stands in for aggressor `of` under control `c`, paced at the
    // command rate `target` it reached.
    let stand_in = |of: &'e crate::experiment::Aggressor,
                    c: &Control,
                    target: Option<f64>|
     -> Result<(MemberStart<'e>, ControlRecord), String> {
        let (run, twin) = match c {
            Control::Twin => (of, true),
            Control::Aggressor(j) => (&exp.aggressors[*j], false),
            Control::Group(_) => return Err(format!("'{}' is a group", of.name)),
        };
        let rate_iops = target
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| r.round().max(1.0) as u64);
        if twin && rate_iops.is_none() {
            return Err(format!(
                "aggressor '{}' kept no live counters in repetition {}, so its twin cannot be paced at its command rate",
                of.name, p.repetition
            ));
        }
        Ok((
            MemberStart {
                run,
                name: of.name.clone(),
                ctl: Some(ControlArgs { twin, rate_iops }),
            },
            ControlRecord {
                of: of.name.clone(),
                kind: if twin { "twin" } else { "aggressor" }.into(),
                target_cmd_per_s: target,
                rate_iops,
                order: None,
                paced_by_repetition: None,
                members: Vec::new(),
            },
        ))
    };
    let (starts, mut rec) = match control {
        // Each member's stand-in paced at the rate that member reached in
        // the group's run.
        Control::Group(cs) => {
            let mut starts = Vec::with_capacity(cs.len());
            let mut members = Vec::with_capacity(cs.len());
            for (k, (&m, c)) in a.members().iter().zip(cs).enumerate() {
                let target = reached.members.get(k).copied().flatten();
                let (s, r) = stand_in(&exp.aggressors[m], c, target).map_err(|why| {
                    format!(
                        "member '{}' of group '{}': {why}",
                        exp.aggressors[m].name, a.name
                    )
                })?;
                starts.push(s);
                members.push(r);
            }
            let rec = ControlRecord {
                of: a.name.clone(),
                kind: "group".into(),
                target_cmd_per_s: reached.cmd_per_s,
                rate_iops: None,
                order: None,
                paced_by_repetition: None,
                members,
            };
            (starts, rec)
        }
        c => {
            let (s, r) = stand_in(a, c, reached.cmd_per_s)?;
            (vec![s], r)
        }
    };
    rec.order = Some(order);
    rec.paced_by_repetition = Some(paced_by);
    Ok((starts, rec))
}

/// What runs beside the victim: one aggressor, or a group's members.
enum Started {
    One(RunningAggressor),
    Group(Vec<RunningAggressor>),
}

impl Started {
    fn running(&self) -> &[RunningAggressor] {
        match self {
            Started::One(a) => std::slice::from_ref(a),
            Started::Group(ms) => ms,
        }
    }
}

/// Stops what ran beside the victim and fills in the aggressor's side of
/// `rec`, with the evidence `found` (one per load, as [`Started::running`] lists
/// them); a load that ended before the victim did fails the run.
fn stop_load(rec: &mut RunRecord, started: Started, found: Vec<Option<crate::record::Evidence>>) {
    let name = rec.load.clone();
    let (o, early) = match started {
        Started::One(a) => {
            let (mut o, ended_early) = stop_aggressor(a);
            o.evidence = found.into_iter().next().flatten();
            let early = ended_early.then(|| {
                (
                    format!("aggressor '{name}' ended before the victim did, so part of the victim ran without load"),
                    o.exit_status,
                    o.stderr_tail.clone(),
                )
            });
            (o, early)
        }
        Started::Group(ms) => {
            let mut members = Vec::new();
            let mut early = None;
            for ((mut m, ended_early), ev) in stop_members(ms).into_iter().zip(found) {
                m.outcome.evidence = ev;
                if ended_early && early.is_none() {
                    early = Some((
                        format!("member '{}' of group '{name}' ended before the victim did, so part of the victim ran without it", m.name),
                        m.outcome.exit_status,
                        m.outcome.stderr_tail.clone(),
                    ));
                }
                members.push(m);
            }
            let evs: Vec<_> = members.iter().map(|m| m.outcome.evidence.clone()).collect();
            let o = AggressorOutcome {
                evidence: evidence::sum_evidence(&evs),
                members,
                ..Default::default()
            };
            (o, early)
        }
    };
    if let Some((reason, exit_status, stderr_tail)) = early {
        if rec.status == RunStatus::Completed {
            rec.status = RunStatus::Failed;
            rec.failure = Some(Failure {
                reason,
                exit_status,
                signal: None,
                stderr_tail,
            });
        }
    }
    rec.aggressor = Some(o);
}

/// The record of run `p` before anything ran: what it is, and an empty
/// outcome.
fn blank_record(exp: &Experiment, p: &PlannedRun, v: &Victim, started: SystemTime) -> RunRecord {
    RunRecord {
        record: "run".into(),
        experiment_hash: exp.hash.clone(),
        index: p.index,
        configuration: exp.configurations[p.configuration].name.clone(),
        repetition: p.repetition,
        victim: v.name.clone(),
        load: plan::load_name(exp, p),
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
        control: None,
        victim_evidence: None,
        quiet: None,
    }
}

/// Every CPU run `p` uses: its victim's and its aggressor's (a group's
/// members' too), sorted, once each.
fn cpus_of_run(exp: &Experiment, v: &Victim, p: &PlannedRun) -> Vec<usize> {
    let mut cpus = v
        .cpus
        .clone()
        .unwrap_or_else(|| exp.placement.victims.clone());
    if let Some(i) = p.aggressor {
        let c = &exp.configurations[p.configuration];
        let a = &exp.aggressors[i];
        cpus.extend(exp.aggressor_cpus(a, c, p.sweep_value.as_deref()));
        for &m in a.members() {
            cpus.extend(exp.aggressor_cpus(&exp.aggressors[m], c, None));
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// One run, start to record.
fn one_run(
    exp: &Experiment,
    opts: &RunOptions,
    p: &PlannedRun,
    rates: &Rates,
) -> Result<RunRecord, RunError> {
    let dir = RunDir::new()?;
    let v = &exp.victims[p.victim];
    let mut rec = blank_record(exp, p, v, SystemTime::now());
    let cpus = cpus_of_run(exp, v, p);
    let limit = if opts.require_quiet {
        quiet::WAIT_LIMIT
    } else {
        Duration::ZERO
    };
    let q = quiet::check_until_quiet(&cpus, limit);
    if opts.require_quiet && q.busy {
        rec.status = RunStatus::Failed;
        rec.failure = Some(Failure {
            reason: format!(
                "--require-quiet: the host stayed busy for {} s: {}",
                quiet::WAIT_LIMIT.as_secs(),
                q.reason.clone().unwrap_or_default()
            ),
            ..Default::default()
        });
        rec.quiet = Some(Box::new(q));
        return Ok(rec);
    }
    rec.quiet = Some(Box::new(q));
    let started_agg = match p.aggressor {
        None => None,
        Some(i) if p.control => match control_plan(exp, p, rates) {
            Ok((starts, cr)) => {
                rec.control = Some(Box::new(cr));
                let a = &exp.aggressors[i];
                Some(match starts.as_slice() {
                    [one] if a.members().is_empty() => {
                        start_aggressor(exp, opts, one.run, p, dir.path(), one.ctl)
                            .map(Started::One)
                    }
                    _ => {
                        start_group(exp, opts, &a.name, &starts, p, dir.path()).map(Started::Group)
                    }
                })
            }
            Err(why) => {
                rec.control = Some(Box::new(ControlRecord {
                    of: exp.aggressors[i].name.clone(),
                    kind: match exp.aggressors[i].control {
                        Some(Control::Aggressor(_)) => "aggressor",
                        Some(Control::Group(_)) => "group",
                        _ => "twin",
                    }
                    .into(),
                    target_cmd_per_s: None,
                    rate_iops: None,
                    order: Some(plan::control_order(exp, p.repetition)),
                    paced_by_repetition: None,
                    members: Vec::new(),
                }));
                rec.status = RunStatus::Failed;
                rec.failure = Some(Failure {
                    reason: format!("control '{}': {why}", rec.load),
                    ..Default::default()
                });
                return Ok(rec);
            }
        },
        Some(i) if !exp.aggressors[i].members().is_empty() => {
            let g = &exp.aggressors[i];
            let starts: Vec<MemberStart> = g
                .members()
                .iter()
                .map(|&m| MemberStart {
                    run: &exp.aggressors[m],
                    name: exp.aggressors[m].name.clone(),
                    ctl: None,
                })
                .collect();
            Some(start_group(exp, opts, &g.name, &starts, p, dir.path()).map(Started::Group))
        }
        Some(i) => Some(
            start_aggressor(exp, opts, &exp.aggressors[i], p, dir.path(), None).map(Started::One),
        ),
    };
    let agg = match started_agg {
        None => None,
        Some(started) => match started {
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
    let vcpus = v
        .cpus
        .clone()
        .unwrap_or_else(|| exp.placement.victims.clone());
    let running = agg.as_ref().map_or(&[][..], Started::running);
    let mut w = Window::new(
        running.iter().map(|a| a.stats.clone()).collect(),
        vcpus,
        running.iter().map(RunningAggressor::pid).collect(),
    );
    let vo = run_victim(exp, opts, v, dir.path(), p.repetition, &mut w);
    rec.victim_wall_ns = w.wall_ns();
    rec.victim_evidence = w.victim_evidence().map(Box::new);
    let evidence = w.evidence();
    rec.value = vo.value;
    rec.victim_result = vo.result;
    rec.victim_argv = vo.argv;
    if let Some(f) = vo.failure {
        rec.status = RunStatus::Failed;
        rec.failure = Some(f);
    }
    if let Some(a) = agg {
        stop_load(&mut rec, a, evidence);
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
    validate::validate(exp, &opts.exe)?;
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
    // The loaded runs already recorded pace the control cycles of a
    // resumed file.
    let mut rates = Rates::new();
    if out.resumed > 0 {
        if let Ok(res) = crate::record::read(&opts.results) {
            for r in &res.runs {
                note_rate(exp, &mut rates, r);
            }
        }
    }
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
        let mut rec = one_run(exp, opts, p, &rates)?;
        rec.ddio = ddio_rec;
        note_rate(exp, &mut rates, &rec);
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
    let a = plan::load_name(exp, p);
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
        plan::load_name(exp, p),
        p.sweep_value
            .as_ref()
            .map(|s| format!("@{s}"))
            .unwrap_or_default()
    )
}
