//! Running a resolved plan: the buffer, one pinned worker per engine, the
//! shared pattern stream and limiter, per-second samples, stop conditions.

use crate::buffer::{DmaBuffer, Fill, HugePages, PIECE_LIMIT};
use crate::check::{check_rate_schedule, RateCheck};
use crate::engine::{self, Command, Completion, EngineKind, EngineSpec, Op};
use crate::limiter::{Arrival, Clock, Limiter, MonoClock, RateChange, RateSpec};
use crate::live::{monotonic_ns, LiveStats};
use crate::pattern::{PatternStream, StreamConfig};
use crate::result::{CpuResult, LoadResult, Rates, Sample, Totals, TraceResult, WorkerResult};
use dmalab_core::hist::LatHist;
use dmalab_core::schema::CpuUsage;
use dmalab_sim::trace::{DmaDir, TraceWriter};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::Duration;

/// `--direction`, from memory's point of view (as in the thesis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The device writes memory: storage reads.
    Write,
    /// The device reads memory: storage writes.
    Read,
}

/// `--cache`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// The CPU does not touch the buffer.
    None,
    /// The CPU reads the whole buffer once before the first command.
    Once,
    /// The CPU reads each command's buffer region just before submitting it.
    Always,
}

/// `--cpus-allowed-policy` (as fio's `cpus_allowed_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum CpuPolicy {
    /// Every worker may run on every listed CPU.
    Shared,
    /// Worker i runs on the i-th listed CPU (round robin).
    Split,
}

/// The fully resolved configuration of a run (every default filled in).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The engine.
    pub engine: EngineKind,
    /// The target path (None for the null engine without a target).
    pub target: Option<PathBuf>,
    /// `file`, `block`, `char` or `none`.
    pub target_kind: String,
    /// True when dmalab created the target in this run.
    pub target_created: bool,
    /// Keep a created target afterwards.
    pub keep: bool,
    /// Size of the target, bytes.
    pub target_size_bytes: u64,
    /// Logical block size of the target, bytes.
    pub logical_block_size_bytes: u64,
    /// Direction, from memory's point of view.
    pub direction: Direction,
    /// The pattern stream's configuration (pattern, bs, buffer, region, ...).
    pub stream: StreamConfig,
    /// Number of registration pieces of the buffer.
    pub buffer_pieces: u64,
    /// Buffer contents.
    pub fill: Fill,
    /// Workers (threads, one ring each).
    pub workers: usize,
    /// CPUs the workers may use (empty: not pinned).
    pub cpus_allowed: Vec<usize>,
    /// How workers share the CPUs.
    pub cpus_allowed_policy: CpuPolicy,
    /// Commands in flight per worker at most.
    pub iodepth: u32,
    /// Page size of the buffer.
    pub hugepages: HugePages,
    /// The buffer is locked in memory (always true).
    pub mlock: bool,
    /// Cache mode.
    pub cache: CacheMode,
    /// Rate limits.
    pub rate: RateSpec,
    /// Stop after this long, nanoseconds.
    pub runtime_ns: Option<u64>,
    /// Stop after this many commands.
    pub max_commands: Option<u64>,
    /// Stop after this many blocks.
    pub max_total_blocks: Option<u64>,
    /// Live counters file.
    pub live_stats: Option<PathBuf>,
    /// Rate-control file through which the limits change while running.
    #[serde(default)]
    pub rate_control: Option<PathBuf>,
    /// Workers run under SCHED_FIFO at this priority (None: normal).
    pub realtime_priority: Option<i32>,
    /// Record every DMA transfer into this dmalab-sim trace file.
    pub trace: Option<PathBuf>,
    /// Compute the buffer's SHA-256 after the run (`--buffer-checksum`).
    #[serde(default)]
    pub buffer_checksum: bool,
}

impl Plan {
    /// The op every data command uses.
    pub fn writes_storage(&self) -> bool {
        self.direction == Direction::Read && self.stream.pattern.moves_data()
    }

    /// CPUs for worker `i`.
    pub fn worker_cpus(&self, i: usize) -> Vec<usize> {
        if self.cpus_allowed.is_empty() {
            return Vec::new();
        }
        match self.cpus_allowed_policy {
            CpuPolicy::Shared => self.cpus_allowed.clone(),
            CpuPolicy::Split => vec![self.cpus_allowed[i % self.cpus_allowed.len()]],
        }
    }

    /// Registration piece size for this plan's block size.
    pub fn piece_bytes(bs: u64) -> u64 {
        crate::pattern::piece_bytes(bs, PIECE_LIMIT)
    }
}

/// Errors of a run (the buffer or an engine could not be set up).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The buffer.
    #[error("DMA buffer")]
    Buffer(#[from] crate::buffer::BufferError),
    /// An engine.
    #[error("worker {worker}")]
    Engine {
        /// Which worker.
        worker: usize,
        /// What failed.
        #[source]
        source: engine::EngineError,
    },
    /// The pattern stream.
    #[error(transparent)]
    Stream(#[from] crate::pattern::StreamError),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// The stream and limiter all workers share, plus the command/block limits.
struct Shared {
    stream: PatternStream,
    limiter: Limiter,
    commands_left: u64,
    blocks_left: u64,
    data: bool,
}

impl Shared {
    fn next(&mut self, now_ns: u64) -> Option<(Command, u64)> {
        self.limiter.poll_control(now_ns);
        if self.commands_left == 0 || (self.data && self.blocks_left == 0) {
            return None;
        }
        let cmd = self.stream.next_command(self.blocks_left);
        self.commands_left -= 1;
        self.blocks_left = self.blocks_left.saturating_sub(u64::from(cmd.blocks));
        let due = self.limiter.due_ns(u64::from(cmd.len));
        Some((cmd, due))
    }
}

struct WorkerOut {
    result: WorkerResult,
    hist: LatHist,
    late_hist: LatHist,
    completions: Vec<(u64, u64)>,
    /// Per 1-second window, ns in which a due command waited for a slot.
    held_ns: Vec<u64>,
    first_error: Option<String>,
    last_ns: u64,
}

/// Adds the span `[from, to)` to per-1-second-window totals, split at
/// window boundaries.
fn add_span(windows: &mut Vec<u64>, from: u64, to: u64) {
    const W: u64 = 1_000_000_000;
    let mut t = from;
    while t < to {
        let w = (t / W) as usize;
        let end = ((w as u64 + 1) * W).min(to);
        if windows.len() <= w {
            windows.resize(w + 1, 0);
        }
        windows[w] += end - t;
        t = end;
    }
}

/// With Poisson arrival the last stretch before a due time is spun, not
/// slept: a sleep on a virtual machine overshoots by tens of microseconds,
/// which would bunch arrivals and distort the gaps. Uniform pacing only
/// needs its 1-second windows right, and due times are absolute (an
/// oversleep delays one command, not the schedule), so it never spins and
/// leaves the CPU to the kernel's completion work.
const POISSON_SPIN_NS: u64 = 100_000;

/// Sleeps until `spin_ns` before `until`, then spins to it.
fn precise_wait_until(clock: &MonoClock, until: u64, spin_ns: u64) {
    let now = clock.now_ns();
    if until > now + spin_ns {
        clock.sleep_until(until - spin_ns);
    }
    while clock.now_ns() < until {
        std::hint::spin_loop();
    }
}

/// Most completion timestamps kept for the rate checker.
const MAX_RECORDED: usize = 20_000_000;
/// Longest a worker waits before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(20);

/// What a caller does at a run's milestones, on the run's own clock (so
/// hardware counters start after set-up, are sampled with the load's
/// per-second samples and stop after the last completion).
pub trait Observer {
    /// Every worker is set up; the clock starts now.
    fn started(&mut self) {}
    /// A sample was taken; `shown` is false for a final sliver of less
    /// than 0.1 s (kept in the result, not printed).
    fn sample(&mut self, s: &Sample, shown: bool);
    /// Every worker has stopped: the last completion is in.
    fn finished(&mut self) {}
}

struct OnSample<'a>(&'a mut dyn FnMut(&Sample));

impl Observer for OnSample<'_> {
    fn sample(&mut self, s: &Sample, shown: bool) {
        if shown {
            (self.0)(s);
        }
    }
}

/// Runs `plan`. `stop` ends the run early (SIGINT/SIGTERM); `on_sample` gets
/// each per-second sample as it is taken.
pub fn run(
    plan: &Plan,
    stop: Arc<AtomicBool>,
    on_sample: &mut dyn FnMut(&Sample),
) -> Result<LoadResult, RunError> {
    run_observed(plan, stop, &mut OnSample(on_sample))
}

/// [`run`] with an [`Observer`] told of every milestone.
pub fn run_observed(
    plan: &Plan,
    stop: Arc<AtomicBool>,
    obs: &mut dyn Observer,
) -> Result<LoadResult, RunError> {
    let stream = PatternStream::new(plan.stream.clone())?;
    let live = LiveStats::create(plan.live_stats.as_deref()).map_err(|e| {
        RunError::Other(format!(
            "--live-stats: cannot create {}: {e}",
            plan.live_stats
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        ))
    })?;
    let buffer = Arc::new(DmaBuffer::new(
        plan.stream.buffer_bytes,
        plan.stream.piece_bytes,
        plan.hugepages,
        plan.fill,
    )?);
    if plan.cache == CacheMode::Once {
        buffer.touch(0, buffer.len());
    }
    let trace = match &plan.trace {
        Some(p) => Some(Arc::new(TraceWriter::create(p).map_err(|e| {
            RunError::Other(format!("--trace: cannot create {}: {e}", p.display()))
        })?)),
        None => None,
    };
    let mut limiter = Limiter::new(plan.rate.clone());
    if let Some(p) = &plan.rate_control {
        let initial = dmalab_core::ratecontrol::Limits {
            rate_bytes_per_s: plan.rate.rate_bytes_per_s,
            rate_iops: plan.rate.rate_iops,
        };
        let ctl = dmalab_core::ratecontrol::RateControl::create(p, initial)
            .map_err(|e| RunError::Other(format!("--rate-control: cannot create {e}")))?;
        limiter = limiter.with_control(Arc::new(ctl));
    }
    let shared = Arc::new(Mutex::new(Shared {
        stream,
        limiter,
        commands_left: plan.max_commands.unwrap_or(u64::MAX),
        blocks_left: plan.max_total_blocks.unwrap_or(u64::MAX),
        data: plan.stream.pattern.moves_data(),
    }));
    let live = Arc::new(live);
    let n = plan.workers;
    let opened = Arc::new(Barrier::new(n + 1));
    let go = Arc::new(Barrier::new(n + 1));
    let setup_error: Arc<Mutex<Option<RunError>>> = Arc::new(Mutex::new(None));
    let start_cell: Arc<OnceLock<MonoClock>> = Arc::new(OnceLock::new());
    let abort = Arc::new(AtomicBool::new(false));
    let record = plan.rate.limited();
    let deadline = plan.runtime_ns.unwrap_or(u64::MAX);
    let mut handles = Vec::new();
    for i in 0..n {
        let cpus = plan.worker_cpus(i);
        let spec = EngineSpec {
            target: plan.target.clone().unwrap_or_default(),
            pieces: buffer.pieces(),
            iodepth: plan.iodepth,
            bs: plan.stream.bs_bytes as u32,
            writes: plan.writes_storage(),
            worker: i,
            cpus: cpus.clone(),
        };
        let kind = plan.engine;
        let (opened, go, setup_error, start_cell, shared, stop, abort, live, buffer) = (
            opened.clone(),
            go.clone(),
            setup_error.clone(),
            start_cell.clone(),
            shared.clone(),
            stop.clone(),
            abort.clone(),
            live.clone(),
            buffer.clone(),
        );
        let cache_always = plan.cache == CacheMode::Always;
        let realtime = plan.realtime_priority;
        let trace = trace.clone();
        let poisson = plan.rate.arrival == Arrival::Poisson;
        let h = std::thread::Builder::new()
            .name(format!("dmalab-load-{i}"))
            .spawn(move || -> Option<WorkerOut> {
                let mut err = None;
                if !cpus.is_empty() {
                    if let Err(e) = dmalab_core::cpus::pin_current_thread(&cpus) {
                        err = Some(RunError::Other(format!(
                            "worker {i}: cannot pin to CPUs {cpus:?}: {e}"
                        )));
                    }
                }
                if let (None, Some(prio)) = (&err, realtime) {
                    let param = libc::sched_param { sched_priority: prio };
                    // SAFETY: plain struct by pointer; 0 = the calling thread.
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                        err = Some(RunError::Other(format!(
                            "worker {i}: cannot switch to SCHED_FIFO priority {prio}: {}; --realtime needs root or CAP_SYS_NICE",
                            std::io::Error::last_os_error()
                        )));
                    }
                }
                // SAFETY: prctl with an integer argument; precise sleeps for pacing.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
                let mut eng = None;
                if err.is_none() {
                    match engine::open(kind, &spec) {
                        Ok(e) => eng = Some(e),
                        Err(source) => err = Some(RunError::Engine { worker: i, source }),
                    }
                }
                if let Some(e) = err {
                    if let Ok(mut slot) = setup_error.lock() {
                        slot.get_or_insert(e);
                    }
                }
                opened.wait();
                go.wait();
                let mut eng = eng?;
                let clock = *start_cell.get()?;
                Some(worker_loop(
                    i,
                    &cpus,
                    eng.as_mut(),
                    &clock,
                    &shared,
                    &stop,
                    &abort,
                    &live,
                    &buffer,
                    spec.iodepth as usize,
                    deadline,
                    record,
                    cache_always,
                    trace.as_deref(),
                    poisson,
                ))
            })
            .map_err(|e| RunError::Other(format!("cannot start worker thread: {e}")))?;
        handles.push(h);
    }
    opened.wait();
    let failed = setup_error.lock().ok().and_then(|mut s| s.take());
    if failed.is_some() {
        // Workers whose engine did open must not start.
        abort.store(true, Ordering::Relaxed);
    }
    if failed.is_none() {
        obs.started();
    }
    let clock = MonoClock::new();
    let mut steal = dmalab_core::host::StealMeter::start();
    let _ = start_cell.set(clock);
    live.set_running(monotonic_ns());
    go.wait();

    // Per-second samples while the workers run.
    let mut samples = Vec::new();
    let mut last = (0u64, 0u64, 0u64);
    let mut last_t = 0u64;
    let mut next = 1_000_000_000u64;
    if failed.is_none() {
        while !handles.iter().all(|h| h.is_finished()) {
            let now = clock.now_ns();
            if now >= next {
                // Stamp the sample when the counters were read (a loaded
                // machine may wake us late), not at the nominal second.
                let cur = live.totals();
                let t = clock.now_ns();
                let mut s = sample(cur, last, t, t - last_t, steal.take());
                set_target(&mut s, &shared);
                obs.sample(&s, true);
                samples.push(s);
                last = cur;
                last_t = t;
                next += 1_000_000_000;
                continue;
            }
            // Short naps: notice finished workers quickly.
            std::thread::sleep(Duration::from_nanos((next - now).min(10_000_000)));
        }
    }
    let mut outs = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Some(o)) => outs.push(o),
            Ok(None) => {}
            Err(_) => return Err(RunError::Other("a worker thread panicked".into())),
        }
    }
    live.set_finished();
    if failed.is_none() {
        obs.finished();
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut trace_summary = None;
    if let (Some(w), Some(p)) = (trace, &plan.trace) {
        let w = Arc::into_inner(w)
            .ok_or_else(|| RunError::Other("--trace: the writer is still shared".into()))?;
        let sum = w
            .finish()
            .map_err(|e| RunError::Other(format!("--trace: cannot write {}: {e}", p.display())))?;
        trace_summary = Some(TraceResult {
            path: p.display().to_string(),
            transfers: sum.transfers,
            records: sum.records,
            reordered: sum.reordered,
        });
    }
    let runtime_ns = outs.iter().map(|o| o.last_ns).max().unwrap_or(0).max(1);
    let cur = live.totals();
    if cur != last && runtime_ns > last_t {
        let mut s = sample(cur, last, runtime_ns, runtime_ns - last_t, steal.take());
        set_target(&mut s, &shared);
        // A sliver of a second after the last whole one gives a meaningless
        // per-second rate on stderr; the JSON keeps it (samples sum to the
        // totals).
        obs.sample(&s, s.interval_s >= 0.1);
        samples.push(s);
    }

    let bs = plan.stream.bs_bytes;
    let mut totals = Totals::default();
    let mut hist = LatHist::new();
    let mut late_hist = LatHist::new();
    let mut cpu = CpuUsage::default();
    let mut completions = Vec::new();
    let mut held_ns: Vec<u64> = Vec::new();
    let mut workers = Vec::new();
    let mut first_error = None;
    for mut o in outs {
        totals.merge(&o.result.totals);
        hist.merge(&o.hist);
        late_hist.merge(&o.late_hist);
        cpu.usr_ns += o.result.cpu.usr_ns;
        cpu.sys_ns += o.result.cpu.sys_ns;
        completions.append(&mut o.completions);
        // Workers' holds overlap in time, so a sum could exceed the window:
        // the longest of any worker's is a lower bound of the time some due
        // command waited, and never credits the device with more than that.
        if held_ns.len() < o.held_ns.len() {
            held_ns.resize(o.held_ns.len(), 0);
        }
        for (a, &b) in held_ns.iter_mut().zip(&o.held_ns) {
            *a = (*a).max(b);
        }
        o.result.rates = Rates::of(&o.result.totals, bs, runtime_ns);
        if first_error.is_none() {
            first_error = o.first_error.take();
        }
        workers.push(o.result);
    }
    let cpu_total = (cpu.usr_ns + cpu.sys_ns) as f64;
    let interrupted = stop.load(Ordering::Relaxed);
    // Windows run to the planned end, or to the last completion when
    // stopped early or by --commands/--blocks.
    let planned_end = plan.runtime_ns.filter(|_| !interrupted);
    // Sample k covers about [k, k+1) s, as the checker's window k does.
    let steal_ns: Vec<u64> = samples.iter().map(|s| s.steal_ns).collect();
    let rate_changes = shared
        .lock()
        .map(|s| s.limiter.changes().to_vec())
        .unwrap_or_default();
    let rate_check = record.then(|| {
        rate_check(
            &plan.rate,
            &rate_changes,
            &completions,
            &held_ns,
            &steal_ns,
            planned_end,
            runtime_ns,
        )
    });
    let (rd, wr) = match (plan.stream.pattern.moves_data(), plan.direction) {
        (false, _) => (0, 0),
        (true, Direction::Write) => (totals.data_bytes, 0),
        (true, Direction::Read) => (0, totals.data_bytes),
    };
    Ok(LoadResult {
        runtime_ns,
        engine: workers
            .first()
            .map_or_else(|| plan.engine.as_str().to_string(), |w| w.engine.clone()),
        interrupted,
        totals,
        rates: Rates::of(&totals, bs, runtime_ns),
        storage_read_bytes: rd,
        storage_write_bytes: wr,
        lat_ns: hist.summary(),
        cpu: CpuResult {
            usr_ns: cpu.usr_ns,
            sys_ns: cpu.sys_ns,
            cpu_ns_per_command: if totals.commands > 0 {
                cpu_total / totals.commands as f64
            } else {
                0.0
            },
            cpu_pct: 100.0 * cpu_total / runtime_ns as f64,
        },
        workers,
        samples,
        rate_check,
        rate_changes,
        first_error,
        reserved_huge_pages: buffer.reserved_huge_pages,
        trace: trace_summary,
        pacing_lateness_ns: record.then(|| late_hist.summary()),
        buffer_sha256: plan.buffer_checksum.then(|| buffer_sha256(&buffer)),
        nvme: None,
    })
}

/// SHA-256 of the whole buffer, hex. Called after every worker has stopped,
/// so no DMA is in flight.
fn buffer_sha256(buffer: &DmaBuffer) -> String {
    use sha2::Digest;
    // SAFETY: the buffer is allocated for len bytes and alive; every worker
    // and engine is done, so nothing writes it while the slice lives.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.as_ptr(), buffer.len() as usize) };
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn sample(
    cur: (u64, u64, u64),
    last: (u64, u64, u64),
    t_ns: u64,
    interval_ns: u64,
    steal_ns: u64,
) -> Sample {
    let iv = interval_ns.max(1) as f64 / 1e9;
    let (b, c, k) = (cur.0 - last.0, cur.1 - last.1, cur.2 - last.2);
    Sample {
        t_s: t_ns as f64 / 1e9,
        interval_s: iv,
        bytes: b,
        commands: c,
        blocks: k,
        bw_bytes: b as f64 / iv,
        iops: c as f64 / iv,
        blocks_per_s: k as f64 / iv,
        steal_ns,
        rate_target_bytes_per_s: None,
        rate_target_iops: None,
    }
}

/// Stamps the limits in force on a sample.
fn set_target(s: &mut Sample, shared: &Mutex<Shared>) {
    if let Ok(sh) = shared.lock() {
        s.rate_target_bytes_per_s = sh.limiter.spec().rate_bytes_per_s;
        s.rate_target_iops = sh.limiter.spec().rate_iops;
    }
}

fn rate_check(
    spec: &RateSpec,
    changes: &[RateChange],
    completions: &[(u64, u64)],
    held_ns: &[u64],
    steal_ns: &[u64],
    runtime: Option<u64>,
    ran_ns: u64,
) -> RateCheck {
    // The binding limit: bytes when --rate is the stricter one.
    let n = completions.len().max(1) as f64;
    let mean_bytes = completions.iter().map(|c| c.1 as f64).sum::<f64>() / n;
    let by_bytes = spec
        .rate_bytes_per_s
        .map(|r| r as f64 / mean_bytes.max(1.0));
    let by_cmds = spec.rate_iops.map(|r| r as f64);
    let bytes_bind = match (by_bytes, by_cmds) {
        (Some(b), Some(c)) => b <= c,
        (Some(_), None) => true,
        _ => false,
    };
    let target_of = |b: Option<u64>, c: Option<u64>| {
        if bytes_bind {
            b.unwrap_or(1) as f64
        } else {
            c.unwrap_or(1) as f64
        }
    };
    // The schedule of targets: the spec's from 0, then each live change.
    let mut schedule = vec![(0, target_of(spec.rate_bytes_per_s, spec.rate_iops))];
    schedule.extend(
        changes
            .iter()
            .map(|c| (c.t_ns, target_of(c.rate_bytes_per_s, c.rate_iops))),
    );
    // Only windows that end at least 100 ms before submission stopped: the
    // window holding the stop loses the commands still in flight then.
    let end = runtime.unwrap_or(ran_ns).saturating_sub(100_000_000);
    check_rate_schedule(
        completions,
        held_ns,
        steal_ns,
        bytes_bind,
        &schedule,
        end,
        spec.arrival == Arrival::Poisson,
    )
}

#[allow(clippy::too_many_arguments)]
fn worker_loop(
    index: usize,
    cpus: &[usize],
    eng: &mut dyn engine::Engine,
    clock: &MonoClock,
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
    abort: &AtomicBool,
    live: &LiveStats,
    buffer: &DmaBuffer,
    depth: usize,
    deadline: u64,
    record: bool,
    cache_always: bool,
    trace: Option<&TraceWriter>,
    poisson: bool,
) -> WorkerOut {
    let cpu0 = CpuUsage::thread();
    let spin_ns = if poisson { POISSON_SPIN_NS } else { 0 };
    let mut free: Vec<u32> = (0..depth as u32).rev().collect();
    let mut slot_cmd = vec![(0u32, 0u32, Op::Noop); depth];
    let mut slot_t0 = vec![0u64; depth];
    let mut slot_addr = vec![0u64; depth];
    let base = buffer.as_ptr() as u64;
    let mut inflight = 0usize;
    let mut pending: Option<(Command, u64)> = None;
    let mut draining = false;
    let mut comps: Vec<Completion> = Vec::with_capacity(depth);
    let mut totals = Totals::default();
    let mut hist = LatHist::new();
    let mut late_hist = LatHist::new();
    let mut recorded = Vec::new();
    // When every slot is busy, a command that falls due waits for the
    // device: `full_since` is when the last free slot was taken, `freed`
    // the span the queue stayed full once a completion ends it. The first
    // command fetched after that span waited from max(its due time, the
    // span's start) to the span's end.
    let mut held_ns = Vec::new();
    let mut full_since: Option<u64> = None;
    let mut freed: Option<(u64, u64)> = None;
    let mut first_error = None;
    let mut last_ns = 0;
    loop {
        let now = clock.now_ns();
        if !draining
            && (stop.load(Ordering::Relaxed) || abort.load(Ordering::Relaxed) || now >= deadline)
        {
            draining = true;
        }
        if !draining {
            while let Some(&slot) = free.last() {
                if pending.is_none() {
                    pending = shared.lock().ok().and_then(|mut s| s.next(now));
                    if pending.is_none() {
                        draining = true;
                        break;
                    }
                    if let (Some((_, due)), Some((from, to))) = (pending, freed.take()) {
                        if record && due < to {
                            add_span(&mut held_ns, due.max(from), to);
                        }
                    }
                }
                let Some((cmd, due)) = pending else { break };
                if due > now {
                    break;
                }
                if cache_always && cmd.len > 0 {
                    buffer.touch(cmd.buf_offset, u64::from(cmd.len));
                }
                if let Err(e) = eng.queue(&cmd, slot) {
                    first_error.get_or_insert(format!("worker {index}: {e}"));
                    abort.store(true, Ordering::Relaxed);
                    draining = true;
                    break;
                }
                free.pop();
                if record {
                    late_hist.record(clock.now_ns().saturating_sub(due));
                }
                slot_cmd[slot as usize] = (cmd.len, cmd.blocks, cmd.op);
                slot_t0[slot as usize] = clock.now_ns();
                if free.is_empty() {
                    full_since = Some(slot_t0[slot as usize]);
                }
                slot_addr[slot as usize] = base + cmd.buf_offset;
                inflight += 1;
                pending = None;
            }
        }
        if inflight == 0 {
            if draining {
                break;
            }
            if let Some((_, due)) = pending {
                let until = due.min(deadline).min(now + POLL.as_nanos() as u64);
                precise_wait_until(clock, until, spin_ns);
            }
            continue;
        }
        let mut spin_to = None;
        let (min, timeout) = match pending {
            Some((_, due)) if !draining && !free.is_empty() => {
                let until = due.min(deadline);
                if until > now + spin_ns {
                    // Sleep in the ring until shortly before the due time
                    // (or a completion); the last stretch is spun below.
                    let wait = Duration::from_nanos(until - now - spin_ns).min(POLL);
                    (1, Some(wait))
                } else {
                    // Submit what is queued first, then spin to the due time.
                    spin_to = Some(until);
                    (0, None)
                }
            }
            // Nothing can be queued before a completion frees a slot (and
            // a stop or the deadline only drains what is in flight): wait
            // for one without arming a timer on every wait.
            _ => (1, None),
        };
        comps.clear();
        if let Err(e) = eng.submit_and_reap(min, timeout, &mut comps) {
            first_error.get_or_insert(format!("worker {index}: {e}"));
            abort.store(true, Ordering::Relaxed);
            // The ring failed: nothing more will complete.
            break;
        }
        if comps.is_empty() {
            if let Some(until) = spin_to {
                precise_wait_until(clock, until, spin_ns);
            }
            continue;
        }
        let t = clock.now_ns();
        last_ns = t;
        if let Some(from) = full_since.take() {
            freed = Some((from, t));
        }
        let before = totals;
        for c in &comps {
            let s = c.slot as usize;
            let Some(&(len, blocks, op)) = slot_cmd.get(s) else {
                continue;
            };
            free.push(c.slot);
            inflight -= 1;
            let expected = if matches!(op, Op::Read | Op::Write) {
                len as i32
            } else {
                c.result.max(0)
            };
            if c.result < 0 || c.result != expected {
                totals.errors += 1;
                if first_error.is_none() {
                    let what = if c.result < 0 {
                        std::io::Error::from_raw_os_error(-c.result).to_string()
                    } else {
                        format!("short transfer: {} of {len} bytes", c.result)
                    };
                    first_error = Some(format!(
                        "worker {index}: {op:?} of {len} bytes failed: {what}"
                    ));
                }
                abort.store(true, Ordering::Relaxed);
                continue;
            }
            hist.record(t.saturating_sub(slot_t0[s]));
            if let (Some(w), Op::Read | Op::Write) = (trace, op) {
                let dir = if op == Op::Read {
                    DmaDir::ToMemory
                } else {
                    DmaDir::FromMemory
                };
                // A failed write is remembered by the writer; finish reports it.
                let _ = w.write_dma_transfer(slot_addr[s], u64::from(len), dir, slot_t0[s], t);
            }
            totals.add(u64::from(blocks), u64::from(len));
            if record && recorded.len() < MAX_RECORDED {
                recorded.push((t, u64::from(len)));
            }
        }
        live.add(
            totals.data_bytes - before.data_bytes,
            totals.commands - before.commands,
            totals.blocks - before.blocks,
        );
    }
    let cpu = CpuUsage::thread().since(&cpu0);
    WorkerOut {
        result: WorkerResult {
            index,
            engine: eng.name().to_string(),
            cpus: cpus.to_vec(),
            totals,
            rates: Rates::default(),
            cpu,
            lat_ns: hist.summary(),
        },
        hist,
        late_hist,
        completions: recorded,
        held_ns,
        first_error,
        last_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::pattern::{DeviceOffsets, Pattern};
    use std::time::Instant;

    /// A slow device: each command completes 20 ms after it was queued.
    /// Records when each command was queued and how many were in flight.
    struct SlowEngine {
        start: Instant,
        inflight: Vec<(Instant, u32, i32)>,
        queued_at_ns: Arc<Mutex<Vec<(u64, usize)>>>,
    }

    impl Engine for SlowEngine {
        fn name(&self) -> &'static str {
            "slow"
        }
        fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), engine::EngineError> {
            let now = Instant::now();
            self.queued_at_ns.lock().unwrap().push((
                now.duration_since(self.start).as_nanos() as u64,
                self.inflight.len(),
            ));
            self.inflight
                .push((now + Duration::from_millis(20), slot, cmd.len as i32));
            Ok(())
        }
        fn submit_and_reap(
            &mut self,
            min: usize,
            timeout: Option<Duration>,
            out: &mut Vec<Completion>,
        ) -> Result<(), engine::EngineError> {
            let limit = timeout.map(|t| Instant::now() + t);
            loop {
                let now = Instant::now();
                let before = out.len();
                self.inflight.retain(|&(due, slot, result)| {
                    let done = due <= now;
                    if done {
                        out.push(Completion { slot, result });
                    }
                    !done
                });
                if out.len() - before >= min || limit.is_some_and(|l| now >= l) {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Runs 100 commands due every 1/`iops` s on a SlowEngine with `depth`
    /// slots: the worker's output and (queue time, in flight) per command.
    fn run_slow(depth: usize, iops: u64) -> (WorkerOut, Vec<(u64, usize)>) {
        let cfg = StreamConfig {
            pattern: Pattern::Single,
            write_storage: false,
            bs_bytes: 4096,
            max_blocks: 1,
            buffer_bytes: 1 << 20,
            piece_bytes: 1 << 20,
            region_bytes: 1 << 20,
            device_offsets: DeviceOffsets::Sequential,
            seed: 1,
        };
        let spec = RateSpec {
            rate_bytes_per_s: None,
            rate_iops: Some(iops),
            timeslot_ns: 100_000_000,
            arrival: Arrival::Uniform,
            burst: false,
            seed: 1,
        };
        let shared = Mutex::new(Shared {
            stream: PatternStream::new(cfg).unwrap(),
            limiter: Limiter::new(spec),
            commands_left: 100,
            blocks_left: u64::MAX,
            data: true,
        });
        let clock = MonoClock::new();
        let queued = Arc::new(Mutex::new(Vec::new()));
        let mut eng = SlowEngine {
            start: clock.start(),
            inflight: Vec::new(),
            queued_at_ns: queued.clone(),
        };
        let live = LiveStats::create(None).unwrap();
        let buffer = DmaBuffer::new(1 << 20, 1 << 20, HugePages::None, Fill::Zero).unwrap();
        let out = worker_loop(
            0,
            &[],
            &mut eng,
            &clock,
            &shared,
            &AtomicBool::new(false),
            &AtomicBool::new(false),
            &live,
            &buffer,
            depth,
            u64::MAX,
            true,
            false,
            None,
            false,
        );
        let q = queued.lock().unwrap().clone();
        (out, q)
    }

    #[test]
    fn a_full_queue_is_counted_as_the_device_holding_commands() {
        // Four slots of 20 ms commands deliver at most 200/s; asked for
        // 500/s, due commands wait for slots for most of the run.
        let (out, _) = run_slow(4, 500);
        assert_eq!(out.result.totals.commands, 100);
        let held: u64 = out.held_ns.iter().sum();
        // 100 commands at 200/s take 500 ms, of which the first 20 ms has
        // free slots: any sane accounting gives well over 100 ms held.
        assert!(held > 100_000_000, "held {held} ns");
    }

    #[test]
    fn paced_submissions_never_wait_for_completions() {
        let (out, q) = run_slow(32, 500);
        assert_eq!(out.result.totals.commands, 100);
        // Commands are due every 2 ms and take 20 ms: a limiter that waited
        // for completions (fio's inline mode drains the queue before it
        // sleeps) would queue each one with nothing in flight; ours queues
        // with about 10 in flight. Counting in-flight commands, not
        // lateness, keeps the test immune to a busy machine's stalls.
        let mut inflight: Vec<usize> = q.iter().map(|&(_, n)| n).collect();
        inflight.sort_unstable();
        assert!(
            inflight[50] >= 5,
            "median in flight at submission: {}",
            inflight[50]
        );
        // The queue never filled (32 slots, about 10 in flight): no command
        // waited for the device.
        assert!(out.held_ns.iter().all(|&h| h == 0), "{:?}", out.held_ns);
        // And never before the due time.
        for (k, &(t, _)) in q.iter().enumerate() {
            assert!(
                t + 100_000 >= k as u64 * 2_000_000,
                "command {k} early at {t}"
            );
        }
    }
}
