//! Where ledgers live, and which ledger files may be trusted.
//!
//! Root keeps them in `/run/dmalab`; another user in
//! `$XDG_RUNTIME_DIR/dmalab`, or, without that variable (sudo -u, su, cron),
//! in `/tmp/dmalab-UID`, made with mode 0700. A directory or file another
//! user could have written (owned by someone else, writable by group or
//! others, a symlink) is refused, never acted on: a ledger names paths to
//! remove and values to write back.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a ledger directory or file is not used.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// It could not be created or read.
    #[error("{path}: {cause}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// What failed.
        cause: io::Error,
    },
    /// Another user could have written it.
    #[error("{path}: refused: {why}")]
    Untrusted {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// It could not be read, so it was not acted on.
    #[error("{0}; not acted on")]
    NotActedOn(Box<LedgerError>),
    /// It holds no ledger of any format dmalab wrote.
    #[error("{}: not a dmalab ledger; left alone (check what it names and remove it by hand)", .0.display())]
    NotALedger(PathBuf),
}

fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks that `m` (of `path`, from `lstat` or `fstat`) is `kind`, owned by
/// this user (or root) and writable by nobody else.
fn trusted(path: &Path, m: &fs::Metadata, dir: bool) -> Result<(), LedgerError> {
    let untrusted = |why: String| LedgerError::Untrusted {
        path: path.to_path_buf(),
        why,
    };
    let t = m.file_type();
    if t.is_symlink() {
        return Err(untrusted("a symlink (never followed)".into()));
    }
    if dir && !t.is_dir() {
        return Err(untrusted("not a directory".into()));
    }
    if !dir && !t.is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    let me = euid();
    if m.uid() != me && m.uid() != 0 {
        return Err(untrusted(format!(
            "owned by uid {}, not by uid {me} or root",
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(untrusted(format!(
            "mode {:o}: writable by other users",
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Checks the directory `dir` may hold this user's ledgers.
pub fn check_dir(dir: &Path) -> Result<(), LedgerError> {
    let m = fs::symlink_metadata(dir).map_err(|cause| LedgerError::Io {
        path: dir.to_path_buf(),
        cause,
    })?;
    trusted(dir, &m, true)
}

/// Reads a ledger file without following a symlink, refusing one another
/// user could have written.
pub fn read_trusted(path: &Path) -> Result<String, LedgerError> {
    let io_err = |cause| LedgerError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                LedgerError::Untrusted {
                    path: path.to_path_buf(),
                    why: "a symlink (never followed)".into(),
                }
            } else {
                io_err(e)
            }
        })?;
    let m = f.metadata().map_err(io_err)?;
    trusted(path, &m, false)?;
    if m.len() > 16 << 20 {
        return Err(LedgerError::Untrusted {
            path: path.to_path_buf(),
            why: format!("{} bytes: larger than any ledger", m.len()),
        });
    }
    io::read_to_string(f).map_err(io_err)
}

/// Makes `dir` (mode 0700) unless it exists, then checks it: a directory
/// owned by this user, mode 0700 when `exact` (a directory in a shared
/// place such as /tmp), never a symlink.
fn private_dir(dir: &Path, exact: bool) -> Result<(), LedgerError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(cause) => {
            return Err(LedgerError::Io {
                path: dir.to_path_buf(),
                cause,
            })
        }
    }
    let m = fs::symlink_metadata(dir).map_err(|cause| LedgerError::Io {
        path: dir.to_path_buf(),
        cause,
    })?;
    trusted(dir, &m, true)?;
    if m.uid() != euid() {
        return Err(LedgerError::Untrusted {
            path: dir.to_path_buf(),
            why: format!("owned by uid {}, not by uid {}", m.uid(), euid()),
        });
    }
    if exact && m.mode() & 0o777 != 0o700 {
        return Err(LedgerError::Untrusted {
            path: dir.to_path_buf(),
            why: format!("mode {:o}, not 700", m.mode() & 0o7777),
        });
    }
    Ok(())
}

/// This user's ledger directory (see the module doc), made if missing.
pub fn user_dir() -> Result<PathBuf, LedgerError> {
    let uid = euid();
    if uid == 0 {
        let sys = Path::new(super::STATE_DIR);
        fs::create_dir_all(sys).map_err(|cause| LedgerError::Io {
            path: sys.to_path_buf(),
            cause,
        })?;
        check_dir(sys)?;
        return Ok(sys.to_path_buf());
    }
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if xdg.is_absolute() && xdg.is_dir() {
            let d = xdg.join("dmalab");
            private_dir(&d, false)?;
            return Ok(d);
        }
    }
    let d = PathBuf::from(format!("/tmp/dmalab-{uid}"));
    private_dir(&d, true)?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_dir_is_made_0700_and_a_symlink_or_open_one_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("dmalab-0");
        private_dir(&p, true).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o700);
        // Again: it exists and is fine.
        private_dir(&p, true).unwrap();
        fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(matches!(
            private_dir(&p, true),
            Err(LedgerError::Untrusted { .. })
        ));
        let l = d.path().join("planted");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        let e = private_dir(&l, true).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }

    #[test]
    fn a_ledger_writable_by_others_or_a_symlink_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("proc-1.json");
        fs::write(&f, "{}").unwrap();
        fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert_eq!(read_trusted(&f).unwrap(), "{}");
        fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        let e = read_trusted(&f).unwrap_err();
        assert!(e.to_string().contains("writable by other users"), "{e}");
        let l = d.path().join("proc-2.json");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        let e = read_trusted(&l).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }
}
