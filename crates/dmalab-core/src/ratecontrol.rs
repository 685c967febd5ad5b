//! The rate-control page: `dmalab load --rate-control FILE` creates it and
//! reads it; a controller (`dmalab throttle`, or anything that maps the file)
//! writes new rate limits into it while the load runs. One definition for
//! both sides, beside the live-stats page (which flows the other way).
//!
//! A separate mmapped file rather than a FIFO or socket: the load's workers
//! look at it on every command they take from the limiter, and a mapped
//! generation counter costs one relaxed load there, with no syscall, no
//! reader thread and no framing; a writer that dies leaves the last limits in
//! force instead of a broken pipe.
//!
//! Little-endian u64 fields (the magic is 8 bytes) in a 4096-byte file:
//!
//! | offset | field                                                      |
//! |-------:|------------------------------------------------------------|
//! | 0      | magic `b"DMALRATE"`                                        |
//! | 8      | version = 1                                                |
//! | 16     | pid of the `dmalab load` process                           |
//! | 24     | generation: even when stable, odd while a writer updates   |
//! | 32     | byte rate limit, bytes/s (0: none)                         |
//! | 40     | command rate limit, commands/s (0: none)                   |
//! | 48     | generation the load last applied                           |
//!
//! A writer makes the generation odd, stores the limits, then makes it even
//! again (a sequence lock); the load reads the generation, the limits, and
//! the generation again, and applies the limits only when both readings are
//! the same even number.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of the file (one page).
pub const LEN: usize = 4096;
/// The magic at offset 0.
pub const MAGIC: &[u8; 8] = b"DMALRATE";
/// Layout version.
pub const VERSION: u64 = 1;

/// Byte offsets of the fields.
pub mod off {
    /// The magic (8 bytes).
    pub const MAGIC: usize = 0;
    /// u64 layout version.
    pub const VERSION: usize = 8;
    /// u64 pid of the load.
    pub const PID: usize = 16;
    /// u64 generation (sequence lock).
    pub const GENERATION: usize = 24;
    /// u64 byte rate limit, bytes/s, 0 for none.
    pub const RATE_BYTES_PER_S: usize = 32;
    /// u64 command rate limit, commands/s, 0 for none.
    pub const RATE_IOPS: usize = 40;
    /// u64 generation the load last applied.
    pub const APPLIED: usize = 48;
}

/// Rate limits as the page holds them (None: no limit of that kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Limits {
    /// Byte rate limit, bytes per second.
    pub rate_bytes_per_s: Option<u64>,
    /// Command rate limit, commands per second.
    pub rate_iops: Option<u64>,
}

/// A mapped rate-control page (either side).
#[derive(Debug)]
pub struct RateControl {
    base: *mut u8,
}

// SAFETY: the page is only accessed through atomics; the mapping lives until
// drop.
unsafe impl Send for RateControl {}
// SAFETY: as above.
unsafe impl Sync for RateControl {}

/// Errors opening a rate-control page.
#[derive(Debug, thiserror::Error)]
pub enum RateControlError {
    /// The file could not be created, opened or mapped.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// What failed (printed in the message, so not a `source()`).
        cause: std::io::Error,
    },
    /// The file is not a rate-control page of this version.
    #[error("{0} is not a dmalab rate-control file (magic DMALRATE, version {VERSION}); pass the file `dmalab load --rate-control` created")]
    NotAPage(String),
}

fn map(path: &Path, create: bool) -> Result<*mut u8, RateControlError> {
    let io = |cause| RateControlError::Io {
        path: path.display().to_string(),
        cause,
    };
    let f = if create {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(path)
            .map_err(io)?
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?
    };
    if create {
        f.set_len(LEN as u64).map_err(io)?;
    } else if f.metadata().map_err(io)?.len() < LEN as u64 {
        return Err(RateControlError::NotAPage(path.display().to_string()));
    }
    // SAFETY: a fresh shared mapping of LEN bytes of a file at least that
    // long; checked for MAP_FAILED. The mapping outlives the fd.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io(std::io::Error::last_os_error()));
    }
    Ok(base.cast())
}

/// Checks that `path` may be created as a rate-control page: its directory
/// exists, and it is absent, empty or already a rate-control page (so a
/// mistyped path never replaces someone's data). The error says why.
pub fn check_replaceable(path: &Path) -> Result<(), String> {
    if path
        .parent()
        .is_some_and(|p| !p.as_os_str().is_empty() && !p.is_dir())
    {
        return Err(format!(
            "the directory of {} does not exist",
            path.display()
        ));
    }
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        Ok(b) if b.is_empty() || b.starts_with(MAGIC) => Ok(()),
        Ok(_) => Err(format!(
            "{} exists and is not a rate-control file; remove it or name a new file",
            path.display()
        )),
    }
}

fn opt(v: u64) -> Option<u64> {
    (v > 0).then_some(v)
}

impl RateControl {
    /// The load's side: creates `path` (replacing it), holding `initial`.
    pub fn create(path: &Path, initial: Limits) -> Result<Self, RateControlError> {
        let s = Self {
            base: map(path, true)?,
        };
        s.field(off::VERSION).store(VERSION, Ordering::Relaxed);
        s.field(off::PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        s.field(off::RATE_BYTES_PER_S)
            .store(initial.rate_bytes_per_s.unwrap_or(0), Ordering::Relaxed);
        s.field(off::RATE_IOPS)
            .store(initial.rate_iops.unwrap_or(0), Ordering::Relaxed);
        s.field(off::GENERATION).store(0, Ordering::Relaxed);
        s.field(off::APPLIED).store(0, Ordering::Relaxed);
        // The magic last, so a writer that sees it sees a valid page.
        s.field(off::MAGIC)
            .store(u64::from_le_bytes(*MAGIC), Ordering::Release);
        Ok(s)
    }

    /// The controller's side: maps an existing page. Ok(None) while the
    /// load has not written the magic yet.
    pub fn open(path: &Path) -> Result<Option<Self>, RateControlError> {
        let s = Self {
            base: map(path, false)?,
        };
        if s.field(off::MAGIC).load(Ordering::Acquire) != u64::from_le_bytes(*MAGIC) {
            return Ok(None);
        }
        if s.field(off::VERSION).load(Ordering::Relaxed) != VERSION {
            return Err(RateControlError::NotAPage(path.display().to_string()));
        }
        Ok(Some(s))
    }

    fn field(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset & 7 == 0 && offset + 8 <= LEN);
        // SAFETY: offset is 8-aligned inside the page-aligned LEN-byte
        // mapping, which lives as long as &self; all access is atomic.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// The current generation (cheap: one relaxed load).
    pub fn generation(&self) -> u64 {
        self.field(off::GENERATION).load(Ordering::Acquire)
    }

    /// A consistent reading: (generation, limits), or None while a writer
    /// is in the middle of an update.
    pub fn read(&self) -> Option<(u64, Limits)> {
        let g0 = self.generation();
        if g0 & 1 == 1 {
            return None;
        }
        let b = self.field(off::RATE_BYTES_PER_S).load(Ordering::Acquire);
        let c = self.field(off::RATE_IOPS).load(Ordering::Acquire);
        (self.generation() == g0).then_some((
            g0,
            Limits {
                rate_bytes_per_s: opt(b),
                rate_iops: opt(c),
            },
        ))
    }

    /// Writes new limits (one writer at a time).
    pub fn set(&self, limits: Limits) {
        let g = self.field(off::GENERATION);
        let start = g.load(Ordering::Relaxed) | 1;
        g.store(start, Ordering::Release);
        self.field(off::RATE_BYTES_PER_S)
            .store(limits.rate_bytes_per_s.unwrap_or(0), Ordering::Release);
        self.field(off::RATE_IOPS)
            .store(limits.rate_iops.unwrap_or(0), Ordering::Release);
        g.store(start + 1, Ordering::Release);
    }

    /// The load records the generation it applied.
    pub fn mark_applied(&self, generation: u64) {
        self.field(off::APPLIED)
            .store(generation, Ordering::Release);
    }

    /// The generation the load last applied.
    pub fn applied(&self) -> u64 {
        self.field(off::APPLIED).load(Ordering::Acquire)
    }
}

impl Drop for RateControl {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base.cast(), LEN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_prints_its_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let Err(e) = RateControl::open(&dir.path().join("none")) else {
            panic!("opened a missing file");
        };
        let line = crate::error::chain_line(&e);
        assert_eq!(line.matches("No such file").count(), 1, "{line}");
    }

    #[test]
    fn both_sides_see_one_page() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rate");
        let load = RateControl::create(
            &p,
            Limits {
                rate_bytes_per_s: None,
                rate_iops: Some(1000),
            },
        )
        .unwrap();
        let ctl = RateControl::open(&p).unwrap().unwrap();
        assert_eq!(load.read().unwrap().0, 0);
        ctl.set(Limits {
            rate_bytes_per_s: Some(1 << 20),
            rate_iops: Some(500),
        });
        let (g, l) = load.read().unwrap();
        assert_eq!(g, 2);
        assert_eq!(l.rate_bytes_per_s, Some(1 << 20));
        assert_eq!(l.rate_iops, Some(500));
        load.mark_applied(g);
        assert_eq!(ctl.applied(), 2);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[0..8], MAGIC);
        assert_eq!(
            u64::from_le_bytes(
                bytes[off::RATE_IOPS..off::RATE_IOPS + 8]
                    .try_into()
                    .unwrap()
            ),
            500
        );
    }

    #[test]
    fn a_file_that_is_not_a_page_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("other");
        std::fs::write(&p, b"hello").unwrap();
        assert!(matches!(
            RateControl::open(&p),
            Err(RateControlError::NotAPage(_))
        ));
        assert!(check_replaceable(&p).is_err());
        std::fs::write(&p, vec![0u8; LEN]).unwrap();
        assert!(RateControl::open(&p).unwrap().is_none());
        assert!(check_replaceable(&dir.path().join("new")).is_ok());
        assert!(check_replaceable(&dir.path().join("no/such")).is_err());
    }
}
