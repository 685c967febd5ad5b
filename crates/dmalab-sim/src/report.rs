//! The result documents of `dmalab sim compare` and `sweep` (the `config`
//! and `results` of their `ResultDoc`; the JSON keys are these fields'
//! names) and the text the command prints from them.

use crate::engine::{SchemeResult, SimError};
use crate::run::{self, Orderings, SweepPoint};
use crate::{Scheme, SimConfig};
use dmalab_core::schema::CpuUsage;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// The resolved configuration of a compare or sweep run.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct SimRunConfig {
    /// Trace file.
    pub trace: String,
    /// Parameter set named by --params.
    pub params_name: String,
    /// Every parameter after --set overrides.
    pub params: SimConfig,
    /// Schemes run.
    pub schemes: Vec<String>,
    /// Swept parameter (sweep only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep_param: Option<String>,
}

impl SimRunConfig {
    /// The configuration of a run of `schemes` over `trace`.
    pub fn new(
        trace: &Path,
        params_name: &str,
        params: SimConfig,
        schemes: &[Scheme],
        sweep_param: Option<&str>,
    ) -> Self {
        SimRunConfig {
            trace: trace.display().to_string(),
            params_name: params_name.to_string(),
            params,
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
            sweep_param: sweep_param.map(str::to_string),
        }
    }
}

/// `dmalab sim compare` result.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct CompareResult {
    /// One entry per scheme.
    pub schemes: Vec<SchemeResult>,
    /// The DMA-cache paper's orderings on these results.
    pub orderings: Orderings,
    /// Line references simulated, all schemes together.
    pub refs_simulated: u64,
    /// Wall time of the simulation, trace decoding included, ns.
    pub wall_ns: u64,
    /// Line references simulated per second of wall time.
    pub refs_per_sec: f64,
    /// CPU time (user + system) the simulation used, ns: on a busy host
    /// this, not the wall time, says how fast the simulator is.
    pub cpu_ns: u64,
    /// Line references simulated per second of CPU time.
    pub refs_per_cpu_sec: f64,
}

/// Line references simulated by every scheme together.
pub fn refs_simulated(results: &[SchemeResult]) -> u64 {
    results.iter().map(|r| r.cpu.refs + r.dma.refs).sum()
}

/// `refs` per second of `ns` (a zero time counts as 1 ns).
fn per_sec(refs: u64, ns: u64) -> f64 {
    refs as f64 / (ns.max(1) as f64 / 1e9)
}

impl CompareResult {
    /// Runs every scheme over the trace at `path` ([`run::compare_file`]),
    /// timing the run in wall and process CPU time.
    pub fn run(cfg: &SimConfig, schemes: &[Scheme], path: &Path) -> Result<Self, SimError> {
        let t0 = Instant::now();
        let c0 = CpuUsage::process();
        let results = run::compare_file(cfg, schemes, path)?;
        let wall_ns = t0.elapsed().as_nanos() as u64;
        let cpu = CpuUsage::process().since(&c0);
        Ok(Self::new(results, wall_ns, cpu.usr_ns + cpu.sys_ns))
    }

    /// The result of a compare run whose simulation took `wall_ns` of wall
    /// and `cpu_ns` of CPU time: counts, rates and the paper's orderings.
    pub fn new(schemes: Vec<SchemeResult>, wall_ns: u64, cpu_ns: u64) -> Self {
        let refs = refs_simulated(&schemes);
        CompareResult {
            orderings: run::orderings(&schemes),
            refs_simulated: refs,
            wall_ns,
            refs_per_sec: per_sec(refs, wall_ns),
            cpu_ns,
            refs_per_cpu_sec: per_sec(refs, cpu_ns),
            schemes,
        }
    }

    /// What `dmalab sim compare` prints: the run, the scheme table, the
    /// simulator's speed, and a last line when a signal cut the run short.
    pub fn text(&self, cfg: &SimRunConfig, interrupted: bool) -> String {
        let p = &cfg.params;
        let mut text = format!(
            "trace {} ({} records), params {}, DRAM {}, LLC {} KiB {}-way\n\n",
            cfg.trace,
            self.schemes.first().map_or(0, |r| r.records),
            cfg.params_name,
            p.dram.preset,
            p.llc.size_bytes >> 10,
            p.llc.ways
        );
        text.push_str(&run::table(&self.schemes));
        if let Some(note) = run::no_cpu_note(&self.schemes) {
            text.push_str(&note);
        }
        text.push_str(&format!(
            "\nsimulated {} line references in {:.3} s: {:.1} M refs/s ({:.1} M refs per CPU second)\n",
            self.refs_simulated,
            self.wall_ns as f64 / 1e9,
            self.refs_per_sec / 1e6,
            self.refs_per_cpu_sec / 1e6
        ));
        if interrupted {
            text.push_str(
                "\ninterrupted by a signal: the figures cover the part of the trace replayed so far\n",
            );
        }
        text
    }
}

/// `dmalab sim sweep` result.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct SweepResult {
    /// One point per value.
    pub points: Vec<SweepPoint>,
    /// Wall time, ns.
    pub wall_ns: u64,
}

impl SweepResult {
    /// Runs every scheme over the trace at `path` once per value of `key`
    /// ([`run::sweep`]), timing the whole sweep.
    pub fn run(
        cfg: &SimConfig,
        key: &str,
        values: &[String],
        schemes: &[Scheme],
        path: &Path,
    ) -> Result<Self, SimError> {
        let t0 = Instant::now();
        let points = run::sweep(cfg, key, values, schemes, &mut |c, s| {
            run::compare_file(c, s, path)
        })?;
        Ok(SweepResult {
            points,
            wall_ns: t0.elapsed().as_nanos() as u64,
        })
    }

    /// What `dmalab sim sweep` prints: the legend, the sweep table, and a
    /// last line when a signal stopped the sweep before its `values_asked`
    /// values were run.
    pub fn text(&self, cfg: &SimRunConfig, values_asked: usize, interrupted: bool) -> String {
        let mut text = format!(
            "trace {}, params {}; speedup against snooping; pf>sn: dma-cache-256K-pf beats snoop, sh<sn: shared loses, sm<sn: DMA caches under 128K lose\n\n{}",
            cfg.trace,
            cfg.params_name,
            run::sweep_table(cfg.sweep_param.as_deref().unwrap_or_default(), &self.points)
        );
        if let Some(note) = self
            .points
            .first()
            .and_then(|p| run::no_cpu_note(&p.results))
        {
            text.push_str(&note);
        }
        if interrupted {
            text.push_str(&format!(
                "\ninterrupted by a signal: {} of {} values run, the last one on part of the trace\n",
                self.points.len(),
                values_asked
            ));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::compare_records;
    use crate::trace::Record;

    /// A trace of 4 CPU and 2 DMA line references, replayed by snoop and
    /// shared: 12 line references in all.
    fn results() -> Vec<SchemeResult> {
        let recs: Vec<Record> = (0..4u64)
            .map(|i| Record::cpu(10, i % 2 == 1, i * 64, 64))
            .chain((0..2u64).map(|i| Record::dma(10, true, (1 << 20) + i * 64, 64)))
            .collect();
        let schemes = [Scheme::Snoop, Scheme::Shared];
        compare_records(&SimConfig::paper(), &schemes, &recs).unwrap()
    }

    fn keys(v: &serde_json::Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn compare_counts_every_schemes_references_and_rates_them() {
        let c = CompareResult::new(results(), 2_000_000_000, 500_000_000);
        assert_eq!(c.refs_simulated, 12);
        assert_eq!((c.refs_per_sec, c.refs_per_cpu_sec), (6.0, 24.0));
        assert!(c.orderings.shared_loses_to_snoop.is_some());
        assert_eq!(c.orderings.dma_cache_256k_pf_beats_snoop, None);
        // No time measured: counted as 1 ns, never a division by zero.
        assert_eq!(CompareResult::new(results(), 0, 0).refs_per_sec, 12e9);
    }

    /// The JSON keys stay as they were when these types lived in the binary.
    #[test]
    fn json_keys_are_unchanged() {
        let (params, schemes) = (SimConfig::paper(), [Scheme::Snoop, Scheme::Shared]);
        let c = CompareResult::new(results(), 1, 1);
        assert_eq!(
            keys(&serde_json::to_value(&c).unwrap()),
            [
                "cpu_ns",
                "orderings",
                "refs_per_cpu_sec",
                "refs_per_sec",
                "refs_simulated",
                "schemes",
                "wall_ns"
            ]
        );
        let cfg = SimRunConfig::new(Path::new("t"), "paper", params.clone(), &schemes, None);
        let v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(keys(&v), ["params", "params_name", "schemes", "trace"]);
        assert_eq!(v["schemes"], serde_json::json!(["snoop", "shared"]));
        let sw = SimRunConfig::new(Path::new("t"), "paper", params, &schemes, Some("llc.ways"));
        assert_eq!(
            serde_json::to_value(&sw).unwrap()["sweep_param"],
            "llc.ways"
        );
        let s = SweepResult {
            points: Vec::new(),
            wall_ns: 5,
        };
        assert_eq!(
            keys(&serde_json::to_value(&s).unwrap()),
            ["points", "wall_ns"]
        );
    }

    #[test]
    fn texts_name_the_run_and_say_when_it_was_cut_short() {
        let cfg = SimRunConfig::new(
            Path::new("fc.trace"),
            "paper",
            SimConfig::paper(),
            &[Scheme::Snoop, Scheme::Shared],
            Some("llc.ways"),
        );
        let c = CompareResult::new(results(), 1_000_000, 1_000_000);
        let t = c.text(&cfg, false);
        assert!(
            t.starts_with("trace fc.trace (6 records), params paper, DRAM "),
            "{t}"
        );
        assert!(
            t.contains("\nsimulated 12 line references in 0.001 s: 0.0 M refs/s"),
            "{t}"
        );
        assert!(!t.contains("interrupted"));
        assert!(c.text(&cfg, true).ends_with("replayed so far\n"));
        let s = SweepResult {
            points: vec![SweepPoint {
                value: "8".into(),
                orderings: run::orderings(&c.schemes),
                results: c.schemes.clone(),
            }],
            wall_ns: 1,
        };
        let t = s.text(&cfg, 3, true);
        assert!(t.contains("\nllc.ways ") && t.contains("\n8 "), "{t}");
        assert!(
            t.ends_with(
                "interrupted by a signal: 1 of 3 values run, the last one on part of the trace\n"
            ),
            "{t}"
        );
    }

    /// Issue 29: a DMA-only trace printed seven speedups of 1.000 with no
    /// word why.
    #[test]
    fn a_trace_without_cpu_references_says_so() {
        let cfg = SimRunConfig::new(
            Path::new("load.trace"),
            "paper",
            SimConfig::paper(),
            &[Scheme::Snoop, Scheme::Shared],
            None,
        );
        let dma_only: Vec<Record> = (0..4u64)
            .map(|i| Record::dma(10, true, i * 64, 64))
            .collect();
        let schemes = [Scheme::Snoop, Scheme::Shared];
        let r = compare_records(&SimConfig::paper(), &schemes, &dma_only).unwrap();
        let t = CompareResult::new(r, 1, 1).text(&cfg, false);
        assert!(t.contains("note: the trace has no CPU references"), "{t}");
        let t = CompareResult::new(results(), 1, 1).text(&cfg, false);
        assert!(!t.contains("no CPU references"), "{t}");
    }

    #[test]
    fn runs_on_a_trace_file_give_the_in_memory_results() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.trace");
        let w = crate::trace::TraceWriter::create(&p).unwrap();
        let recs: Vec<Record> = (0..4u64)
            .map(|i| Record::cpu(10, false, i * 64, 64))
            .collect();
        for r in &recs {
            w.write_record(r).unwrap();
        }
        w.finish().unwrap();
        let (cfg, schemes) = (SimConfig::paper(), [Scheme::Snoop, Scheme::Shared]);
        let c = CompareResult::run(&cfg, &schemes, &p).unwrap();
        assert_eq!(c.schemes, compare_records(&cfg, &schemes, &recs).unwrap());
        assert_eq!(c.refs_simulated, 8);
        let values = ["4".to_string(), "8".to_string()];
        let s = SweepResult::run(&cfg, "llc.ways", &values, &schemes, &p).unwrap();
        let got: Vec<&str> = s.points.iter().map(|p| p.value.as_str()).collect();
        assert_eq!(got, ["4", "8"]);
        assert!(SweepResult::run(
            &cfg,
            "llc.ways",
            &values,
            &schemes,
            &dir.path().join("none")
        )
        .is_err());
    }
}
