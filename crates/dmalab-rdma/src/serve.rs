//! `dmalab rdma serve`: the peer a `dmalab load --engine rdma --target
//! HOST:PORT` client connects to.
//!
//! One buffer registered once; for every TCP connection one RC queue pair
//! over it (the handshake in [`crate::handshake`]), kept until the client
//! says it is done or goes away. Serves up to [`ServeConfig::max_clients`]
//! connections at once (one more is closed with a reason) until the stop
//! flag rises (SIGINT/SIGTERM), then reports what it served.
//!
//! No peer can hold the server: every read waits at most [`POLL`] before
//! the stop flag is looked at again, and a handshake (or a done message)
//! that is not complete within [`ServeConfig::handshake_timeout`] drops its
//! connection. What clients report is summed with checked arithmetic: a
//! report that would overflow the session's total is that client's
//! protocol error, not a wrapped count.

use crate::access::{AllowNet, Secret};
use crate::buffer::RawBuffer;
use crate::counters::{self, Delta};
use crate::error::RdmaError;
use crate::handshake::{self, Done, Endpoint, Opening, ServerInfo};
use crate::verbs::{
    gid_text, Access, CompletionQueue, Context, DeviceConfig, MemoryRegion, QpParams, QueuePair,
};
use dmalab_core::UsageError;
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What `dmalab rdma serve` was asked to do (validated by the binary's flag
/// parsing: sizes through `dmalab_core::units`).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Device, port and GID.
    pub device: DeviceConfig,
    /// Bytes of the served buffer.
    pub buffer_bytes: u64,
    /// Byte the buffer is filled with before serving.
    pub fill: u8,
    /// Where the NIC counters live (normally `/sys/class/infiniband`).
    pub sysfs_root: PathBuf,
    /// Connections served at once (`--max-clients`); one more is closed
    /// with a reason.
    pub max_clients: usize,
    /// Longest a handshake (or a done message) may take once the
    /// connection is accepted (`--handshake-timeout`).
    pub handshake_timeout: Duration,
    /// The shared secret a client must prove it knows (`--secret-file`);
    /// None: anyone who reaches the port may connect.
    pub secret: Option<Secret>,
    /// Peer networks that may connect (`--allow`); empty: any.
    pub allow: Vec<AllowNet>,
    /// Where the served buffer lives (`--membind`, `--buffer-file`).
    pub placement: dmalab_core::placement::PlacementSpec,
}

/// `--max-clients` when not given: each connection costs a thread and a QP.
pub const DEFAULT_MAX_CLIENTS: usize = 64;
/// Most `--max-clients` accepted.
pub const MAX_MAX_CLIENTS: usize = 4096;
/// `--handshake-timeout` when not given.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest one socket read waits before the stop flag is looked at again.
pub const POLL: Duration = Duration::from_millis(200);

impl ServeConfig {
    /// Checks what can be checked before the device is opened.
    pub fn validate(&self) -> Result<(), UsageError> {
        if !(1..=MAX_MAX_CLIENTS).contains(&self.max_clients) {
            return Err(UsageError::new(
                "--max-clients",
                format!(
                    "{} is not 1..={MAX_MAX_CLIENTS} connections",
                    self.max_clients
                ),
            ));
        }
        if self.handshake_timeout < Duration::from_secs(1)
            || self.handshake_timeout > Duration::from_secs(3600)
        {
            return Err(UsageError::new(
                "--handshake-timeout",
                format!("{:?} is not between 1s and 1h", self.handshake_timeout),
            ));
        }
        self.placement.validate(self.buffer_bytes)
    }
}

/// One client connection, as served.
#[derive(Clone, Debug, Serialize)]
pub struct ClientRecord {
    /// The client's TCP address.
    pub peer: String,
    /// Our QP number for it.
    pub qp_num: u32,
    /// Its QP number.
    pub peer_qp_num: u32,
    /// Seconds the connection lasted.
    pub duration_s: f64,
    /// What the client reported it moved (None: it closed without saying:
    /// it died or was killed).
    pub done: Option<DoneRecord>,
    /// Why the connection failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// [`Done`] with units in the key names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DoneRecord {
    /// RDMA WRITEs into the served buffer (its host's memory written by its NIC).
    pub writes: u64,
    /// RDMA READs from the served buffer (its host's memory read by its NIC).
    pub reads: u64,
    /// Bytes written into the served buffer.
    pub write_bytes: u64,
    /// Bytes read from the served buffer.
    pub read_bytes: u64,
}

impl DoneRecord {
    /// `self + d`, or None when any count would overflow.
    pub fn checked_add(&self, d: &DoneRecord) -> Option<DoneRecord> {
        Some(DoneRecord {
            writes: self.writes.checked_add(d.writes)?,
            reads: self.reads.checked_add(d.reads)?,
            write_bytes: self.write_bytes.checked_add(d.write_bytes)?,
            read_bytes: self.read_bytes.checked_add(d.read_bytes)?,
        })
    }
}

impl From<Done> for DoneRecord {
    fn from(d: Done) -> Self {
        DoneRecord {
            writes: d.writes,
            reads: d.reads,
            write_bytes: d.write_bytes,
            read_bytes: d.read_bytes,
        }
    }
}

/// What a serve session did.
#[derive(Clone, Debug, Serialize)]
pub struct ServeReport {
    /// The device used.
    pub device: String,
    /// Its port.
    pub port: u8,
    /// RoCE or InfiniBand.
    pub link_layer: &'static str,
    /// GID index used.
    pub gid_index: u8,
    /// The GID.
    pub gid: String,
    /// The address listened on.
    pub listen: String,
    /// Bytes of the served buffer.
    pub buffer_bytes: u64,
    /// Every connection, in the order they ended.
    pub clients: Vec<ClientRecord>,
    /// Connections closed at once because `max_clients` were being served.
    pub refused_busy: u64,
    /// Connections closed at once because their address is not in `--allow`.
    pub refused_not_allowed: u64,
    /// Whether clients had to prove knowledge of a shared secret.
    pub secret_required: bool,
    /// The networks that may connect (empty: any).
    pub allow: Vec<String>,
    /// Most connections served at once (`--max-clients`).
    pub max_clients: usize,
    /// Sum of what the clients reported.
    pub total: DoneRecord,
    /// SHA-256 of the served buffer when serving ended (hex).
    pub buffer_sha256: String,
    /// Where the served buffer's pages are (what backs them, the node(s)
    /// the kernel put them on), read after they were filled.
    pub buffer_placement: dmalab_core::placement::PlacementRecord,
    /// The NIC's counters over the session (None: the port has none).
    pub nic_counters: Option<Delta>,
    /// Seconds served.
    pub duration_s: f64,
}

/// Serves until `stop` rises; `log` gets one line per event.
pub fn serve(
    cfg: &ServeConfig,
    stop: &AtomicBool,
    log: &(dyn Fn(&str) + Sync),
) -> Result<ServeReport, RdmaError> {
    let ctx = Context::open(&cfg.device)?;
    let buf = RawBuffer::placed(cfg.buffer_bytes, cfg.fill, "--buffer", &cfg.placement)?;
    if let Some(l) = buf.placement.line() {
        log(&format!("buffer: {l}"));
    }
    // SAFETY: buf outlives the MR (mr is dropped before buf below: every
    // connection thread is joined and its Arc released first).
    let mr = Arc::new(unsafe {
        MemoryRegion::register(&ctx, buf.ptr(), buf.len(), "--buffer", Access::Remote)?
    });
    let listener = TcpListener::bind(cfg.listen)
        .map_err(|e| RdmaError::io(format!("listening on {}", cfg.listen), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| RdmaError::io("setting the listener non-blocking", e))?;
    let before = counters::read(&cfg.sysfs_root, &ctx.name, ctx.port);
    log(&format!(
        "serving {} bytes on {} port {} ({}, GID index {} {}, MTU {} B) at {}",
        cfg.buffer_bytes,
        ctx.name,
        ctx.port,
        ctx.link_layer_name(),
        ctx.gid_index,
        gid_text(&ctx.gid),
        ctx.mtu_bytes(),
        listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    ));
    let start = Instant::now();
    let records = Mutex::new(Vec::new());
    let totals = Mutex::new(DoneRecord::default());
    let active = AtomicUsize::new(0);
    let refused_busy = AtomicU64::new(0);
    let refused_not_allowed = AtomicU64::new(0);
    std::thread::scope(|scope| {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    if !cfg.allow.is_empty() && !cfg.allow.iter().any(|n| n.contains(peer.ip())) {
                        refused_not_allowed.fetch_add(1, Ordering::Relaxed);
                        let why = format!("{} is not in this server's --allow list", peer.ip());
                        close_with_reason(&mut stream, peer, &why, log);
                        continue;
                    }
                    if active.load(Ordering::SeqCst) >= cfg.max_clients {
                        refused_busy.fetch_add(1, Ordering::Relaxed);
                        let max = cfg.max_clients;
                        let why = format!(
                            "this server already serves {max} connections (--max-clients {max}): \
                             try again later"
                        );
                        close_with_reason(&mut stream, peer, &why, log);
                        continue;
                    }
                    active.fetch_add(1, Ordering::SeqCst);
                    let (ctx, mr, records, totals, active) =
                        (&ctx, &mr, &records, &totals, &active);
                    let spawned = std::thread::Builder::new()
                        .name("rdma-serve-client".into())
                        .spawn_scoped(scope, move || {
                            if let Some(rec) = serve_client(cfg, ctx, mr, stream, peer, stop, log) {
                                let rec = add_to_total(totals, rec, log);
                                if let Ok(mut r) = records.lock() {
                                    r.push(rec);
                                }
                            }
                            active.fetch_sub(1, Ordering::SeqCst);
                        });
                    if let Err(e) = spawned {
                        // The closure (and the connection) is dropped:
                        // the client sees the connection close.
                        active.fetch_sub(1, Ordering::SeqCst);
                        log(&format!(
                            "client {peer} closed: no thread to serve it ({e})"
                        ));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    log(&format!("accept failed: {e}"));
                    // EMFILE and the like: do not spin on them.
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    });
    let clients = records.into_inner().unwrap_or_else(|p| p.into_inner());
    let total = totals.into_inner().unwrap_or_else(|p| p.into_inner());
    let after = counters::read(&cfg.sysfs_root, &ctx.name, ctx.port);
    drop(mr);
    Ok(ServeReport {
        device: ctx.name.clone(),
        port: ctx.port,
        link_layer: ctx.link_layer_name(),
        gid_index: ctx.gid_index,
        gid: gid_text(&ctx.gid),
        listen: cfg.listen.to_string(),
        buffer_bytes: cfg.buffer_bytes,
        clients,
        refused_busy: refused_busy.into_inner(),
        refused_not_allowed: refused_not_allowed.into_inner(),
        secret_required: cfg.secret.is_some(),
        allow: cfg.allow.iter().map(|n| n.to_string()).collect(),
        max_clients: cfg.max_clients,
        total,
        buffer_sha256: buf.sha256(),
        buffer_placement: buf.placement.clone(),
        nic_counters: before.zip(after).and_then(|(b, a)| counters::delta(&b, &a)),
        duration_s: start.elapsed().as_secs_f64(),
    })
}

/// Closes a connection that will not be served, saying why (best effort:
/// the peer may already be gone, and nothing here may block the accept
/// loop).
fn close_with_reason(s: &mut TcpStream, peer: SocketAddr, why: &str, log: &(dyn Fn(&str) + Sync)) {
    log(&format!("client {peer} refused: {why}"));
    let _ = s.set_nonblocking(true);
    // Whatever the client sent already is read first, so the close is a
    // FIN after the refusal, not a reset that could discard it.
    let _ = s.read(&mut [0u8; 4096]);
    let _ = handshake::server_refuse(&peer.to_string(), s, why);
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Adds a finished client's report to the session's total, with checked
/// arithmetic: a report that would overflow it is the client's protocol
/// error, recorded and left out of the total.
fn add_to_total(
    totals: &Mutex<DoneRecord>,
    mut rec: ClientRecord,
    log: &(dyn Fn(&str) + Sync),
) -> ClientRecord {
    let Some(d) = rec.done else { return rec };
    let Ok(mut t) = totals.lock() else { return rec };
    match t.checked_add(&d) {
        Some(sum) => *t = sum,
        None => {
            let why = format!(
                "protocol error: it reported {} RDMA WRITEs ({} bytes) and {} RDMA READs ({} \
                 bytes), which overflow the session's total: left out of it",
                d.writes, d.write_bytes, d.reads, d.read_bytes
            );
            log(&format!("client {}: {why}", rec.peer));
            rec.error = Some(why);
        }
    }
    rec
}

/// A connection read under a deadline and the stop flag: each read waits
/// at most [`POLL`] (the socket's read timeout), so neither a silent nor a
/// slow peer holds the thread past `deadline`, and a stop is seen at once.
struct Guarded<'a> {
    s: &'a TcpStream,
    /// None: no deadline (a connected client may run as long as it likes).
    deadline: Option<Instant>,
    timeout: Duration,
    stop: &'a AtomicBool,
}

impl<'a> Guarded<'a> {
    fn new(s: &'a TcpStream, timeout: Duration, stop: &'a AtomicBool) -> Self {
        Guarded {
            s,
            deadline: Some(Instant::now() + timeout),
            timeout,
            stop,
        }
    }

    fn unbounded(s: &'a TcpStream, stop: &'a AtomicBool) -> Self {
        Guarded {
            s,
            deadline: None,
            timeout: Duration::ZERO,
            stop,
        }
    }

    /// Ok(()) while waiting may go on; the error that ends it otherwise.
    fn check(&self) -> std::io::Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("serving stopped (SIGINT/SIGTERM)"));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "not complete within {} s (--handshake-timeout): connection dropped",
                    self.timeout.as_secs()
                ),
            ));
        }
        Ok(())
    }

    /// Waits until the peer sent something: Ok(true), or closed: Ok(false).
    /// What the peer sent before a stop is still seen (its done message).
    fn readable(&mut self) -> std::io::Result<bool> {
        loop {
            match self.s.peek(&mut [0u8; 1]) {
                Ok(n) => return Ok(n > 0),
                Err(e) if is_wait(&e) => self.check()?,
                Err(e) => return Err(e),
            }
        }
    }
}

fn is_wait(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

impl Read for Guarded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Bytes already here are taken even after a stop; a peer that
        // sends nothing more is waited for only until the deadline.
        loop {
            match (&*self.s).read(buf) {
                Err(e) if is_wait(&e) => self.check()?,
                r => return r,
            }
        }
    }
}

impl Write for Guarded<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (&*self.s).write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.s).flush()
    }
}

fn serve_client(
    cfg: &ServeConfig,
    ctx: &Arc<Context>,
    mr: &Arc<MemoryRegion>,
    s: TcpStream,
    peer: SocketAddr,
    stop: &AtomicBool,
    log: &(dyn Fn(&str) + Sync),
) -> Option<ClientRecord> {
    let start = Instant::now();
    let name = peer.to_string();
    let mut rec = ClientRecord {
        peer: name.clone(),
        qp_num: 0,
        peer_qp_num: 0,
        duration_s: 0.0,
        done: None,
        error: None,
    };
    let sock = |e| RdmaError::io("socket", e);
    let setup = s
        .set_nonblocking(false)
        .and_then(|_| s.set_read_timeout(Some(POLL)))
        .and_then(|_| s.set_write_timeout(Some(cfg.handshake_timeout)));
    if let Err(e) = setup {
        log(&format!("client {name}: {}", sock(e)));
        return None;
    }
    // A client's reachability check connects and closes at once: not a
    // client, nothing to record; nor is one that a stop cut off before it
    // said anything.
    let mut g = Guarded::new(&s, cfg.handshake_timeout, stop);
    match g.readable() {
        Ok(true) => {}
        Ok(false) => return None,
        Err(_) if stop.load(Ordering::Relaxed) => return None,
        Err(e) => {
            let e = RdmaError::io(format!("waiting for the hello of {name}"), e);
            log(&format!("client {name}: {e}"));
            rec.error = Some(e.to_string());
            rec.duration_s = start.elapsed().as_secs_f64();
            return Some(rec);
        }
    }
    enum Answered {
        Query,
        Served(Option<Done>),
    }
    let r = (|| -> Result<Answered, RdmaError> {
        let opening = handshake::server_read_opening(&name, &mut g)?;
        if let Some(secret) = &cfg.secret {
            handshake::server_authenticate(&name, &mut g, secret, &opening)?;
        }
        let hello = match opening {
            Opening::Hello(h) => h,
            Opening::Query => {
                let info = ServerInfo {
                    link_layer: ctx.link_layer(),
                    buffer_bytes: mr.len(),
                    max_rd_atomic: ctx.limits.responder_depth(),
                };
                handshake::server_info(&name, &mut g, &info)?;
                return Ok(Answered::Query);
            }
        };
        rec.peer_qp_num = hello.qp_num;
        refuse_misfit(&name, &mut g, &hello, ctx, mr)?;
        // The responder posts nothing: one-sided operations make no
        // completions here; the CQ exists because a QP needs one.
        let cq = CompletionQueue::new(ctx, 1)?;
        // Serve as many READs at once as the client's QP will issue, up
        // to what this device allows; the accept tells the client.
        let depth = hello.rd_atomic.min(ctx.limits.responder_depth());
        let qp = QueuePair::new(
            ctx,
            &cq,
            QpParams {
                max_send_wr: 1,
                max_inline: 0,
                rd_atomic: depth.min(ctx.limits.initiator_depth()),
                dest_rd_atomic: depth,
            },
        )?;
        rec.qp_num = qp.qp_num();
        qp.connect(&hello, Access::Remote)?;
        handshake::server_accept(&name, &mut g, &qp.endpoint(Some(mr), 0))?;
        log(&format!(
            "client {name} connected: QP {} <- QP {}, {depth} RDMA READs served at once",
            qp.qp_num(),
            hello.qp_num
        ));
        wait_done(&name, &s, cfg.handshake_timeout, stop).map(Answered::Served)
    })();
    rec.duration_s = start.elapsed().as_secs_f64();
    match r {
        Ok(Answered::Query) => return None,
        Ok(Answered::Served(Some(d))) => {
            log(&format!(
                "client {name} done after {:.2} s: {} RDMA WRITEs ({} bytes), {} RDMA READs ({} bytes)",
                rec.duration_s, d.writes, d.write_bytes, d.reads, d.read_bytes
            ));
            rec.done = Some(d.into());
        }
        Ok(Answered::Served(None)) => log(&format!(
            "client {name} went away after {:.2} s without reporting",
            rec.duration_s
        )),
        Err(e) => {
            log(&format!("client {name}: {e}"));
            rec.error = Some(e.to_string());
        }
    }
    Some(rec)
}

/// Refuses (and tells the peer why) a client whose messages do not fit
/// the served buffer or whose link layer is not this port's.
fn refuse_misfit(
    name: &str,
    g: &mut Guarded<'_>,
    hello: &Endpoint,
    ctx: &Context,
    mr: &MemoryRegion,
) -> Result<(), RdmaError> {
    let why = if u64::from(hello.msg_bytes) > mr.len() {
        format!(
            "its {}-byte messages do not fit the served {}-byte buffer: serve a larger --buffer",
            hello.msg_bytes,
            mr.len()
        )
    } else if hello.link_layer != ctx.link_layer() {
        format!(
            "link layer {} does not match this port's {}",
            hello.link_layer,
            ctx.link_layer()
        )
    } else {
        return Ok(());
    };
    handshake::server_refuse(name, g, &why)?;
    Err(RdmaError::Peer {
        peer: name.to_string(),
        message: why,
    })
}

/// A connected client's done message, or None where it went away (or a
/// stop came) without one. The client may run as long as it likes; once
/// it starts its done message, that has `timeout` to arrive.
fn wait_done(
    name: &str,
    s: &TcpStream,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<Option<Done>, RdmaError> {
    let mut wait = Guarded::unbounded(s, stop);
    match wait.readable() {
        Ok(false) => return Ok(None),
        Ok(true) => {}
        Err(_) if stop.load(Ordering::Relaxed) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
        Err(e) => return Err(RdmaError::io(format!("reading from {name}"), e)),
    }
    let mut g = Guarded::new(s, timeout, stop);
    match handshake::server_wait_done(name, &mut g) {
        Ok(d) => Ok(d),
        Err(RdmaError::Io { cause, .. }) if cause.kind() == std::io::ErrorKind::ConnectionReset => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl ServeReport {
    /// The closing text `dmalab rdma serve` prints.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "served {} client connection(s) in {:.1} s on {} port {}: {} RDMA WRITEs ({} bytes) into \
             and {} RDMA READs ({} bytes) from the {}-byte buffer\n",
            self.clients.len(),
            self.duration_s,
            self.device,
            self.port,
            self.total.writes,
            self.total.write_bytes,
            self.total.reads,
            self.total.read_bytes,
            self.buffer_bytes
        );
        s.push_str(&format!("buffer sha256 {}\n", self.buffer_sha256));
        if let Some(l) = self.buffer_placement.line() {
            s.push_str(&format!("buffer {l}\n"));
        }
        match &self.nic_counters {
            Some(d) => s.push_str(&format!("{}\n", d.summary())),
            None => s.push_str("NIC counters: none on this port\n"),
        }
        s
    }
}
