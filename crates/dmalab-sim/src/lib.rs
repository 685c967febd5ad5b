//! dmalab sim: trace-driven simulator of CPU and DMA traffic through an LLC,
//! DDIO ways, a dedicated DMA cache and DRAM banks.
//!
//! - [`trace`]: the trace format (binary and text), converters, and the
//!   [`trace::TraceWriter`] that `dmalab load --trace` records into.

pub mod trace;
