//! Child processes: spawned in their own process group, pinned, killed
//! with the parent; waited for with a timeout; the tail of what they wrote.

use crate::record::Failure;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The last `max` bytes of a file, lines intact where possible.
pub(super) fn tail(path: &Path, max: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let mut b = Vec::new();
        let _ = f.read_to_end(&mut b);
        let start = b.len().saturating_sub(max);
        s = String::from_utf8_lossy(&b[start..]).into_owned();
        if start > 0 {
            if let Some(i) = s.find('\n') {
                s = s[i + 1..].to_string();
            }
        }
    }
    s
}

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
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: c is inside the set (checked above).
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    let pin = !cpus.is_empty();
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls on data prepared beforehand.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if pin && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id() as i32;
    Ok(Spawned {
        child,
        pid,
        stdout,
        stderr,
    })
}

/// Sends `sig` to a spawned child's process group.
pub(super) fn killpg(pid: i32, sig: i32) {
    // SAFETY: signals our own child's process group (pgid = its pid).
    unsafe { libc::kill(-pid, sig) };
}

/// Waits for a child up to `timeout`; returns (status, end instant), or
/// None after killing it when the time is up.
pub(super) fn wait_timeout(sp: Spawned, timeout: Duration) -> (Option<ExitStatus>, Instant, bool) {
    let pid = sp.pid;
    let mut child = sp.child;
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let st = child.wait();
        let t = Instant::now();
        let _ = tx.send((st.ok(), t));
    });
    match rx.recv_timeout(timeout) {
        Ok((st, t)) => {
            let _ = waiter.join();
            // Whatever the child left in its group goes too.
            killpg(pid, libc::SIGKILL);
            (st, t, false)
        }
        Err(_) => {
            killpg(pid, libc::SIGKILL);
            let r = rx.recv().ok();
            let _ = waiter.join();
            (r.and_then(|x| x.0), Instant::now(), true)
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
    fn tail_keeps_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("err");
        std::fs::write(&p, "first line\nsecond line\nthird\n").unwrap();
        assert_eq!(tail(&p, 14), "third\n");
        assert_eq!(tail(&p, 1000), "first line\nsecond line\nthird\n");
    }

    #[test]
    fn tail_of_a_missing_file_is_empty() {
        assert_eq!(tail(Path::new("/nonexistent/dmalab-tail"), 100), "");
    }

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
