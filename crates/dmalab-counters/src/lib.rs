//! Hardware and software counters, synchronized with dmalab's own work.
//!
//! * [`catalog`]: the PMUs the kernel exposes under
//!   `/sys/bus/event_source/devices` (type, cpumask, format bit fields,
//!   named events with `.scale`/`.unit`, the IIO PMU-to-root-port map).
//! * [`spec`]: event specs in perf's own syntax
//!   (`uncore_iio_0/event=0x83,umask=0x04,ch_mask=0xF,fc_mask=0x7/`,
//!   `cpu/cache-misses/`, `page-faults`), encoded into `perf_event_attr`
//!   fields from the format files, as `perf` does.
//! * [`sys`]: `perf_event_open`, groups, `read()` with
//!   `TOTAL_TIME_ENABLED|RUNNING`.
//! * [`session`]: a set of events opened for a scope (this process's
//!   threads, a child command, CPUs), started, sampled and stopped on the
//!   caller's clock; totals scaled for multiplexing with the running
//!   fraction, and every event the host cannot count with the reason.
//! * [`recipes`]: events turned into named metrics with units, keyed by CPU
//!   vendor, family and model.
//! * [`resctrl`]: memory bandwidth monitoring groups (`mbm_total_bytes`,
//!   `mbm_local_bytes`), recorded in a ledger so a killed run's group is
//!   removed by `dmalab cleanup` or the next start.
//! * [`perfstat`]: `perf stat`'s output forms: `-r` spread, `-I` lines, `-x` CSV.
//! * [`check`]: the thesis' expected-versus-counted check for storage loads.
//! * [`socket`]: counts of counters opened on CPUs summed per socket.
//!
//! Linux-only: everything here talks to Linux interfaces, and stays here.

pub mod catalog;
pub mod check;
pub mod child;
pub mod host;
pub mod perfstat;
pub mod recipes;
pub mod resctrl;
pub mod session;
pub mod socket;
pub mod spec;
pub mod sys;

pub use host::host_report;

use std::path::PathBuf;

/// Where the counter layer looks for the host's interfaces. The defaults are
/// the real paths; tests point them at fake trees under their own root
/// (the binary reads `DMALAB_PMU_ROOT`, `DMALAB_RESCTRL_ROOT` and
/// `DMALAB_CPUINFO`, see docs/counters.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    /// PMU directories, normally `/sys/bus/event_source/devices`.
    pub pmu: PathBuf,
    /// The resctrl filesystem, normally `/sys/fs/resctrl`.
    pub resctrl: PathBuf,
    /// CPU identification, normally `/proc/cpuinfo`.
    pub cpuinfo: PathBuf,
    /// `perf_event_paranoid`, normally `/proc/sys/kernel/perf_event_paranoid`.
    pub paranoid: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            pmu: PathBuf::from("/sys/bus/event_source/devices"),
            resctrl: PathBuf::from("/sys/fs/resctrl"),
            cpuinfo: PathBuf::from("/proc/cpuinfo"),
            paranoid: PathBuf::from("/proc/sys/kernel/perf_event_paranoid"),
        }
    }
}

impl Roots {
    /// The defaults, each overridden by its environment variable when set:
    /// `DMALAB_PMU_ROOT`, `DMALAB_RESCTRL_ROOT`, `DMALAB_CPUINFO`,
    /// `DMALAB_PERF_PARANOID`.
    pub fn from_env() -> Self {
        let mut r = Self::default();
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(p) = var("DMALAB_PMU_ROOT") {
            r.pmu = p;
        }
        if let Some(p) = var("DMALAB_RESCTRL_ROOT") {
            r.resctrl = p;
        }
        if let Some(p) = var("DMALAB_CPUINFO") {
            r.cpuinfo = p;
        }
        if let Some(p) = var("DMALAB_PERF_PARANOID") {
            r.paranoid = p;
        }
        r
    }
}
