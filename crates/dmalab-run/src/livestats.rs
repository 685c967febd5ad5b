//! Reader of the load generator's live-stats file (`dmalab load
//! --live-stats FILE`): 4096 bytes, little-endian, mmapped by the writer and
//! updated with atomic 8-byte stores.
//!
//! | offset | field                                             |
//! |-------:|---------------------------------------------------|
//! | 0      | magic `b"DMALSTAT"`                               |
//! | 8      | u64 version = 1                                   |
//! | 16     | u64 pid of the writer                             |
//! | 24     | u64 state: 0 starting, 1 running, 2 finished      |
//! | 32     | u64 data bytes completed                          |
//! | 40     | u64 commands completed                            |
//! | 48     | u64 blocks completed                              |
//! | 56     | u64 CLOCK_MONOTONIC ns of the last update         |
//! | 64     | u64 CLOCK_MONOTONIC ns when the load started      |
//!
//! The reader maps the file too and loads each field atomically. Fields are
//! separate stores, so a snapshot re-reads until the update stamp is the
//! same before and after the counters (a cheap sequence check).

use dmalab_core::sys::clock::monotonic_ns;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use dmalab_core::livestats::{off, MAGIC, VERSION};

/// Size of the file.
pub const FILE_LEN: usize = dmalab_core::livestats::LEN;

/// The writer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Setting up (buffer, rings); no load yet.
    Starting,
    /// Load is running.
    Running,
    /// Load stopped.
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

/// A mapped live-stats file.
pub struct LiveStats {
    ptr: *const u8,
}

// SAFETY: the mapping is read-only shared memory accessed only through
// atomic loads; it stays valid until Drop.
unsafe impl Send for LiveStats {}
// SAFETY: as above; concurrent atomic loads are fine.
unsafe impl Sync for LiveStats {}

impl LiveStats {
    /// Maps `path`; None while it does not exist yet, is too short or has
    /// no magic yet (the writer creates it at start-up).
    pub fn open(path: &Path) -> std::io::Result<Option<Self>> {
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if f.metadata()?.len() < FILE_LEN as u64 {
            return Ok(None);
        }
        use std::os::fd::AsRawFd;
        // SAFETY: mapping FILE_LEN bytes of a file at least that long,
        // read-only and shared; the fd may be closed after mmap returns.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_LEN,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let me = Self {
            ptr: p as *const u8,
        };
        let mut magic = [0u8; 8];
        for (i, b) in magic.iter_mut().enumerate() {
            *b = me.u64_at(0).to_le_bytes()[i];
        }
        if &magic != MAGIC {
            return Ok(None);
        }
        let v = me.u64_at(off::VERSION);
        if v != VERSION {
            return Err(std::io::Error::other(format!(
                "live-stats file {} has layout version {v}; this dmalab reads version {VERSION}",
                path.display()
            )));
        }
        Ok(Some(me))
    }

    fn u64_at(&self, offset: usize) -> u64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= FILE_LEN);
        // SAFETY: offset is 8-aligned and inside the mapping (page-aligned
        // base), so this is a valid, aligned AtomicU64 for the mapping's life.
        let a = unsafe { &*(self.ptr.add(offset) as *const AtomicU64) };
        u64::from_le(a.load(Ordering::Acquire))
    }

    /// A consistent snapshot (retries while the writer is mid-update).
    pub fn snapshot(&self) -> Snapshot {
        let mut s;
        let mut tries = 0;
        loop {
            let before = self.u64_at(off::UPDATED_NS);
            s = Snapshot {
                pid: self.u64_at(off::PID),
                state: match self.u64_at(off::STATE) {
                    dmalab_core::livestats::state::STARTING => State::Starting,
                    dmalab_core::livestats::state::RUNNING => State::Running,
                    _ => State::Finished,
                },
                data_bytes: self.u64_at(off::BYTES),
                commands: self.u64_at(off::COMMANDS),
                blocks: self.u64_at(off::BLOCKS),
                updated_ns: self.u64_at(off::UPDATED_NS),
                started_ns: self.u64_at(off::STARTED_NS),
                taken_ns: monotonic_ns(),
            };
            tries += 1;
            if s.updated_ns == before || tries > 100 {
                return s;
            }
        }
    }
}

impl Drop for LiveStats {
    fn drop(&mut self) {
        // SAFETY: ptr came from mmap of FILE_LEN bytes and is unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, FILE_LEN) };
    }
}

/// Writes a live-stats file by the layout (for tests and for exec
/// aggressors written in Rust).
pub fn write_file(path: &Path, fields: &[(usize, u64)]) -> std::io::Result<()> {
    let mut buf = vec![0u8; FILE_LEN];
    buf[..8].copy_from_slice(MAGIC);
    buf[8..16].copy_from_slice(&VERSION.to_le_bytes());
    for &(o, v) in fields {
        buf[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    #[test]
    fn reads_the_layout_and_sees_updates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        assert!(LiveStats::open(&p).unwrap().is_none());
        write_file(
            &p,
            &[
                (off::PID, 4242),
                (off::STATE, 1),
                (off::BYTES, 1 << 30),
                (off::COMMANDS, 262_144),
                (off::BLOCKS, 262_144),
                (off::UPDATED_NS, 5_000),
                (off::STARTED_NS, 1_000),
            ],
        )
        .unwrap();
        let ls = LiveStats::open(&p).unwrap().unwrap();
        let s = ls.snapshot();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.state, State::Running);
        assert_eq!(s.data_bytes, 1 << 30);
        assert_eq!(s.commands, 262_144);
        assert_eq!(s.blocks, 262_144);
        assert_eq!(s.updated_ns, 5_000);
        assert_eq!(s.started_ns, 1_000);
        // The writer updates in place; the mapping sees it.
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.seek(SeekFrom::Start(off::BYTES as u64)).unwrap();
        f.write_all(&(3u64 << 30).to_le_bytes()).unwrap();
        f.seek(SeekFrom::Start(off::STATE as u64)).unwrap();
        f.write_all(&2u64.to_le_bytes()).unwrap();
        f.sync_all().unwrap();
        let s = ls.snapshot();
        assert_eq!(s.data_bytes, 3 << 30);
        assert_eq!(s.state, State::Finished);
    }

    #[test]
    fn rejects_other_versions_and_waits_for_magic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("live");
        std::fs::write(&p, vec![0u8; FILE_LEN]).unwrap();
        assert!(LiveStats::open(&p).unwrap().is_none(), "no magic yet");
        write_file(&p, &[(off::VERSION, 2)]).unwrap();
        assert!(LiveStats::open(&p).is_err());
        std::fs::write(&p, b"DMALSTAT").unwrap();
        assert!(LiveStats::open(&p).unwrap().is_none(), "too short");
    }
}
