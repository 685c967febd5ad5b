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
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc_geteuid() } != 0 {
        // A user's own killed load/probe/run left files in the user's
        // ledger; page's changes need root to undo.
        let Some(dir) = dmalab_core::ledger::ledger_dir() else {
            anyhow::bail!(
                "dmalab cleanup removes cgroups and swap areas and restores sysctls: it needs root; run it as root, e.g. with sudo"
            );
        };
        let r = dmalab_core::ledger::cleanup_dead(&dir);
        for d in &r.done {
            println!("{d}");
        }
        for pid in &r.live {
            println!("left alone: run of pid {pid} is still alive");
        }
        if r.done.is_empty() && r.errors.is_empty() {
            println!(
                "nothing to clean up in {} (leftovers of dmalab page need root: run it with sudo)",
                dir.display()
            );
        }
        for e in &r.errors {
            eprintln!("dmalab: error: {e}");
        }
        return Ok(if r.errors.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
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
    for d in &r.done {
        println!("{d}");
    }
    for pid in &r.live {
        println!("left alone: run of pid {pid} is still alive");
    }
    if r.done.is_empty() && r.errors.is_empty() {
        println!("nothing to clean up");
    }
    for e in &r.errors {
        eprintln!("dmalab: error: {e}");
    }
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
