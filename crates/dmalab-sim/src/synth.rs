//! Fixed-seed synthetic workloads, and replay of MSR Cambridge block traces.
//!
//! Every generator streams records into a callback, so a workload of any
//! size needs no memory. Addresses are "physical": page-cache pages are
//! random 4 KiB frames, as a kernel hands them out.

use crate::trace::{Device, DmaDir, Kind, Record, TraceError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

const LINE: u64 = 64;
const PAGE: u64 = 4096;
/// Page frames are drawn from this much physical memory, above 4 GiB.
const FRAME_BASE: u64 = 4 << 30;
const FRAME_SPAN: u64 = 16 << 30;
const APP_BASE: u64 = 1 << 30;
const HEAP_BASE: u64 = 2 << 30;
const RING_BASE: u64 = 3 << 30;

/// A DPDK mbuf's footprint in its mempool, the receive-buffer stride of a
/// DPDK application (as in Farshin et al.'s ddio-bench): the mempool's
/// object header (24 bytes, cache-line aligned: 64), `struct rte_mbuf` (two
/// lines, 128), `RTE_PKTMBUF_HEADROOM` (128) and the default data room
/// (2048): 2368 bytes, 37 lines. The mempool keeps an object's lines
/// coprime with the memory channels (`RTE_MEMPOOL_F_NO_SPREAD` unset), and
/// 37 already is. An odd number of lines walks the ring's packets over
/// every set index of the LLC, where a 2 KiB stride puts a 1500-byte packet
/// on the same 24 of every 32 set indices and leaves the other 8 idle.
pub const RX_BUF_DPDK: u64 = 2368;
/// The largest receive buffer `--buf-bytes` takes.
const RX_BUF_MAX: u64 = 64 << 10;

/// Where generated records go.
pub type Sink<'a> = &'a mut dyn FnMut(&Record) -> Result<(), TraceError>;

fn frame(rng: &mut ChaCha8Rng) -> u64 {
    FRAME_BASE + rng.gen_range(0..FRAME_SPAN / PAGE) * PAGE
}

/// Emits a DMA transfer of `dev` with its line references over `pages`
/// (each `per` bytes from its start), between begin and end markers.
fn dma_over(
    out: Sink<'_>,
    dev: Device,
    dir: DmaDir,
    pages: &[u64],
    per: u64,
    line_gap_ns: u64,
) -> Result<(), TraceError> {
    let total = (pages.len() as u64 * per) as u32;
    let first = pages.first().copied().unwrap_or(0);
    out(&Record::transfer(Kind::Begin, 0, dir, first, total).from_device(dev))?;
    let mut gap = 0;
    for &p in pages {
        for off in (0..per).step_by(LINE as usize) {
            out(&Record::dma(gap, dir.is_write(), p + off, LINE as u32).from_device(dev))?;
            gap = line_gap_ns;
        }
    }
    out(&Record::transfer(Kind::End, 0, dir, first, total).from_device(dev))
}

/// File copy: the disk writes 128 KiB into scattered page-cache pages, the
/// CPU copies them into an application buffer (`read`), then from the
/// buffer into the destination file's scattered page-cache pages (`write`);
/// `writeback_lag_chunks` chunks later the disk reads those pages (writeback).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileCopy {
    /// Bytes copied.
    pub total_bytes: u64,
    /// Bytes per disk request (and per `read`/`write` call).
    pub chunk_bytes: u64,
    /// Chunks between a chunk's `write` and its writeback to disk.
    pub writeback_lag_chunks: u32,
    /// CPU time between two references of the copy loop, ns.
    pub cpu_gap_ns: u64,
    /// Device time between two line references of a transfer, ns.
    pub dma_line_gap_ns: u64,
    /// Seed of the page-frame choice.
    pub seed: u64,
}

impl Default for FileCopy {
    fn default() -> Self {
        FileCopy {
            total_bytes: 64 << 20,
            chunk_bytes: 128 << 10,
            writeback_lag_chunks: 8,
            cpu_gap_ns: 0,
            dma_line_gap_ns: 0,
            seed: 1,
        }
    }
}

impl FileCopy {
    /// Generates the trace.
    pub fn generate(&self, out: Sink<'_>) -> Result<(), TraceError> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let chunk = self.chunk_bytes.max(PAGE) / PAGE * PAGE;
        let npages = (chunk / PAGE) as usize;
        let chunks = self.total_bytes.div_ceil(chunk);
        let mut pending: std::collections::VecDeque<Vec<u64>> = Default::default();
        let g = self.cpu_gap_ns;
        for _ in 0..chunks {
            let src: Vec<u64> = (0..npages).map(|_| frame(&mut rng)).collect();
            dma_over(
                out,
                Device::Disk,
                DmaDir::ToMemory,
                &src,
                PAGE,
                self.dma_line_gap_ns,
            )?;
            for (i, &p) in src.iter().enumerate() {
                for off in (0..PAGE).step_by(LINE as usize) {
                    out(&Record::cpu(g, false, p + off, LINE as u32))?;
                    out(&Record::cpu(
                        g,
                        true,
                        APP_BASE + i as u64 * PAGE + off,
                        LINE as u32,
                    ))?;
                }
            }
            let dst: Vec<u64> = (0..npages).map(|_| frame(&mut rng)).collect();
            for (i, &p) in dst.iter().enumerate() {
                for off in (0..PAGE).step_by(LINE as usize) {
                    out(&Record::cpu(
                        g,
                        false,
                        APP_BASE + i as u64 * PAGE + off,
                        LINE as u32,
                    ))?;
                    out(&Record::cpu(g, true, p + off, LINE as u32))?;
                }
            }
            pending.push_back(dst);
            while pending.len() > self.writeback_lag_chunks as usize {
                if let Some(d) = pending.pop_front() {
                    dma_over(
                        out,
                        Device::Disk,
                        DmaDir::FromMemory,
                        &d,
                        PAGE,
                        self.dma_line_gap_ns,
                    )?;
                }
            }
        }
        while let Some(d) = pending.pop_front() {
            dma_over(
                out,
                Device::Disk,
                DmaDir::FromMemory,
                &d,
                PAGE,
                self.dma_line_gap_ns,
            )?;
        }
        Ok(())
    }
}

/// A TPC-H-like scan: the disk writes 128-512 KiB extents of a buffer pool
/// (70% 128 KiB, 20% 256 KiB, 10% 512 KiB), and the CPU scans each extent,
/// probing a hash table twice a line and updating it every other line (a
/// hash join feeding an aggregation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TpchScan {
    /// Bytes read from disk.
    pub total_bytes: u64,
    /// Buffer-pool size (extents land at random places in it).
    pub pool_bytes: u64,
    /// Hash-table size.
    pub hash_bytes: u64,
    /// CPU time between two references, ns.
    pub cpu_gap_ns: u64,
    /// Device time between two line references of a transfer, ns.
    pub dma_line_gap_ns: u64,
    /// Seed.
    pub seed: u64,
}

impl Default for TpchScan {
    fn default() -> Self {
        TpchScan {
            total_bytes: 64 << 20,
            pool_bytes: 1 << 30,
            hash_bytes: 2 << 20,
            cpu_gap_ns: 0,
            dma_line_gap_ns: 0,
            seed: 1,
        }
    }
}

impl TpchScan {
    /// Generates the trace.
    pub fn generate(&self, out: Sink<'_>) -> Result<(), TraceError> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let hash_lines = (self.hash_bytes / LINE).max(1);
        let g = self.cpu_gap_ns;
        let mut done = 0u64;
        while done < self.total_bytes {
            let p: f64 = rng.gen();
            let size: u64 = if p < 0.7 {
                128 << 10
            } else if p < 0.9 {
                256 << 10
            } else {
                512 << 10
            };
            let slots = (self.pool_bytes.max(size) - size) / 8192 + 1;
            let start = FRAME_BASE + rng.gen_range(0..slots) * 8192;
            dma_over(
                out,
                Device::Disk,
                DmaDir::ToMemory,
                &[start],
                size,
                self.dma_line_gap_ns,
            )?;
            for off in (0..size).step_by(LINE as usize) {
                out(&Record::cpu(g, false, start + off, LINE as u32))?;
                let h1 = HEAP_BASE + rng.gen_range(0..hash_lines) * LINE;
                let h2 = HEAP_BASE + rng.gen_range(0..hash_lines) * LINE;
                out(&Record::cpu(g, false, h1, LINE as u32))?;
                out(&Record::cpu(g, false, h2, LINE as u32))?;
                if (off / LINE) & 1 == 0 {
                    out(&Record::cpu(g, true, h2, LINE as u32))?;
                }
            }
            done += size;
        }
        Ok(())
    }
}

/// A web server: requests arrive as network packets in a receive ring of
/// 2 KiB buffers, the CPU parses them and works on its own state, copies the
/// response from the page cache (10% of files first come from disk in small
/// reads) into a transmit ring, the NIC sends it in 1448-byte segments, and
/// an ACK arrives for every two segments.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebServer {
    /// Requests served.
    pub requests: u64,
    /// Buffers in each of the receive and transmit rings.
    pub ring_entries: u64,
    /// Bytes per ring buffer.
    pub buf_bytes: u64,
    /// Application state the CPU touches at random.
    pub working_set_bytes: u64,
    /// Random references to it per request.
    pub app_refs_per_request: u32,
    /// Cached file data responses come from.
    pub file_cache_bytes: u64,
    /// Share of responses read from disk first, percent.
    pub disk_read_pct: u32,
    /// CPU time between two references, ns.
    pub cpu_gap_ns: u64,
    /// Seed.
    pub seed: u64,
    /// Requests received but not yet served: the CPU reads a request's
    /// packet after the NIC has written this many more (0: at once). Must
    /// be below `ring_entries`.
    #[serde(default)]
    pub inflight: u64,
}

impl Default for WebServer {
    fn default() -> Self {
        WebServer {
            requests: 20_000,
            ring_entries: 256,
            buf_bytes: 2048,
            working_set_bytes: 1 << 20,
            app_refs_per_request: 200,
            file_cache_bytes: 256 << 20,
            disk_read_pct: 10,
            cpu_gap_ns: 0,
            seed: 1,
            inflight: 0,
        }
    }
}

impl WebServer {
    /// Generates the trace.
    pub fn generate(&self, out: Sink<'_>) -> Result<(), TraceError> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let ring = self.ring_entries.max(1);
        let buf = self.buf_bytes.max(2 * LINE) / LINE * LINE;
        let rx_base = RING_BASE;
        let tx_base = RING_BASE + (ring * buf).next_multiple_of(1 << 20);
        let ws_lines = (self.working_set_bytes / LINE).max(1);
        let file_pages = (self.file_cache_bytes / PAGE).max(1);
        let g = self.cpu_gap_ns;
        let (mut rx, mut tx) = (0u64, 0u64);
        // The NIC writes a packet into the next receive buffer.
        let mut rx_dma = |out: Sink<'_>, len: u64| {
            let b = rx_base + (rx % ring) * buf;
            rx += 1;
            dma_over(
                out,
                Device::Nic,
                DmaDir::ToMemory,
                &[b],
                len.div_ceil(LINE) * LINE,
                0,
            )?;
            Ok::<u64, TraceError>(b)
        };
        // The CPU reads a received packet.
        let rx_read = |out: Sink<'_>, b: u64, len: u64| {
            for off in (0..len).step_by(LINE as usize) {
                out(&Record::cpu(g, false, b + off, LINE as u32))?;
            }
            Ok::<(), TraceError>(())
        };
        // Requests received, not yet served: (buffer, length).
        let mut backlog = std::collections::VecDeque::new();
        for i in 0..self.requests + self.inflight {
            if i < self.requests {
                let req_len = rng.gen_range(200..=600);
                let b = rx_dma(out, req_len)?;
                backlog.push_back((b, req_len));
            }
            if backlog.len() as u64 <= self.inflight && i < self.requests {
                continue;
            }
            let Some((b, req_len)) = backlog.pop_front() else {
                break;
            };
            rx_read(out, b, req_len)?;
            for _ in 0..self.app_refs_per_request {
                let a = HEAP_BASE + rng.gen_range(0..ws_lines) * LINE;
                let w = rng.gen_range(0..10) < 3;
                out(&Record::cpu(g, w, a, LINE as u32))?;
            }
            let p: f64 = rng.gen();
            let resp: u64 = match p {
                x if x < 0.35 => 1 << 10,
                x if x < 0.60 => 4 << 10,
                x if x < 0.80 => 8 << 10,
                x if x < 0.95 => 16 << 10,
                _ => 64 << 10,
            };
            let pages = resp.div_ceil(PAGE);
            let first = rng.gen_range(0..file_pages.saturating_sub(pages).max(1));
            let file = FRAME_BASE + first * PAGE;
            if rng.gen_range(0..100) < self.disk_read_pct {
                let x =
                    Record::transfer(Kind::Xfer, 0, DmaDir::ToMemory, file, (pages * PAGE) as u32);
                out(&x.from_device(Device::Disk))?;
            }
            let mut sent = 0u64;
            let mut segs = 0u64;
            while sent < resp {
                let seg = (resp - sent).min(1448);
                let b = tx_base + (tx % ring) * buf;
                tx += 1;
                // Headers, then the payload copied from the page cache.
                out(&Record::cpu(g, true, b, LINE as u32))?;
                for off in (0..seg).step_by(LINE as usize) {
                    out(&Record::cpu(g, false, file + sent + off, LINE as u32))?;
                    out(&Record::cpu(g, true, b + LINE + off, LINE as u32))?;
                }
                let wire = (seg + LINE).div_ceil(LINE) * LINE;
                dma_over(out, Device::Nic, DmaDir::FromMemory, &[b], wire, 0)?;
                sent += seg;
                segs += 1;
                if segs & 1 == 0 {
                    let b = rx_dma(out, LINE)?;
                    rx_read(out, b, LINE)?;
                }
            }
        }
        Ok(())
    }
}

/// What the core reads of a received packet.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum RxRead {
    /// Every line of the packet (a copy to the application, a checksum).
    #[default]
    Whole,
    /// The first line only (headers: forwarding, a load balancer).
    Header,
}

/// A plain receive path: the NIC writes packets into a ring of
/// `ring_entries` buffers, the core reads each packet `inflight` packets
/// after it arrived (the descriptors the NIC has filled and the core not yet
/// served), whole or its header only, and does `app_refs_per_packet`
/// random references to its own state per packet.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RxRing {
    /// Packets received.
    pub packets: u64,
    /// Receive buffers (descriptors) in the ring.
    pub ring_entries: u64,
    /// Bytes per receive buffer.
    pub buf_bytes: u64,
    /// Bytes per packet (at most `buf_bytes`).
    pub packet_bytes: u64,
    /// Packets the NIC writes ahead of the core (below `ring_entries`).
    pub inflight: u64,
    /// What the core reads of each packet.
    pub read: RxRead,
    /// Random references to application state per packet (30% writes).
    pub app_refs_per_packet: u32,
    /// Application state.
    pub working_set_bytes: u64,
    /// CPU time between two references, ns.
    pub cpu_gap_ns: u64,
    /// Seed (application references).
    pub seed: u64,
}

impl Default for RxRing {
    fn default() -> Self {
        RxRing {
            packets: 100_000,
            ring_entries: 256,
            buf_bytes: 2048,
            packet_bytes: 1500,
            inflight: 0,
            read: RxRead::Whole,
            app_refs_per_packet: 0,
            working_set_bytes: 1 << 20,
            cpu_gap_ns: 0,
            seed: 1,
        }
    }
}

impl RxRing {
    /// Generates the trace.
    pub fn generate(&self, out: Sink<'_>) -> Result<(), TraceError> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let ring = self.ring_entries.max(1);
        let buf = self.buf_bytes.max(LINE) / LINE * LINE;
        let len = self.packet_bytes.clamp(1, buf).div_ceil(LINE) * LINE;
        let read = match self.read {
            RxRead::Whole => len,
            RxRead::Header => LINE,
        };
        let ws_lines = (self.working_set_bytes / LINE).max(1);
        let g = self.cpu_gap_ns;
        let k = self.inflight;
        for i in 0..self.packets + k {
            if i < self.packets {
                let b = RING_BASE + (i % ring) * buf;
                dma_over(out, Device::Nic, DmaDir::ToMemory, &[b], len, 0)?;
            }
            if i < k {
                continue;
            }
            let b = RING_BASE + ((i - k) % ring) * buf;
            for off in (0..read).step_by(LINE as usize) {
                out(&Record::cpu(g, false, b + off, LINE as u32))?;
            }
            for _ in 0..self.app_refs_per_packet {
                let a = HEAP_BASE + rng.gen_range(0..ws_lines) * LINE;
                let w = rng.gen_range(0..10) < 3;
                out(&Record::cpu(g, w, a, LINE as u32))?;
            }
        }
        Ok(())
    }
}

/// Replays an MSR Cambridge block trace (CSV: `Timestamp,Hostname,
/// DiskNumber,Type,Offset,Size,ResponseTime`, times in 100 ns units) as DMA
/// transfers into host buffers: disk offset `o` lands at
/// `buffer base + o mod span`, as if page-cache pages followed the file.
/// With `cpu_touch`, the CPU reads what a disk read brought in and writes
/// what a disk write sends, before (write) or after (read) the transfer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MsrReplay {
    /// Host memory the disk offsets fold into.
    pub span_bytes: u64,
    /// Add the CPU references that produce and consume the data.
    pub cpu_touch: bool,
    /// Stop after this many requests (0: all).
    pub max_requests: u64,
}

impl Default for MsrReplay {
    fn default() -> Self {
        MsrReplay {
            span_bytes: 1 << 30,
            cpu_touch: true,
            max_requests: 0,
        }
    }
}

/// Counts of an MSR replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsrStats {
    /// Requests turned into transfers.
    pub requests: u64,
    /// Disk reads among them.
    pub reads: u64,
}

impl MsrReplay {
    /// Converts CSV text from `inp` (named `path` in errors).
    pub fn generate(
        &self,
        inp: impl std::io::BufRead,
        path: &str,
        out: Sink<'_>,
    ) -> Result<MsrStats, TraceError> {
        let mut st = MsrStats::default();
        let mut last_ts: Option<u64> = None;
        let span = self.span_bytes.max(PAGE);
        for (i, line) in inp.lines().enumerate() {
            let line = line.map_err(|e| TraceError::Io {
                path: path.into(),
                cause: e,
            })?;
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let bad = |m: &str| TraceError::Format {
                path: format!("{path}:{}", i + 1),
                message: format!(
                    "{m}; expected Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime"
                ),
            };
            let f: Vec<&str> = t.split(',').map(str::trim).collect();
            if f.len() < 7 {
                return Err(bad(&format!("{} fields", f.len())));
            }
            let num = |s: &str, what: &str| {
                s.parse::<u64>()
                    .map_err(|_| bad(&format!("{what} '{s}' is not a whole number")))
            };
            let ts = num(f[0], "Timestamp")?;
            let dir = match f[3].to_ascii_lowercase().as_str() {
                "read" => DmaDir::ToMemory,
                "write" => DmaDir::FromMemory,
                o => return Err(bad(&format!("Type '{o}' is neither Read nor Write"))),
            };
            let off = num(f[4], "Offset")?;
            let size = num(f[5], "Size")?;
            let resp = num(f[6], "ResponseTime")?;
            let size = size.clamp(1, u32::MAX as u64 & !4095);
            let gap_ns = match last_ts {
                Some(l) => ts.saturating_sub(l) * 100,
                None => 0,
            };
            last_ts = Some(ts.max(last_ts.unwrap_or(0)));
            let addr = FRAME_BASE + (off % span);
            if self.cpu_touch && dir == DmaDir::FromMemory {
                for (k, o) in (0..size).step_by(LINE as usize).enumerate() {
                    let gap = if k == 0 { gap_ns } else { 0 };
                    out(&Record::cpu(gap, true, addr + o, LINE as u32))?;
                }
                let mut x = Record::transfer(Kind::Xfer, 0, dir, addr, size as u32)
                    .from_device(Device::Disk);
                x.dur_ns = resp * 100;
                out(&x)?;
            } else {
                let mut x = Record::transfer(Kind::Xfer, gap_ns, dir, addr, size as u32)
                    .from_device(Device::Disk);
                x.dur_ns = resp * 100;
                out(&x)?;
                if self.cpu_touch {
                    for o in (0..size).step_by(LINE as usize) {
                        out(&Record::cpu(0, false, addr + o, LINE as u32))?;
                    }
                }
            }
            st.requests += 1;
            if dir == DmaDir::ToMemory {
                st.reads += 1;
            }
            if self.max_requests != 0 && st.requests >= self.max_requests {
                break;
            }
        }
        Ok(st)
    }
}

/// The workloads `dmalab sim synth` writes (the variants' doc comments are
/// its help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Workload {
    /// 128 KiB disk reads into scattered pages, copied by the CPU to a
    /// buffer and on into other pages, which the disk later reads.
    FileCopy,
    /// 128-512 KiB disk reads scanned by the CPU with hash-table probes.
    Tpch,
    /// Network packets in 2 KiB ring buffers, app work, responses sent from
    /// the page cache, small disk reads.
    Web,
    /// A plain receive path: the NIC fills a ring of packet buffers, the
    /// core reads each packet --inflight packets later (--rx-read).
    Rx,
    /// An MSR Cambridge CSV block trace (--input) replayed as DMA transfers.
    Msr,
}

/// One `dmalab sim synth` request: the workload and every option, resolved
/// to numbers (each generator uses the ones its doc names).
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// What to generate.
    pub workload: Workload,
    /// Bytes the disk reads (file-copy, tpch; `--size`).
    pub size_bytes: u64,
    /// Hash-table size (tpch; `--hash-size`).
    pub hash_bytes: u64,
    /// Requests (web; `--requests`).
    pub requests: u64,
    /// Receive and transmit ring entries of 2 KiB (web; `--ring`).
    pub ring_entries: u64,
    /// CPU time between references, ns (`--cpu-gap-ns`).
    pub cpu_gap_ns: u64,
    /// Packets (rx; `--packets`).
    pub packets: u64,
    /// Packets the NIC is ahead of the core (web, rx; `--inflight`).
    pub inflight: u64,
    /// Bytes per received packet (rx; `--packet-bytes`).
    pub packet_bytes: u64,
    /// Bytes from one receive buffer's start to the next's (rx;
    /// `--buf-bytes`): the ring's layout, which decides how its lines fall
    /// on the LLC's set indices ([`RX_BUF_DPDK`]).
    pub buf_bytes: u64,
    /// What the core reads of a packet (rx; `--rx-read`).
    pub rx_read: RxRead,
    /// Application references per packet (rx; `--app-refs`).
    pub app_refs: u32,
    /// Share of responses read from disk first, percent (web;
    /// `--disk-read-pct`).
    pub disk_read_pct: u32,
    /// Random seed (`--seed`).
    pub seed: u64,
    /// The MSR replay's settings (msr).
    pub msr: MsrReplay,
}

impl SynthSpec {
    /// Checks the request; `has_input` says whether a CSV was named
    /// (`--input`, which msr needs).
    pub fn validate(&self, has_input: bool) -> Result<(), dmalab_core::UsageError> {
        use dmalab_core::UsageError;
        if self.size_bytes == 0 {
            return Err(UsageError::new("--size", "must be above 0"));
        }
        let ring_user = matches!(self.workload, Workload::Web | Workload::Rx);
        if ring_user && self.ring_entries == 0 {
            return Err(UsageError::new("--ring", "must be at least 1"));
        }
        if ring_user && self.inflight >= self.ring_entries {
            return Err(UsageError::new(
                "--inflight",
                format!(
                    "{} packets ahead need more than --ring {} buffers (the NIC would overwrite unread ones); use at most {}",
                    self.inflight,
                    self.ring_entries,
                    self.ring_entries - 1
                ),
            ));
        }
        if self.disk_read_pct > 100 {
            return Err(UsageError::new("--disk-read-pct", "must be 0 to 100"));
        }
        if self.workload == Workload::Rx {
            if !(LINE..=RX_BUF_MAX).contains(&self.buf_bytes)
                || !self.buf_bytes.is_multiple_of(LINE)
            {
                return Err(UsageError::new(
                    "--buf-bytes",
                    format!(
                        "{} is not whole 64-byte lines from 64 to 65536 (2048: page halves, {RX_BUF_DPDK}: a DPDK mbuf)",
                        self.buf_bytes
                    ),
                ));
            }
            if !(1..=self.buf_bytes).contains(&self.packet_bytes) {
                return Err(UsageError::new(
                    "--packet-bytes",
                    format!(
                        "must be 1 to --buf-bytes ({}): a packet fills one receive buffer",
                        self.buf_bytes
                    ),
                ));
            }
        }
        if self.workload == Workload::Msr && !has_input {
            return Err(UsageError::new(
                "--input",
                "the msr workload needs --input FILE.csv (an MSR Cambridge block trace)",
            ));
        }
        Ok(())
    }

    /// Generates the workload into `out`; msr reads `input` (a CSV and its
    /// name for errors), which the other workloads ignore.
    pub fn generate(
        &self,
        input: Option<(&mut dyn std::io::BufRead, &str)>,
        out: Sink<'_>,
    ) -> Result<(), TraceError> {
        match self.workload {
            Workload::FileCopy => FileCopy {
                total_bytes: self.size_bytes,
                cpu_gap_ns: self.cpu_gap_ns,
                seed: self.seed,
                ..Default::default()
            }
            .generate(out),
            Workload::Tpch => TpchScan {
                total_bytes: self.size_bytes,
                hash_bytes: self.hash_bytes,
                cpu_gap_ns: self.cpu_gap_ns,
                seed: self.seed,
                ..Default::default()
            }
            .generate(out),
            Workload::Web => WebServer {
                requests: self.requests,
                ring_entries: self.ring_entries,
                cpu_gap_ns: self.cpu_gap_ns,
                seed: self.seed,
                inflight: self.inflight,
                disk_read_pct: self.disk_read_pct,
                ..Default::default()
            }
            .generate(out),
            Workload::Rx => RxRing {
                packets: self.packets,
                ring_entries: self.ring_entries,
                packet_bytes: self.packet_bytes,
                buf_bytes: self.buf_bytes,
                inflight: self.inflight,
                read: self.rx_read,
                app_refs_per_packet: self.app_refs,
                cpu_gap_ns: self.cpu_gap_ns,
                seed: self.seed,
                ..Default::default()
            }
            .generate(out),
            Workload::Msr => {
                let Some((inp, name)) = input else {
                    return Err(TraceError::Invalid(
                        "the msr workload needs an MSR Cambridge CSV to read".into(),
                    ));
                };
                self.msr.generate(inp, name, out).map(|_| ())
            }
        }
    }

    /// Generates the workload into `w` (as [`generate`](Self::generate)),
    /// stopping with [`TraceError::Interrupted`] after SIGINT or SIGTERM;
    /// returns the records written.
    pub fn write(
        &self,
        input: Option<(&mut dyn std::io::BufRead, &str)>,
        w: &crate::trace::TraceWriter,
    ) -> Result<u64, TraceError> {
        let mut n = 0u64;
        self.generate(input, &mut |r: &Record| {
            crate::trace::check_stop(n)?;
            n += 1;
            w.write_record(r)
        })?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Source;

    fn collect(f: impl FnOnce(Sink<'_>) -> Result<(), TraceError>) -> Vec<Record> {
        let mut v = Vec::new();
        f(&mut |r: &Record| {
            v.push(*r);
            Ok(())
        })
        .unwrap();
        v
    }

    #[test]
    fn file_copy_shape_and_determinism() {
        let fc = FileCopy {
            total_bytes: 1 << 20,
            ..Default::default()
        };
        let a = collect(|o| fc.generate(o));
        let b = collect(|o| fc.generate(o));
        assert_eq!(a, b, "fixed seed, same trace");
        let dma = a
            .iter()
            .filter(|r| r.kind == Kind::Ref && r.source == Source::Dma)
            .count();
        let cpu = a
            .iter()
            .filter(|r| r.kind == Kind::Ref && r.source == Source::Cpu)
            .count();
        // Per 128 KiB: 2048 DMA writes + 2048 DMA reads, 4 x 2048 CPU refs.
        assert_eq!(dma, 8 * 4096);
        assert_eq!(cpu, 8 * 8192);
        let other = FileCopy {
            seed: 2,
            ..fc.clone()
        };
        assert_ne!(a, collect(|o| other.generate(o)));
    }

    #[test]
    fn msr_rows_become_transfers() {
        let csv = "128166372003061629,wdev,0,Read,4096,8192,1331\n\
                   128166372003071629,wdev,0,Write,0,512,200\n";
        let m = MsrReplay {
            cpu_touch: false,
            ..Default::default()
        };
        let mut v = Vec::new();
        let st = m
            .generate(csv.as_bytes(), "t.csv", &mut |r: &Record| {
                v.push(*r);
                Ok(())
            })
            .unwrap();
        assert_eq!((st.requests, st.reads), (2, 1));
        assert_eq!(v.len(), 2);
        assert_eq!(
            (v[0].kind, v[0].write, v[0].len, v[0].dur_ns),
            (Kind::Xfer, true, 8192, 133_100)
        );
        assert_eq!((v[1].gap_ns, v[1].write, v[1].len), (1_000_000, false, 512));
        let e = m
            .generate("1,h,0,Trim,0,1,1\n".as_bytes(), "t.csv", &mut |_| Ok(()))
            .unwrap_err();
        assert!(e.to_string().contains("t.csv:1"), "{e}");
    }

    fn spec(workload: Workload) -> SynthSpec {
        SynthSpec {
            workload,
            size_bytes: 256 << 10,
            hash_bytes: 64 << 10,
            requests: 20,
            ring_entries: 8,
            cpu_gap_ns: 0,
            seed: 1,
            packets: 50,
            inflight: 0,
            packet_bytes: 1500,
            buf_bytes: 2048,
            rx_read: RxRead::Whole,
            app_refs: 0,
            disk_read_pct: 10,
            msr: MsrReplay::default(),
        }
    }

    #[test]
    fn synth_spec_rules_name_their_option() {
        let opt = |s: &SynthSpec, input: bool| s.validate(input).map_err(|e| e.option);
        assert_eq!(opt(&spec(Workload::Web), false), Ok(()));
        let zero = SynthSpec {
            size_bytes: 0,
            ..spec(Workload::Tpch)
        };
        assert_eq!(opt(&zero, false), Err("--size".into()));
        let no_ring = SynthSpec {
            ring_entries: 0,
            ..spec(Workload::Web)
        };
        assert_eq!(opt(&no_ring, false), Err("--ring".into()));
        let ring_unused = SynthSpec {
            ring_entries: 0,
            ..spec(Workload::FileCopy)
        };
        assert_eq!(opt(&ring_unused, false), Ok(()));
        assert_eq!(opt(&spec(Workload::Msr), false), Err("--input".into()));
        assert_eq!(opt(&spec(Workload::Msr), true), Ok(()));
    }

    /// Every DMA record the web server writes names its device: packets
    /// received and sent by the NIC (rings apart), page-cache reads by the
    /// disk; the CPU's records name none.
    #[test]
    fn web_dma_records_name_their_device() {
        let w = WebServer {
            requests: 300,
            ring_entries: 16,
            ..Default::default()
        };
        let v = collect(|o| w.generate(o));
        let n = |dev: Device, write: bool, kind: Kind| {
            v.iter()
                .filter(|r| r.source == Source::Dma && r.device == dev)
                .filter(|r| r.write == write && r.kind == kind)
                .count()
        };
        assert!(n(Device::Nic, true, Kind::Ref) > 0);
        assert!(n(Device::Nic, false, Kind::Ref) > 0);
        assert!(n(Device::Disk, true, Kind::Xfer) > 0);
        assert_eq!(n(Device::Disk, true, Kind::Ref), 0);
        assert_eq!(n(Device::Nic, true, Kind::Xfer), 0);
        assert!(v
            .iter()
            .all(|r| (r.source == Source::Dma) == (r.device != Device::Untagged)));
        // File copy and the receive ring: the disk's and the NIC's.
        let fc = collect(|o| {
            FileCopy {
                total_bytes: 256 << 10,
                ..Default::default()
            }
            .generate(o)
        });
        assert!(fc
            .iter()
            .filter(|r| r.source == Source::Dma)
            .all(|r| r.device == Device::Disk));
        let rx = collect(|o| {
            RxRing {
                packets: 4,
                ..Default::default()
            }
            .generate(o)
        });
        assert!(rx
            .iter()
            .filter(|r| r.source == Source::Dma)
            .all(|r| r.device == Device::Nic));
    }

    /// `--inflight 0` gives the web trace it gave before the option; with
    /// k packets in flight the CPU reads each request after k more arrived.
    #[test]
    fn web_inflight_delays_the_reads() {
        let w = WebServer {
            requests: 30,
            ring_entries: 16,
            ..Default::default()
        };
        let now = collect(|o| w.generate(o));
        // The first records: a request's DMA (begin, 8 lines, end), then the
        // CPU reading it (a 200-600 byte request: 4 to 10 lines).
        assert_eq!(now[0].kind, Kind::Begin);
        assert_eq!(
            now[now.iter().position(|r| r.kind == Kind::End).unwrap() + 1].source,
            Source::Cpu
        );
        let late = collect(|o| {
            WebServer {
                inflight: 3,
                ..w.clone()
            }
            .generate(o)
        });
        // Four requests arrive before the CPU reads the first.
        let ends_before_cpu = late
            .iter()
            .take_while(|r| r.kind == Kind::Begin || r.kind == Kind::End || r.source == Source::Dma)
            .filter(|r| r.kind == Kind::End)
            .count();
        assert_eq!(ends_before_cpu, 4);
        let refs = |v: &[Record]| v.iter().filter(|r| r.kind == Kind::Ref).count();
        assert_eq!(refs(&now) > 0, refs(&late) > 0);
    }

    #[test]
    fn rx_ring_reads_k_packets_late_whole_or_header() {
        let rx = RxRing {
            packets: 10,
            ring_entries: 4,
            inflight: 2,
            packet_bytes: 200,
            ..Default::default()
        };
        let v = collect(|o| rx.generate(o));
        let dma: Vec<u64> = v
            .iter()
            .filter(|r| r.kind == Kind::Ref && r.source == Source::Dma)
            .map(|r| r.addr)
            .collect();
        let cpu: Vec<u64> = v
            .iter()
            .filter(|r| r.kind == Kind::Ref && r.source == Source::Cpu)
            .map(|r| r.addr)
            .collect();
        // 200 bytes: 4 lines a packet, written and read whole.
        assert_eq!((dma.len(), cpu.len()), (40, 40));
        // Buffer i % 4; the CPU's first read comes after packet 2 arrived.
        assert_eq!(dma[4 * 5], RING_BASE + 2048);
        let first_cpu = v
            .iter()
            .position(|r| r.source == Source::Cpu && r.kind == Kind::Ref)
            .unwrap();
        let ends = v[..first_cpu]
            .iter()
            .filter(|r| r.kind == Kind::End)
            .count();
        assert_eq!(ends, 3);
        assert_eq!(cpu[0], RING_BASE);
        let hdr = collect(|o| {
            RxRing {
                read: RxRead::Header,
                ..rx.clone()
            }
            .generate(o)
        });
        let hdr_cpu = hdr
            .iter()
            .filter(|r| r.source == Source::Cpu && r.kind == Kind::Ref)
            .count();
        assert_eq!(hdr_cpu, 10);
    }

    #[test]
    fn inflight_must_leave_the_ring_a_free_buffer() {
        let s = SynthSpec {
            inflight: 8,
            ..spec(Workload::Rx)
        };
        assert_eq!(s.validate(false).unwrap_err().option, "--inflight");
        let ok = SynthSpec {
            inflight: 7,
            ..spec(Workload::Web)
        };
        assert!(ok.validate(false).is_ok());
        let big = SynthSpec {
            packet_bytes: 4096,
            ..spec(Workload::Rx)
        };
        assert_eq!(big.validate(false).unwrap_err().option, "--packet-bytes");
    }

    #[test]
    fn synth_spec_runs_the_generator_it_names() {
        let s = spec(Workload::FileCopy);
        let fc = FileCopy {
            total_bytes: s.size_bytes,
            ..Default::default()
        };
        assert_eq!(
            collect(|o| s.generate(None, o)),
            collect(|o| fc.generate(o))
        );
        let mut csv = "1,h,0,Read,0,4096,10\n".as_bytes();
        let m = spec(Workload::Msr);
        let v = collect(|o| m.generate(Some((&mut csv, "c.csv")), o));
        assert_eq!(v.iter().filter(|r| r.kind == Kind::Xfer).count(), 1);
        let e = m.generate(None, &mut |_| Ok(())).unwrap_err();
        assert!(matches!(e, TraceError::Invalid(_)), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.trace");
        let w = crate::trace::TraceWriter::create(&p).unwrap();
        let n = s.write(None, &w).unwrap();
        let want = collect(|o| s.generate(None, o)).len() as u64;
        assert_eq!((n, w.finish().unwrap().records), (want, want));
    }
}
