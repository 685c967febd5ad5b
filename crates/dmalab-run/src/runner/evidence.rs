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
    /// The counters now; the aggressors' CPU time is the sum over them
    /// (None when there are none, or one cannot be read).
    fn take(cpus: &[usize], aggressors: &[i32]) -> Self {
        let cpu_ns = aggressors
            .iter()
            .map(|&p| sched::cpu_time_ns(p))
            .sum::<Option<u64>>()
            .filter(|_| !aggressors.is_empty());
        Self {
            interrupts: sched::interrupts_on(cpus),
            softirqs: sched::softirqs_on(cpus),
            steal_ns: sched::steal_ns_on(cpus),
            aggressor_cpu_ns: cpu_ns,
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

/// Per-second samples of each load, in the order of `Window::stats`.
type Sampler = (mpsc::Sender<()>, std::thread::JoinHandle<Vec<Vec<Sample>>>);

/// Samples the aggressors' counters once per second while the victim runs.
///
/// A run has one load, or a group's members: each keeps its own live-stats
/// page, and all of them are read at the victim's start, once per second,
/// and at its end, one right after another, so each member's work is
/// counted over the same window.
pub(super) struct Window {
    /// The victim's CPUs (interrupts, softirqs and steal are counted there).
    cpus: Vec<usize>,
    /// The aggressors' pids, for their CPU time.
    aggressor_pids: Vec<i32>,
    sys0: Option<SysSnap>,
    sys1: Option<SysSnap>,
    /// What the kernel said about the victim's process when it exited.
    pub(super) usage: Option<ChildUsage>,
    /// Each load's live-stats page (None: it keeps none).
    stats: Vec<Option<Arc<LiveStats>>>,
    start: Vec<Option<Snapshot>>,
    end: Vec<Option<Snapshot>>,
    sampler: Option<Sampler>,
    t0: Option<Instant>,
    t1: Option<Instant>,
}

impl Window {
    /// A window over the loads whose live-stats pages are `stats` (one per
    /// load; none for a plain run) and whose processes are `aggressor_pids`.
    pub(super) fn new(
        stats: Vec<Option<Arc<LiveStats>>>,
        cpus: Vec<usize>,
        aggressor_pids: Vec<i32>,
    ) -> Self {
        let n = stats.len();
        Self {
            cpus,
            aggressor_pids,
            sys0: None,
            sys1: None,
            usage: None,
            stats,
            start: vec![None; n],
            end: vec![None; n],
            sampler: None,
            t0: None,
            t1: None,
        }
    }

    /// The victim starts now.
    pub(super) fn start(&mut self) {
        self.sys0 = Some(SysSnap::take(&self.cpus, &self.aggressor_pids));
        // A page that cannot be read (truncated under the runner) leaves
        // that load without evidence rather than ending the run.
        self.start = self
            .stats
            .iter()
            .map(|ls| ls.as_ref().and_then(|ls| ls.snapshot().ok()))
            .collect();
        let pages: Vec<(usize, Arc<LiveStats>, Snapshot)> = self
            .stats
            .iter()
            .zip(&self.start)
            .enumerate()
            .filter_map(|(i, (ls, s0))| Some((i, ls.clone()?, (*s0)?)))
            .collect();
        if !pages.is_empty() {
            let n = self.stats.len();
            let (tx, rx) = mpsc::channel::<()>();
            let h = std::thread::spawn(move || {
                let mut out = vec![Vec::new(); n];
                let mut prev: Vec<Snapshot> = pages.iter().map(|p| p.2).collect();
                'tick: while let Err(mpsc::RecvTimeoutError::Timeout) =
                    rx.recv_timeout(Duration::from_secs(1))
                {
                    for (k, (i, ls, s0)) in pages.iter().enumerate() {
                        let Ok(s) = ls.snapshot() else { break 'tick };
                        out[*i].push(sample(s0, &prev[k], &s));
                        prev[k] = s;
                    }
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
        self.end = self
            .stats
            .iter()
            .map(|ls| ls.as_ref().and_then(|ls| ls.snapshot().ok()))
            .collect();
        self.sys1 = Some(SysSnap::take(&self.cpus, &self.aggressor_pids));
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

    /// Stops the sampler; each load's evidence (in the order of the
    /// pages given to [`Window::new`]), None for one without live stats.
    pub(super) fn evidence(mut self) -> Vec<Option<Evidence>> {
        let mut samples = match self.sampler.take() {
            Some((tx, h)) => {
                let _ = tx.send(());
                h.join().unwrap_or_default()
            }
            None => Vec::new(),
        };
        samples.resize(self.stats.len(), Vec::new());
        self.start
            .iter()
            .zip(&self.end)
            .zip(samples)
            .map(|((a, b), s)| Some(evidence(a.as_ref()?, b.as_ref()?, s)))
            .collect()
    }
}

/// A group's evidence: its members' work in the victim's window added up.
/// Counts and rates add; the window is the longest member's (their
/// snapshots are taken one right after another); it ran throughout when
/// every member did; the samples add interval by interval, as far as every
/// member has one. None when a member has no evidence: a sum that leaves
/// one out would pass for the group's.
pub(super) fn sum_evidence(members: &[Option<Evidence>]) -> Option<Evidence> {
    let ms: Vec<&Evidence> = members.iter().map(Option::as_ref).collect::<Option<_>>()?;
    let first = ms.first()?;
    let n = ms.iter().map(|e| e.samples.len()).min().unwrap_or(0);
    let samples = (0..n)
        .map(|i| Sample {
            t_ns: first.samples[i].t_ns,
            data_bytes: ms.iter().map(|e| e.samples[i].data_bytes).sum(),
            commands: ms.iter().map(|e| e.samples[i].commands).sum(),
            interval_ns: first.samples[i].interval_ns,
        })
        .collect();
    Some(Evidence {
        window_ns: ms.iter().map(|e| e.window_ns).max().unwrap_or(0),
        data_bytes: ms.iter().map(|e| e.data_bytes).sum(),
        commands: ms.iter().map(|e| e.commands).sum(),
        blocks: ms.iter().map(|e| e.blocks).sum(),
        bw_bytes: ms.iter().map(|e| e.bw_bytes).sum(),
        cmd_per_s: ms.iter().map(|e| e.cmd_per_s).sum(),
        running_throughout: ms.iter().all(|e| e.running_throughout),
        samples,
    })
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

    #[test]
    fn a_groups_evidence_adds_its_members_and_needs_all_of_them() {
        let s = |d, c| Sample {
            t_ns: 1_000,
            data_bytes: d,
            commands: c,
            interval_ns: 1_000,
        };
        let a = Evidence {
            window_ns: 2_000,
            data_bytes: 4096,
            commands: 1,
            blocks: 8,
            bw_bytes: 2048.0,
            cmd_per_s: 0.5,
            running_throughout: true,
            samples: vec![s(4096, 1), s(0, 0)],
        };
        let b = Evidence {
            window_ns: 2_100,
            data_bytes: 0,
            commands: 30,
            blocks: 30,
            bw_bytes: 0.0,
            cmd_per_s: 15.0,
            running_throughout: true,
            samples: vec![s(0, 30)],
        };
        let g = sum_evidence(&[Some(a.clone()), Some(b.clone())]).unwrap();
        assert_eq!(
            (g.window_ns, g.data_bytes, g.commands, g.blocks),
            (2_100, 4096, 31, 38)
        );
        assert_eq!((g.bw_bytes, g.cmd_per_s), (2048.0, 15.5));
        assert!(g.running_throughout);
        assert_eq!(
            g.samples,
            vec![s(4096, 31)],
            "as far as every member has one"
        );
        let stopped = Evidence {
            running_throughout: false,
            ..b
        };
        assert!(
            !sum_evidence(&[Some(a.clone()), Some(stopped)])
                .unwrap()
                .running_throughout
        );
        assert_eq!(sum_evidence(&[Some(a), None]), None);
        assert_eq!(sum_evidence(&[]), None);
    }
}
