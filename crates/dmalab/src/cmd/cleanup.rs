//! `dmalab cleanup`: undo what killed `dmalab page` runs left behind.

use std::path::PathBuf;
use std::process::ExitCode;

/// Remove leftovers of killed `dmalab page` runs: memory cgroups
/// `dmalab-page-<pid>`, zram devices and swap areas it added, swap files it
/// created, and settings it changed (restored from the ledger in
/// /run/dmalab), and DDIO registers changed by `dmalab ddio` or a `ddio`
/// experiment key (restored from their journals there). Runs that are still
/// alive are left alone.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `dmalab cleanup`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc_geteuid() } != 0 {
        anyhow::bail!(
            "dmalab cleanup removes cgroups and swap areas and restores sysctls: it needs root; run it as root, e.g. with sudo"
        );
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
