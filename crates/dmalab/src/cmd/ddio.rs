//! `dmalab ddio`: Intel DDIO per PCIe root port and the IIO LLC ways, set
//! for the length of a command (or until Ctrl-C) and always restored. The
//! logic, the refusals and the journal live in `dmalab_host::ddio`.

use super::common::OutputArgs;
use anyhow::Context;
use dmalab_core::host::HostInfo;
use dmalab_core::schema::ResultDoc;
use dmalab_host::ddio::{self, regs::Registers, Session, Setting};
use dmalab_host::HostRoot;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

/// Intel DDIO (Skylake-SP and later Xeons): show it, or turn it on or off
/// per PCIe root port, or set how many LLC ways it may fill, for the length
/// of a command, then restore. Every original value is journaled under
/// /run/dmalab before the write; `dmalab ddio restore` undoes a killed run.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// Directory standing for / (tests: a fixture tree of sys/, proc/,
    /// dev/, run/).
    #[arg(long, global = true, hide = true, value_name = "DIR")]
    host_root: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Show DDIO per Intel root port and the IIO LLC ways per package
    /// (reads only; reading config space past byte 64 and MSRs needs root).
    Status(StatusArgs),
    /// Turn DDIO on (allocating writes) for the length of COMMAND, then
    /// restore.
    On(ChangeArgs),
    /// Turn DDIO off (non-allocating writes) for the length of COMMAND, then
    /// restore.
    Off(ChangeArgs),
    /// Let DDIO allocate into N ways of the LLC (MSR 0xC8B, every package)
    /// for the length of COMMAND, then restore.
    Ways(WaysArgs),
    /// Undo what killed dmalab runs left (the journals under /run/dmalab).
    Restore,
}

/// `dmalab ddio status`.
#[derive(clap::Args, Debug)]
struct StatusArgs {
    /// Only the root port above this device: a PCI address (0000:17:00.0),
    /// an NVMe device (/dev/nvme0n1) or a network interface (eth0).
    #[arg(long, value_name = "PCI-BDF|/dev/nvmeX|NETDEV")]
    device: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

/// `dmalab ddio on|off`.
#[derive(clap::Args, Debug)]
struct ChangeArgs {
    /// Only the root port above this device (default: every Intel root port
    /// with devices below it): a PCI address, /dev/nvmeX or a network
    /// interface.
    #[arg(long, value_name = "PCI-BDF|/dev/nvmeX|NETDEV")]
    device: Option<String>,
    /// The command to run with the setting (after `--`); without one, the
    /// setting holds until SIGINT (Ctrl-C) or SIGTERM.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// `dmalab ddio ways N`.
#[derive(clap::Args, Debug)]
struct WaysArgs {
    /// LLC ways DDIO may allocate into, 1 to the LLC's ways.
    #[arg(value_name = "N")]
    n: u32,
    /// The command to run with the setting (after `--`); without one, the
    /// setting holds until SIGINT (Ctrl-C) or SIGTERM.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The resolved configuration of `dmalab ddio status`.
#[derive(Serialize, Debug)]
struct StatusConfig {
    /// The `--device`, if any.
    device: Option<String>,
}

/// Runs `dmalab ddio`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = args.host_root.map_or_else(HostRoot::system, HostRoot::at);
    match args.action {
        Action::Status(a) => status(&root, a),
        Action::On(a) => change(&root, Setting::On, a.device.as_deref(), &a.command),
        Action::Off(a) => change(&root, Setting::Off, a.device.as_deref(), &a.command),
        Action::Ways(a) => change(&root, Setting::Ways(a.n), None, &a.command),
        Action::Restore => restore(&root),
    }
}

fn status(root: &HostRoot, a: StatusArgs) -> anyhow::Result<ExitCode> {
    a.output
        .check(&mut dmalab_core::output::OutputGuard::new())?;
    let started = SystemTime::now();
    let st = ddio::status(root, &Registers::files(root), a.device.as_deref())?;
    let text = st.render_text();
    out!("{text}");
    let doc = ResultDoc::new(
        "ddio status",
        HostInfo::collect(),
        StatusConfig { device: a.device },
        st.clone(),
        started,
    );
    // Saying "not controllable, because ..." is what status is for: exit 0.
    // The changes (on, off, ways) are the ones refused with exit 2.
    a.output.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn change(
    root: &HostRoot,
    setting: Setting,
    device: Option<&str>,
    command: &[String],
) -> anyhow::Result<ExitCode> {
    let plan = ddio::plan(root, &Registers::files(root), setting, device)?;
    let mut session = Session::begin(root, Registers::files(root))?;
    for d in &session.leftovers.done {
        outln!("first undid a killed run's change: {d}");
    }
    let applied = session.apply(&plan);
    let code = match applied {
        Err(e) => {
            let restored = session.restore();
            let e = anyhow::Error::new(e);
            return Err(match restored {
                Ok(_) => e,
                Err(r) => e.context(format!("and then: {r}")),
            });
        }
        Ok(lines) => {
            for l in &lines {
                outln!("{l}");
            }
            outln!("journal: {}", session.journal_path().display());
            if command.is_empty() {
                outln!("holding; SIGINT (Ctrl-C) or SIGTERM restores");
                while !dmalab_core::signal::stop_requested() {
                    std::thread::sleep(Duration::from_millis(50));
                }
                ExitCode::SUCCESS
            } else {
                run_command(command)?
            }
        }
    };
    let done = session.restore()?;
    for d in &done {
        outln!("{d}");
    }
    Ok(code)
}

/// Runs COMMAND, passing SIGTERM on to it; its exit status becomes ours.
fn run_command(command: &[String]) -> anyhow::Result<ExitCode> {
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
        .with_context(|| format!("cannot run {}", command[0]))?;
    let mut forwarded = false;
    loop {
        if let Some(st) = child.try_wait().context("waiting for the command")? {
            use std::os::unix::process::ExitStatusExt;
            let code = st
                .code()
                .or_else(|| st.signal().map(|s| 128 + s))
                .unwrap_or(1);
            return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
        }
        if dmalab_core::signal::stop_requested() && !forwarded {
            forwarded = true;
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: kill only sends a signal to our own child.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn restore(root: &HostRoot) -> anyhow::Result<ExitCode> {
    let r = ddio::restore_leftovers(root, &Registers::files(root));
    Ok(super::cleanup::print_outcome(
        &r.done,
        &r.live,
        &r.errors,
        "nothing to restore",
        |pid| format!("left alone: the DDIO change of pid {pid} is still running"),
    ))
}
