//! NVMe passthrough through io_uring: `IORING_OP_URING_CMD` on the
//! namespace's generic character device, with 128-byte submission entries
//! (the 72-byte `struct nvme_uring_cmd` rides in the SQE's 80-byte command
//! area) and 32-byte completions (the second half carries completion dword 0).
//!
//! The kernel grew `IORING_OP_URING_CMD` and the NVMe driver's handler for
//! it together (Linux 5.19), so probing the opcode tells whether the path
//! exists; the caller falls back to `NVME_IOCTL_IO_CMD` when it does not.

use crate::cmd::PassthruCmd;
use crate::dev::NVME_URING_CMD_IO;
use crate::Error;
use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// One finished passthrough command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringCompletion {
    /// The `user_data` the command was pushed with.
    pub user_data: u64,
    /// 0 on success, a positive NVMe status, or a negative errno.
    pub res: i32,
    /// Completion dword 0 (from the big CQE).
    pub result: u64,
}

/// Checks that this kernel can do NVMe passthrough through io_uring: a ring
/// with 128-byte SQEs and 32-byte CQEs, and the `IORING_OP_URING_CMD` opcode.
/// The error says what is missing.
pub fn probe() -> Result<(), Error> {
    let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
        .build(2)
        .map_err(|e| Error::Unsupported {
            what: "io_uring with 128-byte SQEs and 32-byte CQEs".into(),
            detail: format!("ring setup failed ({e}); needs Linux 5.19 or newer"),
        })?;
    let mut p = Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| Error::Unsupported {
            what: "IORING_REGISTER_PROBE".into(),
            detail: e.to_string(),
        })?;
    if !p.is_supported(opcode::UringCmd80::CODE) {
        return Err(Error::Unsupported {
            what: "IORING_OP_URING_CMD".into(),
            detail: "needs Linux 5.19 or newer".into(),
        });
    }
    Ok(())
}

/// A ring of NVMe passthrough commands on one namespace.
pub struct UringQueue {
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    file: File,
    nsid: u32,
    fixed_buffers: bool,
}

impl UringQueue {
    /// A ring with `entries` submission slots on `file`, the namespace's
    /// generic character device (`/dev/ngXnY`) with namespace id `nsid`.
    pub fn new(file: File, nsid: u32, entries: u32) -> Result<Self, Error> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
            .build(entries.max(1).next_power_of_two())
            .map_err(|e| Error::io("io_uring_setup (SQE128|CQE32)", e))?;
        Ok(Self {
            ring,
            file,
            nsid,
            fixed_buffers: false,
        })
    }

    /// The namespace id commands go to.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Registers memory regions as fixed buffers (index = position), so
    /// commands can name them with a buffer index
    /// (`IORING_URING_CMD_FIXED`) and the kernel skips pinning pages per
    /// command. An error leaves the ring without fixed buffers.
    ///
    /// # Safety
    /// Every region must stay allocated and unmoved while the ring exists.
    pub unsafe fn register_buffers(&mut self, regions: &[libc::iovec]) -> Result<(), Error> {
        // SAFETY: the caller guarantees the regions outlive the ring.
        unsafe { self.ring.submitter().register_buffers(regions) }
            .map_err(|e| Error::io("IORING_REGISTER_BUFFERS", e))?;
        self.fixed_buffers = true;
        Ok(())
    }

    /// True when commands use the registered fixed buffers.
    pub fn has_fixed_buffers(&self) -> bool {
        self.fixed_buffers
    }

    /// Stops naming fixed buffers in later commands (they stay registered).
    pub fn stop_using_fixed_buffers(&mut self) {
        self.fixed_buffers = false;
    }

    /// Queues one command without submitting it. `buf_index` names the
    /// registered buffer holding `cmd.addr` (None: plain user memory).
    ///
    /// # Safety
    /// `cmd.addr`/`cmd.data_len` must describe memory that stays valid (and,
    /// for a Read, writable) until the command's completion is reaped.
    pub unsafe fn push(
        &mut self,
        cmd: &PassthruCmd,
        user_data: u64,
        buf_index: Option<u16>,
    ) -> Result<(), Error> {
        let mut op = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), NVME_URING_CMD_IO)
            .cmd(cmd.to_uring_bytes());
        if self.fixed_buffers {
            op = op.buf_index(buf_index);
        }
        let sqe = op.build().user_data(user_data);
        // SAFETY: the caller keeps the data buffer alive until completion;
        // the command bytes are copied into the SQE.
        if unsafe { self.ring.submission().push(&sqe) }.is_err() {
            // Full: hand what is queued to the kernel, then retry once.
            self.ring
                .submit()
                .map_err(|e| Error::io("io_uring_enter", e))?;
            // SAFETY: as above.
            unsafe { self.ring.submission().push(&sqe) }.map_err(|_| Error::QueueFull)?;
        }
        Ok(())
    }

    /// Submits everything queued and waits for at least `want` completions
    /// (0: do not wait), or until `timeout` has passed (None: no limit).
    pub fn submit_and_wait(&mut self, want: usize, timeout: Option<Duration>) -> Result<(), Error> {
        let r = match timeout {
            Some(t) if want > 0 => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
            _ => self.ring.submit_and_wait(want),
        };
        match r {
            Ok(_) => Ok(()),
            // The timeout passed (ETIME), a signal (SIGINT for a clean stop)
            // interrupted the wait, or the completion queue overflowed
            // (EBUSY): return so the caller reaps and looks at its stop flag.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(Error::io("io_uring_enter", e)),
        }
    }

    /// Appends every available completion to `out`.
    pub fn reap(&mut self, out: &mut Vec<UringCompletion>) {
        for cqe in self.ring.completion() {
            out.push(UringCompletion {
                user_data: cqe.user_data(),
                res: cqe.result(),
                result: cqe.big_cqe()[0],
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host kernel here has io_uring passthrough; where it does not, the
    /// probe must fail with Unsupported, never with something else.
    #[test]
    fn probe_says_yes_or_unsupported() {
        match probe() {
            Ok(()) => {}
            Err(Error::Unsupported { .. }) => {}
            Err(e) => {
                // Seccomp'd containers refuse io_uring_setup with EPERM.
                assert!(e.to_string().contains("io_uring"), "{e}");
            }
        }
    }
}
