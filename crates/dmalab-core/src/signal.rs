//! One process-wide stop flag raised by SIGINT and SIGTERM.
//!
//! Long loops poll [`stop_requested`]; nothing is done inside the signal
//! handler beyond setting the flag, so every command can finish its current
//! step, reap what is in flight, undo its host changes and write its results.
//!
//! The number of the signal that arrived is kept as well: every command
//! exits with [`exit_code`] (128 + the signal number: 130 after SIGINT, 143
//! after SIGTERM) once it has written what it measured, as shells and most
//! command-line tools do.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
static SIGNO: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
/// Signals that arrived, counted (each one, even the same signal twice).
static ARRIVALS: AtomicUsize = AtomicUsize::new(0);

fn signo() -> &'static Arc<AtomicUsize> {
    SIGNO.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs the SIGINT/SIGTERM handlers (idempotent).
pub fn install() -> std::io::Result<()> {
    register(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
}

/// Also catches SIGHUP, like SIGINT and SIGTERM: for a command that runs
/// another in its own process group and must pass a hang-up on to it
/// (`dmalab stat`; [`GroupForwarder`]). Other commands keep SIGHUP's
/// default, which ends them.
pub fn install_hangup() -> std::io::Result<()> {
    register(&[signal_hook::consts::SIGHUP])
}

fn register(signals: &[i32]) -> std::io::Result<()> {
    let f = flag().clone();
    for &sig in signals {
        // The number first, so a reader that sees the flag sees its cause.
        signal_hook::flag::register_usize(sig, signo().clone(), sig as usize)?;
        signal_hook::flag::register(sig, f.clone())?;
        // SAFETY: the action only increments an atomic, which is
        // async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, || {
                ARRIVALS.fetch_add(1, Ordering::SeqCst);
            })
        }?;
    }
    Ok(())
}

/// Passes the signals that raise the stop flag on to a process group: a
/// command that dmalab runs in a group of its own (so that the terminal's
/// signals reach only dmalab) gets each SIGINT, SIGTERM and SIGHUP dmalab
/// gets, and so do its children.
#[derive(Debug)]
pub struct GroupForwarder {
    pgid: i32,
    seen: usize,
    forwarded: Option<i32>,
}

impl GroupForwarder {
    /// Forwards to process group `pgid` (> 1) the signals dmalab got: one
    /// that arrived before the group existed is sent at the first
    /// [`GroupForwarder::forward`], so no stop request is lost in between.
    pub fn new(pgid: i32) -> Self {
        GroupForwarder {
            pgid,
            seen: 0,
            forwarded: None,
        }
    }

    /// Sends the group the signal that arrived since the last call, once
    /// per arrival (a second Ctrl-C is a second SIGINT); returns it.
    /// Call it from the loop that waits for the command.
    pub fn forward(&mut self) -> Option<i32> {
        let now = ARRIVALS.load(Ordering::SeqCst);
        if now == self.seen || self.pgid <= 1 {
            return None;
        }
        self.seen = now;
        let sig = received()?;
        // SAFETY: kill(2) with a negative pid signals that process group;
        // pgid > 1, so never "every process" (-1) nor our own group (0).
        unsafe { libc::kill(-self.pgid, sig) };
        self.forwarded = Some(sig);
        Some(sig)
    }

    /// The last signal forwarded, if any.
    pub fn forwarded(&self) -> Option<i32> {
        self.forwarded
    }
}

/// The signal that raised the flag (SIGINT or SIGTERM; the later one if
/// both arrived), or None when no signal arrived.
pub fn received() -> Option<i32> {
    match signo().load(Ordering::Relaxed) {
        0 => None,
        n => i32::try_from(n).ok(),
    }
}

/// The exit status of a command that a signal stopped: 128 + the signal
/// number (130 after SIGINT, 143 after SIGTERM); None when no signal arrived.
pub fn exit_code() -> Option<u8> {
    received().and_then(|n| u8::try_from(128 + n).ok())
}

/// True once SIGINT or SIGTERM arrived (or [`request_stop`] was called).
pub fn stop_requested() -> bool {
    flag().load(Ordering::Relaxed)
}

/// Raises the stop flag from code (a test, or a fatal worker error).
pub fn request_stop() {
    flag().store(true, Ordering::Relaxed);
}

/// The shared flag itself, for threads that want to poll it cheaply.
pub fn stop_flag() -> Arc<AtomicBool> {
    flag().clone()
}

/// Ends a process group if this process dies first (SIGKILL, a crash):
/// a helper process joins the group and, once its parent is gone, sends
/// the group SIGKILL. A command that dmalab put in a group of its own is
/// out of reach of a `kill -9 -DMALAB_PGID` (`dmalab run` ending a victim
/// that overstayed); this takes it, and its children, along. Dropping the
/// guard (dmalab is done with the group) ends the helper, and nothing more.
#[derive(Debug)]
pub struct GroupGuard {
    helper: i32,
}

impl GroupGuard {
    /// Starts the helper for group `pgid` (> 1, alive, of this session);
    /// it ignores SIGINT, SIGTERM and SIGHUP, which are for the command.
    pub fn new(pgid: i32) -> std::io::Result<GroupGuard> {
        if pgid <= 1 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the child runs only async-signal-safe calls (setpgid,
        // close_range/close, getppid, nanosleep, kill, _exit), as a fork of
        // a multithreaded process must, and never returns into Rust code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: see above; all arguments are plain values.
            unsafe {
                if libc::setpgid(0, pgid) != 0 {
                    libc::_exit(1);
                }
                // What dmalab forwards to the group is for the command.
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_IGN);
                }
                // Holds no pipe of the parent's open (its readers wait for EOF).
                if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
                    for fd in 0..1024 {
                        libc::close(fd);
                    }
                }
                let nap = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                while libc::getppid() == parent {
                    libc::nanosleep(&nap, std::ptr::null_mut());
                }
                // Our own group: the command's, with this helper in it.
                libc::kill(0, libc::SIGKILL);
                libc::_exit(0);
            }
        }
        Ok(GroupGuard { helper: pid })
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own child, reaped once here.
        unsafe {
            libc::kill(self.helper, libc::SIGKILL);
            libc::waitpid(self.helper, std::ptr::null_mut(), 0);
        }
    }
}

/// The terminal's foreground, lent to a command's process group: a
/// command in a group of its own is a background job of the terminal, and
/// one that reads it would be stopped (SIGTTIN) forever. When stdin is a
/// terminal whose foreground is this process's group, [`Foreground::lend`]
/// hands it to the command's group (Ctrl-C then reaches the command
/// directly) and dropping the value takes it back.
#[derive(Debug)]
pub struct Foreground {
    ours: libc::pid_t,
}

impl Foreground {
    /// Lends the terminal on stdin to group `pgid`; None when stdin is no
    /// terminal or this process is not in its foreground.
    pub fn lend(pgid: i32) -> Option<Foreground> {
        // SAFETY: isatty, getpgrp, tcgetpgrp and tcsetpgrp take plain
        // values and touch no memory of ours.
        unsafe {
            if pgid <= 1 || libc::isatty(0) != 1 {
                return None;
            }
            let ours = libc::getpgrp();
            if libc::tcgetpgrp(0) != ours || libc::tcsetpgrp(0, pgid) != 0 {
                return None;
            }
            Some(Foreground { ours })
        }
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        // A background group that sets the foreground gets SIGTTOU unless
        // it blocks it: blocked on this thread for the call.
        // SAFETY: sigset_t is plain data, initialised by sigemptyset; the
        // mask is restored as it was.
        unsafe {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, libc::SIGTTOU);
            libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
            libc::tcsetpgrp(0, self.ours);
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_the_flag_and_the_exit_code() {
        install().unwrap();
        assert_eq!(exit_code(), None);
        // SAFETY: raise sends a signal to this process; the handler installed
        // above only stores into atomics.
        unsafe { libc::raise(libc::SIGTERM) };
        assert!(stop_requested());
        assert_eq!(received(), Some(libc::SIGTERM));
        assert_eq!(exit_code(), Some(143));
        // One test, not two: the flag and the arrivals are process-wide,
        // and a second test raising a signal would race the first's
        // "nothing arrived yet".
        a_forwarder_passes_the_signal_to_the_whole_group();
    }

    fn a_forwarder_passes_the_signal_to_the_whole_group() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        // The shell and its sleep share the group; SIGTERM ends both (a
        // background job of a non-interactive shell ignores SIGINT).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 100 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let mut f = GroupForwarder::new(pgid);
        // The SIGTERM that arrived before the group existed is passed on.
        assert_eq!(f.forward(), Some(libc::SIGTERM));
        assert_eq!(f.forward(), None, "once per arrival");
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        // The group is empty (or holds zombies): its sleep got the signal too.
        let mut gone = false;
        for _ in 0..500 {
            if live_in_group(pgid) == 0 {
                gone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(gone, "the sleep of group {pgid} outlived the forward");
    }

    /// Processes of group `pgid` that are not zombies (from /proc/PID/stat).
    fn live_in_group(pgid: i32) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return 0;
        };
        dir.filter_map(Result::ok)
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|st| {
                let after = st.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
                let f: Vec<&str> = after.split_whitespace().collect();
                f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
            })
            .count()
    }
}
