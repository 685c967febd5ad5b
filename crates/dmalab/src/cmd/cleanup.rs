//! `dmalab cleanup`: undo what killed dmalab runs left behind.

use std::path::PathBuf;
use std::process::ExitCode;

/// Remove leftovers of killed runs: memory cgroups `dmalab-page-<pid>`,
/// zram devices and swap areas `page` added, swap files it created and
/// settings it changed, huge pages `load` and `probe` added to hugetlb
/// pools, the scratch and temporary output files of killed runs, resctrl
/// monitoring groups of `--counters`, and DDIO registers changed by
/// `dmalab ddio` or a `ddio` experiment key (all from the ledgers and
/// journals in /run/dmalab). Runs that are still alive are left alone.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab cleanup`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    if !dmalab_core::sys::is_root() {
        // A user's own killed load/probe/run left files in the user's
        // ledger; page's changes need root to undo.
        let Some(dir) = dmalab_core::ledger::ledger_dir() else {
            anyhow::bail!(
                "dmalab cleanup removes cgroups and swap areas and restores sysctls: it needs root; run it as root, e.g. with sudo"
            );
        };
        let r = dmalab_core::ledger::cleanup_dead(&dir);
        let nothing = format!(
            "nothing to clean up in {} (leftovers of dmalab page need root: run it with sudo)",
            dir.display()
        );
        return Ok(print_outcome(
            &r.done,
            &r.live,
            &r.errors,
            &nothing,
            |pid| format!("left alone: run of pid {pid} is still alive"),
        ));
    }
    let mut r =
        dmalab_page::state::cleanup_leftovers(&PathBuf::from(dmalab_page::state::STATE_DIR));
    let root = dmalab_host::HostRoot::system();
    let d = dmalab_host::ddio::restore_leftovers(
        &root,
        &dmalab_host::ddio::regs::Registers::files(&root),
    );
    r.done.extend(d.done);
    r.errors.extend(d.errors);
    r.live.extend(d.live);
    // resctrl monitoring groups of killed `--counters mbm` runs.
    let c =
        dmalab_counters::resctrl::cleanup_leftovers(&PathBuf::from(dmalab_page::state::STATE_DIR));
    r.done.extend(c.done);
    r.errors.extend(c.errors);
    r.live.extend(c.live);
    Ok(print_outcome(
        &r.done,
        &r.live,
        &r.errors,
        "nothing to clean up",
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
