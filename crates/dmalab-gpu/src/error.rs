//! What can go wrong setting a GPU up or copying.

use crate::api::CuError;

/// Errors of the GPU layer. Each names what was being done and what to do.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The driver library could not be opened.
    #[error("cannot load the CUDA driver {library} ({detail}); --engine gpu needs an NVIDIA GPU with its driver installed (no CUDA toolkit is needed)")]
    NoDriver {
        /// The library asked for.
        library: String,
        /// `dlerror()`'s words.
        detail: String,
    },
    /// The library lacks an entry point dmalab calls.
    #[error("{library} has no {symbol}: the NVIDIA driver is too old or this is not the driver library (CUDA 11 or newer is needed)")]
    MissingSymbol {
        /// The library.
        library: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// A driver call failed.
    #[error("{call} failed{context}: {text}")]
    Driver {
        /// The driver function (`cuMemAlloc_v2`).
        call: &'static str,
        /// What it was for (`" allocating 256 MiB on GPU 0"`), may be empty.
        context: String,
        /// The code.
        code: CuError,
        /// The code's name and the driver's own words.
        text: String,
    },
    /// A GPU index the driver does not have.
    #[error("GPU {index} does not exist: the driver sees {count} GPU(s) (numbered from 0)")]
    NoSuchGpu {
        /// Index asked for.
        index: u32,
        /// GPUs the driver sees.
        count: u32,
    },
    /// `DMALAB_GPU_DRIVER` is malformed.
    #[error("DMALAB_GPU_DRIVER: {0}")]
    Spec(crate::mock::MockOptionError),
}

impl GpuError {
    /// True for failures that mean "this host cannot run the GPU engine"
    /// (no driver, no device, a stub library), as opposed to a failure
    /// while running.
    pub fn is_host_lacking(&self) -> bool {
        match self {
            GpuError::NoDriver { .. } | GpuError::MissingSymbol { .. } => true,
            GpuError::NoSuchGpu { .. } => true,
            GpuError::Driver { code, .. } => matches!(code.0, 2 | 3 | 34 | 100 | 101 | 802 | 803),
            GpuError::Spec(_) => true,
        }
    }
}
