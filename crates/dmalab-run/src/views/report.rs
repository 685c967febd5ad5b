//! What the report of result documents (`report::document`) draws from
//! each document besides its figures ([`super::doc`]): the header, the
//! latency buckets, load's per-second samples, stat's counter series and
//! the simulator's schemes, one view per command, every field read
//! leniently ([`super::lenient`]) so that a document lacking one plot
//! still draws the others. The schema tests write each producer's own
//! result and read it back: load and probe here, page, stat and sim
//! compare in the binary's `cmd::children` tests.

use super::lenient;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::BTreeMap;

/// A document's `result` read as `R` (empty where it is not one).
#[derive(Deserialize)]
#[serde(bound = "R: DeserializeOwned + Default")]
struct InResult<R> {
    #[serde(deserialize_with = "lenient::or_default")]
    result: R,
}

/// A document's `result` read through the view `R`.
pub fn result<R: DeserializeOwned + Default>(doc: &serde_json::Value) -> R {
    lenient::view::<InResult<R>>(doc)
        .map(|d| d.result)
        .unwrap_or_default()
}

/// Where, when and by what a document was made, and its configuration
/// (`dmalab_core::schema::ResultDoc` less its result).
#[derive(Debug, Default, Deserialize)]
pub struct Header {
    /// The host it ran on.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub host: Host,
    /// When it started.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub started_at: Option<String>,
    /// The program that wrote it.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub tool: Tool,
    /// Its warnings; `None` for one that is not text.
    #[serde(default, deserialize_with = "lenient::values")]
    pub warnings: Vec<Option<String>>,
    /// The resolved configuration, shown as it is (`null` where none).
    #[serde(default)]
    pub config: serde_json::Value,
}

impl Header {
    /// `doc`'s header.
    pub fn of(doc: &serde_json::Value) -> Header {
        lenient::view(doc).unwrap_or_default()
    }
}

/// `dmalab_core::host::HostInfo`, the part the report shows.
#[derive(Debug, Default, Deserialize)]
pub struct Host {
    /// Host name.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub hostname: Option<String>,
    /// CPU model name.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub cpu_model: Option<String>,
    /// CPUs online.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub cpus_online: Option<u64>,
    /// Kernel release.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub kernel: Option<String>,
}

/// `dmalab_core::schema::ToolInfo`.
#[derive(Debug, Default, Deserialize)]
pub struct Tool {
    /// The program's version.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub version: Option<String>,
}

/// A latency summary's buckets (`dmalab_core::hist::LatencySummary`).
#[derive(Debug, Default, Deserialize)]
pub struct Latency {
    /// In order; a bucket lacking one of its numbers is left out.
    #[serde(default, deserialize_with = "lenient::list")]
    buckets: Vec<Bucket>,
}

/// One bucket (`dmalab_core::hist::Bucket`).
#[derive(Debug, Default, Deserialize)]
struct Bucket {
    #[serde(default, deserialize_with = "lenient::opt")]
    lo_ns: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt")]
    hi_ns: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt")]
    count: Option<u64>,
}

impl Latency {
    /// The whole buckets: (lo_ns, hi_ns, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.buckets
            .iter()
            .filter_map(|b| Some((b.lo_ns?, b.hi_ns?, b.count?)))
    }
}

/// `dmalab load`'s result (`dmalab_load::result::LoadResult`), what its
/// plots draw.
#[derive(Debug, Default, Deserialize)]
pub struct Load {
    /// Command latency.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub lat_ns: Latency,
    /// The per-second series.
    #[serde(default, deserialize_with = "lenient::list")]
    pub samples: Vec<LoadSample>,
    /// A rate was set (the rate checker's verdict is there).
    #[serde(default, deserialize_with = "lenient::is_object")]
    pub rate_check: bool,
}

/// One second of load (`dmalab_load::result::Sample`).
#[derive(Debug, Default, Deserialize)]
pub struct LoadSample {
    /// End of the interval, seconds since the start.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub t_s: Option<f64>,
    /// Data bandwidth, bytes per second.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub bw_bytes: Option<f64>,
    /// Commands per second.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub iops: Option<f64>,
    /// The command rate target in force.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub rate_target_iops: Option<f64>,
}

/// `dmalab probe latency` and `probe bandwidth`'s results, what their
/// plots draw.
#[derive(Debug, Default, Deserialize)]
pub struct Probe {
    /// Per-access latency.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub per_access: Latency,
}

/// `dmalab page`'s result (`dmalab_page::report::PageResult`), what its
/// plots draw.
#[derive(Debug, Default, Deserialize)]
pub struct Page {
    /// All accesses.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub total: PageClasses,
    /// Reads.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub read: PageClasses,
    /// Writes.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub write: PageClasses,
}

/// `dmalab_page::report::ClassSet`: accesses by fault class.
#[derive(Debug, Default, Deserialize)]
pub struct PageClasses {
    /// Accesses that hit.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub hit: PageClass,
    /// Minor faults.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub minor: PageClass,
    /// Major faults.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub major: PageClass,
    /// Every access.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub all: PageClass,
}

/// One class of accesses.
#[derive(Debug, Default, Deserialize)]
pub struct PageClass {
    /// Its latency.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub lat: Latency,
}

/// `dmalab stat`'s result, its counters' series.
#[derive(Debug, Default, Deserialize)]
pub struct Stat {
    /// The counters' report.
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub counters: StatCounters,
}

/// `dmalab_counters::session::CounterReport`, its series.
#[derive(Debug, Default, Deserialize)]
pub struct StatCounters {
    /// One point per interval.
    #[serde(default, deserialize_with = "lenient::list")]
    pub series: Vec<SeriesPoint>,
}

/// One interval (`dmalab_counters::session::SeriesPoint`).
#[derive(Debug, Default, Deserialize)]
pub struct SeriesPoint {
    /// End of the interval, seconds.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub t_s: Option<f64>,
    /// Its length, seconds.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub interval_s: Option<f64>,
    /// Each event's count in the interval, by id.
    #[serde(default, deserialize_with = "lenient::map")]
    pub events: BTreeMap<String, Option<f64>>,
}

/// `dmalab sim compare`'s result (`dmalab_sim::report::CompareResult`).
#[derive(Debug, Default, Deserialize)]
pub struct SimCompare {
    /// One per scheme.
    #[serde(default, deserialize_with = "lenient::list")]
    pub schemes: Vec<SimScheme>,
}

/// One scheme's outcome.
#[derive(Debug, Default, Deserialize)]
pub struct SimScheme {
    /// Its name.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub scheme: Option<String>,
    /// Simulated time, ns.
    #[serde(default, deserialize_with = "lenient::opt")]
    pub total_ns: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_core::hist::LatencySummary;
    use dmalab_core::host::HostInfo;
    use dmalab_core::schema::ResultDoc;
    use std::time::SystemTime;

    /// A document as the producing command writes it.
    fn written<C: serde::Serialize, R: serde::Serialize>(
        host: HostInfo,
        config: C,
        result: R,
    ) -> serde_json::Value {
        let mut doc = ResultDoc::new("load", host, config, result, SystemTime::now());
        doc.warnings = vec!["w1".into()];
        serde_json::to_value(&doc).unwrap()
    }

    fn buckets() -> LatencySummary {
        LatencySummary::from_buckets(&[(100, 110, 4), (110, 120, 1)])
    }

    #[test]
    fn the_header_is_read_from_the_result_documents_own_type() {
        let host = HostInfo {
            hostname: "h1".into(),
            cpu_model: "cpu".into(),
            cpus_online: 8,
            kernel: "6.1".into(),
            ..Default::default()
        };
        let doc = written(host, serde_json::json!({"bs": 4096}), ());
        let h = Header::of(&doc);
        assert_eq!(h.host.hostname.as_deref(), Some("h1"));
        assert_eq!(h.host.cpu_model.as_deref(), Some("cpu"));
        assert_eq!(h.host.cpus_online, Some(8));
        assert_eq!(h.host.kernel.as_deref(), Some("6.1"));
        assert!(h.started_at.is_some_and(|s| !s.is_empty()));
        assert_eq!(
            h.tool.version.as_deref(),
            Some(dmalab_core::schema::ToolInfo::this().version.as_str())
        );
        assert_eq!(h.warnings, [Some("w1".to_string())]);
        assert_eq!(h.config, serde_json::json!({"bs": 4096}));
    }

    #[test]
    fn load_plots_are_read_from_loads_own_result() {
        use dmalab_load::result::{LoadResult, Sample};
        let mut r = LoadResult {
            lat_ns: buckets(),
            ..Default::default()
        };
        r.samples = vec![Sample {
            t_s: 1.0,
            bw_bytes: 2e9,
            iops: 5e5,
            rate_target_iops: Some(400_000),
            ..Default::default()
        }];
        r.rate_check = Some(dmalab_load::check::RateCheck {
            unit: "commands".into(),
            target_per_s: 4e5,
            windows_per_s: vec![],
            windows_target_per_s: vec![],
            window_max_error_pct: None,
            windows_held_ns: vec![],
            held_max_pct: 0.0,
            windows_steal_ns: vec![],
            steal_max_pct: 0.0,
            unexplained_max_error_pct: 0.0,
            mean_per_s: None,
            mean_error_pct: None,
            no_window: None,
            ks: None,
        });
        let v: Load = result(&written(HostInfo::default(), (), &r));
        assert_eq!(
            v.lat_ns.buckets().collect::<Vec<_>>(),
            [(100, 110, 4), (110, 120, 1)]
        );
        let s = &v.samples[0];
        assert_eq!(
            (s.t_s, s.bw_bytes, s.iops, s.rate_target_iops),
            (Some(1.0), Some(2e9), Some(5e5), Some(4e5))
        );
        assert!(v.rate_check);
        r.rate_check = None;
        let v: Load = result(&written(HostInfo::default(), (), &r));
        assert!(!v.rate_check);
    }

    #[test]
    fn probe_plots_are_read_from_the_probes_own_result() {
        let r = dmalab_probe::latency::LatencyResult {
            per_access: Some(buckets()),
            ..Default::default()
        };
        let v: Probe = result(&written(HostInfo::default(), (), &r));
        assert_eq!(v.per_access.buckets().count(), 2);
    }

    /// One bucket short of a number is left out, the others drawn; a
    /// result of another shape draws nothing.
    #[test]
    fn a_damaged_bucket_is_left_out_alone() {
        let doc = serde_json::json!({"result": {"lat_ns": {"buckets": [
            {"lo_ns": 1, "hi_ns": 2, "count": 3},
            {"lo_ns": 2, "hi_ns": "x", "count": 3},
            7
        ]}, "samples": 5}});
        let v: Load = result(&doc);
        assert_eq!(v.lat_ns.buckets().collect::<Vec<_>>(), [(1, 2, 3)]);
        assert!(v.samples.is_empty());
        let v: Load = result(&serde_json::json!({"result": 3}));
        assert_eq!(v.lat_ns.buckets().count(), 0);
    }
}
