//! Growing a hugetlb pool for one run, in a way that composes.
//!
//! A run adds the pages it lacks to `nr_hugepages` and later takes exactly
//! those off again (rather than writing back the size it found), so two
//! runs that grow the same pool at once (a `load` aggressor beside a
//! `probe --pages 2m` victim) each give back only their own pages. The
//! read-modify-write is serialised between processes by an flock on
//! `/run/dmalab/hugetlb.lock`, and each growth is in the process ledger
//! ([`crate::ledger`]) before it is made, so `dmalab cleanup` gives the
//! pages back after a `kill -9`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Holds the pool lock while alive (None when it cannot be taken: then
/// the pool cannot be written either).
pub(crate) fn pool_lock() -> Option<crate::lock::FileLock> {
    let dir = Path::new(crate::ledger::STATE_DIR);
    fs::create_dir_all(dir).ok()?;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("hugetlb.lock"))
        .ok()?;
    // Blocking: the critical section is two small sysfs writes.
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return None;
    }
    crate::lock::FileLock::from_locked(f).into()
}

fn read_u64(p: &Path) -> io::Result<u64> {
    fs::read_to_string(p)?
        .trim()
        .parse()
        .map_err(io::Error::other)
}

/// Pages a run added to a pool; dropping it takes them off again.
#[derive(Debug)]
pub struct PoolGrowth {
    path: PathBuf,
    /// Pages actually added (the kernel may give fewer than asked).
    pub added: u64,
}

/// Adds up to `pages` pages to the pool whose `nr_hugepages` file is
/// `nr_path`; returns the growth (with what the kernel really added).
pub fn grow(nr_path: &Path, pages: u64) -> io::Result<PoolGrowth> {
    let _l = pool_lock();
    let nr = read_u64(nr_path)?;
    crate::ledger::add_pool(nr_path, pages)?;
    if let Err(e) = fs::write(nr_path, (nr + pages).to_string()) {
        crate::ledger::settle_pool(nr_path, pages, 0);
        return Err(e);
    }
    let added = read_u64(nr_path)
        .unwrap_or(nr + pages)
        .saturating_sub(nr)
        .min(pages);
    crate::ledger::settle_pool(nr_path, pages, added);
    Ok(PoolGrowth {
        path: nr_path.to_path_buf(),
        added,
    })
}

impl Drop for PoolGrowth {
    fn drop(&mut self) {
        if self.added == 0 {
            return;
        }
        match crate::ledger::shrink_pool(&self.path, self.added) {
            Ok(_) => crate::ledger::settle_pool(&self.path, self.added, 0),
            Err(e) => eprintln!(
                "dmalab: warning: could not give back {} huge pages ({}): {e}; `dmalab cleanup` will retry",
                self.added,
                self.path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_growths_of_one_pool_compose() {
        // A stand-in for nr_hugepages (a plain file keeps what is written).
        let dir = tempfile::tempdir().unwrap();
        let nr = dir.path().join("nr_hugepages");
        fs::write(&nr, "5\n").unwrap();
        let a = grow(&nr, 3).unwrap();
        let b = grow(&nr, 2).unwrap();
        assert_eq!(read_u64(&nr).unwrap(), 10);
        // The first run ends while the second still uses its pages: only
        // its own 3 go, where restoring "the size it found" would take the
        // second run's pages away.
        drop(a);
        assert_eq!(read_u64(&nr).unwrap(), 7);
        drop(b);
        assert_eq!(read_u64(&nr).unwrap(), 5);
    }
}
