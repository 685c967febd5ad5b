//! Shared pieces of dmalab: one result schema, the host description, unit
//! parsing, CPU lists and pinning, latency histograms, atomic output files and
//! the stop flag that SIGINT/SIGTERM raise, and the facts of the running
//! system ([`sys`]: clocks, TSC, CPU flags, block-device size, swaps, root).
//!
//! Every command builds a [`schema::ResultDoc`] and hands it to
//! [`output::write_result`]; nothing else serialises results.

pub mod child;
pub mod cpus;
pub mod error;
pub mod hist;
pub mod hist_table;
pub mod host;
pub mod hugetlb;
pub mod ledger;
pub mod livestats;
pub mod lock;
pub mod output;
pub mod placement;
pub mod process;
pub mod progress;
pub mod ratecontrol;
pub mod safefile;
pub mod safety;
pub mod schema;
pub mod signal;
pub mod sys;
pub mod text;
pub mod units;

pub use error::UsageError;
