//! Advisory locks that say who holds them.
//!
//! `flock(2)` locks go away with the process that took them, so the lock of
//! a run that was killed (even with `kill -9`) never blocks the next one.
//! When a lock is taken, the holder's pid is looked up in `/proc/locks` by
//! the file's device and inode, so a refusal can name the running process.

use crate::safety::FileId;
use crate::UsageError;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// An exclusive `flock` held until this value is dropped.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Unlocked explicitly: a child being spawned at this moment shares
        // the open file (until its exec closes it) and would otherwise keep
        // the lock a little longer.
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self._file.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl FileLock {
    /// Wraps a file whose lock the caller already holds.
    pub(crate) fn from_locked(file: File) -> Self {
        Self { _file: file }
    }
}

/// Why a lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it (its pid, when `/proc/locks` shows it).
    Held(Option<u32>),
    /// The lock file could not be opened or locked.
    Io(io::Error),
}

/// Takes an exclusive lock on `file` without waiting.
pub fn try_lock(file: File) -> Result<FileLock, LockError> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(FileLock { _file: file });
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        let pid = file.metadata().ok().and_then(|m| {
            holder_pid(
                &fs::read_to_string("/proc/locks").unwrap_or_default(),
                FileId::of(&m),
            )
        });
        return Err(LockError::Held(pid));
    }
    Err(LockError::Io(e))
}

/// The pid of the process holding a `FLOCK` on the file `id`, from the text
/// of `/proc/locks` (`1: FLOCK ADVISORY WRITE 1234 fd:01:5678 0 EOF`, the
/// device in hexadecimal; lines of waiters carry `->` and are skipped).
pub fn holder_pid(proc_locks: &str, id: FileId) -> Option<u32> {
    let (major, minor) = (libc::major(id.dev), libc::minor(id.dev));
    for line in proc_locks.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) == Some(&"->") || f.get(1) != Some(&"FLOCK") {
            continue;
        }
        let (Some(pid), Some(file)) = (f.get(4), f.get(5)) else {
            continue;
        };
        let mut parts = file.split(':');
        let (Some(a), Some(b), Some(i)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let same = u32::from_str_radix(a, 16).ok() == Some(major)
            && u32::from_str_radix(b, 16).ok() == Some(minor)
            && i.parse::<u64>().ok() == Some(id.ino);
        if same {
            return pid.parse().ok();
        }
    }
    None
}

fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(|| "another process".into(), |p| format!("pid {p}"))
}

/// The host lock of commands that change host settings (`dmalab page`'s
/// swap devices, cgroups and sysctls): `DIR/host.lock`, normally
/// `/run/dmalab/host.lock`. A second such run is refused with a
/// [`UsageError`] naming `command` and the running pid. `Ok(None)` when the
/// directory cannot be made (not root: then no host setting can be changed
/// either).
pub fn host_lock(dir: &Path, command: &str) -> Result<Option<FileLock>, UsageError> {
    if fs::create_dir_all(dir).is_err() {
        return Ok(None);
    }
    let path = dir.join("host.lock");
    let file = match fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => {
            return Err(UsageError::new(
                command,
                format!("cannot open the host lock {}: {e}", path.display()),
            ))
        }
    };
    match try_lock(file) {
        Ok(l) => {
            // For people reading the file; the lock itself is the flock.
            let mut f = &l._file;
            let _ = f.set_len(0);
            let _ = writeln!(f, "{}", std::process::id());
            Ok(Some(l))
        }
        Err(LockError::Held(pid)) => Err(UsageError::new(
            command,
            format!(
                "another dmalab run ({}) is changing this host's swap, paging or cgroup settings ({} is locked); wait for it to end, or stop it, and try again",
                holder(pid),
                path.display()
            ),
        )),
        Err(LockError::Io(e)) => Err(UsageError::new(
            command,
            format!("cannot lock {}: {e}", path.display()),
        )),
    }
}

/// Locks a results file that is appended to (`dmalab run --results`),
/// creating it empty when new. A second writer is refused with a
/// [`UsageError`] naming `option` and the pid of the run that holds it.
pub fn lock_results(path: &Path, option: &str) -> Result<FileLock, UsageError> {
    // Not through a symlink another user planted, nor a FIFO that would
    // block: crate::safefile.
    let file = crate::safefile::open_append(path, 0o666)
        .map_err(|e| UsageError::new(option, format!("cannot open {}: {e}", path.display())))?;
    match try_lock(file) {
        Ok(l) => Ok(l),
        Err(LockError::Held(pid)) => Err(UsageError::new(
            option,
            format!(
                "{} is being written by another dmalab run ({}); two runs on one results file would duplicate its records: wait for it, or choose another file",
                path.display(),
                holder(pid)
            ),
        )),
        Err(LockError::Io(e)) => Err(UsageError::new(
            option,
            format!("cannot lock {}: {e}", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_locks() {
        let id = FileId {
            dev: libc::makedev(0xfd, 1),
            ino: 5678,
        };
        let text = "1: POSIX  ADVISORY  WRITE 99 fd:01:5678 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 77 fd:01:5678 0 EOF\n";
        assert_eq!(holder_pid(text, id), Some(1234));
        assert_eq!(
            holder_pid(
                text,
                FileId {
                    dev: id.dev,
                    ino: 1
                }
            ),
            None
        );
    }

    #[test]
    fn a_second_lock_is_refused_with_our_pid() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let held = lock_results(&p, "--results").unwrap();
        let e = lock_results(&p, "--results").unwrap_err();
        assert!(
            e.message.contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(held);
        lock_results(&p, "--results").unwrap();
        let h = host_lock(dir.path(), "page").unwrap().unwrap();
        let e = host_lock(dir.path(), "page").unwrap_err();
        assert_eq!(e.option, "page");
        drop(h);
        assert!(host_lock(dir.path(), "page").unwrap().is_some());
    }
}
