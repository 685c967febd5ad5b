//! `dmalab compare`.

use std::process::ExitCode;

/// Not built yet.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab compare`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("dmalab compare is not built yet")
}
