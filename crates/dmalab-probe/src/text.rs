//! Human summaries of probe results (what goes to stdout and to
//! `--output-format text`).

use crate::bandwidth::{BandwidthInterval, BandwidthPlan, BandwidthResult};
use crate::latency::{IntervalFigures, LatencyPlan, LatencyResult};
use crate::loaded::{LoadedPlan, LoadedPoint, LoadedResult};
use dmalab_core::cpus::format_cpu_list;
use dmalab_core::hist::LatencySummary;
use dmalab_core::sys::tsc::{TimerCost, TscInfo};
use dmalab_core::units::{fmt_bytes, fmt_ns};
use std::fmt::Write;

/// A bandwidth in the output unit every command uses (binary).
fn gbs(b: f64) -> String {
    dmalab_core::units::fmt_rate(b)
}

/// The TSC and timer lines.
pub fn timing_lines(tsc: &TscInfo, timer: &TimerCost) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "TSC {:.3} MHz (calibrated against CLOCK_MONOTONIC, {} rounds, spread {:.0} ppm",
        tsc.tsc_hz / 1e6,
        tsc.calibration.rounds,
        tsc.calibration.spread_ppm
    );
    match (&tsc.cpuid_source, tsc.cpuid_vs_calibrated_ppm) {
        (Some(src), Some(ppm)) => {
            let _ = write!(s, "; {src} differs by {ppm:+.0} ppm");
        }
        _ => s.push_str("; CPUID gives no TSC frequency on this CPU"),
    }
    s.push_str(")\n");
    // A CPU without rdtscp brackets with lfence+rdtsc+lfence and has no bare
    // rdtscp pair to report (recorded as 0).
    let (read, note, bare) = match timer.bare_rdtscp_pair_median_cycles {
        0 => (
            "lfence+rdtsc+lfence",
            " (no rdtscp on this CPU)",
            "-".to_string(),
        ),
        c => ("rdtscp+lfence", "", c.to_string()),
    };
    let _ = writeln!(
        s,
        "timer: {read} bracket{note} {} cycles median (min {}) = {:.1} ns, subtracted from every sample; bare rdtscp pair {bare} cycles, bare rdtsc pair {} cycles; one {read} costs {:.0} cycles when repeated; TSC steps by {} cycle(s) = {:.1} ns (the resolution of a sample)",
        timer.fenced_pair_median_cycles,
        timer.fenced_pair_min_cycles,
        timer.subtracted_ns,
        timer.bare_rdtsc_pair_median_cycles,
        timer.fenced_read_cost_cycles,
        timer.tsc_step_cycles,
        tsc.ns(timer.tsc_step_cycles as f64)
    );
    s
}

/// Percentile line of a summary.
pub fn percentiles(sum: &LatencySummary) -> String {
    let p = |q: f64| sum.p(q).map_or("-".into(), |v| fmt_ns(v as f64));
    format!(
        "samples {}  mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        sum.samples,
        fmt_ns(sum.mean_ns),
        p(50.0),
        p(90.0),
        p(99.0),
        p(99.9),
        fmt_ns(sum.max_ns as f64)
    )
}

/// [`percentiles`] with every figure below the timer's resolution marked
/// `*` and a note that says what the mark means (the figure is noise around
/// zero once the bracket is subtracted, not a latency).
pub fn percentiles_flagged(sum: &LatencySummary, resolution_ns: f64) -> String {
    let Some(below) = crate::latency::BelowResolution::of(sum, resolution_ns) else {
        return percentiles(sum);
    };
    let mark = |name: &str, shown: String| {
        if below.figures.iter().any(|f| f == name) {
            format!("{shown}*")
        } else {
            shown
        }
    };
    let p = |q: f64, name: &str| mark(name, sum.p(q).map_or("-".into(), |v| fmt_ns(v as f64)));
    format!(
        "samples {}  mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (* below the timer's {:.1} ns resolution: the bracket subtracted from each sample)",
        sum.samples,
        mark("mean", fmt_ns(sum.mean_ns)),
        p(50.0, "p50"),
        p(90.0, "p90"),
        p(99.0, "p99"),
        p(99.9, "p99.9"),
        mark("max", fmt_ns(sum.max_ns as f64)),
        below.resolution_ns
    )
}

/// A text histogram: the summary's buckets merged to half-octaves, with
/// bars.
pub fn histogram(sum: &LatencySummary) -> String {
    dmalab_core::hist_table::bars(sum)
}

/// Header of the live interval table.
pub fn interval_header() -> String {
    format!(
        "{:>5} {:>8} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "intv", "t_s", "accesses", "mean", "p50", "p90", "p99", "p99.9", "max"
    )
}

/// One line of the live interval table.
pub fn interval_line(f: &IntervalFigures) -> String {
    let o = |v: Option<u64>| v.map_or("-".into(), |x| fmt_ns(x as f64));
    format!(
        "{:>5} {:>8.2} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        f.index,
        f.start_ns as f64 / 1e9,
        f.accesses,
        fmt_ns(f.mean_ns),
        o(f.p50_ns),
        o(f.p90_ns),
        o(f.p99_ns),
        o(f.p99_9_ns),
        o(f.max_ns)
    )
}

/// One line of `probe bandwidth --interval`.
pub fn bandwidth_interval_line(i: &BandwidthInterval) -> String {
    format!(
        "{:>5} {:>8.2} s  {}/s",
        i.index,
        i.start_ns as f64 / 1e9,
        fmt_bytes(i.bw_bytes)
    )
}

/// Summary of a latency run.
pub fn latency(plan: &LatencyPlan, r: &LatencyResult) -> String {
    let mut s = String::new();
    let group = if plan.group_pages == 0 {
        "one group over the whole buffer".to_string()
    } else {
        format!("groups of {} pages", plan.group_pages)
    };
    let _ = writeln!(
        s,
        "dmalab probe latency: {} over {} per thread on {} pages ({group}), {}% writes, {} thread(s) on CPU {}{}, mode {}",
        plan.pattern.name(),
        fmt_bytes(plan.size_bytes as f64),
        plan.pages.name(),
        plan.write_pct,
        plan.cpus.len(),
        format_cpu_list(&plan.cpus),
        plan.membind.map_or(String::new(), |n| format!(", memory on node {n}")),
        plan.mode.name()
    );
    s.push_str(&timing_lines(&r.tsc, &r.timer));
    for t in &r.threads {
        if let Some(b) = t.thp_backed_bytes {
            let _ = writeln!(
                s,
                "CPU {}: {} of the buffer on transparent huge pages",
                t.cpu,
                fmt_bytes(b as f64)
            );
        }
    }
    for t in &r.threads {
        if let Some(n) = t.hugetlb_pages_added {
            let _ = writeln!(
                s,
                "CPU {}: raised the hugetlb pool by {n} page(s) for the run (restored at exit)",
                t.cpu
            );
        }
    }
    if let Some(c) = &r.clock {
        let _ = writeln!(
            s,
            "clock mode: mean {} per access ({} accesses); median of ~1 ms chunks {}",
            fmt_ns(c.mean_ns),
            c.accesses,
            fmt_ns(c.median_chunk_ns)
        );
    }
    for (i, t) in r.threads.iter().enumerate() {
        for (k, rd) in t.rounds.iter().enumerate() {
            let _ = writeln!(
                s,
                "  thread {i} round {k}: clock {}  per-access {}  ratio {:.3}  timed loop {} per access; medians of windows: clock {}  per-access {}  ratio {:.3}",
                fmt_ns(rd.clock_mean_ns),
                fmt_ns(rd.per_access_mean_ns),
                rd.ratio,
                fmt_ns(rd.per_access_loop_ns),
                fmt_ns(rd.clock_median_chunk_ns),
                fmt_ns(rd.per_access_median_batch_ns),
                rd.robust_ratio
            );
        }
    }
    if let Some(p) = &r.per_access {
        let res = crate::latency::BelowResolution::resolution_ns(&r.tsc, &r.timer);
        let _ = writeln!(s, "per-access: {}", percentiles_flagged(p, res));
        if r.threads.len() > 1 {
            for t in &r.threads {
                if let Some(tp) = &t.per_access {
                    let _ = writeln!(s, "  CPU {}: {}", t.cpu, percentiles_flagged(tp, res));
                }
            }
        }
        s.push_str(&histogram(p));
    }
    if !r.intervals.is_empty() {
        s.push_str(&interval_header());
        s.push('\n');
        for f in &r.intervals {
            s.push_str(&interval_line(f));
            s.push('\n');
        }
    }
    if !r.matrix.is_empty() {
        s.push_str(
            "NUMA latency matrix (per-access mean / p50; rows: CPU node, columns: memory node)\n",
        );
        for c in &r.matrix {
            let _ = writeln!(
                s,
                "  cpu node {} -> mem node {}: {} / {}",
                c.cpu_node,
                c.mem_node,
                fmt_ns(c.mean_ns),
                fmt_ns(c.p50_ns as f64)
            );
        }
    }
    s
}

/// Summary of a bandwidth run.
pub fn bandwidth(plan: &BandwidthPlan, r: &BandwidthResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dmalab probe bandwidth: {} traffic{}, {} per array per thread on {} pages, {} thread(s) on CPU {}, delay {} cycles/line",
        plan.traffic.name(),
        match plan.access {
            crate::bandwidth::Access::Sequential => String::new(),
            crate::bandwidth::Access::Random => format!(
                " at random {}-byte blocks",
                plan.granularity_bytes
            ),
        },
        fmt_bytes(plan.size_bytes as f64),
        plan.pages.name(),
        plan.cpus.len(),
        format_cpu_list(&plan.cpus),
        plan.delay_cycles
    );
    for t in &r.threads {
        let _ = writeln!(
            s,
            "  CPU {:>3}: {}  (read {}, written {})",
            t.cpu,
            gbs(t.bw_bytes),
            fmt_bytes(t.read_bytes as f64),
            fmt_bytes(t.write_bytes as f64)
        );
    }
    if let Some(c) = r.delay_iteration_cycles {
        let _ = writeln!(s, "one delay cycle measured {c:.2} TSC cycles");
    }
    let _ = writeln!(
        s,
        "total: {} over {:.2} s (read {}, written {})",
        gbs(r.bw_bytes),
        r.elapsed_ns as f64 / 1e9,
        fmt_bytes(r.read_bytes as f64),
        fmt_bytes(r.write_bytes as f64)
    );
    s
}

/// Header of the loaded-latency table.
pub fn loaded_header() -> String {
    format!(
        "{:>12} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "delay_cyc", "load_GiB/s", "mean", "p50", "p99", "p99.9"
    )
}

/// One row of the loaded-latency table.
pub fn loaded_line(p: &LoadedPoint) -> String {
    let q = |x: f64| p.latency.p(x).map_or("-".into(), |v| fmt_ns(v as f64));
    format!(
        "{:>12} {:>12.2} {:>10} {:>10} {:>10} {:>10}",
        p.delay_cycles.map_or("idle".into(), |d| d.to_string()),
        p.bw_bytes / (1u64 << 30) as f64,
        fmt_ns(p.latency.mean_ns),
        q(50.0),
        q(99.0),
        q(99.9)
    )
}

/// Summary of a loaded-latency sweep.
pub fn loaded(plan: &LoadedPlan, r: &LoadedResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dmalab probe loaded: chase over {} on CPU {}, {} load thread(s) of {} traffic on CPU {} ({} per array)",
        fmt_bytes(plan.size_bytes as f64),
        plan.latency_cpu,
        plan.load_cpus.len(),
        plan.traffic.name(),
        format_cpu_list(&plan.load_cpus),
        fmt_bytes(plan.bw_size_bytes as f64)
    );
    s.push_str(&timing_lines(&r.tsc, &r.timer));
    let _ = writeln!(
        s,
        "one delay cycle measured {:.2} TSC cycles",
        r.delay_iteration_cycles
    );
    s.push_str(&loaded_header());
    s.push('\n');
    for p in &r.points {
        s.push_str(&loaded_line(p));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_core::hist::LatHist;

    #[test]
    fn histogram_rows_add_up() {
        let mut h = LatHist::new();
        h.record_n(5, 100);
        h.record_n(90, 1000);
        h.record_n(100, 1000);
        h.record_n(5_000, 10);
        let sum = h.summary();
        let text = histogram(&sum);
        let counted: u64 = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, 2110);
        // 90 and 100 ns share a half-octave (64..90.5 is another), so at most
        // four rows: 5 ns, 90 ns, 100 ns, 5 us.
        assert!(text.lines().count() <= 5, "{text}");
        assert!(percentiles(&sum).contains("p99"));
    }

    fn sample_summary(buckets: &[(u64, u64, u64)]) -> LatencySummary {
        LatencySummary::from_buckets(buckets)
    }

    #[test]
    fn histogram_text_is_pinned() {
        let sum = sample_summary(&[
            (0, 0, 3),
            (5, 5, 100),
            (88, 95, 1000),
            (96, 104, 1000),
            (105, 114, 7),
            (5_000, 5_400, 10),
            (1_500_000, 1_600_000, 1),
        ]);
        assert_eq!(
            histogram(&sum),
            "        from           to      samples   share\n      0.0 ns       0.0 ns            3   0.14%  #\n      5.0 ns       5.0 ns          100   4.71%  ####\n     88.0 ns      95.0 ns         1000  47.15%  ########################################\n     96.0 ns     114.0 ns         1007  47.48%  ########################################\n     5.00 us      5.40 us           10   0.47%  #\n     1.50 ms      1.60 ms            1   0.05%  #\n"
        );
    }

    #[test]
    fn figures_below_the_timer_resolution_are_marked() {
        // Regression: `--size 32K --mode both` printed `p50 1.0 ns` after
        // subtracting a 15.4 ns bracket, with nothing to say it is noise.
        let mut h = LatHist::new();
        h.record_n(1, 900);
        h.record_n(40, 100);
        let sum = h.summary();
        let line = percentiles_flagged(&sum, 15.4);
        assert!(line.contains("p50 1.0 ns*"), "{line}");
        assert!(
            line.contains("(* below the timer's 15.4 ns resolution: the bracket"),
            "{line}"
        );
        // The max (40 ns) is above it and stays unmarked.
        assert!(line.contains("max 40.0 ns "), "{line}");
        let below = crate::latency::BelowResolution::of(&sum, 15.4).unwrap();
        assert!(below.figures.contains(&"p50".to_string()), "{below:?}");
        assert!(!below.figures.contains(&"max".to_string()), "{below:?}");
        // Nothing below: the line is the plain one, byte for byte.
        assert_eq!(percentiles_flagged(&sum, 0.5), percentiles(&sum));
        assert_eq!(crate::latency::BelowResolution::of(&sum, 0.5), None);
    }
}
