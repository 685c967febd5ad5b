//! `dmalab report`.

use std::process::ExitCode;

/// Not built yet.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab report`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dmalab report is not built yet")
}
