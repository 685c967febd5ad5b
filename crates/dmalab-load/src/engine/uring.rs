//! The `io_uring` engine: `O_DIRECT` reads and writes on a file or block
//! device with the DMA buffer registered with the ring (`READ_FIXED` /
//! `WRITE_FIXED`, one buffer index per piece) and the file registered
//! (`IOSQE_FIXED_FILE`), as fio's `fixedbufs=1`, `registerfiles=1`.

use super::{
    not_inspected, options, refuse_direction_both, refuse_foreign_flags, Command, Completion,
    Driver, Engine, EngineError, EngineKind, EngineSpec, Op, TargetInfo, TargetRequest,
};
use crate::plan::Plan;
use crate::target::{
    check_storage_write, inspect_file_or_block, prepare_file_or_block, PreparedTarget, TargetError,
};
use dmalab_core::UsageError;
use io_uring::{opcode, types, IoUring};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
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

/// How long an SQPOLL poller spins without work before it sleeps (and
/// the next submission has to wake it), ms: the kernel's own default.
const SQPOLL_IDLE_MS: u32 = 1000;

/// `--engine io_uring`'s own flags: the submission and completion path
/// (fio's `sqthread_poll` + `sqthread_poll_cpu`, `hipri`, `registerfiles`,
/// `iodepth_batch_submit`).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct UringArgs {
    /// --engine io_uring: a kernel thread pinned to CPU N takes commands
    /// off the ring (SQPOLL), so the worker submits without system calls;
    /// N must not be a worker's CPU (the poller spins there). Default: the
    /// worker submits (measured: SQPOLL costs a CPU; see docs/load.md).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub sqpoll_cpu: Option<usize>,
    /// --engine io_uring: completions are polled from the device's poll
    /// queues instead of interrupts (IOPOLL, fio's hipri); the target must
    /// be a block device with poll queues (NVMe: nvme.poll_queues=N).
    #[cfg_attr(feature = "clap", arg(long))]
    pub iopoll: bool,
    /// --engine io_uring: register the target file with the ring (true,
    /// the default, fio's registerfiles=1) or pass its descriptor with
    /// every command (false).
    #[cfg_attr(feature = "clap", arg(long, value_name = "BOOL", action = clap::ArgAction::Set))]
    pub register_files: Option<bool>,
    /// --engine io_uring: commands queued that make the worker submit
    /// them at once; fewer go in with its next wait for completions (one
    /// io_uring_enter for both). Default 2: a larger batch is plugged, and
    /// the block layer merges adjacent commands into fewer, larger requests
    /// than dmalab counts; 1 costs a second io_uring_enter per command at
    /// --iodepth 1.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub submit_batch: Option<u32>,
}

impl UringArgs {
    /// The engine's part of the plan: Some for `--engine io_uring` (its
    /// defaults filled in, so the result says what was used), None for
    /// the other engines, which refuse these flags.
    pub fn plan(&self, engine: EngineKind) -> Result<Option<UringPlan>, UsageError> {
        if engine != EngineKind::IoUring {
            let given = [
                ("--sqpoll-cpu", self.sqpoll_cpu.is_some()),
                ("--iopoll", self.iopoll),
                ("--register-files", self.register_files.is_some()),
                ("--submit-batch", self.submit_batch.is_some()),
            ];
            refuse_foreign_flags(&given, |flag| {
                UsageError::new(
                    flag,
                    format!(
                        "only for --engine io_uring; leave it out with --engine {}",
                        engine.as_str()
                    ),
                )
            })?;
            return Ok(None);
        }
        if self.submit_batch == Some(0) {
            return Err(UsageError::new(
                "--submit-batch",
                "must be at least 1 (commands per io_uring_enter)",
            ));
        }
        Ok(Some(UringPlan {
            sqpoll_cpu: self.sqpoll_cpu,
            iopoll: self.iopoll,
            register_files: self.register_files.unwrap_or(true),
            // Not clamped to --iodepth: at --iodepth 1 a batch of 2 never
            // fills, so the command goes in with the reap's wait, one
            // io_uring_enter per command (a batch of 1 costs two).
            submit_batch: self.submit_batch.unwrap_or(MAX_UNPLUGGED as u32),
        }))
    }
}

/// The io_uring engine's resolved submission path (the plan's options,
/// key `uring` in the result).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UringPlan {
    /// CPU of the SQPOLL kernel thread; None: the worker submits.
    pub sqpoll_cpu: Option<usize>,
    /// Completions polled (IOPOLL) instead of interrupts.
    pub iopoll: bool,
    /// The target file is registered with the ring.
    pub register_files: bool,
    /// Commands queued per io_uring_enter that submits them.
    pub submit_batch: u32,
}

impl Default for UringPlan {
    fn default() -> Self {
        Self {
            sqpoll_cpu: None,
            iopoll: false,
            register_files: true,
            submit_batch: MAX_UNPLUGGED as u32,
        }
    }
}

impl UringPlan {
    /// Checks the options against the plan and the target: the poller's
    /// CPU exists and is no worker's, IOPOLL only on a block device with
    /// poll queues (`io_poll` under `sys`, the device's sysfs directory).
    /// A batch larger than the queue never fills: every command then goes
    /// in with the reap's wait.
    pub fn check(&self, plan: &Plan, sys: Option<&Path>) -> Result<(), UsageError> {
        if let Some(cpu) = self.sqpoll_cpu {
            let online = dmalab_core::cpus::allowed_cpus();
            if !online.is_empty() && !online.contains(&cpu) {
                return Err(UsageError::new(
                    "--sqpoll-cpu",
                    format!(
                        "CPU {cpu} is not one this process may use ({}); name one of those",
                        dmalab_core::cpus::format_cpu_list(&online)
                    ),
                ));
            }
            if (0..plan.workers).any(|i| plan.worker_cpus(i).contains(&cpu)) {
                return Err(UsageError::new(
                    "--sqpoll-cpu",
                    format!(
                        "CPU {cpu} is a worker's (--cpus-allowed {}): the poller spins there and would take it from the worker; name another CPU, and not a victim's",
                        dmalab_core::cpus::format_cpu_list(&plan.cpus_allowed)
                    ),
                ));
            }
        }
        if self.iopoll {
            let target = plan
                .target
                .as_deref()
                .map_or_else(|| "the target".to_string(), |p| p.display().to_string());
            if plan.target_kind != "block" {
                return Err(UsageError::new(
                    "--iopoll",
                    format!(
                        "{target} is a {}, not a block device with poll queues; leave --iopoll out",
                        plan.target_kind
                    ),
                ));
            }
            let polls = sys
                .and_then(|d| std::fs::read_to_string(d.join("queue/io_poll")).ok())
                .is_some_and(|v| v.trim() == "1");
            if !polls {
                return Err(UsageError::new(
                    "--iopoll",
                    format!("{target} has no poll queues (queue/io_poll is not 1; NVMe: load the driver with nvme.poll_queues=N); leave --iopoll out"),
                ));
            }
        }
        Ok(())
    }
}

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
    build_ring_with(iodepth, &UringPlan::default())
}

/// [`build_ring`] with the submission path of `opts`: an SQPOLL ring
/// (whose poller runs the completions' task work itself, so it takes no
/// DEFER_TASKRUN) pinned to its CPU, or IOPOLL. No fallback drops an
/// option the user asked for: that ring fails to build instead.
fn build_ring_with(iodepth: u32, opts: &UringPlan) -> Result<IoUring, EngineError> {
    let entries = iodepth.max(1).next_power_of_two();
    let with = |b: &mut io_uring::Builder| {
        if opts.iopoll {
            b.setup_iopoll();
        }
        if let Some(cpu) = opts.sqpoll_cpu {
            b.setup_sqpoll(SQPOLL_IDLE_MS).setup_sqpoll_cpu(cpu as u32);
        }
    };
    let plain = opts.sqpoll_cpu.is_none();
    let built = if plain {
        let mut b = IoUring::builder();
        b.setup_single_issuer()
            .setup_coop_taskrun()
            .setup_defer_taskrun();
        with(&mut b);
        b.build(entries)
    } else {
        let mut b = IoUring::builder();
        b.setup_single_issuer();
        with(&mut b);
        b.build(entries)
    };
    built
        .or_else(|_| {
            let mut b = IoUring::builder();
            if plain {
                b.setup_single_issuer().setup_coop_taskrun();
            }
            with(&mut b);
            b.build(entries)
        })
        .or_else(|_| {
            let mut b = IoUring::builder();
            with(&mut b);
            b.build(entries)
        })
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
    file: File,
    pieces: Vec<super::BufferPiece>,
    ext_arg: bool,
    /// The pieces are registered (READ_FIXED/WRITE_FIXED); false when the
    /// buffer is not locked ([`super::EngineSpec::buffer_locked`]): plain
    /// READ/WRITE, the kernel pinning each command's pages in flight.
    fixed: bool,
    /// The submission path.
    opts: UringPlan,
    /// Where the SQPOLL poller's CPU time goes when the ring closes.
    pollers: Arc<Mutex<PollerTimes>>,
}

/// CPU time of the process's SQPOLL pollers (`iou-sqp-*` threads), ns by
/// thread id, the last reading of each: every engine reads them all just
/// before its ring closes (its own poller exits with the ring).
#[derive(Debug, Default)]
pub struct PollerTimes(BTreeMap<u32, u64>);

impl PollerTimes {
    /// Reads every poller thread of this process from `/proc/self/task`.
    fn update(&mut self) {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if !comm.starts_with("iou-sqp-") {
                continue;
            }
            if let Some(ns) = thread_cpu_ns(&e.path()) {
                let v = self.0.entry(tid).or_insert(0);
                *v = (*v).max(ns);
            }
        }
    }

    /// Total over the pollers, ns.
    pub fn total_ns(&self) -> u64 {
        self.0.values().sum()
    }
}

/// A thread's CPU time, ns: `schedstat`'s time on CPU (exact), or
/// `stat`'s utime + stime (clock ticks) where schedstat is missing.
fn thread_cpu_ns(task: &Path) -> Option<u64> {
    if let Some(ns) = std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
    {
        return Some(ns);
    }
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    // Fields after the command name, which may hold spaces: ") S ppid ...";
    // utime and stime are fields 14 and 15 of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf takes an integer name and has no other effect.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks * 1_000_000_000 / hz as u64)
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        if self.opts.sqpoll_cpu.is_some() {
            if let Ok(mut p) = self.pollers.lock() {
                p.update();
            }
        }
    }
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
    opts: UringPlan,
    pollers: Arc<Mutex<PollerTimes>>,
}

impl Driver for UringDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::IoUring
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        let info = inspect_file_or_block(req, EngineKind::IoUring)?;
        self.allow_destroy = req.allow_destroy.clone();
        self.info = Some(info.clone());
        Ok(info)
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        refuse_direction_both(plan)?;
        let opts = options::uring(plan.engine_options.as_ref())
            .cloned()
            .unwrap_or_default();
        let sys = plan
            .target
            .as_deref()
            .and_then(dmalab_core::host::block_sysfs_for_path)
            .map(|d| dmalab_core::host::disk_sysfs(&d));
        opts.check(plan, sys.as_deref())?;
        self.opts = opts;
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
        Ok(Box::new(UringEngine::open_with(
            spec,
            &self.opts,
            self.pollers.clone(),
        )?))
    }

    /// The submission path used, and the SQPOLL pollers' CPU time.
    fn facts(&self) -> Option<(&'static str, serde_json::Value)> {
        let mut v = serde_json::json!({
            "sqpoll_cpu": self.opts.sqpoll_cpu,
            "iopoll": self.opts.iopoll,
            "register_files": self.opts.register_files,
            "submit_batch": self.opts.submit_batch,
        });
        if self.opts.sqpoll_cpu.is_some() {
            let ns = self.pollers.lock().map_or(0, |p| p.total_ns());
            v["sqpoll_thread_cpu_ns"] = ns.into();
        }
        Some(("io_uring", v))
    }
}

impl UringEngine {
    /// Opens the target, builds a ring of `iodepth` entries and registers the
    /// file and buffer pieces.
    pub fn open(spec: &EngineSpec) -> Result<Self, EngineError> {
        Self::open_with(spec, &UringPlan::default(), Arc::default())
    }

    /// [`open`](Self::open) with the submission path of `opts`; an SQPOLL
    /// poller's CPU time is added to `pollers` when the ring closes.
    pub fn open_with(
        spec: &EngineSpec,
        opts: &UringPlan,
        pollers: Arc<Mutex<PollerTimes>>,
    ) -> Result<Self, EngineError> {
        let file = open_direct(&spec.target, spec.writes).map_err(|e| {
            EngineError::io(format!("open {} with O_DIRECT", spec.target.display()), e)
        })?;
        let ring = build_ring_with(spec.iodepth, opts)?;
        if opts.register_files {
            ring.submitter()
                .register_files(&[file.as_raw_fd()])
                .map_err(|e| EngineError::io("register the target file with io_uring", e))?;
        }
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
            file,
            pieces: spec.pieces.clone(),
            ext_arg,
            fixed,
            opts: opts.clone(),
            pollers,
        })
    }
}

impl UringEngine {
    /// The memory address of a data command's bytes.
    fn addr_of(&self, cmd: &Command) -> Result<*mut u8, EngineError> {
        let piece = self.pieces.get(cmd.piece as usize).ok_or_else(|| {
            EngineError::io(
                "queue",
                std::io::Error::other(format!("no buffer piece {}", cmd.piece)),
            )
        })?;
        let within = (cmd.buf_offset - piece.buf_offset) as usize;
        debug_assert!(within + cmd.len as usize <= piece.len);
        // SAFETY: within + len stays inside the piece (the pattern stream
        // guarantees no command crosses a piece).
        Ok(unsafe { piece.addr.add(within) })
    }
}

impl Engine for UringEngine {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        let addr = match cmd.op {
            Op::Read | Op::Write => self.addr_of(cmd)?,
            Op::Flush | Op::Noop => std::ptr::null_mut(),
        };
        // One entry for either kind of file reference (the opcode
        // builders take both through a trait the crate does not export).
        macro_rules! sqe {
            ($fd:expr) => {
                match cmd.op {
                    Op::Read if !self.fixed => opcode::Read::new($fd, addr, cmd.len)
                        .offset(cmd.dev_offset)
                        .build(),
                    Op::Write if !self.fixed => opcode::Write::new($fd, addr, cmd.len)
                        .offset(cmd.dev_offset)
                        .build(),
                    Op::Read => opcode::ReadFixed::new($fd, addr, cmd.len, cmd.piece)
                        .offset(cmd.dev_offset)
                        .build(),
                    Op::Write => opcode::WriteFixed::new($fd, addr, cmd.len, cmd.piece)
                        .offset(cmd.dev_offset)
                        .build(),
                    Op::Flush => opcode::Fsync::new($fd)
                        .flags(types::FsyncFlags::DATASYNC)
                        .build(),
                    Op::Noop => opcode::Nop::new().build(),
                }
            };
        }
        let entry = if self.opts.register_files {
            sqe!(types::Fixed(0))
        } else {
            sqe!(types::Fd(self.file.as_raw_fd()))
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
        if self.ring.submission().len() >= self.opts.submit_batch as usize {
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
