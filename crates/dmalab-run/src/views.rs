//! Typed views of the result documents the runner reads back from its
//! dmalab children: only the fields it needs, each named once here, read
//! with serde instead of by JSON pointer. The tests write real documents
//! from the producing libraries' types and read them through these views,
//! so a field renamed on the writing side fails a test instead of a run's
//! figure at run time: the probes' here, the others' (page, load, stat,
//! sim compare, throttle) in the binary's `result_views` tests, where every
//! producer is at hand.

use crate::experiment::VictimKind;
use serde::Deserialize;

pub mod counters;
pub mod lenient;
pub mod report;

/// The part of a `ResultDoc` the views read: its `result`.
#[derive(Deserialize)]
struct Doc<R> {
    result: R,
}

/// A figure with a mean, nanoseconds.
#[derive(Deserialize)]
struct Mean {
    mean_ns: f64,
}

/// `dmalab probe latency`'s result (`dmalab_probe::latency::LatencyResult`).
#[derive(Deserialize)]
struct LatencyView {
    /// Present in per-access and both modes.
    per_access: Option<Mean>,
    /// Present in clock and both modes.
    clock: Option<Mean>,
}

/// `dmalab probe bandwidth`'s result (`dmalab_probe::bandwidth::BandwidthResult`).
#[derive(Deserialize)]
struct BandwidthView {
    bw_bytes: f64,
}

/// `dmalab page`'s result (`dmalab_page::report::PageResult`).
#[derive(Deserialize)]
struct PageView {
    total: PageTotal,
}

#[derive(Deserialize)]
struct PageTotal {
    all: Mean,
}

/// Just enough of `dmalab page`'s result to know one: its Table 2 and its
/// accesses by kind and class.
#[derive(Deserialize)]
struct PageShape {
    #[allow(dead_code)]
    table2: serde::de::IgnoredAny,
    #[allow(dead_code)]
    total: serde::de::IgnoredAny,
}

/// The figures of a page result that are not under a latency summary and
/// are computed from the major faults alone (`Table2::compute` in
/// dmalab-page: rows 2 to 5 of the paper's Table 2).
const PAGE_MAJOR_FIGURES: &[&str] = &[
    "/table2/major_mode_ns",
    "/table2/avg_major_ns",
    "/table2/os_overhead_ns",
    "/table2/os_overhead_pct",
];

/// Where, in a `dmalab page` result, the latency summary is that a figure
/// of it is computed from, when the figure (`pointer`, inside the result)
/// is not under a summary of its own, best first: for Table 2's
/// major-fault rows the major faults' distribution (`/total/major/lat`),
/// then every access's (`/total/all/lat`: reads and writes of every
/// fault class, what Table 2's other rows and the default figure are
/// computed from), which is the only one for any other figure. `None`
/// when `result` is not a page result.
pub fn page_latency_pointers(
    result: &serde_json::Value,
    pointer: &str,
) -> Option<&'static [&'static str]> {
    PageShape::deserialize(result).ok()?;
    Some(if PAGE_MAJOR_FIGURES.contains(&pointer) {
        &["/total/major/lat", "/total/all/lat"]
    } else {
        &["/total/all/lat"]
    })
}

/// An aggressor's whole-run bandwidth, bytes per second, from a result
/// that has one at its top (`dmalab probe bandwidth`'s).
pub fn bandwidth_of(result: &serde_json::Value) -> Option<f64> {
    BandwidthView::deserialize(result).ok().map(|b| b.bw_bytes)
}

/// `dmalab load`'s combined bandwidth (`dmalab_load::result::Rates`).
#[derive(Default, Deserialize)]
struct CombinedView {
    #[serde(default, deserialize_with = "lenient::or_default")]
    rates: CombinedRates,
}

#[derive(Default, Deserialize)]
struct CombinedRates {
    #[serde(default, deserialize_with = "lenient::opt")]
    combined_bw_bytes: Option<f64>,
}

/// A load aggressor's combined bandwidth (the thesis' data plus command
/// traffic), bytes per second, from its result.
pub fn combined_bw_of(result: &serde_json::Value) -> Option<f64> {
    lenient::view::<CombinedView>(result)?
        .rates
        .combined_bw_bytes
}

/// The figure a dmalab victim of `kind` reports by default (what
/// [`VictimKind::default_metric`] names): the latency probe's per-access
/// mean (its clock-mode mean when it ran in clock mode only), the bandwidth
/// probe's bytes per second, page's mean over all accesses. `None` for
/// kinds that write no result document.
pub fn default_figure(kind: &VictimKind, doc: &[u8]) -> Option<Result<f64, String>> {
    let (pointer, ..) = kind.default_metric();
    let read = |r: Result<f64, serde_json::Error>| {
        r.map_err(|e| format!("metric {pointer} is not in the result document: {e}"))
            .and_then(|x| {
                if x.is_finite() {
                    Ok(x)
                } else {
                    Err(format!("{pointer} is not a finite number"))
                }
            })
    };
    Some(match kind {
        VictimKind::ProbeLatency => read(serde_json::from_slice::<Doc<LatencyView>>(doc).map(
            |d| match (d.result.per_access, d.result.clock) {
                (Some(p), _) => p.mean_ns,
                (None, Some(c)) => c.mean_ns,
                (None, None) => f64::NAN,
            },
        ))
        .map_err(|e| {
            if e.ends_with("not a finite number") {
                format!("metric {pointer} is not in the result document (neither per_access nor clock figures)")
            } else {
                e
            }
        }),
        VictimKind::ProbeBandwidth => {
            read(serde_json::from_slice::<Doc<BandwidthView>>(doc).map(|d| d.result.bw_bytes))
        }
        VictimKind::Page => {
            read(serde_json::from_slice::<Doc<PageView>>(doc).map(|d| d.result.total.all.mean_ns))
        }
        _ => return None,
    })
}

/// A latency summary's buckets, as every summary writes them
/// (`dmalab_core::hist::LatencySummary::buckets`): what the report's
/// histograms read of a run's result.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct LatencyBuckets {
    /// Non-empty buckets, in order.
    pub buckets: Vec<Bucket>,
}

/// One bucket of a latency summary (`dmalab_core::hist::Bucket`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
pub struct Bucket {
    /// Lower edge, nanoseconds.
    pub lo_ns: u64,
    /// Upper edge, nanoseconds.
    pub hi_ns: u64,
    /// Samples in it.
    pub count: u64,
}

impl LatencyBuckets {
    /// `v` read as a latency summary, if it is one with buckets.
    pub fn read(v: &serde_json::Value) -> Option<Self> {
        LatencyBuckets::deserialize(v)
            .ok()
            .filter(|l| !l.buckets.is_empty())
    }
}

/// The figures of single-command documents ([`crate::document::key_figures`]),
/// one view per command, each field named once here. Every figure is
/// optional: a document of an older version that lacks one shows it as
/// missing, as a `null` does; the schema tests write each producer's
/// result and check that every figure is there.
pub mod doc {
    use serde::Deserialize;
    use std::collections::BTreeMap;

    /// A number, `None` where the document has none or `null`.
    pub type Num = Option<f64>;

    /// A latency summary (`dmalab_core::hist::LatencySummary`): its mean,
    /// its fio-style percentiles and its buckets.
    #[derive(Debug, Default, Deserialize)]
    pub struct LatencySummary {
        /// Mean, nanoseconds.
        pub mean_ns: Num,
        /// `{"99.000000": ns}`.
        #[serde(default)]
        pub percentile_ns: BTreeMap<String, Num>,
    }

    /// `dmalab load`'s result (`dmalab_load::result::LoadResult`).
    #[derive(Debug, Default, Deserialize)]
    pub struct Load {
        /// All workers' rates.
        pub rates: Option<LoadRates>,
        /// Command latency.
        pub lat_ns: Option<LatencySummary>,
        /// The workers' CPU time.
        pub cpu: Option<LoadCpu>,
        /// The rate checker's verdict (only with a rate limit).
        pub rate_check: Option<RateCheck>,
    }

    /// `dmalab_load::result::Rates`.
    #[derive(Debug, Default, Deserialize)]
    pub struct LoadRates {
        /// Data bandwidth, bytes per second.
        pub data_bw_bytes: Num,
        /// Commands per second.
        pub iops: Num,
    }

    /// `dmalab_load::result::CpuResult`.
    #[derive(Debug, Default, Deserialize)]
    pub struct LoadCpu {
        /// Percent of one CPU.
        pub cpu_pct: Num,
    }

    /// `dmalab_load::check::RateCheck`.
    #[derive(Debug, Default, Deserialize)]
    pub struct RateCheck {
        /// Mean error against the target, percent.
        pub mean_error_pct: Num,
        /// Worst 1-s window's error, percent.
        pub window_max_error_pct: Num,
    }

    /// `dmalab probe latency` and `probe bandwidth`'s results
    /// (`dmalab_probe::latency::LatencyResult`, `bandwidth::BandwidthResult`).
    #[derive(Debug, Default, Deserialize)]
    pub struct Probe {
        /// Bandwidth, bytes per second.
        pub bw_bytes: Num,
        /// Per-access latency.
        pub per_access: Option<LatencySummary>,
        /// The timer bracket.
        pub timer: Option<ProbeTimer>,
    }

    /// The probe's timer facts.
    #[derive(Debug, Default, Deserialize)]
    pub struct ProbeTimer {
        /// Timer bracket subtracted from each sample, nanoseconds.
        pub subtracted_ns: Num,
    }

    /// `dmalab page`'s result (`dmalab_page::report::PageResult`).
    #[derive(Debug, Default, Deserialize)]
    pub struct Page {
        /// The paper's Table 2.
        pub table2: Option<PageTable2>,
        /// All accesses by class.
        pub total: Option<PageClasses>,
    }

    /// `dmalab_page::report::Table2`.
    #[derive(Debug, Default, Deserialize)]
    pub struct PageTable2 {
        /// (1) mean latency of all accesses, ns.
        pub avg_all_ns: Num,
        /// (2) most frequent major-fault latency, ns.
        pub major_mode_ns: Num,
        /// (3) mean major-fault latency, ns.
        pub avg_major_ns: Num,
        /// (4) OS overhead, ns.
        pub os_overhead_ns: Num,
        /// (5) OS overhead share, percent.
        pub os_overhead_pct: Num,
        /// Run time in accesses over 100 µs, percent.
        pub time_in_over_100us_pct: Num,
        /// Run time in accesses of 1 ms or more, percent.
        pub time_in_over_1ms_pct: Num,
    }

    /// `dmalab_page::report::ClassSet`.
    #[derive(Debug, Default, Deserialize)]
    pub struct PageClasses {
        /// Accesses that hit.
        pub hit: Option<PageClass>,
        /// Minor faults.
        pub minor: Option<PageClass>,
        /// Major faults.
        pub major: Option<PageClass>,
        /// Every access.
        pub all: Option<PageClass>,
    }

    /// One class of accesses.
    #[derive(Debug, Default, Deserialize)]
    pub struct PageClass {
        /// Share of all accesses, percent.
        pub share_pct: Num,
        /// Its latency.
        pub lat: Option<LatencySummary>,
    }

    /// `dmalab stat`'s result (the binary's `StatResult`).
    #[derive(Debug, Default, Deserialize)]
    pub struct Stat {
        /// Run time of the command, ns.
        pub wall_ns: Num,
        /// Its counts.
        pub counters: Option<StatCounters>,
    }

    /// The counters' report (`dmalab_counters::perfstat::Report`).
    #[derive(Debug, Default, Deserialize)]
    pub struct StatCounters {
        /// One per event.
        #[serde(default)]
        pub events: Vec<StatEvent>,
        /// Derived metrics.
        #[serde(default)]
        pub metrics: Vec<StatMetric>,
    }

    /// One event's count.
    #[derive(Debug, Default, Deserialize)]
    pub struct StatEvent {
        /// Its id.
        pub id: Option<String>,
        /// Its count.
        pub value: Num,
        /// Its unit.
        pub unit: Option<String>,
    }

    /// One derived metric.
    #[derive(Debug, Default, Deserialize)]
    pub struct StatMetric {
        /// Its name (`llc_miss_ratio`).
        pub name: Option<String>,
        /// Its value.
        pub value: Num,
        /// Its unit.
        pub unit: Option<String>,
    }

    /// `dmalab sim compare`'s result (`dmalab_sim::compare::CompareResult`).
    #[derive(Debug, Default, Deserialize)]
    pub struct SimCompare {
        /// One per scheme.
        #[serde(default)]
        pub schemes: Vec<SimScheme>,
    }

    /// One scheme's outcome.
    #[derive(Debug, Default, Deserialize)]
    pub struct SimScheme {
        /// Its name.
        pub scheme: Option<String>,
        /// Simulated time, ns.
        pub total_ns: Num,
    }

    /// Reads a document's `result` through the view `V`; a result that
    /// does not fit it (a field of another type) reads as empty, its
    /// figures missing.
    pub fn read<V: serde::de::DeserializeOwned + Default>(result: &serde_json::Value) -> V {
        V::deserialize(result).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_core::hist::LatencySummary;
    use dmalab_core::host::HostInfo;
    use dmalab_core::schema::ResultDoc;
    use std::time::SystemTime;

    /// A result document as the child writes it: the producer's own types.
    fn written<R: serde::Serialize>(command: &str, result: R) -> Vec<u8> {
        let doc = ResultDoc::new(command, HostInfo::default(), (), result, SystemTime::now());
        serde_json::to_vec(&doc).unwrap()
    }

    #[test]
    fn latency_figure_is_read_from_the_probes_own_result() {
        use dmalab_probe::latency::{ClockFigures, LatencyResult};
        let mut r = LatencyResult {
            per_access: Some(LatencySummary {
                mean_ns: 81.5,
                ..Default::default()
            }),
            clock: Some(ClockFigures {
                mean_ns: 70.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let k = VictimKind::ProbeLatency;
        assert_eq!(
            default_figure(&k, &written("probe latency", &r)),
            Some(Ok(81.5))
        );
        // Clock mode only: its mean stands in.
        r.per_access = None;
        assert_eq!(
            default_figure(&k, &written("probe latency", &r)),
            Some(Ok(70.0))
        );
        r.clock = None;
        let e = default_figure(&k, &written("probe latency", &r))
            .unwrap()
            .unwrap_err();
        assert!(
            e.contains("/result/per_access/mean_ns is not in the result document"),
            "{e}"
        );
    }

    #[test]
    fn bandwidth_figure_is_read_from_the_probes_own_result() {
        let r = dmalab_probe::bandwidth::BandwidthResult {
            bw_bytes: 1.5e9,
            ..Default::default()
        };
        assert_eq!(
            default_figure(&VictimKind::ProbeBandwidth, &written("probe bandwidth", &r)),
            Some(Ok(1.5e9))
        );
        // The same figure of a bandwidth probe run as an aggressor.
        let doc: serde_json::Value =
            serde_json::from_slice(&written("probe bandwidth", &r)).unwrap();
        assert_eq!(bandwidth_of(&doc["result"]), Some(1.5e9));
        assert_eq!(bandwidth_of(&serde_json::json!({"rates": {}})), None);
    }

    #[test]
    fn combined_bandwidth_is_read_from_loads_own_result() {
        let mut r = dmalab_load::result::LoadResult::default();
        r.rates.combined_bw_bytes = 3.5e9;
        let doc: serde_json::Value = serde_json::from_slice(&written("load", &r)).unwrap();
        assert_eq!(combined_bw_of(&doc["result"]), Some(3.5e9));
        assert_eq!(combined_bw_of(&serde_json::json!({"rates": {}})), None);
        assert_eq!(
            combined_bw_of(&serde_json::json!({"rates": {"combined_bw_bytes": "1"}})),
            None
        );
        assert_eq!(combined_bw_of(&serde_json::json!({"rates": [1.0]})), None);
    }

    /// The buckets the report draws are read from the summary every
    /// producer writes, and anything else is not taken for one.
    #[test]
    fn latency_buckets_are_read_from_the_summary_type() {
        let s = LatencySummary::from_buckets(&[(100, 110, 4), (110, 120, 1)]);
        let v = serde_json::to_value(&s).unwrap();
        let b = LatencyBuckets::read(&v).unwrap();
        assert_eq!(
            b.buckets,
            [
                Bucket {
                    lo_ns: 100,
                    hi_ns: 110,
                    count: 4
                },
                Bucket {
                    lo_ns: 110,
                    hi_ns: 120,
                    count: 1
                }
            ]
        );
        let none = serde_json::to_value(LatencySummary::default()).unwrap();
        assert_eq!(LatencyBuckets::read(&none), None);
        assert_eq!(
            LatencyBuckets::read(&serde_json::json!({"buckets": [{"lo": 1}]})),
            None
        );
    }

    #[test]
    fn a_document_without_the_field_names_the_metric() {
        let e = default_figure(&VictimKind::ProbeBandwidth, br#"{"result": {"bw": 3}}"#)
            .unwrap()
            .unwrap_err();
        assert!(
            e.starts_with(
                "metric /result/bw_bytes is not in the result document: missing field `bw_bytes`"
            ),
            "{e}"
        );
        assert_eq!(
            default_figure(
                &VictimKind::Idle {
                    duration: std::time::Duration::ZERO
                },
                b"{}"
            ),
            None
        );
    }

    /// A latency summary with the mean and the percentiles the documents'
    /// tables show.
    pub(crate) fn summary(mean_ns: f64) -> LatencySummary {
        LatencySummary {
            mean_ns,
            percentile_ns: [("50.000000", 1), ("99.000000", 2), ("99.900000", 3)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ..Default::default()
        }
    }

    /// Every figure of `command` read back from a document written from
    /// its producer's type: each has its value (a field renamed on either
    /// side leaves one without).
    fn figures(command: &str, doc: &[u8]) -> Vec<(String, f64)> {
        let v: serde_json::Value = serde_json::from_slice(doc).unwrap();
        crate::document::key_figures(command, &v)
            .into_iter()
            .map(|f| {
                let x = f
                    .value
                    .unwrap_or_else(|| panic!("{command}: no {}", f.what));
                (f.what, x)
            })
            .collect()
    }

    #[test]
    fn load_document_figures_are_read_from_loads_own_result() {
        use dmalab_load::check::RateCheck;
        use dmalab_load::result::LoadResult;
        let mut r = LoadResult::default();
        r.rates.data_bw_bytes = 2e9;
        r.rates.iops = 5e5;
        r.lat_ns = summary(800.0);
        r.cpu.cpu_pct = 35.0;
        r.rate_check = Some(RateCheck {
            unit: "bytes".into(),
            target_per_s: 1e9,
            windows_per_s: vec![],
            windows_target_per_s: vec![],
            window_max_error_pct: Some(1.5),
            windows_held_ns: vec![],
            held_max_pct: 0.0,
            windows_steal_ns: vec![],
            steal_max_pct: 0.0,
            unexplained_max_error_pct: 0.0,
            mean_per_s: Some(1e9),
            mean_error_pct: Some(0.5),
            no_window: None,
            ks: None,
        });
        let got = figures("load", &written("load", &r));
        let want: Vec<(String, f64)> = [
            ("data bandwidth", 2e9),
            ("command rate", 5e5),
            ("mean command latency", 800.0),
            ("p50 command latency", 1.0),
            ("p99 command latency", 2.0),
            ("p99.9 command latency", 3.0),
            ("CPU use", 35.0),
            ("rate error, mean", 0.5),
            ("rate error, worst 1-s window", 1.5),
        ]
        .into_iter()
        .map(|(w, x)| (w.to_string(), x))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn probe_document_figures_are_read_from_the_probes_own_results() {
        use dmalab_probe::latency::LatencyResult;
        let mut r = LatencyResult {
            per_access: Some(summary(90.0)),
            ..Default::default()
        };
        r.timer.subtracted_ns = 12.0;
        let got = figures("probe latency", &written("probe latency", &r));
        let whats: Vec<&str> = got.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            whats,
            [
                "mean access latency",
                "p50 access latency",
                "p99 access latency",
                "p99.9 access latency",
                "timer bracket subtracted"
            ]
        );
        assert_eq!((got[0].1, got[3].1, got[4].1), (90.0, 3.0, 12.0));
        let r = dmalab_probe::bandwidth::BandwidthResult {
            bw_bytes: 7e9,
            ..Default::default()
        };
        assert_eq!(
            figures("probe bandwidth", &written("probe bandwidth", &r)),
            [("bandwidth".to_string(), 7e9)]
        );
    }

    /// A result that is not of its command's shape reads as empty rather
    /// than failing the whole report.
    #[test]
    fn a_result_of_another_shape_has_no_figures() {
        let v = serde_json::json!({"result": {"rates": "fast", "bw_bytes": 3}});
        assert!(crate::document::key_figures("load", &v).is_empty());
        let f = crate::document::key_figures("page", &v);
        assert_eq!(f.len(), 14);
        assert!(f.iter().all(|x| x.value.is_none()));
    }
}
