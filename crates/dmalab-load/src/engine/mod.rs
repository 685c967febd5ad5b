//! The engine interface: how one worker's commands reach a device.
//!
//! One small trait, one module per engine, one factory `match` ([`open`]).
//! An engine owns one submission/completion queue (an io_uring ring, or a
//! synchronous ioctl loop) for one worker. The worker loop above it knows
//! nothing about rings: it queues commands into free slots, then asks the
//! engine to submit and hand back completions.
//!
//! # The contract
//!
//! **What an engine gets** ([`EngineSpec`], handed to its `open` function):
//! * `target`: the path to open. For `io_uring` a regular file or block
//!   device (opened `O_DIRECT`); for `nvme` the NVMe generic character
//!   device `/dev/ngXnY`. **The caller has already applied the safety guard**
//!   (`dmalab_core::safety::check_write_target`, which for `/dev/ngXnY`
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

use std::path::PathBuf;
use std::time::Duration;

pub mod null;
pub mod nvme;
pub mod rdma;
pub mod uring;

/// What a command does, from the *device's* point of view.
///
/// `--direction write` (the device writes memory) issues [`Op::Read`]s;
/// `--direction read` (the device reads memory) issues [`Op::Write`]s.
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
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// io_uring, O_DIRECT, registered buffers and file (files, block devices).
    #[value(name = "io_uring")]
    IoUring,
    /// NVMe passthrough on /dev/ngXnY (io_uring URING_CMD, ioctl fallback).
    Nvme,
    /// Moves no data; every command completes at once (tests the tool itself).
    Null,
}

impl EngineKind {
    /// The name used on the command line and in results.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::IoUring => "io_uring",
            EngineKind::Nvme => "nvme",
            EngineKind::Null => "null",
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
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl EngineError {
    /// Shorthand for an [`EngineError::Io`].
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        EngineError::Io {
            what: what.into(),
            source,
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

/// The factory: opens the engine `kind` for one worker.
pub fn open(kind: EngineKind, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
    match kind {
        EngineKind::IoUring => Ok(Box::new(uring::UringEngine::open(spec)?)),
        EngineKind::Nvme => nvme::open(spec),
        EngineKind::Null => Ok(Box::new(null::NullEngine::new(spec))),
    }
}
