//! The rate-control page: `dmalab load --rate-control FILE` creates it and
//! reads it; a controller (`dmalab throttle`, or anything that maps the file)
//! writes new rate limits into it while the load runs. One definition for
//! both sides, beside the live-stats page (which flows the other way).
//!
//! A separate file rather than a FIFO or socket: a writer that dies leaves
//! the last limits in force instead of a broken pipe, and anything that can
//! map or write a file can steer a load.
//!
//! dmalab itself reads and writes the page with `pread`/`pwrite`, never
//! through a mapping: a mapped page that someone truncates kills the
//! process that touches it with SIGBUS, and no handler can make that safe.
//! A short read is an error ([`RateControlError::Truncated`]) the load
//! survives, keeping its last limits. The load polls the page at most once
//! a millisecond (`dmalab_load::limiter`), so the system calls cost nothing
//! next to the commands they pace.
//!
//! The page steers how hard a load (perhaps root's) hits a device, so one
//! is used only when it is a regular file (never a FIFO, device, directory
//! or symlink, opened with `O_NOFOLLOW|O_NONBLOCK` so none of them can block
//! or redirect the open) of the expected size, owned by the caller or root
//! and writable by nobody else ([`check_page`]). The load creates its page
//! with [`crate::safefile`], so it appears at its path complete.
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
//! again (a sequence lock); the load reads the header twice and applies the
//! limits only when both readings agree and the generation is even.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
    /// End of the fields.
    pub const END: usize = 56;
}

/// Rate limits as the page holds them (None: no limit of that kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Limits {
    /// Byte rate limit, bytes per second.
    pub rate_bytes_per_s: Option<u64>,
    /// Command rate limit, commands per second.
    pub rate_iops: Option<u64>,
}

/// An open rate-control page (either side).
#[derive(Debug)]
pub struct RateControl {
    file: File,
    path: PathBuf,
}

/// Errors opening or using a rate-control page.
#[derive(Debug, thiserror::Error)]
pub enum RateControlError {
    /// The file could not be created, opened, read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// What failed (printed in the message, so not a `source()`).
        cause: io::Error,
    },
    /// The file is not a rate-control page of this version.
    #[error("{0} is not a dmalab rate-control file (magic DMALRATE, version {VERSION}); pass the file `dmalab load --rate-control` created")]
    NotAPage(String),
    /// The file is not one dmalab may take limits from ([`check_page`]).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The page became shorter than its fields while in use.
    #[error("{path} was truncated to {len} bytes while in use (a rate-control page is {LEN})")]
    Truncated {
        /// The file.
        path: String,
        /// Its length now.
        len: u64,
    },
}

/// Why a path may not be used as a rate-control page.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Not a regular file (`what` it is instead).
    #[error("{path} is {what}; a rate-control page is a regular file: name a new path and dmalab load creates it")]
    NotAFile {
        /// The path.
        path: String,
        /// What it is.
        what: &'static str,
    },
    /// A symlink found when opening it (which could point anywhere).
    #[error("{0} is a symlink (which could point anywhere); name the file itself")]
    Symlink(String),
    /// Owned by someone other than the caller or root.
    #[error("{path} belongs to uid {uid}, not to you (uid {me}) or root: another user could change the limits through it; remove it or name a new path")]
    Owner {
        /// The path.
        path: String,
        /// Its owner.
        uid: u32,
        /// The caller's effective uid.
        me: u32,
    },
    /// Writable by group or others.
    #[error("{path} is writable by other users (mode {mode:o}): they could change the limits through it; chmod go-w it or name a new path")]
    Writable {
        /// The path.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Not the size of a page.
    #[error("{path} is {len} bytes, not a rate-control page ({LEN} bytes); remove it or name a new path")]
    Size {
        /// The path.
        path: String,
        /// Its length.
        len: u64,
    },
    /// Its directory does not exist.
    #[error("the directory of {0} does not exist")]
    NoDirectory(String),
    /// It could not be examined or opened.
    #[error("cannot {what} {path}: {cause}")]
    Io {
        /// `use` or `open`.
        what: &'static str,
        /// The path.
        path: String,
        /// Why (printed in the message, so not a `source()`).
        cause: io::Error,
    },
    /// It was replaced between two looks.
    #[error("{0} changed while it was checked; try again")]
    Changed(String),
    /// It holds something other than a rate-control page.
    #[error("{0} exists and is not a rate-control file; remove it or name a new file")]
    Foreign(String),
}

/// Why the file behind `meta` (an `lstat` or `fstat`) may not be used as
/// a rate-control page, if it may not: it must be a regular file (not a
/// symlink, FIFO, device or directory), owned by the caller or root, not
/// writable by group or others (anyone who can write it steers the load),
/// and `LEN` bytes long, or empty when `empty_ok`.
pub fn check_page(path: &Path, meta: &Metadata, empty_ok: bool) -> Result<(), Refusal> {
    let shown = path.display().to_string();
    let t = meta.file_type();
    if !t.is_file() {
        let what = if t.is_symlink() {
            "a symlink (which could point anywhere; name the file itself)"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() {
            "a character device"
        } else if t.is_block_device() {
            "a block device"
        } else if t.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(Refusal::NotAFile { path: shown, what });
    }
    let me = crate::safefile::euid();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(Refusal::Owner {
            path: shown,
            uid: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Refusal::Writable {
            path: shown,
            mode: meta.mode() & 0o7777,
        });
    }
    if meta.len() != LEN as u64 && !(empty_ok && meta.len() == 0) {
        return Err(Refusal::Size {
            path: shown,
            len: meta.len(),
        });
    }
    Ok(())
}

/// Opens `path` without following a symlink at it and without blocking
/// (a FIFO), for reading and maybe writing.
fn open_nofollow(path: &Path, write: bool) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Checks that `path` may be created as a rate-control page: its directory
/// exists, and it is absent, or an empty file or a rate-control page that
/// passes [`check_page`] (so a mistyped path never replaces someone's data,
/// and nothing is read from a FIFO or device). The error says why.
pub fn check_replaceable(path: &Path) -> Result<(), Refusal> {
    let shown = || path.display().to_string();
    let io = |what| {
        move |cause| Refusal::Io {
            what,
            path: path.display().to_string(),
            cause,
        }
    };
    if !crate::safefile::dir_of(path).is_dir() {
        return Err(Refusal::NoDirectory(shown()));
    }
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("use")(e)),
        Ok(m) => m,
    };
    check_page(path, &meta, true)?;
    let f = open_nofollow(path, false).map_err(io("open"))?;
    let now = f.metadata().map_err(io("use"))?;
    if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
        return Err(Refusal::Changed(shown()));
    }
    check_page(path, &now, true)?;
    if now.len() == 0 {
        return Ok(());
    }
    let mut magic = [0u8; 8];
    match f.read_exact_at(&mut magic, 0) {
        Ok(()) if &magic == MAGIC => Ok(()),
        _ => Err(Refusal::Foreign(shown())),
    }
}

fn opt(v: u64) -> Option<u64> {
    (v > 0).then_some(v)
}

fn u64_at(b: &[u8], offset: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[offset..offset + 8]);
    u64::from_le_bytes(w)
}

impl RateControl {
    fn io(&self, cause: io::Error) -> RateControlError {
        RateControlError::Io {
            path: self.path.display().to_string(),
            cause,
        }
    }

    /// The load's side: creates `path` (replacing it: a new file, mode
    /// 0644 less the umask, put there complete by [`crate::safefile`]),
    /// holding `initial`.
    pub fn create(path: &Path, initial: Limits) -> Result<Self, RateControlError> {
        let io = |cause| RateControlError::Io {
            path: path.display().to_string(),
            cause,
        };
        let (file, mut staged) = crate::safefile::create_beside(path).map_err(io)?;
        let mut page = vec![0u8; LEN];
        let mut put =
            |offset: usize, v: u64| page[offset..offset + 8].copy_from_slice(&v.to_le_bytes());
        put(off::MAGIC, u64::from_le_bytes(*MAGIC));
        put(off::VERSION, VERSION);
        put(off::PID, u64::from(std::process::id()));
        put(off::RATE_BYTES_PER_S, initial.rate_bytes_per_s.unwrap_or(0));
        put(off::RATE_IOPS, initial.rate_iops.unwrap_or(0));
        file.write_all_at(&page, 0).map_err(io)?;
        staged.commit(&file, 0o644).map_err(io)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The controller's side: opens an existing page ([`check_page`]
    /// decides whether it may be used). Ok(None) while the load has not
    /// written the magic yet.
    pub fn open(path: &Path) -> Result<Option<Self>, RateControlError> {
        let file = open_nofollow(path, true).map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                RateControlError::Refused(Refusal::Symlink(path.display().to_string()))
            } else {
                RateControlError::Io {
                    path: path.display().to_string(),
                    cause: e,
                }
            }
        })?;
        let s = Self {
            file,
            path: path.to_path_buf(),
        };
        let meta = s.file.metadata().map_err(|e| s.io(e))?;
        if meta.file_type().is_file() && meta.len() < LEN as u64 {
            return Err(RateControlError::NotAPage(path.display().to_string()));
        }
        check_page(path, &meta, false)?;
        let h = s.header()?;
        if &h[off::MAGIC..off::MAGIC + 8] != MAGIC {
            return Ok(None);
        }
        if u64_at(&h, off::VERSION) != VERSION {
            return Err(RateControlError::NotAPage(path.display().to_string()));
        }
        Ok(Some(s))
    }

    /// The page's fields, read with one `pread` (a short read: truncated).
    fn header(&self) -> Result<[u8; off::END], RateControlError> {
        let mut h = [0u8; off::END];
        match self.file.read_exact_at(&mut h, 0) {
            Ok(()) => Ok(h),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(RateControlError::Truncated {
                    path: self.path.display().to_string(),
                    len: self.file.metadata().map_or(0, |m| m.len()),
                })
            }
            Err(e) => Err(self.io(e)),
        }
    }

    fn put(&self, offset: usize, v: u64) -> Result<(), RateControlError> {
        self.file
            .write_all_at(&v.to_le_bytes(), offset as u64)
            .map_err(|e| self.io(e))
    }

    /// The current generation.
    pub fn generation(&self) -> Result<u64, RateControlError> {
        Ok(u64_at(&self.header()?, off::GENERATION))
    }

    /// A consistent reading: (generation, limits), or None while a writer
    /// is in the middle of an update.
    pub fn read(&self) -> Result<Option<(u64, Limits)>, RateControlError> {
        let a = self.header()?;
        let b = self.header()?;
        let g = u64_at(&a, off::GENERATION);
        let fields = off::GENERATION..off::APPLIED;
        if g & 1 == 1 || a[fields.clone()] != b[fields] {
            return Ok(None);
        }
        Ok(Some((
            g,
            Limits {
                rate_bytes_per_s: opt(u64_at(&a, off::RATE_BYTES_PER_S)),
                rate_iops: opt(u64_at(&a, off::RATE_IOPS)),
            },
        )))
    }

    /// Writes new limits (one writer at a time).
    pub fn set(&self, limits: Limits) -> Result<(), RateControlError> {
        let start = u64_at(&self.header()?, off::GENERATION) | 1;
        self.put(off::GENERATION, start)?;
        self.put(off::RATE_BYTES_PER_S, limits.rate_bytes_per_s.unwrap_or(0))?;
        self.put(off::RATE_IOPS, limits.rate_iops.unwrap_or(0))?;
        self.put(off::GENERATION, start + 1)
    }

    /// The load records the generation it applied.
    pub fn mark_applied(&self, generation: u64) -> Result<(), RateControlError> {
        self.put(off::APPLIED, generation)
    }

    /// The generation the load last applied.
    pub fn applied(&self) -> Result<u64, RateControlError> {
        Ok(u64_at(&self.header()?, off::APPLIED))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
        assert_eq!(load.read().unwrap().unwrap().0, 0);
        ctl.set(Limits {
            rate_bytes_per_s: Some(1 << 20),
            rate_iops: Some(500),
        })
        .unwrap();
        let (g, l) = load.read().unwrap().unwrap();
        assert_eq!(g, 2);
        assert_eq!(l.rate_bytes_per_s, Some(1 << 20));
        assert_eq!(l.rate_iops, Some(500));
        load.mark_applied(g).unwrap();
        assert_eq!(ctl.applied().unwrap(), 2);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), LEN);
        assert_eq!(&bytes[0..8], MAGIC);
        assert_eq!(u64_at(&bytes, off::RATE_IOPS), 500);
    }

    #[test]
    fn a_file_that_is_not_a_page_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("other");
        std::fs::write(&p, b"hello").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            RateControl::open(&p),
            Err(RateControlError::NotAPage(_))
        ));
        assert!(check_replaceable(&p).is_err());
        std::fs::write(&p, vec![0u8; LEN]).unwrap();
        assert!(RateControl::open(&p).unwrap().is_none());
        // LEN bytes without the magic are someone's data.
        assert!(check_replaceable(&p).is_err());
        std::fs::write(&p, b"").unwrap();
        assert!(check_replaceable(&p).is_ok());
        assert!(check_replaceable(&dir.path().join("new")).is_ok());
        assert!(check_replaceable(&dir.path().join("no/such")).is_err());
    }

    #[test]
    fn a_page_others_can_write_or_that_is_no_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rate");
        drop(RateControl::create(&p, Limits::default()).unwrap());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check_replaceable(&p).unwrap_err();
        assert!(matches!(e, Refusal::Writable { mode: 0o666, .. }), "{e}");
        assert!(e.to_string().contains("writable by other users"), "{e}");
        assert!(matches!(
            RateControl::open(&p),
            Err(RateControlError::Refused(_))
        ));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(check_replaceable(&link)
            .unwrap_err()
            .to_string()
            .contains("a symlink"));
        assert!(matches!(
            RateControl::open(&link),
            Err(RateControlError::Refused(_))
        ));
        for dev in ["/dev/zero", "/dev/null"] {
            let e = check_replaceable(Path::new(dev)).unwrap_err().to_string();
            assert!(e.contains("a character device"), "{e}");
            assert!(RateControl::open(Path::new(dev)).is_err());
        }
        assert!(check_replaceable(dir.path())
            .unwrap_err()
            .to_string()
            .contains("a directory"));
    }

    #[test]
    fn a_truncated_page_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rate");
        let load = RateControl::create(&p, Limits::default()).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(0)
            .unwrap();
        assert!(matches!(
            load.read(),
            Err(RateControlError::Truncated { len: 0, .. })
        ));
        assert!(matches!(
            load.generation(),
            Err(RateControlError::Truncated { .. })
        ));
    }
}
