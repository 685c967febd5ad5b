//! The `gpu` engine: GPU copy engines as the DMA source. Copies between
//! dmalab's one shared buffer (page-locked for the GPUs with
//! `cuMemHostRegister`: cacheable memory, so hugepages, `--fill`, `--cache`
//! and the patterns apply unchanged) and a buffer in each GPU's memory,
//! through the CUDA driver loaded at run time (`dmalab_gpu`).
//!
//! * `--direction write` (the device writes memory, [`Op::Read`]) =
//!   device-to-host copies (`cuMemcpyDtoHAsync`); `--direction read`
//!   ([`Op::Write`]) = host-to-device copies (`cuMemcpyHtoDAsync`);
//!   `--direction both` alternates them (even commands device-to-host, odd
//!   ones host-to-device), so both copy engines of a GPU run at once. The
//!   result's `gpu` facts count the copies and bytes of each direction.
//! * The target is `gpu:N` (`--target`) or the list `--gpus`; worker `i`
//!   drives GPU `gpus[i % n]`, through `--iodepth` streams, one per slot,
//!   each with an event recorded after its copy for the completion.
//! * `--size` is each GPU's device buffer (default 256 MiB); device offsets
//!   follow `--device-offsets` inside `--region` of it.
//! * `--gpu-wait spin|sleep|block` is how a worker waits for its copies
//!   ([`GpuWait`]): the CPU the load generator itself takes.
//! * `--gpu-copy d2d` ([`GpuCopy::D2d`]) makes every copy one between two
//!   buffers in GPU memory (`cuMemcpyDtoDAsync`) through the same streams,
//!   events, sizes, offsets and waits, with the host buffer neither
//!   page-locked nor touched: the CPU side of the load without its DMA
//!   into host memory (the control cycle of `dmalab run`).
//! * `DMALAB_GPU_DRIVER=mock[:OPTIONS]` runs the engine on the mock driver
//!   (a test hook; `dmalab_gpu::mock`).

use super::{
    options, refuse_allow_destroy, refuse_foreign_flags, BufferPiece, Command, Completion, Driver,
    Engine, EngineError, EngineKind, EngineSpec, Op, TargetInfo, TargetRequest,
};
use crate::pattern::Pattern;
use crate::plan::Plan;
use crate::target::TargetError;
use dmalab_core::host::DeviceInfo;
use dmalab_core::UsageError;
use dmalab_gpu::queue::{CopyDir, CopyQueue, Gpu, HostRegistration};
use dmalab_gpu::{GpuCopy, GpuError, GpuFacts, GpuWait, Loaded};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The GPU engine's part of the plan (`--gpus`, `--gpu-wait`,
/// `--gpu-copy`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuPlan {
    /// GPUs to use, by the driver's index; worker `i` drives `gpus[i % n]`.
    /// Empty: the one `--target gpu:N` names (GPU 0 without a target).
    pub gpus: Vec<u32>,
    /// How each worker waits for its copies.
    #[serde(default)]
    pub wait: GpuWait,
    /// What the copies move between: the host buffer and GPU memory, or
    /// two buffers in GPU memory.
    #[serde(default)]
    pub copy: GpuCopy,
}

impl GpuPlan {
    /// The plan of `--gpus LIST`, `--gpu-wait MODE` and `--gpu-copy WHAT`
    /// (None without any); all are refused for engines other than `gpu`.
    pub fn from_flags(
        engine: EngineKind,
        gpus: Option<&str>,
        wait: Option<GpuWait>,
        copy: Option<GpuCopy>,
    ) -> Result<Option<Self>, UsageError> {
        if gpus.is_none() && wait.is_none() && copy.is_none() {
            return Ok(None);
        }
        if engine != EngineKind::Gpu {
            let given = [
                ("--gpus", gpus.is_some()),
                ("--gpu-wait", wait.is_some()),
                ("--gpu-copy", copy.is_some()),
            ];
            refuse_foreign_flags(&given, |option| {
                let what = match option {
                    "--gpus" => "GPUs",
                    "--gpu-wait" => "a way to wait for GPU copies",
                    _ => "what GPU copies move between",
                };
                UsageError::new(
                    option,
                    format!(
                        "only --engine gpu takes {what}; add --engine gpu or leave {option} out"
                    ),
                )
            })?;
        }
        Ok(Some(Self {
            gpus: match gpus {
                Some(text) => dmalab_gpu::parse_gpu_list("--gpus", text)?,
                None => Vec::new(),
            },
            wait: wait.unwrap_or_default(),
            copy: copy.unwrap_or_default(),
        }))
    }
}

/// The flags only `--engine gpu` takes.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct GpuArgs {
    /// GPUs for --engine gpu, instead of --target gpu:N (e.g. 0,1 or 0-3;
    /// worker i drives the (i mod n)-th; see docs/gpu.md).
    #[cfg_attr(feature = "clap", arg(long, value_name = "LIST"))]
    pub gpus: Option<String>,
    /// How a --engine gpu worker waits for its copies: spin (poll
    /// continuously: lowest latency, one CPU per worker busy), sleep (poll,
    /// sleeping for the time the oldest copy should take: little CPU) or
    /// block (sleep in the driver until the copy's interrupt). Default:
    /// sleep (see docs/gpu.md).
    #[cfg_attr(feature = "clap", arg(long, value_enum, value_name = "MODE"))]
    pub gpu_wait: Option<GpuWait>,
    /// What --engine gpu copies move between: host (the buffer and GPU
    /// memory, as --direction says: the GPU's DMA into host memory) or d2d
    /// (two buffers in GPU memory through the same streams and waits, the
    /// host buffer untouched: the control of a host load). Default: host.
    #[cfg_attr(feature = "clap", arg(long, value_enum, value_name = "WHAT"))]
    pub gpu_copy: Option<GpuCopy>,
}

impl GpuArgs {
    /// The engine's part of the plan (None without `--gpus`, `--gpu-wait`
    /// and `--gpu-copy`).
    pub fn plan(&self, engine: EngineKind) -> Result<Option<GpuPlan>, UsageError> {
        GpuPlan::from_flags(engine, self.gpus.as_deref(), self.gpu_wait, self.gpu_copy)
    }
}

/// Where one worker runs relative to its GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPlacement {
    /// Worker index.
    pub worker: usize,
    /// The GPU it drives (driver index).
    pub gpu: u32,
    /// NUMA nodes of the CPUs it may run on.
    pub cpu_nodes: Vec<u32>,
}

/// What the result says about the GPU side of a run (key `gpu`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuRunFacts {
    /// The driver used (`libcuda.so.1`, or `mock` in tests).
    pub driver: String,
    /// `cuDriverGetVersion` (12040 = CUDA 12.4).
    pub driver_version: i32,
    /// The GPUs of the run.
    pub gpus: Vec<GpuFacts>,
    /// Streams (copies in flight) per worker.
    pub streams_per_worker: u32,
    /// How each worker waited for its copies (`--gpu-wait`; absent in
    /// results older than the flag, whose workers spun 1 ms, then polled
    /// every 100 us). The workers' CPU time is the load result's `cpu` and
    /// `workers[].cpu`.
    #[serde(default)]
    pub wait: Option<GpuWait>,
    /// What the copies moved between (`--gpu-copy`; absent in results
    /// older than the flag, whose copies were all `host`).
    #[serde(default)]
    pub copy: GpuCopy,
    /// Bytes of the device buffer on each GPU (two of them for `d2d`).
    pub device_buffer_bytes: u64,
    /// Where each worker ran.
    pub workers: Vec<WorkerPlacement>,
    /// Placement warnings (a worker on another NUMA node than its GPU).
    pub warnings: Vec<String>,
    /// Device-to-host copies completed (the GPU wrote host memory).
    #[serde(default)]
    pub device_to_host_copies: u64,
    /// Bytes of the completed device-to-host copies.
    #[serde(default)]
    pub device_to_host_bytes: u64,
    /// Host-to-device copies completed (the GPU read host memory).
    #[serde(default)]
    pub host_to_device_copies: u64,
    /// Bytes of the completed host-to-device copies.
    #[serde(default)]
    pub host_to_device_bytes: u64,
    /// Copies within GPU memory completed (`--gpu-copy d2d`).
    #[serde(default)]
    pub device_to_device_copies: u64,
    /// Bytes of the completed copies within GPU memory.
    #[serde(default)]
    pub device_to_device_bytes: u64,
    /// Bytes the GPUs moved into or out of host memory: the sum of both
    /// host directions (0 for `d2d`: no host memory touched).
    #[serde(default)]
    pub host_dma_bytes: u64,
}

/// Completed copies of every worker, per direction: `[copies, bytes]`,
/// in [`CopyDir`]'s order.
#[derive(Debug, Default)]
struct CopyCounts([[AtomicU64; 2]; 3]);

fn dir_index(dir: CopyDir) -> usize {
    match dir {
        CopyDir::ToHost => 0,
        CopyDir::ToDevice => 1,
        CopyDir::WithinDevice => 2,
    }
}

impl CopyCounts {
    fn add(&self, dir: CopyDir, bytes: u64) {
        let d = &self.0[dir_index(dir)];
        d[0].fetch_add(1, Ordering::Relaxed);
        d[1].fetch_add(bytes, Ordering::Relaxed);
    }

    fn get(&self, dir: CopyDir) -> (u64, u64) {
        let d = &self.0[dir_index(dir)];
        (d[0].load(Ordering::Relaxed), d[1].load(Ordering::Relaxed))
    }
}

/// The GPU engine's lifecycle for one run.
#[derive(Default)]
pub struct GpuDriver {
    loaded: Option<Loaded>,
    target: Option<u32>,
    facts: GpuRunFacts,
    gpus: Vec<Arc<Gpu>>,
    reg: Mutex<Weak<HostRegistration>>,
    placed: Mutex<(Vec<WorkerPlacement>, Vec<String>)>,
    counts: Arc<CopyCounts>,
    /// The driver's seam (`DMALAB_GPU_DRIVER`, read by the binary).
    driver_spec: Option<String>,
}

/// The environment variable the binary reads for the GPU driver's seam.
pub use dmalab_gpu::DRIVER_ENV;

impl GpuDriver {
    /// A driver that loads the GPU driver `spec` names (`mock[:OPTIONS]`,
    /// a library; None: `libcuda.so.1`).
    pub fn new(spec: Option<String>) -> Self {
        Self {
            driver_spec: spec,
            ..Default::default()
        }
    }
}

/// A GPU-layer failure as a usage error of `option` (exit 2): the host
/// lacks what the engine needs, or the device cannot hold what was asked.
fn usage(option: &str, e: GpuError) -> UsageError {
    UsageError::new(option, e.to_string())
}

fn engine_error(e: GpuError) -> EngineError {
    EngineError::io("GPU", std::io::Error::other(e))
}

impl GpuDriver {
    fn loaded(&self) -> Result<&Loaded, UsageError> {
        self.loaded.as_ref().ok_or_else(|| {
            UsageError::new("--engine gpu", "the driver was not loaded (inspect first)")
        })
    }
}

impl Driver for GpuDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::Gpu
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        refuse_allow_destroy(
            req,
            "--engine gpu writes no storage (copies stay between the buffer and GPU memory); leave it out",
        )?;
        if let Some(t) = &req.target {
            let text = t.to_str().unwrap_or_default();
            self.target = Some(dmalab_gpu::parse_target("--target", text)?);
        }
        let loaded = dmalab_gpu::load_driver(self.driver_spec.as_deref())
            .map_err(|e| usage("--engine gpu", e))?;
        self.loaded = Some(loaded);
        let size = match req.size_bytes {
            Some(0) => return Err(UsageError::new("--size", "must be greater than 0")),
            _ => req.create_bytes(),
        };
        Ok(TargetInfo {
            path: req.target.clone(),
            exists: true,
            kind: "gpu".into(),
            size_bytes: size,
            // Copies have no block size of their own.
            logical_block_size: 1,
            creates: false,
        })
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        let own = options::gpu(plan.engine_options.as_ref());
        let listed = own.map(|g| g.gpus.clone()).unwrap_or_default();
        let gpus = match (self.target, listed.is_empty()) {
            (Some(_), false) => {
                return Err(UsageError::new(
                    "--gpus",
                    "give either --target gpu:N or --gpus LIST, not both",
                ))
            }
            (Some(n), true) => vec![n],
            (None, false) => listed,
            (None, true) => vec![0],
        };
        if plan.stream.pattern == Pattern::Flush {
            return Err(UsageError::new(
                "--pattern",
                "a GPU copy engine has no flush; use noop for a baseline without copies",
            ));
        }
        if plan.workers < gpus.len() {
            return Err(UsageError::new(
                "--workers",
                format!(
                    "{} GPUs need at least {} workers (worker i drives GPU i mod {}); raise --workers",
                    gpus.len(),
                    gpus.len(),
                    gpus.len()
                ),
            ));
        }
        let loaded = self.loaded()?.clone();
        let option = if self.target.is_some() {
            "--target"
        } else if own.is_some_and(|g| !g.gpus.is_empty()) {
            "--gpus"
        } else {
            "--engine gpu"
        };
        let facts = dmalab_gpu::queue::inspect(&*loaded.cuda, &gpus, &loaded.sysfs)
            .map_err(|e| usage(option, e))?;
        let copy = own.map(|g| g.copy).unwrap_or_default();
        // Copies within the device read from a second buffer of --size.
        let (buffers, twice) = match copy {
            GpuCopy::Host => (1, ""),
            GpuCopy::D2d => (2, " twice (--gpu-copy d2d)"),
        };
        for f in &facts {
            if plan.target_size_bytes.saturating_mul(buffers) > f.memory_bytes {
                return Err(UsageError::new(
                    "--size",
                    format!(
                        "{} bytes{twice} do not fit GPU {} ({}, {} bytes of memory); use a smaller --size",
                        plan.target_size_bytes, f.index, f.name, f.memory_bytes
                    ),
                ));
            }
        }
        self.facts = GpuRunFacts {
            driver: loaded.cuda.origin(),
            driver_version: loaded.cuda.driver_version().unwrap_or(0),
            gpus: facts,
            streams_per_worker: plan.iodepth,
            wait: Some(own.map(|g| g.wait).unwrap_or_default()),
            copy,
            device_buffer_bytes: plan.target_size_bytes,
            ..GpuRunFacts::default()
        };
        Ok(())
    }

    fn prepare(&mut self, plan: &mut Plan) -> Result<(), TargetError> {
        let loaded = self.loaded()?.clone();
        for f in &self.facts.gpus {
            let gpu = Gpu::open_for(
                loaded.cuda.clone(),
                f.clone(),
                plan.target_size_bytes,
                self.facts.copy,
            )
            .map_err(|e| usage("--size", e))?;
            self.gpus.push(Arc::new(gpu));
        }
        let list: Vec<String> = self
            .facts
            .gpus
            .iter()
            .map(|f| f.index.to_string())
            .collect();
        plan.target = Some(PathBuf::from(format!("gpu:{}", list.join(","))));
        Ok(())
    }

    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
        let Some(gpu) = self.gpus.get(spec.worker % self.gpus.len().max(1)).cloned() else {
            return Err(EngineError::Unsupported {
                feature: "the gpu engine".into(),
                detail: "no GPU was prepared".into(),
            });
        };
        let wait = self.facts.wait.unwrap_or_default();
        if self.facts.copy == GpuCopy::D2d {
            // No host memory is page-locked or touched: the twin of a load
            // leaves the buffer as the CPU wrote it.
            self.place(spec, &gpu.facts);
            let q = CopyQueue::new_within_device(gpu, spec.iodepth, wait).map_err(engine_error)?;
            return Ok(Box::new(GpuEngine::new(
                q,
                spec,
                GpuCopy::D2d,
                &self.counts,
            )));
        }
        let reg = {
            let mut weak = self.reg.lock().unwrap_or_else(|p| p.into_inner());
            match weak.upgrade() {
                Some(r) => r,
                None => {
                    let ranges = host_ranges(&spec.pieces);
                    // SAFETY: the pieces describe the run's DmaBuffer, which
                    // outlives every worker's engine; the registration drops
                    // with the last engine.
                    let r = Arc::new(
                        unsafe { HostRegistration::new(&gpu, &ranges) }.map_err(engine_error)?,
                    );
                    *weak = Arc::downgrade(&r);
                    r
                }
            }
        };
        self.place(spec, &gpu.facts);
        let q = CopyQueue::new(gpu, reg, spec.iodepth, wait).map_err(engine_error)?;
        Ok(Box::new(GpuEngine::new(
            q,
            spec,
            GpuCopy::Host,
            &self.counts,
        )))
    }

    fn header(&self) -> String {
        let mut s = String::new();
        for f in &self.facts.gpus {
            s.push_str(&format!(
                "GPU {}: {}, PCI {}",
                f.index, f.name, f.pci_address
            ));
            if let (Some(g), Some(w)) = (f.link_generation, f.link_width) {
                s.push_str(&format!(", PCIe gen {g} x{w}"));
            }
            if let Some(n) = f.numa_node {
                s.push_str(&format!(", NUMA node {n}"));
            }
            s.push_str(&format!(" ({})\n", self.facts.driver));
        }
        s.push_str(&format!(
            "workers wait for copies: {} (--gpu-wait)\n",
            self.facts.wait.unwrap_or_default().as_str()
        ));
        if self.facts.copy == GpuCopy::D2d {
            s.push_str("copies: device to device, within GPU memory (--gpu-copy d2d): no host memory touched\n");
        }
        let placed = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        for w in &placed.1 {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }

    fn device(&self, plan: &Plan) -> Option<DeviceInfo> {
        let f = self.facts.gpus.first()?;
        Some(DeviceInfo {
            path: plan
                .target
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            kind: "gpu".into(),
            model: f.name.clone(),
            size_bytes: plan.target_size_bytes,
            logical_block_size: 1,
            physical_block_size: 1,
            ..DeviceInfo::default()
        })
    }

    fn facts(&self) -> Option<(&'static str, serde_json::Value)> {
        let mut f = self.facts.clone();
        let placed = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        f.workers = placed.0.clone();
        f.workers.sort_by_key(|w| w.worker);
        f.warnings = placed.1.clone();
        (f.device_to_host_copies, f.device_to_host_bytes) = self.counts.get(CopyDir::ToHost);
        (f.host_to_device_copies, f.host_to_device_bytes) = self.counts.get(CopyDir::ToDevice);
        (f.device_to_device_copies, f.device_to_device_bytes) =
            self.counts.get(CopyDir::WithinDevice);
        f.host_dma_bytes = f.device_to_host_bytes + f.host_to_device_bytes;
        serde_json::to_value(f).ok().map(|v| ("gpu", v))
    }
}

impl GpuDriver {
    /// Records where worker `spec.worker` runs and warns when none of its
    /// CPUs is on its GPU's NUMA node (its copies then cross the socket
    /// interconnect, and the memory they load is remote to the GPU).
    fn place(&self, spec: &EngineSpec, gpu: &GpuFacts) {
        let sys = self
            .loaded
            .as_ref()
            .map(|l| l.sysfs.clone())
            .unwrap_or_default();
        let cpus = if spec.cpus.is_empty() {
            dmalab_core::cpus::allowed_cpus()
        } else {
            spec.cpus.clone()
        };
        let mut nodes: Vec<u32> = cpus
            .iter()
            .filter_map(|&c| dmalab_gpu::facts::cpu_node(&sys, c))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mut placed = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = gpu.numa_node {
            if !nodes.is_empty() && !nodes.contains(&g) {
                let list: Vec<String> = nodes.iter().map(u32::to_string).collect();
                placed.1.push(format!(
                    "worker {} runs on NUMA node {}, GPU {} ({}) is on node {g}: pin it there with --cpus-allowed",
                    spec.worker,
                    list.join(","),
                    gpu.index,
                    gpu.pci_address
                ));
            }
        }
        placed.0.push(WorkerPlacement {
            worker: spec.worker,
            gpu: gpu.index,
            cpu_nodes: nodes,
        });
    }
}

/// The buffer as ranges to register: one range when the pieces are
/// contiguous (they are pieces of one mapping), else one per piece.
fn host_ranges(pieces: &[BufferPiece]) -> Vec<(*mut u8, usize)> {
    let contiguous = pieces
        .windows(2)
        .all(|w| w[0].addr as usize + w[0].len == w[1].addr as usize);
    match pieces.first() {
        Some(first) if contiguous => vec![(first.addr, pieces.iter().map(|p| p.len).sum())],
        _ => pieces.iter().map(|p| (p.addr, p.len)).collect(),
    }
}

/// One worker's queue: a [`CopyQueue`] over the shared buffer's pieces.
struct GpuEngine {
    q: CopyQueue,
    /// `d2d`: every copy within GPU memory, the pieces unused.
    copy: GpuCopy,
    pieces: Vec<BufferPiece>,
    lens: Vec<i32>,
    /// The direction of each slot's copy (None: no copy queued there).
    dirs: Vec<Option<CopyDir>>,
    counts: Arc<CopyCounts>,
    immediate: Vec<Completion>,
    done: Vec<u32>,
}

impl GpuEngine {
    fn new(q: CopyQueue, spec: &EngineSpec, copy: GpuCopy, counts: &Arc<CopyCounts>) -> Self {
        Self {
            q,
            copy,
            pieces: spec.pieces.clone(),
            lens: vec![0; spec.iodepth as usize],
            dirs: vec![None; spec.iodepth as usize],
            counts: counts.clone(),
            immediate: Vec::new(),
            done: Vec::with_capacity(spec.iodepth as usize),
        }
    }

    /// Marks `slot` as holding a copy of `len` bytes in direction `dir`.
    fn queued(&mut self, slot: u32, dir: CopyDir, len: u32) {
        if let Some(l) = self.lens.get_mut(slot as usize) {
            *l = len as i32;
        }
        if let Some(d) = self.dirs.get_mut(slot as usize) {
            *d = Some(dir);
        }
    }
}

impl Engine for GpuEngine {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        let dir = match cmd.op {
            Op::Read => CopyDir::ToHost,
            Op::Write => CopyDir::ToDevice,
            Op::Noop | Op::Flush => {
                self.immediate.push(Completion { slot, result: 0 });
                return Ok(());
            }
        };
        if self.copy == GpuCopy::D2d {
            // Either direction becomes one copy within the device at the
            // same device offset and size: the same calls on the CPU.
            self.q
                .submit_within_device(slot, cmd.dev_offset, cmd.len as usize)
                .map_err(engine_error)?;
            self.queued(slot, CopyDir::WithinDevice, cmd.len);
            return Ok(());
        }
        let bad = |what: &str| {
            EngineError::io(
                format!("GPU copy in slot {slot}"),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string()),
            )
        };
        let piece = self
            .pieces
            .get(usize::from(cmd.piece))
            .ok_or_else(|| bad("no such buffer piece"))?;
        let off = cmd
            .buf_offset
            .checked_sub(piece.buf_offset)
            .filter(|o| o + u64::from(cmd.len) <= piece.len as u64)
            .ok_or_else(|| bad("the command lies outside its buffer piece"))?;
        // SAFETY: `off + len` lies inside the piece (checked above), so the
        // pointer stays inside the mapping.
        let host = unsafe { piece.addr.add(off as usize) };
        // SAFETY: the host range lies in the registered buffer (above),
        // which outlives this engine.
        unsafe {
            self.q
                .submit(slot, dir, host, cmd.dev_offset, cmd.len as usize)
        }
        .map_err(engine_error)?;
        self.queued(slot, dir, cmd.len);
        Ok(())
    }

    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let t0 = Instant::now();
        let deadline = timeout.map(|t| t0 + t);
        let mut got = self.immediate.len();
        out.append(&mut self.immediate);
        loop {
            self.done.clear();
            self.q.poll(&mut self.done).map_err(engine_error)?;
            for &s in &self.done {
                let result = self.lens.get(s as usize).copied().unwrap_or(0);
                if let Some(dir) = self.dirs.get_mut(s as usize).and_then(Option::take) {
                    self.counts.add(dir, u64::from(result.unsigned_abs()));
                }
                out.push(Completion { slot: s, result });
            }
            got += self.done.len();
            if got >= min_complete {
                return Ok(());
            }
            let waited = t0.elapsed();
            if self.q.in_flight() == 0 {
                // Nothing can complete: honour the timeout like a ring.
                if let Some(t) = timeout {
                    std::thread::sleep(t.saturating_sub(waited));
                }
                return Ok(());
            }
            if timeout.is_some_and(|t| waited >= t) {
                return Ok(());
            }
            // Spin, sleep or block, as --gpu-wait says, then poll again.
            self.q.wait(deadline).map_err(engine_error)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_seam_is_the_value_passed_in() {
        // Whatever the environment says, the driver the binary chose.
        let seams = crate::engine::DeviceSeams {
            gpu_driver: Some("mock:fast".into()),
            ..Default::default()
        };
        let e = crate::engine::driver(EngineKind::Gpu, &seams)
            .inspect(&TargetRequest::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("mock option 'fast'"), "{e}");
        let seams = crate::engine::DeviceSeams {
            gpu_driver: Some("mock".into()),
            ..Default::default()
        };
        let info = crate::engine::driver(EngineKind::Gpu, &seams)
            .inspect(&TargetRequest::default())
            .unwrap();
        assert_eq!(info.kind, "gpu");
    }

    #[test]
    fn gpus_are_only_for_the_gpu_engine() {
        assert_eq!(
            GpuPlan::from_flags(EngineKind::Gpu, Some("1,0"), None, None).unwrap(),
            Some(GpuPlan {
                gpus: vec![0, 1],
                wait: GpuWait::default(),
                copy: GpuCopy::Host,
            })
        );
        assert_eq!(
            GpuPlan::from_flags(EngineKind::Gpu, None, Some(GpuWait::Sleep), None).unwrap(),
            Some(GpuPlan {
                gpus: vec![],
                wait: GpuWait::Sleep,
                copy: GpuCopy::Host,
            })
        );
        assert_eq!(
            GpuPlan::from_flags(EngineKind::Null, None, None, None).unwrap(),
            None
        );
        let e = GpuPlan::from_flags(EngineKind::IoUring, Some("0"), None, None).unwrap_err();
        assert_eq!(e.option, "--gpus");
        let e = GpuPlan::from_flags(EngineKind::Null, None, Some(GpuWait::Spin), None).unwrap_err();
        assert_eq!(e.option, "--gpu-wait");
        let p = GpuPlan::from_flags(EngineKind::Gpu, None, None, Some(GpuCopy::D2d)).unwrap();
        assert_eq!(p.map(|p| p.copy), Some(GpuCopy::D2d));
        let e = GpuPlan::from_flags(EngineKind::Null, None, None, Some(GpuCopy::D2d)).unwrap_err();
        assert_eq!(e.option, "--gpu-copy");
    }

    #[test]
    fn copies_count_in_their_direction() {
        let c = CopyCounts::default();
        c.add(CopyDir::ToHost, 4096);
        c.add(CopyDir::ToDevice, 8192);
        c.add(CopyDir::ToHost, 4096);
        assert_eq!(c.get(CopyDir::ToHost), (2, 8192));
        assert_eq!(c.get(CopyDir::ToDevice), (1, 8192));
        c.add(CopyDir::WithinDevice, 512);
        assert_eq!(c.get(CopyDir::WithinDevice), (1, 512));
        assert_eq!(c.get(CopyDir::ToHost), (2, 8192));
    }

    #[test]
    fn contiguous_pieces_are_registered_as_one_range() {
        let mut v = vec![0u8; 3 * 4096];
        let base = v.as_mut_ptr();
        let piece = |i: usize| BufferPiece {
            // SAFETY: inside `v`.
            addr: unsafe { base.add(i * 4096) },
            len: 4096,
            buf_offset: (i * 4096) as u64,
        };
        let r = host_ranges(&[piece(0), piece(1), piece(2)]);
        assert_eq!(r, vec![(base, 3 * 4096)]);
        let r = host_ranges(&[piece(0), piece(2)]);
        assert_eq!(r.len(), 2);
        assert!(host_ranges(&[]).is_empty());
    }
}
