//! `perf_event_open(2)`, `read()` with `TOTAL_TIME_ENABLED|RUNNING`, and
//! the enable/disable ioctls.

use std::io;

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5` (112 bytes), the
/// fields counting needs (include/uapi/linux/perf_event.h).
#[repr(C)]
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfEventAttr {
    /// Major type: hardware, software, or a dynamic PMU's `type`.
    pub type_: u32,
    /// Size of this struct.
    pub size: u32,
    /// Event config.
    pub config: u64,
    /// Sample period (unused: counting only).
    pub sample_period: u64,
    /// Sample type (unused).
    pub sample_type: u64,
    /// What `read()` returns.
    pub read_format: u64,
    /// The bit flags (`disabled`, `inherit`, `exclude_kernel`, ...).
    pub flags: u64,
    /// Wakeup events (unused).
    pub wakeup_events: u32,
    /// Breakpoint type (unused).
    pub bp_type: u32,
    /// Extension of config (filters).
    pub config1: u64,
    /// Further extension of config.
    pub config2: u64,
    /// Unused here.
    pub branch_sample_type: u64,
    /// Unused here.
    pub sample_regs_user: u64,
    /// Unused here.
    pub sample_stack_user: u32,
    /// Unused here.
    pub clockid: i32,
    /// Unused here.
    pub sample_regs_intr: u64,
    /// Unused here.
    pub aux_watermark: u32,
    /// Unused here.
    pub sample_max_stack: u16,
    /// Reserved.
    pub reserved2: u16,
}

/// `PERF_ATTR_SIZE_VER5`.
pub const ATTR_SIZE: u32 = 112;
/// `PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING`.
pub const READ_FORMAT: u64 = 1 | 2;
/// attr flag `disabled`.
pub const FLAG_DISABLED: u64 = 1 << 0;
/// attr flag `inherit`: count child tasks created afterwards too.
pub const FLAG_INHERIT: u64 = 1 << 1;
/// attr flag `exclude_kernel`.
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
/// attr flag `exclude_hv`.
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// attr flag `enable_on_exec`.
pub const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;

/// One open counter.
#[derive(Debug)]
pub struct Counter {
    fd: libc::c_int,
}

/// One `read()`: the count and the times it was enabled and running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Raw count.
    pub value: u64,
    /// Time enabled, ns.
    pub enabled_ns: u64,
    /// Time actually counting, ns (less than enabled when multiplexed).
    pub running_ns: u64,
}

impl Reading {
    /// The count scaled to the enabled time (perf's estimate when
    /// multiplexed); `None` when it never ran.
    pub fn scaled(&self) -> Option<f64> {
        match (self.running_ns, self.enabled_ns) {
            (0, 0) => Some(self.value as f64),
            (0, _) => None,
            (r, e) if r >= e => Some(self.value as f64),
            (r, e) => Some(self.value as f64 * e as f64 / r as f64),
        }
    }

    /// The difference from an earlier reading.
    pub fn since(&self, earlier: &Reading) -> Reading {
        Reading {
            value: self.value.wrapping_sub(earlier.value),
            enabled_ns: self.enabled_ns.saturating_sub(earlier.enabled_ns),
            running_ns: self.running_ns.saturating_sub(earlier.running_ns),
        }
    }
}

impl Counter {
    /// Opens `attr` for task `pid` (0: the calling thread, -1: any) on
    /// `cpu` (-1: any), in the group of `group` (or as a leader).
    pub fn open(
        attr: &PerfEventAttr,
        pid: i32,
        cpu: i32,
        group: Option<&Counter>,
    ) -> io::Result<Self> {
        let mut a = *attr;
        a.size = ATTR_SIZE;
        a.read_format = READ_FORMAT;
        let group_fd = group.map_or(-1, |g| g.fd);
        // SAFETY: `a` is a valid perf_event_attr of the size it states, alive
        // for the call; the other arguments are plain integers.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &a as *const PerfEventAttr,
                pid,
                cpu,
                group_fd,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd: fd as libc::c_int,
        })
    }

    /// Reads count, enabled and running time.
    pub fn read(&self) -> io::Result<Reading> {
        let mut buf = [0u64; 3];
        // SAFETY: buf is 24 writable bytes and fd is an open perf event.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), 24) };
        if n != 24 {
            return Err(if n < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::other(format!("short read of a perf counter: {n} bytes"))
            });
        }
        Ok(Reading {
            value: buf[0],
            enabled_ns: buf[1],
            running_ns: buf[2],
        })
    }

    /// Starts counting; on a group leader with `group`, the whole group at
    /// once (`PERF_IOC_FLAG_GROUP`), so members share the leader's times.
    pub fn enable(&self, group: bool) -> io::Result<()> {
        self.ioctl(IOC_ENABLE, group)
    }

    /// Stops counting (the whole group with `group`).
    pub fn disable(&self, group: bool) -> io::Result<()> {
        self.ioctl(IOC_DISABLE, group)
    }

    fn ioctl(&self, req: libc::c_ulong, group: bool) -> io::Result<()> {
        let flag: libc::c_ulong = u64::from(group) as libc::c_ulong;
        // SAFETY: a perf ioctl whose argument is an integer flag, on an open
        // perf fd.
        if unsafe { libc::ioctl(self.fd, req as _, flag) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// The current `perf_event_paranoid` level from `path`, if readable.
pub fn paranoid_level(path: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_is_ver5_sized() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), ATTR_SIZE as usize);
    }

    #[test]
    fn scaling() {
        let r = Reading {
            value: 100,
            enabled_ns: 1000,
            running_ns: 250,
        };
        assert_eq!(r.scaled(), Some(400.0));
        let never = Reading {
            value: 0,
            enabled_ns: 1000,
            running_ns: 0,
        };
        assert_eq!(never.scaled(), None);
    }
}
