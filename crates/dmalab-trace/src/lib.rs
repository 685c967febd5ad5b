//! dmalab trace: the trace format of CPU and DMA memory references and DMA
//! transfers, its reader and its writers. `dmalab load --trace FILE` records
//! into it and `dmalab sim` replays it; neither needs the other.
//!
//! # Stable API (used by `dmalab load --trace FILE`)
//!
//! ```no_run
//! use dmalab_trace::{Device, DmaDir, TraceWriter};
//! let w = TraceWriter::create("run.trace".as_ref())?; // Sync: share it (&w, Arc) across threads
//! // A disk wrote 128 KiB into host memory at 0x7f00_0000_0000 (a disk read),
//! // submitted 1000 ns and completed 51000 ns after the run started:
//! w.write_dma_transfer(0x7f00_0000_0000, 128 << 10, DmaDir::ToMemory, Device::Disk, 1_000, 51_000)?;
//! let summary = w.finish()?; // renames the file into place; dropped unfinished = removed
//! # Ok::<(), dmalab_trace::TraceError>(())
//! ```
//!
//! - [`TraceWriter::create`] opens `PATH` (written whole or not at all: into a
//!   temporary file beside it, renamed by [`TraceWriter::finish`]).
//! - [`TraceWriter::write_dma_transfer`] takes `&self`; worker threads may call
//!   it concurrently (a mutex orders the records), or one collector thread may.
//!   Times are nanoseconds since any fixed origin (e.g. the start of the run).
//!   Each record carries the [`Device`] given (`load --trace` tags a storage
//!   engine's transfers `disk`, RDMA's `nic`, a GPU copy engine's `other`,
//!   and leaves the null engine's untagged: no device moved them).
//!   Records are stored in call order; a submit time earlier than the previous
//!   record's is stored with gap 0 and counted in
//!   [`TraceSummary::reordered`].
//! - [`TraceWriter::write_record`] writes any [`Record`].
//! - [`TraceWriter::create_as`] writes the text form instead, with the same
//!   guarantees.
//! - [`TraceReader::open`] reads either form (told apart by the magic);
//!   [`TraceStats`] counts what a trace holds; [`convert`] copies a trace
//!   from one form to the other.
//!
//! # Binary form (`.trace`), little endian
//!
//! A 16-byte header: magic `DMALTRC\0`, `u32` version (1), `u32` reserved (0).
//! Then 16-byte records:
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..8  | `addr` u64: physical (or any) byte address |
//! | 8..12 | `len` u32: bytes (a reference's size, a transfer's length) |
//! | 12..16| `ctl` u32: bits 0..4 kind, bit 4 write, bit 5 DMA source, bits 6..8 device, bits 8..32 gap ns |
//!
//! Kinds: 0 `ref` (one memory reference), 1 `begin` and 2 `end` (markers
//! around the references of one DMA transfer, as HMTT's DMA_BEGIN_TAG and
//! DMA_END_TAG), 3 `xfer` (a whole DMA transfer whose line references the
//! simulator generates itself; followed by one 16-byte extension slot:
//! `u64` duration ns (complete - submit), `u64` reserved), 4 `gap` (`addr`
//! holds a gap too long for 24 bits; it is added to the next record's gap).
//! The gap is the time from the previous record to this one, nanoseconds.
//! The device ([`Device`]: 0 untagged, 1 NIC, 2 disk, 3 other) says which
//! device a DMA record is from; with the direction it names the stream
//! (NIC receive, NIC transmit, disk read, disk write). Files written before
//! the field existed hold 0 there (untagged), and readers that predate it
//! ignore the two bits, so the version stays 1.
//!
//! # Text form
//!
//! One record a line, `#` starts a comment:
//! `GAP_NS OP ADDR LEN [DUR_NS]`, where OP is `cpu-r`, `cpu-w`, `dma-r`,
//! `dma-w` (references), `begin-r`, `begin-w`, `end-r`, `end-w` (transfer
//! markers) or `xfer-r`, `xfer-w` (whole transfers; DUR_NS optional). ADDR is
//! decimal or `0x` hex. A DMA record may end with its device: `@nic`,
//! `@disk` or `@other` (none: untagged). For DMA, `w` means the device writes memory (disk
//! read, network receive), `r` the device reads memory.

mod binary;
mod stats;
mod text;
mod writer;

pub use binary::{BinaryDecoder, BinaryEncoder, HEADER_LEN, MAGIC, RECORD_LEN, VERSION};
pub use stats::TraceStats;
pub use text::{parse_text_line, TextDecoder, TextEncoder};
pub use writer::{TraceSummary, TraceWriter};

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use thiserror::Error;

/// Errors reading or writing traces.
#[derive(Debug, Error)]
pub enum TraceError {
    /// An I/O error on the named file.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// The input is not a valid trace.
    #[error("{path}: {message}")]
    Format {
        /// The file (and line, for text).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A value does not fit the format.
    #[error("{0}")]
    Invalid(String),
    /// SIGINT or SIGTERM arrived; the output was not kept.
    #[error("interrupted by a signal; the output was not kept")]
    Interrupted,
}

/// Records between two looks at the stop flag in loops over a trace.
pub const STOP_CHECK_RECORDS: u64 = 1 << 14;

/// `Err(Interrupted)` when SIGINT or SIGTERM arrived and `n` (a running
/// count of records) is at a check point: loops over records call this once
/// per record.
#[inline]
pub fn check_stop(n: u64) -> Result<(), TraceError> {
    if n.is_multiple_of(STOP_CHECK_RECORDS) && dmalab_core::signal::stop_requested() {
        return Err(TraceError::Interrupted);
    }
    Ok(())
}

impl TraceError {
    pub(crate) fn io(path: &Path, cause: std::io::Error) -> Self {
        TraceError::Io {
            path: path.display().to_string(),
            cause,
        }
    }
}

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One memory reference.
    Ref = 0,
    /// Start of a DMA transfer whose references follow.
    Begin = 1,
    /// End of a DMA transfer.
    End = 2,
    /// A whole DMA transfer; the simulator generates its line references.
    Xfer = 3,
}

/// Who issued a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The processor.
    Cpu,
    /// A device (DMA engine).
    Dma,
}

/// Which device issued a DMA record (the binary form's bits 6..8). With the
/// direction it names the stream: a NIC writing memory is receive, reading
/// it transmit; a disk writing memory is a disk read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Device {
    /// Not said (CPU records, and traces written before the field).
    #[default]
    Untagged = 0,
    /// A network interface.
    Nic = 1,
    /// A storage device.
    Disk = 2,
    /// Any other device (an accelerator, a copy engine).
    Other = 3,
}

impl Device {
    /// Every device, in the order of their codes.
    pub const ALL: [Device; 4] = [Device::Untagged, Device::Nic, Device::Disk, Device::Other];

    /// The device with code `bits & 3`.
    #[inline]
    pub fn from_bits(bits: u32) -> Self {
        Self::ALL[(bits & 3) as usize]
    }

    /// Its name in the text form (after `@`) and in results.
    pub fn name(self) -> &'static str {
        match self {
            Device::Untagged => "untagged",
            Device::Nic => "nic",
            Device::Disk => "disk",
            Device::Other => "other",
        }
    }

    /// The device named `s` (`nic`, `disk`, `other`).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The stream a DMA in direction `write` (the device writes memory) of
    /// this device is: `nic-rx`, `nic-tx`, `disk-rd`, `disk-wr`, and
    /// `other-w`/`other-r`, `untagged-w`/`untagged-r`.
    pub fn stream(self, write: bool) -> &'static str {
        match (self, write) {
            (Device::Nic, true) => "nic-rx",
            (Device::Nic, false) => "nic-tx",
            (Device::Disk, true) => "disk-rd",
            (Device::Disk, false) => "disk-wr",
            (Device::Other, true) => "other-w",
            (Device::Other, false) => "other-r",
            (Device::Untagged, true) => "untagged-w",
            (Device::Untagged, false) => "untagged-r",
        }
    }
}

/// Direction of a DMA transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DmaDir {
    /// The device writes host memory (disk read, network receive).
    ToMemory,
    /// The device reads host memory (disk write, network transmit).
    FromMemory,
}

impl DmaDir {
    /// True when the device writes memory.
    pub fn is_write(self) -> bool {
        matches!(self, DmaDir::ToMemory)
    }
}

/// One trace record, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Nanoseconds since the previous record.
    pub gap_ns: u64,
    /// What the record is.
    pub kind: Kind,
    /// Issuer (markers and transfers are always `Dma`).
    pub source: Source,
    /// For references: a store. For DMA markers and transfers: the device
    /// writes memory ([`DmaDir::ToMemory`]).
    pub write: bool,
    /// Byte address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// For `Xfer`: completion minus submission time, ns (0 if unknown).
    pub dur_ns: u64,
    /// For DMA records: the device that issued it ([`Device::Untagged`]
    /// for CPU records and when the trace does not say).
    pub device: Device,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            gap_ns: 0,
            kind: Kind::Ref,
            source: Source::Cpu,
            write: false,
            addr: 0,
            len: 0,
            dur_ns: 0,
            device: Device::Untagged,
        }
    }
}

impl Record {
    /// A CPU reference.
    pub fn cpu(gap_ns: u64, write: bool, addr: u64, len: u32) -> Self {
        Record {
            gap_ns,
            kind: Kind::Ref,
            source: Source::Cpu,
            write,
            addr,
            len,
            dur_ns: 0,
            device: Device::Untagged,
        }
    }

    /// A DMA reference.
    pub fn dma(gap_ns: u64, write: bool, addr: u64, len: u32) -> Self {
        Record {
            source: Source::Dma,
            ..Record::cpu(gap_ns, write, addr, len)
        }
    }

    /// A DMA transfer marker (`Begin` or `End`) or a whole transfer (`Xfer`).
    pub fn transfer(kind: Kind, gap_ns: u64, dir: DmaDir, addr: u64, len: u32) -> Self {
        Record {
            gap_ns,
            kind,
            source: Source::Dma,
            write: dir.is_write(),
            addr,
            len,
            dur_ns: 0,
            device: Device::Untagged,
        }
    }

    /// The same record from `device` (DMA records).
    pub fn from_device(self, device: Device) -> Self {
        Record { device, ..self }
    }
}

/// Trace encoding on disk (`dmalab sim convert --to`, and the variants'
/// doc comments are its help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// 16-byte binary records.
    Binary,
    /// One record a line.
    Text,
}

/// Anything that yields records one at a time.
pub trait RecordSource {
    /// Reads the next record into `rec`; false at the end.
    fn next_record(&mut self, rec: &mut Record) -> Result<bool, TraceError>;
}

/// True when `head` is close to the binary magic (at least five of its
/// eight bytes in place) or holds a NUL byte: a damaged binary trace, not
/// text, so the error names the header instead of a UTF-8 failure further on.
fn damaged_magic(head: &[u8; 8]) -> bool {
    let same = head
        .iter()
        .zip(MAGIC.iter())
        .filter(|(a, b)| a == b)
        .count();
    same >= 5 || head.contains(&0)
}

/// Reads a trace file of either form (told apart by the magic).
pub enum TraceReader {
    /// Binary.
    Binary(BinaryDecoder<File>),
    /// Text.
    Text(TextDecoder<BufReader<File>>),
}

impl TraceReader {
    /// Opens `path`, detecting the form.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let mut f = File::open(path).map_err(|e| TraceError::io(path, e))?;
        let mut head = [0u8; 8];
        let mut got = 0;
        while got < head.len() {
            let n = f
                .read(&mut head[got..])
                .map_err(|e| TraceError::io(path, e))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let f = File::open(path).map_err(|e| TraceError::io(path, e))?;
        if got == 8 && head == MAGIC {
            Ok(TraceReader::Binary(BinaryDecoder::new(f, path)?))
        } else if got == 8 && damaged_magic(&head) {
            Err(TraceError::Format {
                path: path.display().to_string(),
                message: format!(
                    "byte offset 0: the binary trace magic is damaged (read {:?}, expected \"DMALTRC\\0\")",
                    String::from_utf8_lossy(&head)
                ),
            })
        } else {
            Ok(TraceReader::Text(TextDecoder::new(
                BufReader::with_capacity(1 << 16, f),
                path,
            )))
        }
    }

    /// The form of the open file.
    pub fn format(&self) -> Format {
        match self {
            TraceReader::Binary(_) => Format::Binary,
            TraceReader::Text(_) => Format::Text,
        }
    }
}

impl RecordSource for TraceReader {
    #[inline]
    fn next_record(&mut self, rec: &mut Record) -> Result<bool, TraceError> {
        match self {
            TraceReader::Binary(d) => d.next_record(rec),
            TraceReader::Text(d) => d.next_record(rec),
        }
    }
}

/// Records held in memory (tests, synthetic workloads, benchmarks).
pub struct VecSource<'a> {
    recs: &'a [Record],
    pos: usize,
}

impl<'a> VecSource<'a> {
    /// Iterates over `recs`.
    pub fn new(recs: &'a [Record]) -> Self {
        VecSource { recs, pos: 0 }
    }
}

impl RecordSource for VecSource<'_> {
    #[inline]
    fn next_record(&mut self, rec: &mut Record) -> Result<bool, TraceError> {
        match self.recs.get(self.pos) {
            Some(r) => {
                *rec = *r;
                self.pos += 1;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Counts of what a conversion copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Records copied.
    pub records: u64,
}

/// Copies the trace at `input` (either form) to `output` in `to` form;
/// `output` is written whole or not at all.
pub fn convert(input: &Path, output: &Path, to: Format) -> Result<ConvertStats, TraceError> {
    let mut src = TraceReader::open(input)?;
    let w = TraceWriter::create_as(output, to)?;
    let mut rec = Record::default();
    let mut stats = ConvertStats::default();
    while src.next_record(&mut rec)? {
        check_stop(stats.records)?;
        w.write_record(&rec)?;
        stats.records += 1;
    }
    w.finish()?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_prints_its_cause_once() {
        let e = TraceError::io(
            Path::new("a.trace"),
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        );
        assert_eq!(dmalab_core::error::chain_line(&e), "a.trace: denied");
    }

    fn sample() -> Vec<Record> {
        let mut x = Record::transfer(Kind::Xfer, 5, DmaDir::FromMemory, 0x9000, 8192);
        x.dur_ns = 777;
        vec![
            Record::cpu(0, false, 0x1000, 64),
            Record::cpu(3, true, 0x1040, 8),
            Record::transfer(Kind::Begin, 10, DmaDir::ToMemory, 0x200000, 128),
            Record::dma(1, true, 0x200000, 64),
            Record::dma(1, true, 0x200040, 64),
            Record::transfer(Kind::End, 0, DmaDir::ToMemory, 0x200000, 128),
            x,
            // Each device tag.
            Record::transfer(Kind::Begin, 0, DmaDir::ToMemory, 0x300000, 64)
                .from_device(Device::Nic),
            Record::dma(0, true, 0x300000, 64).from_device(Device::Nic),
            Record::dma(0, false, 0x300040, 64).from_device(Device::Disk),
            x.from_device(Device::Other),
            // A gap too long for the 24-bit field.
            Record::cpu(5_000_000_000, false, u64::MAX - 63, 64),
        ]
    }

    #[test]
    fn binary_and_text_roundtrip() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("a.trace");
        let txt = dir.path().join("a.txt");
        let bin2 = dir.path().join("b.trace");
        let w = TraceWriter::create(&bin).unwrap();
        for r in sample() {
            w.write_record(&r).unwrap();
        }
        let s = w.finish().unwrap();
        assert_eq!(s.records, 12);
        assert_eq!(convert(&bin, &txt, Format::Text).unwrap().records, 12);
        assert_eq!(convert(&txt, &bin2, Format::Binary).unwrap().records, 12);
        for p in [&bin, &txt, &bin2] {
            let mut rd = TraceReader::open(p).unwrap();
            let mut got = Vec::new();
            let mut r = Record::default();
            while rd.next_record(&mut r).unwrap() {
                got.push(r);
            }
            assert_eq!(got, sample(), "{}", p.display());
        }
        assert_eq!(std::fs::read(&bin).unwrap(), std::fs::read(&bin2).unwrap());
    }

    #[test]
    fn truncated_binary_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("a.trace");
        let w = TraceWriter::create(&bin).unwrap();
        w.write_record(&Record::cpu(0, false, 64, 64)).unwrap();
        w.finish().unwrap();
        let mut bytes = std::fs::read(&bin).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&bin, &bytes).unwrap();
        let mut rd = TraceReader::open(&bin).unwrap();
        let mut r = Record::default();
        let e = rd.next_record(&mut r).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }

    /// The on-disk binary form, byte for byte: a header, a plain reference,
    /// a gap too long for 24 bits (its own slot), and a transfer (its
    /// extension slot), as `dmalab load --trace` and `sim synth` wrote them
    /// when the format moved out of dmalab-sim.
    #[test]
    fn binary_form_is_unchanged_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.trace");
        let mut x = Record::transfer(Kind::Xfer, 5, DmaDir::ToMemory, 0x9000, 8192);
        x.dur_ns = 777;
        let w = TraceWriter::create(&p).unwrap();
        for r in [
            Record::cpu(3, true, 0x1040, 8),
            Record::cpu(1 << 24, false, 0, 64),
            x,
        ] {
            w.write_record(&r).unwrap();
        }
        w.finish().unwrap();
        let slot = |a: u64, len: u32, ctl: u32| {
            let mut b = a.to_le_bytes().to_vec();
            b.extend(len.to_le_bytes());
            b.extend(ctl.to_le_bytes());
            b
        };
        let mut want = b"DMALTRC\0\x01\0\0\0\0\0\0\0".to_vec();
        want.extend(slot(0x1040, 8, 0x310)); // ref, write, CPU, gap 3
        want.extend(slot(1 << 24, 0, 4)); // the long gap
        want.extend(slot(0, 64, 0)); // ref, read, CPU, gap 0
        want.extend(slot(0x9000, 8192, 0x533)); // xfer, write, DMA, gap 5
        want.extend(slot(777, 0, 0)); // its duration
        assert_eq!(std::fs::read(&p).unwrap(), want);
    }

    /// The device tag lives in bits 6..8 of a DMA record's `ctl`; a reader
    /// finds it there, and finds none in a CPU record whatever those bits
    /// hold (files that predate the tag hold 0: untagged).
    #[test]
    fn device_tag_is_bits_6_and_7_of_a_dma_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.trace");
        let w = TraceWriter::create(&p).unwrap();
        w.write_record(&Record::dma(2, true, 0x40, 64).from_device(Device::Disk))
            .unwrap();
        w.finish().unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        let ctl = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
        assert_eq!(ctl, 0x200 | 2 << 6 | 1 << 5 | 1 << 4);
        // The same bits on a CPU record (no writer sets them) are ignored.
        bytes[28..32].copy_from_slice(&(0x200u32 | 3 << 6 | 1 << 4).to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        let mut r = Record::default();
        assert!(TraceReader::open(&p).unwrap().next_record(&mut r).unwrap());
        assert_eq!(r, Record::cpu(2, true, 0x40, 64));
    }

    /// The committed fuzz seed (written by an earlier dmalab) still reads,
    /// and writing its records again gives the same bytes.
    #[test]
    fn committed_binary_trace_reads_and_rewrites_identically() {
        let seed =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz/seeds/web-small.trace");
        let dir = tempfile::tempdir().unwrap();
        let again = dir.path().join("again.trace");
        let mut rd = TraceReader::open(&seed).unwrap();
        assert_eq!(rd.format(), Format::Binary);
        let w = TraceWriter::create(&again).unwrap();
        let mut r = Record::default();
        let mut n = 0;
        while rd.next_record(&mut r).unwrap() {
            w.write_record(&r).unwrap();
            n += 1;
        }
        w.finish().unwrap();
        assert!(n > 100, "{n} records");
        assert_eq!(
            std::fs::read(&again).unwrap(),
            std::fs::read(&seed).unwrap()
        );
    }
}
