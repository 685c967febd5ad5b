//! `dmalab cleanup`: undo what killed dmalab runs left behind.

use dmalab_core::ledger::LedgerDir;
use std::process::ExitCode;

/// Undo what killed dmalab runs left behind, from this user's ledgers
/// (root: /run/dmalab; other users: their own ledger directory): memory
/// cgroups, zram devices and swap areas `page` added, swap files it
/// created and settings it changed, huge pages `load` and `probe` added to
/// hugetlb pools, scratch and temporary output files, resctrl monitoring
/// groups of `--counters`, `io.max` limits of `throttle`, and DDIO
/// registers changed by `dmalab ddio` or a `ddio` experiment key. Runs
/// still alive are left alone, and so is anything no longer what dmalab
/// made (a file replaced by another or by a symlink).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Read the ledgers of the host under this directory instead of the
    /// running system's (its run/dmalab; a fixture host for tests, as
    /// `dmalab ddio --host-root`).
    #[arg(long, value_name = "DIR", hide = true)]
    host_root: Option<std::path::PathBuf>,
}

/// Runs `dmalab cleanup`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = match &args.host_root {
        Some(root) => LedgerDir::at(root.join("run/dmalab")),
        None => LedgerDir::for_user()?,
    };
    let r = dir.cleanup_dead();
    let lines: Vec<String> = r
        .done
        .into_iter()
        .chain(r.left_alone.iter().map(|a| format!("left alone: {a}")))
        .collect();
    Ok(print_outcome(
        &lines,
        &r.live,
        &r.errors,
        &format!("nothing to clean up in {}", dir.path().display()),
        |pid| format!("left alone: run of pid {pid} is still alive"),
    ))
}

/// Prints what a cleanup did: each step, each owner left alone
/// (`live_line`), `nothing` when it found nothing, each error on stderr.
/// Exit 1 when a step failed.
pub fn print_outcome(
    done: &[String],
    live: &[u32],
    errors: &[String],
    nothing: &str,
    live_line: impl Fn(u32) -> String,
) -> ExitCode {
    for d in done {
        outln!("{d}");
    }
    for pid in live {
        outln!("{}", live_line(*pid));
    }
    if done.is_empty() && errors.is_empty() {
        outln!("{nothing}");
    }
    for e in errors {
        eprintln!("dmalab: error: {e}");
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
