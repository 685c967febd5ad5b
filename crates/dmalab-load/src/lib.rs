//! dmalab load: precisely shaped DMA load into one host buffer.
//!
//! Layers (each a module): the pattern stream (which buffer region and device
//! offset each command uses), the rate limiter, the engines (how a command
//! reaches the device: io_uring on files/block devices, NVMe passthrough,
//! null), the workers (one ring per pinned worker), accounting and safety.

pub mod engine;
