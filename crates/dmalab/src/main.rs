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
    /// RDMA peers: `rdma serve` registers a buffer for `load --engine rdma`.
    Rdma(cmd::rdma::Args),
}

fn main() -> ExitCode {
    let cli = parse_cli();
    if let Err(e) = dmalab_core::signal::install() {
        eprintln!("dmalab: warning: could not install signal handlers: {e}");
    }
    // The internal page worker reports to its parent, which expects 0.
    let internal = matches!(&cli.command, Command::Page(a) if a.is_worker());
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
        Command::Rdma(a) => cmd::rdma::run(a),
    };
    match result {
        Ok(code) if code == ExitCode::SUCCESS && !internal => interrupted_exit().unwrap_or(code),
        Ok(code) => code,
        Err(e) => report_error(&e),
    }
}

/// One exit rule for every command a signal stopped: it has written what it
/// measured (marked `interrupted`), and exits 128 + the signal number (130
/// after SIGINT, 143 after SIGTERM), as shells and most tools do.
fn interrupted_exit() -> Option<ExitCode> {
    dmalab_core::signal::exit_code().map(ExitCode::from)
}

/// Parses the command line. A value that starts with a minus sign (`--bs
/// -1`) reaches the option's own parser, which says what is wrong with it,
/// instead of clap's "unexpected argument '-1'".
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    negative_values(Cli::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| exit_clap(e))
}

/// Ends on a clap error (or `--help`/`--version`): clap echoes the value it
/// refused, so its message is printed with control characters escaped, line
/// by line, as every other error is.
fn exit_clap(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    for line in text.lines() {
        eprintln!("{}", dmalab_core::text::escaped(line));
    }
    std::process::exit(e.exit_code());
}

/// Lets every option that takes a value, in every subcommand, take a
/// negative number as that value.
fn negative_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negative_values)
}

/// Prints an error as one line; bad input (a `UsageError` anywhere in the
/// chain) exits 2, everything else 1.
fn report_error(e: &anyhow::Error) -> ExitCode {
    // Messages echo user values (names, paths, file contents): one line,
    // with control characters and escape sequences shown escaped.
    use dmalab_core::text::escaped;
    if let Some(u) = e.chain().find_map(|c| c.downcast_ref::<UsageError>()) {
        eprintln!("dmalab: error: {}", escaped(&u.to_string()));
        return ExitCode::from(2);
    }
    eprintln!("dmalab: error: {}", escaped(&one_line(e)));
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
    use super::{negative_values, one_line, Cli};
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed_with_negative_values() {
        negative_values(Cli::command()).debug_assert();
    }

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
