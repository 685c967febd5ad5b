//! The `dmalab` binary: a thin command line over the library crates.
//!
//! Each subcommand lives in `cmd/<name>.rs`: clap flags, validation into a
//! resolved plan (errors are `UsageError`s: exit 2), then a call into its
//! library crate.

/// `print!` to stdout that never panics: when the reader is gone (`dmalab
/// ddio status | head -4`) the text is dropped and the command goes on to
/// restore what it changed and exit with its own status, where `print!`
/// would panic with exit 101.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!($($t)*))
    };
}

/// `println!` with the same rule as [`out!`].
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

#[cfg(test)]
mod child_args;
mod cmd;

/// Where the text that [`out!`] prints goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextRoute {
    /// stdout, as always.
    Stdout,
    /// stderr: stdout carries the result document (`--output -`,
    /// `--output-format json` without a file).
    Stderr,
    /// Nowhere (`--quiet` beside a result file or document).
    Nowhere,
}

/// The route of [`out!`]'s text; set once, by `OutputArgs::check`.
static TEXT_ROUTE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sends what [`out!`] prints from now on along `r`.
pub(crate) fn route_text(r: TextRoute) {
    TEXT_ROUTE.store(r as u8, std::sync::atomic::Ordering::Relaxed);
}

/// Writes to stdout (or where [`route_text`] sent the text), ignoring a
/// closed pipe (and any other stdout error: there is nobody left to tell).
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let route = TEXT_ROUTE.load(std::sync::atomic::Ordering::Relaxed);
    if route == TextRoute::Stderr as u8 {
        let mut o = std::io::stderr().lock();
        let _ = o.write_fmt(args);
    } else if route == TextRoute::Stdout as u8 {
        let mut o = std::io::stdout().lock();
        let _ = o.write_fmt(args);
        let _ = o.flush();
    }
}

/// Writes the result document to stdout, whatever the text's route, with
/// the same rule for a closed pipe.
pub(crate) fn write_result_stdout(doc: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(doc.as_bytes());
    let _ = o.flush();
}

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
    /// Print a shell completion script (`dmalab completions bash`).
    Completions(cmd::docs::CompletionsArgs),
    /// Print the man page, of dmalab or of one command (`dmalab man load`).
    Man(cmd::docs::ManArgs),
}

fn main() -> ExitCode {
    let cli = parse_cli();
    if let Err(e) = dmalab_core::signal::install() {
        eprintln!("dmalab: warning: could not install signal handlers: {e}");
    }
    // The internal page worker reports to its parent, which expects 0.
    let internal = matches!(&cli.command, Command::Page(a) if a.is_worker());
    cmd::seams::install_verbs_library();
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
        Command::Completions(a) => cmd::docs::completions(a, cli_command()),
        Command::Man(a) => cmd::docs::man(a, cli_command()),
    };
    match result {
        Ok(code) if code == ExitCode::SUCCESS && !internal => interrupted_exit().unwrap_or(code),
        Ok(code) => code,
        // Stopped by a signal while it waited or wrote (a FIFO nobody
        // reads): the error says what it was doing, the code says why.
        Err(e) => {
            let code = report_error(&e);
            interrupted_exit().unwrap_or(code)
        }
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
    use clap::FromArgMatches;
    cli_command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| exit_clap(e))
}

/// The command line as `main` parses it (and as completions and the man
/// page describe it).
fn cli_command() -> clap::Command {
    use clap::CommandFactory;
    size_help(negative_values(Cli::command()))
}

/// Says under every subcommand that takes a size or a rate (an option whose
/// value is a SIZE or BYTES) how those are read and how figures are printed:
/// one text, `units::SIZE_HELP`.
fn size_help(cmd: clap::Command) -> clap::Command {
    let sized = cmd.get_arguments().any(|a| {
        a.get_value_names()
            .unwrap_or_default()
            .iter()
            .any(|n| n.as_str() == "SIZE" || n.as_str().starts_with("BYTES"))
    });
    let cmd = if sized {
        let text = match cmd.get_after_help() {
            Some(h) => format!("{h}\n\n{}", dmalab_core::units::SIZE_HELP),
            None => dmalab_core::units::SIZE_HELP.to_string(),
        };
        cmd.after_help(text)
    } else {
        cmd
    };
    cmd.mut_subcommands(size_help)
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
    if let Some(line) = invalid_value_line(&e) {
        eprintln!("dmalab: error: {}", dmalab_core::text::escaped(&line));
        std::process::exit(2);
    }
    let text = e.render().to_string();
    for line in text.lines() {
        eprintln!("{}", dmalab_core::text::escaped(line));
    }
    std::process::exit(e.exit_code());
}

/// A value an enum option does not know (`--mode fast`), as one line that
/// names the option and lists what it takes, like every other bad input.
fn invalid_value_line(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidValue {
        return None;
    }
    let ContextValue::String(arg) = e.get(ContextKind::InvalidArg)? else {
        return None;
    };
    let ContextValue::String(value) = e.get(ContextKind::InvalidValue)? else {
        return None;
    };
    let valid = match e.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(v)) => match v.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => return None,
        },
        _ => return None,
    };
    // `--mode <MODE>` names the option `--mode`.
    let option = arg.split_whitespace().next().unwrap_or(arg);
    Some(format!(
        "{option}: '{value}' is not a valid value; use {valid}"
    ))
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
    let (line, code) = error_line(e);
    eprintln!("dmalab: error: {}", dmalab_core::text::escaped(&line));
    ExitCode::from(code)
}

/// What to print for an error, and the exit code: a `UsageError` anywhere
/// in the chain is printed alone (it names the option) with 2, anything
/// else as its whole chain with 1.
fn error_line(e: &anyhow::Error) -> (String, u8) {
    match e.chain().find_map(|c| c.downcast_ref::<UsageError>()) {
        Some(u) => (u.to_string(), 2),
        None => (one_line(e), 1),
    }
}

/// The error chain on one line, `outer: cause: cause`: every error prints
/// its own part only, so each cause appears once.
fn one_line(e: &anyhow::Error) -> String {
    dmalab_core::error::chain_line(e.as_ref())
}

#[cfg(test)]
mod tests {
    use super::{negative_values, one_line, Cli};
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed_with_negative_values() {
        negative_values(Cli::command()).debug_assert();
    }

    /// The probe's enum flags take the spellings their hand parsers took:
    /// any case, and the old names of the page kinds.
    #[test]
    fn probe_enum_spellings_stay_accepted() {
        use clap::ValueEnum;
        use dmalab_probe::{bandwidth::Traffic, mem::PageKind};
        for t in ["R", "W2", "W3", "W5", "W6", "copy", "triad"] {
            assert_eq!(Traffic::from_str(t, true).map(Traffic::name), Ok(t));
            let lower = t.to_ascii_lowercase();
            assert_eq!(Traffic::from_str(&lower, true).map(Traffic::name), Ok(t));
        }
        for (text, name) in [
            ("4k", "4k"),
            ("small", "4k"),
            ("THP", "thp"),
            ("huge2m", "2m"),
        ] {
            assert_eq!(PageKind::from_str(text, true).map(PageKind::name), Ok(name));
        }
        assert!(PageKind::from_str("5k", true).is_err());
        for line in [
            "dmalab probe bandwidth --traffic w2 --pages HUGE1G",
            "dmalab probe latency --mode both --pages Small",
            "dmalab probe loaded --traffic TRIAD --pages 2M",
        ] {
            let args = line.split(' ');
            assert!(
                negative_values(Cli::command())
                    .try_get_matches_from(args)
                    .is_ok(),
                "{line}"
            );
        }
    }

    #[test]
    fn an_unknown_enum_value_is_one_line_naming_the_option() {
        let e = negative_values(Cli::command())
            .try_get_matches_from(["dmalab", "probe", "latency", "--mode", "fast"])
            .unwrap_err();
        assert_eq!(
            super::invalid_value_line(&e).as_deref(),
            Some("--mode: 'fast' is not a valid value; use clock, per-access or both")
        );
    }

    /// Returns its cause from `source()` and so does not print it.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("reading x")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// clap's own consistency checks (duplicate flags, bad defaults,
    /// conflicting settings) on the command as `main` builds it.
    #[test]
    fn cli_passes_clap_debug_assert() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        negative_values(Cli::command()).debug_assert();
    }

    #[test]
    fn a_chain_prints_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(Wrapped(io)).context("loading");
        assert_eq!(one_line(&e), "loading: reading x: gone");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&e), "outer: inner");
    }

    /// A library's `Usage(#[from] UsageError)` variant, under context,
    /// prints the usage error alone and exits 2.
    #[test]
    fn a_usage_error_under_library_variants_exits_2() {
        let u = dmalab_core::UsageError::new("--runs", "must be greater than 0");
        let e = anyhow::Error::new(dmalab_run::RunError::from(u)).context("dmalab run");
        assert_eq!(
            super::error_line(&e),
            ("--runs: must be greater than 0".to_string(), 2)
        );
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(dmalab_run::RunError::io("r.jsonl".as_ref(), io));
        assert_eq!(super::error_line(&e), ("r.jsonl: gone".to_string(), 1));
    }
}
