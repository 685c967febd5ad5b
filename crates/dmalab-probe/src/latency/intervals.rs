//! Live intervals: every thread reports its share of each interval; the
//! collector merges them and hands each interval on once it is complete.

use super::result::IntervalFigures;
use super::worker::IntervalMsg;
use dmalab_core::hist::LatHist;

/// Merges interval messages from `threads` threads, printing each interval
/// through `on_interval` as soon as every thread has reported it.
pub(super) struct IntervalCollector {
    threads: usize,
    pending: std::collections::BTreeMap<u64, (usize, u64, u64, LatHist, bool)>,
    interval_ns: u64,
    out: Vec<IntervalFigures>,
}

impl IntervalCollector {
    /// A collector for `threads` threads and intervals of `interval_ns`.
    pub(super) fn new(threads: usize, interval_ns: u64) -> Self {
        Self {
            threads,
            pending: Default::default(),
            interval_ns,
            out: Vec::new(),
        }
    }

    pub(super) fn add(&mut self, m: IntervalMsg, on: &mut dyn FnMut(&IntervalFigures)) {
        let e = self
            .pending
            .entry(m.index)
            .or_insert_with(|| (0, 0, 0, LatHist::new(), false));
        e.0 += 1;
        e.1 += m.accesses;
        e.2 += m.elapsed_ns;
        if let Some(h) = &m.hist {
            e.3.merge(h);
            e.4 = true;
        }
        // Intervals are complete when all threads reported them, or when a
        // later one has arrived from everyone (a thread may skip an index
        // it spent entirely in one long batch).
        let ready: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, v)| v.0 >= self.threads)
            .map(|(k, _)| *k)
            .collect();
        for k in ready {
            let older: Vec<u64> = self.pending.range(..=k).map(|(k, _)| *k).collect();
            for o in older {
                if let Some(v) = self.pending.remove(&o) {
                    let f = self.figures(o, v);
                    on(&f);
                    self.out.push(f);
                }
            }
        }
    }

    fn figures(&self, index: u64, v: (usize, u64, u64, LatHist, bool)) -> IntervalFigures {
        let (_, accesses, elapsed, h, has_hist) = v;
        let mut f = IntervalFigures {
            index,
            start_ns: index * self.interval_ns,
            accesses,
            ..Default::default()
        };
        if has_hist && !h.is_empty() {
            f.mean_ns = h.mean();
            f.p50_ns = Some(h.percentile(50.0));
            f.p90_ns = Some(h.percentile(90.0));
            f.p99_ns = Some(h.percentile(99.0));
            f.p99_9_ns = Some(h.percentile(99.9));
            f.max_ns = Some(h.inner().max());
        } else if accesses > 0 {
            // Clock intervals: every thread's elapsed time covers its own
            // accesses; the mean per access is total time over total count
            // per thread, i.e. elapsed/accesses summed the same way.
            f.mean_ns = elapsed as f64 / accesses as f64;
        }
        f
    }

    pub(super) fn finish(mut self, on: &mut dyn FnMut(&IntervalFigures)) -> Vec<IntervalFigures> {
        let rest: Vec<u64> = self.pending.keys().copied().collect();
        for k in rest {
            if let Some(v) = self.pending.remove(&k) {
                let f = self.figures(k, v);
                on(&f);
                self.out.push(f);
            }
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(index: u64, accesses: u64, elapsed_ns: u64) -> IntervalMsg {
        IntervalMsg {
            index,
            accesses,
            elapsed_ns,
            hist: None,
        }
    }

    fn timed(index: u64, samples: &[u64]) -> IntervalMsg {
        let mut h = LatHist::new();
        for &s in samples {
            h.record(s);
        }
        IntervalMsg {
            index,
            accesses: samples.len() as u64,
            elapsed_ns: 0,
            hist: Some(h),
        }
    }

    #[test]
    fn an_interval_is_handed_on_once_every_thread_reported_it() {
        let mut c = IntervalCollector::new(2, 1_000_000);
        let mut seen = Vec::new();
        c.add(clock(0, 100, 10_000), &mut |f| seen.push(f.clone()));
        assert!(seen.is_empty(), "one thread of two is not enough");
        c.add(clock(0, 300, 20_000), &mut |f| seen.push(f.clone()));
        assert_eq!(seen.len(), 1);
        let f = &seen[0];
        assert_eq!((f.index, f.start_ns, f.accesses), (0, 0, 400));
        // Clock intervals: total time over total accesses.
        assert_eq!(f.mean_ns, 30_000.0 / 400.0);
        assert!(f.p50_ns.is_none() && f.max_ns.is_none());
        let out = c.finish(&mut |_| panic!("nothing is left"));
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn a_skipped_interval_is_flushed_by_a_later_complete_one() {
        // Thread B spends all of interval 1 in one long batch and never
        // reports it: interval 2 complete from both flushes 1 first.
        let mut c = IntervalCollector::new(2, 10);
        let mut order = Vec::new();
        let mut on = |f: &IntervalFigures| order.push((f.index, f.accesses, f.start_ns));
        c.add(clock(0, 1, 1), &mut on);
        c.add(clock(1, 2, 1), &mut on);
        c.add(clock(2, 3, 1), &mut on);
        c.add(clock(0, 4, 1), &mut on);
        c.add(clock(2, 5, 1), &mut on);
        assert_eq!(order, [(0, 5, 0), (1, 2, 10), (2, 8, 20)]);
    }

    #[test]
    fn finish_hands_on_what_is_left_in_order_with_percentiles() {
        let mut c = IntervalCollector::new(3, 5);
        let mut n = 0;
        c.add(timed(4, &[100, 200, 300, 400]), &mut |_| n += 1);
        c.add(timed(3, &[1_000]), &mut |_| n += 1);
        assert_eq!(n, 0);
        let mut late = Vec::new();
        let out = c.finish(&mut |f| late.push(f.index));
        assert_eq!(late, [3, 4]);
        assert_eq!(out.len(), 2);
        let f = &out[1];
        assert_eq!((f.index, f.start_ns, f.accesses), (4, 20, 4));
        let p50 = f.p50_ns.unwrap();
        assert!((195..=205).contains(&p50), "{p50}");
        let max = f.max_ns.unwrap();
        assert!((398..=402).contains(&max), "{max}");
        assert!((f.mean_ns - 250.0).abs() < 3.0, "{}", f.mean_ns);
    }
}
