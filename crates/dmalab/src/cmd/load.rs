//! `dmalab load`.

use std::process::ExitCode;

/// Not built yet.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab load`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dmalab load is not built yet")
}
