//! A child command held between fork and exec, so its counters (and its
//! resctrl group) are in place before its first instruction: the child
//! writes its pid to one pipe and waits for a byte on another.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::thread::JoinHandle;

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A forked child waiting for [`Held::release`] before it execs.
pub struct Held {
    /// Its pid (`None` when fork itself failed).
    pub pid: Option<i32>,
    go: OwnedFd,
    spawner: JoinHandle<io::Result<Child>>,
}

/// Forks `cmd` and holds it before exec.
pub fn spawn_held(mut cmd: Command) -> io::Result<Held> {
    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (pw, gr) = (pid_w.as_raw_fd(), go_r.as_raw_fd());
    // SAFETY: the closure runs in the child between fork and exec and makes
    // only async-signal-safe calls (getpid, write, read) on descriptors
    // that stay open until exec (they are close-on-exec).
    unsafe {
        cmd.pre_exec(move || {
            let pid = libc::getpid();
            libc::write(pw, (&pid as *const i32).cast(), 4);
            let mut b = 0u8;
            loop {
                let n = libc::read(gr, (&mut b as *mut u8).cast(), 1);
                if n == 1 {
                    return Ok(());
                }
                if n == 0 {
                    // dmalab went away: do not run uncounted.
                    return Err(io::Error::from_raw_os_error(libc::ECANCELED));
                }
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(e);
                }
            }
        });
    }
    // spawn() returns only after exec, so it runs on its own thread while
    // this one reads the pid and sets up the counters.
    let spawner = std::thread::spawn(move || {
        let r = cmd.spawn();
        drop((pid_w, go_r));
        r
    });
    let mut pid = None;
    loop {
        let mut p = libc::pollfd {
            fd: pid_r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 50) } > 0 {
            let mut v = 0i32;
            // SAFETY: reads 4 bytes into v from our own pipe.
            let n = unsafe { libc::read(pid_r.as_raw_fd(), (&mut v as *mut i32).cast(), 4) };
            if n == 4 {
                pid = Some(v);
            }
            break;
        }
        if spawner.is_finished() {
            break;
        }
    }
    Ok(Held {
        pid,
        go: go_w,
        spawner,
    })
}

impl Held {
    /// Lets the child exec; returns it, or why it could not run.
    pub fn release(self) -> io::Result<Child> {
        // SAFETY: one byte from a live buffer to our own pipe.
        unsafe { libc::write(self.go.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        drop(self.go);
        self.spawner
            .join()
            .map_err(|_| io::Error::other("the spawning thread panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_then_runs() {
        let mut c = Command::new("sh");
        c.args(["-c", "exit 7"]);
        let h = spawn_held(c).unwrap();
        let pid = h.pid.unwrap();
        // Held: alive and not yet sh.
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_ne!(comm.trim(), "sh");
        let mut child = h.release().unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(7));
        let h = spawn_held(Command::new("/nonexistent/dmalab-test")).unwrap();
        assert_eq!(h.release().unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
