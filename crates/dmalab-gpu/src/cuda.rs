//! The real driver: `libcuda.so.1` opened at run time with `dlopen`, its
//! entry points looked up by the versioned names the driver exports
//! (`cuMemcpyDtoHAsync_v2`, ...). Nothing of CUDA is needed to build dmalab;
//! a host without the driver gets [`GpuError::NoDriver`].

use crate::api::{Context, CuError, CuResult, Cuda, Device, DevicePtr, Event, Stream};
use crate::error::GpuError;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// The library the NVIDIA driver installs (the unversioned `libcuda.so` is
/// only in development packages).
pub const LIBRARY: &str = "libcuda.so.1";

type R = c_uint;
type Ptr = *mut c_void;

/// The entry points, resolved once.
struct Table {
    init: unsafe extern "C" fn(c_uint) -> R,
    driver_get_version: unsafe extern "C" fn(*mut c_int) -> R,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> R,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> R,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> R,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> R,
    device_total_mem: unsafe extern "C" fn(*mut usize, c_int) -> R,
    primary_ctx_retain: unsafe extern "C" fn(*mut Ptr, c_int) -> R,
    primary_ctx_release: unsafe extern "C" fn(c_int) -> R,
    ctx_set_current: unsafe extern "C" fn(Ptr) -> R,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> R,
    mem_free: unsafe extern "C" fn(u64) -> R,
    mem_host_register: unsafe extern "C" fn(Ptr, usize, c_uint) -> R,
    mem_host_unregister: unsafe extern "C" fn(Ptr) -> R,
    stream_create: unsafe extern "C" fn(*mut Ptr, c_uint) -> R,
    stream_destroy: unsafe extern "C" fn(Ptr) -> R,
    memcpy_htod_async: unsafe extern "C" fn(u64, *const c_void, usize, Ptr) -> R,
    memcpy_dtoh_async: unsafe extern "C" fn(Ptr, u64, usize, Ptr) -> R,
    memcpy_dtod_async: unsafe extern "C" fn(u64, u64, usize, Ptr) -> R,
    event_create: unsafe extern "C" fn(*mut Ptr, c_uint) -> R,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> R,
    event_query: unsafe extern "C" fn(Ptr) -> R,
    event_synchronize: unsafe extern "C" fn(Ptr) -> R,
    event_destroy: unsafe extern "C" fn(Ptr) -> R,
    get_error_string: unsafe extern "C" fn(R, *mut *const c_char) -> R,
}

/// The CUDA driver, loaded.
pub struct CudaDriver {
    t: Table,
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
    // the next dl* call on this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `p` must be a function whose C signature `F` spells out.
unsafe fn fn_ptr<F: Copy>(p: *mut c_void) -> F {
    // Function and data pointers have one size on Linux; checked anyway.
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (above); the caller vouches for the signature.
    unsafe { std::mem::transmute_copy(&p) }
}

fn check(r: R) -> CuResult<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(CuError(r))
    }
}

impl CudaDriver {
    /// Opens [`LIBRARY`] and resolves every entry point of the table.
    pub fn load() -> Result<Self, GpuError> {
        Self::load_from(LIBRARY)
    }

    /// Opens the driver library at `name` (a file name searched as
    /// `dlopen` does, or a path).
    pub fn load_from(name: &str) -> Result<Self, GpuError> {
        let c = CString::new(name).map_err(|_| GpuError::NoDriver {
            library: name.into(),
            detail: "the name contains a NUL byte".into(),
        })?;
        // SAFETY: a valid C string; the handle is kept for the life of the
        // process (the driver is never unloaded: its threads outlive us).
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(GpuError::NoDriver {
                library: name.into(),
                detail: dlerror_text(),
            });
        }
        macro_rules! sym {
            ($name:literal) => {{
                let s = concat!($name, "\0");
                // SAFETY: `h` is a live handle and `s` NUL-terminated.
                let p = unsafe { libc::dlsym(h, s.as_ptr().cast()) };
                if p.is_null() {
                    return Err(GpuError::MissingSymbol {
                        library: name.into(),
                        symbol: $name,
                    });
                }
                // SAFETY: the symbol is the driver's function of this
                // name, whose C signature the field's type spells out
                // (cuda.h of CUDA 12).
                unsafe { fn_ptr(p) }
            }};
        }
        let t = Table {
            init: sym!("cuInit"),
            driver_get_version: sym!("cuDriverGetVersion"),
            device_get_count: sym!("cuDeviceGetCount"),
            device_get: sym!("cuDeviceGet"),
            device_get_name: sym!("cuDeviceGetName"),
            device_get_pci_bus_id: sym!("cuDeviceGetPCIBusId"),
            device_total_mem: sym!("cuDeviceTotalMem_v2"),
            primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
            primary_ctx_release: sym!("cuDevicePrimaryCtxRelease_v2"),
            ctx_set_current: sym!("cuCtxSetCurrent"),
            mem_alloc: sym!("cuMemAlloc_v2"),
            mem_free: sym!("cuMemFree_v2"),
            mem_host_register: sym!("cuMemHostRegister_v2"),
            mem_host_unregister: sym!("cuMemHostUnregister"),
            stream_create: sym!("cuStreamCreate"),
            stream_destroy: sym!("cuStreamDestroy_v2"),
            memcpy_htod_async: sym!("cuMemcpyHtoDAsync_v2"),
            memcpy_dtoh_async: sym!("cuMemcpyDtoHAsync_v2"),
            memcpy_dtod_async: sym!("cuMemcpyDtoDAsync_v2"),
            event_create: sym!("cuEventCreate"),
            event_record: sym!("cuEventRecord"),
            event_query: sym!("cuEventQuery"),
            event_synchronize: sym!("cuEventSynchronize"),
            event_destroy: sym!("cuEventDestroy_v2"),
            get_error_string: sym!("cuGetErrorString"),
        };
        Ok(Self { t })
    }

    fn string(
        &self,
        f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> R,
        dev: Device,
    ) -> CuResult<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        check(unsafe { f(buf.as_mut_ptr(), buf.len() as c_int, dev.0) })?;
        // SAFETY: NUL-terminated within the buffer (above); the last byte
        // is forced to NUL in case the driver filled it all.
        buf[buf.len() - 1] = 0;
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }
}

impl Cuda for CudaDriver {
    fn origin(&self) -> String {
        LIBRARY.into()
    }

    fn init(&self) -> CuResult<()> {
        // SAFETY: cuInit takes flags (must be 0) and nothing else.
        check(unsafe { (self.t.init)(0) })
    }

    fn driver_version(&self) -> CuResult<i32> {
        let mut v = 0;
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.driver_get_version)(&mut v) })?;
        Ok(v)
    }

    fn device_count(&self) -> CuResult<i32> {
        let mut n = 0;
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.device_get_count)(&mut n) })?;
        Ok(n)
    }

    fn device_get(&self, ordinal: i32) -> CuResult<Device> {
        let mut d = 0;
        // SAFETY: out-parameter we own; the driver checks the ordinal.
        check(unsafe { (self.t.device_get)(&mut d, ordinal) })?;
        Ok(Device(d))
    }

    fn device_name(&self, dev: Device) -> CuResult<String> {
        self.string(self.t.device_get_name, dev)
    }

    fn device_pci_bus_id(&self, dev: Device) -> CuResult<String> {
        self.string(self.t.device_get_pci_bus_id, dev)
    }

    fn device_total_mem(&self, dev: Device) -> CuResult<u64> {
        let mut b = 0usize;
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.device_total_mem)(&mut b, dev.0) })?;
        Ok(b as u64)
    }

    fn primary_ctx_retain(&self, dev: Device) -> CuResult<Context> {
        let mut c: Ptr = std::ptr::null_mut();
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.primary_ctx_retain)(&mut c, dev.0) })?;
        Ok(Context(c as usize))
    }

    fn primary_ctx_release(&self, dev: Device) -> CuResult<()> {
        // SAFETY: a device handle the driver gave us.
        check(unsafe { (self.t.primary_ctx_release)(dev.0) })
    }

    fn ctx_set_current(&self, ctx: Context) -> CuResult<()> {
        // SAFETY: a context handle the driver gave us (and still retained).
        check(unsafe { (self.t.ctx_set_current)(ctx.0 as Ptr) })
    }

    fn mem_alloc(&self, bytes: u64) -> CuResult<DevicePtr> {
        let bytes = usize::try_from(bytes).map_err(|_| CuError::OUT_OF_MEMORY)?;
        let mut p = 0u64;
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.mem_alloc)(&mut p, bytes) })?;
        Ok(DevicePtr(p))
    }

    fn mem_free(&self, ptr: DevicePtr) -> CuResult<()> {
        // SAFETY: an allocation of ours; the caller has no copy in flight.
        check(unsafe { (self.t.mem_free)(ptr.0) })
    }

    unsafe fn mem_host_register(&self, ptr: *mut u8, bytes: usize, flags: u32) -> CuResult<()> {
        // SAFETY: the caller keeps the range mapped (the trait's contract).
        check(unsafe { (self.t.mem_host_register)(ptr.cast(), bytes, flags) })
    }

    unsafe fn mem_host_unregister(&self, ptr: *mut u8) -> CuResult<()> {
        // SAFETY: the caller passes a registered range with nothing in flight.
        check(unsafe { (self.t.mem_host_unregister)(ptr.cast()) })
    }

    fn stream_create(&self, flags: u32) -> CuResult<Stream> {
        let mut s: Ptr = std::ptr::null_mut();
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.stream_create)(&mut s, flags) })?;
        Ok(Stream(s as usize))
    }

    fn stream_destroy(&self, s: Stream) -> CuResult<()> {
        // SAFETY: a stream of ours.
        check(unsafe { (self.t.stream_destroy)(s.0 as Ptr) })
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()> {
        // SAFETY: the caller guarantees both ranges (the trait's contract).
        check(unsafe { (self.t.memcpy_htod_async)(dst.0, src.cast(), bytes, s.0 as Ptr) })
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()> {
        // SAFETY: the caller guarantees both ranges (the trait's contract).
        check(unsafe { (self.t.memcpy_dtoh_async)(dst.cast(), src.0, bytes, s.0 as Ptr) })
    }

    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()> {
        // SAFETY: the caller guarantees both device ranges lie in our
        // allocations (the trait's contract); no host pointer is passed.
        check(unsafe { (self.t.memcpy_dtod_async)(dst.0, src.0, bytes, s.0 as Ptr) })
    }

    fn event_create(&self, flags: u32) -> CuResult<Event> {
        let mut e: Ptr = std::ptr::null_mut();
        // SAFETY: out-parameter we own.
        check(unsafe { (self.t.event_create)(&mut e, flags) })?;
        Ok(Event(e as usize))
    }

    fn event_record(&self, e: Event, s: Stream) -> CuResult<()> {
        // SAFETY: an event and a stream of ours, of one context.
        check(unsafe { (self.t.event_record)(e.0 as Ptr, s.0 as Ptr) })
    }

    fn event_query(&self, e: Event) -> CuResult<bool> {
        // SAFETY: an event of ours.
        match unsafe { (self.t.event_query)(e.0 as Ptr) } {
            0 => Ok(true),
            r if r == CuError::NOT_READY.0 => Ok(false),
            r => Err(CuError(r)),
        }
    }

    fn event_synchronize(&self, e: Event) -> CuResult<()> {
        // SAFETY: an event of ours; the call only waits for it.
        check(unsafe { (self.t.event_synchronize)(e.0 as Ptr) })
    }

    fn event_destroy(&self, e: Event) -> CuResult<()> {
        // SAFETY: an event of ours.
        check(unsafe { (self.t.event_destroy)(e.0 as Ptr) })
    }

    fn error_string(&self, e: CuError) -> Option<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: out-parameter we own; the driver points it at a static
        // string or returns an error for an unknown code.
        if unsafe { (self.t.get_error_string)(e.0, &mut p) } != 0 || p.is_null() {
            return None;
        }
        // SAFETY: a static NUL-terminated string of the driver.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_one_clear_error_not_a_panic() {
        let e = CudaDriver::load_from("libdmalab-no-such-driver.so.1")
            .err()
            .expect("no such library");
        let s = e.to_string();
        assert!(s.contains("libdmalab-no-such-driver.so.1"), "{s}");
        assert!(s.contains("needs an NVIDIA GPU"), "{s}");
    }

    #[test]
    fn a_library_without_the_driver_symbols_is_refused() {
        // libc is loadable everywhere and exports no cuInit.
        let e = CudaDriver::load_from("libc.so.6")
            .err()
            .expect("not a driver");
        assert!(
            matches!(
                e,
                GpuError::MissingSymbol {
                    symbol: "cuInit",
                    ..
                }
            ),
            "{e}"
        );
    }
}
