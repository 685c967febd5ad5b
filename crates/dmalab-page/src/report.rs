//! The result of a `dmalab page` run (the schema's `result` part), the
//! paper's Table 2 summary, and the text rendering.

use crate::cgroup::CgroupStat;
use crate::sysinfo::Vmstat;
use dmalab_core::hist::{LatHist, LatencySummary};
use dmalab_core::units::{fmt_bytes, fmt_ns};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Count, share and latency of one class of accesses.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassStats {
    /// Accesses in the class.
    pub accesses: u64,
    /// Share of all accesses of this kind (read/write/total), percent.
    pub share_pct: f64,
    /// Mean latency, nanoseconds.
    pub mean_ns: f64,
    /// Latency distribution.
    pub lat: LatencySummary,
}

/// Accesses of one kind split by fault class.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassSet {
    /// Every access of this kind.
    pub all: ClassStats,
    /// Accesses that took no page fault (None: not classified).
    pub hit: Option<ClassStats>,
    /// Accesses that took a minor fault and no major one.
    pub minor: Option<ClassStats>,
    /// Accesses that took a major fault.
    pub major: Option<ClassStats>,
}

/// Raw histograms of one kind, before summarising.
#[derive(Clone, Debug, Default)]
pub struct ClassHists {
    /// [hit, minor, major].
    pub class: [LatHist; 3],
}

impl ClassHists {
    /// All classes merged.
    pub fn all(&self) -> LatHist {
        let mut a = LatHist::new();
        for h in &self.class {
            a.merge(h);
        }
        a
    }

    /// Adds another set.
    pub fn merge(&mut self, o: &ClassHists) {
        for (a, b) in self.class.iter_mut().zip(&o.class) {
            a.merge(b);
        }
    }

    /// Summarises; `classified` false leaves the class fields empty.
    pub fn summarise(&self, classified: bool) -> ClassSet {
        let all = self.all();
        let total = all.len();
        let stats = |h: &LatHist| ClassStats {
            accesses: h.len(),
            share_pct: if total == 0 {
                0.0
            } else {
                h.len() as f64 * 100.0 / total as f64
            },
            mean_ns: if h.is_empty() { 0.0 } else { h.mean() },
            lat: h.summary(),
        };
        ClassSet {
            all: stats(&all),
            hit: classified.then(|| stats(&self.class[0])),
            minor: classified.then(|| stats(&self.class[1])),
            major: classified.then(|| stats(&self.class[2])),
        }
    }
}

/// The paper's Table 2 for this run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Table2 {
    /// Row 1: average latency of all accesses including hits, nanoseconds.
    pub avg_all_ns: f64,
    /// Row 2: most frequent major-fault latency (centre of the fullest
    /// 2^(1/8)-wide bucket), nanoseconds. None without major faults.
    pub major_mode_ns: Option<f64>,
    /// Row 3: average latency of all major faults, nanoseconds.
    pub avg_major_ns: Option<f64>,
    /// The media latency given with --media-latency, nanoseconds.
    pub media_latency_ns: Option<u64>,
    /// Row 4: average OS overhead of a major fault (row 3 - media latency),
    /// nanoseconds.
    pub os_overhead_ns: Option<f64>,
    /// Row 5: OS overhead as a percentage of the media latency.
    pub os_overhead_pct: Option<f64>,
    /// Share of the measuring threads' run time spent in accesses longer
    /// than 100 us, percent.
    pub time_in_over_100us_pct: f64,
    /// Share of the measuring threads' run time spent in accesses of 1 ms
    /// or longer, percent.
    pub time_in_over_1ms_pct: f64,
}

/// Sum of the latencies of samples at or above `ns`, nanoseconds.
pub fn time_at_or_above(h: &LatHist, ns: u64) -> f64 {
    h.inner()
        .iter_recorded()
        .filter(|v| v.value_iterated_to() >= ns)
        .map(|v| {
            h.inner().median_equivalent(v.value_iterated_to()) as f64 * v.count_at_value() as f64
        })
        .sum()
}

impl Table2 {
    /// Computes the table from all accesses and the major faults;
    /// `busy_ns` is the summed measuring time of all threads.
    pub fn compute(
        all: &LatHist,
        major: Option<&LatHist>,
        busy_ns: u64,
        media_ns: Option<u64>,
    ) -> Self {
        let major = major.filter(|m| !m.is_empty());
        let mode = major.and_then(|m| {
            let s = m.summary();
            s.buckets
                .iter()
                .max_by_key(|b| b.count)
                .map(|b| (b.lo_ns as f64 + b.hi_ns as f64) / 2.0)
        });
        let avg_major = major.map(LatHist::mean);
        let overhead = match (avg_major, media_ns) {
            (Some(a), Some(m)) => Some(a - m as f64),
            _ => None,
        };
        let pct = match (overhead, media_ns) {
            (Some(o), Some(m)) if m > 0 => Some(o * 100.0 / m as f64),
            _ => None,
        };
        let share = |ns| {
            if busy_ns == 0 {
                0.0
            } else {
                (time_at_or_above(all, ns) * 100.0 / busy_ns as f64).min(100.0)
            }
        };
        Self {
            avg_all_ns: if all.is_empty() { 0.0 } else { all.mean() },
            major_mode_ns: mode,
            avg_major_ns: avg_major,
            media_latency_ns: media_ns,
            os_overhead_ns: overhead,
            os_overhead_pct: pct,
            time_in_over_100us_pct: share(100_001),
            time_in_over_1ms_pct: share(1_000_000),
        }
    }
}

/// Page fault accounting: classified counts against the kernel's.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FaultAccounting {
    /// How accesses were classified (`rusage`, `none`, or pmbench's
    /// `latency-only` for imports).
    pub method: String,
    /// `rusage` only: mean cost of one getrusage call, nanoseconds (two per
    /// access, both outside the timed window); 0 otherwise.
    pub classifier_call_ns: f64,
    /// Major faults counted inside timed accesses.
    pub major_faults: u64,
    /// Minor faults counted inside timed accesses.
    pub minor_faults: u64,
    /// Major faults of the measuring threads outside timed accesses.
    pub major_outside_access: u64,
    /// Minor faults of the measuring threads outside timed accesses.
    pub minor_outside_access: u64,
    /// The memory cgroup's own counters over the measured phase.
    pub cgroup: Option<CgroupStat>,
    /// Classified major faults against the cgroup's, percent difference
    /// (|classified - cgroup| / cgroup).
    pub cgroup_major_diff_pct: Option<f64>,
}

/// vmstat snapshots and deltas, as pmbench reports them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct VmstatReport {
    /// Before init and warm-up.
    pub pre_warmup: Vmstat,
    /// After warm-up, before the measured run.
    pub pre_run: Vmstat,
    /// Right after the measured run.
    pub post_run: Vmstat,
    /// After the measuring process exited (memory unmapped).
    pub post_unmap: Vmstat,
    /// Delta over init and warm-up.
    pub warmup_delta: Vmstat,
    /// Delta over the measured run.
    pub run_delta: Vmstat,
    /// Delta from the run's end to after unmapping.
    pub after_delta: Vmstat,
}

/// Use of one swap area over the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SwapUse {
    /// Device or file.
    pub path: PathBuf,
    /// Added by dmalab for this run.
    pub added_by_dmalab: bool,
    /// Priority.
    pub priority: i32,
    /// Size, bytes.
    pub size_bytes: u64,
    /// In use before the measured run, bytes.
    pub used_pre_run_bytes: u64,
    /// In use right after the measured run, bytes.
    pub used_post_run_bytes: u64,
    /// True when the area held any of the run's pages (in use > 0 at some
    /// point of the run while the worker ran).
    pub received_pages: bool,
}

/// What the run set up on the host (all of it undone afterwards).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SetupReport {
    /// Memory cgroup the worker ran in.
    pub cgroup: Option<PathBuf>,
    /// cgroup interface version (`v1`/`v2`).
    pub cgroup_version: Option<String>,
    /// Memory limit, bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Settings changed for the run: path, old value, run value.
    pub settings: Vec<crate::state::SettingChange>,
    /// Leftovers of earlier killed runs removed at start.
    pub leftovers_removed: Vec<String>,
    /// Cleanup steps that failed (empty when all was undone).
    pub cleanup_errors: Vec<String>,
}

/// Per-thread figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadSummary {
    /// Accesses made.
    pub accesses: u64,
    /// Measuring time, nanoseconds.
    pub measured_ns: u64,
    /// Mean latency of this thread's accesses, nanoseconds.
    pub mean_ns: f64,
}

/// The result of `dmalab page` (and of `dmalab page import`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PageResult {
    /// Wall time of the measured phase, nanoseconds.
    pub runtime_ns: u64,
    /// Wall time of init and warm-up, nanoseconds.
    pub warmup_ns: u64,
    /// All accesses (reads and writes) by class.
    pub total: ClassSet,
    /// Reads by class.
    pub read: ClassSet,
    /// Writes by class.
    pub write: ClassSet,
    /// The paper's Table 2.
    pub table2: Table2,
    /// Fault accounting against the kernel's counters.
    pub faults: FaultAccounting,
    /// /proc/vmstat before, during and after.
    pub vmstat: VmstatReport,
    /// Swap areas and which received pages.
    pub swap: Vec<SwapUse>,
    /// Host set-up of the run.
    pub setup: SetupReport,
    /// Per-thread figures.
    pub threads: Vec<ThreadSummary>,
    /// Timer used (`rdtscp`, `rdtsc`, `clock`).
    pub timer: String,
    /// Timer frequency, Hz.
    pub timer_hz: f64,
    /// The timer's own cost (smallest empty window), nanoseconds; included
    /// in every latency.
    pub timer_overhead_ns: u64,
}

fn pct(x: f64) -> String {
    format!("{x:.1}%")
}

fn opt_ns(x: Option<f64>) -> String {
    x.map_or("n/a".into(), fmt_ns)
}

fn class_line(out: &mut String, name: &str, s: &ClassStats) {
    let p = |q: f64| s.lat.p(q).map_or("-".into(), |v| fmt_ns(v as f64));
    let _ = writeln!(
        out,
        "  {name:<6} {:>11} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}",
        s.accesses,
        pct(s.share_pct),
        if s.accesses == 0 {
            "-".into()
        } else {
            fmt_ns(s.mean_ns)
        },
        p(50.0),
        p(99.0),
        p(99.9),
        if s.accesses == 0 {
            "-".into()
        } else {
            fmt_ns(s.lat.max_ns as f64)
        },
    );
}

fn class_table(out: &mut String, title: &str, c: &ClassSet) {
    let _ = writeln!(out, "{title}:");
    let _ = writeln!(
        out,
        "  {:<6} {:>11} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "class", "accesses", "share", "mean", "p50", "p99", "p99.9", "max"
    );
    for (name, s) in [("hit", &c.hit), ("minor", &c.minor), ("major", &c.major)] {
        if let Some(s) = s {
            class_line(out, name, s);
        }
    }
    class_line(out, "all", &c.all);
}

/// Power-of-two histogram rows (`[lo, 2*lo)`) with a count per class.
fn histogram_rows(out: &mut String, hists: &[(&str, &LatencySummary)]) {
    out.push_str(&dmalab_core::hist_table::columns(hists));
}

impl PageResult {
    /// The text summary printed on stdout.
    pub fn render_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "dmalab page: {} accesses in {:.2} s ({} thread(s)), timer {} (own cost {} ns, included)",
            self.total.all.accesses,
            self.runtime_ns as f64 / 1e9,
            self.threads.len(),
            self.timer,
            self.timer_overhead_ns
        );
        if let (Some(cg), Some(lim)) = (&self.setup.cgroup, self.setup.memory_limit_bytes) {
            let _ = writeln!(
                o,
                "memory cgroup {} ({}), limit {}",
                cg.display(),
                self.setup.cgroup_version.as_deref().unwrap_or("?"),
                fmt_bytes(lim as f64)
            );
        }
        for s in &self.setup.settings {
            let _ = writeln!(
                o,
                "set for the run: {} = {} (was {})",
                s.path.display(),
                s.new,
                s.old
            );
        }
        let _ = writeln!(o);
        class_table(&mut o, "Reads", &self.read);
        class_table(&mut o, "Writes", &self.write);
        class_table(&mut o, "All accesses", &self.total);
        let _ = writeln!(o);
        if let (Some(h), Some(mi), Some(ma)) =
            (&self.total.hit, &self.total.minor, &self.total.major)
        {
            let _ = writeln!(o, "Latency histogram by fault class (all accesses):");
            histogram_rows(
                &mut o,
                &[("hit", &h.lat), ("minor", &mi.lat), ("major", &ma.lat)],
            );
        } else {
            let _ = writeln!(o, "Latency histogram (not classified):");
            histogram_rows(
                &mut o,
                &[("read", &self.read.all.lat), ("write", &self.write.all.lat)],
            );
        }
        let _ = writeln!(o);
        table2_section(&mut o, &self.table2);
        let _ = writeln!(o);
        fault_section(&mut o, &self.faults);
        let _ = writeln!(o);
        vmstat_section(&mut o, &self.vmstat, &self.swap);
        for l in &self.setup.leftovers_removed {
            let _ = writeln!(o, "removed leftover of a killed run: {l}");
        }
        for e in &self.setup.cleanup_errors {
            let _ = writeln!(o, "CLEANUP FAILED: {e}");
        }
        o
    }
}

/// The paper's Table 2 figures, one numbered line each.
fn table2_section(o: &mut String, t: &Table2) {
    let _ = writeln!(o, "Table 2 summary:");
    let _ = writeln!(
        o,
        "  1 average latency of all accesses incl. hits: {}",
        fmt_ns(t.avg_all_ns)
    );
    let _ = writeln!(
        o,
        "  2 most frequent major-fault latency:          {}",
        opt_ns(t.major_mode_ns)
    );
    let _ = writeln!(
        o,
        "  3 average latency of all major faults:        {}",
        opt_ns(t.avg_major_ns)
    );
    match t.media_latency_ns {
        Some(m) => {
            let _ = writeln!(
                o,
                "  4 average OS overhead per major fault:        {} (media latency {})",
                opt_ns(t.os_overhead_ns),
                fmt_ns(m as f64)
            );
            let _ = writeln!(
                o,
                "  5 OS overhead as % of media latency:          {}",
                t.os_overhead_pct
                    .map_or("n/a".into(), |p| format!("{p:.0}%"))
            );
        }
        None => {
            let _ = writeln!(
                o,
                "  4/5 OS overhead:                              n/a (give --media-latency)"
            );
        }
    }
    let _ = writeln!(
        o,
        "  run time in accesses > 100 us:                {}",
        pct(t.time_in_over_100us_pct)
    );
    let _ = writeln!(
        o,
        "  run time in accesses >= 1 ms:                 {}",
        pct(t.time_in_over_1ms_pct)
    );
}

/// How faults were classified and what was counted.
fn fault_section(o: &mut String, f: &FaultAccounting) {
    let how = match f.method.as_str() {
        "perf" => "perf page-fault event rings read before and after each access, no system call".to_string(),
        "rusage" => format!(
            "getrusage(RUSAGE_THREAD) before and after each access, {:.0} ns per call, outside the timed window",
            f.classifier_call_ns
        ),
        m => m.to_string(),
    };
    let _ = writeln!(o, "Fault accounting ({how}):");
    let _ = writeln!(
        o,
        "  classified: {} major, {} minor faults; outside accesses: {} major, {} minor",
        f.major_faults, f.minor_faults, f.major_outside_access, f.minor_outside_access
    );
    if let Some(cg) = &f.cgroup {
        let _ = writeln!(
            o,
            "  memory cgroup over the run: {} major ({} all) faults; classified majors differ by {}",
            cg.pgmajfault,
            cg.pgfault,
            f.cgroup_major_diff_pct.map_or("n/a".into(), |d| format!("{d:.2}%"))
        );
    }
}

/// The `/proc/vmstat` deltas, then the swap areas the run used.
fn vmstat_section(o: &mut String, v: &VmstatReport, swap: &[SwapUse]) {
    let _ = writeln!(
        o,
        "/proc/vmstat        {:>12} {:>12} {:>12} {:>12}",
        "pswpin", "pswpout", "pgmajfault", "pgfault"
    );
    for (name, x) in [
        ("warm-up delta", &v.warmup_delta),
        ("run delta", &v.run_delta),
        ("after delta", &v.after_delta),
    ] {
        let _ = writeln!(
            o,
            "  {name:<17} {:>12} {:>12} {:>12} {:>12}",
            x.pswpin, x.pswpout, x.pgmajfault, x.pgfault
        );
    }
    if !swap.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "Swap areas:");
        for s in swap {
            let _ = writeln!(
                o,
                "  {} prio {} size {}: used {} -> {}{}{}",
                s.path.display(),
                s.priority,
                fmt_bytes(s.size_bytes as f64),
                fmt_bytes(s.used_pre_run_bytes as f64),
                fmt_bytes(s.used_post_run_bytes as f64),
                if s.received_pages {
                    ", received pages"
                } else {
                    ", received nothing"
                },
                if s.added_by_dmalab {
                    " (added by dmalab)"
                } else {
                    ""
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table2_from_known_histograms() {
        let mut all = LatHist::new();
        let mut major = LatHist::new();
        all.record_n(100, 900);
        major.record_n(10_000, 90);
        major.record_n(2_000_000, 10);
        all.merge(&major);
        // 1000 accesses; busy time 40 ms.
        let t = Table2::compute(&all, Some(&major), 40_000_000, Some(5_000));
        let avg_major = (90.0 * 10_000.0 + 10.0 * 2_000_000.0) / 100.0;
        assert!((t.avg_major_ns.unwrap() - avg_major).abs() / avg_major < 0.01);
        let mode = t.major_mode_ns.unwrap();
        assert!((mode - 10_000.0).abs() / 10_000.0 < 0.1, "{mode}");
        assert!((t.os_overhead_ns.unwrap() - (avg_major - 5000.0)).abs() / avg_major < 0.01);
        // 10 x 2 ms = 20 ms of 40 ms.
        assert!(
            (t.time_in_over_1ms_pct - 50.0).abs() < 1.0,
            "{}",
            t.time_in_over_1ms_pct
        );
        assert!((t.time_in_over_100us_pct - 50.0).abs() < 1.0);
        let none = Table2::compute(&all, None, 1, None);
        assert!(none.avg_major_ns.is_none() && none.os_overhead_pct.is_none());
    }

    fn summary(buckets: &[(u64, u64, u64)]) -> LatencySummary {
        LatencySummary::from_buckets(buckets)
    }

    #[test]
    fn histogram_rows_text_is_pinned() {
        let hit = summary(&[(0, 0, 2), (90, 95, 500), (120, 130, 40)]);
        let minor = summary(&[(1_000, 1_080, 30), (1_500, 1_600, 5)]);
        let major = summary(&[(95, 99, 1), (2_000_000, 2_100_000, 9)]);
        let mut o = String::new();
        histogram_rows(
            &mut o,
            &[("hit", &hit), ("minor", &minor), ("major", &major)],
        );
        assert_eq!(
            o,
            "                  latency         hit       minor       major\n  [   1.0 ns,    2.0 ns)           2           0           0\n  [  64.0 ns,  128.0 ns)         540           0           1\n  [ 512.0 ns,   1.02 us)           0          30           0\n  [  1.02 us,   2.05 us)           0           5           0\n  [  1.05 ms,   2.10 ms)           0           0           9\n"
        );
        let mut o = String::new();
        histogram_rows(
            &mut o,
            &[("read", &hit), ("write", &LatencySummary::default())],
        );
        assert_eq!(
            o,
            "                  latency        read       write\n  [   1.0 ns,    2.0 ns)           2           0\n  [  64.0 ns,  128.0 ns)         540           0\n"
        );
    }
}
