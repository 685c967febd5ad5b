//! dmalab run/report/compare: interference experiments, statistics and the
//! HTML report.
//!
//! - [`experiment`]: the TOML experiment file, checked with line numbers.
//! - [`plan`]: the runs it makes, in order (plain, then each load, repeated).
//! - [`runner`]: child processes, pinning, evidence from the aggressor's
//!   live-stats file (`dmalab_core::livestats`), one fsynced record per run
//!   ([`record`]), resume.
//! - [`stats`] and [`analysis`]: statistics per cell.
//! - [`report`]: the self-contained HTML report and CSV, a leaf that
//!   nothing else here calls; [`draw`]: its SVG plots, shared with the
//!   throttle report; [`compare`]: two
//!   result files side by side.

pub mod analysis;
pub mod child;
pub mod compare;
pub mod ddio_axis;
pub mod document;
pub mod draw;
pub mod error;
pub mod experiment;
pub mod groups;
pub mod plan;
pub mod progress;
pub mod record;
pub mod report;
pub mod runner;
pub mod stats;
pub mod sweep_axis;
pub mod views;

pub use error::{ExpError, RecordFault, RunError};
