//! The configs of the dmalab commands an experiment starts as children,
//! gathered from the libraries that own them into the catalog that
//! `run`, `throttle` and `fleet` pass to the experiment reader: the
//! libraries that read experiments (`dmalab-run` and those above it) do
//! not depend on the libraries whose commands they start.
//!
//! Its tests hold the schema checks of the result views
//! (`dmalab_run::views`, `views::report`) whose producers `dmalab-run`
//! does not depend on, not even for its tests: page, sim compare and stat.

use dmalab_core::child::ChildSpec;
use dmalab_load::child::LoadChildOptions;
use dmalab_page::child::PageChildOptions;
use dmalab_probe::child::{BandwidthChildOptions, LatencyChildOptions};
use dmalab_run::child::ChildCatalog;

/// Every child command's config.
pub fn catalog() -> ChildCatalog {
    ChildCatalog {
        load: ChildSpec::of::<LoadChildOptions>(),
        probe_latency: ChildSpec::of::<LatencyChildOptions>(),
        probe_bandwidth: ChildSpec::of::<BandwidthChildOptions>(),
        page: ChildSpec::of::<PageChildOptions>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_run::child::ChildCommand;

    /// Each slot holds its own command's config: the words an experiment's
    /// `command` names are the ones the catalog starts.
    #[test]
    fn each_command_gets_its_own_config() {
        let c = catalog();
        let names: Vec<String> = ChildCommand::ALL.iter().map(|k| k.name(&c)).collect();
        assert_eq!(names, ["load", "probe latency", "probe bandwidth", "page"]);
        assert!(ChildCommand::Page.takes(&c, "runtime"));
        assert!(!ChildCommand::Page.takes(&c, "cpus_allowed"));
        assert!(ChildCommand::Page.kind_of(&c, "cold").is_some());
    }

    /// A document as the producing command writes it.
    fn written<R: serde::Serialize>(command: &str, result: R) -> serde_json::Value {
        let doc = dmalab_core::schema::ResultDoc::new(
            command,
            dmalab_core::host::HostInfo::default(),
            (),
            result,
            std::time::SystemTime::now(),
        );
        serde_json::to_value(&doc).unwrap()
    }

    /// Every figure of a document, each with its value (a field renamed on
    /// the writing side or in the view leaves one without).
    fn figures(command: &str, doc: &serde_json::Value) -> Vec<(String, f64)> {
        dmalab_run::document::key_figures(command, doc)
            .into_iter()
            .map(|f| {
                let x = f
                    .value
                    .unwrap_or_else(|| panic!("{command}: no {}", f.what));
                (f.what, x)
            })
            .collect()
    }

    fn summary(mean_ns: f64) -> dmalab_core::hist::LatencySummary {
        dmalab_core::hist::LatencySummary {
            mean_ns,
            percentile_ns: [("50.000000", 1), ("99.000000", 2), ("99.900000", 3)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn page_figures_are_read_from_pages_own_result() {
        use dmalab_page::report::{ClassStats, PageResult};
        use dmalab_run::experiment::VictimKind;
        let class = |share_pct: f64| ClassStats {
            share_pct,
            ..Default::default()
        };
        let mut r = PageResult::default();
        r.total.all.mean_ns = 412.0;
        r.total.all.lat = summary(412.0);
        r.total.hit = Some(class(90.0));
        r.total.minor = Some(class(6.0));
        r.total.major = Some(class(4.0));
        let t = &mut r.table2;
        t.avg_all_ns = 412.0;
        t.major_mode_ns = Some(9000.0);
        t.avg_major_ns = Some(9500.0);
        t.os_overhead_ns = Some(1500.0);
        t.os_overhead_pct = Some(15.0);
        t.time_in_over_100us_pct = 1.0;
        t.time_in_over_1ms_pct = 0.5;
        let doc = written("page", &r);
        let got = figures("page", &doc);
        let values: Vec<f64> = got.iter().map(|f| f.1).collect();
        assert_eq!(
            values,
            [412.0, 9000.0, 9500.0, 1500.0, 15.0, 1.0, 0.5, 90.0, 6.0, 4.0, 412.0, 1.0, 2.0, 3.0],
            "{got:?}"
        );
        // The run's figure for a page victim.
        let bytes = serde_json::to_vec(&doc).unwrap();
        assert_eq!(
            dmalab_run::views::default_figure(&VictimKind::Page, &bytes),
            Some(Ok(412.0))
        );
    }

    /// A run record of a page victim whose figure is `metric`, with the
    /// page document's `result` as its victim result.
    fn page_run(metric: &str, doc: &serde_json::Value) -> dmalab_run::record::RunRecord {
        serde_json::from_value(serde_json::json!({
            "record": "run", "experiment_hash": "h", "index": 0,
            "configuration": "c", "repetition": 1, "victim": "p",
            "load": "plain", "started_at": "t", "status": "completed",
            "value": 1.0, "metric": metric, "unit": "ns", "better": "lower",
            "victim_wall_ns": 1, "victim_argv": [], "victim_cpus": "0",
            "victim_result": doc["result"],
        }))
        .unwrap()
    }

    /// Regression: a page victim whose figure is a row of Table 2
    /// (`/result/table2/...`, no summary under it) had its histogram drawn
    /// from the first summary near the top of the result, the reads' alone
    /// (`/read/all/lat`, first in key order). It is the summary the figure
    /// is computed from: the major faults' for the major-fault rows, every
    /// access's (`/total/all/lat`) for the others and any other figure
    /// outside a summary.
    #[test]
    fn a_page_figures_histogram_is_the_summary_it_is_computed_from() {
        use dmalab_core::hist::LatHist;
        use dmalab_page::report::{ClassStats, PageResult};
        use dmalab_run::record::latency_for;
        use dmalab_run::views::LatencyBuckets;
        let hist = |ns: u64| {
            let mut h = LatHist::new();
            h.record_n(ns, 10);
            h.summary()
        };
        let mut r = PageResult::default();
        r.read.all.lat = hist(100);
        r.write.all.lat = hist(1_000);
        r.total.all.lat = hist(10_000);
        r.total.hit = Some(ClassStats {
            lat: hist(50),
            ..Default::default()
        });
        r.total.major = Some(ClassStats {
            lat: hist(100_000),
            ..Default::default()
        });
        let doc = written("page", &r);
        let at = |p: &str| LatencyBuckets::read(doc["result"].pointer(p).unwrap()).unwrap();
        let drawn = |metric: &str| latency_for(&page_run(metric, &doc));
        for (metric, summary) in [
            ("/result/table2/avg_all_ns", "/total/all/lat"),
            ("/result/table2/time_in_over_100us_pct", "/total/all/lat"),
            ("/result/table2/time_in_over_1ms_pct", "/total/all/lat"),
            ("/result/table2/major_mode_ns", "/total/major/lat"),
            ("/result/table2/avg_major_ns", "/total/major/lat"),
            ("/result/table2/os_overhead_ns", "/total/major/lat"),
            ("/result/table2/os_overhead_pct", "/total/major/lat"),
            ("/result/faults/major_faults", "/total/all/lat"),
            ("/result/timer_overhead_ns", "/total/all/lat"),
            // Under a summary's parent: that summary, as before.
            ("/result/read/all/mean_ns", "/read/all/lat"),
            ("/result/total/hit/share_pct", "/total/hit/lat"),
        ] {
            assert_eq!(drawn(metric), Some(at(summary)), "{metric} -> {summary}");
        }
        // Without major faults the major rows fall back to every access.
        r.total.major = None;
        let doc = written("page", &r);
        let all = LatencyBuckets::read(&doc["result"]["total"]["all"]["lat"]);
        assert_eq!(
            latency_for(&page_run("/result/table2/avg_major_ns", &doc)),
            all
        );
    }

    #[test]
    fn sim_compare_figures_are_read_from_the_simulators_own_result() {
        use dmalab_sim::engine::SchemeResult;
        use dmalab_sim::report::CompareResult;
        let scheme = |name: &str, total_ns: f64| SchemeResult {
            scheme: name.into(),
            total_ns,
            total_cycles: 0,
            speedup_vs_snoop: None,
            breakdown_ns: Default::default(),
            cpu: Default::default(),
            dma: Default::default(),
            io: Default::default(),
            io_by_device: Vec::new(),
            llc_dirty_evictions: 0,
            llc_dirty_evictions_by_dma: 0,
            snoop_invalidations: 0,
            dma_cache: None,
            dram: Default::default(),
            records: 0,
            transfers: 0,
        };
        let r = CompareResult::new(vec![scheme("snoop", 5e6), scheme("shared", 4e6)], 0, 0);
        assert_eq!(
            figures("sim compare", &written("sim compare", &r)),
            [
                ("snoop: simulated time".to_string(), 5e6),
                ("shared: simulated time".to_string(), 4e6)
            ]
        );
    }

    /// Stat's events and metrics as the counters library writes them (the
    /// report around them is the binary's own `StatResult`, whose keys
    /// `wall_ns` and `counters` are written here by hand).
    #[test]
    fn stat_figures_are_read_from_the_counters_own_types() {
        use dmalab_counters::recipes::MetricValue;
        use dmalab_counters::session::EventCount;
        let event = EventCount {
            id: "cycles".into(),
            spec: "cycles".into(),
            pmus: vec![],
            counters: 1,
            value: 1e9,
            unit: "cycles".into(),
            raw_count: 1_000_000_000,
            running_fraction: 1.0,
            running_ns: 0,
            exact: true,
            software: false,
            per_socket: vec![],
        };
        let metric = MetricValue {
            name: "llc_miss_ratio".into(),
            unit: "%".into(),
            value: Some(12.5),
            events: vec![],
        };
        let doc = written(
            "stat",
            serde_json::json!({
                "wall_ns": 2_000_000u64,
                "counters": { "events": [event], "metrics": [metric] },
            }),
        );
        assert_eq!(
            figures("stat", &doc),
            [
                ("run time".to_string(), 2e6),
                ("cycles".to_string(), 1e9),
                ("llc miss ratio".to_string(), 12.5)
            ]
        );
    }

    /// The page report's plots: the latency buckets of every access, of
    /// reads and writes, and of each fault class, from page's own result.
    #[test]
    fn page_plots_are_read_from_pages_own_result() {
        use dmalab_page::report::{ClassStats, PageResult};
        use dmalab_run::views::report::{result, Page};
        let lat = |lo: u64| dmalab_core::hist::LatencySummary::from_buckets(&[(lo, lo + 10, 2)]);
        let class = |lo: u64| ClassStats {
            lat: lat(lo),
            ..Default::default()
        };
        let mut r = PageResult::default();
        r.total.all = class(100);
        r.total.hit = Some(class(200));
        r.total.minor = Some(class(300));
        r.total.major = Some(class(400));
        r.read.all = class(500);
        r.write.all = class(600);
        let v: Page = result(&written("page", &r));
        let first = |l: &dmalab_run::views::report::Latency| l.buckets().next();
        assert_eq!(
            [
                &v.total.all.lat,
                &v.total.hit.lat,
                &v.total.minor.lat,
                &v.total.major.lat,
                &v.read.all.lat,
                &v.write.all.lat
            ]
            .map(first),
            [100, 200, 300, 400, 500, 600].map(|lo| Some((lo, lo + 10, 2)))
        );
    }

    /// Stat's counter series as the counters library writes it.
    #[test]
    fn stat_series_are_read_from_the_counters_own_types() {
        use dmalab_counters::session::SeriesPoint;
        use dmalab_run::views::report::{result, Stat};
        let point = SeriesPoint {
            t_s: 2.0,
            interval_s: 0.5,
            events: [("cycles".to_string(), 7e8)].into_iter().collect(),
            metrics: vec![],
        };
        let doc = written(
            "stat",
            serde_json::json!({ "wall_ns": 1u64, "counters": { "series": [point] } }),
        );
        let v: Stat = result(&doc);
        let p = &v.counters.series[0];
        assert_eq!((p.t_s, p.interval_s), (Some(2.0), Some(0.5)));
        assert_eq!(p.events.get("cycles"), Some(&Some(7e8)));
    }

    /// The simulator's schemes as `sim compare` writes them.
    #[test]
    fn sim_schemes_are_read_from_the_simulators_own_result() {
        use dmalab_run::views::report::{result, SimCompare};
        use dmalab_sim::engine::SchemeResult;
        use dmalab_sim::report::CompareResult;
        let scheme = SchemeResult {
            scheme: "snoop".into(),
            total_ns: 5e6,
            total_cycles: 0,
            speedup_vs_snoop: None,
            breakdown_ns: Default::default(),
            cpu: Default::default(),
            dma: Default::default(),
            io: Default::default(),
            io_by_device: Default::default(),
            llc_dirty_evictions: 0,
            llc_dirty_evictions_by_dma: 0,
            snoop_invalidations: 0,
            dma_cache: None,
            dram: Default::default(),
            records: 0,
            transfers: 0,
        };
        let r = CompareResult::new(vec![scheme], 0, 0);
        let v: SimCompare = result(&written("sim compare", &r));
        assert_eq!(
            (v.schemes[0].scheme.as_deref(), v.schemes[0].total_ns),
            (Some("snoop"), Some(5e6))
        );
    }
}
