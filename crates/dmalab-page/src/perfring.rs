//! A syscall-free fault classifier: per-thread perf software events
//! `page-faults-maj` and `page-faults-min` with a sample period of 1, each
//! writing one record into its own mmap'd ring buffer. The kernel counts
//! these events in `mm_account_fault()`, right beside the task's
//! `maj_flt`/`min_flt`, so they are the same accounting as getrusage; but
//! checking for a fault is two loads of `data_head` from user memory, so a
//! hit costs no kernel entry and its cache state is left alone.

use std::io;
use std::sync::atomic::{compiler_fence, Ordering};

/// `struct perf_event_attr` up to PERF_ATTR_SIZE_VER5 (112 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved2: u16,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
/// PERF_COUNT_SW_PAGE_FAULTS_MIN.
pub const SW_PAGE_FAULTS_MIN: u64 = 5;
/// PERF_COUNT_SW_PAGE_FAULTS_MAJ.
pub const SW_PAGE_FAULTS_MAJ: u64 = 6;
const PERF_RECORD_SAMPLE: u32 = 9;
/// exclude_kernel (bit 5) | exclude_hv (bit 6): the faults of interest are
/// user-mode accesses, and this works under perf_event_paranoid 2.
const FLAGS: u64 = (1 << 5) | (1 << 6);
const PAGE: usize = 4096;
const DATA_PAGES: usize = 2;

/// One event's ring buffer, owned by the thread that opened it.
pub struct PerfRing {
    fd: libc::c_int,
    base: *mut u8,
    len: usize,
    /// data_head value up to which records were counted.
    seen: u64,
    /// Records that were not samples (throttle, lost) seen so far.
    pub other_records: u64,
}

impl PerfRing {
    /// Opens `config` (SW_PAGE_FAULTS_MAJ or _MIN) for the calling thread.
    pub fn open(config: u64) -> io::Result<Self> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            sample_period: 1,
            sample_type: 0,
            flags: FLAGS,
            // Never wake anyone: nobody polls this fd.
            wakeup_events: 0,
            ..PerfEventAttr::default()
        };
        // SAFETY: attr is a valid perf_event_attr of the size it states;
        // pid 0 / cpu -1 = this thread on any CPU; no group; CLOEXEC.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                libc::c_ulong::from(8u32), // PERF_FLAG_FD_CLOEXEC
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = fd as libc::c_int;
        let len = PAGE * (1 + DATA_PAGES);
        // SAFETY: maps the perf ring of our own fd; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: fd is ours and open.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        // The ring memory must never fault during a timed access.
        // SAFETY: the range is the mapping just created; failure is harmless.
        unsafe { libc::mlock(base, len) };
        let mut r = Self {
            fd,
            base: base.cast(),
            len,
            seen: 0,
            other_records: 0,
        };
        r.seen = r.head();
        r.set_tail(r.seen);
        Ok(r)
    }

    /// The kernel's write position (`data_head`, offset 1024 of the
    /// control page).
    #[inline(always)]
    pub fn head(&self) -> u64 {
        // SAFETY: offset 1024 of the mapped control page holds data_head,
        // an aligned u64 the kernel updates; volatile because it changes
        // behind our back.
        let h = unsafe { self.base.add(1024).cast::<u64>().read_volatile() };
        // The kernel writes records before it publishes data_head; on x86
        // loads are not reordered with older loads, so a compiler fence is
        // the smp_rmb() the perf ABI asks for.
        compiler_fence(Ordering::Acquire);
        h
    }

    fn set_tail(&mut self, t: u64) {
        compiler_fence(Ordering::Release);
        // SAFETY: offset 1032 of the control page is data_tail, ours to write.
        unsafe { self.base.add(1032).cast::<u64>().write_volatile(t) };
    }

    /// Counts the sample records between `seen` and `head` and frees them.
    /// Returns the number of events (faults).
    #[inline(always)]
    pub fn consume(&mut self, head: u64) -> u64 {
        if head == self.seen {
            return 0;
        }
        self.consume_slow(head)
    }

    #[inline(never)]
    fn consume_slow(&mut self, head: u64) -> u64 {
        let data = PAGE * DATA_PAGES;
        let mut pos = self.seen;
        let mut n = 0;
        while pos < head {
            let off = PAGE + (pos as usize % data);
            // SAFETY: off + 8 <= len: records are 8-byte aligned and the
            // data area is a multiple of 8; the header is type u32, misc
            // u16, size u16.
            let (ty, size) = unsafe {
                let p = self.base.add(off);
                (
                    p.cast::<u32>().read_volatile(),
                    p.add(6).cast::<u16>().read_volatile(),
                )
            };
            if ty == PERF_RECORD_SAMPLE {
                n += 1;
            } else {
                self.other_records += 1;
            }
            if size == 0 {
                break;
            }
            pos += u64::from(size);
        }
        self.seen = head;
        self.set_tail(head);
        n
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: base/len are our mapping and fd our descriptor.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_minor_faults_of_first_touches() {
        let mut ring = match PerfRing::open(SW_PAGE_FAULTS_MIN) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("SKIPPED: perf_event_open unavailable: {e}");
                return;
            }
        };
        let pages = 64;
        // A fresh anonymous mapping, not a Vec: once other tests in this
        // process have freed large buffers, glibc raises its mmap threshold
        // and calloc hands back heap memory it has already touched (33 of
        // 64 first touches faulted in one run).
        let len = pages * PAGE + PAGE;
        // SAFETY: a new private anonymous mapping; unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p.cast::<u8>();
        let h0 = ring.head();
        ring.consume(h0);
        let mut faults = 0;
        for i in 0..pages {
            let before = ring.head();
            // SAFETY: inside the vector.
            unsafe { p.add(i * PAGE + 100).write_volatile(1) };
            let after = ring.head();
            if after != before {
                faults += ring.consume(after);
            }
        }
        // The mapping is untouched, so every first touch faults (a few may
        // be missed while the ring is read).
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(p.cast(), len) };
        assert!(faults >= (pages as u64) - 4, "{faults}");
    }
}
