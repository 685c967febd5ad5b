//! Results files: JSON lines, one header and then one record per run,
//! each appended and fsynced as soon as it exists.

use crate::error::{RecordFault, RunError};
use crate::experiment::Better;
use crate::views::LatencyBuckets;
use dmalab_core::host::HostInfo;
use dmalab_core::schema::{RunStatus, ToolInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What a victim is, as the report needs it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct VictimMeta {
    /// Name.
    pub name: String,
    /// Kind (`probe latency`, `exec`, `redis`, ...).
    pub command: String,
    /// JSON pointer or `wall_s`/`regex`: where the figure comes from.
    pub metric: String,
    /// Unit of the figure.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
}

/// Sweep description in the header.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SweepMeta {
    /// The swept aggressor.
    pub aggressor: String,
    /// The swept flag.
    pub flag: String,
    /// Its values.
    pub values: Vec<String>,
}

/// First line of a results file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Header {
    /// Always `header`.
    pub record: String,
    /// Schema version of the records.
    pub schema_version: u32,
    /// The program that wrote it.
    pub tool: ToolInfo,
    /// Experiment name.
    pub experiment: String,
    /// Experiment file as given.
    pub experiment_path: String,
    /// SHA-256 of the experiment file, hex.
    pub experiment_hash: String,
    /// The experiment file's text, so results explain themselves.
    pub experiment_toml: String,
    /// When the first session started, RFC 3339.
    pub started_at: String,
    /// The machine.
    pub host: HostInfo,
    /// Runs in the plan.
    pub planned_runs: usize,
    /// Victims.
    pub victims: Vec<VictimMeta>,
    /// Configurations, in order.
    pub configurations: Vec<String>,
    /// Loads, in order (`plain` first).
    pub loads: Vec<String>,
    /// Sweep mode, when used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepMeta>,
    /// Noisy-cell threshold, coefficient of variation in percent.
    pub noisy_cv_pct: f64,
    /// Aggressor CPUs.
    pub aggressor_cpus: String,
    /// Victim CPUs.
    pub victim_cpus: String,
    /// Warnings from reading the experiment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The hosts of a merged file (`dmalab fleet merge`), one per results
    /// file it was merged from; empty in a file `dmalab run` wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<MergedHost>,
}

/// One host of a merged results file: where its runs came from and the
/// machine they ran on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MergedHost {
    /// The name its runs carry in their `host` field (the Slurm node name).
    pub name: String,
    /// The results file it was merged from, relative to the merged
    /// directory.
    pub results_file: String,
    /// The machine, from that file's header.
    pub host: HostInfo,
    /// The program that wrote that file.
    pub tool: ToolInfo,
    /// When that file's first session started, RFC 3339.
    pub started_at: String,
    /// Runs planned in that file.
    pub planned_runs: usize,
    /// Runs recorded in that file.
    pub recorded_runs: usize,
}

/// Why a run failed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct Failure {
    /// What happened, in words.
    pub reason: String,
    /// Exit status of the process at fault, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// Signal that ended it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Last lines of its stderr.
    pub stderr_tail: String,
}

/// One per-second reading of the aggressor during the victim.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Since the victim started, nanoseconds.
    pub t_ns: u64,
    /// Data bytes since the previous sample (the victim's start for the first).
    pub data_bytes: u64,
    /// Commands since the previous sample.
    pub commands: u64,
    /// Length of this interval, nanoseconds.
    pub interval_ns: u64,
}

/// The aggressor's work while the victim ran, from its live-stats file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct Evidence {
    /// Victim's start to end, between the two snapshots, nanoseconds.
    pub window_ns: u64,
    /// Data bytes the aggressor completed in the window.
    pub data_bytes: u64,
    /// Commands completed in the window.
    pub commands: u64,
    /// Blocks completed in the window.
    pub blocks: u64,
    /// Data bandwidth in the window, bytes per second.
    pub bw_bytes: f64,
    /// Command rate in the window, per second.
    pub cmd_per_s: f64,
    /// True when the aggressor was running at both snapshots.
    pub running_throughout: bool,
    /// Per-second samples.
    pub samples: Vec<Sample>,
}

/// The aggressor's side of a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct AggressorOutcome {
    /// Its command line.
    pub argv: Vec<String>,
    /// Exit status after it was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// Its `/result`, when it wrote a result document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Counters during the victim, when it keeps a live-stats file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// Last lines of its stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// A group's members, each its side of the run (in the order the
    /// group lists them); `evidence` above is then their sum, and `argv`
    /// empty. Empty for a single aggressor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberOutcome>,
}

/// One member of a group in a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct MemberOutcome {
    /// The member's aggressor name.
    pub name: String,
    /// Its side of the run, as a single aggressor's.
    #[serde(flatten)]
    pub outcome: AggressorOutcome,
}

/// The quiet-host check made before a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct QuietCheck {
    /// The window the last check sampled, nanoseconds.
    pub window_ns: u64,
    /// Other runnable tasks on the victim's and the aggressor's CPUs, mean
    /// of the samples.
    pub runnable_mean: f64,
    /// Steal on those CPUs in the window, percent of their time.
    pub steal_pct: f64,
    /// The host was busy: the run's figures carry other work's.
    pub busy: bool,
    /// Why it was busy, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long `--require-quiet` waited for quiet, nanoseconds.
    #[serde(default)]
    pub waited_ns: u64,
}

/// What the victim's process and CPUs went through while it ran, from
/// what every Linux host has (no PMU): the evidence that a victim lost CPU
/// time rather than memory bandwidth.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct VictimEvidence {
    /// The window the system counters cover (the victim's start to the
    /// return of its wait), nanoseconds.
    pub window_ns: u64,
    /// Times the victim was preempted (`wait4` resource usage: all its
    /// threads and the children it waited for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonvoluntary_ctxt_switches: Option<u64>,
    /// Times it blocked or yielded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voluntary_ctxt_switches: Option<u64>,
    /// Its user plus system time, nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ns: Option<u64>,
    /// Time its main thread was runnable but waited for a CPU
    /// (`/proc/PID/schedstat`), nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_delay_ns: Option<u64>,
    /// CPU migrations of its main thread (`/proc/PID/sched`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrations: Option<u64>,
    /// Interrupts on the victim's CPUs in the window, all sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<u64>,
    /// Softirqs on the victim's CPUs in the window, per kind (`TIMER`,
    /// `BLOCK`, `NET_RX`, ...), kinds that moved only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub softirqs: BTreeMap<String, u64>,
    /// Steal time on the victim's CPUs in the window, nanoseconds (one
    /// clock tick resolution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ns: Option<u64>,
    /// The aggressor's user plus system time in the window (all CPUs),
    /// nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggressor_cpu_ns: Option<u64>,
}

impl VictimEvidence {
    /// The share of the window the victim waited for a CPU, percent.
    pub fn wait_pct(&self) -> Option<f64> {
        let d = self.run_delay_ns?;
        (self.window_ns > 0).then(|| 100.0 * d as f64 / self.window_ns as f64)
    }
}

/// One run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    /// Always `run`.
    pub record: String,
    /// The experiment file's hash.
    pub experiment_hash: String,
    /// Position in the plan (0-based); unique in a results file.
    pub index: usize,
    /// Configuration name.
    pub configuration: String,
    /// Repetition, 1-based.
    pub repetition: u32,
    /// Victim name.
    pub victim: String,
    /// `plain` or the aggressor's name.
    pub load: String,
    /// The swept flag's value, in sweep mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_value: Option<String>,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// Completed or failed (interrupted runs are not recorded).
    pub status: RunStatus,
    /// The figure, when the run completed.
    #[serde(default)]
    pub value: Option<f64>,
    /// Where the figure came from.
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// Which direction is better.
    pub better: Better,
    /// Victim's wall-clock time, nanoseconds.
    pub victim_wall_ns: u64,
    /// Victim's command line.
    pub victim_argv: Vec<String>,
    /// Victim CPUs.
    pub victim_cpus: String,
    /// The victim's `/result` (dmalab victims) or its measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim_result: Option<serde_json::Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The aggressor's side, for loaded runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggressor: Option<AggressorOutcome>,
    /// The host that made the run, in a merged file (one of the header's
    /// `hosts`); absent in a file `dmalab run` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// DDIO as the configuration's `ddio` key asked, and whether it was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddio: Option<crate::ddio_axis::DdioRecord>,
    /// For a control cycle: whose control it is and the rate it was paced
    /// at. (This and the next two are boxed: a report holds every run, and
    /// inline they would make each record about a third larger, present
    /// or not.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Box<ControlRecord>>,
    /// What the victim's process and CPUs went through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub victim_evidence: Option<Box<VictimEvidence>>,
    /// The quiet-host check before the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet: Option<Box<QuietCheck>>,
}

/// What a control cycle stood in for.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ControlRecord {
    /// The aggressor it controls.
    pub of: String,
    /// `twin` (the aggressor's own command, its engine's control),
    /// `aggressor` (another aggressor of the file) or `group` (a group's
    /// members' controls, each in `members`).
    pub kind: String,
    /// The aggressor's command rate in the victim's window of the same
    /// configuration, repetition and victim, per second (None when it
    /// keeps no live counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cmd_per_s: Option<f64>,
    /// The `--rate-iops` the control was given (None: unpaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_iops: Option<u64>,
    /// Whether it ran after its aggressor's run of the same repetition or
    /// before it (None in files written before the order alternated: after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<ControlOrder>,
    /// The repetition whose loaded run measured `target_cmd_per_s`: the
    /// same one after the load, an earlier one before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_by_repetition: Option<u32>,
    /// A group's control: per member, in the group's order, what stood in
    /// for it (`of` the member, its `kind`, the rate the member reached in
    /// the group's run and the `--rate-iops` given); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ControlRecord>,
}

/// Where a control cycle runs against its aggressor's run of the same
/// repetition. Alternating the two (ABBA) keeps a slow drift of the host
/// from favouring either side: with the control always second, a host that
/// slowly gets busier would make every control look worse than its load,
/// and the DMA look harmless.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ControlOrder {
    /// Load, then control.
    AfterLoad,
    /// Control, then load.
    BeforeLoad,
}

/// What makes a run that run: its host (in a merged file), its position in
/// the plan, what it ran and when it started. Two records with one identity
/// are one run written twice (a file concatenated onto itself, a merge
/// merged again), never two measurements.
type RunIdentity<'a> = (
    Option<&'a str>,
    usize,
    &'a str,
    u32,
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
);

impl RunRecord {
    /// The run's identity (see [`RunIdentity`]).
    fn identity(&self) -> RunIdentity<'_> {
        (
            self.host.as_deref(),
            self.index,
            &self.configuration,
            self.repetition,
            &self.victim,
            &self.load,
            self.sweep_value.as_deref(),
            &self.started_at,
        )
    }

    /// The cell this run belongs to.
    pub fn cell(&self) -> (String, String, String, Option<String>) {
        (
            self.configuration.clone(),
            self.victim.clone(),
            self.load.clone(),
            self.sweep_value.clone(),
        )
    }
}

/// A results file read back.
#[derive(Clone, Debug)]
pub struct Results {
    /// The header.
    pub header: Header,
    /// Run records in file order.
    pub runs: Vec<RunRecord>,
    /// Byte length of the complete lines (a torn last line is past it).
    pub complete_len: u64,
}

impl Results {
    /// Drops every run record whose run (its identity: host, plan position,
    /// configuration, repetition, victim, load, sweep value, start) an
    /// earlier record of the file already holds, keeping the first; returns
    /// how many were dropped. A file written by `dmalab run` has none; one
    /// concatenated from copies, or holding a merge twice, would otherwise
    /// count each run as often as it appears.
    pub fn drop_duplicate_runs(&mut self) -> usize {
        let before = self.runs.len();
        let mut seen = std::collections::HashSet::with_capacity(before);
        let keep: Vec<bool> = self
            .runs
            .iter()
            .map(|r| seen.insert(r.identity()))
            .collect();
        let mut keep = keep.into_iter();
        self.runs.retain(|_| keep.next().unwrap_or(true));
        before - self.runs.len()
    }

    /// A merged file's runs with the host as a grouping: each run's
    /// configuration becomes `HOST · CONFIGURATION`, and the header lists
    /// those groups host by host, so every figure and statistic (slowdown
    /// against the same host's plain runs included) is made per host and
    /// the hosts stand side by side. A file without hosts comes back as it
    /// is. It takes the file by value and relabels in place: a copy would
    /// hold every run twice while the report renders.
    pub fn grouped_by_host(mut self) -> Results {
        if self.header.hosts.is_empty() {
            return self;
        }
        let label = |host: &str, c: &str| format!("{host} · {c}");
        let mut names: Vec<&str> = Vec::new();
        for h in &self.header.hosts {
            // One host may come from several files (one per configuration).
            if !names.contains(&h.name.as_str()) {
                names.push(&h.name);
            }
        }
        let configurations = names
            .iter()
            .flat_map(|h| self.header.configurations.iter().map(move |c| label(h, c)))
            .collect();
        self.header.configurations = configurations;
        for r in &mut self.runs {
            if let Some(h) = &r.host {
                r.configuration = label(h, &r.configuration);
            }
        }
        self
    }
}

/// Reads a results file. A last line without its newline (a write cut by a
/// kill) is ignored; any other bad line is an error.
pub fn read(path: &Path) -> Result<Results, RunError> {
    read_with(path, Keep::All)
}

/// Reads a results file for `report` and `compare`: records are streamed
/// line by line, and of each run's documents only what the report uses is
/// kept (the victim's latency summary, the aggressor's `bw_bytes`), so the
/// memory held grows with the number of runs, not with the size of the
/// documents in the file.
pub fn read_for_report(path: &Path) -> Result<Results, RunError> {
    read_with(path, Keep::Report)
}

/// What of each run record [`read_with`] keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Everything (resuming a run rewrites nothing, but reads all).
    All,
    /// What the report and compare use.
    Report,
}

/// The `record` field alone, to tell a line's kind without building a
/// `serde_json::Value` of the whole line.
#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(borrow, default)]
    record: Option<std::borrow::Cow<'a, str>>,
}

/// Every latency summary (a value that reads as [`LatencyBuckets`]) in a
/// result, nearest the top first; none is looked for inside another.
fn all_latencies(v: &Value) -> Vec<&Value> {
    let mut found = Vec::new();
    let mut queue = vec![v];
    while !queue.is_empty() {
        let mut next = Vec::new();
        for x in queue {
            match x {
                Value::Object(m) => {
                    if LatencyBuckets::read(x).is_some() {
                        found.push(x);
                    } else {
                        next.extend(m.values());
                    }
                }
                Value::Array(a) => next.extend(a.iter()),
                _ => {}
            }
        }
        queue = next;
    }
    found
}

/// Where in a run's result the latency summary that goes with its figure
/// is, the first of:
/// 1. the nearest one at or under an ancestor of the metric's pointer
///    (`/result/total/all/mean_ns` -> `/total/all/lat`);
/// 2. for a page result, the one the figure is computed from
///    ([`crate::views::page_latency_pointers`]: Table 2's major-fault rows
///    from `/total/major/lat`, every other figure from `/total/all/lat`),
///    which the first rule cannot find: `/table2/...` has no summary under
///    it, and the first one near the top, `/read/all/lat` in key order,
///    is the reads' alone;
/// 3. the result's only summary.
///
/// A result with several summaries, none tied to the figure, has none: a
/// histogram of something else than the figure is worse than none. The
/// metric is the pointer the experiment's victim names (into any
/// victim's result, an exec victim's too), so finding the summary walks
/// the result; what counts as one is its typed view.
fn latency_at(r: &RunRecord) -> Option<&Value> {
    let res = r.victim_result.as_ref()?;
    let has = |v: &Value| LatencyBuckets::read(v).is_some();
    let metric = r.metric.strip_prefix("/result").unwrap_or("");
    let mut p = metric.to_string();
    while let Some((parent, _)) = p.rsplit_once('/') {
        p = parent.to_string();
        if let Some(v) = res.pointer(&p) {
            if has(v) {
                return Some(v);
            }
            if let Value::Object(m) = v {
                if let Some(child) = m.values().find(|c| has(c)) {
                    return Some(child);
                }
            }
        }
    }
    // Without major faults (or unclassified accesses) the major rows
    // have no summary of their own: all accesses then.
    let page = crate::views::page_latency_pointers(res, metric).unwrap_or_default();
    if let Some(v) = page
        .iter()
        .find_map(|at| res.pointer(at).filter(|v| has(v)))
    {
        return Some(v);
    }
    match all_latencies(res).as_slice() {
        [only] => Some(only),
        _ => None,
    }
}

/// The latency buckets that go with a run's figure (see [`latency_at`]),
/// read through their typed view.
pub fn latency_for(r: &RunRecord) -> Option<LatencyBuckets> {
    latency_at(r).and_then(LatencyBuckets::read)
}

/// Drops from a run what the report does not use: of the victim's document
/// its latency summary and counters stay, of the aggressor's its `bw_bytes`
/// and counters; the victim's command line and the experiment's hash (the
/// header has it) go.
fn slim(r: &mut RunRecord) {
    r.victim_argv = Vec::new();
    r.experiment_hash = String::new();
    fn keep(
        doc: Option<&serde_json::Value>,
        keys: &[(&str, Option<serde_json::Value>)],
    ) -> Option<serde_json::Value> {
        let mut m = serde_json::Map::new();
        for (k, v) in keys {
            if let Some(v) = v.clone().or_else(|| doc.and_then(|d| d.get(*k)).cloned()) {
                m.insert((*k).to_string(), v);
            }
        }
        (!m.is_empty()).then_some(serde_json::Value::Object(m))
    }
    let lat = latency_at(r).cloned();
    r.victim_result = keep(
        r.victim_result.as_ref(),
        &[("latency", lat), ("counters", None)],
    );
    if let Some(a) = &mut r.aggressor {
        a.result = keep(a.result.as_ref(), &[("bw_bytes", None), ("counters", None)]);
    }
}

fn read_with(path: &Path, keep: Keep) -> Result<Results, RunError> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|e| open_error(path, e))?;
    let file_len = file.metadata().map_err(|e| open_error(path, e))?.len();
    let mut inp = std::io::BufReader::with_capacity(1 << 16, file);
    let mut header = None;
    let mut runs = Vec::new();
    let mut complete_len = 0u64;
    let mut line = Vec::new();
    let mut i = 0usize;
    loop {
        line.clear();
        let n = inp
            .read_until(b'\n', &mut line)
            .map_err(|e| open_error(path, e))?;
        // The end, or a last line without its newline (torn by a kill).
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        i += 1;
        complete_len += n as u64;
        let bad = |fault: RecordFault| RunError::ResultsRecord {
            path: path.display().to_string(),
            line: i,
            fault,
        };
        let text = std::str::from_utf8(&line).map_err(|e| {
            bad(RecordFault::Utf8 {
                byte: e.valid_up_to() + 1,
            })
        })?;
        if text.trim().is_empty() {
            continue;
        }
        let kind: Kind = serde_json::from_str(text).map_err(|e| bad(RecordFault::Json(e)))?;
        match kind.record.as_deref() {
            Some("header") if header.is_none() => {
                let h: Header =
                    serde_json::from_str(text).map_err(|e| bad(RecordFault::Json(e)))?;
                // Room for the planned runs at once: grown by doubling, the
                // vector would hold up to twice the records' room, and
                // while it moves, three times. The plan is input, so no
                // more than the file's remaining bytes could hold (a run
                // record is well over 256 bytes).
                let room = file_len.saturating_sub(complete_len) / 256;
                runs.reserve_exact(h.planned_runs.min(room as usize));
                header = Some(h);
            }
            Some("header") => {}
            Some("run") => {
                let mut r: RunRecord =
                    serde_json::from_str(text).map_err(|e| bad(RecordFault::Json(e)))?;
                if keep == Keep::Report {
                    slim(&mut r);
                }
                runs.push(r);
            }
            _ => {
                return Err(RunError::NotARecord {
                    path: path.display().to_string(),
                    line: i,
                })
            }
        }
    }
    let header = header.ok_or_else(|| RunError::NoHeader {
        path: path.display().to_string(),
    })?;
    Ok(Results {
        header,
        runs,
        complete_len,
    })
}

/// The error for a results file that cannot be opened or read.
fn open_error(path: &Path, e: std::io::Error) -> RunError {
    let what = match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist",
        std::io::ErrorKind::IsADirectory => "is a directory",
        _ => return RunError::io(path, e),
    };
    RunError::Usage(dmalab_core::UsageError::new(
        "RESULTS",
        format!(
            "{} {what}; name the .results.jsonl file `dmalab run` wrote",
            path.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside a page result, a figure with no summary along its pointer
    /// is drawn with the result's only summary, and with none when there
    /// are several: which one would be a guess.
    #[test]
    fn a_figure_without_its_own_summary_gets_the_only_one_or_none() {
        let lat =
            |lo: u64| serde_json::json!({"buckets": [{"lo_ns": lo, "hi_ns": lo + 1, "count": 3}]});
        let run = |metric: &str, result: Value| -> RunRecord {
            serde_json::from_value(serde_json::json!({
                "record": "run", "experiment_hash": "h", "index": 0,
                "configuration": "c", "repetition": 1, "victim": "v",
                "load": "plain", "started_at": "t", "status": "completed",
                "value": 1.0, "metric": metric, "unit": "ns", "better": "lower",
                "victim_wall_ns": 1, "victim_argv": [], "victim_cpus": "0",
                "victim_result": result,
            }))
            .unwrap()
        };
        let lo = |r: &RunRecord| latency_for(r).map(|l| l.buckets[0].lo_ns);
        let one = serde_json::json!({"a": {"lat": lat(10)}, "bw_bytes": 5.0});
        assert_eq!(lo(&run("/result/bw_bytes", one.clone())), Some(10));
        assert_eq!(lo(&run("/result/a/mean_ns", one)), Some(10));
        let two = serde_json::json!({"a": {"lat": lat(10)}, "b": {"lat": lat(20)}, "n": 1});
        assert_eq!(lo(&run("/result/b/mean_ns", two.clone())), Some(20));
        assert_eq!(lo(&run("/result/n", two)), None);
    }

    #[test]
    fn a_merged_file_groups_its_runs_by_host_and_configuration() {
        let line = |host: &str, c: &str, i: usize| {
            format!(
                r#"{{"record":"run","experiment_hash":"h","index":{i},"configuration":"{c}","repetition":1,"victim":"v","load":"plain","started_at":"t","status":"completed","value":1.0,"metric":"wall_s","unit":"s","better":"lower","victim_wall_ns":1,"victim_argv":[],"victim_cpus":"0","host":"{host}"}}"#
            )
        };
        let host = |name: &str, file: &str| MergedHost {
            name: name.into(),
            results_file: file.into(),
            host: HostInfo::default(),
            tool: ToolInfo::this(),
            started_at: "t".into(),
            planned_runs: 1,
            recorded_runs: 1,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        let header = Header {
            record: "header".into(),
            schema_version: 1,
            tool: ToolInfo::this(),
            experiment: "e".into(),
            experiment_path: "e.toml".into(),
            experiment_hash: "h".into(),
            experiment_toml: String::new(),
            started_at: "t".into(),
            host: HostInfo::default(),
            planned_runs: 3,
            victims: vec![],
            configurations: vec!["a".into(), "b".into()],
            loads: vec!["plain".into()],
            sweep: None,
            noisy_cv_pct: 5.0,
            aggressor_cpus: "1".into(),
            victim_cpus: "0".into(),
            warnings: vec![],
            // n1 came as one file per configuration.
            hosts: vec![
                host("n1", "n1.a.jsonl"),
                host("n1", "n1.b.jsonl"),
                host("n2", "n2.jsonl"),
            ],
        };
        let text = format!(
            "{}\n{}\n{}\n{}\n",
            serde_json::to_string(&header).unwrap(),
            line("n1", "a", 0),
            line("n1", "b", 1),
            line("n2", "a", 0)
        );
        std::fs::write(&p, text).unwrap();
        let res = read(&p).unwrap();
        assert_eq!(res.header.hosts.len(), 3);
        assert_eq!(res.runs[2].host.as_deref(), Some("n2"));
        let g = res.clone().grouped_by_host();
        assert_eq!(
            g.header.configurations,
            ["n1 · a", "n1 · b", "n2 · a", "n2 · b"]
        );
        let cs: Vec<&str> = g.runs.iter().map(|r| r.configuration.as_str()).collect();
        assert_eq!(cs, ["n1 · a", "n1 · b", "n2 · a"]);
        // A file dmalab run wrote stays as it is.
        let mut plain = res.clone();
        plain.header.hosts.clear();
        assert_eq!(plain.grouped_by_host().header.configurations, ["a", "b"]);
    }

    #[test]
    fn a_file_concatenated_onto_itself_counts_each_run_once() {
        let seed = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fuzz/seeds/results-small.jsonl"),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("twice.jsonl");
        std::fs::write(&p, format!("{seed}{seed}")).unwrap();
        let mut res = read(&p).unwrap();
        let once = res.runs.len() / 2;
        assert!(once > 0);
        assert_eq!(res.drop_duplicate_runs(), once);
        assert_eq!(res.runs.len(), once);
        // The same position run again at another time is another run.
        let mut again = res.clone();
        let mut r = again.runs[0].clone();
        r.started_at.push('x');
        again.runs.push(r);
        assert_eq!(again.drop_duplicate_runs(), 0);
        assert_eq!(again.runs.len(), once + 1);
    }
}
