//! Child processes, one way for every command that starts one (`page`'s
//! worker, `run`'s aggressors and victims, `throttle`'s load and victim,
//! `stat`'s command): a process group of its own, a signal when dmalab
//! dies, pinning, the tail of what it wrote to stderr, and stopping its
//! group. Forwarding dmalab's own SIGINT/SIGTERM to a group is
//! [`crate::signal::GroupForwarder`]; ending a group should dmalab be
//! killed is [`crate::signal::GroupGuard`].

use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How a child is set up between fork and exec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Setup {
    /// A process group of its own (pgid = its pid), so that a signal to
    /// the group reaches everything it starts, and dmalab's terminal
    /// signals do not reach it directly.
    pub own_group: bool,
    /// The signal it gets when dmalab dies (even by `kill -9`); checked
    /// against a dmalab that died before the child could ask for it. The
    /// kernel sends it when the *thread* that spawned the child exits, so
    /// spawn from a thread that lives as long as the child.
    pub parent_death: Option<i32>,
    /// The CPUs it runs on (empty: not pinned).
    pub cpus: Vec<usize>,
}

impl Setup {
    /// Own group and SIGKILL when dmalab dies: a child nobody else may
    /// outlive dmalab with.
    pub fn tied() -> Self {
        Self {
            own_group: true,
            parent_death: Some(libc::SIGKILL),
            cpus: Vec::new(),
        }
    }
}

/// Installs `setup` on `cmd` (run in the child before exec; further
/// `pre_exec` hooks of the caller run after it).
pub fn prepare(cmd: &mut Command, setup: &Setup) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in &setup.cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: c is inside the set (checked above).
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    let pin = !setup.cpus.is_empty();
    let (own_group, death) = (setup.own_group, setup.parent_death);
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls (setpgid, prctl, getppid,
    // sched_setaffinity) on data prepared beforehand.
    unsafe {
        cmd.pre_exec(move || {
            if own_group && libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(sig) = death {
                if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // dmalab died before the prctl: no signal will come.
                if libc::getppid() != parent {
                    return Err(io::Error::other("parent exited"));
                }
            }
            if pin && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sends `sig` to the process group `pgid` (a child started with
/// [`Setup::own_group`]: its pid).
pub fn killpg(pgid: i32, sig: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill with a negative pid signals that group; plain values.
    unsafe { libc::kill(-pgid, sig) };
}

/// Stops a child started in its own group: `sig` to the group, up to
/// `grace` for it to exit, then SIGKILL to the group; its exit status.
pub fn stop_group(child: &mut Child, sig: i32, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(st)) = child.try_wait() {
        return Some(st);
    }
    let pgid = i32::try_from(child.id()).unwrap_or(0);
    killpg(pgid, sig);
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if t0.elapsed() < grace => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                killpg(pgid, libc::SIGKILL);
                return child.wait().ok();
            }
        }
    }
}

/// The last `max` bytes of a file a child wrote (its stderr), lines intact
/// where possible; empty when it cannot be read. Reads no more than `max`
/// bytes, however much the child wrote.
pub fn tail(path: &Path, max: usize) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(max as u64);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut b = Vec::new();
    let _ = f.take(max as u64).read_to_end(&mut b);
    let s = String::from_utf8_lossy(&b);
    match (start > 0, s.find('\n')) {
        (true, Some(i)) => s[i + 1..].to_string(),
        _ => s.into_owned(),
    }
}

/// The last `lines` lines of a child's stderr file on one line, joined
/// with ` | ` (for a one-line error message).
pub fn tail_line(path: &Path, lines: usize) -> String {
    let t = tail(path, 16 << 10);
    let last: Vec<&str> = t.lines().rev().take(lines).collect();
    last.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    #[test]
    fn tail_keeps_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("err");
        std::fs::write(&p, "first line\nsecond line\nthird\n").unwrap();
        assert_eq!(tail(&p, 14), "third\n");
        assert_eq!(tail(&p, 1000), "first line\nsecond line\nthird\n");
        assert_eq!(tail_line(&p, 2), "second line | third");
        assert_eq!(tail(Path::new("/nonexistent/dmalab-tail"), 100), "");
    }

    #[test]
    fn the_stderr_tail_is_bounded_however_much_the_child_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("err");
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 20000 ]; do echo \"line $i of noise\" >&2; i=$((i+1)); done; echo last words >&2",
        ])
        .stderr(std::fs::File::create(&p).unwrap());
        prepare(&mut cmd, &Setup::tied());
        assert!(cmd.status().unwrap().success());
        assert!(std::fs::metadata(&p).unwrap().len() > 300_000);
        let t = tail(&p, 2000);
        assert!(t.len() <= 2000, "{}", t.len());
        assert!(t.ends_with("line 19999 of noise\nlast words\n"), "{t}");
        assert!(t.starts_with("line "), "a whole first line: {t}");
        assert_eq!(tail_line(&p, 2), "line 19999 of noise | last words");
    }

    #[test]
    fn a_child_in_its_own_group_is_stopped_with_its_children() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 100 & wait"]);
        prepare(&mut cmd, &Setup::tied());
        let mut child = cmd.spawn().unwrap();
        let pid = child.id() as i32;
        // SAFETY: getpgid takes a plain value.
        let mut pgid = 0;
        for _ in 0..100 {
            // SAFETY: as above.
            pgid = unsafe { libc::getpgid(pid) };
            if pgid == pid {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pgid, pid, "a group of its own");
        let st = stop_group(&mut child, libc::SIGTERM, Duration::from_secs(10)).unwrap();
        assert_eq!(st.signal(), Some(libc::SIGTERM));
    }

    /// Not a test of its own: the middle process of
    /// `a_child_dies_with_its_parent` (the test binary re-executed; without
    /// the variable it returns at once). Starts `sleep` tied to itself,
    /// prints its pid and waits to be killed.
    #[test]
    fn tied_parent_entry() {
        if std::env::var_os("DMALAB_TIED_PARENT").is_none() {
            return;
        }
        let mut cmd = Command::new("sleep");
        cmd.arg("100");
        prepare(&mut cmd, &Setup::tied());
        let mut child = cmd.spawn().unwrap();
        println!("child-pid {}", child.id());
        std::thread::sleep(Duration::from_secs(100));
        // Only reached if nobody killed this process.
        let _ = child.kill();
        let _ = child.wait();
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .is_some_and(|st| st != "Z" && st != "X")
        })
    }

    #[test]
    fn a_child_dies_with_its_parent() {
        let mut parent = Command::new(std::env::current_exe().unwrap())
            .args([
                "process::tests::tied_parent_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DMALAB_TIED_PARENT", "1")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(parent.stdout.take().unwrap());
        let pid: u32 = out
            .lines()
            .map_while(Result::ok)
            // The harness's "test NAME ... " may share the line.
            .find_map(|l| l.split_once("child-pid ")?.1.trim().parse().ok())
            .expect("the middle process printed its child's pid");
        assert!(alive(pid), "the tied sleep runs");
        parent.kill().unwrap();
        parent.wait().unwrap();
        let mut gone = false;
        for _ in 0..500 {
            if !alive(pid) {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone, "the tied sleep {pid} outlived its parent");
    }
}
