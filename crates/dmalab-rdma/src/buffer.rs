//! A buffer the NIC reads and writes that is not dmalab's shared DMA
//! buffer: the server's, and the loopback target's.

use crate::error::RdmaError;
use sha2::Digest;

/// A zeroed, page-aligned allocation the NIC reads and writes.
pub struct RawBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is only reached through raw pointers (by the NIC, and
// by the checksum after every QP is gone); it is freed once, in Drop.
unsafe impl Send for RawBuffer {}
// SAFETY: as above.
unsafe impl Sync for RawBuffer {}

impl RawBuffer {
    /// `len` bytes (at least 1), page-aligned, every byte `fill`; `flag` is blamed when it cannot be had.
    pub fn new(len: u64, fill: u8, flag: &str) -> Result<RawBuffer, RdmaError> {
        let size = usize::try_from(len.max(1)).map_err(|_| {
            RdmaError::Usage(dmalab_core::UsageError::new(
                flag,
                "too large for this host",
            ))
        })?;
        let layout = std::alloc::Layout::from_size_align(size, 4096).map_err(|_| {
            RdmaError::Usage(dmalab_core::UsageError::new(
                flag,
                "too large for this host",
            ))
        })?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(RdmaError::Usage(dmalab_core::UsageError::new(
                flag,
                format!("could not allocate {len} bytes: use a smaller size"),
            )));
        }
        if fill != 0 {
            // SAFETY: ptr..ptr+size was just allocated.
            unsafe { std::ptr::write_bytes(ptr, fill, size) };
        }
        Ok(RawBuffer { ptr, layout })
    }

    /// SHA-256 of the contents. Only call with no QP connected to it.
    pub fn sha256(&self) -> String {
        // SAFETY: the allocation is live and no DMA targets it any more (all
        // QPs are destroyed before this is called).
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) };
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

impl RawBuffer {
    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes allocated.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never true (at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        false
    }
}
