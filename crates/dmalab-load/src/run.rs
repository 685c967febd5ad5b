//! Running a resolved plan: the buffer, one pinned worker per engine, the
//! shared pattern stream and limiter, per-second samples, stop conditions.

pub use crate::plan::{CacheMode, CpuPolicy, Direction, Plan};

use crate::buffer::DmaBuffer;
use crate::check::{check_rate_schedule, RateCheck};
use crate::engine::{self, Command, Driver, EngineSpec};
use crate::limiter::{Arrival, Clock, Limiter, MonoClock, RateChange, RateSpec};
use crate::pattern::PatternStream;
use crate::result::{CpuResult, LoadResult, Rates, Sample, Totals, TraceResult};
use crate::worker::{worker_loop, Pacing, Sharing, WorkerOut};
use dmalab_core::hist::LatHist;
use dmalab_core::livestats::Writer as LiveStats;
use dmalab_core::schema::CpuUsage;
use dmalab_core::sys::clock::monotonic_ns;
use dmalab_trace::TraceWriter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::Duration;

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
    /// `--live-stats`: the page could not be created.
    #[error("--live-stats: cannot create {path}: {cause}")]
    LiveStats {
        /// The file.
        path: String,
        /// Why (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// `--trace`: the trace file could not be created or written.
    #[error("--trace: cannot {what} {path}: {cause}")]
    Trace {
        /// `create` or `write`.
        what: &'static str,
        /// The file.
        path: String,
        /// Why (printed in the message, so not a `source()`).
        cause: dmalab_trace::TraceError,
    },
    /// `--trace`: a worker still held the trace writer after the run.
    #[error("--trace: the writer is still shared")]
    TraceShared,
    /// `--rate-control`: the page could not be created.
    #[error("--rate-control: cannot create {0}")]
    RateControl(dmalab_core::ratecontrol::RateControlError),
    /// A worker could not be pinned to its CPUs.
    #[error("worker {worker}: cannot pin to CPUs {cpus:?}: {cause}")]
    Pin {
        /// Which worker.
        worker: usize,
        /// The CPUs.
        cpus: Vec<usize>,
        /// Why (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// A worker could not switch to SCHED_FIFO (`--realtime`).
    #[error("worker {worker}: cannot switch to SCHED_FIFO priority {priority}: {cause}; --realtime needs root or CAP_SYS_NICE")]
    Realtime {
        /// Which worker.
        worker: usize,
        /// The priority asked for.
        priority: i32,
        /// Why (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// A worker thread could not be started.
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    /// A worker thread panicked.
    #[error("a worker thread panicked")]
    Panicked,
}

/// The stream and limiter all workers share, plus the command/block limits.
pub(crate) struct Shared {
    pub(crate) stream: PatternStream,
    pub(crate) limiter: Limiter,
    pub(crate) commands_left: u64,
    pub(crate) blocks_left: u64,
    pub(crate) data: bool,
}

impl Shared {
    pub(crate) fn next(&mut self, now_ns: u64) -> Option<(Command, u64)> {
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

/// Tells the run's sampling loop that a worker thread has ended, however
/// it ends (a panic included: the signal is sent on drop).
struct DoneSignal(std::sync::mpsc::Sender<()>);

impl Drop for DoneSignal {
    fn drop(&mut self) {
        // The receiver only goes when the run is over.
        let _ = self.0.send(());
    }
}

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
    driver: Arc<dyn Driver>,
    stop: Arc<AtomicBool>,
    on_sample: &mut dyn FnMut(&Sample),
) -> Result<LoadResult, RunError> {
    run_observed(plan, driver, stop, &mut OnSample(on_sample))
}

/// [`run`] with an [`Observer`] told of every milestone. `driver` has
/// prepared the target; it opens each worker's engine on that worker's
/// thread, and its facts join the result.
pub fn run_observed(
    plan: &Plan,
    driver: Arc<dyn Driver>,
    stop: Arc<AtomicBool>,
    obs: &mut dyn Observer,
) -> Result<LoadResult, RunError> {
    let stream = PatternStream::new(plan.stream.clone())?;
    let live = Arc::new(create_live_stats(plan)?);
    let buffer = Arc::new(DmaBuffer::new(
        plan.stream.buffer_bytes,
        plan.stream.piece_bytes,
        plan.hugepages,
        plan.fill,
        &plan.placement,
    )?);
    if plan.cache == CacheMode::Once {
        buffer.touch(0, buffer.len());
    }
    let trace = create_trace(plan)?;
    let limiter = create_limiter(plan)?;
    let shared = Arc::new(Mutex::new(Shared {
        stream,
        limiter,
        commands_left: plan.max_commands.unwrap_or(u64::MAX),
        blocks_left: plan.max_total_blocks.unwrap_or(u64::MAX),
        data: plan.stream.pattern.moves_data(),
    }));
    let n = plan.workers;
    let start = Start {
        driver: driver.clone(),
        opened: Arc::new(Barrier::new(n + 1)),
        go: Arc::new(Barrier::new(n + 1)),
        setup_error: Arc::new(Mutex::new(None)),
        clock: Arc::new(OnceLock::new()),
        shared: shared.clone(),
        stop: stop.clone(),
        abort: Arc::new(AtomicBool::new(false)),
        live: live.clone(),
        buffer: buffer.clone(),
        trace: trace.clone(),
    };
    let pace = Pacing {
        depth: plan.iodepth as usize,
        deadline: plan.runtime_ns.unwrap_or(u64::MAX),
        record: plan.rate.limited(),
        cache_always: plan.cache == CacheMode::Always,
        poisson: plan.rate.arrival == Arrival::Poisson,
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (handles, failed) = start_workers(plan, &start, pace, done_tx)?;
    if failed.is_none() {
        obs.started();
    }
    let clock = MonoClock::new();
    // Right after the clock's zero: workers stamp live-stats updates as
    // this plus their own clock's reading.
    live.set_running(monotonic_ns());
    let mut sampler = Sampler {
        clock,
        live: &live,
        shared: &shared,
        steal: dmalab_core::host::StealMeter::start(),
        samples: Vec::new(),
        last: (0, 0, 0),
        last_t: 0,
    };
    let _ = start.clock.set(clock);
    start.go.wait();
    if failed.is_none() {
        sampler.every_second_until_done(n, &done_rx, obs);
    }
    let mut outs = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Some(o)) => outs.push(o),
            Ok(None) => {}
            Err(_) => return Err(RunError::Panicked),
        }
    }
    live.set_finished();
    if failed.is_none() {
        obs.finished();
    }
    if let Some(e) = failed {
        return Err(e);
    }
    // The workers' handles on the trace writer are gone with their
    // threads; this one goes now, so the writer can be finished.
    drop(start);
    let trace_summary = finish_trace(trace, plan)?;
    let runtime_ns = outs.iter().map(|o| o.last_ns).max().unwrap_or(0).max(1);
    sampler.last_sliver(runtime_ns, obs);
    let samples = sampler.samples;

    let bs = plan.stream.bs_bytes;
    let merged = Merged::of(outs, bs, runtime_ns);
    let totals = merged.totals;
    let interrupted = stop.load(Ordering::Relaxed);
    let rate_changes = shared
        .lock()
        .map(|s| s.limiter.changes().to_vec())
        .unwrap_or_default();
    let rate_check = pace.record.then(|| {
        // Windows run to the planned end, or to the last completion when
        // stopped early or by --commands/--blocks.
        let planned_end = plan.runtime_ns.filter(|_| !interrupted);
        check_run_rates(
            plan,
            &rate_changes,
            &merged,
            &samples,
            planned_end,
            runtime_ns,
        )
    });
    // Counted per command by the workers: exact for each direction, also
    // when `both` alternates them.
    let (rd, wr) = (totals.storage_read_bytes, totals.storage_write_bytes);
    Ok(LoadResult {
        runtime_ns,
        engine: merged
            .workers
            .first()
            .map_or_else(|| plan.engine.as_str().to_string(), |w| w.engine.clone()),
        traffic: driver.traffic(),
        interrupted,
        totals,
        rates: Rates::of(&totals, bs, runtime_ns),
        storage_read_bytes: rd,
        storage_write_bytes: wr,
        lat_ns: merged.hist.summary(),
        cpu: cpu_result(&merged.cpu, &totals, runtime_ns),
        workers: merged.workers,
        samples,
        rate_check,
        rate_changes,
        first_error: merged.first_error,
        reserved_huge_pages: buffer.reserved_huge_pages,
        buffer_locked_bytes: buffer.locked_bytes,
        buffer_placement: buffer.placement.clone(),
        trace: trace_summary,
        pacing_lateness_ns: pace.record.then(|| merged.late_hist.summary()),
        buffer_sha256: plan.buffer_checksum.then(|| buffer_sha256(&buffer)),
        engine_facts: driver
            .facts()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    })
}

/// Starts every worker (each with a sender of `done`) and waits until
/// each has set itself up. With a set-up error (the first one is
/// returned), the workers whose engine did open are told to abort before
/// they start.
#[allow(clippy::type_complexity)]
fn start_workers(
    plan: &Plan,
    start: &Start,
    pace: Pacing,
    done: std::sync::mpsc::Sender<()>,
) -> Result<
    (
        Vec<std::thread::JoinHandle<Option<WorkerOut>>>,
        Option<RunError>,
    ),
    RunError,
> {
    let mut handles = Vec::new();
    for i in 0..plan.workers {
        handles.push(spawn_worker(
            i,
            plan,
            start,
            pace,
            DoneSignal(done.clone()),
        )?);
    }
    // Only the workers hold senders now.
    drop(done);
    start.opened.wait();
    let failed = start.setup_error.lock().ok().and_then(|mut s| s.take());
    if failed.is_some() {
        // Workers whose engine did open must not start.
        start.abort.store(true, Ordering::Relaxed);
    }
    Ok((handles, failed))
}

/// The rate check of a paced run: the completions against the limits in
/// force (`changes` after the plan's own), windows of about a second each
/// with the steal time its sample saw.
fn check_run_rates(
    plan: &Plan,
    changes: &[RateChange],
    merged: &Merged,
    samples: &[Sample],
    planned_end: Option<u64>,
    runtime_ns: u64,
) -> RateCheck {
    // Sample k covers about [k, k+1) s, as the checker's window k does.
    let steal_ns: Vec<u64> = samples.iter().map(|s| s.steal_ns).collect();
    rate_check(
        &plan.rate,
        changes,
        &merged.completions,
        &merged.held_ns,
        &steal_ns,
        planned_end,
        runtime_ns,
    )
}

/// `--live-stats`: the page the workers add to (a no-op writer without
/// the flag).
fn create_live_stats(plan: &Plan) -> Result<LiveStats, RunError> {
    LiveStats::create(plan.live_stats.as_deref()).map_err(|cause| RunError::LiveStats {
        path: plan
            .live_stats
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display()
            .to_string(),
        cause,
    })
}

/// `--trace`: the writer every worker records its transfers into.
fn create_trace(plan: &Plan) -> Result<Option<Arc<TraceWriter>>, RunError> {
    let Some(p) = &plan.trace else {
        return Ok(None);
    };
    let w = TraceWriter::create(p).map_err(|cause| RunError::Trace {
        what: "create",
        path: p.display().to_string(),
        cause,
    })?;
    Ok(Some(Arc::new(w)))
}

/// The limiter of the plan's rates, changed while running through
/// `--rate-control` when given.
fn create_limiter(plan: &Plan) -> Result<Limiter, RunError> {
    let limiter = Limiter::new(plan.rate.clone());
    let Some(p) = &plan.rate_control else {
        return Ok(limiter);
    };
    let initial = dmalab_core::ratecontrol::Limits {
        rate_bytes_per_s: plan.rate.rate_bytes_per_s,
        rate_iops: plan.rate.rate_iops,
    };
    let ctl =
        dmalab_core::ratecontrol::RateControl::create(p, initial).map_err(RunError::RateControl)?;
    Ok(limiter.with_control(Arc::new(ctl)))
}

/// What every worker thread shares with the run: the driver that opens
/// its engine, the two barriers (every engine opened; go), the first
/// set-up error, the run's clock, and what the workers share while they
/// run.
#[derive(Clone)]
struct Start {
    driver: Arc<dyn Driver>,
    opened: Arc<Barrier>,
    go: Arc<Barrier>,
    setup_error: Arc<Mutex<Option<RunError>>>,
    clock: Arc<OnceLock<MonoClock>>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    abort: Arc<AtomicBool>,
    live: Arc<LiveStats>,
    buffer: Arc<DmaBuffer>,
    trace: Option<Arc<TraceWriter>>,
}

/// Starts worker `i`'s thread: it sets itself up ([`set_up_worker`]),
/// waits for every other worker at the barriers, then runs
/// [`worker_loop`] on the run's clock (None when any set-up failed).
fn spawn_worker(
    i: usize,
    plan: &Plan,
    start: &Start,
    pace: Pacing,
    done: DoneSignal,
) -> Result<std::thread::JoinHandle<Option<WorkerOut>>, RunError> {
    let cpus = plan.worker_cpus(i);
    let buffer = &start.buffer;
    let spec = EngineSpec {
        target: plan.target.clone().unwrap_or_default(),
        pieces: buffer.pieces(),
        iodepth: plan.iodepth,
        bs: plan.stream.bs_bytes as u32,
        writes: plan.writes_storage(),
        worker: i,
        cpus: cpus.clone(),
        buffer_locked: buffer.locked_bytes == buffer.len()
            && buffer.placement.io_uring_registrable(),
    };
    let realtime = plan.realtime_priority;
    let start = start.clone();
    std::thread::Builder::new()
        .name(format!("dmalab-load-{i}"))
        .spawn(move || -> Option<WorkerOut> {
            let _done = done;
            let eng = match set_up_worker(i, &cpus, realtime, start.driver.as_ref(), &spec) {
                Ok(e) => Some(e),
                Err(e) => {
                    if let Ok(mut slot) = start.setup_error.lock() {
                        slot.get_or_insert(e);
                    }
                    None
                }
            };
            start.opened.wait();
            start.go.wait();
            let mut eng = eng?;
            let clock = *start.clock.get()?;
            let io = Sharing {
                shared: &start.shared,
                stop: &start.stop,
                abort: &start.abort,
                live: &start.live,
                buffer: &start.buffer,
                trace: start
                    .trace
                    .as_deref()
                    .map(|w| (w, start.driver.kind().trace_device())),
            };
            Some(worker_loop(i, &cpus, eng.as_mut(), &clock, &io, &pace))
        })
        .map_err(RunError::Thread)
}

/// On worker `i`'s own thread: pins it to `cpus`, switches it to
/// SCHED_FIFO at `realtime` when asked, and opens its engine.
fn set_up_worker(
    i: usize,
    cpus: &[usize],
    realtime: Option<i32>,
    driver: &dyn Driver,
    spec: &EngineSpec,
) -> Result<Box<dyn engine::Engine>, RunError> {
    if !cpus.is_empty() {
        dmalab_core::cpus::pin_current_thread(cpus).map_err(|cause| RunError::Pin {
            worker: i,
            cpus: cpus.to_vec(),
            cause,
        })?;
    }
    if let Some(prio) = realtime {
        let param = libc::sched_param {
            sched_priority: prio,
        };
        // SAFETY: plain struct by pointer; 0 = the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            return Err(RunError::Realtime {
                worker: i,
                priority: prio,
                cause: std::io::Error::last_os_error(),
            });
        }
    }
    // SAFETY: prctl with an integer argument; precise sleeps for pacing.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    driver
        .open(spec)
        .map_err(|source| RunError::Engine { worker: i, source })
}

/// The per-second samples of a run, taken on the run's clock while the
/// workers run.
struct Sampler<'a> {
    clock: MonoClock,
    live: &'a LiveStats,
    shared: &'a Mutex<Shared>,
    steal: dmalab_core::host::StealMeter,
    samples: Vec<Sample>,
    /// The live totals at the last sample, and its time.
    last: (u64, u64, u64),
    last_t: u64,
}

impl Sampler<'_> {
    /// Takes a sample each second until all `workers` have ended (their
    /// signals on `done`).
    fn every_second_until_done(
        &mut self,
        workers: usize,
        done: &std::sync::mpsc::Receiver<()>,
        obs: &mut dyn Observer,
    ) {
        let mut next = 1_000_000_000u64;
        let mut running = workers;
        while running > 0 {
            let now = self.clock.now_ns();
            if now >= next {
                // Stamp the sample when the counters were read (a loaded
                // machine may wake us late), not at the nominal second.
                let cur = self.live.totals();
                let t = self.clock.now_ns();
                self.take(cur, t, obs, true);
                next += 1_000_000_000;
                continue;
            }
            // Asleep until the next sample or a worker's end: a loop of
            // short naps woke this thread 100 times a second, on the
            // workers' CPUs when they share them.
            match done.recv_timeout(Duration::from_nanos(next - now)) {
                Ok(()) => running -= 1,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                // Every worker's signal is gone: all have ended.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => running = 0,
            }
        }
    }

    /// The sample of what moved after the last whole second, up to the
    /// last completion at `runtime_ns`.
    fn last_sliver(&mut self, runtime_ns: u64, obs: &mut dyn Observer) {
        let cur = self.live.totals();
        if cur != self.last && runtime_ns > self.last_t {
            let interval_ns = runtime_ns - self.last_t;
            // A sliver of a second after the last whole one gives a
            // meaningless per-second rate on stderr; the JSON keeps it
            // (samples sum to the totals).
            self.take(cur, runtime_ns, obs, interval_ns as f64 / 1e9 >= 0.1);
        }
    }

    fn take(&mut self, cur: (u64, u64, u64), t: u64, obs: &mut dyn Observer, shown: bool) {
        let mut s = sample(cur, self.last, t, t - self.last_t, self.steal.take());
        set_target(&mut s, self.shared);
        obs.sample(&s, shown);
        self.samples.push(s);
        self.last = cur;
        self.last_t = t;
    }
}

/// `--trace`: the writer finished once every worker has let it go.
fn finish_trace(
    trace: Option<Arc<TraceWriter>>,
    plan: &Plan,
) -> Result<Option<TraceResult>, RunError> {
    let (Some(w), Some(p)) = (trace, &plan.trace) else {
        return Ok(None);
    };
    let w = Arc::into_inner(w).ok_or(RunError::TraceShared)?;
    let sum = w.finish().map_err(|cause| RunError::Trace {
        what: "write",
        path: p.display().to_string(),
        cause,
    })?;
    Ok(Some(TraceResult {
        path: p.display().to_string(),
        transfers: sum.transfers,
        records: sum.records,
        reordered: sum.reordered,
    }))
}

/// The workers' results merged.
struct Merged {
    totals: Totals,
    hist: LatHist,
    late_hist: LatHist,
    cpu: CpuUsage,
    completions: Vec<(u64, u64)>,
    /// Per window, the longest any worker's due commands were held.
    held_ns: Vec<u64>,
    workers: Vec<crate::result::WorkerResult>,
    first_error: Option<String>,
}

impl Merged {
    fn of(outs: Vec<WorkerOut>, bs: u64, runtime_ns: u64) -> Self {
        let mut m = Merged {
            totals: Totals::default(),
            hist: LatHist::new(),
            late_hist: LatHist::new(),
            cpu: CpuUsage::default(),
            completions: Vec::new(),
            held_ns: Vec::new(),
            workers: Vec::new(),
            first_error: None,
        };
        for mut o in outs {
            m.totals.merge(&o.result.totals);
            m.hist.merge(&o.hist);
            m.late_hist.merge(&o.late_hist);
            m.cpu.usr_ns += o.result.cpu.usr_ns;
            m.cpu.sys_ns += o.result.cpu.sys_ns;
            m.completions.append(&mut o.completions);
            // Workers' holds overlap in time, so a sum could exceed the
            // window: the longest of any worker's is a lower bound of the
            // time some due command waited, and never credits the device
            // with more than that.
            if m.held_ns.len() < o.held_ns.len() {
                m.held_ns.resize(o.held_ns.len(), 0);
            }
            for (a, &b) in m.held_ns.iter_mut().zip(&o.held_ns) {
                *a = (*a).max(b);
            }
            o.result.rates = Rates::of(&o.result.totals, bs, runtime_ns);
            if m.first_error.is_none() {
                m.first_error = o.first_error.take();
            }
            m.workers.push(o.result);
        }
        m
    }
}

/// The CPU time the workers took, per command, per GiB and as a share of
/// the run.
fn cpu_result(cpu: &CpuUsage, totals: &Totals, runtime_ns: u64) -> CpuResult {
    let cpu_total = (cpu.usr_ns + cpu.sys_ns) as f64;
    CpuResult {
        usr_ns: cpu.usr_ns,
        sys_ns: cpu.sys_ns,
        cpu_ns_per_command: if totals.commands > 0 {
            cpu_total / totals.commands as f64
        } else {
            0.0
        },
        cpu_pct: 100.0 * cpu_total / runtime_ns as f64,
        cpu_s_per_gib: (totals.data_bytes > 0)
            .then(|| cpu_total / 1e9 / (totals.data_bytes as f64 / (1u64 << 30) as f64)),
    }
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
