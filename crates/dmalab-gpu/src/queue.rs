//! The GPU side of a load run: the devices opened for it (primary context,
//! one device buffer each, two for copies within the device), the shared
//! host buffer page-locked for them, and one worker's copy queue (a stream
//! and an event per slot).

use crate::api::{
    describe, CuError, CuResult, Cuda, Device, DevicePtr, Event, Stream, EVENT_BLOCKING_SYNC,
    EVENT_DISABLE_TIMING, HOST_REGISTER_PORTABLE, STREAM_NON_BLOCKING,
};
use crate::error::GpuError;
use crate::facts::{normalize_pci_address, read_pci_link, GpuFacts};
use crate::wait::{nap, polls_last_stretch, GpuWait, Pace};
use dmalab_core::units::fmt_bytes;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which way a copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDir {
    /// Device to host: the GPU writes host memory (`cuMemcpyDtoHAsync`).
    ToHost,
    /// Host to device: the GPU reads host memory (`cuMemcpyHtoDAsync`).
    ToDevice,
    /// Device to device: between two buffers in the GPU's own memory
    /// (`cuMemcpyDtoDAsync`); no host memory is read or written.
    WithinDevice,
}

/// What a run's copies move between (`--gpu-copy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum GpuCopy {
    /// The host buffer and GPU memory, the way `--direction` says: the
    /// GPU's DMA into (or out of) host memory. The default.
    #[default]
    Host,
    /// Two buffers in GPU memory (device to device), through the same
    /// streams, events, copy sizes and waits: the CPU side of the copies
    /// without DMA to the host (the control of a `host` load). The host
    /// buffer is neither page-locked nor touched.
    #[cfg_attr(feature = "clap", value(name = "d2d"))]
    #[serde(rename = "d2d")]
    D2d,
}

impl GpuCopy {
    /// The name as `--gpu-copy` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuCopy::Host => "host",
            GpuCopy::D2d => "d2d",
        }
    }
}

/// Turns a failed call into a [`GpuError`].
pub(crate) fn call<T>(
    cuda: &dyn Cuda,
    name: &'static str,
    context: impl FnOnce() -> String,
    r: CuResult<T>,
) -> Result<T, GpuError> {
    r.map_err(|code| GpuError::Driver {
        call: name,
        context: context(),
        code,
        text: describe(cuda, code),
    })
}

/// Initialises the driver and describes the GPUs `indices` (nothing is
/// created on them). `sys` stands for `/sys`.
pub fn inspect(cuda: &dyn Cuda, indices: &[u32], sys: &Path) -> Result<Vec<GpuFacts>, GpuError> {
    call(cuda, "cuInit", String::new, cuda.init())?;
    let count = call(cuda, "cuDeviceGetCount", String::new, cuda.device_count())?;
    let count = u32::try_from(count).unwrap_or(0);
    indices
        .iter()
        .map(|&index| {
            if index >= count {
                return Err(GpuError::NoSuchGpu { index, count });
            }
            let on = || format!(" for GPU {index}");
            let dev = call(cuda, "cuDeviceGet", on, cuda.device_get(index as i32))?;
            let name = call(cuda, "cuDeviceGetName", on, cuda.device_name(dev))?;
            let bus = call(cuda, "cuDeviceGetPCIBusId", on, cuda.device_pci_bus_id(dev))?;
            let memory_bytes = call(cuda, "cuDeviceTotalMem_v2", on, cuda.device_total_mem(dev))?;
            let mut f = GpuFacts {
                index,
                name,
                pci_address: normalize_pci_address(&bus).unwrap_or(bus),
                memory_bytes,
                ..GpuFacts::default()
            };
            read_pci_link(sys, &mut f);
            Ok(f)
        })
        .collect()
}

/// One GPU opened for a run: its primary context retained and a device
/// buffer allocated; both are given back on drop.
pub struct Gpu {
    cuda: Arc<dyn Cuda>,
    dev: Device,
    ctx: crate::api::Context,
    buf: DevicePtr,
    /// The second device buffer, of `buf_bytes`, that copies within the
    /// device read from ([`GpuCopy::D2d`]).
    peer: Option<DevicePtr>,
    buf_bytes: u64,
    /// What the result says about it.
    pub facts: GpuFacts,
}

impl Gpu {
    /// Retains the primary context of the GPU `facts` describes (from
    /// [`inspect`]) and allocates `buf_bytes` on it.
    pub fn open(cuda: Arc<dyn Cuda>, facts: GpuFacts, buf_bytes: u64) -> Result<Self, GpuError> {
        Self::open_for(cuda, facts, buf_bytes, GpuCopy::Host)
    }

    /// As [`Gpu::open`], with a second buffer of `buf_bytes` for copies
    /// within the device when `copy` is [`GpuCopy::D2d`].
    pub fn open_for(
        cuda: Arc<dyn Cuda>,
        facts: GpuFacts,
        buf_bytes: u64,
        copy: GpuCopy,
    ) -> Result<Self, GpuError> {
        let buffers = match copy {
            GpuCopy::Host => 1,
            GpuCopy::D2d => 2,
        };
        let c = &*cuda;
        let index = facts.index;
        let on = || format!(" for GPU {index}");
        let dev = call(c, "cuDeviceGet", on, c.device_get(index as i32))?;
        let ctx = call(c, "cuDevicePrimaryCtxRetain", on, c.primary_ctx_retain(dev))?;
        let mut bufs = Vec::with_capacity(buffers);
        let alloc = c.ctx_set_current(ctx).map_err(|e| ("cuCtxSetCurrent", e));
        let alloc = alloc.and_then(|()| {
            for _ in 0..buffers {
                bufs.push(c.mem_alloc(buf_bytes).map_err(|e| ("cuMemAlloc_v2", e))?);
            }
            Ok(())
        });
        match alloc {
            Ok(()) => {}
            Err((name, code)) => {
                for &b in &bufs {
                    let _ = c.mem_free(b);
                }
                let _ = c.primary_ctx_release(dev);
                let context = if code == CuError::OUT_OF_MEMORY {
                    let twice = if buffers > 1 {
                        " (twice: copies within the device need two buffers)"
                    } else {
                        ""
                    };
                    format!(
                        " allocating {}{twice} on GPU {index} ({} of device memory; use a smaller --size)",
                        fmt_bytes(buf_bytes as f64),
                        fmt_bytes(facts.memory_bytes as f64)
                    )
                } else {
                    format!(" for GPU {index}")
                };
                return Err(GpuError::Driver {
                    call: name,
                    context,
                    code,
                    text: describe(c, code),
                });
            }
        }
        Ok(Self {
            cuda,
            dev,
            ctx,
            buf: bufs[0],
            peer: bufs.get(1).copied(),
            buf_bytes,
            facts,
        })
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn make_current(&self) -> Result<(), GpuError> {
        let index = self.facts.index;
        call(
            &*self.cuda,
            "cuCtxSetCurrent",
            || format!(" for GPU {index}"),
            self.cuda.ctx_set_current(self.ctx),
        )
    }

    /// Bytes of the device buffer.
    pub fn buf_bytes(&self) -> u64 {
        self.buf_bytes
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // Errors here cannot be acted on: the process is done with the GPU.
        let _ = self.cuda.ctx_set_current(self.ctx);
        let _ = self.cuda.mem_free(self.buf);
        if let Some(p) = self.peer {
            let _ = self.cuda.mem_free(p);
        }
        let _ = self.cuda.primary_ctx_release(self.dev);
    }
}

/// Host memory page-locked for the GPUs (portable: for every context),
/// unregistered on drop.
pub struct HostRegistration {
    cuda: Arc<dyn Cuda>,
    starts: Vec<usize>,
}

impl HostRegistration {
    /// Registers each `(address, bytes)` range with `cuMemHostRegister`
    /// (cacheable memory: no write-combining flag exists for it), with
    /// `gpu`'s context current on the calling thread.
    ///
    /// # Safety
    /// Every range must stay mapped until the registration drops.
    pub unsafe fn new(gpu: &Gpu, ranges: &[(*mut u8, usize)]) -> Result<Self, GpuError> {
        gpu.make_current()?;
        let mut reg = Self {
            cuda: gpu.cuda.clone(),
            starts: Vec::with_capacity(ranges.len()),
        };
        for &(p, n) in ranges {
            // SAFETY: the caller keeps the range mapped while registered.
            let r = unsafe { gpu.cuda.mem_host_register(p, n, HOST_REGISTER_PORTABLE) };
            // On failure `reg` drops and unregisters what was done.
            call(
                &*gpu.cuda,
                "cuMemHostRegister_v2",
                || format!(" page-locking {} of the DMA buffer", fmt_bytes(n as f64)),
                r,
            )?;
            reg.starts.push(p as usize);
        }
        Ok(reg)
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        for &p in &self.starts {
            // SAFETY: registered by `new`; every queue using it has drained
            // (queues hold the registration alive through an Arc).
            let _ = unsafe { self.cuda.mem_host_unregister(p as *mut u8) };
        }
    }
}

// SAFETY: the registration holds addresses only, never dereferenced here.
unsafe impl Send for HostRegistration {}
// SAFETY: as above.
unsafe impl Sync for HostRegistration {}

/// How long a dropped queue waits for its copies before giving up on them.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// A copy in flight.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// Submission order over the queue's life.
    seq: u64,
    submitted: Instant,
    bytes: u64,
    dir: CopyDir,
}

/// One worker's copies to one GPU: a stream and an event per slot.
pub struct CopyQueue {
    cuda: Arc<dyn Cuda>,
    gpu: Arc<Gpu>,
    /// The host memory the copies may touch (None: copies within the
    /// device only).
    reg: Option<Arc<HostRegistration>>,
    streams: Vec<Stream>,
    events: Vec<Event>,
    pending: Vec<Option<InFlight>>,
    in_flight: usize,
    wait: GpuWait,
    next_seq: u64,
    /// Per direction ([`CopyDir`]'s order): the recent rate, and when a
    /// completion was last seen.
    pace: [Pace; 3],
    last_done: [Option<Instant>; 3],
}

/// When the oldest copy in flight is expected to complete.
#[derive(Clone, Copy, Debug)]
struct Expect {
    /// Until the expected completion (zero once past it).
    remaining: Duration,
    /// Past the expected completion (zero before it).
    overdue: Duration,
    /// The whole copy at the recent rate.
    copy_time: Duration,
}

fn dir_index(dir: CopyDir) -> usize {
    match dir {
        CopyDir::ToHost => 0,
        CopyDir::ToDevice => 1,
        CopyDir::WithinDevice => 2,
    }
}

impl CopyQueue {
    /// Makes `gpu` current on the calling thread and creates `depth`
    /// streams and events on it (events with `CU_EVENT_BLOCKING_SYNC` for
    /// [`GpuWait::Block`]). `reg` is kept alive while copies may run.
    pub fn new(
        gpu: Arc<Gpu>,
        reg: Arc<HostRegistration>,
        depth: u32,
        wait: GpuWait,
    ) -> Result<Self, GpuError> {
        Self::build(gpu, Some(reg), depth, wait)
    }

    /// As [`CopyQueue::new`] for copies within the device only
    /// ([`CopyQueue::submit_within_device`]): no host memory is registered
    /// or touched. `gpu` must have been opened for [`GpuCopy::D2d`].
    pub fn new_within_device(gpu: Arc<Gpu>, depth: u32, wait: GpuWait) -> Result<Self, GpuError> {
        Self::build(gpu, None, depth, wait)
    }

    fn build(
        gpu: Arc<Gpu>,
        reg: Option<Arc<HostRegistration>>,
        depth: u32,
        wait: GpuWait,
    ) -> Result<Self, GpuError> {
        gpu.make_current()?;
        let cuda = gpu.cuda.clone();
        let mut q = Self {
            cuda: cuda.clone(),
            gpu,
            reg,
            streams: Vec::new(),
            events: Vec::new(),
            pending: vec![None; depth as usize],
            in_flight: 0,
            wait,
            next_seq: 0,
            pace: [Pace::default(); 3],
            last_done: [None; 3],
        };
        let event_flags = match wait {
            GpuWait::Block => EVENT_BLOCKING_SYNC | EVENT_DISABLE_TIMING,
            GpuWait::Spin | GpuWait::Sleep => EVENT_DISABLE_TIMING,
        };
        let c = &*cuda;
        for _ in 0..depth {
            // On failure `q` drops and destroys what was made.
            let s = call(
                c,
                "cuStreamCreate",
                String::new,
                c.stream_create(STREAM_NON_BLOCKING),
            )?;
            q.streams.push(s);
            let e = call(c, "cuEventCreate", String::new, c.event_create(event_flags))?;
            q.events.push(e);
        }
        Ok(q)
    }

    /// Copies `len` bytes between `host` and the device buffer at
    /// `dev_offset` on `slot`'s stream, then records `slot`'s event.
    ///
    /// # Safety
    /// `host..host+len` lies in the registered memory.
    pub unsafe fn submit(
        &mut self,
        slot: u32,
        dir: CopyDir,
        host: *mut u8,
        dev_offset: u64,
        len: usize,
    ) -> Result<(), GpuError> {
        let s = self.check_slot(slot, dev_offset, len)?;
        let refuse = |text: &str| GpuError::Driver {
            call: "submit",
            context: format!(" on slot {slot}"),
            code: CuError::INVALID_VALUE,
            text: text.into(),
        };
        if self.reg.is_none() {
            return Err(refuse("the queue has no host memory registered"));
        }
        let c = &*self.cuda;
        let d = DevicePtr(self.gpu.buf.0 + dev_offset);
        let stream = self.streams[s];
        match dir {
            CopyDir::ToHost => {
                // SAFETY: the caller guarantees the host range; the device
                // range was checked against the buffer above.
                let r = unsafe { c.memcpy_dtoh_async(host, d, len, stream) };
                call(c, "cuMemcpyDtoHAsync_v2", String::new, r)?;
            }
            CopyDir::ToDevice => {
                // SAFETY: as above.
                let r = unsafe { c.memcpy_htod_async(d, host, len, stream) };
                call(c, "cuMemcpyHtoDAsync_v2", String::new, r)?;
            }
            CopyDir::WithinDevice => {
                return Err(refuse(
                    "a copy within the device takes no host address (submit_within_device)",
                ))
            }
        }
        self.record(s, dir, len)
    }

    /// Copies `len` bytes from the GPU's second buffer to its first, both
    /// at `dev_offset`, on `slot`'s stream, then records `slot`'s event: the
    /// same calls on the CPU as [`CopyQueue::submit`], with the traffic in
    /// device memory. Refused when the GPU has no second buffer.
    pub fn submit_within_device(
        &mut self,
        slot: u32,
        dev_offset: u64,
        len: usize,
    ) -> Result<(), GpuError> {
        let s = self.check_slot(slot, dev_offset, len)?;
        let Some(peer) = self.gpu.peer else {
            return Err(GpuError::Driver {
                call: "submit",
                context: format!(" on slot {slot}"),
                code: CuError::INVALID_VALUE,
                text: "the GPU was opened without a second buffer for copies within it".into(),
            });
        };
        let c = &*self.cuda;
        let dst = DevicePtr(self.gpu.buf.0 + dev_offset);
        let src = DevicePtr(peer.0 + dev_offset);
        // SAFETY: both ranges lie in this GPU's two allocations of
        // `buf_bytes` (the offset and length were checked against it).
        let r = unsafe { c.memcpy_dtod_async(dst, src, len, self.streams[s]) };
        call(c, "cuMemcpyDtoDAsync_v2", String::new, r)?;
        self.record(s, CopyDir::WithinDevice, len)
    }

    /// The slot's index when it exists and is free and `len` bytes at
    /// `dev_offset` fit the device buffer.
    fn check_slot(&self, slot: u32, dev_offset: u64, len: usize) -> Result<usize, GpuError> {
        let s = slot as usize;
        if s >= self.streams.len() || self.pending[s].is_some() {
            return Err(GpuError::Driver {
                call: "submit",
                context: format!(" on slot {slot}"),
                code: CuError::INVALID_VALUE,
                text: "the slot does not exist or is busy".into(),
            });
        }
        if dev_offset.saturating_add(len as u64) > self.gpu.buf_bytes {
            return Err(GpuError::Driver {
                call: "submit",
                context: format!(" at device offset {dev_offset}"),
                code: CuError::INVALID_VALUE,
                text: format!(
                    "{len} bytes reach past the {}-byte device buffer",
                    self.gpu.buf_bytes
                ),
            });
        }
        Ok(s)
    }

    /// Records slot `s`'s event behind its copy and marks the copy in
    /// flight.
    fn record(&mut self, s: usize, dir: CopyDir, len: usize) -> Result<(), GpuError> {
        let c = &*self.cuda;
        call(
            c,
            "cuEventRecord",
            String::new,
            c.event_record(self.events[s], self.streams[s]),
        )?;
        self.pending[s] = Some(InFlight {
            seq: self.next_seq,
            submitted: Instant::now(),
            bytes: len as u64,
            dir,
        });
        self.next_seq += 1;
        self.in_flight += 1;
        Ok(())
    }

    /// Appends the slots whose copies have completed to `done`.
    pub fn poll(&mut self, done: &mut Vec<u32>) -> Result<(), GpuError> {
        if self.in_flight == 0 {
            return Ok(());
        }
        let now = Instant::now();
        // Per direction: bytes seen complete now, and the earliest
        // submission among them.
        let mut seen: [(u64, Option<Instant>); 3] = [(0, None); 3];
        for s in 0..self.pending.len() {
            let Some(f) = self.pending[s] else { continue };
            let r = self.cuda.event_query(self.events[s]);
            if self.copy_call("cuEventQuery", r)? {
                self.pending[s] = None;
                self.in_flight -= 1;
                done.push(s as u32);
                let d = &mut seen[dir_index(f.dir)];
                d.0 += f.bytes;
                d.1 = Some(d.1.map_or(f.submitted, |t: Instant| t.min(f.submitted)));
            }
        }
        for (i, &(bytes, first)) in seen.iter().enumerate() {
            let Some(first) = first else { continue };
            let start = self.engine_start(i, first);
            self.pace[i].observe(bytes, now.saturating_duration_since(start));
            self.last_done[i] = Some(now);
        }
        Ok(())
    }

    /// A failed call about a copy in flight, as a [`GpuError`] naming the
    /// GPU.
    fn copy_call<T>(&self, name: &'static str, r: CuResult<T>) -> Result<T, GpuError> {
        let index = self.gpu.facts.index;
        call(&*self.cuda, name, || format!(" (a copy on GPU {index})"), r)
    }

    /// When the copy engine of direction `i` started on bytes submitted at
    /// `submitted`: the later of that and the previous completion seen in
    /// that direction (copies in one direction run one after another).
    fn engine_start(&self, i: usize, submitted: Instant) -> Instant {
        self.last_done[i].map_or(submitted, |t| t.max(submitted))
    }

    /// The oldest copy in flight: its slot, and how long until it is
    /// expected to complete, how long past that it is, and how long it
    /// takes in all (None: no rate known yet).
    fn oldest(&self, now: Instant) -> Option<(usize, Option<Expect>)> {
        let (s, f) = self
            .pending
            .iter()
            .enumerate()
            .filter_map(|(s, p)| p.map(|f| (s, f)))
            .min_by_key(|(_, f)| f.seq)?;
        let i = dir_index(f.dir);
        let expect = self.pace[i].copy_time(f.bytes).map(|t| {
            let end = self.engine_start(i, f.submitted) + t;
            Expect {
                remaining: end.saturating_duration_since(now),
                overdue: now.saturating_duration_since(end),
                copy_time: t,
            }
        });
        Some((s, expect))
    }

    /// Waits once, the queue's [`GpuWait`] way, for a copy to complete or
    /// `deadline` (None: no limit): `spin` returns at once (the caller
    /// polls again), `sleep` sleeps as [`nap`] sizes it, `block` sleeps in
    /// `cuEventSynchronize` on the oldest copy when that copy is expected
    /// to complete before the deadline, and as `sleep` otherwise. Call
    /// [`CopyQueue::poll`] afterwards for what completed.
    pub fn wait(&mut self, deadline: Option<Instant>) -> Result<(), GpuError> {
        let now = Instant::now();
        let left = deadline.map(|d| d.saturating_duration_since(now));
        let Some((slot, expect)) = self.oldest(now) else {
            return Ok(());
        };
        match self.wait {
            GpuWait::Spin => {
                std::hint::spin_loop();
                return Ok(());
            }
            GpuWait::Block => {
                let in_time = match (left, expect) {
                    (None, _) => true,
                    (Some(l), Some(e)) => e.remaining <= l,
                    (Some(_), None) => false,
                };
                if in_time {
                    let r = self.cuda.event_synchronize(self.events[slot]);
                    return self.copy_call("cuEventSynchronize", r);
                }
            }
            GpuWait::Sleep => {}
        }
        if self.wait == GpuWait::Sleep
            && expect.is_some_and(|e| {
                polls_last_stretch(self.in_flight == 1, e.remaining, e.overdue, e.copy_time)
            })
        {
            std::hint::spin_loop();
            return Ok(());
        }
        let d = nap(
            expect.map(|e| e.remaining),
            expect.map(|e| e.copy_time),
            left,
        );
        if !d.is_zero() {
            std::thread::sleep(d);
        }
        Ok(())
    }

    /// How this queue waits.
    pub fn wait_mode(&self) -> GpuWait {
        self.wait
    }

    /// Copies submitted and not yet seen complete.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for CopyQueue {
    fn drop(&mut self) {
        // The host memory must not be unregistered (or unmapped) under a
        // copy: wait for what is in flight, unless the context has failed.
        let _ = self.gpu.make_current();
        let t0 = Instant::now();
        let mut done = Vec::new();
        while self.in_flight > 0 && t0.elapsed() < DRAIN_LIMIT {
            if self.poll(&mut done).is_err() {
                break;
            }
            std::thread::yield_now();
        }
        for &e in &self.events {
            let _ = self.cuda.event_destroy(e);
        }
        for &s in &self.streams {
            let _ = self.cuda.stream_destroy(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::{MockConfig, MockDriver};

    fn mock(cfg: MockConfig) -> (Arc<MockDriver>, Arc<dyn Cuda>) {
        let m = Arc::new(MockDriver::new(cfg));
        let c: Arc<dyn Cuda> = m.clone();
        (m, c)
    }

    /// A page-aligned host range inside `v`.
    fn aligned(v: &mut [u8], len: usize) -> *mut u8 {
        let a = (v.as_mut_ptr() as usize).next_multiple_of(4096);
        assert!(a + len <= v.as_ptr() as usize + v.len());
        a as *mut u8
    }

    #[test]
    fn inspect_names_the_gpus_and_refuses_missing_ones() {
        let (_m, c) = mock(MockConfig {
            devices: 2,
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0, 1], Path::new("/nonexistent")).unwrap();
        assert_eq!(f[1].pci_address, "0000:e1:00.0");
        assert_eq!(f[1].name, "dmalab mock GPU 1");
        assert_eq!(f[0].memory_bytes, 16 << 30);
        let e = inspect(&*c, &[2], Path::new("/")).err().unwrap();
        assert_eq!(
            e.to_string(),
            "GPU 2 does not exist: the driver sees 2 GPU(s) (numbered from 0)"
        );
        let (_m, c) = mock(MockConfig {
            devices: 0,
            ..MockConfig::default()
        });
        let e = inspect(&*c, &[0], Path::new("/")).err().unwrap();
        assert_eq!(
            e.to_string(),
            "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
        );
        assert!(e.is_host_lacking());
    }

    #[test]
    fn an_out_of_memory_device_says_how_much_was_asked_and_releases_the_context() {
        let (m, c) = mock(MockConfig {
            mem_bytes: 64 << 20,
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0], Path::new("/")).unwrap().remove(0);
        let e = Gpu::open(c, f, 128 << 20).err().unwrap().to_string();
        assert!(
            e.starts_with("cuMemAlloc_v2 failed allocating 128.00 MiB on GPU 0"),
            "{e}"
        );
        assert!(e.contains("--size"), "{e}");
        assert!(
            e.ends_with("CUDA_ERROR_OUT_OF_MEMORY (out of memory)"),
            "{e}"
        );
        assert_eq!(m.stats().live_contexts, 0);
    }

    #[test]
    fn a_worker_copies_both_ways_and_everything_is_given_back() {
        let (m, c) = mock(MockConfig {
            gbps: 1.0,
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0], Path::new("/")).unwrap().remove(0);
        let gpu = Arc::new(Gpu::open(c, f, 1 << 20).unwrap());
        let mut host = vec![0u8; (1 << 20) + 4096];
        let p = aligned(&mut host, 1 << 20);
        // SAFETY: `host` outlives the registration (dropped in the scope).
        let reg = Arc::new(unsafe { HostRegistration::new(&gpu, &[(p, 1 << 20)]) }.unwrap());
        let addr = p as usize;
        std::thread::scope(|s| {
            let (gpu, reg) = (gpu.clone(), reg.clone());
            s.spawn(move || {
                // A fresh thread: the queue makes the context current itself.
                let mut q = CopyQueue::new(gpu, reg, 4, GpuWait::Spin).unwrap();
                let p = addr as *mut u8;
                // SAFETY: inside the registered range.
                unsafe {
                    q.submit(0, CopyDir::ToHost, p, 0, 65536).unwrap();
                    q.submit(1, CopyDir::ToDevice, p.add(65536), 65536, 65536)
                        .unwrap();
                    let busy = q.submit(0, CopyDir::ToHost, p, 0, 4096).unwrap_err();
                    assert!(busy.to_string().contains("busy"), "{busy}");
                    let past = q
                        .submit(2, CopyDir::ToHost, p, (1 << 20) - 4096, 8192)
                        .unwrap_err();
                    assert!(past.to_string().contains("past the 1048576-byte"), "{past}");
                }
                let mut done = Vec::new();
                while q.in_flight() > 0 {
                    q.poll(&mut done).unwrap();
                }
                done.sort_unstable();
                assert_eq!(done, [0, 1]);
                // Left in flight: the drop waits for it.
                // SAFETY: inside the registered range.
                unsafe { q.submit(3, CopyDir::ToHost, p, 0, 1 << 20) }.unwrap();
            });
        });
        let st = m.stats();
        assert_eq!((st.dtoh_copies, st.htod_copies), (2, 1));
        assert_eq!((st.live_streams, st.live_events), (0, 0));
        drop(reg);
        drop(gpu);
        let st = m.stats();
        assert_eq!(
            (st.live_allocs, st.live_registrations, st.live_contexts),
            (0, 0, 0)
        );
    }

    /// Runs `copies` 64 KiB copies through a depth-2 queue waiting `mode`'s
    /// way; returns the mock's statistics.
    fn copy_waiting(mode: GpuWait, copies: usize) -> crate::mock::MockStats {
        let (m, c) = mock(MockConfig {
            gbps: 1.0,
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0], Path::new("/")).unwrap().remove(0);
        let gpu = Arc::new(Gpu::open(c, f, 1 << 20).unwrap());
        let mut host = vec![0u8; (1 << 20) + 4096];
        let p = aligned(&mut host, 1 << 20);
        // SAFETY: `host` outlives the registration (dropped in the scope).
        let reg = Arc::new(unsafe { HostRegistration::new(&gpu, &[(p, 1 << 20)]) }.unwrap());
        let mut q = CopyQueue::new(gpu, reg, 2, mode).unwrap();
        assert_eq!(q.wait_mode(), mode);
        let (mut submitted, mut completed, mut done) = (0, 0, Vec::new());
        let mut free = vec![0u32, 1];
        while completed < copies {
            while let Some(s) = free.pop().filter(|_| submitted < copies) {
                // SAFETY: inside the registered range.
                unsafe { q.submit(s, CopyDir::ToHost, p, 0, 65536) }.unwrap();
                submitted += 1;
            }
            q.wait(None).unwrap();
            done.clear();
            q.poll(&mut done).unwrap();
            completed += done.len();
            free.extend_from_slice(&done);
        }
        drop(q);
        m.stats()
    }

    #[test]
    fn every_wait_mode_sees_every_copy_complete() {
        for mode in [GpuWait::Spin, GpuWait::Sleep, GpuWait::Block] {
            let st = copy_waiting(mode, 20);
            assert_eq!(st.dtoh_copies, 20, "{mode:?}");
            assert_eq!(st.live_events, 0, "{mode:?}");
            // Only block sleeps in the driver, and on blocking events.
            assert_eq!(st.spinning_syncs, 0, "{mode:?}");
            if mode == GpuWait::Block {
                assert!(st.blocking_syncs > 0, "{mode:?}");
            } else {
                assert_eq!(st.blocking_syncs, 0, "{mode:?}");
            }
        }
    }

    #[test]
    fn block_does_not_sleep_in_the_driver_past_a_deadline_it_cannot_judge() {
        // 1 MiB at 0.01 GB/s: 105 ms. With no rate known yet and a
        // deadline, block must poll with naps, not wait out the copy.
        let (m, c) = mock(MockConfig {
            gbps: 0.01,
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0], Path::new("/")).unwrap().remove(0);
        let gpu = Arc::new(Gpu::open(c, f, 1 << 20).unwrap());
        let mut host = vec![0u8; (1 << 20) + 4096];
        let p = aligned(&mut host, 1 << 20);
        // SAFETY: `host` outlives the registration.
        let reg = Arc::new(unsafe { HostRegistration::new(&gpu, &[(p, 1 << 20)]) }.unwrap());
        let mut q = CopyQueue::new(gpu, reg, 1, GpuWait::Block).unwrap();
        // SAFETY: inside the registered range.
        unsafe { q.submit(0, CopyDir::ToDevice, p, 0, 1 << 20) }.unwrap();
        q.wait(Some(Instant::now() + Duration::from_micros(200)))
            .unwrap();
        assert_eq!(m.stats().blocking_syncs, 0);
        // Without a deadline it sleeps in the driver until the copy is done.
        q.wait(None).unwrap();
        assert_eq!(m.stats().blocking_syncs, 1);
        let mut done = Vec::new();
        q.poll(&mut done).unwrap();
        assert_eq!(done, [0]);
    }

    #[test]
    fn copies_within_the_device_count_exactly_and_leave_host_memory_alone() {
        let (m, c) = mock(MockConfig {
            gbps: 1.0,
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0], Path::new("/")).unwrap().remove(0);
        // A host buffer filled with a pattern, page-locked as a load's is:
        // device-to-host copies would mark it (the mock's DTOH_MARK).
        let mut host: Vec<u8> = (0..(1 << 20) + 4096).map(|i| (i % 251) as u8).collect();
        let want = host.clone();
        let p = aligned(&mut host, 1 << 20);
        let d2d = Arc::new(Gpu::open_for(c.clone(), f.clone(), 1 << 20, GpuCopy::D2d).unwrap());
        assert_eq!(m.stats().live_allocs, 2, "two device buffers");
        let mut q = CopyQueue::new_within_device(d2d.clone(), 4, GpuWait::Sleep).unwrap();
        // Ten copies of 64 KiB over four slots, each slot reused once done.
        let mut done = Vec::new();
        let mut free: Vec<u32> = (0..4).collect();
        let mut completed = 0;
        let mut submitted = 0u64;
        while completed < 10 {
            while submitted < 10 {
                let Some(slot) = free.pop() else { break };
                q.submit_within_device(slot, (submitted % 16) * 65536, 65536)
                    .unwrap();
                submitted += 1;
            }
            q.wait(None).unwrap();
            done.clear();
            q.poll(&mut done).unwrap();
            completed += done.len();
            free.extend_from_slice(&done);
        }
        let st = m.stats();
        assert_eq!((st.dtod_copies, st.dtoh_copies, st.htod_copies), (10, 0, 0));
        assert_eq!(st.bytes, 10 * 65536);
        assert_eq!(st.live_registrations, 0, "no host memory page-locked");
        // The host path is refused on such a queue, and a GPU opened for
        // host copies has no second buffer to copy from.
        // SAFETY: refused before the address is used.
        let e = unsafe { q.submit(0, CopyDir::ToHost, p, 0, 4096) }.unwrap_err();
        assert!(e.to_string().contains("no host memory"), "{e}");
        drop(q);
        assert_eq!(host, want, "the host buffer is untouched");
        // The same pattern under one device-to-host copy does change: the
        // check above can fail.
        let p = aligned(&mut host, 1 << 20);
        let gpu = Arc::new(Gpu::open(c, f, 1 << 20).unwrap());
        // SAFETY: `host` outlives the registration.
        let reg = Arc::new(unsafe { HostRegistration::new(&gpu, &[(p, 1 << 20)]) }.unwrap());
        let mut q = CopyQueue::new(gpu, reg.clone(), 1, GpuWait::Block).unwrap();
        let e = q.submit_within_device(0, 0, 4096).unwrap_err();
        assert!(e.to_string().contains("second buffer"), "{e}");
        // SAFETY: inside the registered range.
        unsafe { q.submit(0, CopyDir::ToHost, p, 0, 4096) }.unwrap();
        drop(q);
        drop(reg);
        assert_ne!(host, want, "a device-to-host copy writes host memory");
        drop(d2d);
        assert_eq!(m.stats().live_allocs, 0);
    }

    #[test]
    fn a_failing_copy_is_an_error_naming_the_gpu() {
        let (_m, c) = mock(MockConfig {
            fail_copy: Some(1),
            ..MockConfig::default()
        });
        let f = inspect(&*c, &[0], Path::new("/")).unwrap().remove(0);
        let gpu = Arc::new(Gpu::open(c, f, 1 << 20).unwrap());
        let mut host = vec![0u8; 8192];
        let p = aligned(&mut host, 4096);
        // SAFETY: `host` outlives the registration.
        let reg = Arc::new(unsafe { HostRegistration::new(&gpu, &[(p, 4096)]) }.unwrap());
        let mut q = CopyQueue::new(gpu, reg, 1, GpuWait::Spin).unwrap();
        // SAFETY: inside the registered range.
        unsafe { q.submit(0, CopyDir::ToDevice, p, 0, 4096) }.unwrap();
        let mut done = Vec::new();
        let e = loop {
            if let Err(e) = q.poll(&mut done) {
                break e;
            }
        };
        assert_eq!(
            e.to_string(),
            "cuEventQuery failed (a copy on GPU 0): CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
        );
        assert!(done.is_empty());
    }
}
