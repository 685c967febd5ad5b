//! `dmalab rdma serve`: the peer a `dmalab load --engine rdma --target
//! HOST:PORT` client connects to.
//!
//! One buffer registered once; for every TCP connection one RC queue pair
//! over it (the handshake in [`crate::handshake`]), kept until the client
//! says it is done or goes away. Serves any number of clients at once until
//! the stop flag rises (SIGINT/SIGTERM), then reports what it served.

use crate::buffer::RawBuffer;
use crate::counters::{self, Delta};
use crate::error::RdmaError;
use crate::handshake::{self, Done, Opening, ServerInfo};
use crate::verbs::{
    gid_text, CompletionQueue, Context, DeviceConfig, MemoryRegion, QpParams, QueuePair,
};
use serde::Serialize;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
#[derive(Clone, Copy, Debug, Serialize)]
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
    /// Sum of what the clients reported.
    pub total: DoneRecord,
    /// SHA-256 of the served buffer when serving ended (hex).
    pub buffer_sha256: String,
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
    let buf = RawBuffer::new(cfg.buffer_bytes, cfg.fill, "--buffer")?;
    // SAFETY: buf outlives the MR (mr is dropped before buf below: every
    // connection thread is joined and its Arc released first).
    let mr = Arc::new(unsafe { MemoryRegion::register(&ctx, buf.ptr(), buf.len(), "--buffer")? });
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
    std::thread::scope(|scope| {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, peer)) => {
                    let (ctx, mr, records) = (&ctx, &mr, &records);
                    scope.spawn(move || {
                        if let Some(rec) = serve_client(ctx, mr, stream, peer, stop, log) {
                            if let Ok(mut r) = records.lock() {
                                r.push(rec);
                            }
                        }
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => log(&format!("accept failed: {e}")),
            }
        }
    });
    let clients = records.into_inner().unwrap_or_else(|p| p.into_inner());
    let after = counters::read(&cfg.sysfs_root, &ctx.name, ctx.port);
    drop(mr);
    let mut total = DoneRecord {
        writes: 0,
        reads: 0,
        write_bytes: 0,
        read_bytes: 0,
    };
    for d in clients.iter().filter_map(|c| c.done) {
        total.writes += d.writes;
        total.reads += d.reads;
        total.write_bytes += d.write_bytes;
        total.read_bytes += d.read_bytes;
    }
    Ok(ServeReport {
        device: ctx.name.clone(),
        port: ctx.port,
        link_layer: ctx.link_layer_name(),
        gid_index: ctx.gid_index,
        gid: gid_text(&ctx.gid),
        listen: cfg.listen.to_string(),
        buffer_bytes: cfg.buffer_bytes,
        clients,
        total,
        buffer_sha256: buf.sha256(),
        nic_counters: before.zip(after).and_then(|(b, a)| counters::delta(&b, &a)),
        duration_s: start.elapsed().as_secs_f64(),
    })
}

fn serve_client(
    ctx: &Arc<Context>,
    mr: &Arc<MemoryRegion>,
    mut s: TcpStream,
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
    // A client's reachability check connects and closes at once: not a
    // client, nothing to record.
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    if matches!(s.peek(&mut [0u8; 1]), Ok(0)) {
        return None;
    }
    enum Answered {
        Query,
        Served(Option<Done>),
    }
    let r = (|| -> Result<Answered, RdmaError> {
        s.set_nonblocking(false)
            .map_err(|e| RdmaError::io("socket", e))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| RdmaError::io("socket", e))?;
        let hello = match handshake::server_read_opening(&name, &mut s)? {
            Opening::Hello(h) => h,
            Opening::Query => {
                let info = ServerInfo {
                    link_layer: ctx.link_layer(),
                    buffer_bytes: mr.len(),
                };
                handshake::server_info(&name, &mut s, &info)?;
                return Ok(Answered::Query);
            }
        };
        rec.peer_qp_num = hello.qp_num;
        if u64::from(hello.msg_bytes) > mr.len() {
            let why = format!(
                "its {}-byte messages do not fit the served {}-byte buffer: serve a larger --buffer",
                hello.msg_bytes,
                mr.len()
            );
            handshake::server_refuse(&name, &mut s, &why)?;
            return Err(RdmaError::Peer {
                peer: name.clone(),
                message: why,
            });
        }
        if hello.link_layer != ctx.link_layer() {
            let why = format!(
                "link layer {} does not match this port's {}",
                hello.link_layer,
                ctx.link_layer()
            );
            handshake::server_refuse(&name, &mut s, &why)?;
            return Err(RdmaError::Peer {
                peer: name.clone(),
                message: why,
            });
        }
        // The responder posts nothing: one-sided operations make no
        // completions here; the CQ exists because a QP needs one.
        let cq = CompletionQueue::new(ctx, 1)?;
        let qp = QueuePair::new(
            ctx,
            &cq,
            QpParams {
                max_send_wr: 1,
                max_inline: 0,
                rd_atomic: 16,
            },
        )?;
        rec.qp_num = qp.qp_num();
        qp.connect(&hello)?;
        handshake::server_accept(&name, &mut s, &qp.endpoint(mr, 0))?;
        log(&format!(
            "client {name} connected: QP {} <- QP {}",
            qp.qp_num(),
            hello.qp_num
        ));
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| RdmaError::io("socket", e))?;
        loop {
            match handshake::server_wait_done(&name, &mut s) {
                Ok(d) => return Ok(Answered::Served(d)),
                Err(RdmaError::Io { cause, .. })
                    if matches!(
                        cause.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(Answered::Served(None));
                    }
                }
                Err(RdmaError::Io { cause, .. })
                    if cause.kind() == std::io::ErrorKind::ConnectionReset =>
                {
                    return Ok(Answered::Served(None))
                }
                Err(e) => return Err(e),
            }
        }
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
        match &self.nic_counters {
            Some(d) => s.push_str(&format!("{}\n", d.summary())),
            None => s.push_str("NIC counters: none on this port\n"),
        }
        s
    }
}
