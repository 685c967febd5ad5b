//! `dmalab probe`.

use std::process::ExitCode;

/// Not built yet.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab probe`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dmalab probe is not built yet")
}
