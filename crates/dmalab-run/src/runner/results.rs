//! The results file: a new one gets its header; an existing one of the same
//! experiment is resumed (a torn last record cut, the runs done skipped);
//! another is refused, or kept aside under `--restart`.

use super::{usage, RunOptions};
use crate::error::RunError;
use crate::experiment::Experiment;
use crate::plan::{self, PlannedRun};
use crate::record::{self, Header, Results, SweepMeta, VictimMeta};
use dmalab_core::schema::{rfc3339, ToolInfo, SCHEMA_VERSION};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

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
pub(super) fn open_results(
    exp: &Experiment,
    opts: &RunOptions,
    runs: &[PlannedRun],
    planned: usize,
) -> Result<(Vec<bool>, bool), RunError> {
    let path = &opts.results;
    let mut renamed = false;
    let exists = std::fs::metadata(path)
        .map(|m| m.len() > 0)
        .unwrap_or(false);
    if exists {
        match record::read(path) {
            Ok(res) if res.header.experiment_hash == exp.hash && !opts.restart => {
                return Ok((resume(exp, path, runs, &res)?, false));
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
                keep_old(path, "--restart")?;
                renamed = true;
            }
            Err(e) if !opts.restart => {
                return Err(usage("--results", format!("{e}; pass --restart to start over (the file is kept) or choose another file")))
            }
            Err(_) => {
                keep_old(path, "--restart")?;
                renamed = true;
            }
        }
    }
    let h = header(exp, planned);
    dmalab_core::output::append_json_line(path, &h).map_err(|e| RunError::io(path, e))?;
    Ok((vec![false; runs.len()], renamed))
}

/// Resumes a results file of this experiment: cuts a record torn by a
/// kill and returns which runs of the plan are done (each checked against
/// the plan).
fn resume(
    exp: &Experiment,
    path: &Path,
    runs: &[PlannedRun],
    res: &Results,
) -> Result<Vec<bool>, RunError> {
    let mut done = vec![false; runs.len()];
    // Cut a record torn by a kill, then skip what is done.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| RunError::io(path, e))?;
    f.set_len(res.complete_len)
        .map_err(|e| RunError::io(path, e))?;
    f.sync_all().map_err(|e| RunError::io(path, e))?;
    for r in &res.runs {
        let Some(p) = runs.get(r.index) else {
            return Err(RunError::RunOutsidePlan {
                path: path.display().to_string(),
                index: r.index,
                planned: runs.len(),
            });
        };
        let c = &exp.configurations[p.configuration].name;
        let v = &exp.victims[p.victim].name;
        let l = plan::load_name(exp, p);
        if (
            &r.configuration,
            &r.victim,
            r.load.as_str(),
            &r.repetition,
            &r.sweep_value,
        ) != (c, v, l.as_str(), &p.repetition, &p.sweep_value)
        {
            return Err(RunError::RunNotInPlan {
                path: path.display().to_string(),
                index: r.index,
            });
        }
        done[r.index] = true;
    }
    Ok(done)
}

/// Moves the results file aside (`FILE.<time>.old`) and says so.
fn keep_old(path: &Path, why: &str) -> Result<(), RunError> {
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
}
