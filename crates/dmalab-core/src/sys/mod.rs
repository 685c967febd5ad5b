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
pub mod sched;
pub mod swaps;
pub mod tsc;

/// True when the effective user is root (uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
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
}
