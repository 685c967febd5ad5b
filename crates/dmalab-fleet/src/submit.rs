//! `dmalab fleet submit`: the results directory prepared (experiment copy,
//! marker, manifest), the sbatch script written beside it, the array
//! submitted held, each task pinned to its node, released.

use crate::error::FleetError;
use crate::hostlist;
use crate::manifest::{Manifest, Submission, EXPERIMENT, MANIFEST_VERSION, MARKER};
use crate::plan::{self, NodeSource, SubmitRequest, Unit};
use crate::script::{self, ScriptSpec};
use crate::slurm;
use crate::status::{file_state, FileState};
use dmalab_core::schema::rfc3339;
use dmalab_run::child::ChildCatalog;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What a submit did.
#[derive(Clone, Debug, Default)]
pub struct Submitted {
    /// The array job's ID (None: nothing submitted).
    pub job_id: Option<String>,
    /// The script written (None when nothing was left to run).
    pub script: Option<PathBuf>,
    /// The units of the array, by task index.
    pub tasks: Vec<Unit>,
    /// Units left out, and why.
    pub skipped: Vec<(Unit, String)>,
    /// The results directory, absolute.
    pub results: PathBuf,
    /// Per task: node and the command line that runs it by hand.
    pub command_lines: Vec<(String, String)>,
}

/// Files a failed submit removes again, so nothing is left half-made.
#[derive(Default)]
struct Undo {
    files: Vec<PathBuf>,
    dir: Option<PathBuf>,
}

impl Undo {
    fn run(self) {
        for f in self.files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        if let Some(d) = self.dir {
            // Only when empty: never anything a user put there.
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn write_file(p: &Path, bytes: &[u8]) -> Result<(), FleetError> {
    dmalab_core::output::write_atomic(p, bytes).map_err(|e| FleetError::io(p, e))
}

/// A fresh marker token.
fn token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Prepares and submits; see the module doc.
/// `children` are the configs of the commands the experiment starts (the
/// binary's catalog).
pub fn submit(req: &SubmitRequest, children: &ChildCatalog) -> Result<Submitted, FleetError> {
    req.validate()?;
    let exp = dmalab_run::experiment::load(&req.experiment, children)
        .map_err(|e| FleetError::Usage(e.to_usage()))?;
    if !req.dry_run {
        slurm::find("sbatch")?;
        slurm::find("scontrol")?;
    }
    let nodes = match &req.nodes {
        NodeSource::List(l) => hostlist::expand(l).map_err(|e| FleetError::usage("--nodes", e))?,
        NodeSource::Partition => {
            slurm::partition_nodes(req.partition.as_deref().unwrap_or_default())?
        }
    };
    let units = plan::units(&exp, &nodes, req.per_node, req.split)?;

    let mut undo = Undo::default();
    let existed = req.results.exists();
    if existed && !req.results.is_dir() {
        return Err(FleetError::usage(
            "--results",
            format!("{} exists and is not a directory", req.results.display()),
        ));
    }
    std::fs::create_dir_all(&req.results).map_err(|e| FleetError::io(&req.results, e))?;
    if !existed {
        undo.dir = Some(req.results.clone());
    }
    let result = prepare_and_submit(req, &exp, units, &mut undo);
    if result.is_err() {
        undo.run();
    }
    result
}

fn prepare_and_submit(
    req: &SubmitRequest,
    exp: &dmalab_run::experiment::Experiment,
    units: Vec<Unit>,
    undo: &mut Undo,
) -> Result<Submitted, FleetError> {
    let (dir, shown) = results_dir(req)?;
    let mut m = open_manifest(req, exp, &dir, &shown, undo)?;
    for u in &units {
        if m.unit(&u.key).is_none() {
            m.units.push(u.clone());
        }
    }
    write_copies(req, &dir, &m, undo)?;

    let mut out = sort_units(req, &dir, &shown, &m, units)?;
    if out.tasks.is_empty() {
        m.write(&dir)?;
        return Ok(out);
    }
    let number = m.submissions.len() as u32 + 1;
    let script_name = format!("fleet-{number}.sbatch");
    let script_path = dir.join(&script_name);
    undo.files.push(script_path.clone());
    let tasks: Vec<&Unit> = out.tasks.iter().collect();
    let now = rfc3339(SystemTime::now());
    let text = script::render(&ScriptSpec {
        experiment: &m.experiment,
        experiment_hash: &m.experiment_hash,
        number,
        written_at: &now,
        results: &dir,
        dmalab: &req.dmalab,
        marker_token: &m.marker_token,
        partition: req.partition.as_deref(),
        sbatch_args: &req.sbatch_args,
        max_running: req.max_running,
        exclusive: req.exclusive,
        tasks: &tasks,
    });
    write_file(&script_path, text.as_bytes())?;
    out.command_lines = out
        .tasks
        .iter()
        .map(|u| (u.node.clone(), script::command_line(&req.dmalab, &dir, u)))
        .collect();
    out.script = Some(script_path.clone());
    if req.dry_run {
        // The script stays (it is what was asked for); nothing is recorded
        // as submitted.
        undo.files.retain(|f| f != &script_path);
        m.write(&dir)?;
        return Ok(out);
    }
    let job = submit_pinned(req, &script_path, &out.tasks)?;
    m.submissions.push(Submission {
        number,
        job_id: job.clone(),
        submitted_at: now,
        script: script_name,
        tasks: out.tasks.iter().map(|u| u.key.clone()).collect(),
    });
    m.write(&dir)?;
    out.job_id = Some(job);
    Ok(out)
}

/// The results directory, absolute, and as it is shown: it must be a
/// plain path, since sbatch's `#SBATCH` lines cannot carry every character.
fn results_dir(req: &SubmitRequest) -> Result<(std::path::PathBuf, String), FleetError> {
    let dir = req
        .results
        .canonicalize()
        .map_err(|e| FleetError::io(&req.results, e))?;
    let shown = dir.display().to_string();
    if shown.contains(|c: char| c.is_whitespace() || "'\"\\$`%".contains(c)) {
        return Err(FleetError::usage(
            "--results",
            format!("'{shown}' has a space, quote, '%' or shell character; sbatch's #SBATCH lines (where % starts a file name pattern) cannot carry it: choose a plain path"),
        ));
    }
    Ok((dir, shown))
}

/// The directory's manifest: the one an earlier submission wrote (it must
/// be of the same experiment, split and units per node), or a new one for
/// a directory without results.
fn open_manifest(
    req: &SubmitRequest,
    exp: &dmalab_run::experiment::Experiment,
    dir: &Path,
    shown: &str,
    undo: &mut Undo,
) -> Result<Manifest, FleetError> {
    let m = match Manifest::read(dir)? {
        Some(m) => {
            if m.experiment_hash != exp.hash {
                return Err(FleetError::usage(
                    "--results",
                    format!(
                        "{shown} holds experiment '{}' (sha256 {}…), and {} is now sha256 {}…: mixing them would merge two experiments; choose another --results directory",
                        m.experiment,
                        crate::short_hash(&m.experiment_hash),
                        req.experiment.display(),
                        crate::short_hash(&exp.hash)
                    ),
                ));
            }
            if m.split != req.split || m.per_node != req.per_node {
                return Err(FleetError::usage(
                    "--split",
                    format!(
                        "{shown} was submitted with --split {} --per-node {}; submit again with those (or choose another --results directory)",
                        m.split.as_str(),
                        m.per_node
                    ),
                ));
            }
            m
        }
        None => {
            if std::fs::read_dir(dir)
                .map_err(|e| FleetError::io(dir, e))?
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            {
                return Err(FleetError::usage(
                    "--results",
                    format!("{shown} already holds .jsonl files but no fleet.json; choose an empty or new directory"),
                ));
            }
            undo.files.push(Manifest::path(dir));
            Manifest {
                manifest_version: MANIFEST_VERSION,
                experiment: exp.name.clone(),
                experiment_hash: exp.hash.clone(),
                experiment_source: req.experiment.display().to_string(),
                split: req.split,
                per_node: req.per_node,
                marker_token: token(),
                units: Vec::new(),
                submissions: Vec::new(),
            }
        }
    };
    Ok(m)
}

/// The experiment file's copy and the marker file, in the directory.
fn write_copies(
    req: &SubmitRequest,
    dir: &Path,
    m: &Manifest,
    undo: &mut Undo,
) -> Result<(), FleetError> {
    let exp_copy = dir.join(EXPERIMENT);
    if !exp_copy.exists() {
        undo.files.push(exp_copy.clone());
    }
    let bytes = std::fs::read(&req.experiment).map_err(|e| FleetError::io(&req.experiment, e))?;
    write_file(&exp_copy, &bytes)?;
    let marker = dir.join(MARKER);
    if !marker.exists() {
        undo.files.push(marker.clone());
    }
    write_file(&marker, format!("{}\n", m.marker_token).as_bytes())?;
    Ok(())
}

/// Which units become tasks of this submission: not those whose task of
/// an earlier submission still runs, nor those whose results are
/// complete; a results file of another experiment stops the submission.
fn sort_units(
    req: &SubmitRequest,
    dir: &Path,
    shown: &str,
    m: &Manifest,
    units: Vec<Unit>,
) -> Result<Submitted, FleetError> {
    // Tasks of earlier submissions that still run keep their files.
    let mut active = std::collections::BTreeMap::new();
    if !m.submissions.is_empty() && !req.dry_run {
        let jobs: Vec<String> = m.submissions.iter().map(|s| s.job_id.clone()).collect();
        let (_, st) = slurm::task_states(&jobs)?;
        active = st;
    }
    let mut out = Submitted {
        results: dir.to_path_buf(),
        ..Default::default()
    };
    for u in units {
        let f = file_state(dir, &m.experiment_hash, &u);
        let running = m
            .last_task(&u.key)
            .map(|(s, i)| format!("{}_{i}", s.job_id))
            .and_then(|t| {
                active
                    .get(&t)
                    .filter(|s| s.active())
                    .map(|s| (t, s.state.clone()))
            });
        match (&f, running) {
            (FileState::OtherExperiment(h), _) => {
                return Err(FleetError::usage(
                    "--results",
                    format!(
                    "{} holds another experiment's results (sha256 {}…); move it out of {shown}",
                    u.results_file(),
                    crate::short_hash(h)
                ),
                ))
            }
            (_, Some((t, st))) => {
                out.skipped.push((u, format!("task {t} is still {st}")));
            }
            (f, None) if f.complete(u.planned_runs) => {
                let why = format!("complete ({} of {} runs)", f.recorded(), u.planned_runs);
                out.skipped.push((u, why));
            }
            _ => out.tasks.push(u),
        }
    }
    Ok(out)
}

/// Submits the script held, pins each array task to its unit's node and
/// releases the job; the job id. Anything Slurm refuses cancels the job.
fn submit_pinned(
    req: &SubmitRequest,
    script_path: &Path,
    tasks: &[Unit],
) -> Result<String, FleetError> {
    let job = slurm::submit_held(script_path)?;
    let node_opt = match req.nodes {
        NodeSource::List(_) => "--nodes",
        NodeSource::Partition => "--partition",
    };
    for (i, u) in tasks.iter().enumerate() {
        if let Err(msg) = slurm::pin(&job, i, &u.node) {
            let _ = slurm::cancel(&job);
            return Err(FleetError::usage(
                node_opt,
                format!("Slurm rejected node '{}' for array task {job}_{i}: {msg} (job {job} was cancelled; nothing was run)", u.node),
            ));
        }
    }
    if let Err(e) = slurm::release(&job) {
        let _ = slurm::cancel(&job);
        return Err(FleetError::Slurm(format!(
            "scontrol release {job}: {e} (job {job} was cancelled)"
        )));
    }
    Ok(job)
}
