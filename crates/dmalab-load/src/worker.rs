//! One worker: queues due commands into free slots of its engine, reaps
//! completions, accounts them, and keeps the pace the limiter sets.

use crate::buffer::DmaBuffer;
use crate::engine::{self, Command, Completion, Op};
use crate::limiter::Clock;
use crate::result::{Rates, Totals, WorkerResult};
use crate::run::Shared;
use dmalab_core::hist::LatHist;
use dmalab_core::livestats::Writer as LiveStats;
use dmalab_core::schema::CpuUsage;
use dmalab_trace::{Device, DmaDir, TraceWriter};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub(crate) struct WorkerOut {
    pub(crate) result: WorkerResult,
    pub(crate) hist: LatHist,
    pub(crate) late_hist: LatHist,
    pub(crate) completions: Vec<(u64, u64)>,
    /// Per 1-second window, ns in which a due command waited for a slot.
    pub(crate) held_ns: Vec<u64>,
    pub(crate) first_error: Option<String>,
    pub(crate) last_ns: u64,
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
pub(crate) const POISSON_SPIN_NS: u64 = 100_000;

/// Sleeps until `spin_ns` before `until`, then spins to it.
fn precise_wait_until(clock: &impl Clock, until: u64, spin_ns: u64) {
    let now = clock.now_ns();
    if until > now + spin_ns {
        clock.sleep_until(until - spin_ns);
    }
    while clock.now_ns() < until {
        std::hint::spin_loop();
    }
}

/// Longest a worker keeps completions off the live-stats page, ns.
const LIVE_PERIOD_NS: u64 = 1_000_000;

/// Completions counted and not yet added to the live-stats page. At
/// `--iodepth 1` every reap is one command, and adding each to the page
/// cost three atomic adds and a store per command (fio updates its shared
/// counters from its helper thread instead); once a millisecond keeps the
/// per-second samples within 0.1% of a second. The worker adds what it
/// holds before it sleeps for a due time and when it ends, so a paced or
/// finished run leaves nothing off the page.
#[derive(Debug, Default)]
struct LiveBatch {
    bytes: u64,
    commands: u64,
    blocks: u64,
    /// Something is held (an update may carry only its time).
    held: bool,
    /// The reading that stamped the last completions held.
    t: u64,
    /// The page gets the next update at or after this reading.
    next_ns: u64,
}

impl LiveBatch {
    /// Holds a reap's counts, stamped `t`; true when the page is due.
    fn hold(&mut self, bytes: u64, commands: u64, blocks: u64, t: u64) -> bool {
        self.bytes += bytes;
        self.commands += commands;
        self.blocks += blocks;
        self.held = true;
        self.t = t;
        t >= self.next_ns
    }

    /// Adds what is held to the page.
    fn publish(&mut self, live: &LiveStats) {
        if !self.held {
            return;
        }
        live.add(self.bytes, self.commands, self.blocks, self.t);
        *self = Self {
            next_ns: self.t.saturating_add(LIVE_PERIOD_NS),
            ..Self::default()
        };
    }
}

/// Most completion timestamps kept for the rate checker.
const MAX_RECORDED: usize = 20_000_000;
/// Longest a worker waits before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(20);

/// How a worker paces and records its commands: the same for every worker
/// of a run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pacing {
    /// Slots: commands in flight at most (`--iodepth`).
    pub(crate) depth: usize,
    /// No command is submitted at or after this clock reading, ns.
    pub(crate) deadline: u64,
    /// Record completions, pacing lateness and held time (a rate limit is
    /// set, so the rate check needs them).
    pub(crate) record: bool,
    /// The CPU reads each command's buffer region before submitting it
    /// (`--cache always`).
    pub(crate) cache_always: bool,
    /// Arrivals are Poisson: the last stretch before a due time is spun
    /// ([`POISSON_SPIN_NS`]).
    pub(crate) poisson: bool,
}

/// What a worker shares with the run and the other workers.
#[derive(Clone, Copy)]
pub(crate) struct Sharing<'a> {
    /// The pattern stream, limiter and stop counts.
    pub(crate) shared: &'a Mutex<Shared>,
    /// Set by a signal: stop submitting, drain what is in flight.
    pub(crate) stop: &'a AtomicBool,
    /// Set by a worker that failed: every worker drains and stops.
    pub(crate) abort: &'a AtomicBool,
    /// The live-stats page the workers add to.
    pub(crate) live: &'a LiveStats,
    /// The shared DMA buffer.
    pub(crate) buffer: &'a DmaBuffer,
    /// `--trace`: every transfer is recorded here, tagged with the
    /// engine's device.
    pub(crate) trace: Option<(&'a TraceWriter, Device)>,
}

/// One worker's state between passes of its loop: its slots, the command
/// fetched and not yet due, what it has counted.
struct WorkerState {
    index: usize,
    free: Vec<u32>,
    /// Per slot: the command's length, blocks and operation.
    slot_cmd: Vec<(u32, u32, Op)>,
    /// Per slot: when the command was queued.
    slot_t0: Vec<u64>,
    /// Per slot: the command's address in memory (for the trace).
    slot_addr: Vec<u64>,
    base: u64,
    inflight: usize,
    pending: Option<(Command, u64)>,
    draining: bool,
    totals: Totals,
    hist: LatHist,
    late_hist: LatHist,
    recorded: Vec<(u64, u64)>,
    // When every slot is busy, a command that falls due waits for the
    // device: `full_since` is when the last free slot was taken, `freed`
    // the span the queue stayed full once a completion ends it. The first
    // command fetched after that span waited from max(its due time, the
    // span's start) to the span's end.
    held_ns: Vec<u64>,
    full_since: Option<u64>,
    freed: Option<(u64, u64)>,
    first_error: Option<String>,
    last_ns: u64,
    /// Completions not yet on the live-stats page.
    live: LiveBatch,
}

impl WorkerState {
    fn new(index: usize, depth: usize, buffer: &DmaBuffer) -> Self {
        Self {
            index,
            free: (0..depth as u32).rev().collect(),
            slot_cmd: vec![(0u32, 0u32, Op::Noop); depth],
            slot_t0: vec![0u64; depth],
            slot_addr: vec![0u64; depth],
            base: buffer.as_ptr() as u64,
            inflight: 0,
            pending: None,
            draining: false,
            totals: Totals::default(),
            hist: LatHist::new(),
            late_hist: LatHist::new(),
            recorded: Vec::new(),
            held_ns: Vec::new(),
            full_since: None,
            freed: None,
            first_error: None,
            last_ns: 0,
            live: LiveBatch::default(),
        }
    }

    /// A failure that ends this worker and makes every other one drain.
    fn fail(&mut self, abort: &AtomicBool, what: impl FnOnce() -> String) {
        self.first_error.get_or_insert_with(what);
        abort.store(true, Ordering::Relaxed);
    }

    /// Queues every command that is due by `now` into a free slot; fetches
    /// the next command when none is pending (and drains when the stream
    /// has no more).
    fn queue_due<C: Clock>(
        &mut self,
        now: u64,
        eng: &mut dyn engine::Engine,
        clock: &C,
        io: &Sharing<'_>,
        pace: &Pacing,
    ) {
        // When this pass's commands were queued (see below).
        let mut queued_at: Option<u64> = None;
        while let Some(&slot) = self.free.last() {
            if self.pending.is_none() {
                self.pending = io.shared.lock().ok().and_then(|mut s| s.next(now));
                if self.pending.is_none() {
                    self.draining = true;
                    break;
                }
                if let (Some((_, due)), Some((from, to))) = (self.pending, self.freed.take()) {
                    if pace.record && due < to {
                        add_span(&mut self.held_ns, due.max(from), to);
                    }
                }
            }
            let Some((cmd, due)) = self.pending else {
                break;
            };
            if due > now {
                break;
            }
            if pace.cache_always && cmd.len > 0 {
                io.buffer.touch(cmd.buf_offset, u64::from(cmd.len));
            }
            if let Err(e) = eng.queue(&cmd, slot) {
                let index = self.index;
                self.fail(io.abort, || format!("worker {index}: {e}"));
                self.draining = true;
                break;
            }
            self.free.pop();
            // One clock reading for the batch, taken after its first
            // command was queued: an engine hands the batch to the device
            // together (at the reap), so a reading per command (there were
            // two) measured nothing more, and where the clocksource has no
            // vDSO reading each one is a system call.
            let t0 = *queued_at.get_or_insert_with(|| clock.now_ns());
            if pace.record {
                self.late_hist.record(t0.saturating_sub(due));
            }
            let s = slot as usize;
            self.slot_cmd[s] = (cmd.len, cmd.blocks, cmd.op);
            self.slot_t0[s] = t0;
            if self.free.is_empty() {
                self.full_since = Some(self.slot_t0[s]);
            }
            self.slot_addr[s] = self.base + cmd.buf_offset;
            self.inflight += 1;
            self.pending = None;
        }
    }

    /// How to wait in the engine with commands in flight: the completions
    /// to wait for, for how long, and the due time to spin to after a
    /// non-blocking submit.
    fn wait_for(
        &self,
        now: u64,
        pace: &Pacing,
        spin_ns: u64,
    ) -> (usize, Option<Duration>, Option<u64>) {
        match self.pending {
            Some((_, due)) if !self.draining && !self.free.is_empty() => {
                let until = due.min(pace.deadline);
                if until > now + spin_ns {
                    // Sleep in the ring until shortly before the due time
                    // (or a completion); the last stretch is spun after.
                    let wait = Duration::from_nanos(until - now - spin_ns).min(POLL);
                    (1, Some(wait), None)
                } else {
                    // Submit what is queued first, then spin to the due time.
                    (0, None, Some(until))
                }
            }
            // Nothing can be queued before a completion frees a slot (and
            // a stop or the deadline only drains what is in flight): wait
            // for one without arming a timer on every wait.
            _ => (1, None, None),
        }
    }

    /// Accounts the completions `comps` reaped at `t`: frees their slots,
    /// counts errors and short transfers (which abort the run), records
    /// latencies, the trace and the rate check's completions, and holds
    /// the pass's totals for the live-stats page ([`LiveBatch`]).
    fn completed(&mut self, comps: &[Completion], t: u64, io: &Sharing<'_>, pace: &Pacing) {
        if let Some(from) = self.full_since.take() {
            self.freed = Some((from, t));
        }
        let before = self.totals;
        for c in comps {
            let s = c.slot as usize;
            let Some(&(len, blocks, op)) = self.slot_cmd.get(s) else {
                continue;
            };
            self.free.push(c.slot);
            self.inflight -= 1;
            let expected = if matches!(op, Op::Read | Op::Write) {
                len as i32
            } else {
                c.result.max(0)
            };
            if c.result < 0 || c.result != expected {
                self.totals.errors += 1;
                let index = self.index;
                self.fail(io.abort, || {
                    let what = if c.result < 0 {
                        std::io::Error::from_raw_os_error(-c.result).to_string()
                    } else {
                        format!("short transfer: {} of {len} bytes", c.result)
                    };
                    format!("worker {index}: {op:?} of {len} bytes failed: {what}")
                });
                continue;
            }
            self.hist.record(t.saturating_sub(self.slot_t0[s]));
            if let (Some((w, device)), Op::Read | Op::Write) = (io.trace, op) {
                let dir = if op == Op::Read {
                    DmaDir::ToMemory
                } else {
                    DmaDir::FromMemory
                };
                // A failed write is remembered by the writer; finish reports it.
                let _ = w.write_dma_transfer(
                    self.slot_addr[s],
                    u64::from(len),
                    dir,
                    device,
                    self.slot_t0[s],
                    t,
                );
            }
            self.totals.add(op, u64::from(blocks), u64::from(len));
            if pace.record && self.recorded.len() < MAX_RECORDED {
                self.recorded.push((t, u64::from(len)));
            }
        }
        if self.live.hold(
            self.totals.data_bytes - before.data_bytes,
            self.totals.commands - before.commands,
            self.totals.blocks - before.blocks,
            t,
        ) {
            self.live.publish(io.live);
        }
    }

    /// The worker's part of the result.
    fn finish(self, cpus: &[usize], engine: &str, cpu: CpuUsage) -> WorkerOut {
        WorkerOut {
            result: WorkerResult {
                index: self.index,
                engine: engine.to_string(),
                cpus: cpus.to_vec(),
                totals: self.totals,
                rates: Rates::default(),
                cpu,
                lat_ns: self.hist.summary(),
            },
            hist: self.hist,
            late_hist: self.late_hist,
            completions: self.recorded,
            held_ns: self.held_ns,
            first_error: self.first_error,
            last_ns: self.last_ns,
        }
    }
}

/// Worker `index`'s loop on its engine: queue what is due, wait in the
/// engine for completions or the next due time, account what completed;
/// until the stream ends, the deadline passes, or a stop or abort, and
/// then until nothing is in flight.
pub(crate) fn worker_loop<C: Clock>(
    index: usize,
    cpus: &[usize],
    eng: &mut dyn engine::Engine,
    clock: &C,
    io: &Sharing<'_>,
    pace: &Pacing,
) -> WorkerOut {
    let cpu0 = CpuUsage::thread();
    let spin_ns = if pace.poisson { POISSON_SPIN_NS } else { 0 };
    let mut st = WorkerState::new(index, pace.depth, io.buffer);
    let mut comps: Vec<Completion> = Vec::with_capacity(pace.depth);
    // The clock read that stamped the last completions, taken again as the
    // next pass's `now`: nothing but bookkeeping ran in between, and a
    // second read would cost every command one more clock read (at
    // --iodepth 1, a third of the worker's clock reads).
    let mut now_hint: Option<u64> = None;
    loop {
        let now = now_hint.take().unwrap_or_else(|| clock.now_ns());
        if !st.draining
            && (io.stop.load(Ordering::Relaxed)
                || io.abort.load(Ordering::Relaxed)
                || now >= pace.deadline)
        {
            st.draining = true;
        }
        if !st.draining {
            st.queue_due(now, eng, clock, io, pace);
        }
        if st.inflight == 0 {
            if st.draining {
                break;
            }
            if let Some((_, due)) = st.pending {
                let until = due.min(pace.deadline).min(now + POLL.as_nanos() as u64);
                st.live.publish(io.live);
                precise_wait_until(clock, until, spin_ns);
            }
            continue;
        }
        let (min, timeout, spin_to) = st.wait_for(now, pace, spin_ns);
        if timeout.is_some() || spin_to.is_some() {
            // Paced: the worker may be idle until the due time.
            st.live.publish(io.live);
        }
        comps.clear();
        if let Err(e) = eng.submit_and_reap(min, timeout, &mut comps) {
            st.fail(io.abort, || format!("worker {index}: {e}"));
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
        st.last_ns = t;
        now_hint = Some(t);
        st.completed(&comps, t, io, pace);
    }
    st.live.publish(io.live);
    let cpu = CpuUsage::thread().since(&cpu0);
    st.finish(cpus, eng.name(), cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{Fill, HugePages};
    use crate::engine::Engine;
    use crate::limiter::{Arrival, Limiter, MonoClock, RateSpec};
    use crate::pattern::{DeviceOffsets, Pattern, PatternStream, StreamConfig};
    use std::sync::Arc;
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
            alternate: false,
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
        let buffer = DmaBuffer::new(
            1 << 20,
            1 << 20,
            HugePages::None,
            Fill::Zero,
            &Default::default(),
        )
        .unwrap();
        let out = worker_loop(
            0,
            &[],
            &mut eng,
            &clock,
            &Sharing {
                shared: &shared,
                stop: &AtomicBool::new(false),
                abort: &AtomicBool::new(false),
                live: &live,
                buffer: &buffer,
                trace: None,
            },
            &Pacing {
                depth,
                deadline: u64::MAX,
                record: true,
                cache_always: false,
                poisson: false,
            },
        );
        let q = queued.lock().unwrap().clone();
        (out, q)
    }

    /// The real clock, counting its reads.
    struct CountingClock {
        inner: MonoClock,
        reads: std::sync::atomic::AtomicU64,
    }

    impl Clock for CountingClock {
        fn now_ns(&self) -> u64 {
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.inner.now_ns()
        }
        fn sleep_until(&self, ns: u64) {
            self.inner.sleep_until(ns)
        }
    }

    /// Completes every queued command at the next reap.
    struct InstantEngine(Vec<Completion>);

    impl Engine for InstantEngine {
        fn name(&self) -> &'static str {
            "instant"
        }
        fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), engine::EngineError> {
            self.0.push(Completion {
                slot,
                result: cmd.len as i32,
            });
            Ok(())
        }
        fn submit_and_reap(
            &mut self,
            _min: usize,
            _timeout: Option<Duration>,
            out: &mut Vec<Completion>,
        ) -> Result<(), engine::EngineError> {
            out.append(&mut self.0);
            Ok(())
        }
    }

    /// Runs `n` unpaced random 4 KiB reads into a buffer of `buffer_bytes`
    /// at `depth` against a device that completes everything at once, with
    /// latency recording on if `record`: the worker's output, the live
    /// stats' command count, and the clock readings taken.
    fn run_instant(n: u64, depth: usize, buffer_bytes: u64, record: bool) -> (WorkerOut, u64, u64) {
        let cfg = StreamConfig {
            pattern: Pattern::Random,
            write_storage: false,
            alternate: false,
            bs_bytes: 4096,
            max_blocks: 1,
            buffer_bytes,
            piece_bytes: buffer_bytes,
            region_bytes: 1 << 30,
            device_offsets: DeviceOffsets::Random,
            seed: 1,
        };
        let shared = Mutex::new(Shared {
            stream: PatternStream::new(cfg).unwrap(),
            limiter: Limiter::new(RateSpec {
                rate_bytes_per_s: None,
                rate_iops: None,
                timeslot_ns: 100_000_000,
                arrival: Arrival::Uniform,
                burst: false,
                seed: 1,
            }),
            commands_left: n,
            blocks_left: u64::MAX,
            data: true,
        });
        let clock = CountingClock {
            inner: MonoClock::new(),
            reads: Default::default(),
        };
        let live = LiveStats::create(None).unwrap();
        live.set_running(1);
        let buffer = DmaBuffer::new(
            buffer_bytes,
            buffer_bytes,
            HugePages::None,
            Fill::Zero,
            &Default::default(),
        )
        .unwrap();
        let out = worker_loop(
            0,
            &[],
            &mut InstantEngine(Vec::new()),
            &clock,
            &Sharing {
                shared: &shared,
                stop: &AtomicBool::new(false),
                abort: &AtomicBool::new(false),
                live: &live,
                buffer: &buffer,
                trace: None,
            },
            &Pacing {
                depth,
                deadline: u64::MAX,
                record,
                cache_always: false,
                poisson: false,
            },
        );
        let reads = clock.reads.load(Ordering::Relaxed);
        (out, live.totals().1, reads)
    }

    #[test]
    fn an_unpaced_command_at_depth_one_costs_two_clock_reads() {
        // Issue 35: the 4 KiB iodepth-1 IOPS fell behind fio's with per-
        // command work added since. Per command the worker needs the time
        // it queued and the time it was reaped; the loop's own `now` is
        // the reap's reading, and live stats take it too (they used to
        // read the clock once more per batch).
        let n = 10_000u64;
        let (out, live_commands, reads) = run_instant(n, 1, 4096, false);
        assert_eq!(out.result.totals.commands, n);
        assert_eq!(live_commands, n);
        assert!(
            reads <= 2 * n + 2,
            "{reads} clock reads for {n} commands ({:.2} each)",
            reads as f64 / n as f64
        );
    }

    #[test]
    fn a_batch_of_queued_commands_costs_one_clock_read() {
        // Issue 32: on the RDMA guest (clocksource hpet, a system call per
        // reading) the worker read the clock twice per queued command
        // (lateness and queue time), though a batch reaches the device in
        // one submit. At depth 16 against a device that completes all at
        // once, a pass is one reading for the batch and one for the reap.
        let (n, depth) = (16_000u64, 16usize);
        let (out, _, reads) = run_instant(n, depth, 1 << 16, true);
        assert_eq!(out.result.totals.commands, n);
        assert_eq!(out.result.lat_ns.samples, n);
        let passes = n / depth as u64;
        assert!(
            reads <= 2 * passes + 4,
            "{reads} clock reads for {n} commands in batches of {depth} ({:.2} per command)",
            reads as f64 / n as f64
        );
    }

    /// Virtual time: it moves only when the worker sleeps or waits in the
    /// engine, so a paced run of seconds takes microseconds and no host
    /// load can disturb it.
    #[derive(Clone)]
    struct FakeClock(Arc<std::sync::atomic::AtomicU64>);

    impl Clock for FakeClock {
        fn now_ns(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
        fn sleep_until(&self, ns: u64) {
            self.0.fetch_max(ns, Ordering::SeqCst);
        }
    }

    /// A device on the fake clock: each command completes `lat_ns` after
    /// it was queued; waiting for a completion moves the clock to it (or
    /// to the end of the timeout).
    struct FakeDevice {
        clock: FakeClock,
        lat_ns: u64,
        inflight: std::collections::VecDeque<(u64, u32, i32)>,
    }

    impl Engine for FakeDevice {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), engine::EngineError> {
            let done = self.clock.now_ns() + self.lat_ns;
            self.inflight.push_back((done, slot, cmd.len as i32));
            Ok(())
        }
        fn submit_and_reap(
            &mut self,
            min: usize,
            timeout: Option<Duration>,
            out: &mut Vec<Completion>,
        ) -> Result<(), engine::EngineError> {
            let start = self.clock.now_ns();
            let limit = timeout.map(|t| start + t.as_nanos() as u64);
            let mut got = 0;
            loop {
                let now = self.clock.now_ns();
                while let Some(&(done, slot, result)) = self.inflight.front() {
                    if done > now {
                        break;
                    }
                    self.inflight.pop_front();
                    out.push(Completion { slot, result });
                    got += 1;
                }
                let Some(&(next, _, _)) = self.inflight.front() else {
                    return Ok(());
                };
                if got >= min {
                    return Ok(());
                }
                match limit {
                    Some(l) if next > l => {
                        self.clock.sleep_until(l);
                        return Ok(());
                    }
                    _ => self.clock.sleep_until(next),
                }
            }
        }
    }

    #[test]
    fn pacing_meets_the_rate_in_every_whole_second_at_10_50_and_90_pct() {
        // Issue 32 item 5 asks for at most 1% error per 1-s window at
        // 10/50/90% of the maximum. The limiter hands out each command's
        // due time from the bytes before it (no per-timeslot budget), so
        // on a clock nothing disturbs every whole second gets its share
        // to within one message: 64 KiB messages at shares of 80 MiB/s
        // (the soft-RoCE guest's maximum), each taking 0.7 ms on the
        // device, 16 in flight at most, 10 s.
        const MAX: u64 = 80 << 20;
        for pct in [10u64, 50, 90] {
            let rate = MAX * pct / 100;
            let cfg = StreamConfig {
                pattern: Pattern::Single,
                write_storage: false,
                alternate: false,
                bs_bytes: 65536,
                max_blocks: 1,
                buffer_bytes: 1 << 20,
                piece_bytes: 1 << 20,
                region_bytes: 16 << 20,
                device_offsets: DeviceOffsets::Sequential,
                seed: 1,
            };
            let shared = Mutex::new(Shared {
                stream: PatternStream::new(cfg).unwrap(),
                limiter: Limiter::new(RateSpec {
                    rate_bytes_per_s: Some(rate),
                    rate_iops: None,
                    timeslot_ns: 100_000_000,
                    arrival: Arrival::Uniform,
                    burst: false,
                    seed: 1,
                }),
                commands_left: u64::MAX,
                blocks_left: u64::MAX,
                data: true,
            });
            let clock = FakeClock(Arc::default());
            let mut dev = FakeDevice {
                clock: clock.clone(),
                lat_ns: 700_000,
                inflight: Default::default(),
            };
            let live = LiveStats::create(None).unwrap();
            let buffer = DmaBuffer::new(
                1 << 20,
                1 << 20,
                HugePages::None,
                Fill::Zero,
                &Default::default(),
            )
            .unwrap();
            let end = 10_000_000_000;
            let out = worker_loop(
                0,
                &[],
                &mut dev,
                &clock,
                &Sharing {
                    shared: &shared,
                    stop: &AtomicBool::new(false),
                    abort: &AtomicBool::new(false),
                    live: &live,
                    buffer: &buffer,
                    trace: None,
                },
                &Pacing {
                    depth: 16,
                    deadline: end,
                    record: true,
                    cache_always: false,
                    poisson: false,
                },
            );
            let rc = crate::check::check_rate(
                &out.completions,
                &out.held_ns,
                &[],
                true,
                rate as f64,
                end,
                false,
            );
            assert!(rc.windows_per_s.len() >= 5, "{pct}%: {rc:?}");
            let worst = rc.window_max_error_pct.unwrap();
            assert!(
                worst <= 1.0,
                "{pct}%: worst window {worst:.3}% off: {:?}",
                rc.windows_per_s
            );
            // Nothing waited for the device: the error is the pacer's own.
            assert!(out.held_ns.iter().all(|&h| h == 0), "{:?}", out.held_ns);
        }
    }

    #[test]
    fn live_stats_get_a_reap_at_most_once_a_millisecond() {
        let live = LiveStats::create(None).unwrap();
        live.set_running(0);
        let mut b = LiveBatch::default();
        // The first reap goes out at once.
        assert!(b.hold(4096, 1, 1, 10));
        b.publish(&live);
        assert_eq!(live.totals(), (4096, 1, 1));
        // Reaps within the next millisecond are held...
        assert!(!b.hold(4096, 1, 1, 500_000));
        assert!(!b.hold(8192, 2, 2, 1_000_009));
        assert_eq!(live.totals(), (4096, 1, 1));
        // ...until one at or after it, which carries them all.
        assert!(b.hold(4096, 1, 1, 1_000_010));
        b.publish(&live);
        assert_eq!(live.totals(), (5 * 4096, 5, 5));
        // What is held when the worker sleeps or ends goes out then.
        assert!(!b.hold(4096, 1, 1, 1_500_000));
        b.publish(&live);
        assert_eq!(live.totals(), (6 * 4096, 6, 6));
        // Nothing held: nothing to add.
        b.publish(&live);
        assert_eq!(live.totals(), (6 * 4096, 6, 6));
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
