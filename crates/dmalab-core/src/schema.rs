//! The one result schema shared by every dmalab command.
//!
//! A result document is a [`ResultDoc`] with the command's own resolved
//! configuration (`C`) and result (`R`). Everything that leaves dmalab as a
//! result (JSON, text, CSV, the HTML report, experiment records) is rendered
//! from it. Keys carry their unit (`bw_bytes`, `lat_ns`, `runtime_ns`), as
//! fio's JSON does.

use crate::host::HostInfo;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

/// Bumped whenever a field changes meaning or disappears (adding fields does
/// not bump it).
pub const SCHEMA_VERSION: u32 = 1;

/// Name and version of the program that wrote a result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ToolInfo {
    /// Always `dmalab` for our own results; pmbench imports say `pmbench`.
    pub name: String,
    /// The program's version.
    pub version: String,
}

impl ToolInfo {
    /// This build of dmalab.
    pub fn this() -> Self {
        Self {
            name: "dmalab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Ran to its stop condition.
    #[default]
    Completed,
    /// Stopped early by SIGINT/SIGTERM; figures cover the part that ran.
    Interrupted,
    /// Failed; figures (if any) cover the part that ran.
    Failed,
}

/// A complete result document.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ResultDoc<C, R> {
    /// Version of this schema, [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The program that wrote it.
    pub tool: ToolInfo,
    /// The command, space separated (`load`, `probe latency`, `page`).
    pub command: String,
    /// The command line as given.
    pub argv: Vec<String>,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: String,
    /// How it ended.
    pub status: RunStatus,
    /// Machine description.
    pub host: HostInfo,
    /// The fully resolved configuration (every default filled in).
    pub config: C,
    /// The command's figures.
    pub result: R,
    /// Things the user should know (fallbacks taken, noisy host, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl<C, R> ResultDoc<C, R> {
    /// Wraps a configuration and result; `started` is when the run began.
    pub fn new(command: &str, host: HostInfo, config: C, result: R, started: SystemTime) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo::this(),
            command: command.into(),
            argv: std::env::args().collect(),
            started_at: rfc3339(started),
            finished_at: rfc3339(SystemTime::now()),
            status: RunStatus::Completed,
            host,
            config,
            result,
            warnings: Vec::new(),
        }
    }
}

/// RFC 3339 timestamp in UTC with seconds precision.
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Nanoseconds in a duration, saturating.
pub fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// User and system CPU time of a thread or process, nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CpuUsage {
    /// User CPU time, nanoseconds.
    pub usr_ns: u64,
    /// System CPU time, nanoseconds.
    pub sys_ns: u64,
}

impl CpuUsage {
    /// CPU time of the calling thread so far.
    pub fn thread() -> Self {
        Self::getrusage(libc::RUSAGE_THREAD)
    }

    /// CPU time of the whole process so far.
    pub fn process() -> Self {
        Self::getrusage(libc::RUSAGE_SELF)
    }

    fn getrusage(who: libc::c_int) -> Self {
        // SAFETY: rusage is plain data; getrusage fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to our own struct.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return Self::default();
        }
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
        Self {
            usr_ns: tv(ru.ru_utime),
            sys_ns: tv(ru.ru_stime),
        }
    }

    /// Difference `self - earlier`.
    pub fn since(&self, earlier: &CpuUsage) -> CpuUsage {
        CpuUsage {
            usr_ns: self.usr_ns.saturating_sub(earlier.usr_ns),
            sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_roundtrips() {
        let doc = ResultDoc::new(
            "load",
            HostInfo::default(),
            serde_json::json!({"bs_bytes": 4096}),
            serde_json::json!({"bw_bytes": 1.0}),
            SystemTime::UNIX_EPOCH,
        );
        let text = serde_json::to_string(&doc).unwrap();
        assert!(text.contains("\"schema_version\":1"));
        assert!(text.contains("\"started_at\":\"1970-01-01T00:00:00Z\""));
        let back: ResultDoc<serde_json::Value, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn cpu_usage_grows() {
        let a = CpuUsage::thread();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = CpuUsage::thread();
        assert!(b.usr_ns + b.sys_ns >= a.usr_ns + a.sys_ns);
    }
}
