//! The `rdma` engine: one-sided RDMA WRITE and READ over reliable-connected
//! queue pairs (libibverbs, loaded at run time by `dmalab_rdma`), to a
//! `dmalab rdma serve` peer or, with `--target loopback`, between two QPs
//! of the local device.
//!
//! The shared DMA buffer is registered once per run (one memory region per
//! registration piece); each worker opens its own completion queue and
//! `--qps` queue pairs. The pattern stream decides the local offset of each
//! command as for every engine; `--device-offsets` decides the remote
//! offset; `--rdma-op` decides the operation.
//!
//! Memory's point of view: an RDMA WRITE makes this NIC read this host's
//! memory (and the peer's NIC write the peer's); an RDMA READ makes this
//! NIC write this host's memory (and the peer's NIC read the peer's).

use super::{
    options, refuse_allow_destroy, refuse_direction_both, refuse_foreign_flags, BufferPiece,
    Command, Completion, Driver, Engine, EngineError, EngineKind, EngineSpec, Op, TargetInfo,
    TargetRequest,
};
use crate::plan::Plan;
use crate::target::TargetError;
use dmalab_core::host::DeviceInfo;
use dmalab_core::UsageError;
use dmalab_rdma::access::Secret;
use dmalab_rdma::client::{
    check_mtu, read_depth, Client, ClientConfig, Finished, LocalPiece, MixOrder, PeerTarget,
    RdmaOp, Worker, DEFAULT_REMOTE_BUFFER,
};
use dmalab_rdma::verbs::{Context, DeviceConfig};
use dmalab_rdma::RdmaError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One worker's queue pairs behind the engine interface.
pub struct RdmaEngine {
    worker: Worker,
    pieces: Vec<BufferPiece>,
    /// Flush and Noop commands: no RDMA operation, completed at once.
    immediate: Vec<Completion>,
    finished: Vec<Finished>,
    /// A lost peer or failed completion, reported on the call after the one
    /// that handed back the completions before it (so none is lost).
    deferred: Option<String>,
}

impl RdmaEngine {
    /// Wraps a connected worker over the shared buffer's `pieces`.
    pub fn new(worker: Worker, pieces: Vec<BufferPiece>) -> Self {
        Self {
            worker,
            pieces,
            immediate: Vec::new(),
            finished: Vec::new(),
            deferred: None,
        }
    }
}

fn peer_error(message: String) -> EngineError {
    EngineError::io("rdma", std::io::Error::other(message))
}

impl Engine for RdmaEngine {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        if matches!(cmd.op, Op::Flush | Op::Noop) || cmd.len == 0 {
            self.immediate.push(Completion { slot, result: 0 });
            return Ok(());
        }
        let piece = self.pieces.get(usize::from(cmd.piece)).ok_or_else(|| {
            peer_error(format!(
                "command names buffer piece {} of {}",
                cmd.piece,
                self.pieces.len()
            ))
        })?;
        let inside = cmd.buf_offset >= piece.buf_offset
            && cmd.buf_offset + u64::from(cmd.len) <= piece.buf_offset + piece.len as u64;
        if !inside {
            return Err(peer_error(format!(
                "command at buffer offset {} ({} bytes) is outside its piece",
                cmd.buf_offset, cmd.len
            )));
        }
        // SAFETY: offset and length lie inside the piece (checked above),
        // which the run's buffer keeps mapped and the client registered.
        let addr = unsafe { piece.addr.add((cmd.buf_offset - piece.buf_offset) as usize) };
        // SAFETY: addr..addr+len lies inside registered piece `cmd.piece`.
        unsafe {
            self.worker
                .post(slot, usize::from(cmd.piece), addr, cmd.len, cmd.dev_offset)
        }
        .map_err(|e| peer_error(e.to_string()))
    }

    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        if let Some(e) = self.deferred.take() {
            return Err(peer_error(e));
        }
        let had = self.immediate.len();
        out.append(&mut self.immediate);
        let min = if had > 0 {
            0
        } else {
            min_complete.saturating_sub(had)
        };
        self.finished.clear();
        let r = self.worker.reap(min, timeout, &mut self.finished);
        out.extend(self.finished.iter().map(|f| Completion {
            slot: f.slot,
            result: f.result,
        }));
        if let Err(e) = r {
            self.deferred = Some(e.to_string());
        }
        Ok(())
    }
}

/// `--engine rdma`'s own flags, resolved (the plan's options, key `rdma`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPlan {
    /// `--rdma-op`.
    pub op: RdmaOp,
    /// `--qps`: queue pairs per worker.
    pub qps: u32,
    /// `--rdma-device` (None: the first).
    pub device: Option<String>,
    /// `--rdma-port`.
    pub port: u8,
    /// `--gid-index` (None: chosen).
    pub gid_index: Option<u8>,
    /// `--rdma-inline`.
    pub inline: bool,
    /// `--rdma-secret-file`: the file holding the server's shared secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// `--signal-every`: one work request in this many is signalled.
    #[serde(default = "one")]
    pub signal_every: u32,
    /// `--mtu`: the path MTU asked for, bytes (None: the port's active MTU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu_bytes: Option<u32>,
    /// `--rdma-mix-order`.
    #[serde(default)]
    pub mix_order: MixOrder,
}

fn one() -> u32 {
    1
}

/// The flags only `--engine rdma` takes (other engines refuse them).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct RdmaArgs {
    /// --engine rdma: write (this NIC reads this host's memory), read (it
    /// writes it) or mixed[:READ_PCT] (each command a READ with that
    /// probability; mixed = mixed:50).
    #[cfg_attr(feature = "clap", arg(long, value_name = "OP"))]
    pub rdma_op: Option<String>,
    /// --engine rdma: queue pairs per worker (the paper's multiplexing).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub qps: Option<u32>,
    /// --engine rdma: size of the remote region the commands address (the
    /// peer must serve at least this much; loopback allocates it).
    /// Default 64M.
    #[cfg_attr(feature = "clap", arg(long, value_name = "SIZE"))]
    pub rdma_remote_buffer: Option<String>,
    /// --engine rdma: the RDMA device (default: the first).
    #[cfg_attr(feature = "clap", arg(long, value_name = "NAME"))]
    pub rdma_device: Option<String>,
    /// --engine rdma: the device's port.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub rdma_port: Option<u8>,
    /// --engine rdma: GID index (default: 0 on InfiniBand, the first
    /// IPv4-mapped GID on RoCE).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub gid_index: Option<u8>,
    /// --engine rdma: post small writes as inline data (the CPU copies them;
    /// the NIC does not read the buffer for them).
    #[cfg_attr(feature = "clap", arg(long))]
    pub rdma_inline: bool,
    /// --engine rdma: a file (yours, mode 0600) holding the shared secret of
    /// a `dmalab rdma serve --secret-file`.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PATH"))]
    pub rdma_secret_file: Option<PathBuf>,
    /// --engine rdma: ask for a completion on one work request in N (CQ
    /// moderation, as perftest's --cq-mod); the unsignalled ones are
    /// counted when a later one of their QP completes. Default 1.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub signal_every: Option<u32>,
    /// --engine rdma: path MTU in bytes (256, 512, 1024, 2048 or 4096; at
    /// most the port's active MTU, which is the default).
    #[cfg_attr(feature = "clap", arg(long, value_name = "BYTES"))]
    pub mtu: Option<u32>,
    /// --engine rdma: how --rdma-op mixed:PCT orders its READs: random (each
    /// command a READ with probability PCT) or interleave (spread evenly,
    /// exactly PCT in every 100 commands of a worker; mixed:50 alternates).
    #[cfg_attr(feature = "clap", arg(long, value_name = "ORDER", value_enum))]
    pub rdma_mix_order: Option<MixOrder>,
}

impl RdmaArgs {
    /// The engine's part of the plan: None for other engines, which refuse
    /// every rdma flag.
    pub fn plan(&self, engine: EngineKind) -> Result<Option<RdmaPlan>, UsageError> {
        if engine != EngineKind::Rdma {
            let given = [
                ("--rdma-op", self.rdma_op.is_some()),
                ("--qps", self.qps.is_some()),
                ("--rdma-remote-buffer", self.rdma_remote_buffer.is_some()),
                ("--rdma-device", self.rdma_device.is_some()),
                ("--rdma-port", self.rdma_port.is_some()),
                ("--gid-index", self.gid_index.is_some()),
                ("--rdma-inline", self.rdma_inline),
                ("--rdma-secret-file", self.rdma_secret_file.is_some()),
                ("--signal-every", self.signal_every.is_some()),
                ("--mtu", self.mtu.is_some()),
                ("--rdma-mix-order", self.rdma_mix_order.is_some()),
            ];
            refuse_foreign_flags(&given, |flag| {
                UsageError::new(flag, "only with --engine rdma")
            })?;
            return Ok(None);
        }
        let op: RdmaOp = self.rdma_op.as_deref().unwrap_or("write").parse()?;
        if self.rdma_mix_order.is_some() && !matches!(op, RdmaOp::Mixed { .. }) {
            return Err(UsageError::new(
                "--rdma-mix-order",
                format!("orders the READs of --rdma-op mixed:PCT, not of {op}: leave it out or use mixed"),
            ));
        }
        Ok(Some(RdmaPlan {
            op,
            qps: self.qps.unwrap_or(1),
            device: self.rdma_device.clone(),
            port: self.rdma_port.unwrap_or(1),
            gid_index: self.gid_index,
            inline: self.rdma_inline,
            secret_file: self.rdma_secret_file.clone(),
            signal_every: self.signal_every.unwrap_or(1),
            mtu_bytes: self.mtu,
            mix_order: self.rdma_mix_order.unwrap_or_default(),
        }))
    }

    /// Which flag sizes the target, and its text: for the rdma engine the
    /// target is the remote region (`--rdma-remote-buffer`; it creates no
    /// file, so `--size` is refused), for the others `--size`.
    pub fn size_option<'a>(
        &'a self,
        engine: EngineKind,
        size: Option<&'a str>,
    ) -> Result<(&'static str, Option<&'a str>), UsageError> {
        if engine != EngineKind::Rdma {
            return Ok(("--size", size));
        }
        if size.is_some() && self.rdma_remote_buffer.is_some() {
            return Err(UsageError::new(
                "--size",
                "the rdma engine creates no file: its remote region is --rdma-remote-buffer",
            ));
        }
        Ok(("--rdma-remote-buffer", self.rdma_remote_buffer.as_deref()))
    }
}

impl RdmaPlan {
    /// The direction from this host's memory's point of view: an RDMA
    /// WRITE makes this NIC read memory, a READ makes it write memory; a
    /// mix keeps what `--direction` said (the engine's facts count each
    /// kind).
    pub fn memory_direction(&self, asked: crate::plan::Direction) -> crate::plan::Direction {
        use crate::plan::Direction;
        match self.op {
            // Kept, so that preflight refuses it by name.
            _ if asked == Direction::Both => Direction::Both,
            RdmaOp::Write => Direction::Read,
            RdmaOp::Read => Direction::Write,
            _ => asked,
        }
    }
}

/// The rdma engine's lifecycle: the peer is checked in `preflight` (the
/// device opened, the server asked what it serves), the shared buffer is
/// registered once when the first worker opens, each worker connects its
/// own QPs.
#[derive(Default)]
pub struct RdmaDriver {
    cfg: Option<ClientConfig>,
    seed: u64,
    workers: usize,
    /// Printed when the run starts: `--iodepth` lowered to the device's
    /// queues or for READs, `--signal-every` to half a queue pair's queue.
    notes: Vec<String>,
    client: Mutex<Option<Arc<Client>>>,
}

fn usage(option: &str, e: RdmaError) -> UsageError {
    match e {
        RdmaError::Usage(u) => u,
        other => UsageError::new(option, other.to_string()),
    }
}

fn engine_error(e: RdmaError) -> EngineError {
    EngineError::io("rdma", std::io::Error::other(e.to_string()))
}

impl RdmaDriver {
    fn client(&self) -> Option<Arc<Client>> {
        self.client.lock().ok().and_then(|c| c.clone())
    }
}

impl Driver for RdmaDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::Rdma
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        refuse_allow_destroy(req, "the rdma engine writes no storage: leave it out")?;
        let Some(t) = &req.target else {
            return Err(UsageError::new(
                "--target",
                "--engine rdma needs --target HOST:PORT of a `dmalab rdma serve`, or --target loopback",
            ));
        };
        let text = t.to_string_lossy().into_owned();
        let _peer: PeerTarget = text.parse()?;
        let size = req.size_bytes.unwrap_or(DEFAULT_REMOTE_BUFFER);
        if size == 0 {
            return Err(UsageError::new(
                "--rdma-remote-buffer",
                "must be greater than 0",
            ));
        }
        Ok(TargetInfo {
            path: Some(PathBuf::from(text)),
            exists: true,
            kind: "rdma".into(),
            size_bytes: size,
            logical_block_size: 1,
            creates: false,
        })
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        refuse_direction_both(plan)?;
        let Some(r) = options::rdma(plan.engine_options.as_ref()) else {
            return Err(UsageError::new(
                "--engine",
                "the rdma engine's flags are missing from the plan",
            ));
        };
        let target: PeerTarget = plan
            .target
            .as_deref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
            .parse()?;
        let max_msg_bytes = u32::try_from(plan.stream.command_bytes()).map_err(|_| {
            UsageError::new(
                "--bs",
                "one RDMA message carries at most 4 GiB - 1: use fewer blocks per command",
            )
        })?;
        let cfg = ClientConfig {
            device: DeviceConfig {
                device: r.device.clone(),
                port: r.port,
                gid_index: r.gid_index,
                device_flag: "--rdma-device",
            },
            target: target.clone(),
            op: r.op,
            qps: r.qps,
            iodepth: plan.iodepth,
            iodepth_asked: plan.iodepth,
            max_msg_bytes,
            remote_buffer_bytes: plan.target_size_bytes,
            inline: r.inline,
            sysfs_root: PathBuf::from("/sys/class/infiniband"),
            secret: r
                .secret_file
                .as_deref()
                .map(|p| Secret::read(p, "--rdma-secret-file"))
                .transpose()?,
            signal_every: r.signal_every,
            signal_every_asked: r.signal_every,
            mtu_bytes: r.mtu_bytes,
            mix_order: r.mix_order,
        };
        let mut cfg = cfg;
        cfg.validate()?;
        // The device, port and GID now, so their errors are one line and
        // exit 2 before anything runs.
        let ctx = Context::open(&cfg.device).map_err(|e| usage("--rdma-device", e))?;
        check_mtu(
            cfg.mtu_bytes,
            ctx.mtu_bytes(),
            &format!("{} port {}", ctx.name, ctx.port),
        )?;
        // The responder's READ depth: this device's for loopback, the
        // server's (from its info) for a peer.
        let mut peer_dest = ctx.limits.responder_depth();
        if let PeerTarget::Peer(addr) = &target {
            let info = dmalab_rdma::client::query_server(addr, cfg.secret.as_ref())
                .map_err(|e| usage("--target", e))?;
            peer_dest = info.max_rd_atomic;
            if info.link_layer != ctx.link_layer() {
                return Err(UsageError::new(
                    "--target",
                    format!(
                        "{addr} serves on {} and {} is {}: InfiniBand and RoCE ports cannot connect",
                        if info.link_layer == 1 { "InfiniBand" } else { "RoCE" },
                        ctx.name,
                        ctx.link_layer_name()
                    ),
                ));
            }
            if plan.target_size_bytes > info.buffer_bytes {
                return Err(UsageError::new(
                    "--rdma-remote-buffer",
                    format!(
                        "{} bytes is more than the {} bytes {addr} serves: use --rdma-remote-buffer {} \
                         or less, or serve a larger --buffer",
                        plan.target_size_bytes, info.buffer_bytes, info.buffer_bytes
                    ),
                ));
            }
        }
        // The device's queues first, the signalling interval last: it
        // follows the depth that runs.
        self.notes = [
            cfg.cap_queue(ctx.limits.max_qp_wr, &ctx.name)?,
            cfg.cap_cq(ctx.limits.max_cqe, &ctx.name)?,
            cfg.cap_reads(read_depth(&ctx.limits, peer_dest)),
            cfg.cap_signal_every(),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.cfg = Some(cfg);
        self.seed = plan.stream.seed;
        self.workers = plan.workers;
        Ok(())
    }

    fn prepare(&mut self, plan: &mut Plan) -> Result<(), TargetError> {
        // Nothing to create: the registrations and connections are made when
        // the workers open (the shared buffer exists only then). Requests
        // beyond what the device's queues hold, or READs beyond what the
        // QPs keep outstanding, are not queued: the plan (and so the
        // result) carries the depth that ran.
        for note in &self.notes {
            eprintln!("dmalab: note: {note}");
        }
        if let Some(cfg) = &self.cfg {
            plan.iodepth = cfg.iodepth;
        }
        Ok(())
    }

    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
        let cfg = self.cfg.as_ref().ok_or_else(|| EngineError::Unsupported {
            feature: "rdma".into(),
            detail: "open before preflight".into(),
        })?;
        let client = {
            let mut slot = self.client.lock().map_err(|_| {
                engine_error(RdmaError::io(
                    "rdma",
                    std::io::Error::other("a worker panicked"),
                ))
            })?;
            match &*slot {
                Some(c) => c.clone(),
                None => {
                    let pieces: Vec<LocalPiece> = spec
                        .pieces
                        .iter()
                        .map(|p| LocalPiece {
                            addr: p.addr,
                            len: p.len,
                        })
                        .collect();
                    // SAFETY: the pieces are the run's shared DMA buffer,
                    // which outlives every engine and this driver's client
                    // (the run drops its workers before the buffer, and the
                    // driver's client is only used by them).
                    let c = Arc::new(unsafe { Client::open(cfg, &pieces) }.map_err(engine_error)?);
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        let worker = client
            .worker(self.seed.wrapping_add(spec.worker as u64))
            .map_err(engine_error)?;
        Ok(Box::new(RdmaEngine::new(worker, spec.pieces.clone())))
    }

    fn header(&self) -> String {
        let Some(c) = self.client() else {
            return String::new();
        };
        let f = c.facts(self.workers);
        let mut s = format!(
            "rdma: {} port {} ({}, GID index {} {}, MTU {} B) -> {}, --rdma-op {}, {} QP(s)\n",
            f.device, f.port, f.link_layer, f.gid_index, f.gid, f.mtu_bytes, f.target, f.op, f.qps
        );
        s.push_str(&format!(
            "rdma: dmalab counted {} RDMA WRITEs ({} bytes) and {} RDMA READs ({} bytes), {} failed\n",
            f.moved.writes, f.moved.write_bytes, f.moved.reads, f.moved.read_bytes, f.moved.errors
        ));
        match &f.nic_counters {
            Some(d) => s.push_str(&format!("rdma: {}\n", d.summary())),
            None => s.push_str("rdma: the port has no NIC counters\n"),
        }
        if let Some(e) = &f.first_error {
            s.push_str(&format!("rdma: first error: {e}\n"));
        }
        s
    }

    fn device(&self, plan: &Plan) -> Option<DeviceInfo> {
        let c = self.client()?;
        let ctx = c.context();
        Some(DeviceInfo {
            path: plan
                .target
                .as_deref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            kind: "rdma".into(),
            block_device: None,
            disk: None,
            model: format!("{} port {} ({})", ctx.name, ctx.port, ctx.link_layer_name()),
            size_bytes: plan.target_size_bytes,
            logical_block_size: 1,
            physical_block_size: 1,
            filesystem: None,
        })
    }

    fn facts(&self) -> Option<(&'static str, serde_json::Value)> {
        let c = self.client()?;
        serde_json::to_value(c.facts(self.workers))
            .ok()
            .map(|v| ("rdma", v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(target: Option<&str>) -> TargetRequest {
        TargetRequest {
            target: target.map(PathBuf::from),
            size_bytes: None,
            allow_destroy: None,
        }
    }

    #[test]
    fn inspect_takes_a_peer_or_loopback_and_the_remote_region() {
        let mut d = RdmaDriver::default();
        let t = d.inspect(&req(Some("loopback"))).unwrap();
        assert_eq!(t.kind, "rdma");
        assert_eq!(t.size_bytes, DEFAULT_REMOTE_BUFFER);
        assert!(!t.creates);
        let mut r = req(Some("10.1.2.3:18515"));
        r.size_bytes = Some(1 << 20);
        assert_eq!(d.inspect(&r).unwrap().size_bytes, 1 << 20);
    }

    #[test]
    fn inspect_refuses_what_the_engine_cannot_do() {
        let mut d = RdmaDriver::default();
        assert_eq!(d.inspect(&req(None)).unwrap_err().option, "--target");
        assert_eq!(
            d.inspect(&req(Some("/dev/nvme0n1"))).unwrap_err().option,
            "--target"
        );
        let mut r = req(Some("loopback"));
        r.allow_destroy = Some(PathBuf::from("/dev/sda"));
        assert_eq!(d.inspect(&r).unwrap_err().option, "--allow-destroy");
        let mut r = req(Some("loopback"));
        r.size_bytes = Some(0);
        assert_eq!(d.inspect(&r).unwrap_err().option, "--rdma-remote-buffer");
    }

    #[test]
    fn the_plan_field_round_trips_with_the_op_as_text() {
        let p = RdmaPlan {
            op: RdmaOp::Mixed { read_pct: 30 },
            qps: 4,
            device: Some("rxe0".into()),
            port: 1,
            gid_index: Some(1),
            inline: false,
            secret_file: None,
            signal_every: 8,
            mtu_bytes: Some(1024),
            mix_order: MixOrder::Interleave,
        };
        let j = serde_json::to_value(&p).unwrap();
        assert_eq!(j["op"], "mixed:30");
        assert_eq!(j["mix_order"], "interleave");
        assert_eq!(serde_json::from_value::<RdmaPlan>(j).unwrap(), p);
    }
}
