//! The binary trace form: a 16-byte header, then 16-byte records.

use crate::{Device, Kind, Record, RecordSource, Source, TraceError};
use std::io::{Read, Write};
use std::path::Path;

/// File magic.
pub const MAGIC: [u8; 8] = *b"DMALTRC\0";
/// Format version.
pub const VERSION: u32 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 16;
/// Bytes per record slot.
pub const RECORD_LEN: usize = 16;

const KIND_GAP: u32 = 4;
const FLAG_WRITE: u32 = 1 << 4;
const FLAG_DMA: u32 = 1 << 5;
/// Bits 6..8: the device of a DMA record (0 in files that predate it).
const DEVICE_SHIFT: u32 = 6;
const GAP_SHIFT: u32 = 8;
/// Largest gap the 24-bit field holds.
const GAP_MAX: u64 = (1 << 24) - 1;

/// The device bits of a DMA record's `ctl` (a CPU record has none).
#[inline]
fn device_of(ctl: u32) -> Device {
    if ctl & FLAG_DMA != 0 {
        Device::from_bits(ctl >> DEVICE_SHIFT)
    } else {
        Device::Untagged
    }
}

/// Writes records in the binary form to any `Write`.
pub struct BinaryEncoder<W: Write> {
    out: W,
}

impl<W: Write> BinaryEncoder<W> {
    /// Writes the header and returns the encoder.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out.write_all(&h)?;
        Ok(BinaryEncoder { out })
    }

    /// Encodes one record (two slots for a long gap or a transfer).
    #[inline]
    pub fn write(&mut self, r: &Record) -> std::io::Result<()> {
        let mut gap = r.gap_ns;
        if gap > GAP_MAX {
            self.slot(gap, 0, KIND_GAP)?;
            gap = 0;
        }
        let mut ctl = r.kind as u32 | ((gap as u32) << GAP_SHIFT);
        if r.write {
            ctl |= FLAG_WRITE;
        }
        if r.source == Source::Dma {
            ctl |= FLAG_DMA | (r.device as u32) << DEVICE_SHIFT;
        }
        self.slot(r.addr, r.len, ctl)?;
        if r.kind == Kind::Xfer {
            self.slot(r.dur_ns, 0, 0)?;
        }
        Ok(())
    }

    #[inline]
    fn slot(&mut self, a: u64, len: u32, ctl: u32) -> std::io::Result<()> {
        let mut b = [0u8; RECORD_LEN];
        b[..8].copy_from_slice(&a.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..].copy_from_slice(&ctl.to_le_bytes());
        self.out.write_all(&b)
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }

    /// The underlying writer, borrowed.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }
}

/// Reads the binary form from any `Read`, through its own large buffer
/// (no per-record allocation or call into the reader).
pub struct BinaryDecoder<R: Read> {
    inp: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    path: String,
}

const BUF_LEN: usize = 1 << 20;

impl<R: Read> BinaryDecoder<R> {
    /// Reads and checks the header. `path` names the input in errors.
    pub fn new(mut inp: R, path: &Path) -> Result<Self, TraceError> {
        let mut h = [0u8; HEADER_LEN];
        inp.read_exact(&mut h).map_err(|e| TraceError::Format {
            path: path.display().to_string(),
            message: format!("cannot read the trace header: {e}"),
        })?;
        if h[..8] != MAGIC {
            return Err(TraceError::Format {
                path: path.display().to_string(),
                message: "not a dmalab binary trace (bad magic)".into(),
            });
        }
        let v = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if v != VERSION {
            return Err(TraceError::Format {
                path: path.display().to_string(),
                message: format!("trace format version {v}; this dmalab reads version {VERSION}"),
            });
        }
        Ok(BinaryDecoder {
            inp,
            buf: vec![0; BUF_LEN],
            pos: 0,
            end: 0,
            eof: false,
            path: path.display().to_string(),
        })
    }

    /// Ensures at least `n` bytes are buffered unless at end of input.
    #[cold]
    fn refill(&mut self, n: usize) -> Result<(), TraceError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        while self.end < n && !self.eof {
            match self.inp.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(TraceError::Io {
                        path: self.path.clone(),
                        cause: e,
                    })
                }
            }
        }
        Ok(())
    }

    #[inline]
    fn slot(&mut self) -> Result<Option<(u64, u32, u32)>, TraceError> {
        if self.end - self.pos < RECORD_LEN {
            self.refill(RECORD_LEN)?;
            if self.end == self.pos {
                return Ok(None);
            }
            if self.end - self.pos < RECORD_LEN {
                return Err(TraceError::Format {
                    path: self.path.clone(),
                    message: format!(
                        "truncated: {} bytes at the end do not make a 16-byte record",
                        self.end - self.pos
                    ),
                });
            }
        }
        let b = &self.buf[self.pos..self.pos + RECORD_LEN];
        let a = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let len = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let ctl = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        self.pos += RECORD_LEN;
        Ok(Some((a, len, ctl)))
    }

    fn bad(&self, message: String) -> TraceError {
        TraceError::Format {
            path: self.path.clone(),
            message,
        }
    }
}

impl<R: Read> RecordSource for BinaryDecoder<R> {
    #[inline]
    fn next_record(&mut self, rec: &mut Record) -> Result<bool, TraceError> {
        // Fast path: a plain record (not a gap or transfer) in the buffer.
        if self.end - self.pos >= RECORD_LEN {
            let b = &self.buf[self.pos..self.pos + RECORD_LEN];
            let ctl = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
            let kind = match ctl & 0xf {
                0 => Some(Kind::Ref),
                1 => Some(Kind::Begin),
                2 => Some(Kind::End),
                _ => None,
            };
            if let Some(kind) = kind {
                rec.addr = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                rec.len = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
                rec.gap_ns = (ctl >> GAP_SHIFT) as u64;
                rec.kind = kind;
                rec.write = ctl & FLAG_WRITE != 0;
                rec.source = if ctl & FLAG_DMA != 0 {
                    Source::Dma
                } else {
                    Source::Cpu
                };
                rec.dur_ns = 0;
                rec.device = device_of(ctl);
                self.pos += RECORD_LEN;
                return Ok(true);
            }
        }
        let mut extra_gap = 0u64;
        loop {
            let Some((a, len, ctl)) = self.slot()? else {
                if extra_gap != 0 {
                    return Err(self.bad("truncated: a gap record ends the trace".into()));
                }
                return Ok(false);
            };
            let kind = match ctl & 0xf {
                0 => Kind::Ref,
                1 => Kind::Begin,
                2 => Kind::End,
                3 => Kind::Xfer,
                KIND_GAP => {
                    extra_gap = extra_gap.saturating_add(a);
                    continue;
                }
                k => return Err(self.bad(format!("unknown record kind {k}"))),
            };
            rec.gap_ns = extra_gap + (ctl >> GAP_SHIFT) as u64;
            rec.kind = kind;
            rec.write = ctl & FLAG_WRITE != 0;
            rec.source = if ctl & FLAG_DMA != 0 {
                Source::Dma
            } else {
                Source::Cpu
            };
            rec.addr = a;
            rec.len = len;
            rec.dur_ns = 0;
            rec.device = device_of(ctl);
            if kind == Kind::Xfer {
                match self.slot()? {
                    Some((d, _, _)) => rec.dur_ns = d,
                    None => {
                        return Err(
                            self.bad("truncated: a transfer record lacks its extension".into())
                        )
                    }
                }
            }
            return Ok(true);
        }
    }
}
