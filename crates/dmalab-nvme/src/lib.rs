//! NVMe protocol pieces for dmalab: submission-entry building (Read, Write,
//! Flush, Identify, Format NVM), Identify Controller/Namespace parsing, and
//! the passthrough paths (`NVME_IOCTL_*` and io_uring `IORING_OP_URING_CMD`).
//!
//! - [`cmd`]: the 72-byte passthrough command and its builders (NLB is
//!   zero-based: one block is NLB 0).
//! - [`identify`]: Identify Controller/Namespace parsing (MDTS, LBA formats).
//! - [`dev`]: opening a namespace, the synchronous ioctls, [`dev::NvmeInfo`].
//! - [`uring`]: the io_uring passthrough queue (128-byte SQEs, 32-byte CQEs).
//! - [`queue`]: one queue over either path, io_uring preferred, ioctl fallback.

pub mod cmd;
pub mod dev;
pub mod identify;
pub mod queue;
pub mod uring;

pub use cmd::PassthruCmd;
pub use dev::{namespace_names, NvmeDevice, NvmeInfo};
pub use identify::{IdController, IdNamespace, LbaFormat, RelativePerformance};
pub use queue::{NvmeQueue, PassthruPath, PathChoice};
pub use uring::UringCompletion;

/// Errors of the NVMe layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        cause: std::io::Error,
    },
    /// The device completed a command with an error status.
    #[error("{what}: the device returned NVMe status {status:#x} ({})", status_text(*status))]
    Nvme {
        /// What was being done.
        what: String,
        /// Status field (status code type and status code).
        status: u32,
    },
    /// The path is not an NVMe namespace.
    #[error("{path} is not usable as an NVMe namespace: {why}")]
    NotNvme {
        /// The path.
        path: String,
        /// Why.
        why: String,
    },
    /// The kernel lacks something.
    #[error("{what} is not supported: {detail}")]
    Unsupported {
        /// The missing feature.
        what: String,
        /// Details and what to do.
        detail: String,
    },
    /// A command that cannot be built.
    #[error("bad NVMe command: {0}")]
    BadCommand(String),
    /// Identify returned less than 4096 bytes.
    #[error("Identify data is {0} bytes, expected 4096")]
    BadIdentify(usize),
    /// The submission queue stayed full after a submit.
    #[error("io_uring submission queue is full")]
    QueueFull,
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, cause: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            cause,
        }
    }
}

/// A few generic status codes by name (status code type 0).
pub fn status_text(status: u32) -> &'static str {
    let sct = (status >> 8) & 0x7;
    let sc = status & 0xff;
    match (sct, sc) {
        (0, 0x01) => "invalid command opcode",
        (0, 0x02) => "invalid field in command",
        (0, 0x04) => "data transfer error",
        (0, 0x06) => "internal error",
        (0, 0x0b) => "invalid namespace or format",
        (0, 0x80) => "LBA out of range",
        (0, 0x81) => "capacity exceeded",
        (0, 0x82) => "namespace not ready",
        (1, _) => "command specific error",
        (2, _) => "media or data integrity error",
        _ => "see the NVMe specification's status codes",
    }
}
