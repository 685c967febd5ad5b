//! dmalab probe: per-access memory latency histograms, MLC-style bandwidth
//! and loaded latency.
//!
//! - [`latency`]: pointer chase (and other patterns) over a buffer, timed by
//!   a clock around many steps and by `rdtscp` around every access;
//! - [`bandwidth`]: R, W2, W3, W5, W6, copy and triad traffic;
//! - [`loaded`]: one latency thread against a delay sweep of load threads;
//! - the cycle counter, its calibration and the timer's own cost live in
//!   [`dmalab_core::sys::tsc`] (shared with `dmalab page`);
//! - [`mem`]: buffers on 4 KiB, THP or hugetlbfs pages, NUMA binding;
//! - [`access`]: the chain construction and the pattern generators;
//! - [`text`]: the human summaries.
//!
//! Tested on an AMD EPYC (Zen 1) KVM guest. The Intel paths (CPUID leaves
//! 0x15/0x16) are written to the SDM but untested here.

pub mod access;
pub mod bandwidth;
pub mod child;
pub mod kernels;
pub mod latency;
pub mod loaded;
pub mod mem;
pub mod options;
pub mod text;

use dmalab_core::UsageError;
use thiserror::Error;

/// What can go wrong in a probe.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// Bad input (exit 2).
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// The pages asked for cannot be had.
    #[error("--pages: {0}")]
    Pages(String),
    /// A system call failed.
    #[error("{0}")]
    System(String),
}
