//! `dmalab fleet submit|status|merge`: one experiment across a cluster
//! through Slurm job arrays (see docs/fleet.md). The work is in the
//! dmalab-fleet crate; this file maps flags and prints.

use dmalab_fleet::plan::{NodeSource, Split, SubmitRequest};
use dmalab_fleet::{merge, slurm, status, submit};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run one experiment file on many nodes through Slurm job arrays, and
/// merge the per-node results into one file with the host as a dimension.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// The fleet subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Write the sbatch script beside the results and submit it as a job
    /// array, one task per node (or per node and configuration); prints
    /// the job ID. Submitting again skips complete results and resumes
    /// partial ones.
    Submit(SubmitArgs),
    /// Each task's state (sacct, or squeue and scontrol without
    /// accounting) and each results file's progress.
    Status(DirArgs),
    /// Merge the per-node results files into one results file for
    /// `dmalab report`, which then compares the hosts side by side.
    Merge(MergeArgs),
}

/// `dmalab fleet submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// The experiment file (TOML; see docs/run.md).
    #[arg(value_name = "EXPERIMENT.toml")]
    pub experiment: PathBuf,
    /// Nodes, as a Slurm host list (`node[01-04],gpu7`); each gets its own
    /// task and results file.
    #[arg(long, value_name = "LIST")]
    pub nodes: Option<String>,
    /// Slurm partition to submit to; without --nodes, every node of it
    /// gets a task.
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,
    /// Tasks per node, each with its own results file (`NODE.rK`), for
    /// repeat measurements of one node in separate allocations.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub per_node: u32,
    /// One task per node, or per node and configuration.
    #[arg(long, value_enum, default_value = "nodes")]
    pub split: Split,
    /// Results directory, on a file system every node mounts at the same
    /// path [default: <experiment file stem>.fleet].
    #[arg(long, value_name = "DIR")]
    pub results: Option<PathBuf>,
    /// One more sbatch option for the script (repeatable), e.g.
    /// --sbatch-arg=--time=30:00.
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// Array tasks that may run at once (the array's %K).
    #[arg(long, value_name = "K")]
    pub max_running: Option<u32>,
    /// Let tasks share their node with other jobs (default: whole nodes,
    /// since interference runs must not share one).
    #[arg(long)]
    pub no_exclusive: bool,
    /// The dmalab binary the tasks run; the same path on every node
    /// [default: this binary].
    #[arg(long, value_name = "PATH")]
    pub dmalab: Option<PathBuf>,
    /// Write the script and print the per-node command lines; submit
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A results directory.
#[derive(clap::Args, Debug)]
pub struct DirArgs {
    /// The results directory of `dmalab fleet submit`.
    #[arg(value_name = "RESULTS")]
    pub results: PathBuf,
}

/// `dmalab fleet merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// The results directory of `dmalab fleet submit`.
    #[arg(value_name = "RESULTS")]
    pub results: PathBuf,
    /// The merged results file [default: RESULTS/merged.jsonl].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Runs `dmalab fleet`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Submit(a) => run_submit(a),
        Command::Status(a) => {
            let s = status::status(&a.results)?;
            out!("{}", status::render(&s));
            Ok(ExitCode::SUCCESS)
        }
        Command::Merge(a) => run_merge(a),
    }
}

fn run_submit(a: SubmitArgs) -> anyhow::Result<ExitCode> {
    let results = a.results.clone().unwrap_or_else(|| {
        let stem = a
            .experiment
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "experiment".into());
        PathBuf::from(format!("{stem}.fleet"))
    });
    let dmalab = match a.dmalab.clone() {
        Some(p) => p,
        None => std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the running dmalab binary: {e}"))?,
    };
    let req = SubmitRequest {
        experiment: a.experiment.clone(),
        nodes: a
            .nodes
            .clone()
            .map_or(NodeSource::Partition, NodeSource::List),
        partition: a.partition.clone(),
        per_node: a.per_node,
        split: a.split,
        results,
        sbatch_args: a.sbatch_args.clone(),
        max_running: a.max_running,
        exclusive: !a.no_exclusive,
        dmalab,
        dry_run: a.dry_run,
    };
    let out = submit::submit(&req, &super::children::catalog())?;
    for (u, why) in &out.skipped {
        eprintln!("dmalab fleet: {} skipped: {why}", u.results_file());
    }
    let Some(script) = &out.script else {
        eprintln!(
            "dmalab fleet: nothing to submit; `dmalab fleet merge {}` merges the results",
            out.results.display()
        );
        return Ok(ExitCode::SUCCESS);
    };
    if a.dry_run {
        outln!(
            "{} (not submitted: --dry-run); without Slurm, run on each node:",
            script.display()
        );
        for (node, line) in &out.command_lines {
            outln!("  {node}: {line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let job = out.job_id.clone().unwrap_or_default();
    eprintln!(
        "dmalab fleet: array job {job}: {} task(s) on {}; script {}, task output {}/slurm-{job}_N.out; `dmalab fleet status {}` follows it",
        out.tasks.len(),
        out.tasks
            .iter()
            .map(|u| u.key.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        script.display(),
        out.results.display(),
        out.results.display()
    );
    outln!("{job}");
    Ok(ExitCode::SUCCESS)
}

fn run_merge(a: MergeArgs) -> anyhow::Result<ExitCode> {
    let m = merge::merge(&a.results, a.output.as_deref())?;
    if m.duplicates > 0 {
        eprintln!(
            "dmalab fleet merge: warning: {} run record(s) repeat a run already in their file (same plan position, configuration, repetition, victim, load and start); each run is merged once",
            m.duplicates
        );
    }
    let names: Vec<&str> = m.hosts.iter().map(|h| h.results_file.as_str()).collect();
    outln!(
        "{}: {} of {} planned runs from {} file(s) ({}); `dmalab report {}` compares the hosts side by side",
        m.output.display(),
        m.runs,
        m.planned,
        m.hosts.len(),
        names.join(", "),
        m.output.display()
    );
    if !m.missing.is_empty() {
        // Slurm's word on the tasks, where it can still be had.
        let jobs: Vec<String> = m
            .missing
            .iter()
            .filter_map(|x| x.task.as_ref())
            .filter_map(|t| t.split_once('_').map(|(j, _)| j.to_string()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let states = if jobs.is_empty() {
            Default::default()
        } else {
            slurm::task_states(&jobs)
                .map(|(_, s)| s)
                .unwrap_or_default()
        };
        for x in &m.missing {
            let task = match &x.task {
                Some(t) => match states.get(t) {
                    Some(s) => format!("task {t} {}", s.state),
                    None => format!("task {t}"),
                },
                None => "never submitted".into(),
            };
            eprintln!(
                "dmalab fleet merge: missing: node {} ({}): {} of {} runs, {task}",
                x.unit.node,
                x.unit.results_file(),
                x.recorded,
                x.unit.planned_runs
            );
        }
        eprintln!(
            "dmalab fleet merge: {} results file(s) incomplete; `dmalab fleet submit` with the same experiment and --results runs what is missing",
            m.missing.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
