//! Files dmalab creates, created so nobody else can slip one in: the one way
//! to make a new file beside a path (an output, a trace, a live-stats or
//! rate-control page) and put it there.
//!
//! A predictable temporary name (`.out.json.tmp-PID`) opened with
//! `File::create` lets anyone who can write the directory (`/tmp`, a shared
//! results folder) plant a symlink there first, and make root write through
//! it into any file. So a new file is
//! - an unnamed `O_TMPFILE` in the destination's directory, linked in under
//!   a random name only once it is complete ([`StagedFile::commit`]); or,
//!   where the filesystem cannot do that, a random name opened with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW` (which fails on anything already there,
//!   a symlink included),
//! - mode 0600 while it is written, the final mode set on the descriptor
//!   before it appears at its path,
//! - renamed over the destination, which replaces a symlink found there
//!   instead of writing through it.
//!
//! Whether an existing symlink at a destination may be followed is
//! [`symlink_trusted`]: the kernel's own `protected_symlinks` rule.

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

/// The directory a path's last component lives in (`.` for a bare name).
pub fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// 16 hex digits from the kernel's random source: a temporary name nobody
/// can guess ahead.
fn random_suffix() -> io::Result<String> {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most the remaining bytes of `b`, which we own.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(format!("{:016x}", u64::from_le_bytes(b)))
}

/// This process's umask (from `/proc/self/status`; 022 when unknown), so
/// files created through a temporary get the mode a plain `create` would
/// have given them. Reading it with `umask(2)` would change it for a moment
/// under other threads.
pub fn umask() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

pub use crate::sys::euid;

/// Whether the symlink at `link` (already known to be one, `meta` its
/// `lstat`) may be followed on behalf of this process: the kernel's
/// `fs.protected_symlinks` rule, applied even where that sysctl is off. A
/// symlink in a sticky world-writable directory (`/tmp`) is followed only
/// when it belongs to us or to the directory's owner; anywhere else only
/// those who can write the directory could have made it.
pub fn symlink_trusted(link: &Path, meta: &fs::Metadata) -> bool {
    let Ok(d) = fs::metadata(dir_of(link)) else {
        return false;
    };
    let sticky_open = d.mode() & 0o1002 == 0o1002;
    !sticky_open || meta.uid() == euid() || meta.uid() == d.uid()
}

/// A new file being written beside its destination, not yet at its path.
/// Dropping it uncommitted removes every trace of it.
#[derive(Debug)]
pub struct StagedFile {
    /// Where it goes.
    target: PathBuf,
    /// Its temporary name while it has one (a named temporary from the
    /// start, or an `O_TMPFILE` between link and rename).
    named: Option<PathBuf>,
    /// An `O_TMPFILE`: no name until [`commit`](Self::commit).
    unnamed: bool,
    committed: bool,
}

/// Creates a new, empty file (mode 0600, owned by us) in the directory of
/// `target`, to be written through the `File` returned and then put at
/// `target` with [`StagedFile::commit`]. Whatever is at `target` now is
/// left alone until then.
pub fn create_beside(target: &Path) -> io::Result<(File, StagedFile)> {
    let dir = dir_of(target);
    let mut staged = StagedFile {
        target: target.to_path_buf(),
        named: None,
        unnamed: false,
        committed: false,
    };
    if Path::new("/proc/self/fd").is_dir() {
        let c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))?;
        // SAFETY: a NUL-terminated path; the descriptor returned (checked
        // below) is owned by the File from here on.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd >= 0 {
            staged.unnamed = true;
            // SAFETY: fd is a fresh descriptor nobody else owns.
            return Ok((unsafe { File::from_raw_fd(fd) }, staged));
        }
        // EOPNOTSUPP, EISDIR (old kernels), EINVAL: the named way below;
        // any other error it meets again and reports.
    }
    let (f, name) = create_new_in(dir, &hidden_prefix(target), 0o600)?;
    // In the ledger while it has a name: `dmalab cleanup` removes it after
    // a kill -9.
    crate::ledger::add_file(&name);
    // It exists already: note what it is, so the undo removes this file and
    // nothing put in its place.
    crate::ledger::file_created(&name);
    staged.named = Some(name);
    Ok((f, staged))
}

fn hidden_prefix(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    format!(".{name}.tmp-")
}

/// Creates a new file `DIR/PREFIX<random>` with `O_CREAT|O_EXCL|O_NOFOLLOW`
/// and `mode` (before the umask), retrying another name if one is taken.
pub fn create_new_in(dir: &Path, prefix: &str, mode: u32) -> io::Result<(File, PathBuf)> {
    for _ in 0..16 {
        let p = dir.join(format!("{prefix}{}", random_suffix()?));
        match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
        {
            Ok(f) => return Ok((f, p)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("could not find a free temporary name in {}", dir.display()),
    ))
}

impl StagedFile {
    /// Where the file is going.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The path to name in messages about the file being written: its
    /// temporary name, or the destination while it has none.
    pub fn shown(&self) -> &Path {
        self.named.as_deref().unwrap_or(&self.target)
    }

    /// Puts `file` (the one [`create_beside`] returned, complete) at the
    /// destination: sets `mode` (less the umask) on it, syncs it, gives it
    /// a name if it has none and renames it over the destination (replacing
    /// a symlink there, not following it), then syncs the directory.
    pub fn commit(&mut self, file: &File, mode: u32) -> io::Result<()> {
        file.set_permissions(fs::Permissions::from_mode(mode & !umask() & 0o7777))?;
        file.sync_all()?;
        if self.unnamed {
            self.link(file)?;
        }
        let Some(name) = self.named.clone() else {
            return Err(io::Error::other("the staged file has no name to rename"));
        };
        fs::rename(&name, &self.target)?;
        crate::ledger::forget_file(&name);
        self.named = None;
        self.committed = true;
        if let Ok(d) = File::open(dir_of(&self.target)) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Links an `O_TMPFILE` into its directory under a random name.
    fn link(&mut self, file: &File) -> io::Result<()> {
        let dir = dir_of(&self.target).to_path_buf();
        let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|_| io::Error::other("NUL in a descriptor path"))?;
        for _ in 0..16 {
            let name = dir.join(format!(
                "{}{}",
                hidden_prefix(&self.target),
                random_suffix()?
            ));
            let to = CString::new(name.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))?;
            crate::ledger::add_file(&name);
            // SAFETY: two NUL-terminated paths; linkat never writes through
            // an existing name (EEXIST), so a planted file is never touched.
            let r = unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    from.as_ptr(),
                    libc::AT_FDCWD,
                    to.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            };
            if r == 0 {
                crate::ledger::file_created(&name);
                self.named = Some(name);
                self.unnamed = false;
                return Ok(());
            }
            let e = io::Error::last_os_error();
            crate::ledger::forget_file(&name);
            if e.kind() != io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("could not find a free temporary name in {}", dir.display()),
        ))
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Some(n) = self.named.take() {
            let _ = fs::remove_file(&n);
            crate::ledger::forget_file(&n);
        }
    }
}

/// Writes `contents` to a new file put at `target` with `mode` (less the
/// umask): whole or not at all, never through a symlink someone planted.
pub fn replace(target: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    let (mut f, mut staged) = create_beside(target)?;
    f.write_all(contents)?;
    staged.commit(&f, mode)
}

/// Opens an existing file for appending, or creates it (`mode` less the
/// umask), refusing a symlink at `path` that [`symlink_trusted`] would not
/// follow, and anything that is not a regular file, without blocking on a
/// FIFO. For files that grow in place (a results file).
pub fn open_append(path: &Path, mode: u32) -> io::Result<File> {
    if let Ok(m) = fs::symlink_metadata(path) {
        if m.file_type().is_symlink() && !symlink_trusted(path, &m) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is a symlink owned by another user (uid {}) in a directory anyone can write; remove it or name another file",
                    path.display(),
                    m.uid()
                ),
            ));
        }
    }
    let f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(mode)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_staged_file_appears_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        let (mut f, mut s) = create_beside(&p).unwrap();
        f.write_all(b"data").unwrap();
        assert!(!p.exists());
        s.commit(&f, 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"data");
        assert_eq!(names(dir.path()), ["out.json"]);
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o644 & !umask());
        // Dropped uncommitted: nothing left.
        let (_f, s) = create_beside(&dir.path().join("other")).unwrap();
        drop(s);
        assert_eq!(names(dir.path()), ["out.json"]);
    }

    #[test]
    fn the_named_way_uses_unpredictable_exclusive_names() {
        let dir = tempfile::tempdir().unwrap();
        let (_a, pa) = create_new_in(dir.path(), ".x.tmp-", 0o600).unwrap();
        let (_b, pb) = create_new_in(dir.path(), ".x.tmp-", 0o600).unwrap();
        assert_ne!(pa, pb);
        assert_eq!(
            fs::metadata(&pa).unwrap().permissions().mode() & 0o777,
            0o600 & !umask()
        );
    }

    #[test]
    fn commit_replaces_a_symlink_instead_of_writing_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let p = dir.path().join("out");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        replace(&p, b"result", 0o644).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_file());
        assert_eq!(fs::read(&p).unwrap(), b"result");
    }

    #[test]
    fn appending_refuses_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        // No reader: a blocking open would wait for ever; O_NONBLOCK gives
        // ENXIO at once.
        assert!(open_append(&fifo, 0o644).is_err());
        let f = dir.path().join("r.jsonl");
        open_append(&f, 0o644).unwrap().write_all(b"a\n").unwrap();
        open_append(&f, 0o644).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"a\nb\n");
    }
}
