//! The client side of RDMA load: what `dmalab load --engine rdma` drives.
//!
//! A [`Client`] opens the device, registers dmalab's shared DMA buffer once
//! (one memory region per registration piece) and, for `--target
//! loopback`, a second local buffer that stands for the peer's. Each load
//! worker then opens a [`Worker`]: its own completion queue and `--qps` RC
//! queue pairs, each connected by its own TCP handshake to a `dmalab rdma
//! serve` (or, in loopback, to a responder QP on the same device). The
//! worker queues one RDMA WRITE or READ per command, posts what it queued
//! as one list per QP when it reaps, and reaps completions; when it is
//! dropped it tells the server what it moved.
//!
//! Direction from memory's point of view: an RDMA WRITE makes this NIC read
//! this host's memory and the peer's NIC write the peer's memory; an RDMA
//! READ makes the peer's NIC read the peer's memory and this NIC write this
//! host's memory.

use crate::access::Secret;
use crate::buffer::RawBuffer;
use crate::counters::{self, Snapshot};
use crate::error::RdmaError;
use crate::handshake::{self, Done, Endpoint};
use crate::sys;
use crate::verbs::{
    gid_text, Access, CompletionQueue, Context, DeviceConfig, DeviceLimits, MemoryRegion, QpParams,
    QueuePair,
};
use dmalab_core::UsageError;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `--rdma-op`: which one-sided operations to issue (serialised as its
/// command-line text, `mixed:50`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaOp {
    /// RDMA WRITE only (this host's memory is read).
    Write,
    /// RDMA READ only (this host's memory is written).
    Read,
    /// Both: each command is a READ with probability `read_pct` percent.
    Mixed {
        /// Percent of commands that are READs (0-100).
        read_pct: u8,
    },
}

impl FromStr for RdmaOp {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        let bad = || {
            UsageError::new(
                "--rdma-op",
                format!(
                    "{:?} is not write, read, mixed or mixed:READ_PCT (0-100, e.g. mixed:50)",
                    s
                ),
            )
        };
        match s {
            "write" => Ok(RdmaOp::Write),
            "read" => Ok(RdmaOp::Read),
            "mixed" => Ok(RdmaOp::Mixed { read_pct: 50 }),
            _ => {
                let pct = s.strip_prefix("mixed:").ok_or_else(bad)?;
                match pct.parse::<u8>() {
                    Ok(p) if p <= 100 => Ok(RdmaOp::Mixed { read_pct: p }),
                    _ => Err(bad()),
                }
            }
        }
    }
}

impl Serialize for RdmaOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RdmaOp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e: UsageError| serde::de::Error::custom(e.message))
    }
}

impl std::fmt::Display for RdmaOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdmaOp::Write => write!(f, "write"),
            RdmaOp::Read => write!(f, "read"),
            RdmaOp::Mixed { read_pct } => write!(f, "mixed:{read_pct}"),
        }
    }
}

/// `--rdma-mix-order`: how `mixed:PCT` spreads its READs among the commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum MixOrder {
    /// Each command a READ with probability PCT (seeded per worker).
    #[default]
    Random,
    /// READs spread evenly and deterministically: command k of a worker is
    /// a READ when floor((k+1)*PCT/100) > floor(k*PCT/100), so every run of
    /// 100 consecutive commands holds exactly PCT READs (mixed:50
    /// alternates WRITE, READ, as the RDMA paper's tool does).
    Interleave,
}

impl MixOrder {
    /// Whether command `k` (0-based, per worker) of an interleaved
    /// `mixed:read_pct` is a READ.
    pub fn interleaved_read(k: u64, read_pct: u8) -> bool {
        let p = u64::from(read_pct.min(100));
        (k + 1) * p / 100 > k * p / 100
    }
}

/// `--target` of the rdma engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerTarget {
    /// Two QPs on the local device: the NIC moves data between two local buffers.
    Loopback,
    /// A `dmalab rdma serve` at HOST:PORT.
    Peer(String),
}

impl FromStr for PeerTarget {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        if s == "loopback" {
            return Ok(PeerTarget::Loopback);
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
                Ok(PeerTarget::Peer(s.to_string()))
            }
            _ => Err(UsageError::new(
                "--target",
                format!(
                    "{s:?} is not HOST:PORT of a `dmalab rdma serve` (e.g. 192.0.2.7:18515) or `loopback`"
                ),
            )),
        }
    }
}

/// Everything the client needs; [`ClientConfig::validate`] checks it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Device, port and GID.
    pub device: DeviceConfig,
    /// The peer.
    pub target: PeerTarget,
    /// Operations.
    pub op: RdmaOp,
    /// Queue pairs per worker.
    pub qps: u32,
    /// Work requests in flight per worker (spread over its QPs).
    pub iodepth: u32,
    /// `--iodepth` as given, before [`ClientConfig::cap_queue`] lowered
    /// `iodepth` to what the device's queues hold, or
    /// [`ClientConfig::cap_reads`] to what the QPs keep outstanding as READs.
    pub iodepth_asked: u32,
    /// The largest message, bytes (`--bs` x the most blocks of a command).
    pub max_msg_bytes: u32,
    /// The remote region commands address (`--rdma-remote-buffer`):
    /// loopback allocates it; a peer must serve at least this much.
    pub remote_buffer_bytes: u64,
    /// Post writes no longer than the QP's inline limit as inline data (the
    /// CPU copies them; the NIC does not read memory for them).
    pub inline: bool,
    /// Where the NIC counters live (normally `/sys/class/infiniband`).
    pub sysfs_root: PathBuf,
    /// The server's shared secret (`--rdma-secret-file`), when it asks.
    pub secret: Option<Secret>,
    /// `--signal-every N`: one work request in N asks for a completion
    /// (CQ moderation); the unsignalled ones before it are finished when it
    /// completes (an RC send queue completes in order). 1: every one. At
    /// most half a QP's share of `iodepth` once
    /// [`ClientConfig::cap_signal_every`] has run.
    pub signal_every: u32,
    /// `--signal-every` as given, before [`ClientConfig::cap_signal_every`]
    /// lowered `signal_every` to half a QP's queue.
    pub signal_every_asked: u32,
    /// `--mtu`: the path MTU to use, bytes (None: the port's active MTU).
    pub mtu_bytes: Option<u32>,
    /// `--rdma-mix-order` for `mixed:PCT`.
    pub mix_order: MixOrder,
}

/// Default remote region (`dmalab rdma serve`'s default buffer).
pub const DEFAULT_REMOTE_BUFFER: u64 = 64 << 20;

impl ClientConfig {
    /// Checks what can be checked without the device.
    pub fn validate(&self) -> Result<(), UsageError> {
        if self.qps == 0 || self.qps > 1024 {
            return Err(UsageError::new(
                "--qps",
                format!("{} is not 1..=1024 queue pairs per worker", self.qps),
            ));
        }
        if self.iodepth < self.qps {
            return Err(UsageError::new(
                "--iodepth",
                format!(
                    "{} work requests cannot keep {} queue pairs busy: use --iodepth of at least --qps",
                    self.iodepth, self.qps
                ),
            ));
        }
        if self.max_msg_bytes == 0 {
            return Err(UsageError::new(
                "--bs",
                "an RDMA message carries at least one byte",
            ));
        }
        if self.signal_every == 0 || self.signal_every > 1 << 16 {
            return Err(UsageError::new(
                "--signal-every",
                format!(
                    "{} is not 1..=65536 work requests per completion",
                    self.signal_every
                ),
            ));
        }
        if let Some(m) = self.mtu_bytes {
            if crate::verbs::mtu_code(m).is_none() {
                return Err(UsageError::new(
                    "--mtu",
                    format!("{m} is not an RDMA MTU: use 256, 512, 1024, 2048 or 4096"),
                ));
            }
        }
        let r = self.remote_buffer_bytes;
        if r < u64::from(self.max_msg_bytes) {
            return Err(UsageError::new(
                "--rdma-remote-buffer",
                format!(
                    "{r} bytes is smaller than one {}-byte message: use at least the message size",
                    self.max_msg_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// RDMA READs one QP keeps outstanding on `local` towards a responder that
/// serves `peer_dest` at once: the smaller of this device's
/// `max_qp_init_rd_atom` and the peer's `max_qp_rd_atom` (for loopback,
/// the same device's).
pub fn read_depth(local: &DeviceLimits, peer_dest: u8) -> u8 {
    local.initiator_depth().min(peer_dest.max(1))
}

impl ClientConfig {
    /// Lowers `iodepth` for `--rdma-op read` to the READs the worker's QPs
    /// can have outstanding (`rd_atomic` each): the device would queue the
    /// rest behind them in the send queue, so a deeper queue only adds
    /// waiting to every latency. Writes and mixed operations keep their
    /// depth (a WRITE has no such limit; a mix's READs queue in the
    /// device). Returns the note to print when it lowered it.
    pub fn cap_reads(&mut self, rd_atomic: u8) -> Option<String> {
        let most = u32::from(rd_atomic.max(1)).saturating_mul(self.qps);
        if self.op != RdmaOp::Read || self.iodepth <= most {
            return None;
        }
        let before = self.iodepth;
        self.iodepth = most;
        Some(format!(
            "--iodepth {before}: a queue pair keeps at most {rd_atomic} RDMA READs outstanding here \
             (the smaller of this device's max_qp_init_rd_atom and the responder's \
             max_qp_rd_atom), so {} queue pair(s) run with --iodepth {most}; writes keep any depth",
            self.qps
        ))
    }

    /// Lowers `iodepth` so that each QP's share of it, plus the one fence
    /// [`Worker`] may post behind it, fits the device's send queue
    /// (`max_qp_wr`): `ibv_create_qp` refuses a larger one. Returns the note
    /// to print when it lowered it, and a [`UsageError`] naming `device_flag`
    /// when the device cannot hold even one request and a fence per QP.
    pub fn cap_queue(
        &mut self,
        max_qp_wr: u32,
        device: &str,
    ) -> Result<Option<String>, UsageError> {
        let Some(most) = queue_depth(max_qp_wr) else {
            return Err(UsageError::new(
                self.device.device_flag,
                format!(
                    "{device} holds at most {max_qp_wr} work request(s) per queue (max_qp_wr), \
                     and a queue pair needs {} (a request and a fence): use another device",
                    FENCE_WRS + 1
                ),
            ));
        };
        if self.per_qp_depth() <= most {
            return Ok(None);
        }
        let before = self.iodepth;
        self.iodepth = most.saturating_mul(self.qps);
        Ok(Some(format!(
            "--iodepth {before}: a queue pair on {device} holds at most {max_qp_wr} work requests \
             (max_qp_wr), one of them kept for a fence, so {} queue pair(s) run with --iodepth {}",
            self.qps, self.iodepth
        )))
    }

    /// Entries a worker's completion queue holds: one per command in
    /// flight and one per QP for its fence.
    pub fn cq_entries(&self) -> u32 {
        self.iodepth.saturating_add(self.qps)
    }

    /// Lowers `iodepth` so that a worker's completion queue
    /// ([`ClientConfig::cq_entries`]) fits the device's `max_cqe`:
    /// `ibv_create_cq` refuses a larger one. Returns the note to print when
    /// it lowered it, and a [`UsageError`] naming `device_flag` when not
    /// even one command per QP fits. A device that reports no limit (0) is
    /// taken at its word.
    pub fn cap_cq(&mut self, max_cqe: u32, device: &str) -> Result<Option<String>, UsageError> {
        if max_cqe == 0 || self.cq_entries() <= max_cqe {
            return Ok(None);
        }
        let most = max_cqe.saturating_sub(self.qps);
        if most < self.qps {
            return Err(UsageError::new(
                self.device.device_flag,
                format!(
                    "{device}'s completion queues hold at most {max_cqe} entries (max_cqe), and \
                     {} queue pair(s) need {} (a command and a fence each): use fewer --qps",
                    self.qps,
                    2 * self.qps
                ),
            ));
        }
        let before = self.iodepth;
        self.iodepth = most;
        Ok(Some(format!(
            "--iodepth {before}: a completion queue on {device} holds at most {max_cqe} entries \
             (max_cqe), one per command in flight and one per queue pair for its fence, so {} \
             queue pair(s) run with --iodepth {most}",
            self.qps
        )))
    }
}

/// Work requests a QP holds beyond its share of `--iodepth`: the signalled
/// zero-length WRITE a worker posts behind unsignalled requests it waits
/// for (`Worker::fence`).
const FENCE_WRS: u32 = 1;

/// Commands one QP keeps in flight at most on a device whose queues hold
/// `max_qp_wr` work requests (room is kept for a fence); None when not
/// even one fits beside the fence.
pub fn queue_depth(max_qp_wr: u32) -> Option<u32> {
    Some(max_qp_wr.saturating_sub(FENCE_WRS)).filter(|&n| n > 0)
}

/// The signalling interval a QP holding `per_qp` work requests uses for
/// `--signal-every asked`: at most half its queue, at least 1.
///
/// A QP signals its Nth request and the one that fills its queue. With N
/// at or above the queue's depth only the filling request is signalled, so
/// the worker waits for the whole queue to drain before it posts again and
/// the queue runs dry once per round (perftest lowers `-Q` to the TX depth,
/// which leaves exactly that). At half the depth one completion frees half
/// the queue while the other half is still in flight.
pub fn signal_interval(asked: u32, per_qp: u32) -> u32 {
    asked.clamp(1, (per_qp / 2).max(1))
}

impl ClientConfig {
    /// Work requests each QP of a worker holds for commands: its share of
    /// `iodepth`.
    pub fn per_qp_depth(&self) -> u32 {
        self.iodepth.div_ceil(self.qps.max(1))
    }

    /// Lowers `signal_every` to [`signal_interval`] of the QPs' share of
    /// `iodepth` (call it after every change to `iodepth`). Returns the
    /// note to print when it lowered it.
    pub fn cap_signal_every(&mut self) -> Option<String> {
        let per_qp = self.per_qp_depth();
        let used = signal_interval(self.signal_every, per_qp);
        if used == self.signal_every {
            return None;
        }
        let before = self.signal_every;
        self.signal_every = used;
        Some(format!(
            "--signal-every {before}: a queue pair holds {per_qp} work request(s) here \
             (--iodepth {} over {} queue pair(s)), and signalling fewer than one in half of \
             them leaves it waiting for the whole queue to drain, so it signals every {used}",
            self.iodepth, self.qps
        ))
    }
}

/// Checks `--mtu` against the port's active MTU (`active_bytes`): a path
/// MTU above it cannot be used.
pub fn check_mtu(asked: Option<u32>, active_bytes: u32, port: &str) -> Result<(), UsageError> {
    match asked {
        Some(m) if m > active_bytes => Err(UsageError::new(
            "--mtu",
            format!(
                "{m} bytes is above {port}'s active MTU of {active_bytes} bytes: use {active_bytes} or less"
            ),
        )),
        _ => Ok(()),
    }
}

/// One registration piece of the local buffer.
#[derive(Clone, Copy, Debug)]
pub struct LocalPiece {
    /// First byte.
    pub addr: *mut u8,
    /// Bytes.
    pub len: usize,
}

/// What the workers moved, summed (kept by the client as they close).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Moved {
    /// RDMA WRITEs completed successfully.
    pub writes: u64,
    /// RDMA READs completed successfully.
    pub reads: u64,
    /// Bytes of the WRITEs (read from this host's memory).
    pub write_bytes: u64,
    /// Bytes of the READs (written into this host's memory).
    pub read_bytes: u64,
    /// Work requests that completed with an error.
    pub errors: u64,
}

/// The device and registrations one run shares across its workers.
pub struct Client {
    cfg: ClientConfig,
    ctx: Arc<Context>,
    local: Vec<MemoryRegion>,
    // Field order: the loopback MR is deregistered before its buffer is freed.
    loop_mr: Option<MemoryRegion>,
    loop_buf: Option<RawBuffer>,
    before: Option<Snapshot>,
    moved: Mutex<Moved>,
    /// What the workers posted, summed as each one ends.
    posted: Mutex<Posted>,
    /// The smallest `max_rd_atomic` a worker's QP was connected with.
    rd_atomic: Mutex<Option<u8>>,
    first_error: Mutex<Option<String>>,
}

/// Work requests posted signalled (fences included), the fences among
/// them, and the `ibv_post_send` calls that carried commands.
#[derive(Clone, Copy, Debug, Default)]
struct Posted {
    signalled: u64,
    fences: u64,
    calls: u64,
}

impl Client {
    /// Opens the device and registers `pieces` (dmalab's shared DMA buffer)
    /// once, plus the loopback buffer when the target is `loopback`.
    ///
    /// # Safety
    /// The pieces stay mapped until the client and every worker are dropped.
    pub unsafe fn open(cfg: &ClientConfig, pieces: &[LocalPiece]) -> Result<Client, RdmaError> {
        cfg.validate()?;
        let ctx = Context::open(&cfg.device)?;
        let mut local = Vec::with_capacity(pieces.len());
        for p in pieces {
            // Local access only: the WRITEs and READs this host issues need
            // none remote, and no peer gets a key to this host's memory.
            // SAFETY: the caller keeps the pieces mapped for the client's life.
            local.push(unsafe {
                MemoryRegion::register(&ctx, p.addr, p.len, "--buffer", Access::Local)?
            });
        }
        let (loop_buf, loop_mr) = match cfg.target {
            PeerTarget::Loopback => {
                let b = RawBuffer::new(cfg.remote_buffer_bytes, 0, "--rdma-remote-buffer")?;
                // SAFETY: b outlives the MR (field order in Client).
                let mr = unsafe {
                    MemoryRegion::register(
                        &ctx,
                        b.ptr(),
                        b.len(),
                        "--rdma-remote-buffer",
                        Access::Remote,
                    )?
                };
                (Some(b), Some(mr))
            }
            PeerTarget::Peer(_) => (None, None),
        };
        let before = counters::read(&cfg.sysfs_root, &ctx.name, ctx.port);
        Ok(Client {
            cfg: cfg.clone(),
            ctx,
            local,
            loop_mr,
            loop_buf,
            before,
            moved: Mutex::new(Moved::default()),
            posted: Mutex::default(),
            rd_atomic: Mutex::new(None),
            first_error: Mutex::new(None),
        })
    }

    /// The opened device (name, port, GID) for headers.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Opens one worker's CQ and QPs and connects them. `seed` makes the
    /// worker's random choices (mixed operations, random offsets) repeatable.
    pub fn worker(self: &Arc<Self>, seed: u64) -> Result<Worker, RdmaError> {
        let qps = self.cfg.qps as usize;
        let per_qp = self.cfg.iodepth.div_ceil(self.cfg.qps);
        // Room for one fence per QP (see Worker::fence) beside the requests.
        let cq = CompletionQueue::new(&self.ctx, self.cfg.cq_entries())?;
        // READ depth: what this device initiates, lowered below to what
        // the responder serves (loopback: this device; a peer: its accept).
        let limits = self.ctx.limits;
        let params = QpParams {
            max_send_wr: per_qp + FENCE_WRS,
            max_inline: if self.cfg.inline { 256 } else { 0 },
            rd_atomic: limits.initiator_depth(),
            // This QP serves nothing (its access is local only).
            dest_rd_atomic: 1,
        };
        let mut w = Worker {
            client: self.clone(),
            qps: Vec::with_capacity(qps),
            responders: Vec::new(),
            resp_cq: None,
            streams: Vec::new(),
            remote: Vec::with_capacity(qps),
            inflight: vec![0; qps],
            unreaped: vec![VecDeque::new(); qps],
            since_signal: vec![0; qps],
            signalled_out: vec![0; qps],
            signalled: 0,
            fences: 0,
            post_calls: 0,
            posted: 0,
            per_qp,
            slot_op: Vec::new(),
            slot_qp: Vec::new(),
            slot_len: Vec::new(),
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            next_qp: 0,
            moved: Moved::default(),
            wc: vec![sys::ibv_wc::default(); self.cfg.cq_entries().max(1) as usize],
            last_progress: Instant::now(),
            staged: PostList::new(self.cfg.iodepth as usize, qps),
            progressed: false,
            empty_polls: 0,
            cq,
        };
        match &self.cfg.target {
            PeerTarget::Loopback => {
                let resp_cq = CompletionQueue::new(&self.ctx, 1)?;
                let mr = self.loop_mr.as_ref().ok_or_else(|| {
                    RdmaError::Usage(UsageError::new("--target", "loopback buffer missing"))
                })?;
                let depth = read_depth(&limits, limits.responder_depth());
                for _ in 0..qps {
                    let mut a = QueuePair::new(&self.ctx, &w.cq, params)?;
                    if let Some(m) = self.cfg.mtu_bytes {
                        a.limit_mtu(m);
                    }
                    a.limit_rd_atomic(depth);
                    let b = QueuePair::new(
                        &self.ctx,
                        &resp_cq,
                        QpParams {
                            max_send_wr: 1,
                            max_inline: 0,
                            rd_atomic: 1,
                            dest_rd_atomic: depth,
                        },
                    )?;
                    let ea = a.endpoint(None, self.cfg.max_msg_bytes);
                    let eb = b.endpoint(Some(mr), 0);
                    a.connect(&eb, Access::Local)?;
                    b.connect(&ea, Access::Remote)?;
                    w.remote.push(eb);
                    w.qps.push(a);
                    w.responders.push(b);
                }
                w.resp_cq = Some(resp_cq);
            }
            PeerTarget::Peer(addr) => {
                for _ in 0..qps {
                    let mut qp = QueuePair::new(&self.ctx, &w.cq, params)?;
                    if let Some(m) = self.cfg.mtu_bytes {
                        qp.limit_mtu(m);
                    }
                    let mut s = connect_tcp(addr)?;
                    let ours = qp.endpoint(None, self.cfg.max_msg_bytes);
                    let theirs = handshake::client(addr, &mut s, &ours, self.cfg.secret.as_ref())?;
                    let want = self.cfg.remote_buffer_bytes;
                    if want > theirs.len {
                        return Err(UsageError::new(
                            "--rdma-remote-buffer",
                            format!(
                                "{want} bytes is more than the {} bytes {addr} serves: use \
                                 --rdma-remote-buffer {} or less, or serve a larger --buffer",
                                theirs.len, theirs.len
                            ),
                        )
                        .into());
                    }
                    // The server serves theirs.rd_atomic READs at once:
                    // issue no more.
                    qp.limit_rd_atomic(theirs.rd_atomic);
                    qp.connect(&theirs, Access::Local)?;
                    w.remote.push(theirs);
                    w.qps.push(qp);
                    w.streams.push(s);
                }
            }
        }
        if let (Some(least), Ok(mut used)) = (
            w.qps.iter().map(QueuePair::rd_atomic).min(),
            self.rd_atomic.lock(),
        ) {
            *used = Some(used.map_or(least, |u| u.min(least)));
        }
        w.slot_op = vec![sys::IBV_WR_RDMA_WRITE; self.cfg.iodepth as usize];
        w.slot_qp = vec![0; self.cfg.iodepth as usize];
        w.slot_len = vec![0; self.cfg.iodepth as usize];
        Ok(w)
    }

    /// The engine's facts for the result (key "rdma").
    pub fn facts(&self, workers: usize) -> ClientFacts {
        let after = counters::read(&self.cfg.sysfs_root, &self.ctx.name, self.ctx.port);
        let moved = self.moved.lock().map(|m| *m).unwrap_or_default();
        let posted = self.posted.lock().map(|m| *m).unwrap_or_default();
        ClientFacts {
            device: self.ctx.name.clone(),
            port: self.ctx.port,
            link_layer: self.ctx.link_layer_name(),
            gid_index: self.ctx.gid_index,
            gid: gid_text(&self.ctx.gid),
            mtu_bytes: self.ctx.mtu_bytes(),
            path_mtu_bytes: self
                .cfg
                .mtu_bytes
                .map_or(self.ctx.mtu_bytes(), |m| m.min(self.ctx.mtu_bytes())),
            signal_every: self.cfg.signal_every,
            signal_every_asked: self.cfg.signal_every_asked,
            device_limits: self.ctx.limits,
            max_rd_atomic: self.rd_atomic.lock().ok().and_then(|r| *r),
            iodepth: self.cfg.iodepth,
            iodepth_asked: self.cfg.iodepth_asked,
            signalled_work_requests: posted.signalled,
            fences: posted.fences,
            post_send_calls: posted.calls,
            mix_order: match self.cfg.op {
                RdmaOp::Mixed { .. } => Some(self.cfg.mix_order),
                _ => None,
            },
            target: match &self.cfg.target {
                PeerTarget::Loopback => "loopback".into(),
                PeerTarget::Peer(p) => p.clone(),
            },
            op: self.cfg.op.to_string(),
            qps_per_worker: self.cfg.qps,
            qps: self.cfg.qps as usize * workers,
            remote_buffer_bytes: self.cfg.remote_buffer_bytes,
            inline: self.cfg.inline,
            moved,
            memory: MemorySides {
                rdma_write:
                    "this NIC reads this host's memory; the peer's NIC writes the peer's memory",
                rdma_read:
                    "the peer's NIC reads the peer's memory; this NIC writes this host's memory",
            },
            first_error: self.first_error.lock().ok().and_then(|e| e.clone()),
            nic_counters: self
                .before
                .clone()
                .zip(after)
                .and_then(|(b, a)| counters::delta(&b, &a)),
            loopback_buffer_sha256: self.loop_buf.as_ref().map(|b| b.sha256()),
        }
    }
}

/// Asks the `dmalab rdma serve` at `addr` what it serves (no QP is made,
/// and the server does not count it as a client). Every failure is a
/// [`UsageError`] naming `--target`: the peer is the user's input.
pub fn query_server(
    addr: &str,
    secret: Option<&Secret>,
) -> Result<handshake::ServerInfo, RdmaError> {
    let mut s = connect_tcp(addr)?;
    handshake::query(addr, &mut s, secret).map_err(|e| match e {
        RdmaError::Usage(u) => RdmaError::Usage(u),
        other => UsageError::new("--target", other.to_string()).into(),
    })
}

fn connect_tcp(addr: &str) -> Result<TcpStream, RdmaError> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| UsageError::new("--target", format!("cannot resolve {addr:?}: {e}")))?
        .collect();
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                s.set_read_timeout(Some(Duration::from_secs(10)))
                    .map_err(|e| RdmaError::io("socket", e))?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(UsageError::new(
        "--target",
        format!(
            "cannot connect to {addr}: {}: is `dmalab rdma serve --listen {addr}` running there?",
            last.map(|e| e.to_string())
                .unwrap_or_else(|| "no address".into())
        ),
    )
    .into())
}

/// Which host's memory each operation puts DMA on.
#[derive(Clone, Debug, Serialize)]
pub struct MemorySides {
    /// RDMA WRITE.
    pub rdma_write: &'static str,
    /// RDMA READ.
    pub rdma_read: &'static str,
}

/// The rdma engine's facts in the load result (key "rdma").
#[derive(Clone, Debug, Serialize)]
pub struct ClientFacts {
    /// The device.
    pub device: String,
    /// Its port.
    pub port: u8,
    /// RoCE or InfiniBand.
    pub link_layer: &'static str,
    /// GID index used.
    pub gid_index: u8,
    /// The GID.
    pub gid: String,
    /// The port's active MTU, bytes.
    pub mtu_bytes: u32,
    /// The path MTU this side offers its peers, bytes (`--mtu`, else the
    /// port's active MTU; a QP uses the smaller of it and its peer's).
    pub path_mtu_bytes: u32,
    /// One work request in this many asked for a completion: `--signal-every`,
    /// or half a QP's share of `iodepth` when that is less (see
    /// `signal_every_asked`).
    pub signal_every: u32,
    /// `--signal-every` as given; above `signal_every` when it was lowered
    /// to half a QP's queue.
    pub signal_every_asked: u32,
    /// What the device says it allows (`ibv_query_device`).
    pub device_limits: DeviceLimits,
    /// RDMA READs each QP kept outstanding at most (its `max_rd_atomic`:
    /// the smaller of this device's `max_qp_init_rd_atom` and the
    /// responder's `max_qp_rd_atom`); null when no QP was connected.
    pub max_rd_atomic: Option<u8>,
    /// Work requests each worker kept in flight at most (`--iodepth`, or
    /// less: see `iodepth_asked`).
    pub iodepth: u32,
    /// `--iodepth` as given; above `iodepth` when each QP's share did not
    /// fit the device's `max_qp_wr` (with a fence), or when READs were
    /// capped at `max_rd_atomic` per QP.
    pub iodepth_asked: u32,
    /// Work requests posted signalled, fences included (the completions
    /// the NIC wrote; each command is still counted once in `moved`).
    pub signalled_work_requests: u64,
    /// Of those, zero-length RDMA WRITEs posted only to be signalled behind
    /// unsignalled requests a worker waited for (one packet and its
    /// acknowledgement each, no data).
    pub fences: u64,
    /// `ibv_post_send` calls that carried commands (one doorbell each):
    /// the worker posts the commands it queued together as one list per
    /// QP, so commands / calls is the mean list length.
    pub post_send_calls: u64,
    /// `--rdma-mix-order` (mixed operations only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mix_order: Option<MixOrder>,
    /// `loopback` or HOST:PORT.
    pub target: String,
    /// `--rdma-op`.
    pub op: String,
    /// Queue pairs per worker.
    pub qps_per_worker: u32,
    /// Queue pairs in all.
    pub qps: usize,
    /// Bytes of the remote region addressed.
    pub remote_buffer_bytes: u64,
    /// Small writes posted inline.
    pub inline: bool,
    /// Operations and bytes each way, counted from successful completions.
    pub moved: Moved,
    /// Which memory each operation puts DMA on.
    pub memory: MemorySides,
    /// The first failed completion or lost peer, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// The NIC's own counters over the run (None: the port has none).
    pub nic_counters: Option<counters::Delta>,
    /// SHA-256 of the loopback target buffer after the run (loopback only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loopback_buffer_sha256: Option<String>,
}

/// One load worker's queue pairs.
pub struct Worker {
    client: Arc<Client>,
    // Field order: QPs are destroyed before the CQs they report to.
    qps: Vec<QueuePair>,
    responders: Vec<QueuePair>,
    resp_cq: Option<CompletionQueue>,
    cq: CompletionQueue,
    streams: Vec<TcpStream>,
    remote: Vec<Endpoint>,
    inflight: Vec<u32>,
    /// Per QP, the work requests posted and not yet finished, in posting
    /// order: (wr_id, signalled). A completion finishes its own and every
    /// one before it on that QP.
    unreaped: Vec<VecDeque<(u64, bool)>>,
    /// Per QP, work requests posted unsignalled since its last signalled one.
    since_signal: Vec<u32>,
    /// Per QP, signalled work requests (fences included) not yet completed.
    signalled_out: Vec<u32>,
    /// Signalled work requests posted, fences included.
    signalled: u64,
    /// Fences posted.
    fences: u64,
    /// `ibv_post_send` calls that carried commands.
    post_calls: u64,
    /// Commands posted (the mixed interleave's counter).
    posted: u64,
    per_qp: u32,
    slot_op: Vec<u32>,
    slot_qp: Vec<u16>,
    slot_len: Vec<u32>,
    rng: u64,
    next_qp: usize,
    moved: Moved,
    wc: Vec<sys::ibv_wc>,
    last_progress: Instant,
    /// Work requests `post` built and has not yet handed to the device.
    staged: PostList,
    /// Something completed, or was posted with nothing in flight, since
    /// `last_progress` was last set (see [`Worker::stalled`]).
    progressed: bool,
    /// Empty polls, wrapping (the stall check's counter).
    empty_polls: u32,
}

/// Work requests built and not yet posted, with their SGEs and QPs (same
/// index), posted by [`PostList::post`] as one list per QP.
struct PostList {
    wr: Vec<sys::ibv_send_wr>,
    sge: Vec<sys::ibv_sge>,
    qp: Vec<u16>,
    /// Per QP, the first and last request of its list while `post` links
    /// them (NO_WR: none).
    chain: Vec<(usize, usize)>,
    /// QPs with a list, in the order their first request was staged.
    chained: Vec<usize>,
}

// SAFETY: the only pointers inside (each request's `next` and `sg_list`)
// point into the list's own buffers; `post` writes them just before it
// hands the lists to the device and nothing follows them afterwards, so
// moving the list to another thread moves nothing another thread uses.
unsafe impl Send for PostList {}

/// No request (see `PostList::chain`).
const NO_WR: usize = usize::MAX;

impl PostList {
    fn new(depth: usize, qps: usize) -> Self {
        Self {
            wr: Vec::with_capacity(depth),
            sge: Vec::with_capacity(depth),
            qp: Vec::with_capacity(depth),
            chain: vec![(NO_WR, NO_WR); qps],
            chained: Vec::with_capacity(qps),
        }
    }

    fn is_empty(&self) -> bool {
        self.wr.is_empty()
    }

    /// Stages `wr` (its `next` and `sg_list` are set when posted) with its
    /// one `sge`, for QP `q`.
    fn push(&mut self, wr: sys::ibv_send_wr, sge: sys::ibv_sge, q: usize) {
        self.wr.push(wr);
        self.sge.push(sge);
        self.qp.push(q as u16);
    }

    /// Posts every staged request, each QP's as one list in staging order
    /// (one `ibv_post_send`, one doorbell, per QP), and empties the list.
    /// Returns the calls made and the first failure.
    ///
    /// # Safety
    /// Every staged SGE lies in memory registered on `qps`' device, and
    /// every remote range in its QP's peer's region.
    unsafe fn post(&mut self, qps: &mut [QueuePair]) -> (u64, Result<(), RdmaError>) {
        let n = self.wr.len();
        let wrs = self.wr.as_mut_ptr();
        let sges = self.sge.as_mut_ptr();
        let mut calls = 0;
        let mut result = Ok(());
        // SAFETY: i < n, the length of wr, sge and qp (pushed together);
        // nothing else touches the two buffers until they are cleared
        // below, so the links and SGE pointers written here stay valid
        // while the lists are posted; the SGEs and remote ranges are the
        // caller's promise.
        unsafe {
            for i in 0..n {
                let w = wrs.add(i);
                (*w).next = std::ptr::null_mut();
                (*w).sg_list = sges.add(i);
                let q = usize::from(self.qp[i]);
                let (head, tail) = self.chain[q];
                if head == NO_WR {
                    self.chain[q] = (i, i);
                    self.chained.push(q);
                } else {
                    (*wrs.add(tail)).next = w;
                    self.chain[q] = (head, i);
                }
            }
            for &q in &self.chained {
                let (head, _) = self.chain[q];
                self.chain[q] = (NO_WR, NO_WR);
                if result.is_ok() {
                    result = qps[q].post(&mut *wrs.add(head));
                    calls += 1;
                }
            }
        }
        self.chained.clear();
        self.wr.clear();
        self.sge.clear();
        self.qp.clear();
        (calls, result)
    }
}

/// The bit that marks a fence's wr_id (see [`Worker::fence`]; the low
/// bits hold its QP's index); a request's wr_id is its u32 slot.
const FENCE: u64 = 1 << 63;

/// How long a worker waits without any completion, requests in flight,
/// before it gives the peer up.
pub const STALL: Duration = Duration::from_secs(10);

/// Empty polls between two checks for a stall (each reads the clock).
const STALL_CHECK: u32 = 1024;

/// One finished work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The slot it was posted for.
    pub slot: u32,
    /// Bytes moved, or a negative errno (-EIO) for a failed completion.
    pub result: i32,
}

impl Worker {
    fn next_rand(&mut self) -> u64 {
        // xorshift64*: cheap and repeatable per seed.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn choose_op(&mut self) -> u32 {
        let k = self.posted;
        self.posted += 1;
        match self.client.cfg.op {
            RdmaOp::Write => sys::IBV_WR_RDMA_WRITE,
            RdmaOp::Read => sys::IBV_WR_RDMA_READ,
            RdmaOp::Mixed { read_pct } => {
                let read = match self.client.cfg.mix_order {
                    MixOrder::Interleave => MixOrder::interleaved_read(k, read_pct),
                    MixOrder::Random => self.next_rand() % 100 < u64::from(read_pct),
                };
                if read {
                    sys::IBV_WR_RDMA_READ
                } else {
                    sys::IBV_WR_RDMA_WRITE
                }
            }
        }
    }

    /// Queues one message of `len` bytes at `addr`, inside local piece
    /// `piece`, to `remote_offset` in the remote region, for `slot`. The
    /// device gets it with the next [`Worker::reap`] (or
    /// [`Worker::flush`]), together with every message queued before it:
    /// one `ibv_post_send` list, one doorbell, per QP (perftest's
    /// `--post_list`). On soft-RoCE each doorbell is a system call that
    /// runs the requester; in the rxe guest, where all 16 of a depth-16
    /// queue complete together, 16 went in one call instead of 16.
    ///
    /// # Safety
    /// `addr..addr+len` lies inside that piece of the registered buffer.
    pub unsafe fn post(
        &mut self,
        slot: u32,
        piece: usize,
        addr: *mut u8,
        len: u32,
        remote_offset: u64,
    ) -> Result<(), RdmaError> {
        let s = slot as usize;
        if s >= self.slot_op.len() {
            return Err(RdmaError::Usage(UsageError::new(
                "--iodepth",
                format!("slot {slot} out of range"),
            )));
        }
        let lkey = self
            .client
            .local
            .get(piece)
            .map(|m| m.lkey())
            .ok_or_else(|| {
                RdmaError::Usage(UsageError::new(
                    "--buffer",
                    format!("no registration piece {piece}"),
                ))
            })?;
        // The QP with the fewest requests in flight, round robin among equals.
        let n = self.qps.len();
        let mut q = self.next_qp % n;
        for i in 0..n {
            let c = (self.next_qp + i) % n;
            if self.inflight[c] < self.inflight[q] {
                q = c;
            }
        }
        self.next_qp = (q + 1) % n;
        if self.inflight[q] >= self.per_qp {
            return Err(RdmaError::Usage(UsageError::new(
                "--iodepth",
                "more work requests queued than the queue pairs hold",
            )));
        }
        let remote = self.remote[q];
        let off = remote_offset;
        if off.saturating_add(u64::from(len)) > self.client.cfg.remote_buffer_bytes {
            return Err(RdmaError::Usage(UsageError::new(
                "--rdma-remote-buffer",
                format!("a {len}-byte message at remote offset {off} ends past the remote region"),
            )));
        }
        let op = self.choose_op();
        let sge = sys::ibv_sge {
            addr: addr as u64,
            length: len,
            lkey,
        };
        // Signal every Nth request of a QP, and the one that fills its
        // queue (the worker will wait for room); the rest finish with the
        // next completion of their QP, or with a fence when the worker
        // waits for them (see `fence`).
        let signal = self.since_signal[q] + 1 >= self.client.cfg.signal_every
            || self.inflight[q] + 1 >= self.per_qp;
        let mut flags = if signal { sys::IBV_SEND_SIGNALED } else { 0 };
        if op == sys::IBV_WR_RDMA_WRITE && self.client.cfg.inline && len <= self.qps[q].max_inline {
            flags |= sys::IBV_SEND_INLINE;
        }
        let mut wr = sys::ibv_send_wr::default();
        wr.wr_id = u64::from(slot);
        wr.num_sge = 1;
        wr.opcode = op;
        wr.send_flags = flags;
        wr.remote_addr = remote.addr + off;
        wr.rkey = remote.rkey;
        // The SGE lies in a registered piece (the caller's promise); the
        // remote range lies inside the buffer the peer registered.
        self.staged.push(wr, sge, q);
        if self.inflight.iter().all(|&f| f == 0) {
            self.progressed = true;
        }
        self.inflight[q] += 1;
        self.unreaped[q].push_back((u64::from(slot), signal));
        if signal {
            if self.signalled_out.iter().all(|&f| f == 0) {
                self.progressed = true;
            }
            self.since_signal[q] = 0;
            self.signalled_out[q] += 1;
            self.signalled += 1;
        } else {
            self.since_signal[q] += 1;
        }
        self.slot_op[s] = op;
        self.slot_qp[s] = q as u16;
        self.slot_len[s] = len;
        Ok(())
    }

    /// Hands every staged work request to the device: each QP's as one
    /// list, in the order they were staged (one `ibv_post_send`, one
    /// doorbell per QP). A failure leaves the run unable to go on: the
    /// requests after the bad one were counted in flight and never will
    /// complete, so the caller stops.
    pub fn flush(&mut self) -> Result<(), RdmaError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        // SAFETY: each SGE lies in a registered piece (`post`'s caller's
        // promise); each remote range inside its peer's region (checked in
        // `post`).
        let (calls, result) = unsafe { self.staged.post(&mut self.qps) };
        self.post_calls += calls;
        result
    }

    /// Posts what is queued, then polls the CQ until at least `min`
    /// completions arrived or `timeout` passed; appends them to `out`. A
    /// failed completion is reported as -EIO and also returned as an error
    /// when its QP can do no more (the peer is gone): the run stops and
    /// reports what it did.
    pub fn reap(
        &mut self,
        min: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Finished>,
    ) -> Result<(), RdmaError> {
        // Reading the clock can cost a system call (where the clocksource
        // has no vDSO reading: the TCG guest's HPET), and on soft-RoCE the
        // CPU that polls also runs the device: the clock is read for a
        // timeout, and for the stall check once in STALL_CHECK empty
        // polls, never per poll or per completion.
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut got = 0;
        let mut idle = 0u32;
        let mut fatal = None;
        self.flush()?;
        loop {
            if min > 0 {
                self.fence()?;
            }
            let n = self.cq.poll(&mut self.wc)?;
            for i in 0..n {
                let wc = self.wc[i];
                let Some(q) = self.qp_of(wc.wr_id) else {
                    continue;
                };
                // An RC send queue completes in order: this completion
                // finishes every request posted on its QP before it.
                while let Some((id, signalled)) = self.unreaped[q].pop_front() {
                    let last = id == wc.wr_id;
                    if signalled {
                        self.signalled_out[q] = self.signalled_out[q].saturating_sub(1);
                    }
                    if id & FENCE == 0 {
                        // Those before it succeeded: an error ends a QP, and
                        // every request after it completes (flushed) on its own.
                        let status = if last { wc.status } else { sys::IBV_WC_SUCCESS };
                        out.push(self.finish(id as u32, q, status, &wc, &mut fatal));
                        got += 1;
                    }
                    if last {
                        break;
                    }
                }
            }
            if n > 0 {
                self.progressed = true;
            } else {
                self.empty_polls = self.empty_polls.wrapping_add(1);
                if self.empty_polls.is_multiple_of(STALL_CHECK)
                    && self.signalled_out.iter().any(|&f| f > 0)
                    && fatal.is_none()
                    && self.stalled()
                {
                    // A peer that vanished without a trace (its QP gone, no
                    // NAK) must still end the run: retries alone may not.
                    fatal = Some(format!(
                        "no completion for {} s with {} work requests in flight: the peer stopped answering",
                        STALL.as_secs(),
                        self.inflight.iter().sum::<u32>()
                    ));
                }
            }
            if fatal.is_some() || got >= min {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if n == 0 {
                // Soft-RoCE completes in the kernel on the same CPUs: after
                // a short spin, give them up rather than starve it.
                idle += 1;
                if idle > 64 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            } else {
                idle = 0;
            }
        }
        if let Some(f) = fatal {
            if let Ok(mut e) = self.client.first_error.lock() {
                e.get_or_insert_with(|| f.clone());
            }
            return Err(RdmaError::Peer {
                peer: match &self.client.cfg.target {
                    PeerTarget::Loopback => "loopback".into(),
                    PeerTarget::Peer(p) => p.clone(),
                },
                message: f,
            });
        }
        Ok(())
    }

    /// The index of the QP a completion of `wr_id` came from (a fence
    /// carries it; a request's slot knows it).
    fn qp_of(&self, wr_id: u64) -> Option<usize> {
        let q = if wr_id & FENCE != 0 {
            (wr_id & !FENCE) as usize
        } else {
            usize::from(*self.slot_qp.get(wr_id as usize)?)
        };
        (q < self.qps.len()).then_some(q)
    }

    /// Counts one finished request of `slot` on QP `q` and makes its
    /// [`Finished`].
    fn finish(
        &mut self,
        slot: u32,
        q: usize,
        status: u32,
        wc: &sys::ibv_wc,
        fatal: &mut Option<String>,
    ) -> Finished {
        let s = slot as usize;
        if let Some(f) = self.inflight.get_mut(q) {
            *f = f.saturating_sub(1);
        }
        let op = self
            .slot_op
            .get(s)
            .copied()
            .unwrap_or(sys::IBV_WR_RDMA_WRITE);
        let result = if status == sys::IBV_WC_SUCCESS {
            // byte_len is not defined for RDMA WRITE completions (nor are
            // unsignalled ones seen at all): the posted length is what moved.
            let len = self.slot_len.get(s).copied().unwrap_or(0);
            if op == sys::IBV_WR_RDMA_READ {
                self.moved.reads += 1;
                self.moved.read_bytes += u64::from(len);
            } else {
                self.moved.writes += 1;
                self.moved.write_bytes += u64::from(len);
            }
            i32::try_from(len).unwrap_or(i32::MAX)
        } else {
            self.moved.errors += 1;
            if fatal.is_none() {
                *fatal = Some(format!(
                    "{} on QP {}: {} (vendor error {:#x}); the peer went away or refused the access",
                    if op == sys::IBV_WR_RDMA_READ { "RDMA READ" } else { "RDMA WRITE" },
                    wc.qp_num,
                    self.client.ctx.status_text(status),
                    wc.vendor_err
                ));
            }
            -libc::EIO
        };
        Finished { slot, result }
    }

    /// Gives every QP whose unfinished requests are all unsignalled a
    /// signalled zero-length RDMA WRITE behind them (it moves no data), so
    /// a worker that waits for completions gets them: without it the last
    /// requests of a run, or of a paced gap, would never be reported.
    fn fence(&mut self) -> Result<(), RdmaError> {
        for q in 0..self.qps.len() {
            if self.signalled_out[q] > 0 || self.unreaped[q].is_empty() {
                continue;
            }
            let remote = self.remote[q];
            let mut wr = sys::ibv_send_wr::default();
            wr.wr_id = FENCE | q as u64;
            wr.num_sge = 0;
            wr.opcode = sys::IBV_WR_RDMA_WRITE;
            wr.send_flags = sys::IBV_SEND_SIGNALED;
            wr.remote_addr = remote.addr;
            wr.rkey = remote.rkey;
            // SAFETY: a zero-length WRITE names no local memory; the remote
            // address is the start of the region the peer registered.
            unsafe { self.qps[q].post(&mut wr)? };
            self.unreaped[q].push_back((FENCE | q as u64, true));
            if self.signalled_out.iter().all(|&f| f == 0) {
                self.progressed = true;
            }
            self.signalled_out[q] += 1;
            self.signalled += 1;
            self.fences += 1;
            self.since_signal[q] = 0;
        }
        Ok(())
    }

    /// Whether nothing has completed for [`STALL`]: `last_progress` moves to
    /// now when something did since the last check, so it lags the last
    /// completion by at most one check's interval.
    fn stalled(&mut self) -> bool {
        let now = Instant::now();
        if self.progressed {
            self.progressed = false;
            self.last_progress = now;
            return false;
        }
        now.duration_since(self.last_progress) >= STALL
    }

    /// What this worker has moved so far.
    pub fn moved(&self) -> Moved {
        self.moved
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let done = Done {
            writes: self.moved.writes,
            reads: self.moved.reads,
            write_bytes: self.moved.write_bytes,
            read_bytes: self.moved.read_bytes,
        };
        // Each QP's connection reports its share; the totals go on the first.
        for (i, s) in self.streams.iter_mut().enumerate() {
            let d = if i == 0 { done } else { Done::default() };
            let _ = handshake::send_done("server", s, &d);
        }
        if let Ok(mut p) = self.client.posted.lock() {
            p.signalled += self.signalled;
            p.fences += self.fences;
            p.calls += self.post_calls;
        }
        if let Ok(mut m) = self.client.moved.lock() {
            m.writes += self.moved.writes;
            m.reads += self.moved.reads;
            m.write_bytes += self.moved.write_bytes;
            m.read_bytes += self.moved.read_bytes;
            m.errors += self.moved.errors;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_op_parses_every_form() {
        assert_eq!("write".parse::<RdmaOp>().unwrap(), RdmaOp::Write);
        assert_eq!("read".parse::<RdmaOp>().unwrap(), RdmaOp::Read);
        assert_eq!(
            "mixed".parse::<RdmaOp>().unwrap(),
            RdmaOp::Mixed { read_pct: 50 }
        );
        assert_eq!(
            "mixed:30".parse::<RdmaOp>().unwrap(),
            RdmaOp::Mixed { read_pct: 30 }
        );
        for bad in ["mixed:101", "mixed:", "mixed:-1", "Write", "rw", ""] {
            let e = bad.parse::<RdmaOp>().unwrap_err();
            assert_eq!(e.option, "--rdma-op", "{bad}");
        }
        assert_eq!(RdmaOp::Mixed { read_pct: 7 }.to_string(), "mixed:7");
    }

    #[test]
    fn targets_parse() {
        assert_eq!(
            "loopback".parse::<PeerTarget>().unwrap(),
            PeerTarget::Loopback
        );
        assert_eq!(
            "10.0.0.1:18515".parse::<PeerTarget>().unwrap(),
            PeerTarget::Peer("10.0.0.1:18515".into())
        );
        assert!("[::1]:7".parse::<PeerTarget>().is_ok());
        for bad in ["host", "host:", ":80", "h:0", "h:70000", "/dev/nvme0n1"] {
            assert_eq!(
                bad.parse::<PeerTarget>().unwrap_err().option,
                "--target",
                "{bad}"
            );
        }
    }

    fn cfg() -> ClientConfig {
        ClientConfig {
            device: DeviceConfig {
                device: None,
                port: 1,
                gid_index: None,
                device_flag: "--rdma-device",
            },
            target: PeerTarget::Loopback,
            op: RdmaOp::Write,
            qps: 2,
            iodepth: 8,
            iodepth_asked: 8,
            max_msg_bytes: 65536,
            remote_buffer_bytes: DEFAULT_REMOTE_BUFFER,
            inline: false,
            sysfs_root: PathBuf::from("/sys/class/infiniband"),
            secret: None,
            signal_every: 1,
            signal_every_asked: 1,
            mtu_bytes: None,
            mix_order: MixOrder::Random,
        }
    }

    #[test]
    fn validation_names_the_flag() {
        assert!(cfg().validate().is_ok());
        let mut c = cfg();
        c.qps = 0;
        assert_eq!(c.validate().unwrap_err().option, "--qps");
        let mut c = cfg();
        c.iodepth = 1;
        assert_eq!(c.validate().unwrap_err().option, "--iodepth");
        let mut c = cfg();
        c.remote_buffer_bytes = 4096;
        let e = c.validate().unwrap_err();
        assert_eq!(e.option, "--rdma-remote-buffer");
        assert!(
            e.message.contains("smaller than one 65536-byte message"),
            "{}",
            e.message
        );
    }

    #[test]
    fn interleaved_mix_holds_pct_exactly_in_every_window_of_100() {
        // mixed:50 alternates WRITE, READ as the paper's tool does.
        let half: Vec<bool> = (0..6).map(|k| MixOrder::interleaved_read(k, 50)).collect();
        assert_eq!(half, [false, true, false, true, false, true]);
        for pct in 0..=100u8 {
            let seq: Vec<bool> = (0..400)
                .map(|k| MixOrder::interleaved_read(k, pct))
                .collect();
            for w in seq.windows(100) {
                let reads = w.iter().filter(|r| **r).count();
                assert_eq!(reads, usize::from(pct), "mixed:{pct}");
            }
        }
    }

    #[test]
    fn reads_are_capped_at_the_read_depth_and_writes_are_not() {
        let limits = |init, dest| DeviceLimits {
            max_qp_rd_atom: dest,
            max_qp_init_rd_atom: init,
            max_qp_wr: 16384,
            max_cqe: 32767,
        };
        // The smaller of this device's initiator depth and the peer's
        // responder depth, within the u8 a QP attribute holds.
        assert_eq!(read_depth(&limits(128, 128), 16), 16);
        assert_eq!(read_depth(&limits(8, 128), 16), 8);
        assert_eq!(read_depth(&limits(1000, 1000), 255), 255);
        assert_eq!(read_depth(&limits(0, 0), 0), 1);
        let mut c = cfg();
        c.op = RdmaOp::Read;
        c.iodepth = 64;
        c.iodepth_asked = 64;
        let note = c.cap_reads(16).expect("capped");
        // 2 QPs x 16 READs each.
        assert_eq!((c.iodepth, c.iodepth_asked), (32, 64));
        assert!(
            note.contains("--iodepth 64") && note.contains("--iodepth 32"),
            "{note}"
        );
        assert!(c.validate().is_ok());
        // Within the depth: nothing changes.
        let mut c = cfg();
        c.op = RdmaOp::Read;
        assert_eq!(c.cap_reads(4), None);
        assert_eq!(c.iodepth, 8);
        // Writes and mixes keep their depth.
        for op in [RdmaOp::Write, RdmaOp::Mixed { read_pct: 50 }] {
            let mut c = cfg();
            c.op = op;
            c.iodepth = 64;
            assert_eq!(c.cap_reads(2), None, "{op}");
            assert_eq!(c.iodepth, 64);
        }
    }

    #[test]
    fn signal_every_and_mtu_are_validated() {
        let mut c = cfg();
        c.signal_every = 0;
        assert_eq!(c.validate().unwrap_err().option, "--signal-every");
        let mut c = cfg();
        c.mtu_bytes = Some(1500);
        let e = c.validate().unwrap_err();
        assert_eq!(e.option, "--mtu");
        assert!(e.message.contains("256, 512, 1024, 2048 or 4096"), "{e}");
        let mut c = cfg();
        c.mtu_bytes = Some(2048);
        c.signal_every = 64;
        assert!(c.validate().is_ok());
        // Against the port: soft-RoCE on a 1500-byte Ethernet says 1024.
        let e = check_mtu(Some(2048), 1024, "rxe0 port 1").unwrap_err();
        assert_eq!(e.option, "--mtu");
        assert!(e.message.contains("active MTU of 1024"), "{e}");
        assert!(check_mtu(Some(1024), 1024, "rxe0 port 1").is_ok());
        assert!(check_mtu(None, 1024, "rxe0 port 1").is_ok());
    }

    #[test]
    fn the_signal_interval_is_at_most_half_a_queue_pairs_queue() {
        // (asked, per-QP depth) -> used.
        for (asked, per_qp, used) in [
            (1, 16, 1),
            (8, 16, 8),
            (9, 16, 8),
            (16, 16, 8),
            (64, 16, 8),
            (4, 8, 4),
            (5, 7, 3),
            (64, 3, 1),
            (64, 1, 1),
            (2, 2, 1),
            (0, 16, 1),
        ] {
            assert_eq!(signal_interval(asked, per_qp), used, "{asked} at {per_qp}");
        }
        // --iodepth 8 over 2 QPs: 4 each, so --signal-every 64 runs at 2.
        let mut c = cfg();
        c.signal_every = 64;
        c.signal_every_asked = 64;
        let note = c.cap_signal_every().expect("lowered");
        assert_eq!((c.signal_every, c.signal_every_asked), (2, 64));
        assert!(
            note.starts_with("--signal-every 64: a queue pair holds 4 work request(s)")
                && note.ends_with("so it signals every 2"),
            "{note}"
        );
        assert!(c.validate().is_ok());
        // Within half the queue: kept, no note.
        let mut c = cfg();
        c.signal_every = 2;
        assert_eq!(c.cap_signal_every(), None);
        assert_eq!(c.signal_every, 2);
    }

    #[test]
    fn the_depth_fits_the_devices_queues_with_room_for_a_fence() {
        // max_qp_wr -> commands per QP.
        for (wr, most) in [
            (16384, Some(16383)),
            (8, Some(7)),
            (2, Some(1)),
            (1, None),
            (0, None),
        ] {
            assert_eq!(queue_depth(wr), most, "max_qp_wr {wr}");
        }
        // 2 QPs x 32 asked, 7 fit each.
        let mut c = cfg();
        c.iodepth = 64;
        c.iodepth_asked = 64;
        let note = c.cap_queue(8, "mock0").unwrap().expect("lowered");
        assert_eq!((c.iodepth, c.iodepth_asked, c.per_qp_depth()), (14, 64, 7));
        assert!(
            note.starts_with("--iodepth 64: a queue pair on mock0 holds at most 8 work requests")
                && note.ends_with("run with --iodepth 14"),
            "{note}"
        );
        assert!(c.validate().is_ok());
        // Exactly full (4 each + a fence = 5): kept.
        let mut c = cfg();
        assert_eq!(c.cap_queue(5, "mock0").unwrap(), None);
        assert_eq!(c.iodepth, 8);
        // One more request per QP than fits: lowered by one each.
        assert!(c.cap_queue(4, "mock0").unwrap().is_some());
        assert_eq!(c.iodepth, 6);
        // A queue that holds no request beside the fence: refused.
        let e = cfg().cap_queue(1, "mock0").unwrap_err();
        assert_eq!(e.option, "--rdma-device");
        assert!(
            e.message.contains("mock0 holds at most 1 work request(s)"),
            "{e}"
        );
    }

    #[test]
    fn the_depth_fits_the_devices_completion_queues() {
        // 2 QPs at --iodepth 8: 8 commands and 2 fences, 10 entries.
        let mut c = cfg();
        assert_eq!((c.qps, c.iodepth), (2, 8));
        assert_eq!(c.cap_cq(10, "mock0").unwrap(), None);
        assert_eq!(c.cap_cq(0, "mock0").unwrap(), None, "no limit reported");
        let note = c.cap_cq(9, "mock0").unwrap().expect("lowered");
        assert_eq!(c.iodepth, 7);
        assert!(
            note.starts_with("--iodepth 8: a completion queue on mock0 holds at most 9 entries")
                && note.ends_with("run with --iodepth 7")
                && !note.contains("  "),
            "{note}"
        );
        // max_qp_wr 16384 lets 2 QPs run 32766: with their fences one
        // entry more than a max_cqe of 32767 holds.
        let mut c = cfg();
        c.iodepth = 1 << 20;
        assert!(c.cap_queue(16384, "rxe0").unwrap().is_some());
        assert_eq!(c.iodepth, 32766);
        assert!(c.cap_cq(32767, "rxe0").unwrap().is_some());
        assert_eq!(c.iodepth, 32765);
        assert!(c.validate().is_ok());
        // Not one command per QP beside its fence: refused.
        let e = cfg().cap_cq(3, "mock0").unwrap_err();
        assert_eq!(e.option, "--rdma-device");
        assert!(
            e.message
                .contains("mock0's completion queues hold at most 3 entries")
                && !e.message.contains("  "),
            "{e}"
        );
    }
}
