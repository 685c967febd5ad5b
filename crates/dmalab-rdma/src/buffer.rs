//! A buffer the NIC reads and writes that is not dmalab's shared DMA
//! buffer: the server's, and the loopback target's.

use crate::error::RdmaError;
use dmalab_core::placement::{
    AnonymousOptions, Mapping, PlacementError, PlacementRecord, PlacementSpec,
};
use sha2::Digest;

/// A page-aligned mapping the NIC reads and writes, every byte filled,
/// placed as asked (a node, a buffer file) and checked where it landed.
pub struct RawBuffer {
    mapping: Mapping,
    /// Where its pages are, as the kernel says.
    pub placement: PlacementRecord,
}

impl RawBuffer {
    /// `len` bytes (at least 1), page-aligned, every byte `fill`, in
    /// anonymous memory; `flag` is blamed when it cannot be had.
    pub fn new(len: u64, fill: u8, flag: &str) -> Result<RawBuffer, RdmaError> {
        Self::placed(len, fill, flag, &PlacementSpec::default())
    }

    /// [`RawBuffer::new`] placed as `place` says (`--membind`,
    /// `--buffer-file`): bound before the fill touches it, every page
    /// checked after (refused with `--membind` when one is elsewhere).
    pub fn placed(
        len: u64,
        fill: u8,
        flag: &str,
        place: &PlacementSpec,
    ) -> Result<RawBuffer, RdmaError> {
        let len = len.max(1);
        let mapping =
            Mapping::new(len, place, AnonymousOptions::default()).map_err(|e| match e {
                PlacementError::Usage(u) => RdmaError::Usage(u),
                PlacementError::Io { what, source } if place.buffer_file.is_none() => {
                    RdmaError::Usage(dmalab_core::UsageError::new(
                        flag,
                        format!(
                            "could not allocate {len} bytes ({what}: {source}): use a smaller size"
                        ),
                    ))
                }
                PlacementError::Io { what, source } => RdmaError::io(what, source),
            })?;
        // SAFETY: the mapping is ours, writable and `len` bytes long; no
        // device knows of it yet. Writing every byte faults every page in
        // (a zero fill too), so the check below sees them all.
        unsafe { std::ptr::write_bytes(mapping.as_ptr(), fill, mapping.len()) };
        let placement = mapping.verify(4096).map_err(|e| match e {
            PlacementError::Usage(u) => RdmaError::Usage(u),
            PlacementError::Io { what, source } => RdmaError::io(what, source),
        })?;
        Ok(RawBuffer { mapping, placement })
    }

    /// SHA-256 of the contents. Only call with no QP connected to it.
    pub fn sha256(&self) -> String {
        // SAFETY: the mapping is live and no DMA targets it any more (all
        // QPs are destroyed before this is called).
        let bytes = unsafe { std::slice::from_raw_parts(self.mapping.as_ptr(), self.len()) };
        sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Never true (at least one byte is mapped).
    pub fn is_empty(&self) -> bool {
        false
    }
}
