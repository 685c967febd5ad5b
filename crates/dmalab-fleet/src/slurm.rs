//! The Slurm commands dmalab fleet calls (sbatch, scontrol, squeue, sacct,
//! sinfo, scancel), found on PATH, and their output parsed. The parsers
//! are plain functions, tested on captured output.

use crate::error::FleetError;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The program on PATH, or an error that says what to install.
pub fn find(tool: &str) -> Result<PathBuf, FleetError> {
    dmalab_core::sys::find_program(tool).ok_or_else(|| FleetError::MissingTool {
        tool: tool.to_string(),
    })
}

/// Runs a Slurm command; stdout, or its stderr as the error.
fn call(tool: &str, args: &[&str]) -> Result<String, FleetError> {
    let exe = find(tool)?;
    let out = Command::new(&exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| FleetError::Slurm(format!("cannot run {}: {e}", exe.display())))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr)
            .trim()
            .replace('\n', "; ");
        let msg = if msg.is_empty() {
            format!("exit status {}", out.status)
        } else {
            msg
        };
        return Err(FleetError::Slurm(msg));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The nodes of a partition, in Slurm's order.
pub fn partition_nodes(partition: &str) -> Result<Vec<String>, FleetError> {
    let out = call("sinfo", &["-h", "-N", "-p", partition, "-o", "%N"]).map_err(|e| match e {
        FleetError::Slurm(m) => FleetError::usage("--partition", format!("sinfo: {m}")),
        e => e,
    })?;
    let mut nodes: Vec<String> = Vec::new();
    for l in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !nodes.iter().any(|n| n == l) {
            nodes.push(l.to_string());
        }
    }
    if nodes.is_empty() {
        return Err(FleetError::usage(
            "--partition",
            format!("Slurm lists no nodes in partition '{partition}' (sinfo -N -p {partition}); name an existing partition or give --nodes"),
        ));
    }
    Ok(nodes)
}

/// Submits a script held (`sbatch --parsable --hold`); the job ID.
pub fn submit_held(script: &std::path::Path) -> Result<String, FleetError> {
    let path = script.display().to_string();
    let out = call("sbatch", &["--parsable", "--hold", &path]).map_err(|e| match e {
        FleetError::Slurm(m) => FleetError::Slurm(format!("sbatch refused {path}: {m}")),
        e => e,
    })?;
    parse_parsable(&out).ok_or_else(|| {
        FleetError::Slurm(format!(
            "sbatch --parsable printed no job ID for {path}: '{}'",
            out.trim()
        ))
    })
}

/// The job ID from `sbatch --parsable` (`123` or `123;cluster`).
pub fn parse_parsable(out: &str) -> Option<String> {
    let id = out.trim().split(';').next()?.trim();
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_string())
}

/// Pins array task `index` of `job` to `node`; Slurm's message on refusal.
pub fn pin(job: &str, index: usize, node: &str) -> Result<(), FleetError> {
    let id = format!("JobId={job}_{index}");
    let nl = format!("ReqNodeList={node}");
    call("scontrol", &["update", &id, &nl]).map(|_| ())
}

/// Releases a held job.
pub fn release(job: &str) -> Result<(), FleetError> {
    call("scontrol", &["release", job]).map(|_| ())
}

/// Cancels a job (all its array tasks).
pub fn cancel(job: &str) -> Result<(), FleetError> {
    call("scancel", &[job]).map(|_| ())
}

/// What Slurm says about one array task.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TaskState {
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`, ...
    pub state: String,
    /// `exit:signal`, when known.
    pub exit_code: Option<String>,
    /// Why it waits, or the node it ran on.
    pub detail: Option<String>,
}

impl TaskState {
    /// Still queued or running: its results file may change.
    pub fn active(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "REQUEUED"
                | "RESIZING"
                | "SUSPENDED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "SIGNALING"
                | "STAGE_OUT"
        )
    }
}

/// Where the states came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `sacct` (accounting is configured).
    Sacct,
    /// `squeue` and `scontrol show job` (no accounting: finished jobs are
    /// known only for Slurm's MinJobAge).
    Queue,
}

/// States of the array tasks of these jobs, keyed `JOB_INDEX`.
pub fn task_states(jobs: &[String]) -> Result<(Source, BTreeMap<String, TaskState>), FleetError> {
    let list = jobs.join(",");
    if find("sacct").is_ok() {
        if let Ok(out) = call(
            "sacct",
            &[
                "-n",
                "-P",
                "-X",
                "-j",
                &list,
                "-o",
                "JobID,State,ExitCode,NodeList",
            ],
        ) {
            return Ok((Source::Sacct, parse_sacct(&out)));
        }
    }
    // Without squeue and scontrol nothing can be said about the tasks.
    find("squeue")?;
    find("scontrol")?;
    let mut states = BTreeMap::new();
    for j in jobs {
        // A job Slurm has forgotten is an error here; it stays unknown.
        if let Ok(out) = call("scontrol", &["-o", "show", "job", j]) {
            states.extend(parse_scontrol(&out));
        }
    }
    if let Ok(out) = call("squeue", &["-h", "-r", "-j", &list, "-o", "%i|%T|%N|%r"]) {
        states.extend(parse_squeue(&out));
    }
    Ok((Source::Queue, states))
}

/// Array task IDs from `5`, `[1-3%1]`, `1-3,7`.
fn task_ids(spec: &str) -> Vec<usize> {
    let s = spec.trim_matches(['[', ']']);
    let s = s.split('%').next().unwrap_or("");
    let mut out = Vec::new();
    for r in s.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let step = b.split_once(':');
        let (b, step) = match step {
            Some((b, st)) => (b, st.parse().unwrap_or(1usize).max(1)),
            None => (b, 1),
        };
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            out.extend((a..=b.min(a + 1_000_000)).step_by(step));
        }
    }
    out
}

/// `sacct -n -P -X -o JobID,State,ExitCode,NodeList` lines.
pub fn parse_sacct(out: &str) -> BTreeMap<String, TaskState> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split('|').collect();
        if f.len() < 4 {
            continue;
        }
        let Some((job, ids)) = f[0].split_once('_') else {
            continue;
        };
        let st = TaskState {
            state: f[1].split_whitespace().next().unwrap_or("").to_string(),
            exit_code: Some(f[2].to_string()).filter(|s| !s.is_empty()),
            detail: Some(f[3].to_string()).filter(|s| !s.is_empty() && s != "None assigned"),
        };
        for i in task_ids(ids) {
            m.insert(format!("{job}_{i}"), st.clone());
        }
    }
    m
}

/// `squeue -h -r -o %i|%T|%N|%r` lines.
pub fn parse_squeue(out: &str) -> BTreeMap<String, TaskState> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split('|').collect();
        if f.len() < 4 {
            continue;
        }
        let Some((job, ids)) = f[0].trim().split_once('_') else {
            continue;
        };
        let detail = if f[2].is_empty() { f[3] } else { f[2] };
        let st = TaskState {
            state: f[1].trim().to_string(),
            exit_code: None,
            detail: Some(detail.trim().to_string()).filter(|s| !s.is_empty() && s != "None"),
        };
        for i in task_ids(ids) {
            m.insert(format!("{job}_{i}"), st.clone());
        }
    }
    m
}

/// `scontrol -o show job J` lines (one per job record; an array's
/// pending tasks may share one record).
pub fn parse_scontrol(out: &str) -> BTreeMap<String, TaskState> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let kv: BTreeMap<&str, &str> = l
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        let (Some(job), Some(ids), Some(state)) = (
            kv.get("ArrayJobId"),
            kv.get("ArrayTaskId"),
            kv.get("JobState"),
        ) else {
            continue;
        };
        let node = kv.get("NodeList").filter(|n| **n != "(null)");
        let reason = kv.get("Reason").filter(|r| **r != "None");
        let st = TaskState {
            state: state.to_string(),
            exit_code: kv.get("ExitCode").map(|s| s.to_string()),
            detail: node.or(reason).map(|s| s.to_string()),
        };
        for i in task_ids(ids) {
            m.insert(format!("{job}_{i}"), st.clone());
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsable_job_ids() {
        assert_eq!(parse_parsable("123\n").as_deref(), Some("123"));
        assert_eq!(parse_parsable("77;cluster\n").as_deref(), Some("77"));
        assert_eq!(parse_parsable("Submitted batch job 5"), None);
    }

    #[test]
    fn sacct_lines_with_pending_ranges_and_cancelled_by() {
        let out = "12_0|COMPLETED|0:0|vm\n12_1|CANCELLED by 0|0:15|vm\n12_[2-4%1]|PENDING|0:0|None assigned\n";
        let m = parse_sacct(out);
        assert_eq!(m["12_0"].state, "COMPLETED");
        assert_eq!(m["12_1"].state, "CANCELLED");
        assert_eq!(m["12_1"].exit_code.as_deref(), Some("0:15"));
        assert_eq!(m["12_4"].state, "PENDING");
        assert_eq!(m["12_4"].detail, None);
        assert_eq!(m.len(), 5);
    }

    #[test]
    fn squeue_and_scontrol_lines() {
        let m = parse_squeue("4_2|PENDING||JobArrayTaskLimit\n4_0|RUNNING|vm|None\n");
        assert_eq!(m["4_2"].detail.as_deref(), Some("JobArrayTaskLimit"));
        assert_eq!(m["4_0"].detail.as_deref(), Some("vm"));
        let out = "JobId=5 ArrayJobId=4 ArrayTaskId=1 JobName=x JobState=COMPLETED Reason=None Dependency=(null) ExitCode=0:0 NodeList=vm\n\
                   JobId=4 ArrayJobId=4 ArrayTaskId=2-3%1 JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0 NodeList=(null)\n";
        let m = parse_scontrol(out);
        assert_eq!(m["4_1"].state, "COMPLETED");
        assert_eq!(m["4_1"].detail.as_deref(), Some("vm"));
        assert_eq!(m["4_3"].state, "PENDING");
        assert_eq!(m["4_3"].detail.as_deref(), Some("JobArrayTaskLimit"));
        assert!(m["4_3"].active() && !m["4_1"].active());
    }
}
