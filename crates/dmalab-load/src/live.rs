//! Live counters: the run's totals, updated atomically as command batches
//! complete, in a 4096-byte page that `--live-stats FILE` maps from a file so
//! another process (the experiment runner) can take exact snapshots.
//!
//! Layout: `dmalab_core::livestats` (shared with the reader in `dmalab run`).
//!
//! Without `--live-stats` the same page is anonymous memory: the per-second
//! reporter reads the totals from it either way.

use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use dmalab_core::livestats::off;
pub use dmalab_core::livestats::{state, MAGIC, VERSION};
use dmalab_core::sys::clock::monotonic_ns;

/// Size of the page.
pub const LIVE_BYTES: usize = dmalab_core::livestats::LEN;

/// The mapped page.
#[derive(Debug)]
pub struct LiveStats {
    base: *mut u8,
}

// SAFETY: the page is only accessed through atomics (and the magic once,
// before sharing); the mapping lives until drop.
unsafe impl Send for LiveStats {}
// SAFETY: as above.
unsafe impl Sync for LiveStats {}

impl LiveStats {
    /// Creates `path` (replacing it: a new file put there once it holds a
    /// valid page, never written through a symlink someone planted:
    /// [`dmalab_core::safefile`]), sizes it to 4096 bytes and maps it
    /// shared; or, with no path, maps an anonymous page.
    pub fn create(path: Option<&Path>) -> std::io::Result<Self> {
        let (fd, flags, file) = match path {
            Some(p) => {
                let (f, staged) = dmalab_core::safefile::create_beside(p)?;
                f.set_len(LIVE_BYTES as u64)?;
                (f.as_raw_fd(), libc::MAP_SHARED, Some((f, staged)))
            }
            None => (-1, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, None),
        };
        // SAFETY: a fresh mapping of 4096 bytes of a file we sized (or
        // anonymous memory); checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LIVE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let s = Self { base: base.cast() };
        s.field(off::VERSION).store(VERSION, Ordering::Relaxed);
        // SAFETY: pid is a plain value.
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
        debug_assert!(offset & 7 == 0 && offset + 8 <= LIVE_BYTES);
        // SAFETY: offset is 8-aligned inside the page-aligned 4096-byte
        // mapping, which lives as long as &self; all access is atomic.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Marks the load as started now.
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

impl Drop for LiveStats {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base.cast(), LIVE_BYTES) };
    }
}

/// A snapshot parsed from a live-stats file's bytes (for readers and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Writer's pid.
    pub pid: u64,
    /// State.
    pub state: u64,
    /// Data bytes completed.
    pub bytes: u64,
    /// Commands completed.
    pub commands: u64,
    /// Blocks completed.
    pub blocks: u64,
    /// CLOCK_MONOTONIC ns of the last update.
    pub updated_ns: u64,
    /// CLOCK_MONOTONIC ns when the load started.
    pub started_ns: u64,
}

/// Parses a live-stats page; None when the magic or version is wrong.
pub fn parse(bytes: &[u8]) -> Option<Snapshot> {
    let u = |o: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
    };
    if bytes.get(0..8)? != MAGIC || u(8)? != VERSION {
        return None;
    }
    Some(Snapshot {
        pid: u(16)?,
        state: u(24)?,
        bytes: u(32)?,
        commands: u(40)?,
        blocks: u(48)?,
        updated_ns: u(56)?,
        started_ns: u(64)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        let s = LiveStats::create(Some(&p)).unwrap();
        s.set_running(123);
        s.add(8192, 2, 2, 500);
        s.add(4096, 1, 1, 1_000);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), 4096);
        let snap = parse(&bytes).unwrap();
        assert_eq!(snap.pid, u64::from(std::process::id()));
        assert_eq!((snap.bytes, snap.commands, snap.blocks), (12288, 3, 3));
        assert_eq!((snap.state, snap.started_ns), (state::RUNNING, 123));
        // The last batch's own time since the start: no clock read of the
        // page's own.
        assert_eq!(snap.updated_ns, 123 + 1_000);
        s.set_finished();
        assert_eq!(
            parse(&std::fs::read(&p).unwrap()).unwrap().state,
            state::FINISHED
        );
        assert!(parse(&[0u8; 4096]).is_none());
    }
}
