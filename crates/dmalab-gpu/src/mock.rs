//! A mock driver behind the same function table: no GPU and no payload
//! moved, but every call checked as the driver checks it (a current
//! context, host memory registered before a copy touches it, device ranges
//! inside an allocation) and every copy completing on the wall clock after
//! the time a copy engine of the configured bandwidth would take. Copies of
//! one device and direction queue behind each other (one copy engine each
//! way, as a PCIe link is full duplex, and one for copies within device
//! memory); copies on one stream run in order. A device-to-host copy writes
//! [`DTOH_MARK`] at both ends of its host range, so a test can see which
//! host bytes a copy wrote.
//!
//! Failures are injected through [`MockConfig`]: no device, too little
//! device memory, a copy that fails (its stream's next event reports
//! `CUDA_ERROR_ILLEGAL_ADDRESS`, and the context stays broken, as a real
//! one does).
//!
//! `DMALAB_GPU_DRIVER=mock[:OPTIONS]` selects it in the binary (a test
//! hook; see [`MockConfig::parse`]).

use crate::api::{
    Context, CuError, CuResult, Cuda, Device, DevicePtr, Event, Stream, EVENT_BLOCKING_SYNC,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The byte a device-to-host copy of the mock writes at both ends of its
/// host range (the payload itself is not simulated).
pub const DTOH_MARK: u8 = 0xD7;

/// The mock's copy engines of one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum EngineOf {
    ToHost,
    ToDevice,
    WithinDevice,
}

/// What the mock simulates.
#[derive(Clone, Debug, PartialEq)]
pub struct MockConfig {
    /// Copy bandwidth per device and direction, GB/s (10^9 bytes/s).
    pub gbps: f64,
    /// Devices the driver sees (0: `cuInit` says `CUDA_ERROR_NO_DEVICE`).
    pub devices: u32,
    /// Memory per device, bytes.
    pub mem_bytes: u64,
    /// Memory per device already in use by others, bytes (an allocation
    /// fails with `CUDA_ERROR_OUT_OF_MEMORY` beyond `mem_bytes - used_bytes`).
    pub used_bytes: u64,
    /// The copy (counted from 1 over the process) that fails.
    pub fail_copy: Option<u64>,
    /// The directory that stands for `/sys` when reading the devices' link
    /// and NUMA facts (default: the real `/sys`).
    pub sysfs: Option<PathBuf>,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            gbps: 25.0,
            devices: 1,
            mem_bytes: 16 << 30,
            used_bytes: 0,
            fail_copy: None,
            sysfs: None,
        }
    }
}

/// A bad option after `mock:`: the option as given and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("mock option '{option}': {what}")]
pub struct MockOptionError {
    /// The option, as given.
    pub option: String,
    /// What is wrong with it and what to give.
    pub what: String,
}

impl MockConfig {
    /// Parses the options after `mock:`, comma separated: a bare number is
    /// the bandwidth in GB/s; `devices=N`, `mem=SIZE`, `used=SIZE`,
    /// `fail-copy=N`, `sysfs=DIR`.
    pub fn parse(opts: &str) -> Result<Self, MockOptionError> {
        let mut c = MockConfig::default();
        for o in opts.split(',').filter(|o| !o.is_empty()) {
            let bad = |what: &str| MockOptionError {
                option: o.to_string(),
                what: what.to_string(),
            };
            match o.split_once('=') {
                None => {
                    c.gbps = o
                        .parse()
                        .ok()
                        .filter(|g: &f64| g.is_finite() && *g > 0.0)
                        .ok_or_else(|| bad("not a bandwidth in GB/s greater than 0"))?;
                }
                Some(("devices", v)) => {
                    c.devices = v.parse().map_err(|_| bad("not a count"))?;
                }
                Some(("mem", v)) => {
                    c.mem_bytes =
                        dmalab_core::units::parse_size("mem", v).map_err(|e| bad(&e.message))?;
                }
                Some(("used", v)) => {
                    c.used_bytes =
                        dmalab_core::units::parse_size("used", v).map_err(|e| bad(&e.message))?;
                }
                Some(("fail-copy", v)) => {
                    c.fail_copy = Some(
                        v.parse()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| bad("not a copy number (1 is the first copy)"))?,
                    );
                }
                Some(("sysfs", v)) => c.sysfs = Some(PathBuf::from(v)),
                Some(_) => return Err(bad(
                    "unknown; use GBPS, devices=N, mem=SIZE, used=SIZE, fail-copy=N or sysfs=DIR",
                )),
            }
        }
        Ok(c)
    }
}

/// Counts of what the mock did and holds (for tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MockStats {
    /// Copies host-to-device.
    pub htod_copies: u64,
    /// Copies device-to-host.
    pub dtoh_copies: u64,
    /// Copies device-to-device (within one device's memory).
    pub dtod_copies: u64,
    /// Bytes copied, every direction.
    pub bytes: u64,
    /// Device allocations not freed.
    pub live_allocs: usize,
    /// Host ranges still registered.
    pub live_registrations: usize,
    /// Streams not destroyed.
    pub live_streams: usize,
    /// Events not destroyed.
    pub live_events: usize,
    /// Primary context references not released.
    pub live_contexts: u32,
    /// `cuEventSynchronize` calls on events created with
    /// `CU_EVENT_BLOCKING_SYNC` (the thread slept until the completion).
    pub blocking_syncs: u64,
    /// `cuEventSynchronize` calls on other events (the driver would spin).
    pub spinning_syncs: u64,
}

#[derive(Clone, Copy)]
struct StreamState {
    dev: i32,
    /// When the stream's last copy completes.
    tail: Instant,
    /// The stream ran a failing copy.
    failed: bool,
}

#[derive(Clone, Copy)]
struct EventState {
    dev: i32,
    done_at: Option<Instant>,
    failed: bool,
    /// Created with `CU_EVENT_BLOCKING_SYNC`.
    blocking: bool,
}

struct State {
    init: bool,
    retained: Vec<u32>,
    /// base -> (device, bytes).
    allocs: HashMap<u64, (i32, u64)>,
    used: Vec<u64>,
    next_dptr: u64,
    /// start -> bytes.
    registered: HashMap<usize, usize>,
    streams: HashMap<usize, StreamState>,
    events: HashMap<usize, EventState>,
    /// (device, engine) -> the copy engine is busy until.
    engines: HashMap<(i32, EngineOf), Instant>,
    next_handle: usize,
    copies: u64,
    sticky: Option<CuError>,
    stats: MockStats,
}

/// The mock driver.
pub struct MockDriver {
    cfg: MockConfig,
    id: u64,
    state: Mutex<State>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (mock id, device + 1) of this thread's current context.
    static CURRENT: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
}

impl MockDriver {
    /// A mock driver simulating `cfg`.
    pub fn new(cfg: MockConfig) -> Self {
        let n = cfg.devices as usize;
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State {
                init: false,
                retained: vec![0; n],
                allocs: HashMap::new(),
                used: vec![cfg.used_bytes; n],
                next_dptr: 0x7f00_0000_0000,
                registered: HashMap::new(),
                streams: HashMap::new(),
                events: HashMap::new(),
                engines: HashMap::new(),
                next_handle: 1,
                copies: 0,
                sticky: None,
                stats: MockStats::default(),
            }),
            cfg,
        }
    }

    /// The simulated configuration.
    pub fn config(&self) -> &MockConfig {
        &self.cfg
    }

    /// What the mock did and still holds.
    pub fn stats(&self) -> MockStats {
        let s = self.lock();
        MockStats {
            live_allocs: s.allocs.len(),
            live_registrations: s.registered.len(),
            live_streams: s.streams.len(),
            live_events: s.events.len(),
            live_contexts: s.retained.iter().sum(),
            ..s.stats
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough counters.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, after the checks every call makes: initialised, no
    /// sticky error.
    fn ready(&self) -> CuResult<std::sync::MutexGuard<'_, State>> {
        let s = self.lock();
        if !s.init {
            return Err(CuError::NOT_INITIALIZED);
        }
        if let Some(e) = s.sticky {
            return Err(e);
        }
        Ok(s)
    }

    /// The device of this thread's current context.
    fn current(&self) -> CuResult<i32> {
        let (id, ctx) = CURRENT.with(Cell::get);
        if id != self.id || ctx == 0 {
            return Err(CuError::INVALID_CONTEXT);
        }
        Ok(ctx as i32 - 1)
    }

    fn device(&self, dev: Device) -> CuResult<usize> {
        usize::try_from(dev.0)
            .ok()
            .filter(|d| *d < self.cfg.devices as usize)
            .ok_or(CuError::INVALID_DEVICE)
    }

    fn copy(
        &self,
        host: usize,
        dptr: u64,
        bytes: usize,
        s: Stream,
        to_device: bool,
    ) -> CuResult<()> {
        let mut st = self.ready()?;
        let stream = *st.streams.get(&s.0).ok_or(CuError::INVALID_HANDLE)?;
        // The host range must lie in one registered range: dmalab always
        // registers its buffer, so an unregistered address is a bug.
        let registered = st
            .registered
            .iter()
            .any(|(&a, &n)| host >= a && host + bytes <= a + n);
        if !registered || bytes == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let in_alloc = st
            .allocs
            .iter()
            .any(|(&a, &(d, n))| d == stream.dev && dptr >= a && dptr + bytes as u64 <= a + n);
        if !in_alloc {
            return Err(CuError::INVALID_VALUE);
        }
        // Touch both ends of the host range, as the device would: a bad
        // address faults here, in the test, not silently.
        // SAFETY: the range lies in a registered range, which the caller
        // keeps mapped (the trait's contract); reads change nothing.
        unsafe {
            std::ptr::read_volatile(host as *const u8);
            std::ptr::read_volatile((host + bytes - 1) as *const u8);
        }
        if !to_device {
            // SAFETY: as above; a device-to-host copy may write its host
            // range (the trait's contract for memcpy_dtoh_async).
            unsafe {
                std::ptr::write_volatile(host as *mut u8, DTOH_MARK);
                std::ptr::write_volatile((host + bytes - 1) as *mut u8, DTOH_MARK);
            }
        }
        let (engine, stat) = if to_device {
            (EngineOf::ToDevice, &mut st.stats.htod_copies)
        } else {
            (EngineOf::ToHost, &mut st.stats.dtoh_copies)
        };
        *stat += 1;
        self.schedule(&mut st, stream, s, engine, bytes);
        Ok(())
    }

    /// Queues a copy of `bytes` behind `stream`'s work and `engine`'s, and
    /// counts it (and whether it is the one configured to fail).
    fn schedule(
        &self,
        st: &mut State,
        stream: StreamState,
        s: Stream,
        engine: EngineOf,
        bytes: usize,
    ) {
        st.copies += 1;
        let n = st.copies;
        let now = Instant::now();
        let busy = st.engines.entry((stream.dev, engine)).or_insert(now);
        let start = now.max(*busy).max(stream.tail);
        let end = start + Duration::from_secs_f64(bytes as f64 / (self.cfg.gbps * 1e9));
        *busy = end;
        let failed = self.cfg.fail_copy == Some(n);
        if let Some(ss) = st.streams.get_mut(&s.0) {
            ss.tail = end;
            ss.failed |= failed;
        }
        st.stats.bytes += bytes as u64;
    }
}

impl Cuda for MockDriver {
    fn origin(&self) -> String {
        "mock".into()
    }

    fn init(&self) -> CuResult<()> {
        if self.cfg.devices == 0 {
            return Err(CuError::NO_DEVICE);
        }
        self.lock().init = true;
        Ok(())
    }

    fn driver_version(&self) -> CuResult<i32> {
        Ok(12040)
    }

    fn device_count(&self) -> CuResult<i32> {
        let _s = self.ready()?;
        Ok(self.cfg.devices as i32)
    }

    fn device_get(&self, ordinal: i32) -> CuResult<Device> {
        let _s = self.ready()?;
        self.device(Device(ordinal))?;
        Ok(Device(ordinal))
    }

    fn device_name(&self, dev: Device) -> CuResult<String> {
        let d = self.device(dev)?;
        Ok(format!("dmalab mock GPU {d}"))
    }

    fn device_pci_bus_id(&self, dev: Device) -> CuResult<String> {
        let d = self.device(dev)?;
        // Upper case, as cuDeviceGetPCIBusId prints it.
        Ok(format!("0000:{:02X}:00.0", 0xE0 + d))
    }

    fn device_total_mem(&self, dev: Device) -> CuResult<u64> {
        self.device(dev)?;
        Ok(self.cfg.mem_bytes)
    }

    fn primary_ctx_retain(&self, dev: Device) -> CuResult<Context> {
        let d = self.device(dev)?;
        let mut s = self.ready()?;
        s.retained[d] += 1;
        Ok(Context(d + 1))
    }

    fn primary_ctx_release(&self, dev: Device) -> CuResult<()> {
        let d = self.device(dev)?;
        // Releasing works after a sticky error too (that is how a program
        // cleans up).
        let mut s = self.lock();
        if s.retained[d] == 0 {
            return Err(CuError::INVALID_CONTEXT);
        }
        s.retained[d] -= 1;
        Ok(())
    }

    fn ctx_set_current(&self, ctx: Context) -> CuResult<()> {
        let s = self.lock();
        match ctx.0.checked_sub(1) {
            Some(d) if d < s.retained.len() && s.retained[d] > 0 => {
                CURRENT.with(|c| c.set((self.id, ctx.0)));
                Ok(())
            }
            _ => Err(CuError::INVALID_CONTEXT),
        }
    }

    fn mem_alloc(&self, bytes: u64) -> CuResult<DevicePtr> {
        let d = self.current()?;
        let mut s = self.ready()?;
        if bytes == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let du = d as usize;
        if s.used[du].saturating_add(bytes) > self.cfg.mem_bytes {
            return Err(CuError::OUT_OF_MEMORY);
        }
        s.used[du] += bytes;
        let p = s.next_dptr;
        s.next_dptr += bytes.div_ceil(1 << 21) * (1 << 21);
        s.allocs.insert(p, (d, bytes));
        Ok(DevicePtr(p))
    }

    fn mem_free(&self, ptr: DevicePtr) -> CuResult<()> {
        let mut s = self.lock();
        let (d, n) = s.allocs.remove(&ptr.0).ok_or(CuError::INVALID_VALUE)?;
        s.used[d as usize] -= n;
        Ok(())
    }

    unsafe fn mem_host_register(&self, ptr: *mut u8, bytes: usize, _flags: u32) -> CuResult<()> {
        self.current()?;
        let mut s = self.ready()?;
        let a = ptr as usize;
        if bytes == 0 || a & 4095 != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if s.registered
            .iter()
            .any(|(&b, &n)| a < b + n && b < a + bytes)
        {
            return Err(CuError::HOST_MEMORY_ALREADY_REGISTERED);
        }
        s.registered.insert(a, bytes);
        Ok(())
    }

    unsafe fn mem_host_unregister(&self, ptr: *mut u8) -> CuResult<()> {
        let mut s = self.lock();
        s.registered
            .remove(&(ptr as usize))
            .map(|_| ())
            .ok_or(CuError::HOST_MEMORY_NOT_REGISTERED)
    }

    fn stream_create(&self, _flags: u32) -> CuResult<Stream> {
        let dev = self.current()?;
        let mut s = self.ready()?;
        let h = s.next_handle;
        s.next_handle += 1;
        s.streams.insert(
            h,
            StreamState {
                dev,
                tail: Instant::now(),
                failed: false,
            },
        );
        Ok(Stream(h))
    }

    fn stream_destroy(&self, st: Stream) -> CuResult<()> {
        let mut s = self.lock();
        s.streams
            .remove(&st.0)
            .map(|_| ())
            .ok_or(CuError::INVALID_HANDLE)
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()> {
        self.copy(src as usize, dst.0, bytes, s, true)
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()> {
        self.copy(dst as usize, src.0, bytes, s, false)
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()> {
        let mut st = self.ready()?;
        let stream = *st.streams.get(&s.0).ok_or(CuError::INVALID_HANDLE)?;
        let in_alloc = |p: u64| {
            st.allocs
                .iter()
                .any(|(&a, &(d, n))| d == stream.dev && p >= a && p + bytes as u64 <= a + n)
        };
        if bytes == 0 || !in_alloc(src.0) || !in_alloc(dst.0) {
            return Err(CuError::INVALID_VALUE);
        }
        st.stats.dtod_copies += 1;
        self.schedule(&mut st, stream, s, EngineOf::WithinDevice, bytes);
        Ok(())
    }

    fn event_create(&self, flags: u32) -> CuResult<Event> {
        let dev = self.current()?;
        let mut s = self.ready()?;
        let h = s.next_handle;
        s.next_handle += 1;
        s.events.insert(
            h,
            EventState {
                dev,
                done_at: None,
                failed: false,
                blocking: flags & EVENT_BLOCKING_SYNC != 0,
            },
        );
        Ok(Event(h))
    }

    fn event_record(&self, e: Event, st: Stream) -> CuResult<()> {
        let mut s = self.ready()?;
        let stream = *s.streams.get(&st.0).ok_or(CuError::INVALID_HANDLE)?;
        let ev = s.events.get_mut(&e.0).ok_or(CuError::INVALID_HANDLE)?;
        if ev.dev != stream.dev {
            return Err(CuError::INVALID_HANDLE);
        }
        ev.done_at = Some(stream.tail.max(Instant::now()));
        ev.failed = stream.failed;
        Ok(())
    }

    fn event_query(&self, e: Event) -> CuResult<bool> {
        let mut s = self.ready()?;
        let ev = *s.events.get(&e.0).ok_or(CuError::INVALID_HANDLE)?;
        match ev.done_at {
            // Never recorded: complete, as the driver says.
            None => Ok(true),
            Some(t) if t > Instant::now() => Ok(false),
            Some(_) if ev.failed => {
                s.sticky = Some(CuError::ILLEGAL_ADDRESS);
                Err(CuError::ILLEGAL_ADDRESS)
            }
            Some(_) => Ok(true),
        }
    }

    fn event_synchronize(&self, e: Event) -> CuResult<()> {
        let (done_at, blocking) = {
            let s = self.ready()?;
            let ev = s.events.get(&e.0).ok_or(CuError::INVALID_HANDLE)?;
            (ev.done_at, ev.blocking)
        };
        {
            let mut s = self.lock();
            if blocking {
                s.stats.blocking_syncs += 1;
            } else {
                s.stats.spinning_syncs += 1;
            }
        }
        // Wait (without the lock) until the simulated completion, then
        // report it as a query would: the failure of a failed copy.
        if let Some(t) = done_at {
            let left = t.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                std::thread::sleep(left);
            }
        }
        while !self.event_query(e)? {
            // The sleep ended a hair early on a coarse clock.
            std::thread::yield_now();
        }
        Ok(())
    }

    fn event_destroy(&self, e: Event) -> CuResult<()> {
        let mut s = self.lock();
        s.events
            .remove(&e.0)
            .map(|_| ())
            .ok_or(CuError::INVALID_HANDLE)
    }

    fn error_string(&self, e: CuError) -> Option<String> {
        Some(
            match e {
                CuError::OUT_OF_MEMORY => "out of memory",
                CuError::NO_DEVICE => "no CUDA-capable device is detected",
                CuError::ILLEGAL_ADDRESS => "an illegal memory access was encountered",
                CuError::INVALID_CONTEXT => "invalid device context",
                CuError::INVALID_VALUE => "invalid argument",
                _ => return None,
            }
            .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EVENT_DISABLE_TIMING, HOST_REGISTER_PORTABLE};

    #[test]
    fn options_parse_and_bad_ones_are_named() {
        let c = MockConfig::parse("12.5,devices=2,mem=1G,used=512M,fail-copy=3").unwrap();
        assert_eq!(c.used_bytes, 512 << 20);
        assert_eq!(c.gbps, 12.5);
        assert_eq!(c.devices, 2);
        assert_eq!(c.mem_bytes, 1 << 30);
        assert_eq!(c.fail_copy, Some(3));
        assert_eq!(MockConfig::parse("").unwrap(), MockConfig::default());
        for bad in ["0", "-1", "fast", "devices=x", "fail-copy=0", "colour=red"] {
            let e = MockConfig::parse(bad).unwrap_err();
            assert_eq!(e.option, bad);
            assert!(
                e.to_string().starts_with(&format!("mock option '{bad}': ")),
                "{e}"
            );
        }
    }

    #[test]
    fn calls_need_init_and_a_current_context() {
        let m = MockDriver::new(MockConfig::default());
        assert_eq!(m.device_count(), Err(CuError::NOT_INITIALIZED));
        m.init().unwrap();
        assert_eq!(m.mem_alloc(4096), Err(CuError::INVALID_CONTEXT));
        let ctx = m.primary_ctx_retain(Device(0)).unwrap();
        // Another thread has no current context until it sets one.
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(m.stream_create(0), Err(CuError::INVALID_CONTEXT)));
        });
        m.ctx_set_current(ctx).unwrap();
        assert!(m.mem_alloc(4096).is_ok());
        assert_eq!(m.device_get(1), Err(CuError::INVALID_DEVICE));
    }

    #[test]
    fn no_device_fails_init_and_too_little_memory_fails_alloc() {
        let m = MockDriver::new(MockConfig {
            devices: 0,
            ..MockConfig::default()
        });
        assert_eq!(m.init(), Err(CuError::NO_DEVICE));
        let m = MockDriver::new(MockConfig {
            mem_bytes: 2 << 20,
            used_bytes: 1 << 20,
            ..MockConfig::default()
        });
        m.init().unwrap();
        let ctx = m.primary_ctx_retain(Device(0)).unwrap();
        m.ctx_set_current(ctx).unwrap();
        assert_eq!(m.mem_alloc(2 << 20), Err(CuError::OUT_OF_MEMORY));
        let p = m.mem_alloc(1 << 20).unwrap();
        assert_eq!(m.mem_alloc(1), Err(CuError::OUT_OF_MEMORY));
        m.mem_free(p).unwrap();
        assert!(m.mem_alloc(1).is_ok());
    }

    /// Sets up one device, a registered 1 MiB host page range, a device
    /// buffer, a stream and an event.
    fn setup(cfg: MockConfig) -> (MockDriver, Vec<u8>, usize, DevicePtr, Stream, Event) {
        let m = MockDriver::new(cfg);
        m.init().unwrap();
        let ctx = m.primary_ctx_retain(Device(0)).unwrap();
        m.ctx_set_current(ctx).unwrap();
        let host = vec![0u8; 2 << 20];
        let a = (host.as_ptr() as usize).next_multiple_of(4096);
        // SAFETY: inside `host`, which outlives the test's copies.
        unsafe { m.mem_host_register(a as *mut u8, 1 << 20, HOST_REGISTER_PORTABLE) }.unwrap();
        let d = m.mem_alloc(1 << 20).unwrap();
        let s = m.stream_create(0).unwrap();
        let e = m.event_create(EVENT_DISABLE_TIMING).unwrap();
        (m, host, a, d, s, e)
    }

    #[test]
    fn copies_complete_after_the_simulated_bandwidth() {
        // 1 MiB at 0.1 GB/s: about 10.5 ms.
        let (m, _host, a, d, s, e) = setup(MockConfig {
            gbps: 0.1,
            ..MockConfig::default()
        });
        let t0 = Instant::now();
        // SAFETY: registered, mapped host memory; an allocation of 1 MiB.
        unsafe { m.memcpy_dtoh_async(a as *mut u8, d, 1 << 20, s) }.unwrap();
        m.event_record(e, s).unwrap();
        assert_eq!(m.event_query(e), Ok(false));
        while !m.event_query(e).unwrap() {
            std::hint::spin_loop();
        }
        assert!(t0.elapsed() >= Duration::from_micros(10_485));
        assert_eq!(m.stats().dtoh_copies, 1);
        assert_eq!(m.stats().bytes, 1 << 20);
    }

    #[test]
    fn event_synchronize_blocks_until_the_simulated_completion() {
        // 1 MiB at 0.1 GB/s: about 10.5 ms.
        let (m, _host, a, d, s, e) = setup(MockConfig {
            gbps: 0.1,
            ..MockConfig::default()
        });
        let blocking = m
            .event_create(EVENT_BLOCKING_SYNC | EVENT_DISABLE_TIMING)
            .unwrap();
        let t0 = Instant::now();
        // SAFETY: registered, mapped host memory; an allocation of 1 MiB.
        unsafe { m.memcpy_dtoh_async(a as *mut u8, d, 1 << 20, s) }.unwrap();
        m.event_record(blocking, s).unwrap();
        m.event_synchronize(blocking).unwrap();
        assert!(t0.elapsed() >= Duration::from_micros(10_485));
        assert_eq!(m.event_query(blocking), Ok(true));
        // A never-recorded event is complete at once; a plain one counts as
        // a spinning wait.
        m.event_synchronize(e).unwrap();
        let st = m.stats();
        assert_eq!((st.blocking_syncs, st.spinning_syncs), (1, 1));
    }

    #[test]
    fn copies_outside_registered_memory_or_the_allocation_are_refused() {
        let (m, host, a, d, s, _e) = setup(MockConfig::default());
        let unregistered = (a + (1 << 20)) as *mut u8;
        assert!(unregistered as usize + 4096 <= host.as_ptr() as usize + host.len());
        // SAFETY: the mock refuses before touching the memory.
        let r = unsafe { m.memcpy_htod_async(d, unregistered, 4096, s) };
        assert_eq!(r, Err(CuError::INVALID_VALUE));
        // SAFETY: as above.
        let r = unsafe {
            m.memcpy_htod_async(DevicePtr(d.0 + (1 << 20) - 4096), a as *const u8, 8192, s)
        };
        assert_eq!(r, Err(CuError::INVALID_VALUE));
    }

    #[test]
    fn device_to_device_copies_stay_in_device_memory() {
        let (m, _host, a, d, s, e) = setup(MockConfig {
            gbps: 0.1,
            ..MockConfig::default()
        });
        let d2 = m.mem_alloc(1 << 20).unwrap();
        let t0 = Instant::now();
        // SAFETY: both ranges lie in allocations of this device.
        unsafe { m.memcpy_dtod_async(d2, d, 1 << 20, s) }.unwrap();
        m.event_record(e, s).unwrap();
        m.event_synchronize(e).unwrap();
        assert!(t0.elapsed() >= Duration::from_micros(10_485));
        let st = m.stats();
        assert_eq!((st.dtod_copies, st.dtoh_copies, st.htod_copies), (1, 0, 0));
        assert_eq!(st.bytes, 1 << 20);
        // Outside an allocation, or a host address: refused.
        // SAFETY: the mock refuses before anything is copied.
        let r = unsafe { m.memcpy_dtod_async(DevicePtr(d2.0 + 4096), d, 1 << 20, s) };
        assert_eq!(r, Err(CuError::INVALID_VALUE));
        // SAFETY: as above.
        let r = unsafe { m.memcpy_dtod_async(DevicePtr(a as u64), d, 4096, s) };
        assert_eq!(r, Err(CuError::INVALID_VALUE));
    }

    #[test]
    fn a_failing_copy_breaks_the_context_like_a_real_one() {
        let (m, _host, a, d, s, e) = setup(MockConfig {
            fail_copy: Some(2),
            ..MockConfig::default()
        });
        for _ in 0..2 {
            // SAFETY: registered host memory; inside the allocation.
            unsafe { m.memcpy_htod_async(d, a as *const u8, 4096, s) }.unwrap();
        }
        m.event_record(e, s).unwrap();
        let r = loop {
            match m.event_query(e) {
                Ok(false) => continue,
                r => break r,
            }
        };
        assert_eq!(r, Err(CuError::ILLEGAL_ADDRESS));
        assert_eq!(m.event_synchronize(e), Err(CuError::ILLEGAL_ADDRESS));
        assert_eq!(m.stream_create(0), Err(CuError::ILLEGAL_ADDRESS));
        // Clean-up calls still work.
        m.stream_destroy(s).unwrap();
        m.mem_free(d).unwrap();
    }
}
