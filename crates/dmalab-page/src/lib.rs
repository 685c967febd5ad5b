//! dmalab page: paging latency by fault class (pmbench done right), with a
//! self-cleaning cgroup/swap set-up.
//!
//! - [`config`]: the resolved plan (pmbench's parameters and the set-up).
//! - [`worker`]: the measured work, in a child process inside the cgroup;
//!   every access is timed and classified hit / minor / major from the
//!   kernel's per-thread fault counters.
//! - [`run`]: the parent: host checks, ledger-backed set-up and teardown.
//! - [`state`]: the ledger under /run/dmalab and `dmalab cleanup`.
//! - [`report`]: the result schema, the paper's Table 2, the text summary.
//! - [`xml`]: pmbench's XML report format, export and import.

pub mod cgroup;
pub mod child;
pub mod config;
pub mod devguard;
pub mod pattern;
pub mod perfring;
pub mod report;
pub mod run;
pub mod state;
pub mod swap;
pub mod sysinfo;
pub mod timer;
pub mod worker;
pub mod xml;
