//! [`TraceWriter`]: a thread-safe, all-or-nothing trace file writer (binary
//! or text form).

use crate::{BinaryEncoder, Device, DmaDir, Format, Kind, Record, TextEncoder, TraceError};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dmalab_core::safefile::StagedFile;

/// What [`TraceWriter::finish`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Records written.
    pub records: u64,
    /// DMA transfers written with [`TraceWriter::write_dma_transfer`].
    pub transfers: u64,
    /// Transfers whose submit time was earlier than the previous record's
    /// (stored with gap 0: the trace keeps call order).
    pub reordered: u64,
}

/// The encoder of the form being written.
enum Encoder {
    Binary(BinaryEncoder<BufWriter<File>>),
    Text(TextEncoder<BufWriter<File>>),
}

impl Encoder {
    #[inline]
    fn write(&mut self, r: &Record) -> std::io::Result<()> {
        match self {
            Encoder::Binary(e) => e.write(r),
            Encoder::Text(e) => e.write(r),
        }
    }

    fn get_mut(&mut self) -> &mut BufWriter<File> {
        match self {
            Encoder::Binary(e) => e.get_mut(),
            Encoder::Text(e) => e.get_mut(),
        }
    }
}

struct Inner {
    enc: Encoder,
    last_ns: Option<u64>,
    summary: TraceSummary,
    failed: bool,
}

/// Writes a trace; see the [crate docs](crate) for the API contract.
pub struct TraceWriter {
    inner: Mutex<Inner>,
    path: PathBuf,
    /// The path named in messages about writes (the temporary file's
    /// while it has a name).
    tmp: PathBuf,
    /// The new file, put at `path` by [`TraceWriter::finish`] (and removed
    /// when dropped unfinished); None when written in place (a character
    /// device or FIFO): no rename, nothing to remove.
    staged: Option<dmalab_core::safefile::StagedFile>,
}

/// Opens where a trace for `path` is written: an existing character device
/// or FIFO such as `/dev/null` in place (a rename would replace it; a FIFO
/// nobody reads does not block for ever:
/// [`dmalab_core::output::open_in_place`]), else a new file beside the
/// resolved path, renamed over it at the end ([`dmalab_core::safefile`]).
fn staging(path: &Path) -> Result<(File, PathBuf, Option<StagedFile>), TraceError> {
    use dmalab_core::output::{output_target, OutputTarget};
    match output_target(path).map_err(|e| TraceError::io(path, e))? {
        OutputTarget::Direct => {
            let f =
                dmalab_core::output::open_in_place(path).map_err(|e| TraceError::io(path, e))?;
            Ok((f, path.to_path_buf(), None))
        }
        OutputTarget::Atomic(p) => {
            let (f, staged) =
                dmalab_core::safefile::create_beside(&p).map_err(|e| TraceError::io(&p, e))?;
            Ok((f, p, Some(staged)))
        }
    }
}

/// Largest transfer one record holds; longer ones are split.
const MAX_LEN: u64 = u32::MAX as u64 & !4095;

impl TraceWriter {
    /// Creates a binary trace; it appears at `path` only when
    /// [`finish`](Self::finish) succeeds.
    pub fn create(path: &Path) -> Result<Self, TraceError> {
        Self::create_as(path, Format::Binary)
    }

    /// Creates a trace in the `form` given, as [`create`](Self::create) does.
    pub fn create_as(path: &Path, form: Format) -> Result<Self, TraceError> {
        let (f, path, staged) = staging(path)?;
        let tmp = staged
            .as_ref()
            .map_or(path.as_path(), |s| s.shown())
            .to_path_buf();
        let out = BufWriter::with_capacity(1 << 20, f);
        let enc = match form {
            Format::Binary => {
                Encoder::Binary(BinaryEncoder::new(out).map_err(|e| TraceError::io(&tmp, e))?)
            }
            Format::Text => Encoder::Text(TextEncoder::new(out)),
        };
        Ok(TraceWriter {
            inner: Mutex::new(Inner {
                enc,
                last_ns: None,
                summary: TraceSummary::default(),
                failed: false,
            }),
            path,
            tmp,
            staged,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic in another writer thread leaves the encoder usable (each
        // record is one write_all into a BufWriter).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes one record as given (its `gap_ns` is taken as is).
    pub fn write_record(&self, r: &Record) -> Result<(), TraceError> {
        let mut g = self.lock();
        let res = g.enc.write(r);
        match res {
            Ok(()) => {
                g.summary.records += 1;
                Ok(())
            }
            Err(e) => {
                g.failed = true;
                Err(TraceError::io(&self.tmp, e))
            }
        }
    }

    /// Records one DMA transfer by `device`: `len` bytes at `buf_addr`,
    /// submitted and completed at the given times (ns since a fixed
    /// origin). Transfers of 4 GiB or more are split into several records,
    /// each tagged with `device`.
    pub fn write_dma_transfer(
        &self,
        buf_addr: u64,
        len: u64,
        dir: DmaDir,
        device: Device,
        submit_ns: u64,
        complete_ns: u64,
    ) -> Result<(), TraceError> {
        let mut g = self.lock();
        let gap = match g.last_ns {
            Some(l) if submit_ns < l => {
                g.summary.reordered += 1;
                0
            }
            Some(l) => submit_ns - l,
            None => 0,
        };
        g.last_ns = Some(submit_ns.max(g.last_ns.unwrap_or(0)));
        let mut off = 0u64;
        let mut first = true;
        while off < len || (first && len == 0) {
            let l = (len - off).min(MAX_LEN);
            let mut r = Record::transfer(
                Kind::Xfer,
                if first { gap } else { 0 },
                dir,
                buf_addr.wrapping_add(off),
                l as u32,
            )
            .from_device(device);
            r.dur_ns = complete_ns.saturating_sub(submit_ns);
            if let Err(e) = g.enc.write(&r) {
                g.failed = true;
                return Err(TraceError::io(&self.tmp, e));
            }
            g.summary.records += 1;
            off += l;
            first = false;
        }
        g.summary.transfers += 1;
        Ok(())
    }

    /// Flushes, syncs and renames the trace into place.
    pub fn finish(mut self) -> Result<TraceSummary, TraceError> {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if inner.failed {
            return Err(TraceError::Invalid(format!(
                "{}: an earlier write failed; the trace was not kept",
                self.path.display()
            )));
        }
        let summary = inner.summary;
        let w = inner.enc.get_mut();
        w.flush().map_err(|e| TraceError::io(&self.tmp, e))?;
        if let Some(staged) = &mut self.staged {
            staged
                .commit(w.get_ref(), 0o666)
                .map_err(|e| TraceError::io(&self.path, e))?;
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RecordSource, TraceReader};
    use std::sync::Arc;

    #[test]
    fn threads_share_one_writer() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.trace");
        let w = Arc::new(TraceWriter::create(&p).unwrap());
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let w = Arc::clone(&w);
                std::thread::spawn(move || {
                    for i in 0..100u64 {
                        let at = i * 1000 + t;
                        w.write_dma_transfer(
                            t << 32 | i << 12,
                            4096,
                            DmaDir::ToMemory,
                            Device::Disk,
                            at,
                            at + 500,
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(!p.exists(), "nothing at the path before finish");
        let w = Arc::into_inner(w).unwrap();
        let s = w.finish().unwrap();
        assert_eq!((s.records, s.transfers), (400, 400));
        let mut rd = TraceReader::open(&p).unwrap();
        let mut r = Record::default();
        let mut n = 0;
        while rd.next_record(&mut r).unwrap() {
            assert_eq!(
                (r.kind, r.len, r.dur_ns, r.write, r.device),
                (Kind::Xfer, 4096, 500, true, Device::Disk)
            );
            n += 1;
        }
        assert_eq!(n, 400);
    }

    #[test]
    fn unfinished_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.trace");
        let w = TraceWriter::create(&p).unwrap();
        w.write_dma_transfer(0, 4096, DmaDir::FromMemory, Device::Nic, 0, 1)
            .unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn text_writer_writes_what_conversion_writes_and_nothing_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, via, direct) = (
            dir.path().join("t.trace"),
            dir.path().join("via.txt"),
            dir.path().join("direct.txt"),
        );
        let recs = [
            Record::cpu(7, true, 0x40, 8),
            Record::dma(0, false, 0x1000, 64),
            Record::cpu(1 << 30, false, 0x80, 64),
        ];
        let (b, t) = (
            TraceWriter::create(&bin).unwrap(),
            TraceWriter::create_as(&direct, Format::Text).unwrap(),
        );
        for r in &recs {
            b.write_record(r).unwrap();
            t.write_record(r).unwrap();
        }
        b.write_dma_transfer(0x2000, 8192, DmaDir::ToMemory, Device::Disk, 5, 905)
            .unwrap();
        t.write_dma_transfer(0x2000, 8192, DmaDir::ToMemory, Device::Disk, 5, 905)
            .unwrap();
        assert!(!direct.exists(), "nothing at the path before finish");
        assert_eq!(b.finish().unwrap(), t.finish().unwrap());
        crate::convert(&bin, &via, Format::Text).unwrap();
        let text = std::fs::read_to_string(&direct).unwrap();
        assert_eq!(text, std::fs::read_to_string(&via).unwrap());
        assert!(text.ends_with("0 xfer-w 0x2000 8192 900 @disk\n"), "{text}");

        let gone = dir.path().join("gone.txt");
        let w = TraceWriter::create_as(&gone, Format::Text).unwrap();
        w.write_record(&recs[0]).unwrap();
        drop(w);
        assert!(!gone.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }
}
