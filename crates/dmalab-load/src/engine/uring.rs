//! The `io_uring` engine: `O_DIRECT` reads and writes on a file or block
//! device with the DMA buffer registered with the ring (`READ_FIXED` /
//! `WRITE_FIXED`, one buffer index per piece) and the file registered
//! (`IOSQE_FIXED_FILE`), as fio's `fixedbufs=1`, `registerfiles=1`.

use super::{
    not_inspected, refuse_direction_both, refuse_format_before, Command, Completion, Driver,
    Engine, EngineError, EngineKind, EngineSpec, Op, TargetInfo, TargetRequest,
};
use crate::plan::Plan;
use crate::target::{
    check_storage_write, inspect_file_or_block, prepare_file_or_block, PreparedTarget, TargetError,
};
use dmalab_core::UsageError;
use io_uring::{opcode, types, IoUring};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::time::Duration;

/// Most entries handed to the kernel in one `io_uring_enter`. io_uring
/// plugs the block layer for a batch of more than two, and a plug merges
/// adjacent requests: sequential 4 KiB reads refilled 16 at a time reached
/// a virtio disk as one 64 KiB request per batch (14 commands per request
/// measured), so the device saw about one request in flight instead of
/// `--iodepth`, and fewer, larger commands than dmalab counts. Batches of
/// two go in unplugged, each command as its own request (fio's default
/// `iodepth_batch_submit=1` submits one at a time).
pub(super) const MAX_UNPLUGGED: usize = 2;

/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

/// The outcome of an `io_uring_enter`: a timeout (ETIME), a signal (EINTR)
/// or a full completion queue (EBUSY) only ends this call early, and the
/// worker loop comes back; anything else is the ring failing.
pub(super) fn entered(r: std::io::Result<usize>) -> Result<(), EngineError> {
    match r {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(EngineError::io("io_uring_enter", e)),
    }
}

/// A ring of `iodepth` entries (rounded up to a power of two), set up as
/// fio 3.33 sets up its rings: one issuer, completions' task work run when
/// the worker asks for events (DEFER_TASKRUN, Linux 6.1), never by
/// interrupting it (COOP_TASKRUN); older kernels get fewer of these hints.
/// The null engine builds its NOP ring here too, so both take the same
/// kernel path up to the opcode.
pub(super) fn build_ring(iodepth: u32) -> Result<IoUring, EngineError> {
    let entries = iodepth.max(1).next_power_of_two();
    IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| {
            IoUring::builder()
                .setup_single_issuer()
                .setup_coop_taskrun()
                .build(entries)
        })
        .or_else(|_| IoUring::new(entries))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) => EngineError::Unsupported {
                feature: "io_uring".into(),
                detail: format!(
                    "io_uring_setup failed ({e}); enable it (sysctl kernel.io_uring_disabled=0) or use a kernel >= 5.11"
                ),
            },
            _ => EngineError::io("io_uring_setup", e),
        })
}

/// Submits what the ring holds and reaps its completions, waiting for
/// `min_complete` of them (up to `timeout` where the kernel takes one),
/// exactly as the io_uring engine does; the null engine's NOP ring uses
/// the same call.
pub(super) fn ring_submit_and_reap(
    ring: &mut IoUring,
    ext_arg: bool,
    min_complete: usize,
    timeout: Option<Duration>,
    mut each: impl FnMut(u64, i32),
) -> Result<(), EngineError> {
    let ready = ring.completion().len();
    let want = min_complete.saturating_sub(ready);
    let r = match timeout {
        Some(t) if want > 0 && ext_arg => {
            let ts = types::Timespec::from(t);
            let args = types::SubmitArgs::new().timespec(&ts);
            ring.submitter().submit_with_args(want, &args)
        }
        _ if want > 0 => ring.submitter().submit_and_wait(want),
        _ => {
            // Submit without waiting, but with GETEVENTS: under
            // DEFER_TASKRUN only that posts the completions that are
            // done.
            let to_submit = ring.submission().len() as u32;
            // SAFETY: no argument pointer (None); the flags ask for
            // nothing beyond submitting and posting completions.
            unsafe {
                ring.submitter()
                    .enter::<libc::sigset_t>(to_submit, 0, ENTER_GETEVENTS, None)
            }
        }
    };
    entered(r)?;
    for cqe in ring.completion() {
        each(cqe.user_data(), cqe.result());
    }
    Ok(())
}

/// One ring, one registered file, the registered buffer pieces.
pub struct UringEngine {
    ring: IoUring,
    // Kept open for as long as the ring uses its registered copy.
    _file: File,
    pieces: Vec<super::BufferPiece>,
    ext_arg: bool,
    /// The pieces are registered (READ_FIXED/WRITE_FIXED); false when the
    /// buffer is not locked ([`super::EngineSpec::buffer_locked`]): plain
    /// READ/WRITE, the kernel pinning each command's pages in flight.
    fixed: bool,
}

/// Opens `path` with O_DIRECT for reading, or reading and writing.
pub fn open_direct(path: &std::path::Path, write: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// The io_uring engine's lifecycle: files and block devices.
#[derive(Default)]
pub struct UringDriver {
    allow_destroy: Option<std::path::PathBuf>,
    info: Option<TargetInfo>,
    prepared: Option<PreparedTarget>,
}

impl Driver for UringDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::IoUring
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        refuse_format_before(req)?;
        let info = inspect_file_or_block(req, EngineKind::IoUring)?;
        self.allow_destroy = req.allow_destroy.clone();
        self.info = Some(info.clone());
        Ok(info)
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        refuse_direction_both(plan)?;
        let exists = self.info.as_ref().is_some_and(|i| i.exists);
        check_storage_write(plan, exists, self.allow_destroy.as_deref())
    }

    fn prepare(&mut self, plan: &mut Plan) -> Result<(), TargetError> {
        let Some(info) = &self.info else {
            return Err(not_inspected());
        };
        let t = prepare_file_or_block(info, plan.keep)?;
        plan.target = Some(t.path.clone());
        self.prepared = Some(t);
        Ok(())
    }

    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(UringEngine::open(spec)?))
    }
}

impl UringEngine {
    /// Opens the target, builds a ring of `iodepth` entries and registers the
    /// file and buffer pieces.
    pub fn open(spec: &EngineSpec) -> Result<Self, EngineError> {
        let file = open_direct(&spec.target, spec.writes).map_err(|e| {
            EngineError::io(format!("open {} with O_DIRECT", spec.target.display()), e)
        })?;
        let ring = build_ring(spec.iodepth)?;
        ring.submitter()
            .register_files(&[file.as_raw_fd()])
            .map_err(|e| EngineError::io("register the target file with io_uring", e))?;
        let fixed = spec.buffer_locked;
        if fixed {
            let iovecs = spec.iovecs();
            // SAFETY: the pieces describe the run's DmaBuffer, which stays
            // mapped until every worker (and so this ring) has been dropped.
            unsafe { ring.submitter().register_buffers(&iovecs) }.map_err(|e| {
                let hint = if e.raw_os_error() == Some(libc::ENOMEM) {
                    " (locked-memory limit: raise ulimit -l or run as root)"
                } else {
                    ""
                };
                EngineError::io(format!("register the DMA buffer with io_uring{hint}"), e)
            })?;
        }
        let ext_arg = ring.params().is_feature_ext_arg();
        Ok(Self {
            ring,
            _file: file,
            pieces: spec.pieces.clone(),
            ext_arg,
            fixed,
        })
    }
}

impl Engine for UringEngine {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        let fd = types::Fixed(0);
        let entry = match cmd.op {
            Op::Read | Op::Write => {
                let piece = self.pieces.get(cmd.piece as usize).ok_or_else(|| {
                    EngineError::io(
                        "queue",
                        std::io::Error::other(format!("no buffer piece {}", cmd.piece)),
                    )
                })?;
                let within = (cmd.buf_offset - piece.buf_offset) as usize;
                debug_assert!(within + cmd.len as usize <= piece.len);
                // SAFETY: within + len stays inside the piece (the pattern
                // stream guarantees no command crosses a piece).
                let addr = unsafe { piece.addr.add(within) };
                if !self.fixed {
                    if cmd.op == Op::Read {
                        opcode::Read::new(fd, addr, cmd.len)
                            .offset(cmd.dev_offset)
                            .build()
                    } else {
                        opcode::Write::new(fd, addr, cmd.len)
                            .offset(cmd.dev_offset)
                            .build()
                    }
                } else if cmd.op == Op::Read {
                    opcode::ReadFixed::new(fd, addr, cmd.len, cmd.piece)
                        .offset(cmd.dev_offset)
                        .build()
                } else {
                    opcode::WriteFixed::new(fd, addr, cmd.len, cmd.piece)
                        .offset(cmd.dev_offset)
                        .build()
                }
            }
            Op::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            Op::Noop => opcode::Nop::new().build(),
        }
        .user_data(u64::from(slot));
        // SAFETY: the entry's buffer lives in a registered piece that outlives
        // the ring; the slot is free, so no other entry uses this user_data.
        unsafe { self.ring.submission().push(&entry) }.map_err(|_| {
            EngineError::io(
                "queue",
                std::io::Error::other("submission queue full (more commands than --iodepth)"),
            )
        })?;
        if self.ring.submission().len() >= MAX_UNPLUGGED {
            entered(self.ring.submitter().submit())?;
        }
        Ok(())
    }

    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        ring_submit_and_reap(
            &mut self.ring,
            self.ext_arg,
            min_complete,
            timeout,
            |user_data, result| {
                out.push(Completion {
                    slot: user_data as u32,
                    result,
                })
            },
        )
    }
}
