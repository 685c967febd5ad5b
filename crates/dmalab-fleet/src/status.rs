//! `dmalab fleet status RESULTS`: each unit's array task as Slurm sees it
//! and its results file's progress (runs recorded of planned).

use crate::error::FleetError;
use crate::manifest::Manifest;
use crate::plan::Unit;
use crate::slurm::{self, Source, TaskState};
use std::fmt::Write;
use std::path::Path;

/// A results file's progress.
#[derive(Clone, Debug, PartialEq)]
pub enum FileState {
    /// Not written yet.
    Missing,
    /// Runs of this unit recorded (distinct plan positions).
    Runs {
        /// Recorded, completed or failed.
        recorded: usize,
        /// Of those, failed.
        failed: usize,
    },
    /// Cannot be read as a results file.
    Unreadable(String),
    /// Holds another experiment's results (its hash).
    OtherExperiment(String),
}

impl FileState {
    /// All planned runs recorded.
    pub fn complete(&self, planned: usize) -> bool {
        matches!(self, FileState::Runs { recorded, .. } if *recorded >= planned)
    }

    /// Runs recorded, 0 unless readable.
    pub fn recorded(&self) -> usize {
        match self {
            FileState::Runs { recorded, .. } => *recorded,
            _ => 0,
        }
    }
}

/// The progress of a unit's results file in `dir`.
pub fn file_state(dir: &Path, hash: &str, u: &Unit) -> FileState {
    let p = dir.join(u.results_file());
    if !p.exists() {
        return FileState::Missing;
    }
    match dmalab_run::record::read(&p) {
        Err(e) => FileState::Unreadable(e.to_string()),
        Ok(r) if r.header.experiment_hash != hash => {
            FileState::OtherExperiment(r.header.experiment_hash)
        }
        Ok(r) => {
            let mut seen = std::collections::BTreeSet::new();
            let mut failed = 0;
            for run in r.runs.iter().filter(|run| {
                u.configuration
                    .as_ref()
                    .is_none_or(|c| *c == run.configuration)
            }) {
                if seen.insert(run.index) && run.status != dmalab_core::schema::RunStatus::Completed
                {
                    failed += 1;
                }
            }
            FileState::Runs {
                recorded: seen.len(),
                failed,
            }
        }
    }
}

/// One unit's state.
#[derive(Clone, Debug)]
pub struct UnitStatus {
    /// The unit.
    pub unit: Unit,
    /// Its results file.
    pub file: FileState,
    /// Its latest array task (`JOB_INDEX`), when it was submitted.
    pub task: Option<String>,
    /// What Slurm says about that task (None: Slurm no longer knows it).
    pub slurm: Option<TaskState>,
    /// The last line of the task's output file, for a task that did not
    /// complete.
    pub output_tail: Option<String>,
}

/// The whole directory's state.
#[derive(Clone, Debug)]
pub struct Status {
    /// The manifest.
    pub manifest: Manifest,
    /// Where task states came from (None: Slurm could not be asked).
    pub source: Option<Source>,
    /// Why Slurm could not be asked.
    pub slurm_error: Option<String>,
    /// Per unit.
    pub units: Vec<UnitStatus>,
}

/// Reads the manifest of `dir` or says what `dir` should be.
pub fn manifest_of(dir: &Path) -> Result<Manifest, FleetError> {
    if !dir.is_dir() {
        return Err(FleetError::usage(
            "RESULTS",
            format!(
                "{} is not a directory; name the --results directory of dmalab fleet submit",
                dir.display()
            ),
        ));
    }
    Manifest::read(dir)?.ok_or_else(|| {
        FleetError::usage(
            "RESULTS",
            format!(
                "{} has no {} (dmalab fleet submit writes it); name the --results directory of dmalab fleet submit",
                dir.display(),
                crate::manifest::MANIFEST
            ),
        )
    })
}

/// Last non-empty line of a file.
fn last_line(p: &Path) -> Option<String> {
    let text = std::fs::read_to_string(p).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// Collects the state of every unit; asks Slurm when it can.
pub fn status(dir: &Path) -> Result<Status, FleetError> {
    let m = manifest_of(dir)?;
    let jobs: Vec<String> = m.submissions.iter().map(|s| s.job_id.clone()).collect();
    let (source, states, slurm_error) = if jobs.is_empty() {
        (None, Default::default(), None)
    } else {
        match slurm::task_states(&jobs) {
            Ok((s, st)) => (Some(s), st, None),
            Err(e) => (None, Default::default(), Some(e.to_string())),
        }
    };
    let units = m
        .units
        .iter()
        .map(|u| {
            let file = file_state(dir, &m.experiment_hash, u);
            let task = m
                .last_task(&u.key)
                .map(|(s, i)| format!("{}_{i}", s.job_id));
            let slurm = task.as_ref().and_then(|t| states.get(t).cloned());
            let output_tail = match (&task, &slurm) {
                (Some(t), Some(s)) if !s.active() && s.state != "COMPLETED" => {
                    last_line(&dir.join(format!("slurm-{t}.out")))
                }
                (Some(t), None) if !file.complete(u.planned_runs) => {
                    last_line(&dir.join(format!("slurm-{t}.out")))
                }
                _ => None,
            };
            UnitStatus {
                unit: u.clone(),
                file,
                task,
                slurm,
                output_tail,
            }
        })
        .collect();
    Ok(Status {
        manifest: m,
        source,
        slurm_error,
        units,
    })
}

/// The state column of a unit.
pub fn state_word(u: &UnitStatus, source: Option<Source>) -> String {
    match (&u.task, &u.slurm) {
        (None, _) => "not submitted".into(),
        (Some(_), Some(s)) => {
            let mut w = s.state.clone();
            if let Some(e) = s.exit_code.as_ref().filter(|e| *e != "0:0") {
                let _ = write!(w, " (exit {e})");
            }
            w
        }
        (Some(_), None) if source == Some(Source::Queue) => {
            "unknown (Slurm has forgotten it; accounting is off)".into()
        }
        (Some(_), None) => "unknown".into(),
    }
}

/// The status table and a summary line.
pub fn render(s: &Status) -> String {
    let mut rows = vec![[
        "results".to_string(),
        "node".into(),
        "task".into(),
        "state".into(),
        "runs".into(),
    ]];
    for u in &s.units {
        let runs = match &u.file {
            FileState::Missing => format!("0 of {} (no file)", u.unit.planned_runs),
            FileState::Runs { recorded, failed } => {
                let mut r = format!("{recorded} of {}", u.unit.planned_runs);
                if *failed > 0 {
                    let _ = write!(r, " ({failed} failed)");
                }
                if u.file.complete(u.unit.planned_runs) {
                    r.push_str(" complete");
                }
                r
            }
            FileState::Unreadable(e) => format!("unreadable: {e}"),
            FileState::OtherExperiment(h) => {
                format!(
                    "another experiment's results (sha256 {}…)",
                    crate::short_hash(h)
                )
            }
        };
        rows.push([
            u.unit.results_file(),
            u.unit.node.clone(),
            u.task.clone().unwrap_or_else(|| "-".into()),
            state_word(u, s.source),
            runs,
        ]);
    }
    let mut w = [0usize; 5];
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "experiment '{}' (sha256 {}…), {} submission(s); task states from {}",
        s.manifest.experiment,
        crate::short_hash(&s.manifest.experiment_hash),
        s.manifest.submissions.len(),
        match s.source {
            Some(Source::Sacct) => "sacct".to_string(),
            Some(Source::Queue) => "squeue and scontrol (no accounting)".to_string(),
            None => match &s.slurm_error {
                Some(e) => format!("nowhere: {e}"),
                None => "nowhere (nothing submitted)".to_string(),
            },
        }
    );
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for u in &s.units {
        if let Some(t) = &u.output_tail {
            let _ = writeln!(
                out,
                "{}: last output line of slurm-{}.out: {t}",
                u.unit.key,
                u.task.as_deref().unwrap_or("")
            );
        }
    }
    let complete = s
        .units
        .iter()
        .filter(|u| u.file.complete(u.unit.planned_runs))
        .count();
    let _ = writeln!(
        out,
        "{complete} of {} results files complete",
        s.units.len()
    );
    out
}
