//! Child processes: spawned in their own process group, pinned, killed
//! with the parent (all three: `dmalab_core::process`); waited for with a
//! timeout; the tail of what they wrote.

use crate::record::Failure;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(super) use dmalab_core::process::{killpg, tail};

/// A spawned child in its own process group.
pub(super) struct Spawned {
    pub(super) child: std::process::Child,
    pub(super) pid: i32,
    pub(super) stdout: PathBuf,
    pub(super) stderr: PathBuf,
}

/// Starts `argv` in `dir` with stdout and stderr in `dir/TAG.stdout` and
/// `dir/TAG.stderr`, pinned to `cpus` (none: not pinned).
pub(super) fn spawn(
    argv: &[String],
    cpus: &[usize],
    dir: &Path,
    tag: &str,
) -> std::io::Result<Spawned> {
    let stdout = dir.join(format!("{tag}.stdout"));
    let stderr = dir.join(format!("{tag}.stderr"));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout)?)
        .stderr(std::fs::File::create(&stderr)?)
        .current_dir(dir);
    dmalab_core::process::prepare(
        &mut cmd,
        &dmalab_core::process::Setup {
            cpus: cpus.to_vec(),
            ..dmalab_core::process::Setup::tied()
        },
    );
    let child = cmd.spawn()?;
    let pid = child.id() as i32;
    Ok(Spawned {
        child,
        pid,
        stdout,
        stderr,
    })
}

/// What the kernel says about a child that has exited, read before it is
/// reaped (its `/proc/PID` still there) and from `wait4`'s resource usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ChildUsage {
    /// Involuntary context switches: preempted (all its threads and the
    /// children it waited for).
    pub(super) nonvoluntary_ctxt_switches: u64,
    /// Voluntary context switches: it blocked or yielded.
    pub(super) voluntary_ctxt_switches: u64,
    /// User plus system time, nanoseconds.
    pub(super) cpu_time_ns: u64,
    /// Its main thread's scheduler statistics (None without schedstats).
    pub(super) sched: Option<dmalab_core::sys::sched::SchedStat>,
    /// Its main thread's CPU migrations (None without SCHED_DEBUG).
    pub(super) migrations: Option<u64>,
}

fn tv_ns(t: libc::timeval) -> u64 {
    (t.tv_sec.max(0) as u64) * 1_000_000_000 + (t.tv_usec.max(0) as u64) * 1_000
}

/// Waits until `pid` (our child) exits; reads its scheduler statistics
/// while it is a zombie, then reaps it with `wait4` for its resource usage.
/// The instant is when the wait returned, before the reads.
fn wait_with_usage(pid: i32) -> (Option<ExitStatus>, Instant, Option<ChildUsage>) {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child without reaping it (WNOWAIT);
        // `info` is a valid siginfo_t the call fills.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    let t = Instant::now();
    let sched = dmalab_core::sys::sched::schedstat(pid);
    let migrations = dmalab_core::sys::sched::migrations(pid);
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: reaps our own child; both pointers are valid for the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break r;
        }
    };
    if r != pid {
        return (None, t, None);
    }
    let usage = ChildUsage {
        nonvoluntary_ctxt_switches: ru.ru_nivcsw.max(0) as u64,
        voluntary_ctxt_switches: ru.ru_nvcsw.max(0) as u64,
        cpu_time_ns: tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime),
        sched,
        migrations,
    };
    (Some(ExitStatus::from_raw(status)), t, Some(usage))
}

/// Waits for a child up to `timeout`; returns (status, end instant), or
/// None after killing it when the time is up.
#[cfg(test)]
pub(super) fn wait_timeout(sp: Spawned, timeout: Duration) -> (Option<ExitStatus>, Instant, bool) {
    let (st, t, timed_out, _) = wait_timeout_usage(sp, timeout);
    (st, t, timed_out)
}

/// [`wait_timeout`], with what the kernel says about the child's use of
/// the CPU ([`ChildUsage`]).
pub(super) fn wait_timeout_usage(
    sp: Spawned,
    timeout: Duration,
) -> (Option<ExitStatus>, Instant, bool, Option<ChildUsage>) {
    let pid = sp.pid;
    // The waiter reaps the child itself (wait4): std's Child is dropped
    // without waiting, which it never does on its own.
    drop(sp.child);
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(wait_with_usage(pid));
    });
    match rx.recv_timeout(timeout) {
        Ok((st, t, u)) => {
            let _ = waiter.join();
            // Whatever the child left in its group goes too.
            killpg(pid, libc::SIGKILL);
            (st, t, false, u)
        }
        Err(_) => {
            killpg(pid, libc::SIGKILL);
            let r = rx.recv().ok();
            let _ = waiter.join();
            let (st, u) = r.map_or((None, None), |x| (x.0, x.2));
            (st, Instant::now(), true, u)
        }
    }
}

/// A failure with the exit status and the tail of `stderr`.
pub(super) fn failure_from(reason: String, st: Option<ExitStatus>, stderr: &Path) -> Failure {
    Failure {
        reason,
        exit_status: st.and_then(|s| s.code()),
        signal: st.and_then(|s| s.signal()),
        stderr_tail: tail(stderr, 2000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_timeout_kills_a_child_that_overstays() {
        let dir = tempfile::tempdir().unwrap();
        let sp = spawn(&["sleep".into(), "30".into()], &[], dir.path(), "s").unwrap();
        let (st, _, timed_out) = wait_timeout(sp, Duration::from_millis(50));
        assert!(timed_out);
        assert_eq!(st.and_then(|s| s.signal()), Some(libc::SIGKILL));
        let sp = spawn(&["true".into()], &[], dir.path(), "t").unwrap();
        let (st, _, timed_out) = wait_timeout(sp, Duration::from_secs(30));
        assert!(!timed_out);
        assert!(st.is_some_and(|s| s.success()));
    }

    #[test]
    fn usage_of_a_child_counts_its_cpu_time_and_switches() {
        let dir = tempfile::tempdir().unwrap();
        // Spins for a while, then sleeps once (at least one voluntary switch).
        let sp = spawn(
            &[
                "sh".into(),
                "-c".into(),
                "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; sleep 0.05".into(),
            ],
            &[],
            dir.path(),
            "u",
        )
        .unwrap();
        let (st, _, timed_out, u) = wait_timeout_usage(sp, Duration::from_secs(60));
        assert!(!timed_out && st.is_some_and(|s| s.success()));
        let u = u.expect("usage of a reaped child");
        assert!(u.cpu_time_ns > 0, "{u:?}");
        assert!(u.voluntary_ctxt_switches >= 1, "{u:?}");
        if std::path::Path::new("/proc/self/schedstat").exists() {
            let s = u.sched.expect("schedstat read before reaping");
            assert!(s.run_ns > 0 && s.timeslices >= 1, "{s:?}");
        }
    }

    #[test]
    fn failure_from_carries_status_and_stderr_tail() {
        let dir = tempfile::tempdir().unwrap();
        let sp = spawn(
            &["sh".into(), "-c".into(), "echo oops >&2; exit 3".into()],
            &[],
            dir.path(),
            "f",
        )
        .unwrap();
        let stderr = sp.stderr.clone();
        let (st, _, _) = wait_timeout(sp, Duration::from_secs(30));
        let f = failure_from("why".into(), st, &stderr);
        assert_eq!((f.exit_status, f.signal), (Some(3), None));
        assert_eq!(f.stderr_tail, "oops\n");
    }
}
