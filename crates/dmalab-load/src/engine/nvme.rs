//! The NVMe passthrough engine (io_uring `URING_CMD` on /dev/ngXnY, with a
//! synchronous ioctl fallback). Placeholder: the nvme work replaces this
//! file entirely; the signature of [`open`] is what the factory calls.

use super::{Engine, EngineError, EngineSpec};

/// Opens the NVMe engine for one worker (see the contract in `engine/mod.rs`).
pub fn open(spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
    let _ = spec;
    Err(EngineError::Unsupported {
        feature: "--engine nvme".into(),
        detail: "the nvme engine is not built yet; use --engine io_uring on /dev/nvmeXnY".into(),
    })
}
