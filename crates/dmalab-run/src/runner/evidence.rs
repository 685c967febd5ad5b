//! Evidence of the load: the aggressor's live-stats counters read when the
//! victim starts and ends, and once per second between; and the victim's
//! side (interrupts, softirqs and steal on its CPUs, the aggressor's CPU
//! time, and what the kernel says about the victim's process).

use super::spawn::ChildUsage;
use crate::record::{Evidence, Sample, VictimEvidence};
use dmalab_core::livestats::{Reader as LiveStats, Snapshot, State};
use dmalab_core::sys::sched;
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The system counters at one end of the window.
#[derive(Clone, Debug, Default)]
struct SysSnap {
    interrupts: Option<BTreeMap<String, u64>>,
    softirqs: Option<BTreeMap<String, u64>>,
    steal_ns: Option<u64>,
    aggressor_cpu_ns: Option<u64>,
}

impl SysSnap {
    fn take(cpus: &[usize], aggressor: Option<i32>) -> Self {
        Self {
            interrupts: sched::interrupts_on(cpus),
            softirqs: sched::softirqs_on(cpus),
            steal_ns: sched::steal_ns_on(cpus),
            aggressor_cpu_ns: aggressor.and_then(sched::cpu_time_ns),
        }
    }
}

/// What moved between two readings of per-source counters.
fn moved(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(*a.get(k).unwrap_or(&0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// Samples the aggressor's counters once per second while the victim runs.
pub(super) struct Window {
    /// The victim's CPUs (interrupts, softirqs and steal are counted there).
    cpus: Vec<usize>,
    /// The aggressor's pid, for its CPU time.
    aggressor_pid: Option<i32>,
    sys0: Option<SysSnap>,
    sys1: Option<SysSnap>,
    /// What the kernel said about the victim's process when it exited.
    pub(super) usage: Option<ChildUsage>,
    pub(super) stats: Option<Arc<LiveStats>>,
    start: Option<Snapshot>,
    pub(super) end: Option<Snapshot>,
    sampler: Option<(mpsc::Sender<()>, std::thread::JoinHandle<Vec<Sample>>)>,
    t0: Option<Instant>,
    pub(super) t1: Option<Instant>,
}

impl Window {
    pub(super) fn new(
        stats: Option<Arc<LiveStats>>,
        cpus: Vec<usize>,
        aggressor_pid: Option<i32>,
    ) -> Self {
        Self {
            cpus,
            aggressor_pid,
            sys0: None,
            sys1: None,
            usage: None,
            stats,
            start: None,
            end: None,
            sampler: None,
            t0: None,
            t1: None,
        }
    }

    /// The victim starts now.
    pub(super) fn start(&mut self) {
        self.sys0 = Some(SysSnap::take(&self.cpus, self.aggressor_pid));
        // A page that cannot be read (truncated under the runner) leaves
        // the window without load evidence rather than ending the run.
        if let Some((ls, s0)) = self
            .stats
            .as_ref()
            .and_then(|ls| Some((ls, ls.snapshot().ok()?)))
        {
            self.start = Some(s0);
            let ls = ls.clone();
            let (tx, rx) = mpsc::channel::<()>();
            let h = std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut prev = s0;
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_secs(1))
                {
                    let Ok(s) = ls.snapshot() else { break };
                    out.push(sample(&s0, &prev, &s));
                    prev = s;
                }
                out
            });
            self.sampler = Some((tx, h));
        }
        self.t0 = Some(Instant::now());
    }

    /// The victim ended now.
    pub(super) fn end(&mut self) {
        self.end_at(Instant::now());
    }

    /// The victim ended at `t` (its wait returned then).
    pub(super) fn end_at(&mut self, t: Instant) {
        self.t1 = Some(t);
        if let Some(ls) = &self.stats {
            self.end = ls.snapshot().ok();
        }
        self.sys1 = Some(SysSnap::take(&self.cpus, self.aggressor_pid));
    }

    /// The victim's side of the window (None before it started).
    pub(super) fn victim_evidence(&self) -> Option<VictimEvidence> {
        let (a, b) = (self.sys0.as_ref()?, self.sys1.as_ref()?);
        let delta = |x: Option<u64>, y: Option<u64>| Some(y?.saturating_sub(x?));
        let u = self.usage;
        Some(VictimEvidence {
            window_ns: self.wall_ns(),
            nonvoluntary_ctxt_switches: u.map(|u| u.nonvoluntary_ctxt_switches),
            voluntary_ctxt_switches: u.map(|u| u.voluntary_ctxt_switches),
            cpu_time_ns: u.map(|u| u.cpu_time_ns),
            run_delay_ns: u.and_then(|u| u.sched).map(|s| s.wait_ns),
            migrations: u.and_then(|u| u.migrations),
            interrupts: match (&a.interrupts, &b.interrupts) {
                (Some(x), Some(y)) => Some(moved(x, y).values().sum()),
                _ => None,
            },
            softirqs: match (&a.softirqs, &b.softirqs) {
                (Some(x), Some(y)) => moved(x, y),
                _ => BTreeMap::new(),
            },
            steal_ns: delta(a.steal_ns, b.steal_ns),
            aggressor_cpu_ns: delta(a.aggressor_cpu_ns, b.aggressor_cpu_ns),
        })
    }

    /// The victim's wall time, nanoseconds.
    pub(super) fn wall_ns(&self) -> u64 {
        match (self.t0, self.t1) {
            (Some(a), Some(b)) => dmalab_core::schema::ns(b.duration_since(a)),
            _ => 0,
        }
    }

    /// Stops the sampler; the evidence when there were live stats.
    pub(super) fn evidence(mut self) -> Option<Evidence> {
        let samples = match self.sampler.take() {
            Some((tx, h)) => {
                let _ = tx.send(());
                h.join().unwrap_or_default()
            }
            None => Vec::new(),
        };
        Some(evidence(&self.start?, &self.end?, samples))
    }
}

/// The interval from `prev` to `s`, stamped from the victim's start `s0`.
fn sample(s0: &Snapshot, prev: &Snapshot, s: &Snapshot) -> Sample {
    Sample {
        t_ns: s.taken_ns.saturating_sub(s0.taken_ns),
        data_bytes: s.data_bytes.saturating_sub(prev.data_bytes),
        commands: s.commands.saturating_sub(prev.commands),
        interval_ns: s.taken_ns.saturating_sub(prev.taken_ns),
    }
}

/// The load between the snapshots at the victim's start `a` and end `b`.
fn evidence(a: &Snapshot, b: &Snapshot, samples: Vec<Sample>) -> Evidence {
    let window_ns = b.taken_ns.saturating_sub(a.taken_ns).max(1);
    let secs = window_ns as f64 / 1e9;
    let data_bytes = b.data_bytes.saturating_sub(a.data_bytes);
    let commands = b.commands.saturating_sub(a.commands);
    Evidence {
        window_ns,
        data_bytes,
        commands,
        blocks: b.blocks.saturating_sub(a.blocks),
        bw_bytes: data_bytes as f64 / secs,
        cmd_per_s: commands as f64 / secs,
        running_throughout: a.state == State::Running && b.state == State::Running,
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(state: State, data_bytes: u64, commands: u64, blocks: u64, taken_ns: u64) -> Snapshot {
        Snapshot {
            pid: 1,
            state,
            data_bytes,
            commands,
            blocks,
            updated_ns: taken_ns,
            started_ns: 0,
            taken_ns,
        }
    }

    #[test]
    fn sample_is_the_interval_since_the_previous_one() {
        let s0 = snap(State::Running, 100, 10, 10, 1_000);
        let prev = snap(State::Running, 300, 30, 30, 2_000);
        let s = snap(State::Running, 700, 70, 70, 2_500);
        assert_eq!(
            sample(&s0, &prev, &s),
            Sample {
                t_ns: 1_500,
                data_bytes: 400,
                commands: 40,
                interval_ns: 500,
            }
        );
    }

    #[test]
    fn evidence_is_the_window_between_two_snapshots() {
        let a = snap(State::Running, 1 << 20, 256, 256, 1_000_000_000);
        let b = snap(State::Running, 3 << 20, 768, 768, 3_000_000_000);
        let e = evidence(&a, &b, vec![]);
        assert_eq!(e.window_ns, 2_000_000_000);
        assert_eq!((e.data_bytes, e.commands, e.blocks), (2 << 20, 512, 512));
        assert_eq!(e.bw_bytes, (1 << 20) as f64);
        assert_eq!(e.cmd_per_s, 256.0);
        assert!(e.running_throughout);
        // A load that stopped before the victim did was not running
        // throughout; counters that went backwards count as nothing.
        let c = snap(State::Finished, 0, 0, 0, 1_000_000_000);
        let e = evidence(&a, &c, vec![]);
        assert!(!e.running_throughout);
        assert_eq!((e.window_ns, e.data_bytes, e.commands), (1, 0, 0));
    }
}
