//! The function table: the dozen CUDA driver calls dmalab needs, as one
//! trait, so the real driver ([`crate::cuda`]) and the mock
//! ([`crate::mock`]) are interchangeable.
//!
//! Each method is one driver entry point (named in its doc comment), with
//! the out-parameter turned into a return value and `CUresult` into
//! [`CuResult`]. Handles are opaque numbers: the real driver's pointers, or
//! the mock's indices. Like the driver, calls that create or use device
//! objects act on the calling thread's current context (set with
//! [`Cuda::ctx_set_current`] on every thread that uses the device).

use std::fmt;

/// A `CUresult` other than `CUDA_SUCCESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CuError(pub u32);

/// The result of one driver call.
pub type CuResult<T> = Result<T, CuError>;

impl CuError {
    /// `CUDA_ERROR_INVALID_VALUE`.
    pub const INVALID_VALUE: CuError = CuError(1);
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub const OUT_OF_MEMORY: CuError = CuError(2);
    /// `CUDA_ERROR_NOT_INITIALIZED`.
    pub const NOT_INITIALIZED: CuError = CuError(3);
    /// `CUDA_ERROR_NO_DEVICE`.
    pub const NO_DEVICE: CuError = CuError(100);
    /// `CUDA_ERROR_INVALID_DEVICE`.
    pub const INVALID_DEVICE: CuError = CuError(101);
    /// `CUDA_ERROR_INVALID_CONTEXT`.
    pub const INVALID_CONTEXT: CuError = CuError(201);
    /// `CUDA_ERROR_INVALID_HANDLE`.
    pub const INVALID_HANDLE: CuError = CuError(400);
    /// `CUDA_ERROR_NOT_READY` (an event or stream still has work).
    pub const NOT_READY: CuError = CuError(600);
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub const ILLEGAL_ADDRESS: CuError = CuError(700);
    /// `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`.
    pub const HOST_MEMORY_ALREADY_REGISTERED: CuError = CuError(712);
    /// `CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED`.
    pub const HOST_MEMORY_NOT_REGISTERED: CuError = CuError(713);

    /// The `CUresult` enumerator's name, for the codes dmalab can meet.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "CUDA_ERROR_INVALID_VALUE",
            2 => "CUDA_ERROR_OUT_OF_MEMORY",
            3 => "CUDA_ERROR_NOT_INITIALIZED",
            4 => "CUDA_ERROR_DEINITIALIZED",
            34 => "CUDA_ERROR_STUB_LIBRARY",
            100 => "CUDA_ERROR_NO_DEVICE",
            101 => "CUDA_ERROR_INVALID_DEVICE",
            201 => "CUDA_ERROR_INVALID_CONTEXT",
            400 => "CUDA_ERROR_INVALID_HANDLE",
            600 => "CUDA_ERROR_NOT_READY",
            700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
            712 => "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            713 => "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
            719 => "CUDA_ERROR_LAUNCH_FAILED",
            801 => "CUDA_ERROR_NOT_SUPPORTED",
            802 => "CUDA_ERROR_SYSTEM_NOT_READY",
            803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            999 => "CUDA_ERROR_UNKNOWN",
            _ => return None,
        })
    }
}

impl fmt::Display for CuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "CUresult {}", self.0),
        }
    }
}

/// `CUdevice`: a device ordinal's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device(pub i32);

/// `CUcontext`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Context(pub usize);

/// `CUstream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream(pub usize);

/// `CUevent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Event(pub usize);

/// `CUdeviceptr`: an address in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevicePtr(pub u64);

/// `CU_MEMHOSTREGISTER_PORTABLE`: the registration counts for every context
/// (every GPU of the run), not only the current one.
pub const HOST_REGISTER_PORTABLE: u32 = 0x01;
/// `CU_STREAM_NON_BLOCKING`: no implicit ordering with the legacy stream.
pub const STREAM_NON_BLOCKING: u32 = 0x01;
/// `CU_EVENT_BLOCKING_SYNC`: `cuEventSynchronize` on the event puts the
/// calling thread to sleep until the GPU's completion interrupt, instead of
/// spinning in the driver.
pub const EVENT_BLOCKING_SYNC: u32 = 0x01;
/// `CU_EVENT_DISABLE_TIMING`: a completion marker only (cheaper to record).
pub const EVENT_DISABLE_TIMING: u32 = 0x02;

/// The driver entry points dmalab uses.
pub trait Cuda: Send + Sync {
    /// Where the table came from (`libcuda.so.1`, `mock`).
    fn origin(&self) -> String;
    /// `cuInit(0)`.
    fn init(&self) -> CuResult<()>;
    /// `cuDriverGetVersion` (e.g. 12040 for CUDA 12.4).
    fn driver_version(&self) -> CuResult<i32>;
    /// `cuDeviceGetCount`.
    fn device_count(&self) -> CuResult<i32>;
    /// `cuDeviceGet`.
    fn device_get(&self, ordinal: i32) -> CuResult<Device>;
    /// `cuDeviceGetName`.
    fn device_name(&self, dev: Device) -> CuResult<String>;
    /// `cuDeviceGetPCIBusId` (`0000:3B:00.0`).
    fn device_pci_bus_id(&self, dev: Device) -> CuResult<String>;
    /// `cuDeviceTotalMem_v2`, bytes.
    fn device_total_mem(&self, dev: Device) -> CuResult<u64>;
    /// `cuDevicePrimaryCtxRetain`.
    fn primary_ctx_retain(&self, dev: Device) -> CuResult<Context>;
    /// `cuDevicePrimaryCtxRelease_v2`.
    fn primary_ctx_release(&self, dev: Device) -> CuResult<()>;
    /// `cuCtxSetCurrent` (per thread).
    fn ctx_set_current(&self, ctx: Context) -> CuResult<()>;
    /// `cuMemAlloc_v2` in the current context.
    fn mem_alloc(&self, bytes: u64) -> CuResult<DevicePtr>;
    /// `cuMemFree_v2`.
    fn mem_free(&self, ptr: DevicePtr) -> CuResult<()>;
    /// `cuMemHostRegister_v2`: page-locks `[ptr, ptr+bytes)` for the GPU.
    ///
    /// # Safety
    /// The range must be mapped and stay mapped until it is unregistered.
    unsafe fn mem_host_register(&self, ptr: *mut u8, bytes: usize, flags: u32) -> CuResult<()>;
    /// `cuMemHostUnregister`.
    ///
    /// # Safety
    /// `ptr` must be the start of a range registered before, with no copy
    /// of it still in flight.
    unsafe fn mem_host_unregister(&self, ptr: *mut u8) -> CuResult<()>;
    /// `cuStreamCreate` in the current context.
    fn stream_create(&self, flags: u32) -> CuResult<Stream>;
    /// `cuStreamDestroy_v2`.
    fn stream_destroy(&self, s: Stream) -> CuResult<()>;
    /// `cuMemcpyHtoDAsync_v2`: the GPU reads host memory.
    ///
    /// # Safety
    /// `src..src+bytes` lies in registered host memory that stays mapped
    /// until the copy completes; `dst..dst+bytes` lies in one allocation.
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()>;
    /// `cuMemcpyDtoHAsync_v2`: the GPU writes host memory.
    ///
    /// # Safety
    /// As [`Cuda::memcpy_htod_async`], with the host range written.
    unsafe fn memcpy_dtoh_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()>;
    /// `cuMemcpyDtoDAsync_v2`: the GPU copies within its own memory; no
    /// host memory is read or written.
    ///
    /// # Safety
    /// `src..src+bytes` and `dst..dst+bytes` each lie in one allocation of
    /// [`Cuda::mem_alloc`] on the stream's device (on a host with
    /// heterogeneous memory management a device address can alias host
    /// memory, so an address from anywhere else could write it).
    unsafe fn memcpy_dtod_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: Stream,
    ) -> CuResult<()>;
    /// `cuEventCreate` in the current context.
    fn event_create(&self, flags: u32) -> CuResult<Event>;
    /// `cuEventRecord`: the event completes when the stream's work so far has.
    fn event_record(&self, e: Event, s: Stream) -> CuResult<()>;
    /// `cuEventQuery`: `Ok(true)` done, `Ok(false)` still pending
    /// (`CUDA_ERROR_NOT_READY`), `Err` when the work failed.
    fn event_query(&self, e: Event) -> CuResult<bool>;
    /// `cuEventSynchronize`: returns when the event has completed (`Err`
    /// when the work failed). The thread sleeps in the driver when the event
    /// was created with [`EVENT_BLOCKING_SYNC`], and spins otherwise.
    fn event_synchronize(&self, e: Event) -> CuResult<()>;
    /// `cuEventDestroy_v2`.
    fn event_destroy(&self, e: Event) -> CuResult<()>;
    /// `cuGetErrorString`, when the driver has a text for the code.
    fn error_string(&self, e: CuError) -> Option<String>;
}

/// `"CUDA_ERROR_OUT_OF_MEMORY (out of memory)"`: the code's name with the
/// driver's own words where it has them.
pub fn describe(cuda: &dyn Cuda, e: CuError) -> String {
    match cuda.error_string(e) {
        Some(s) if !s.is_empty() => format!("{e} ({s})"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_their_enumerator_names() {
        assert_eq!(
            CuError::OUT_OF_MEMORY.to_string(),
            "CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert_eq!(CuError(12345).to_string(), "CUresult 12345");
        assert_eq!(CuError::NOT_READY.name(), Some("CUDA_ERROR_NOT_READY"));
    }
}
