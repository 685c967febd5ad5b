//! Errors of the RDMA layer.

use dmalab_core::UsageError;

/// What can go wrong setting up or driving RDMA.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// Bad input or a host that lacks what was asked for (exit 2).
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// A verbs call failed.
    #[error("{what} failed: {cause}")]
    Verbs {
        /// The call and its object (`ibv_reg_mr of 64 MiB`).
        what: String,
        /// The errno it left (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// The peer broke the handshake protocol or went away during it.
    #[error("peer {peer}: {message}")]
    Peer {
        /// The peer's address.
        peer: String,
        /// What it did wrong.
        message: String,
    },
    /// A socket call failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
}

impl RdmaError {
    /// A failed verbs call, with the thread's errno.
    pub fn verbs(what: impl Into<String>) -> Self {
        RdmaError::Verbs {
            what: what.into(),
            cause: std::io::Error::last_os_error(),
        }
    }

    /// A failed verbs call that returned its errno.
    pub fn verbs_rc(what: impl Into<String>, rc: i32) -> Self {
        RdmaError::Verbs {
            what: what.into(),
            cause: std::io::Error::from_raw_os_error(rc.abs()),
        }
    }

    /// A failed socket call.
    pub fn io(what: impl Into<String>, cause: std::io::Error) -> Self {
        RdmaError::Io {
            what: what.into(),
            cause,
        }
    }
}
