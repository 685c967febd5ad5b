//! The engine interface: what a target is for an engine, and how one
//! worker's commands reach the device.
//!
//! Two small traits, one module per engine, one factory `match`
//! ([`driver`]). A [`Driver`] owns an engine's whole lifecycle for one run:
//! it inspects the target, checks the resolved plan against the device,
//! prepares the target, describes the device for the result, and opens one
//! [`Engine`] per worker. The binary calls these steps in order and knows
//! no engine by name; adding an engine is one module plus one arm here
//! (see `docs/engines.md`).
//!
//! An [`Engine`] owns one submission/completion queue (an io_uring ring, or a
//! synchronous ioctl loop) for one worker. The worker loop above it knows
//! nothing about rings: it queues commands into free slots, then asks the
//! engine to submit and hand back completions.
//!
//! # The contract
//!
//! **What an engine gets** ([`EngineSpec`], handed to its `open` function):
//! * `target`: the path to open. For `io_uring` a regular file or block
//!   device (opened `O_DIRECT`); for `nvme` the NVMe generic character
//!   device `/dev/ngXnY`. **The driver's preflight has already applied the
//!   safety guard** (`target::check_storage_write`, which for `/dev/ngXnY`
//!   checks `/dev/nvmeXnY`) when `writes` is true; an engine never writes
//!   anywhere else and need not repeat the checks.
//! * `pieces`: the one shared DMA buffer, split into registration pieces of
//!   at most 1 GiB, each a multiple of `bs`. Piece `i` is registered under
//!   buffer index `i` (`IORING_REGISTER_BUFFERS` takes them in this order, so
//!   `buf_index == i`). Every engine of every worker registers the same
//!   pieces. No command crosses a piece: `[cmd.buf_offset, cmd.buf_offset +
//!   cmd.len)` lies inside `pieces[cmd.piece]`, whose first byte is
//!   `pieces[cmd.piece].buf_offset` bytes into the buffer. So the command's
//!   memory address is `piece.addr + (cmd.buf_offset - piece.buf_offset)`.
//! * `iodepth`: the number of slots. Slots are `0..iodepth`; the slot number
//!   is what the engine must carry as `user_data` and hand back in
//!   [`Completion::slot`]. The worker only queues into a free slot (its
//!   previous command has completed), and never more than `iodepth` at once.
//! * `bs`, `writes`, `worker` (index), `cpu` (the CPU(s) the worker is pinned
//!   to, already applied to the calling thread) for engines that care.
//!
//! **What a [`Command`] means:** `Op::Read` = storage read = the device
//! writes `len` bytes into memory; `Op::Write` = storage write = the device
//! reads memory. `dev_offset` and `len` are in bytes, multiples of `bs`
//! (itself a multiple of the logical block size); an NVMe engine divides by
//! its LBA size. `Op::Flush` (no data, `len == 0`) is `fdatasync` on a file,
//! a cache flush on a block device (io_uring `IORING_OP_FSYNC` with
//! `DATASYNC`), NVMe Flush for nvme. `Op::Noop` (no data) must touch no
//! device: io_uring `IORING_OP_NOP`, an immediate completion elsewhere.
//!
//! **What an engine returns:** [`Completion`]s with the slot and a result:
//! the bytes transferred (`>= 0`; 0 for flush/noop) or a negative errno. A
//! short transfer or negative result is the worker's business (it counts and
//! reports it); the engine reports [`EngineError`] only when the queue itself
//! fails. `submit_and_reap` must not block when `min_complete == 0`, and
//! must return early (possibly with nothing) once `timeout` has passed; a
//! synchronous engine simply runs what is queued and returns it all.

use crate::plan::Plan;
use crate::target::TargetError;
use dmalab_core::host::DeviceInfo;
use dmalab_core::UsageError;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod gpu;
pub mod null;
pub mod nvme;
pub mod options;
pub mod rdma;
mod refuse;
pub mod uring;

pub use options::{EngineFlags, EngineOptions};
pub(crate) use refuse::{
    format_before_refusal, refuse_allow_destroy, refuse_direction_both, refuse_foreign_flags,
};

/// What a command does, from the *device's* point of view.
///
/// `--direction write` (the device writes memory) issues [`Op::Read`]s;
/// `--direction read` (the device reads memory) issues [`Op::Write`]s;
/// `--direction both` alternates them (engines that cannot mix refuse it
/// in preflight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Storage read: device -> host buffer (DMA write into memory).
    Read,
    /// Storage write: host buffer -> device (DMA read from memory).
    Write,
    /// Flush: no data, command traffic only.
    Flush,
    /// Nothing at all (baselines).
    Noop,
}

/// One command as the pattern stream produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// What to do.
    pub op: Op,
    /// Byte offset into the shared DMA buffer (0 for Flush/Noop).
    pub buf_offset: u64,
    /// Registration piece holding `buf_offset..buf_offset+len` (its buffer
    /// index).
    pub piece: u16,
    /// Byte offset on the target (0 for Flush/Noop).
    pub dev_offset: u64,
    /// Bytes moved (blocks x bs; 0 for Flush/Noop).
    pub len: u32,
    /// Blocks of `--bs` in this command (0 for Flush/Noop).
    pub blocks: u32,
}

/// A finished command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The slot the command was queued in (the `user_data`).
    pub slot: u32,
    /// Bytes transferred (>= 0) or a negative errno.
    pub result: i32,
}

/// One registration piece of the shared DMA buffer.
#[derive(Clone, Copy, Debug)]
pub struct BufferPiece {
    /// First byte of the piece.
    pub addr: *mut u8,
    /// Length in bytes (at most 1 GiB, a multiple of `bs`).
    pub len: usize,
    /// Where the piece starts inside the whole buffer, bytes.
    pub buf_offset: u64,
}

// SAFETY: a BufferPiece only describes memory owned by the run's DmaBuffer,
// which outlives every engine and worker; the device and the workers access
// disjoint command regions, and concurrent DMA into the same bytes is the
// point of the tool (no Rust reference to the bytes is ever formed).
unsafe impl Send for BufferPiece {}
// SAFETY: as above; sharing the description is harmless.
unsafe impl Sync for BufferPiece {}

/// Which engine (`--engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// io_uring, O_DIRECT, registered buffers and file (files, block devices).
    #[cfg_attr(feature = "clap", value(name = "io_uring"))]
    IoUring,
    /// NVMe passthrough on /dev/ngXnY (io_uring URING_CMD, ioctl fallback).
    Nvme,
    /// Moves no data; every command completes at once (tests the tool itself).
    Null,
    /// GPU copy engines: copies between the buffer and GPU memory (CUDA driver).
    Gpu,
    /// RDMA WRITE/READ over RC queue pairs to a `dmalab rdma serve` peer or
    /// in loopback (libibverbs, loaded at run time).
    Rdma,
}

impl EngineKind {
    /// The name used on the command line and in results.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Nvme => "nvme",
            EngineKind::Null => "null",
            EngineKind::Gpu => "gpu",
            EngineKind::Rdma => "rdma",
        }
    }

    /// True when the engine moves data through a device, so the counters
    /// can check the load's own accounting against what the device saw
    /// (the null engine moves nothing).
    pub fn moves_data(self) -> bool {
        !matches!(self, EngineKind::Null)
    }

    /// The device `--trace` tags this engine's transfers with: a storage
    /// engine's are a disk's, RDMA's a NIC's, and a GPU copy engine's
    /// `other` (neither). The null engine's stay untagged: it moves no
    /// data, so no device did.
    pub fn trace_device(self) -> dmalab_trace::Device {
        use dmalab_trace::Device;
        match self {
            EngineKind::IoUring | EngineKind::Nvme => Device::Disk,
            EngineKind::Rdma => Device::Nic,
            EngineKind::Gpu => Device::Other,
            EngineKind::Null => Device::Untagged,
        }
    }

    /// True when the engine creates a file target that does not exist yet
    /// (a scratch file without `--target`); the null engine only
    /// describes its target and never creates one.
    pub fn creates_target(self) -> bool {
        !matches!(self, EngineKind::Null)
    }

    /// The flag that sizes the space device offsets move in when the
    /// region defaults to the whole target (the flag an error about too
    /// small a target names).
    pub fn size_option(self) -> &'static str {
        match self {
            EngineKind::Rdma => "--rdma-remote-buffer",
            _ => "--size",
        }
    }
}

/// Everything an engine needs to open (see the module documentation).
#[derive(Clone, Debug)]
pub struct EngineSpec {
    /// File, block device, or (nvme) /dev/ngXnY.
    pub target: PathBuf,
    /// The shared DMA buffer's registration pieces; index = buffer index.
    pub pieces: Vec<BufferPiece>,
    /// Slots (commands in flight at most).
    pub iodepth: u32,
    /// The block size, bytes.
    pub bs: u32,
    /// True when commands write to storage (the safety guard has passed).
    pub writes: bool,
    /// Index of the worker that owns this engine.
    pub worker: usize,
    /// CPUs the worker thread is pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
    /// The buffer is locked in memory. When it is not (the locked-memory
    /// limit was too low), an engine must not pin it either: registering
    /// it would be charged against the same limit. Also false when io_uring
    /// cannot register the buffer's pages (a `--buffer-file` that is not on
    /// tmpfs: `PlacementRecord::io_uring_registrable`).
    pub buffer_locked: bool,
}

impl EngineSpec {
    /// The buffer pieces as the iovecs a ring registers, index = buffer index.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        self.pieces
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.addr.cast(),
                iov_len: p.len,
            })
            .collect()
    }
}

/// Errors engines report.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The kernel (or this build) lacks a feature the engine needs.
    #[error("{feature} is not supported: {detail}")]
    Unsupported {
        /// The missing feature (`io_uring`, `IORING_OP_URING_CMD`, ...).
        feature: String,
        /// What to do about it.
        detail: String,
    },
    /// A system call failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        cause: std::io::Error,
    },
}

impl EngineError {
    /// Shorthand for an [`EngineError::Io`].
    pub fn io(what: impl Into<String>, cause: std::io::Error) -> Self {
        EngineError::Io {
            what: what.into(),
            cause,
        }
    }
}

/// One worker's path to the device.
pub trait Engine: Send {
    /// Short name for results (`io_uring`, `nvme-uring-cmd`, `nvme-ioctl`, `null`).
    fn name(&self) -> &'static str;

    /// Queues `cmd` in `slot` (0..iodepth) without blocking. The slot is free
    /// (its previous command completed).
    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError>;

    /// Submits everything queued, waits until at least `min_complete`
    /// completions are available (0 = do not wait) or `timeout` has passed
    /// (None = no limit), and appends all available completions to `out`.
    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError>;
}

/// What the command line says about the target, before anything is
/// inspected (flags parsed, nothing checked against the system yet).
#[derive(Clone, Debug, Default)]
pub struct TargetRequest {
    /// `--target` (None: the engine's default target).
    pub target: Option<PathBuf>,
    /// `--size`: the size of a file dmalab creates (None: [`DEFAULT_CREATE_BYTES`]).
    pub size_bytes: Option<u64>,
    /// `--allow-destroy`: the exact existing file or device that may be written.
    pub allow_destroy: Option<PathBuf>,
}

/// Size of a file dmalab creates when `--size` is not given (the scratch
/// file too).
pub const DEFAULT_CREATE_BYTES: u64 = 256 << 20;

impl TargetRequest {
    /// `--size`, or the default for a file dmalab creates.
    pub fn create_bytes(&self) -> u64 {
        self.size_bytes.unwrap_or(DEFAULT_CREATE_BYTES)
    }
}

/// What an engine found its target to be. Nothing is created yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// The path engines open (None: a scratch file, or no target at all).
    pub path: Option<PathBuf>,
    /// True when the target exists (dmalab creates it in `prepare` otherwise).
    pub exists: bool,
    /// `file`, `block`, `char`, `none`, or the engine's own word.
    pub kind: String,
    /// Size of the target: the space device offsets move in, bytes.
    pub size_bytes: u64,
    /// Logical block size of the target, bytes (`--bs` is a multiple).
    pub logical_block_size: u64,
    /// True when `prepare` will create the target (and remove it afterwards
    /// unless kept).
    pub creates: bool,
}

/// One engine's whole lifecycle for one run. The binary calls, in order:
/// [`inspect`](Driver::inspect) (flags known, nothing created), then
/// [`Plan::validate`], then [`preflight`](Driver::preflight), then (unless a
/// dry run) [`prepare`](Driver::prepare), then the run, which calls
/// [`open`](Driver::open) once per worker from the worker's thread; the
/// result is then described with [`header`](Driver::header),
/// [`device`](Driver::device) and [`facts`](Driver::facts). State found in one
/// step (an Identify, a connection, a created file) is kept in the driver;
/// what `prepare` created is undone when the driver drops.
pub trait Driver: Send + Sync {
    /// The engine this drives.
    fn kind(&self) -> EngineKind;

    /// What the requested target is for this engine, with the engine's own
    /// refusals (a path of the wrong kind, a flag the engine does not
    /// take). Opens nothing for writing and creates nothing.
    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError>;

    /// The most bytes one command to the inspected target may move, read
    /// from the device (`--max-blocks mdts`); `None` (the default) for an
    /// engine whose device states no such limit.
    fn max_transfer_bytes(&mut self) -> Result<Option<u64>, UsageError> {
        Ok(None)
    }

    /// Checks the validated plan against the device (transfer limits, the
    /// safety guard before storage writes). Creates nothing.
    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError>;

    /// Makes the target ready (creates and fills a file, formats a device
    /// when asked, connects to a peer) and sets `plan.target` to what the
    /// workers open. What it creates is removed when the driver drops,
    /// unless `plan.keep`.
    fn prepare(&mut self, plan: &mut Plan) -> Result<(), TargetError>;

    /// Opens one worker's queue (see the contract above).
    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError>;

    /// Lines printed above the result text (e.g. the NVMe namespace), each
    /// ending in a newline; empty when the engine has nothing to add.
    fn header(&self) -> String {
        String::new()
    }

    /// The target's description for the result header; by default what the
    /// system says about the prepared path.
    fn device(&self, plan: &Plan) -> Option<DeviceInfo> {
        plan.target.as_deref().and_then(DeviceInfo::describe)
    }

    /// Facts the engine adds to the load result under their own key
    /// (`nvme`, ...), gathered after the run.
    fn facts(&self) -> Option<(&'static str, serde_json::Value)> {
        None
    }

    /// What its commands carry over the bus, for the result: data unless
    /// the engine [moves none](EngineKind::moves_data), and NVMe commands
    /// only where an engine says so.
    fn traffic(&self) -> crate::result::Traffic {
        crate::result::Traffic {
            moves_data: self.kind().moves_data(),
            nvme_commands: false,
        }
    }
}

/// The device libraries' test seams, passed in by the binary (the only
/// place that reads them from its environment), as `dmalab-host` takes a
/// `HostRoot`: no engine reads an environment variable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceSeams {
    /// The GPU driver ([`gpu::DRIVER_ENV`]): `mock[:OPTIONS]` or a
    /// library; None: `libcuda.so.1`.
    pub gpu_driver: Option<String>,
    /// The NVMe passthrough path (`DMALAB_NVME_PATH`): `uring_cmd`,
    /// `ioctl` or `auto`; None: auto. Checked when a queue opens.
    pub nvme_path: Option<String>,
}

/// The factory: the driver of engine `kind`, fresh for one run.
pub fn driver(kind: EngineKind, seams: &DeviceSeams) -> Box<dyn Driver> {
    match kind {
        EngineKind::IoUring => Box::new(uring::UringDriver::default()),
        EngineKind::Nvme => Box::new(nvme::NvmeDriver::new(seams.nvme_path.clone())),
        EngineKind::Null => Box::new(null::NullDriver::default()),
        EngineKind::Gpu => Box::new(gpu::GpuDriver::new(seams.gpu_driver.clone())),
        EngineKind::Rdma => Box::new(rdma::RdmaDriver::default()),
    }
}

/// What a driver's `prepare` says when called before its `inspect` (a bug
/// in the caller: the binary always inspects first).
pub(crate) fn not_inspected() -> TargetError {
    EngineError::io(
        "prepare before inspect",
        std::io::Error::from(std::io::ErrorKind::InvalidInput),
    )
    .into()
}

/// The directory a file at `path` would be created in.
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
