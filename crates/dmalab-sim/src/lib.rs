//! dmalab sim: trace-driven simulator of CPU and DMA traffic through an LLC,
//! DDIO ways, a dedicated DMA cache and DRAM banks.
//!
//! - [`trace`]: the trace format (binary and text), its readers and
//!   writers: the `dmalab-trace` crate, re-exported because the simulator's
//!   API takes its records.
//! - [`config`]: every parameter, TOML presets (`params/paper.toml`).
//! - State, timing and statistics apart (as in r2vm's memory model):
//!   [`cache`] and [`dram`] hold state (the DRAM also its bank timing),
//!   [`engine`] replays a trace through one [`scheme::Scheme`] and counts.
//! - [`synth`]: fixed-seed synthetic workloads and MSR Cambridge replay.
//! - [`run`]: every scheme on one trace, parameter sweeps, paper orderings.
//! - [`select`]: the parameter set, overrides and schemes a run asks for,
//!   checked as user input; [`report`]: the result documents of
//!   `dmalab sim compare` and `sweep` and their text.
//! - [`reqsize`]: the DMA request-size distribution `dmalab sim stat`
//!   prints.
//! - [`dramcheck`]: request streams that check [`dram`] against DRAMsim3
//!   and Ramulator 2.

pub mod cache;
pub mod config;
pub mod dram;
pub mod dramcheck;
pub mod engine;
pub mod report;
pub mod reqsize;
pub mod run;
pub mod scheme;
pub mod select;
pub mod synth;

pub use dmalab_trace as trace;

pub use config::SimConfig;
pub use engine::{simulate, SchemeResult};
pub use scheme::Scheme;
