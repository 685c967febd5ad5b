//! `dmalab info`.

use std::process::ExitCode;

/// Not built yet.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab info`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dmalab info is not built yet")
}
