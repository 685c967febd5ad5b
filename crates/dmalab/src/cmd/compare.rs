//! `dmalab compare A B`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Print the differences between two result files: two `dmalab run`
/// results files (per cell: means, change, Mann-Whitney U test), or two
/// result documents of one dmalab command (the figures that matter, each
/// with its change; every differing number and setting with --all).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The reference file.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The file compared against A.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Two result documents: every number and setting that differs, as
    /// JSON pointers, instead of the figures that matter.
    #[arg(long)]
    pub all: bool,
}

/// Runs `dmalab compare`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = dmalab_run::compare::compare(&args.a, &args.b, args.all)?;
    out!("{text}");
    Ok(ExitCode::SUCCESS)
}
