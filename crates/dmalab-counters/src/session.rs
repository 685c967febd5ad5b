//! A counting session: events (and resctrl bandwidth) opened for a scope,
//! started and stopped on the caller's clock, sampled whenever the caller
//! takes its own samples, and reported with totals, rates, per-interval
//! series and the reason for everything the host could not count.

use crate::catalog::Catalog;
use crate::recipes::{self, CpuId, MetricDef, MetricValue};
use crate::resctrl::MbmGroup;
use crate::spec::{self, Absence, Resolved};
use crate::sys::{self, Counter, PerfEventAttr, Reading};
use crate::Roots;
use dmalab_core::UsageError;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::time::Instant;

/// Whose work core and software events count. Uncore events are always
/// counted system-wide on their PMU's cpumask CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// These threads (per-thread counters, summed).
    Threads(Vec<i32>),
    /// A task and every task it creates afterwards (`inherit`).
    Task(i32),
    /// System-wide on these CPUs.
    Cpus(Vec<usize>),
    /// Running processes attached to (`stat -p`): every thread each has
    /// now, and (`inherit`) the threads and children they start later.
    Processes {
        /// The pids given.
        pids: Vec<i32>,
        /// Their threads when the session was opened.
        tids: Vec<i32>,
    },
}

impl Scope {
    /// The threads of this process as they are now.
    pub fn this_process_threads() -> Self {
        let mut tids: Vec<i32> = std::fs::read_dir("/proc/self/task")
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable();
        Scope::Threads(tids)
    }

    /// Running processes (`pids`) with the threads they have now; a pid
    /// that has no `/proc/PID/task` (gone, or not visible) is named in the
    /// error, so `-p` says which one.
    pub fn processes(pids: &[i32]) -> Result<Self, (i32, io::Error)> {
        let mut tids = Vec::new();
        for &pid in pids {
            let rd = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| (pid, e))?;
            let mut t: Vec<i32> = rd
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect();
            t.sort_unstable();
            tids.extend(t);
        }
        Ok(Scope::Processes {
            pids: pids.to_vec(),
            tids,
        })
    }

    /// In words, for the report.
    pub fn describe(&self) -> String {
        match self {
            Scope::Threads(t) => format!("this process's {} threads", t.len()),
            Scope::Task(0) => "this thread and the threads and children it starts".to_string(),
            Scope::Task(pid) => format!("task {pid} and its children"),
            Scope::Cpus(c) => format!("system-wide on CPUs {c:?}"),
            Scope::Processes { pids, tids } => format!(
                "processes {pids:?} ({} threads at attach) and their children",
                tids.len()
            ),
        }
    }

    fn tids(&self) -> Vec<i32> {
        match self {
            Scope::Threads(t) => t.clone(),
            Scope::Task(p) => vec![*p],
            Scope::Cpus(_) => Vec::new(),
            Scope::Processes { tids, .. } => tids.clone(),
        }
    }
}

/// One requested event.
#[derive(Clone, Debug)]
pub struct EventReq {
    /// Id (a recipe's name for it, or the spec itself).
    pub id: String,
    /// Resolution against the catalog.
    pub resolved: Resolved,
    /// In a group of its own.
    pub solo: bool,
    /// Its counting group in exact mode (see [`Request::group_count`]).
    pub group: usize,
}

/// How hardware events that outnumber the counters are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CountersMode {
    /// Every event in every run; the kernel multiplexes what does not fit
    /// and the count is scaled by its running fraction (`perf stat`).
    #[default]
    Multiplexed,
    /// One counting group per run (the thesis' method, section 3.2):
    /// nothing multiplexed, nothing scaled; a recipe of N groups needs N
    /// runs.
    Exact,
}

impl CountersMode {
    /// Parses `multiplexed` or `exact` (`option` names the flag).
    pub fn parse(option: &str, text: &str) -> Result<Self, UsageError> {
        match text {
            "multiplexed" => Ok(Self::Multiplexed),
            "exact" => Ok(Self::Exact),
            _ => Err(UsageError::new(
                option,
                format!(
                    "'{text}' is not a counters mode; give exact (one event group per run, never scaled) or multiplexed"
                ),
            )),
        }
    }
}

/// In exact mode, the one counting group a run counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExactGroup {
    /// The group counted (0-based), `run mod of`.
    pub index: usize,
    /// How many groups the request has.
    pub of: usize,
    /// The run of the rotation it was counted in (0-based: `stat -r`'s
    /// run, or a `dmalab run` repetition).
    pub run: usize,
}

/// What `--counters` asked for, resolved against this host.
#[derive(Clone, Debug)]
pub struct Request {
    /// The text given.
    pub text: String,
    /// Recipes named.
    pub recipes: Vec<String>,
    /// Events.
    pub events: Vec<EventReq>,
    /// Metrics.
    pub metrics: Vec<MetricDef>,
    /// resctrl bandwidth monitoring asked for (`mbm`).
    pub mbm: bool,
    /// The CPU.
    pub cpu: CpuId,
    /// Multiplexed, or exact (one group per run).
    pub mode: CountersMode,
    /// Exact mode: the group this request was narrowed to
    /// ([`Request::for_run`]).
    pub exact_group: Option<ExactGroup>,
}

/// A CPU in words for a message: its model name (when cpuinfo has one)
/// with the vendor, family and model the recipes are chosen by.
fn describe_cpu(cpu: &CpuId) -> String {
    let ids = format!(
        "{} family {:#x} model {:#x}",
        cpu.vendor, cpu.family, cpu.model
    );
    if cpu.model_name.is_empty() {
        ids
    } else {
        format!("{} ({ids})", cpu.model_name)
    }
}

/// `PERF_COUNT_SW_TASK_CLOCK` (`enum perf_sw_ids`).
const SW_TASK_CLOCK: u64 = 1;

/// The event a CPU-wide count of time is (`PERF_COUNT_SW_CPU_CLOCK`).
const CPU_CLOCK: &str = "cpu-clock";

/// The group key of a non-solo recipe event: its PMU (the text before the
/// first `/`), or `generic` for perf's named events.
fn pmu_key(spec: &str) -> &str {
    spec.split_once('/').map_or("generic", |(p, _)| p)
}

impl Request {
    /// How many counting groups the request has: each event of a `solo`
    /// recipe alone, a non-solo recipe's events per PMU, each `{...}` of
    /// explicit events (perf's group syntax) together, and every other
    /// explicit event alone. Exact mode counts one group per run.
    pub fn group_count(&self) -> usize {
        self.events.iter().map(|e| e.group + 1).max().unwrap_or(0)
    }

    /// The same request with only the events of counting group `g`, in
    /// exact mode (resctrl, never multiplexed, stays in every group).
    pub fn only_group(&self, g: usize) -> Request {
        Request {
            events: self
                .events
                .iter()
                .filter(|e| e.group == g)
                .cloned()
                .collect(),
            mode: CountersMode::Exact,
            ..self.clone()
        }
    }

    /// Run `run` (0-based) of an exact rotation: the request narrowed to
    /// group `run mod groups`, recorded in the report as
    /// [`ExactGroup`], so runs 0..groups-1 together count every group
    /// once, each unscaled.
    pub fn for_run(&self, run: usize) -> Request {
        let of = self.group_count();
        if of == 0 {
            return Request {
                mode: CountersMode::Exact,
                ..self.clone()
            };
        }
        let index = run % of;
        Request {
            exact_group: Some(ExactGroup { index, of, run }),
            ..self.only_group(index)
        }
    }

    /// Checks that a command that counts in one run can give exact counts:
    /// `runs` available; the refusal names how many runs are needed.
    pub fn check_exact_runs(&self, option: &str, runs: usize) -> Result<(), UsageError> {
        let n = self.group_count();
        if self.mode == CountersMode::Exact && n > runs {
            return Err(UsageError::new(
                option,
                format!(
                    "exact counts '{}' in {n} event groups, one per run, and this counts {runs}; give at least {n} runs (dmalab stat -r {n}, a dmalab run experiment with repeat >= {n}) or --counters-mode multiplexed",
                    self.text
                ),
            ));
        }
        Ok(())
    }

    /// Checks a command's exact-mode runs: with `first_run` (the caller
    /// keeps the rotation across invocations, as `dmalab run` does with
    /// its repetitions) the request must be in exact mode, and any number
    /// of runs will do; without it, `runs` must cover every group
    /// ([`Request::check_exact_runs`]).
    pub fn check_rotation(
        &self,
        mode_option: &str,
        run_option: &str,
        first_run: Option<usize>,
        runs: usize,
    ) -> Result<(), UsageError> {
        match first_run {
            Some(_) if self.mode != CountersMode::Exact => Err(UsageError::new(
                run_option,
                format!(
                    "rotates exact mode's event groups across runs; give {mode_option} exact too"
                ),
            )),
            Some(_) => Ok(()),
            None => self.check_exact_runs(mode_option, runs),
        }
    }

    /// The request as counted in `scope`. Per task, unchanged. On CPUs
    /// (`--cpus`), task-clock is not what it says: it is the CPU time of
    /// the tasks counted, and a CPU-wide counter has no task, so the
    /// kernel gives each CPU's whole time, idle included, which is
    /// cpu-clock. A recipe's task-clock is therefore counted as cpu-clock
    /// (as `perf stat -a` picks cpu-clock for its default events), and the
    /// recipe's metrics of it, which would only count the CPUs, are
    /// dropped; a task-clock named by the user is refused (`option` names
    /// the flag) with what to count instead.
    pub fn for_scope(&self, option: &str, scope: &Scope) -> Result<Request, UsageError> {
        if !matches!(scope, Scope::Cpus(_)) {
            return Ok(self.clone());
        }
        let is_task_clock = |e: &EventReq| {
            !e.resolved.instances.is_empty()
                && e.resolved
                    .instances
                    .iter()
                    .all(|i| i.type_id == spec::TYPE_SOFTWARE && i.config == SW_TASK_CLOCK)
        };
        let from_recipe = |id: &str| {
            self.recipes
                .iter()
                .filter_map(|n| recipes::find(n))
                .any(|rec| rec.events.iter().any(|(eid, _)| *eid == id))
        };
        let mut r = self.clone();
        let mut replaced: Vec<String> = Vec::new();
        r.events.clear();
        for e in &self.events {
            if !is_task_clock(e) {
                r.events.push(e.clone());
                continue;
            }
            if !from_recipe(&e.id) {
                return Err(UsageError::new(
                    option,
                    format!(
                        "{} is the CPU time of the tasks counted, and --cpus counts CPUs, not tasks (the kernel would give each CPU's whole time, idle included); count cpu-clock instead, as perf stat -a does",
                        e.id
                    ),
                ));
            }
            replaced.push(e.id.clone());
            if self.events.iter().any(|x| x.id == CPU_CLOCK) {
                continue;
            }
            r.events.push(EventReq {
                id: CPU_CLOCK.to_string(),
                resolved: spec::resolve(option, CPU_CLOCK, &Catalog::default())?,
                ..e.clone()
            });
        }
        r.metrics.retain(|m| {
            !m.event_ids()
                .iter()
                .any(|id| replaced.iter().any(|x| x == id))
        });
        Ok(r)
    }

    /// Parses `RECIPE|EVENT[,...]` (`option` names the flag in errors).
    pub fn parse(option: &str, text: &str, roots: &Roots) -> Result<Self, UsageError> {
        let cat = Catalog::read(&roots.pmu);
        let cpu = CpuId::read(&roots.cpuinfo);
        Self::parse_with(option, text, &cat, cpu)
    }

    /// [`Request::parse`] over a given catalog and CPU.
    pub fn parse_with(
        option: &str,
        text: &str,
        cat: &Catalog,
        cpu: CpuId,
    ) -> Result<Self, UsageError> {
        let mut r = Request {
            text: text.to_string(),
            recipes: Vec::new(),
            events: Vec::new(),
            metrics: Vec::new(),
            mbm: false,
            cpu,
            mode: CountersMode::Multiplexed,
            exact_group: None,
        };
        let tokens = spec::split_list(text);
        let mut next_group = 0usize;
        // The group of an open `{...}`, if inside one.
        let mut open: Option<usize> = None;
        if tokens.is_empty() {
            return Err(UsageError::new(
                option,
                "is empty; name a recipe (e.g. software) or events (see `dmalab info counters`)",
            ));
        }
        for tok in tokens {
            if let Some(rec) = recipes::find(&tok) {
                if r.recipes.iter().any(|n| n == rec.name) {
                    continue;
                }
                r.recipes.push(rec.name.to_string());
                r.metrics.extend_from_slice(rec.metrics);
                if rec.resctrl {
                    r.mbm = true;
                }
                let wrong_cpu = !rec.applies_to(&r.cpu);
                let mut by_pmu: Vec<(&str, usize)> = Vec::new();
                for (id, s) in rec.events {
                    let group = if rec.solo {
                        next_group += 1;
                        next_group - 1
                    } else if let Some(&(_, g)) = by_pmu.iter().find(|(k, _)| *k == pmu_key(s)) {
                        g
                    } else {
                        by_pmu.push((pmu_key(s), next_group));
                        next_group += 1;
                        next_group - 1
                    };
                    if r.events.iter().any(|e| e.id == *id) {
                        continue;
                    }
                    let resolved = if wrong_cpu {
                        Resolved {
                            spec: s.to_string(),
                            instances: Vec::new(),
                            unit: "count".into(),
                            scale: 1.0,
                            absent: Some(Absence::WrongCpu {
                                recipe: rec.name.to_string(),
                                for_cpus: rec.cpus.to_string(),
                                this_cpu: describe_cpu(&r.cpu),
                                recipes_here: recipes::RECIPES
                                    .iter()
                                    .filter(|x| x.applies_to(&r.cpu))
                                    .map(|x| x.name.to_string())
                                    .collect(),
                            }),
                        }
                    } else {
                        spec::resolve(option, s, cat)?
                    };
                    r.events.push(EventReq {
                        id: id.to_string(),
                        resolved,
                        solo: rec.solo,
                        group,
                    });
                }
            } else {
                // perf's group syntax: `{a,b},c` counts a and b together.
                let opens = tok.starts_with('{');
                let closes = tok.ends_with('}');
                let tok = tok
                    .trim_start_matches('{')
                    .trim_end_matches('}')
                    .trim()
                    .to_string();
                let group = match open {
                    Some(g) => g,
                    None => {
                        next_group += 1;
                        next_group - 1
                    }
                };
                if opens && open.is_none() && !closes {
                    open = Some(group);
                }
                if closes && !opens {
                    open = None;
                }
                if tok.is_empty() {
                    continue;
                }
                let resolved = spec::resolve(option, &tok, cat)?;
                if !r.events.iter().any(|e| e.id == tok) {
                    r.events.push(EventReq {
                        id: tok.clone(),
                        resolved,
                        solo: false,
                        group,
                    });
                }
            }
        }
        if open.is_some() {
            return Err(UsageError::new(
                option,
                format!("'{text}' opens an event group with '{{' that no '}}' closes"),
            ));
        }
        Ok(r)
    }
}

/// An event's count over the session.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventCount {
    /// Id.
    pub id: String,
    /// The perf spec.
    pub spec: String,
    /// PMU instances summed.
    pub pmus: Vec<String>,
    /// Counters opened (instances x CPUs or threads).
    pub counters: usize,
    /// Count scaled for multiplexing and by `.scale`, in `unit`.
    pub value: f64,
    /// Unit of `value`.
    pub unit: String,
    /// Raw count, summed.
    pub raw_count: u64,
    /// Time counting over time enabled (1: never multiplexed).
    pub running_fraction: f64,
    /// Time counting, nanoseconds, summed over the counters (perf stat's
    /// "counter run time").
    pub running_ns: u64,
    /// The value is a whole count, never scaled: a software event, an
    /// event counted all the time it was enabled, or exact mode.
    pub exact: bool,
    /// A software event: never multiplexed (the kernel's software PMU has
    /// no counter limit), so a fraction below 1 is only the kernel's time
    /// accounting of tasks that came and went, not scaling.
    pub software: bool,
    /// Counters opened on CPUs (uncore events, or `--cpus`): `value`
    /// summed per socket, as `pcm-memory` shows it; empty for per-task
    /// counting.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_socket: Vec<crate::socket::SocketValue>,
}

/// An event that could not be counted, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unavailable {
    /// Id.
    pub id: String,
    /// The spec.
    pub spec: String,
    /// Why.
    pub reason: Absence,
    /// The reason in words.
    pub message: String,
}

/// One interval of the series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// End of the interval on the caller's clock, seconds.
    pub t_s: f64,
    /// Length of the interval, seconds.
    pub interval_s: f64,
    /// Each counted event's delta in base units (MiB turned into bytes).
    pub events: BTreeMap<String, f64>,
    /// Metrics over the interval.
    pub metrics: Vec<MetricValue>,
}

/// What a session counted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CounterReport {
    /// `--counters` as given.
    pub requested: String,
    /// Recipes used.
    pub recipes: Vec<String>,
    /// The CPU the recipes were chosen for.
    pub cpu: CpuId,
    /// Whose work was counted.
    pub scope: String,
    /// Time from start to stop, nanoseconds.
    pub counted_ns: u64,
    /// Counted events.
    pub events: Vec<EventCount>,
    /// Metrics over the whole session.
    pub metrics: Vec<MetricValue>,
    /// Events that could not be counted here, with the reason.
    pub unavailable: Vec<Unavailable>,
    /// Lowest running fraction of any counted hardware event (below 1:
    /// multiplexed, and scaled); `None` when only software events counted.
    pub min_running_fraction: Option<f64>,
    /// Per-interval deltas, on the caller's sample clock.
    pub series: Vec<SeriesPoint>,
    /// Exact mode across runs: the group this run counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_group: Option<ExactGroup>,
    /// The metrics per socket, from the events' `per_socket` values (none
    /// when nothing was counted on CPUs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sockets: Vec<crate::socket::SocketMetrics>,
}

/// Running fraction below which a count is called multiplexed (scaled
/// from part of the time) in text output and in `dmalab report`.
pub const MULTIPLEXED_BELOW: f64 = 0.99;

struct OpenEvent {
    id: String,
    spec: String,
    unit: String,
    scale: f64,
    pmus: Vec<String>,
    idx: Vec<usize>,
    /// The CPU of each counter of `idx` (-1: per task).
    cpus: Vec<i32>,
    absent: Option<Absence>,
    software: bool,
    /// Summed raw, never scaled: software events, and every event in
    /// exact mode.
    unscaled: bool,
}

type Snapshot = (Vec<Reading>, Option<(u64, u64)>);

/// An open session.
pub struct Session {
    arena: Vec<Counter>,
    /// Per arena entry: true for a group member (enabled with its leader).
    member: Vec<bool>,
    events: Vec<OpenEvent>,
    metrics: Vec<MetricDef>,
    mbm: Option<MbmGroup>,
    mbm_absent: Option<Absence>,
    request: Request,
    scope: String,
    started: Option<(Instant, Snapshot)>,
    stopped: Option<(Instant, Snapshot)>,
    last: Option<(f64, Snapshot)>,
    series: Vec<SeriesPoint>,
    /// CPU -> socket, for the per-socket sums.
    sockets: BTreeMap<usize, u32>,
}

/// Turns an open error into the reason an event is unavailable.
/// `system_wide`: opened for a CPU rather than a task; `kernel`: kernel
/// mode counted too. perf_event_paranoid: 2 allows user-mode counting of
/// one's own tasks, 1 adds kernel mode, 0 adds CPU-wide counting.
pub fn classify(
    err: &io::Error,
    system_wide: bool,
    kernel: bool,
    paranoid: Option<i32>,
    root: bool,
) -> Absence {
    let needed = if system_wide {
        0
    } else if kernel {
        1
    } else {
        2
    };
    match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => match paranoid {
            Some(level) if !root && level > needed => Absence::Paranoid { level, needed },
            _ if root => Absence::NotPrivileged {
                detail: format!(
                    "{err}, although running as root (kernel lockdown or a security module)"
                ),
            },
            _ => Absence::NotPrivileged {
                detail: err.to_string(),
            },
        },
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV) => {
            Absence::Unsupported {
                detail: format!("{err} (event or PMU type unknown to the kernel or this CPU)"),
            }
        }
        Some(libc::ENOSYS) => Absence::Unsupported {
            detail: "perf_event_open is not implemented by this kernel".into(),
        },
        _ => Absence::Unsupported {
            detail: err.to_string(),
        },
    }
}

impl Session {
    /// Opens every event of `req` (disabled) for `scope`, and the resctrl
    /// group when `mbm` was asked for. Nothing counts until [`Session::start`].
    pub fn open(req: &Request, scope: &Scope, roots: &Roots, state_dir: &std::path::Path) -> Self {
        let paranoid = sys::paranoid_level(&roots.paranoid);
        let root = dmalab_core::sys::is_root();
        let mut arena: Vec<Counter> = Vec::new();
        let mut member: Vec<bool> = Vec::new();
        let mut leaders: HashMap<(usize, String, i32, i32), usize> = HashMap::new();
        let mut events = Vec::new();
        for e in &req.events {
            let mut ev = OpenEvent {
                id: e.id.clone(),
                spec: e.resolved.spec.clone(),
                unit: e.resolved.unit.clone(),
                scale: e.resolved.scale,
                pmus: e.resolved.instances.iter().map(|i| i.pmu.clone()).collect(),
                idx: Vec::new(),
                cpus: Vec::new(),
                absent: e.resolved.absent.clone(),
                software: !e.resolved.instances.is_empty()
                    && e.resolved
                        .instances
                        .iter()
                        .all(|i| i.type_id == spec::TYPE_SOFTWARE),
                unscaled: false,
            };
            ev.unscaled = ev.software || req.mode == CountersMode::Exact;
            if ev.absent.is_none() {
                match open_event(
                    e,
                    scope,
                    paranoid,
                    root,
                    &mut arena,
                    &mut member,
                    &mut leaders,
                ) {
                    Ok(opened) => (ev.idx, ev.cpus) = opened.into_iter().unzip(),
                    Err(a) => ev.absent = Some(a),
                }
            }
            events.push(ev);
        }
        let (mbm, mbm_absent) = if req.mbm {
            match MbmGroup::create(&roots.resctrl, state_dir, &scope.tids()) {
                Ok(g) => (Some(g), None),
                Err(a) => (None, Some(a)),
            }
        } else {
            (None, None)
        };
        Self {
            arena,
            member,
            events,
            metrics: req.metrics.clone(),
            mbm,
            mbm_absent,
            request: req.clone(),
            scope: scope.describe(),
            started: None,
            stopped: None,
            last: None,
            series: Vec::new(),
            sockets: std::fs::read_to_string(&roots.cpuinfo)
                .map(|t| crate::socket::from_cpuinfo(&t))
                .unwrap_or_default(),
        }
    }

    /// True when at least one event (or resctrl) can count.
    pub fn counts_anything(&self) -> bool {
        self.events.iter().any(|e| e.absent.is_none()) || self.mbm.is_some()
    }

    /// Moves more tasks into the resctrl group (a child started later).
    pub fn add_tasks(&self, tids: &[i32]) {
        if let Some(g) = &self.mbm {
            g.add_tasks(tids);
        }
    }

    /// Starts counting (t = 0 of the series).
    pub fn start(&mut self) {
        for (c, m) in self.arena.iter().zip(&self.member) {
            if !m {
                let _ = c.enable(true);
            }
        }
        let snap = self.snapshot();
        self.started = Some((Instant::now(), snap.clone()));
        self.last = Some((0.0, snap));
    }

    /// Stops counting and keeps the final readings.
    pub fn stop(&mut self) {
        if self.stopped.is_some() {
            return;
        }
        for (c, m) in self.arena.iter().zip(&self.member) {
            if !m {
                let _ = c.disable(true);
            }
        }
        let snap = self.snapshot();
        self.stopped = Some((Instant::now(), snap));
    }

    fn snapshot(&self) -> Snapshot {
        let r = self
            .arena
            .iter()
            .map(|c| c.read().unwrap_or_default())
            .collect();
        (r, self.mbm.as_ref().map(|g| g.read()))
    }

    /// Records the interval ending at `t_s` on the caller's clock (after
    /// [`Session::stop`], the final readings close the last interval).
    pub fn sample(&mut self, t_s: f64) {
        let Some((last_t, last)) = self.last.take() else {
            return;
        };
        let now = match &self.stopped {
            Some((_, s)) => s.clone(),
            None => self.snapshot(),
        };
        let interval = (t_s - last_t).max(0.0);
        let totals = self.totals_between(&last, &now);
        let mut events = BTreeMap::new();
        for (k, v) in &totals {
            if let Some(v) = v {
                events.insert(k.clone(), *v);
            }
        }
        let metrics = recipes::compute(&self.metrics, &totals, interval);
        self.series.push(SeriesPoint {
            t_s,
            interval_s: interval,
            events,
            metrics,
        });
        self.last = Some((t_s, now));
    }

    /// The interval [`Session::sample`] recorded last.
    pub fn last_point(&self) -> Option<&SeriesPoint> {
        self.series.last()
    }

    /// Event id -> scaled value in base units between two snapshots.
    fn totals_between(&self, a: &Snapshot, b: &Snapshot) -> BTreeMap<String, Option<f64>> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            if e.absent.is_some() {
                m.insert(e.id.clone(), None);
                continue;
            }
            let (v, ..) = sum_event(e, &a.0, &b.0);
            m.insert(
                e.id.clone(),
                v.map(|v| recipes::to_base(v * e.scale, &e.unit)),
            );
        }
        if self.request.mbm {
            let d = match (a.1, b.1) {
                (Some(x), Some(y)) => Some((y.0.saturating_sub(x.0), y.1.saturating_sub(x.1))),
                _ => None,
            };
            m.insert("mbm_total_bytes".into(), d.map(|d| d.0 as f64));
            m.insert("mbm_local_bytes".into(), d.map(|d| d.1 as f64));
        }
        m
    }

    /// Event totals in base units over the whole session (after stop).
    pub fn totals(&self) -> BTreeMap<String, Option<f64>> {
        let end = match &self.stopped {
            Some((_, s)) => s.clone(),
            None => self.snapshot(),
        };
        self.totals_between(&self.start_snapshot(), &end)
    }

    fn start_snapshot(&self) -> Snapshot {
        match &self.started {
            Some((_, s)) => s.clone(),
            None => (vec![Reading::default(); self.arena.len()], None),
        }
    }

    /// The report.
    pub fn report(&self) -> CounterReport {
        let end = match &self.stopped {
            Some((t, s)) => (*t, s.clone()),
            None => (Instant::now(), self.snapshot()),
        };
        let counted_ns = self
            .started
            .as_ref()
            .map_or(0, |s| end.0.duration_since(s.0).as_nanos() as u64);
        let zero = self.start_snapshot().0;
        let mut events = Vec::new();
        let mut unavailable = Vec::new();
        for e in &self.events {
            if let Some(a) = &e.absent {
                unavailable.push(Unavailable {
                    id: e.id.clone(),
                    spec: e.spec.clone(),
                    message: a.to_string(),
                    reason: a.clone(),
                });
                continue;
            }
            let (v, raw, frac, running_ns) = sum_event(e, &zero, &end.1 .0);
            match v {
                Some(v) => events.push(EventCount {
                    id: e.id.clone(),
                    spec: e.spec.clone(),
                    pmus: dedup(&e.pmus),
                    counters: e.idx.len(),
                    value: v * e.scale,
                    unit: e.unit.clone(),
                    raw_count: raw,
                    running_fraction: frac,
                    running_ns,
                    exact: e.software || self.request.mode == CountersMode::Exact || frac >= 1.0,
                    software: e.software,
                    per_socket: crate::socket::sum(
                        &per_counter(e, &zero, &end.1 .0),
                        &self.sockets,
                    ),
                }),
                None => unavailable.push(Unavailable {
                    id: e.id.clone(),
                    spec: e.spec.clone(),
                    message: Absence::NotCounted.to_string(),
                    reason: Absence::NotCounted,
                }),
            }
        }
        if let Some(a) = &self.mbm_absent {
            unavailable.push(Unavailable {
                id: "mbm".into(),
                spec: "resctrl mbm_total_bytes, mbm_local_bytes".into(),
                message: a.to_string(),
                reason: a.clone(),
            });
        }
        let totals = self.totals();
        let metrics = recipes::compute(&self.metrics, &totals, counted_ns as f64 / 1e9);
        let per_socket: BTreeMap<String, Vec<crate::socket::SocketValue>> = events
            .iter()
            .filter(|e| !e.per_socket.is_empty())
            .map(|e| {
                let base = e
                    .per_socket
                    .iter()
                    .map(|s| crate::socket::SocketValue {
                        socket: s.socket,
                        value: recipes::to_base(s.value, &e.unit),
                    })
                    .collect();
                (e.id.clone(), base)
            })
            .collect();
        let sockets = if per_socket.is_empty() {
            Vec::new()
        } else {
            crate::socket::metrics(&self.metrics, &per_socket, counted_ns as f64 / 1e9)
        };
        let min_running_fraction = events
            .iter()
            .filter(|e| !e.software)
            .map(|e| e.running_fraction)
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.min(f))));
        CounterReport {
            requested: self.request.text.clone(),
            recipes: self.request.recipes.clone(),
            cpu: self.request.cpu.clone(),
            scope: self.scope.clone(),
            counted_ns,
            events,
            metrics,
            unavailable,
            min_running_fraction,
            series: self.series.clone(),
            exact_group: self.request.exact_group,
            sockets,
        }
    }
}

fn dedup(v: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// (scaled sum, raw sum, running fraction, running ns) of one event
/// between readings.
/// Each counter's value of `e` between two snapshots, scaled by `.scale`
/// as the total is, with the CPU it was opened on.
fn per_counter(e: &OpenEvent, a: &[Reading], b: &[Reading]) -> Vec<(i32, f64)> {
    e.idx
        .iter()
        .zip(&e.cpus)
        .filter_map(|(&i, &cpu)| {
            let d = b.get(i)?.since(a.get(i)?);
            let v = if e.unscaled {
                Some(d.value as f64)
            } else {
                d.scaled()
            };
            v.map(|v| (cpu, v * e.scale))
        })
        .collect()
}

fn sum_event(e: &OpenEvent, a: &[Reading], b: &[Reading]) -> (Option<f64>, u64, f64, u64) {
    let mut total = 0.0;
    let mut raw = 0u64;
    let (mut en, mut run) = (0u64, 0u64);
    let mut any = false;
    for &i in &e.idx {
        let (Some(x), Some(y)) = (a.get(i), b.get(i)) else {
            continue;
        };
        let d = y.since(x);
        raw = raw.wrapping_add(d.value);
        en += d.enabled_ns;
        run += d.running_ns;
        // Software events are exact counts that are never multiplexed:
        // scaling them would only add the kernel's time-accounting noise.
        // In exact mode nothing is scaled: the group was alone on the
        // counters, and a count that was not counted all the time says so
        // by its running fraction instead of being stretched.
        let v = if e.unscaled {
            Some(d.value as f64)
        } else {
            d.scaled()
        };
        if let Some(s) = v {
            total += s;
            any = true;
        }
    }
    let frac = if en == 0 { 1.0 } else { run as f64 / en as f64 };
    (
        (any || e.idx.is_empty() || en == 0).then_some(total),
        raw,
        frac,
        run,
    )
}

fn open_event(
    e: &EventReq,
    scope: &Scope,
    paranoid: Option<i32>,
    root: bool,
    arena: &mut Vec<Counter>,
    member: &mut Vec<bool>,
    leaders: &mut HashMap<(usize, String, i32, i32), usize>,
) -> Result<Vec<(usize, i32)>, Absence> {
    let mut idx = Vec::new();
    for inst in &e.resolved.instances {
        let system_wide_pmu = !inst.cpus.is_empty();
        let targets: Vec<(i32, i32)> = if system_wide_pmu {
            inst.cpus.iter().map(|&c| (-1, c as i32)).collect()
        } else {
            match scope {
                Scope::Threads(t) => t.iter().map(|&tid| (tid, -1)).collect(),
                Scope::Task(pid) => vec![(*pid, -1)],
                Scope::Cpus(c) => c.iter().map(|&c| (-1, c as i32)).collect(),
                Scope::Processes { tids, .. } => tids.iter().map(|&tid| (tid, -1)).collect(),
            }
        };
        let per_task = !system_wide_pmu && !matches!(scope, Scope::Cpus(_));
        // Unprivileged per-task counting under paranoid 2 may only count
        // user mode (perf does the same).
        let user_only = per_task && !root && paranoid.is_some_and(|p| p >= 2);
        let mut flags = sys::FLAG_DISABLED;
        if user_only {
            flags |= sys::FLAG_EXCLUDE_KERNEL | sys::FLAG_EXCLUDE_HV;
        }
        if matches!(scope, Scope::Task(_) | Scope::Processes { .. }) && per_task {
            flags |= sys::FLAG_INHERIT;
        }
        let attr = PerfEventAttr {
            type_: inst.type_id,
            config: inst.config,
            config1: inst.config1,
            config2: inst.config2,
            flags,
            ..PerfEventAttr::default()
        };
        for (pid, cpu) in targets {
            // A perf group is the request's group (`{a,b}`, or a recipe's
            // events of one PMU) on one PMU instance and target: events
            // named apart (`a,b`) open apart, as perf stat opens them, so
            // one that cannot be scheduled does not take the others down.
            let key = (e.group, inst.pmu.clone(), pid, cpu);
            let leader = if e.solo {
                None
            } else {
                leaders.get(&key).copied()
            };
            // A member opens enabled, as perf stat opens them: it counts
            // exactly when its (disabled) leader does. Opened disabled, it
            // would have to be enabled with the leader's group ioctl, and a
            // CPU-wide member enabled after its leader is already on is
            // never scheduled (6.x kernels: running time 0, so cpu-clock
            // and task-clock read 0 under --cpus behind another event).
            let member_attr = PerfEventAttr {
                flags: attr.flags & !sys::FLAG_DISABLED,
                ..attr
            };
            let (opened, in_group) = match leader {
                Some(l) => match Counter::open(&member_attr, pid, cpu, Some(&arena[l])) {
                    Err(_) => (Counter::open(&attr, pid, cpu, None), false),
                    r => (r, true),
                },
                None => (Counter::open(&attr, pid, cpu, None), false),
            };
            match opened {
                Ok(c) => {
                    arena.push(c);
                    member.push(in_group);
                    let i = arena.len() - 1;
                    if !e.solo && leader.is_none() {
                        leaders.insert(key, i);
                    }
                    idx.push((i, cpu));
                }
                // A thread that ended since it was listed counts nothing.
                Err(err) if err.raw_os_error() == Some(libc::ESRCH) && pid > 0 => {}
                Err(err) => return Err(classify(&err, pid == -1, !user_only, paranoid, root)),
            }
        }
    }
    Ok(idx)
}

impl CounterReport {
    /// The text summary, perf-stat style.
    pub fn render_text(&self) -> String {
        let mut s = format!(
            "counters over {:.3} s ({}{}):\n",
            self.counted_ns as f64 / 1e9,
            self.scope,
            if self.recipes.is_empty() {
                String::new()
            } else {
                format!("; recipes {}", self.recipes.join(", "))
            }
        );
        for e in &self.events {
            let unit = if e.unit == "count" {
                ""
            } else {
                e.unit.as_str()
            };
            // Per-task counters read a hair apart show fractions such as
            // 0.999 without any multiplexing; below 0.99 it is worth a note.
            let frac = if !e.software && e.running_fraction < MULTIPLEXED_BELOW {
                format!(
                    "  ({:.1}% of the time counted: scaled)",
                    e.running_fraction * 100.0
                )
            } else {
                String::new()
            };
            let v = if e.unit == "count" {
                e.value.round()
            } else {
                e.value
            };
            s.push_str(&format!(
                "  {:>18} {:<4} {}{}\n",
                fmt_value(v),
                unit,
                e.id,
                frac
            ));
        }
        let shown: Vec<&MetricValue> = self.metrics.iter().filter(|m| m.value.is_some()).collect();
        if !shown.is_empty() {
            s.push_str("  metrics:\n");
            for m in shown {
                if let Some(v) = m.value {
                    s.push_str(&format!(
                        "  {:>18} {:<8} {}\n",
                        fmt_value(v),
                        m.unit,
                        m.name
                    ));
                }
            }
        }
        // Per socket, as pcm-memory shows it beside the total (one socket's
        // figures are the total's).
        for sm in self.sockets.iter().filter(|_| self.sockets.len() > 1) {
            for m in &sm.metrics {
                if let Some(v) = m.value {
                    s.push_str(&format!(
                        "  {:>18} {:<8} {} (socket {})\n",
                        fmt_value(v),
                        m.unit,
                        m.name,
                        sm.socket
                    ));
                }
            }
        }
        for e in self.events.iter().filter(|e| e.per_socket.len() > 1) {
            for ps in &e.per_socket {
                s.push_str(&format!(
                    "  {:>18} {:<4} {} (socket {})\n",
                    fmt_value(ps.value),
                    if e.unit == "count" { "" } else { &e.unit },
                    e.id,
                    ps.socket
                ));
            }
        }
        for u in &self.unavailable {
            s.push_str(&format!("  not counted: {}: {}\n", u.id, u.message));
        }
        s
    }
}

fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_reasons() {
        let eacces = io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            classify(&eacces, true, true, Some(2), false),
            Absence::Paranoid {
                level: 2,
                needed: 0
            }
        );
        assert_eq!(
            classify(&eacces, false, true, Some(2), false),
            Absence::Paranoid {
                level: 2,
                needed: 1
            }
        );
        assert!(matches!(
            classify(&eacces, true, true, Some(-1), false),
            Absence::NotPrivileged { .. }
        ));
        assert!(matches!(
            classify(
                &io::Error::from_raw_os_error(libc::ENOENT),
                false,
                false,
                Some(2),
                false
            ),
            Absence::Unsupported { .. }
        ));
    }

    #[test]
    fn exact_mode_groups_like_perf_and_the_recipes() {
        let cat = Catalog::default();
        let cpu = CpuId::default();
        let parse = |t: &str| Request::parse_with("--counters", t, &cat, cpu.clone());
        // One recipe on one PMU: one group.
        assert_eq!(parse("software").unwrap().group_count(), 1);
        // A rotation kept by the caller: run r counts group r mod 2.
        let mut two = parse("{page-faults,task-clock},context-switches").unwrap();
        assert!(two
            .check_rotation("--counters-mode", "--counters-run", Some(3), 1)
            .unwrap_err()
            .message
            .contains("--counters-mode exact"));
        two.mode = CountersMode::Exact;
        two.check_rotation("--counters-mode", "--counters-run", Some(3), 1)
            .unwrap();
        assert!(two
            .check_rotation("--counters-mode", "--counters-run", None, 1)
            .is_err());
        let r3 = two.for_run(3);
        let ids: Vec<&str> = r3.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["context-switches"]);
        assert_eq!(
            r3.exact_group,
            Some(ExactGroup {
                index: 1,
                of: 2,
                run: 3
            })
        );
        assert_eq!(two.for_run(4).events.len(), 2);
        // perf's braces: two together, the others alone.
        let r = parse("{page-faults,task-clock},context-switches,cpu-migrations").unwrap();
        assert_eq!(r.group_count(), 3);
        let g: Vec<(&str, usize)> = r.events.iter().map(|e| (e.id.as_str(), e.group)).collect();
        assert_eq!(
            g,
            [
                ("page-faults", 0),
                ("task-clock", 0),
                ("context-switches", 1),
                ("cpu-migrations", 2)
            ]
        );
        let only = r.only_group(1);
        assert_eq!(only.mode, CountersMode::Exact);
        assert_eq!(only.events.len(), 1);
        assert_eq!(only.events[0].id, "context-switches");
        // A solo recipe: one group per event (the thesis' six TOR events).
        assert_eq!(parse("skx-pcie").unwrap().group_count(), 6);
        assert!(parse("{page-faults,task-clock").is_err());
        let mut exact = r.clone();
        exact.mode = CountersMode::Exact;
        let e = exact
            .check_exact_runs("--repeat", 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 event groups") && e.contains("-r 3"), "{e}");
        assert!(exact.check_exact_runs("--repeat", 3).is_ok());
        assert!(
            r.check_exact_runs("--repeat", 1).is_ok(),
            "multiplexed needs one run"
        );
        assert!(CountersMode::parse("--counters-mode", "sometimes").is_err());
    }

    #[test]
    fn on_cpus_task_clock_is_refused_by_name_and_a_recipes_is_cpu_clock() {
        let cat = Catalog::default();
        let parse = |t: &str| Request::parse_with("--counters", t, &cat, CpuId::default()).unwrap();
        let cpus = Scope::Cpus(vec![0]);
        let ids = |r: &Request| r.events.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        // Per task, nothing changes.
        let sw = parse("software");
        let task = sw.for_scope("--counters", &Scope::Task(1)).unwrap();
        assert_eq!(ids(&task), ids(&sw));
        assert_eq!(task.metrics.len(), sw.metrics.len());
        // On CPUs, the recipe's task-clock is counted as cpu-clock, in its
        // group, and its CPUs-utilized metric goes.
        let on = sw.for_scope("--counters", &cpus).unwrap();
        assert_eq!(
            ids(&on),
            [
                "cpu-clock",
                "page-faults",
                "context-switches",
                "cpu-migrations"
            ]
        );
        assert_eq!(on.events[0].group, sw.events[0].group);
        assert_eq!(on.events[0].resolved.instances[0].config, 0);
        assert!(on.metrics.iter().all(|m| m.name != "cpus_utilized"));
        assert_eq!(on.metrics.len(), sw.metrics.len() - 1);
        // Named with cpu-clock already there, it is not counted twice.
        let both = parse("cpu-clock,software").for_scope("--counters", &cpus);
        let both = both.unwrap();
        assert_eq!(ids(&both).iter().filter(|i| *i == "cpu-clock").count(), 1);
        // Named by the user, it is refused with what to count instead.
        let e = parse("context-switches,task-clock")
            .for_scope("--counters", &cpus)
            .unwrap_err();
        assert_eq!(e.option, "--counters");
        assert!(e.message.contains("count cpu-clock instead"), "{e}");
    }

    #[test]
    fn events_named_apart_open_apart_and_braces_group_them() {
        let cat = Catalog::default();
        let me = std::process::id() as i32;
        let members = |text: &str| {
            let req = Request::parse_with("--counters", text, &cat, CpuId::default()).unwrap();
            let state = tempfile::tempdir().unwrap();
            let s = Session::open(&req, &Scope::Task(me), &Roots::default(), state.path());
            assert!(
                s.events.iter().all(|e| e.absent.is_none()),
                "software events open here: {:?}",
                s.events.iter().map(|e| &e.absent).collect::<Vec<_>>()
            );
            s.member.clone()
        };
        // perf stat -e cpu-clock,page-faults: two groups of one.
        assert_eq!(members("cpu-clock,page-faults"), [false, false]);
        // perf stat -e '{cpu-clock,page-faults}': one group.
        assert_eq!(members("{cpu-clock,page-faults}"), [false, true]);
        // A recipe's events of one PMU count together.
        let sw = members("software");
        assert!(!sw[0] && sw[1..].iter().all(|&m| m), "{sw:?}");
    }

    #[test]
    fn wrong_cpu_recipe_is_absent_not_an_error() {
        let cat = Catalog::default();
        let amd = CpuId {
            vendor: "AuthenticAMD".into(),
            family: 0x17,
            model: 0x31,
            model_name: String::new(),
        };
        let r = Request::parse_with("--counters", "skx-pcie,software", &cat, amd).unwrap();
        assert_eq!(r.recipes, ["skx-pcie", "software"]);
        let skx: Vec<&EventReq> = r
            .events
            .iter()
            .filter(|e| e.id.contains("pcirdcur"))
            .collect();
        assert!(skx
            .iter()
            .all(|e| matches!(e.resolved.absent, Some(Absence::WrongCpu { .. }))));
        // Said plainly: what the recipe is for, what this host is, and what
        // to count with instead (the recipes for this CPU, not this one).
        let m = skx[0].resolved.absent.as_ref().unwrap().to_string();
        assert!(!m.contains("unknown"), "{m}");
        assert!(
            m.starts_with("recipe skx-pcie is for Intel Skylake-SP"),
            "{m}"
        );
        assert!(
            m.contains("this host is AuthenticAMD family 0x17 model 0x31: count with a recipe for this CPU (software, core, amd-df-dram, mbm;"),
            "{m}"
        );
        assert!(Request::parse_with("--counters", "", &cat, CpuId::default()).is_err());
        assert!(Request::parse_with("--counters", "nonsense", &cat, CpuId::default()).is_err());
    }
}
