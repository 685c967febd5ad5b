//! The `dmalab` binary: a thin command line over the library crates.
//!
//! Each subcommand lives in `cmd/<name>.rs`: clap flags, validation into a
//! resolved plan (errors are `UsageError`s: exit 2), then a call into its
//! library crate.

mod cmd;

use clap::{Parser, Subcommand};
use dmalab_core::UsageError;
use std::process::ExitCode;

/// dmalab: DMA load, memory probes, interference experiments and a cache
/// simulator, to measure how device I/O hurts everything else's memory access.
#[derive(Parser, Debug)]
#[command(
    name = "dmalab",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate precisely shaped DMA load into a host buffer.
    Load(cmd::load::Args),
    /// Describe the host for DMA experiments, or a device (`info nvme DEV`).
    Info(cmd::info::Args),
    /// Measure what the CPU sees: memory latency histograms and bandwidth.
    Probe(cmd::probe::Args),
    /// Profile paging latency by fault class (pmbench, done right).
    Page(cmd::page::Args),
    /// Run an interference experiment file.
    Run(cmd::run::Args),
    /// Turn experiment results into a self-contained HTML report or CSV.
    Report(cmd::report::Args),
    /// Print the differences between two result files.
    Compare(cmd::compare::Args),
    /// Trace-driven simulator of CPU and DMA traffic.
    Sim(cmd::sim::Args),
    /// Hold a victim's SLO by throttling DMA load in a closed loop.
    Throttle(Box<cmd::throttle::Args>),
    /// Remove leftovers (cgroups, swap devices, settings) of a killed run.
    Cleanup(cmd::cleanup::Args),
    /// Run an experiment across a cluster through Slurm, and merge the results.
    Fleet(cmd::fleet::Args),
    /// Intel DDIO per PCIe root port and its LLC ways: show, set, restore.
    Ddio(cmd::ddio::Args),
    /// Run a command and count hardware/software events over it (perf stat
    /// with dmalab's recipes).
    Stat(cmd::stat::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = dmalab_core::signal::install() {
        eprintln!("dmalab: warning: could not install signal handlers: {e}");
    }
    let result = match cli.command {
        Command::Load(a) => cmd::load::run(a),
        Command::Info(a) => cmd::info::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Page(a) => cmd::page::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Throttle(a) => cmd::throttle::run(*a),
        Command::Cleanup(a) => cmd::cleanup::run(a),
        Command::Fleet(a) => cmd::fleet::run(a),
        Command::Ddio(a) => cmd::ddio::run(a),
        Command::Stat(a) => cmd::stat::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => report_error(&e),
    }
}

/// Prints an error as one line; bad input (a `UsageError` anywhere in the
/// chain) exits 2, everything else 1.
fn report_error(e: &anyhow::Error) -> ExitCode {
    if let Some(u) = e.chain().find_map(|c| c.downcast_ref::<UsageError>()) {
        eprintln!("dmalab: error: {u}");
        return ExitCode::from(2);
    }
    eprintln!("dmalab: error: {}", one_line(e));
    ExitCode::from(1)
}

/// The error chain on one line, `outer: cause: cause`, leaving out a cause
/// whose text the message already carries (library errors often print their
/// source in their own message too).
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading x: {}", self.0)
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(Wrapped(io)).context("loading");
        assert_eq!(one_line(&e), "loading: reading x: gone");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&e), "outer: inner");
    }
}
