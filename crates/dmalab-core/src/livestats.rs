//! The live-stats page: `dmalab load --live-stats FILE` writes it
//! ([`Writer`]), `dmalab run` and `dmalab throttle` read it ([`Reader`]).
//! One layout, one header definition, both sides.
//!
//! Little-endian u64 fields (the magic is 8 bytes) in a 4096-byte file:
//!
//! | offset | field                                         |
//! |-------:|-----------------------------------------------|
//! | 0      | magic `b"DMALSTAT"`                           |
//! | 8      | version = 1                                   |
//! | 16     | pid of the `dmalab load` process              |
//! | 24     | state: 0 starting, 1 running, 2 finished      |
//! | 32     | data bytes completed                          |
//! | 40     | commands completed                            |
//! | 48     | blocks completed                              |
//! | 56     | CLOCK_MONOTONIC ns of the last update         |
//! | 64     | CLOCK_MONOTONIC ns when the load started      |
//!
//! The writer maps its page and updates the fields with atomic 8-byte
//! stores from every worker (the counters are added to on the hot path, so
//! a system call per batch would cost too much); without a file the page
//! is anonymous memory, which the per-second reporter reads either way.
//!
//! The reader never maps the page: a mapped file that someone truncates
//! kills the process that touches it with SIGBUS, and no handler can make
//! that safe. It reads the fields with `pread`, as the rate-control page
//! ([`crate::ratecontrol`]) does; a short read is an error
//! ([`LiveStatsError::Truncated`]) the reader survives. Fields are separate
//! stores, so a snapshot reads the header twice and keeps it only when both
//! readings agree (a cheap sequence check).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::clock::monotonic_ns;

/// Size of the file (one page).
pub const LEN: usize = 4096;
/// The magic at offset 0.
pub const MAGIC: &[u8; 8] = b"DMALSTAT";
/// Layout version.
pub const VERSION: u64 = 1;

/// Byte offsets of the fields.
pub mod off {
    /// The magic (8 bytes).
    pub const MAGIC: usize = 0;
    /// u64 layout version.
    pub const VERSION: usize = 8;
    /// u64 pid of the writer.
    pub const PID: usize = 16;
    /// u64 state (see [`super::state`]).
    pub const STATE: usize = 24;
    /// u64 data bytes completed.
    pub const BYTES: usize = 32;
    /// u64 commands completed.
    pub const COMMANDS: usize = 40;
    /// u64 blocks completed.
    pub const BLOCKS: usize = 48;
    /// u64 CLOCK_MONOTONIC ns of the last update.
    pub const UPDATED_NS: usize = 56;
    /// u64 CLOCK_MONOTONIC ns when the load started.
    pub const STARTED_NS: usize = 64;
    /// End of the fields.
    pub const END: usize = 72;
}

/// State values at [`off::STATE`].
pub mod state {
    /// Set up, not yet issuing.
    pub const STARTING: u64 = 0;
    /// Issuing commands.
    pub const RUNNING: u64 = 1;
    /// Done; the counters are final.
    pub const FINISHED: u64 = 2;
}

/// The writer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Setting up (buffer, rings); no load yet.
    Starting,
    /// Load is running.
    Running,
    /// Load stopped; the counters are final.
    Finished,
}

/// One consistent reading of the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Writer's pid.
    pub pid: u64,
    /// Writer's state.
    pub state: State,
    /// Data bytes completed since the load started.
    pub data_bytes: u64,
    /// Commands completed.
    pub commands: u64,
    /// Blocks completed.
    pub blocks: u64,
    /// CLOCK_MONOTONIC ns of the last update.
    pub updated_ns: u64,
    /// CLOCK_MONOTONIC ns when the load started.
    pub started_ns: u64,
    /// CLOCK_MONOTONIC ns when this snapshot was taken (reader's clock).
    pub taken_ns: u64,
}

/// Errors reading a live-stats page.
#[derive(Debug, thiserror::Error)]
pub enum LiveStatsError {
    /// The file could not be opened or read.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// What failed (printed in the message, so not a `source()`).
        cause: io::Error,
    },
    /// The page has another layout version.
    #[error(
        "live-stats file {path} has layout version {found}; this dmalab reads version {VERSION}"
    )]
    Version {
        /// The file.
        path: String,
        /// The version it holds.
        found: u64,
    },
    /// The bytes are no live-stats page (no magic).
    #[error("{0} is not a dmalab live-stats page (magic DMALSTAT)")]
    NotAPage(String),
    /// The page is shorter than its fields (truncated while in use).
    #[error("{path} was truncated to {len} bytes while in use (a live-stats page is {LEN})")]
    Truncated {
        /// The file.
        path: String,
        /// Its length now.
        len: u64,
    },
    /// The state field holds no known state.
    #[error(
        "{path} holds state {value}; a live-stats page holds 0 starting, 1 running or 2 finished"
    )]
    BadState {
        /// The file.
        path: String,
        /// The value found.
        value: u64,
    },
}

fn u64_at(b: &[u8], offset: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[offset..offset + 8]);
    u64::from_le_bytes(w)
}

/// Parses a page's header bytes (at least [`off::END`] of them) read at
/// `taken_ns`; `what` names the page in errors.
fn decode(b: &[u8], what: &str, taken_ns: u64) -> Result<Snapshot, LiveStatsError> {
    if b.len() < off::END {
        return Err(LiveStatsError::Truncated {
            path: what.to_string(),
            len: b.len() as u64,
        });
    }
    if &b[off::MAGIC..off::MAGIC + 8] != MAGIC {
        return Err(LiveStatsError::NotAPage(what.to_string()));
    }
    let found = u64_at(b, off::VERSION);
    if found != VERSION {
        return Err(LiveStatsError::Version {
            path: what.to_string(),
            found,
        });
    }
    let state = match u64_at(b, off::STATE) {
        state::STARTING => State::Starting,
        state::RUNNING => State::Running,
        state::FINISHED => State::Finished,
        value => {
            return Err(LiveStatsError::BadState {
                path: what.to_string(),
                value,
            })
        }
    };
    Ok(Snapshot {
        pid: u64_at(b, off::PID),
        state,
        data_bytes: u64_at(b, off::BYTES),
        commands: u64_at(b, off::COMMANDS),
        blocks: u64_at(b, off::BLOCKS),
        updated_ns: u64_at(b, off::UPDATED_NS),
        started_ns: u64_at(b, off::STARTED_NS),
        taken_ns,
    })
}

/// Parses a live-stats page's bytes (a file read whole, in tests and
/// tools).
pub fn parse(bytes: &[u8]) -> Result<Snapshot, LiveStatsError> {
    decode(bytes, "the live-stats page", monotonic_ns())
}

/// The writer's mapped page.
#[derive(Debug)]
pub struct Writer {
    base: *mut u8,
}

// SAFETY: the page is only accessed through atomics; the mapping lives
// until drop.
unsafe impl Send for Writer {}
// SAFETY: as above.
unsafe impl Sync for Writer {}

impl Writer {
    /// Creates `path` (replacing it: a new file put there once it holds a
    /// valid page, never written through a symlink someone planted:
    /// [`crate::safefile`]), sizes it to [`LEN`] bytes and maps it shared;
    /// or, with no path, maps an anonymous page.
    pub fn create(path: Option<&Path>) -> io::Result<Self> {
        use std::os::unix::io::AsRawFd;
        let (fd, flags, file) = match path {
            Some(p) => {
                let (f, staged) = crate::safefile::create_beside(p)?;
                f.set_len(LEN as u64)?;
                (f.as_raw_fd(), libc::MAP_SHARED, Some((f, staged)))
            }
            None => (-1, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, None),
        };
        // SAFETY: a fresh mapping of LEN bytes of a file we sized (or
        // anonymous memory); checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let s = Self { base: base.cast() };
        s.field(off::VERSION).store(VERSION, Ordering::Relaxed);
        s.field(off::PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        s.field(off::STATE)
            .store(state::STARTING, Ordering::Relaxed);
        s.field(off::UPDATED_NS)
            .store(monotonic_ns(), Ordering::Relaxed);
        // The magic last, so a reader that sees it sees a valid page.
        s.field(off::MAGIC)
            .store(u64::from_le_bytes(*MAGIC), Ordering::Release);
        // Only now at its path, so a reader never finds a page without it.
        if let Some((f, mut staged)) = file {
            staged.commit(&f, 0o644)?;
        }
        Ok(s)
    }

    fn field(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= LEN);
        // SAFETY: offset is 8-aligned inside the page-aligned LEN-byte
        // mapping, which lives as long as &self; all access is atomic.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Marks the load as started at `start_monotonic_ns`.
    pub fn set_running(&self, start_monotonic_ns: u64) {
        self.field(off::STARTED_NS)
            .store(start_monotonic_ns, Ordering::Relaxed);
        self.field(off::UPDATED_NS)
            .store(monotonic_ns(), Ordering::Relaxed);
        self.field(off::STATE)
            .store(state::RUNNING, Ordering::Release);
    }

    /// Marks the counters final.
    pub fn set_finished(&self) {
        self.field(off::UPDATED_NS)
            .store(monotonic_ns(), Ordering::Relaxed);
        self.field(off::STATE)
            .store(state::FINISHED, Ordering::Release);
    }

    /// Adds one completion batch, reaped `since_start_ns` after the start
    /// given to [`set_running`](Self::set_running): the update time is
    /// the worker's own clock read of the batch, not one more clock read
    /// per batch (at `--iodepth 1` a batch is one command).
    pub fn add(&self, bytes: u64, commands: u64, blocks: u64, since_start_ns: u64) {
        self.field(off::BYTES).fetch_add(bytes, Ordering::Relaxed);
        self.field(off::COMMANDS)
            .fetch_add(commands, Ordering::Relaxed);
        self.field(off::BLOCKS).fetch_add(blocks, Ordering::Relaxed);
        let started = self.field(off::STARTED_NS).load(Ordering::Relaxed);
        self.field(off::UPDATED_NS)
            .store(started.saturating_add(since_start_ns), Ordering::Release);
    }

    /// (bytes, commands, blocks) so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        (
            self.field(off::BYTES).load(Ordering::Acquire),
            self.field(off::COMMANDS).load(Ordering::Acquire),
            self.field(off::BLOCKS).load(Ordering::Acquire),
        )
    }

    /// The state field.
    pub fn state(&self) -> u64 {
        self.field(off::STATE).load(Ordering::Acquire)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base.cast(), LEN) };
    }
}

/// A reader of someone's live-stats page, by `pread`.
#[derive(Debug)]
pub struct Reader {
    file: File,
    path: PathBuf,
}

impl Reader {
    /// Opens `path`; Ok(None) while it does not exist yet, is too short or
    /// has no magic yet (the writer creates it at start-up).
    pub fn open(path: &Path) -> Result<Option<Self>, LiveStatsError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(cause) => {
                return Err(LiveStatsError::Io {
                    path: path.display().to_string(),
                    cause,
                })
            }
        };
        let r = Self {
            file,
            path: path.to_path_buf(),
        };
        match r.snapshot() {
            Ok(_) => Ok(Some(r)),
            Err(LiveStatsError::Truncated { .. } | LiveStatsError::NotAPage(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The header, read with one `pread` (a short read: truncated).
    fn header(&self) -> Result<[u8; off::END], LiveStatsError> {
        let mut h = [0u8; off::END];
        match self.file.read_exact_at(&mut h, 0) {
            Ok(()) => Ok(h),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(LiveStatsError::Truncated {
                path: self.path.display().to_string(),
                len: self.file.metadata().map_or(0, |m| m.len()),
            }),
            Err(cause) => Err(LiveStatsError::Io {
                path: self.path.display().to_string(),
                cause,
            }),
        }
    }

    /// A consistent snapshot: retries while the writer is mid-update (two
    /// readings differ), taking the last reading after 100 tries.
    pub fn snapshot(&self) -> Result<Snapshot, LiveStatsError> {
        let mut a = self.header()?;
        for _ in 0..100 {
            let b = self.header()?;
            if a == b {
                break;
            }
            a = b;
        }
        decode(&a, &self.path.display().to_string(), monotonic_ns())
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes a live-stats file by the layout with `fields` set (for tests
/// and for exec aggressors that are no `dmalab load`).
pub fn write_file(path: &Path, fields: &[(usize, u64)]) -> io::Result<()> {
    let mut buf = vec![0u8; LEN];
    buf[..8].copy_from_slice(MAGIC);
    buf[8..16].copy_from_slice(&VERSION.to_le_bytes());
    for &(o, v) in fields {
        if let Some(slot) = buf.get_mut(o..o + 8) {
            slot.copy_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(path, buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        assert!(Reader::open(&p).unwrap().is_none(), "not there yet");
        let w = Writer::create(Some(&p)).unwrap();
        let r = Reader::open(&p).unwrap().unwrap();
        assert_eq!(r.snapshot().unwrap().state, State::Starting);
        w.set_running(123);
        w.add(8192, 2, 2, 500);
        w.add(4096, 1, 1, 1_000);
        let s = r.snapshot().unwrap();
        assert_eq!(s.pid, u64::from(std::process::id()));
        assert_eq!((s.data_bytes, s.commands, s.blocks), (12288, 3, 3));
        assert_eq!((s.state, s.started_ns), (State::Running, 123));
        // The last batch's own time since the start: no clock read of the
        // page's own.
        assert_eq!(s.updated_ns, 123 + 1_000);
        w.set_finished();
        assert_eq!(r.snapshot().unwrap().state, State::Finished);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), LEN);
        assert_eq!(parse(&bytes).unwrap().data_bytes, 12288);
        assert_eq!(w.totals(), (12288, 3, 3));
    }

    #[test]
    fn a_truncated_page_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        let w = Writer::create(Some(&p)).unwrap();
        w.set_running(1);
        let r = Reader::open(&p).unwrap().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(16)
            .unwrap();
        let e = r.snapshot().unwrap_err();
        assert!(
            matches!(e, LiveStatsError::Truncated { len: 16, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("truncated to 16 bytes"), "{e}");
        assert!(matches!(
            parse(&[0u8; 40]),
            Err(LiveStatsError::Truncated { len: 40, .. })
        ));
    }

    #[test]
    fn garbage_is_refused_and_a_half_written_page_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        std::fs::write(&p, vec![0u8; LEN]).unwrap();
        assert!(Reader::open(&p).unwrap().is_none(), "no magic yet");
        assert!(matches!(
            parse(&[0u8; LEN]),
            Err(LiveStatsError::NotAPage(_))
        ));
        write_file(&p, &[(off::VERSION, 2)]).unwrap();
        let e = Reader::open(&p).unwrap_err();
        assert!(e.to_string().contains("layout version 2"), "{e}");
        write_file(&p, &[(off::STATE, 7)]).unwrap();
        assert!(matches!(
            Reader::open(&p),
            Err(LiveStatsError::BadState { value: 7, .. })
        ));
        std::fs::write(&p, b"DMALSTAT").unwrap();
        assert!(Reader::open(&p).unwrap().is_none(), "too short");
        let garbage: Vec<u8> = (0..LEN).map(|i| (i * 131 % 251) as u8).collect();
        assert!(parse(&garbage).is_err());
    }

    #[test]
    fn the_reader_sees_updates_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        write_file(
            &p,
            &[
                (off::PID, 4242),
                (off::STATE, state::RUNNING),
                (off::BYTES, 1 << 30),
                (off::COMMANDS, 262_144),
                (off::UPDATED_NS, 5_000),
                (off::STARTED_NS, 1_000),
            ],
        )
        .unwrap();
        let r = Reader::open(&p).unwrap().unwrap();
        let s = r.snapshot().unwrap();
        assert_eq!((s.pid, s.data_bytes, s.commands), (4242, 1 << 30, 262_144));
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.seek(SeekFrom::Start(off::BYTES as u64)).unwrap();
        f.write_all(&(3u64 << 30).to_le_bytes()).unwrap();
        f.seek(SeekFrom::Start(off::STATE as u64)).unwrap();
        f.write_all(&state::FINISHED.to_le_bytes()).unwrap();
        let s = r.snapshot().unwrap();
        assert_eq!((s.data_bytes, s.state), (3 << 30, State::Finished));
    }
}
