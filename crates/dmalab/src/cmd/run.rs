//! `dmalab run EXPERIMENT.toml`: runs an interference experiment.

use anyhow::Context;
use dmalab_core::output::{Accept, OutputGuard};
use dmalab_run::{experiment, progress::Progress, runner};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run an interference experiment file: every victim without load
/// ("plain"), then beside each aggressor, repeated, with one JSON record
/// per run appended to the results file. Rerunning resumes after the last
/// complete run.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The experiment file (TOML; see docs/run.md and examples/).
    #[arg(value_name = "EXPERIMENT.toml")]
    pub experiment: PathBuf,
    /// Results file (JSON lines) [default: <experiment file stem>.results.jsonl
    /// in the current directory].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub results: Option<PathBuf>,
    /// Start over instead of resuming; needed when the results file holds
    /// results of a different version of the experiment file (the old file
    /// is kept as FILE.<time>.old).
    #[arg(long)]
    pub restart: bool,
    /// Check the experiment (including each aggressor's own --dry-run) and
    /// print the plan; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// No progress output; errors and the final table only.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Run only the runs of this configuration (as one task of `dmalab fleet
    /// submit --split configurations` does); the results file resumes as
    /// usual.
    #[arg(long, value_name = "NAME")]
    pub configuration: Option<String>,
    /// Before each run, wait (up to a minute) until no other task is
    /// runnable on the run's CPUs and steal there is low; a run whose host
    /// stays busy is recorded as failed with the reason. Without it the
    /// check is made and a busy run only flagged.
    #[arg(long)]
    pub require_quiet: bool,
}

/// Runs `dmalab run`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let exp = experiment::load(&args.experiment, &super::children::catalog())
        .map_err(|e| anyhow::Error::new(e.to_usage()))?;
    let results = args.results.clone().unwrap_or_else(|| {
        let stem = args
            .experiment
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "experiment".into());
        PathBuf::from(format!("{stem}.results.jsonl"))
    });
    if !args.dry_run {
        let mut guard = OutputGuard::new();
        guard.protect("the experiment file", &args.experiment);
        guard.check("--results", &results, Accept::RegularFile)?;
    }
    let opts = runner::RunOptions {
        exe: std::env::current_exe().context("cannot find the running dmalab binary")?,
        results: results.clone(),
        restart: args.restart,
        dry_run: args.dry_run,
        configuration: args.configuration.clone(),
        require_quiet: args.require_quiet,
    };
    // The results go to a file: a bar on a terminal unless --quiet.
    dmalab_core::progress::enable(!args.quiet);
    let mut progress = Progress::auto(args.quiet);
    let out = runner::run(&exp, &opts, &mut progress)?;
    if args.dry_run {
        outln!("{} runs planned; nothing was run (--dry-run)", out.planned);
        return Ok(ExitCode::SUCCESS);
    }
    let res = dmalab_run::record::read(&results)?;
    let cells = dmalab_run::analysis::cells(&res, res.header.noisy_cv_pct);
    out!("{}", dmalab_run::analysis::text_table(&cells));
    if let Some(t) = dmalab_run::analysis::attribution_table(&cells) {
        out!("\n{t}");
    }
    if let Some(t) = dmalab_run::groups::text_table(&res) {
        out!("\n{t}");
    }
    let total = res.runs.len();
    outln!(
        "{} of {} runs recorded in {} ({} this session, {} failed); `dmalab report {}` makes the HTML report",
        total,
        out.planned,
        results.display(),
        out.recorded,
        out.failed,
        results.display()
    );
    if out.interrupted {
        eprintln!(
            "dmalab run: stopped by a signal after {} of {} runs; run the same command again to resume",
            total, out.planned
        );
        return Ok(ExitCode::from(
            dmalab_core::signal::exit_code().unwrap_or(130),
        ));
    }
    Ok(ExitCode::SUCCESS)
}
