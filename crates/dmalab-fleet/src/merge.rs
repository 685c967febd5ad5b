//! `dmalab fleet merge RESULTS`: the per-node results files of one
//! experiment merged into one results file, every run keeping its host.
//!
//! The same experiment means the same SHA-256 of the experiment file's
//! bytes: the manifest's, or without a manifest the first file's. A file
//! or a record with another hash is refused, and so is a run (host and
//! plan position) found twice; nothing is written then.

use crate::error::FleetError;
use crate::manifest::Manifest;
use crate::plan::Unit;
use crate::status::{file_state, FileState};
use dmalab_core::schema::SCHEMA_VERSION;
use dmalab_run::record::{self, MergedHost, Results, RunRecord};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The merged file's default name inside the results directory.
pub const MERGED: &str = "merged.jsonl";

/// A unit whose results are not all there.
#[derive(Clone, Debug)]
pub struct Missing {
    /// The unit.
    pub unit: Unit,
    /// Runs recorded (0 without a file).
    pub recorded: usize,
    /// Its latest array task, `JOB_INDEX`.
    pub task: Option<String>,
}

/// What a merge did.
#[derive(Clone, Debug)]
pub struct Merged {
    /// The file written.
    pub output: PathBuf,
    /// One entry per results file merged.
    pub hosts: Vec<MergedHost>,
    /// Runs in the merged file.
    pub runs: usize,
    /// Runs planned across the units (or the files, without a manifest).
    pub planned: usize,
    /// Units of the manifest with runs missing.
    pub missing: Vec<Missing>,
    /// Run records dropped because their file already held that run (a
    /// file concatenated onto a copy of itself).
    pub duplicates: usize,
}

fn refuse(msg: String) -> FleetError {
    FleetError::usage("RESULTS", msg)
}

use crate::short_hash as short;

/// Merges the results files of `dir` into `output` (default
/// `dir/merged.jsonl`).
pub fn merge(dir: &Path, output: Option<&Path>) -> Result<Merged, FleetError> {
    if !dir.is_dir() {
        return Err(refuse(format!(
            "{} is not a directory; name the --results directory of dmalab fleet submit",
            dir.display()
        )));
    }
    let manifest = Manifest::read(dir)?;
    let output = Output::check(dir, output, manifest.as_ref())?;
    let units: Vec<Unit> = manifest
        .as_ref()
        .map(|m| m.units.clone())
        .unwrap_or_default();
    let order = read_order(dir, &units)?;
    let Gathered {
        first,
        hosts,
        mut runs,
        duplicates,
    } = gather(dir, &order, manifest.as_ref(), &output)?;
    let Some(first) = first else {
        let nodes: Vec<&str> = units.iter().map(|u| u.node.as_str()).collect();
        let missing = if nodes.is_empty() {
            String::new()
        } else {
            format!(" (missing: {})", nodes.join(", "))
        };
        return Err(refuse(format!(
            "{} holds no results files yet{missing}; `dmalab fleet status {}` shows how the tasks are doing",
            dir.display(),
            dir.display()
        )));
    };
    let host_pos = |h: &Option<String>| {
        hosts
            .iter()
            .position(|m| Some(&m.name) == h.as_ref())
            .unwrap_or(usize::MAX)
    };
    runs.sort_by_key(|r| (host_pos(&r.host), r.index));
    let missing = manifest
        .as_ref()
        .map(|m| missing_units(dir, m))
        .unwrap_or_default();
    // Counts from files a user may have edited: summed without overflow.
    let planned = match &manifest {
        Some(m) => m
            .units
            .iter()
            .fold(0usize, |a, u| a.saturating_add(u.planned_runs)),
        None => hosts
            .iter()
            .fold(0usize, |a, h| a.saturating_add(h.planned_runs)),
    };
    let mut header = first.header.clone();
    header.planned_runs = planned;
    header.hosts = hosts.clone();
    if let Some(m) = &manifest {
        header.experiment_path = m.experiment_source.clone();
    }
    let mut text = serde_json::to_string(&header).map_err(FleetError::Serialize)?;
    text.push('\n');
    for r in &runs {
        text.push_str(&serde_json::to_string(r).map_err(FleetError::Serialize)?);
        text.push('\n');
    }
    dmalab_core::output::write_atomic(&output.path, text.as_bytes())
        .map_err(|e| FleetError::io(&output.path, e))?;
    Ok(Merged {
        output: output.path,
        hosts,
        runs: runs.len(),
        planned,
        missing,
        duplicates,
    })
}

/// Where the merge goes, checked against the results directory.
struct Output {
    /// The file to write.
    path: PathBuf,
    /// No `-o` was given: `path` is `dir/merged.jsonl`.
    default: bool,
    /// The file `path` names now, links followed: writing it must not
    /// replace one of the inputs, whatever name reaches it.
    id: Option<(u64, u64)>,
}

impl Output {
    /// The output for `dir` and `-o` (`output`), refused where a later
    /// merge would read it as a node's results.
    fn check(
        dir: &Path,
        output: Option<&Path>,
        manifest: Option<&Manifest>,
    ) -> Result<Output, FleetError> {
        let default = output.is_none();
        let path = output.map_or_else(|| dir.join(MERGED), Path::to_path_buf);
        let out_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string);
        let out_in_dir = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .and_then(|p| p.canonicalize().ok())
            == dir.canonicalize().ok();
        let id = std::fs::metadata(&path).ok().map(|m| file_id(&m));
        let unit_files: Vec<String> = manifest
            .map(|m| m.units.iter().map(Unit::results_file).collect())
            .unwrap_or_default();
        // A new file there would be read as a node's results by the next
        // merge (an existing one is checked against the inputs as they are
        // read).
        if !default && out_in_dir && id.is_none() {
            if let Some(n) = out_name.as_deref().filter(|n| n.ends_with(".jsonl")) {
                if n != MERGED || unit_files.iter().any(|f| f == n) {
                    return Err(FleetError::usage(
                        "-o",
                        format!(
                            "{} lies in {} and is named like a node's results file (*.jsonl), which merge reads: write the merge outside the results directory or as {}",
                            path.display(),
                            dir.display(),
                            dir.join(MERGED).display()
                        ),
                    ));
                }
            }
        }
        Ok(Output { path, default, id })
    }

    /// Refuses `path` (the input `file`) where it is this output.
    fn refuse_if_input(&self, path: &Path, file: &str) -> Result<(), FleetError> {
        let is_output =
            self.id.is_some() && std::fs::metadata(path).ok().map(|m| file_id(&m)) == self.id;
        if !is_output {
            return Ok(());
        }
        let option = if self.default { "RESULTS" } else { "-o" };
        Err(FleetError::usage(
            option,
            format!(
                "{} is {file}, one of the results files merged: writing the merge there would destroy that node's results; {}",
                self.path.display(),
                if self.default {
                    "give -o FILE outside the results directory"
                } else {
                    "write the merge outside the results directory"
                }
            ),
        ))
    }
}

/// The results files of `dir` as (file, host): the manifest's units
/// first, in order, then any other `.jsonl` named after its stem.
fn read_order(dir: &Path, units: &[Unit]) -> Result<Vec<(String, String)>, FleetError> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| FleetError::io(dir, e))?
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    names.sort();
    let mut order: Vec<(String, String)> = Vec::new();
    for u in units {
        if names.contains(&u.results_file()) {
            order.push((u.results_file(), u.host.clone()));
        }
    }
    for n in &names {
        if !order.iter().any(|(f, _)| f == n) {
            let stem = n.strip_suffix(".jsonl").unwrap_or(n).to_string();
            order.push((n.clone(), stem));
        }
    }
    Ok(order)
}

/// The node files read and checked, their runs labelled with their host.
struct Gathered {
    /// The first node file, whose header the merge starts from.
    first: Option<Results>,
    hosts: Vec<MergedHost>,
    runs: Vec<RunRecord>,
    /// Runs dropped as repeated within their own file.
    duplicates: usize,
}

/// Reads the files of `order` from `dir`, refusing one of another
/// experiment or schema, a run found twice, or the output itself.
fn gather(
    dir: &Path,
    order: &[(String, String)],
    manifest: Option<&Manifest>,
    output: &Output,
) -> Result<Gathered, FleetError> {
    let mut expected = manifest.map(|m| m.experiment_hash.clone());
    let mut first: Option<Results> = None;
    let mut hosts = Vec::new();
    let mut runs: Vec<RunRecord> = Vec::new();
    let mut seen: BTreeMap<(String, usize), String> = BTreeMap::new();
    let mut duplicates = 0usize;
    for (file, host) in order {
        let path = dir.join(file);
        let mut res = record::read(&path).map_err(|e| match e {
            // A file that is not results is bad input, like any other.
            e if e.is_not_results() => refuse(e.to_string()),
            e => e.into(),
        })?;
        if !res.header.hosts.is_empty() {
            // An earlier merge's output: not a node's results.
            continue;
        }
        output.refuse_if_input(&path, file)?;
        if res.header.schema_version != SCHEMA_VERSION {
            return Err(refuse(format!(
                "{file} has results schema version {} (this dmalab reads version {SCHEMA_VERSION}); merge it with the dmalab that wrote it, or move it out of {}",
                res.header.schema_version,
                dir.display()
            )));
        }
        duplicates += res.drop_duplicate_runs();
        let hash = expected
            .get_or_insert_with(|| res.header.experiment_hash.clone())
            .clone();
        let whose = match manifest {
            Some(m) => format!("this directory's experiment '{}'", m.experiment),
            None => "the first file's".to_string(),
        };
        if res.header.experiment_hash != hash {
            return Err(refuse(format!(
                "{file} holds results of another experiment '{}' (sha256 {}…, {whose} is {}…); move it out of {} and merge again",
                res.header.experiment,
                short(&res.header.experiment_hash),
                short(&hash),
                dir.display()
            )));
        }
        for r in &res.runs {
            if r.experiment_hash != hash {
                return Err(refuse(format!(
                    "{file}: run {} carries another experiment's hash ({}…, {whose} is {}…); the file was edited or pieced together: move it out of {} and merge again",
                    r.index,
                    short(&r.experiment_hash),
                    short(&hash),
                    dir.display()
                )));
            }
            if let Some(other) = seen.insert((host.clone(), r.index), file.clone()) {
                return Err(refuse(format!(
                    "run {} ({} rep {} {} {}) of host {host} is in both {other} and {file}; keep one of the two (move the other out of {}) and merge again",
                    r.index,
                    r.configuration,
                    r.repetition,
                    r.victim,
                    r.load,
                    dir.display()
                )));
            }
            let mut r = r.clone();
            r.host = Some(host.clone());
            runs.push(r);
        }
        hosts.push(MergedHost {
            name: host.clone(),
            results_file: file.clone(),
            host: res.header.host.clone(),
            tool: res.header.tool.clone(),
            started_at: res.header.started_at.clone(),
            planned_runs: res.header.planned_runs,
            recorded_runs: res.runs.len(),
        });
        if first.is_none() {
            first = Some(res);
        }
    }
    Ok(Gathered {
        first,
        hosts,
        runs,
        duplicates,
    })
}

/// The manifest's units with runs missing from their files.
fn missing_units(dir: &Path, m: &Manifest) -> Vec<Missing> {
    let mut missing = Vec::new();
    for u in &m.units {
        let f = file_state(dir, &m.experiment_hash, u);
        if !f.complete(u.planned_runs) {
            missing.push(Missing {
                unit: u.clone(),
                recorded: match f {
                    FileState::Runs { recorded, .. } => recorded,
                    _ => 0,
                },
                task: m
                    .last_task(&u.key)
                    .map(|(s, i)| format!("{}_{i}", s.job_id)),
            });
        }
    }
    missing
}

/// A file's identity: its device and inode.
fn file_id(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}
