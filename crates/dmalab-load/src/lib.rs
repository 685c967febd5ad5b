//! dmalab load: precisely shaped DMA load into one host buffer.
//!
//! Layers (each a module): the pattern stream (which buffer region and device
//! offset each command uses), the rate limiter and its independent checker,
//! the engines (how a command reaches the device: io_uring on files/block
//! devices, NVMe passthrough, null), the buffer, the target, and the runner
//! (one ring per pinned worker) with its accounting; the live counters are
//! `dmalab_core::livestats`. The device safety guard lives in
//! `dmalab_core::safety`, shared with `page`.

pub mod buffer;
pub mod check;
pub mod child;
pub mod engine;
pub mod limiter;
pub mod pattern;
pub mod plan;
pub mod result;
pub mod run;
pub mod target;
pub mod worker;
