//! The engine interface: how one worker's commands reach a device.
//!
//! One small trait, one module per engine, one factory `match`. An engine
//! owns one submission/completion queue (an io_uring ring, or a synchronous
//! ioctl loop) for one worker. The worker loop above it knows nothing about
//! rings: it queues commands into free slots, then asks the engine to submit
//! and hand back completions.
//!
//! DRAFT from the skeleton: the load work may refine it; the NVMe engine
//! (crates/dmalab-load/src/engine/nvme.rs, backed by dmalab-nvme) implements
//! the same trait.

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
    /// Nothing at all (baselines): completes at once.
    Noop,
}

/// One command as the pattern stream produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// What to do.
    pub op: Op,
    /// Byte offset into the shared DMA buffer (0 for Flush/Noop).
    pub buf_offset: u64,
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

/// Errors engines report.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The kernel lacks a feature the engine needs.
    #[error("{feature} is not supported by this kernel: {detail}")]
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

/// One worker's path to the device.
pub trait Engine: Send {
    /// Short name for results (`io_uring`, `nvme-uring-cmd`, `nvme-ioctl`, `null`).
    fn name(&self) -> &'static str;

    /// Queues `cmd` in `slot` (0..iodepth) without blocking. The slot is free
    /// (its previous command completed).
    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError>;

    /// Submits everything queued, waits until at least `min_complete`
    /// completions are available (0 = do not wait), and appends all available
    /// completions to `out`.
    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError>;
}
