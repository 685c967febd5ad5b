//! Facts of the running system, each read in one place: the monotonic
//! clock, the time-stamp counter and its calibration, CPU flags, the size of
//! a block device, the active swap areas, what the scheduler and the
//! interrupt counters say about a task and a set of CPUs, and whether we run
//! as root.
//!
//! Parsers take text (so tests feed them fixtures); the readers next to them
//! read the live file.

pub mod blockdev;
pub mod clock;
pub mod cpuinfo;
pub mod numa;
pub mod sched;
pub mod swaps;
pub mod tsc;

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// True when the effective user is root (uid 0).
pub fn is_root() -> bool {
    euid() == 0
}

/// Bytes an unprivileged writer may still use on the filesystem holding
/// `path` (statvfs: `f_bavail * f_frsize`; root may find a little more,
/// the reserved blocks, but a preflight must not count on it). None when
/// the filesystem states no size (`f_blocks` 0: ramfs, which grows until
/// memory runs out).
pub fn free_bytes(path: &std::path::Path) -> std::io::Result<Option<u64>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a path"))?;
    // SAFETY: statvfs is plain data; zeroed is a valid value to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs we own.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if st.f_blocks == 0 {
        return Ok(None);
    }
    Ok(Some(st.f_bavail.saturating_mul(st.f_frsize)))
}

/// Where `prog` is on `PATH` (the first directory that holds a file of
/// that name), for a refusal that names a missing tool before any work.
pub fn find_program(prog: &str) -> Option<std::path::PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Refuses a file of `size` bytes that dmalab would create in `dir` when it
/// does not fit in what that filesystem has free, before anything is
/// written: filling a disk for minutes and then failing with ENOSPC helps
/// nobody, and leaves every other writer on that disk without room
/// meanwhile. `option` is the flag to name; `instead` says what to do
/// (`choose a smaller --size or a --target on a filesystem with room`).
/// A filesystem that states no size (ramfs) or cannot be asked passes: the
/// write then reports ENOSPC if it comes to that.
pub fn check_room(
    dir: &std::path::Path,
    size: u64,
    option: &str,
    instead: &str,
) -> Result<(), crate::UsageError> {
    use crate::units::fmt_bytes;
    let Ok(Some(free)) = free_bytes(dir) else {
        return Ok(());
    };
    if size > free {
        return Err(crate::UsageError::new(
            option,
            format!(
                "{size} bytes ({}) do not fit in {}, which has {free} bytes ({}) free; {instead}",
                fmt_bytes(size as f64),
                dir.display(),
                fmt_bytes(free as f64)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_check_agrees_with_proc_self_status() {
        // The effective uid is the second field of the Uid: line.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let euid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert_eq!(is_root(), euid == 0);
    }

    #[test]
    fn free_bytes_of_a_missing_path_is_an_error() {
        assert!(free_bytes(std::path::Path::new("/nonexistent/dir")).is_err());
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).unwrap().unwrap();
        // df reports the same filesystem in 1 KiB blocks (available column).
        let out = std::process::Command::new("df")
            .args(["-k", "--output=avail"])
            .arg(&dir)
            .output()
            .unwrap();
        let kib: u64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Other processes write meanwhile: within 64 MiB.
        assert!(free.abs_diff(kib * 1024) < 64 << 20, "{free} vs {kib} KiB");
    }
}
