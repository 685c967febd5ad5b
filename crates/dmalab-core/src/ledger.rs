//! The process ledger: host changes of `dmalab load` and `dmalab probe`
//! (hugetlb pools they grow) and files dmalab creates that a kill would
//! leave behind (the scratch file of a load, the temporary file of an
//! output), recorded in `/run/dmalab/proc-<pid>.json` *before* each change.
//!
//! A run undoes its own entries as it goes; after `kill -9` the next start
//! of such a command, `dmalab page`'s start and `dmalab cleanup` find the
//! ledger of a dead owner and undo it ([`cleanup_dead`]): a pool shrinks by
//! the pages that run added, a recorded file is removed if it is still a
//! regular file. Nothing is ever removed by a name pattern: only paths a
//! ledger names.
//!
//! When `/run/dmalab` cannot be written (not root) the ledger is off and
//! every call is a no-op: such a process cannot change pools either.
//! (`dmalab page` keeps its own ledger of swap, cgroups and sysctls in the
//! same directory: `dmalab_page::state`.)

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Directory of the ledgers (tmpfs: gone after a reboot, as the changes are).
pub const STATE_DIR: &str = "/run/dmalab";

/// A hugetlb pool a run grew.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolGrowth {
    /// Its `nr_hugepages` file.
    pub path: PathBuf,
    /// Pages the run added (taken off again at undo).
    pub added: u64,
}

/// What one process recorded.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entries {
    /// The dmalab process.
    pub owner_pid: u32,
    /// Its start time (clock ticks since boot), so a recycled pid is not
    /// mistaken for the owner.
    pub owner_start: Option<u64>,
    /// Hugetlb pools grown.
    #[serde(default)]
    pub pools: Vec<PoolGrowth>,
    /// Files created (scratch targets, temporary outputs), removed at undo.
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// Directories dmalab created (with fresh random names) for such files
    /// (a load's scratch directory, a `run`'s per-run directory), removed
    /// with their contents at undo.
    #[serde(default)]
    pub dirs: Vec<PathBuf>,
}

impl Entries {
    fn is_empty(&self) -> bool {
        self.pools.is_empty() && self.files.is_empty() && self.dirs.is_empty()
    }
}

struct State {
    /// The ledger file; None when the directory is not writable.
    path: Option<PathBuf>,
    entries: Entries,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let st = g.get_or_insert_with(|| {
        let pid = std::process::id();
        let path = ledger_dir().map(|d| d.join(format!("proc-{pid}.json")));
        State {
            path,
            entries: Entries {
                owner_pid: pid,
                owner_start: process_start_time(pid),
                ..Entries::default()
            },
        }
    });
    f(st)
}

fn persist(st: &State) -> io::Result<()> {
    let Some(path) = &st.path else {
        return Ok(());
    };
    if st.entries.is_empty() {
        return match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    // Written directly (not through output::write_atomic, which records its
    // own temporary file here): temp beside it, then rename.
    let text = serde_json::to_string_pretty(&st.entries).map_err(io::Error::other)?;
    let tmp = path.with_extension("json.new");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, path)
}

/// Records a file this process is about to create (call before creating
/// it, with the path it will have). Best effort: a ledger that cannot be
/// written is reported on stderr once and the run goes on.
pub fn add_file(path: &Path) {
    let abs = absolute(path);
    with(|st| {
        st.entries.files.push(abs);
        warn_once(persist(st));
    });
}

/// Forgets a file recorded with [`add_file`] (it was renamed into place or
/// removed).
pub fn forget_file(path: &Path) {
    let abs = absolute(path);
    with(|st| {
        if let Some(i) = st.entries.files.iter().position(|p| *p == abs) {
            st.entries.files.remove(i);
            warn_once(persist(st));
        }
    });
}

/// Records a directory this process just created, under a fresh random
/// name, for its own files (removed with its contents at undo).
pub fn add_dir(path: &Path) {
    let abs = absolute(path);
    with(|st| {
        st.entries.dirs.push(abs);
        warn_once(persist(st));
    });
}

/// Forgets a directory recorded with [`add_dir`].
pub fn forget_dir(path: &Path) {
    let abs = absolute(path);
    with(|st| {
        if let Some(i) = st.entries.dirs.iter().position(|p| *p == abs) {
            st.entries.dirs.remove(i);
            warn_once(persist(st));
        }
    });
}

/// Records that the pool `nr_path` grows by `added` pages (before writing).
pub fn add_pool(nr_path: &Path, added: u64) -> io::Result<()> {
    with(|st| {
        st.entries.pools.push(PoolGrowth {
            path: nr_path.to_path_buf(),
            added,
        });
        persist(st)
    })
}

/// Changes the recorded growth of `nr_path` from `from` to `to` pages
/// (`to` 0: forgets it).
pub fn settle_pool(nr_path: &Path, from: u64, to: u64) {
    with(|st| {
        if let Some(i) = st
            .entries
            .pools
            .iter()
            .position(|p| p.path == nr_path && p.added == from)
        {
            if to == 0 {
                st.entries.pools.remove(i);
            } else {
                st.entries.pools[i].added = to;
            }
            warn_once(persist(st));
        }
    });
}

fn warn_once(r: io::Result<()>) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = r {
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!("dmalab: warning: cannot write this run's ledger: {e}; after a kill, `dmalab cleanup` will not know its files and pools");
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The ledgers `PREFIX*.json` under `dir` (`proc-`, `page-`, `counters-`),
/// sorted; none when `dir` cannot be read.
pub fn ledger_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".json"))
        })
        .collect();
    paths.sort();
    paths
}

/// Start time of `pid` in clock ticks since boot (/proc/PID/stat field 22).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from its ')'.
    let rest = &s[s.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// True when `pid` runs (a zombie, killed and not yet reaped, does not)
/// and, when `start` is known, started at `start`.
pub fn owner_alive(pid: u32, start: Option<u64>) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state is the first field after the command name's ')'.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    if matches!(state, Some("Z" | "X")) {
        return false;
    }
    start.is_none() || process_start_time(pid) == start
}

/// Takes `pages` off the pool `nr_path` (what a run added).
pub fn shrink_pool(nr_path: &Path, pages: u64) -> io::Result<u64> {
    let _l = crate::hugetlb::pool_lock();
    let cur: u64 = fs::read_to_string(nr_path)?
        .trim()
        .parse()
        .map_err(io::Error::other)?;
    let new = cur.saturating_sub(pages);
    fs::write(nr_path, new.to_string())?;
    Ok(new)
}

/// What [`cleanup_dead`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Each undo step taken.
    pub done: Vec<String>,
    /// Each step that failed.
    pub errors: Vec<String>,
    /// Pids of owners still running (left alone).
    pub live: Vec<u32>,
}

/// Where this process keeps its ledger: [`STATE_DIR`] when it may write
/// there (root), else `$XDG_RUNTIME_DIR/dmalab` (the user's own runtime
/// directory, so an unprivileged `load` killed with `kill -9` leaves
/// nothing `dmalab cleanup` run by the same user cannot find), else none.
pub fn ledger_dir() -> Option<PathBuf> {
    let sys = Path::new(STATE_DIR);
    if (fs::create_dir_all(sys).is_ok() || sys.is_dir()) && writable(sys) {
        return Some(sys.to_path_buf());
    }
    let xdg = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    if !xdg.is_absolute() || !xdg.is_dir() {
        return None;
    }
    let d = xdg.join("dmalab");
    (fs::create_dir_all(&d).is_ok() && writable(&d)).then_some(d)
}

/// True when this process may create files in `dir`.
fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access() reads a NUL-terminated path we own.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// At the start of a command that records here: undoes what killed runs
/// left in this process's [`ledger_dir`] and says so on stderr.
pub fn cleanup_at_start() {
    let Some(dir) = ledger_dir() else {
        return;
    };
    let r = cleanup_dead(&dir);
    for d in &r.done {
        eprintln!("dmalab: cleaned up after a killed run: {d}");
    }
    for e in &r.errors {
        eprintln!("dmalab: warning: cleanup of a killed run: {e}; run `dmalab cleanup`");
    }
}

/// Undoes the ledgers of dead processes under `dir`. Cleanups (`dmalab
/// cleanup`, the start of other runs) take turns on `dir/cleanup.lock`, so
/// no two give back the same pages.
pub fn cleanup_dead(dir: &Path) -> Cleanup {
    let mut r = Cleanup::default();
    let _turn = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("cleanup.lock"))
        .ok()
        .and_then(|f| {
            use std::os::unix::io::AsRawFd;
            // SAFETY: flock on a descriptor we own.
            (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0).then_some(f)
        });
    for p in ledger_files(dir, "proc-") {
        let Ok(text) = fs::read_to_string(&p) else {
            continue;
        };
        let e: Entries = match serde_json::from_str(&text) {
            Ok(e) => e,
            Err(err) => {
                r.errors.push(format!(
                    "{}: not a dmalab ledger ({err}); left alone",
                    p.display()
                ));
                continue;
            }
        };
        if e.owner_pid == std::process::id() || owner_alive(e.owner_pid, e.owner_start) {
            if e.owner_pid != std::process::id() {
                r.live.push(e.owner_pid);
            }
            continue;
        }
        let mut failed = false;
        for f in &e.files {
            match fs::symlink_metadata(f) {
                Ok(m) if m.file_type().is_file() => match fs::remove_file(f) {
                    Ok(()) => r.done.push(format!(
                        "removed {} (left by dmalab pid {})",
                        f.display(),
                        e.owner_pid
                    )),
                    Err(err) => {
                        failed = true;
                        r.errors
                            .push(format!("cannot remove {}: {err}", f.display()));
                    }
                },
                // Gone, or no longer a regular file: not ours to touch.
                _ => {}
            }
        }
        for d in &e.dirs {
            // A directory (not a symlink put in its place) that dmalab made.
            if fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_dir()) {
                match fs::remove_dir_all(d) {
                    Ok(()) => r.done.push(format!(
                        "removed {} (left by dmalab pid {})",
                        d.display(),
                        e.owner_pid
                    )),
                    Err(err) => {
                        failed = true;
                        r.errors
                            .push(format!("cannot remove {}: {err}", d.display()));
                    }
                }
            }
        }
        for pool in &e.pools {
            match shrink_pool(&pool.path, pool.added) {
                Ok(now) => r.done.push(format!(
                    "gave back {} huge pages: {} = {now} (added by dmalab pid {})",
                    pool.added,
                    pool.path.display(),
                    e.owner_pid
                )),
                Err(err) => {
                    failed = true;
                    r.errors.push(format!(
                        "cannot give back {} huge pages of {}: {err}",
                        pool.added,
                        pool.path.display()
                    ));
                }
            }
        }
        if !failed {
            let _ = fs::remove_file(&p);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_owner_is_dead() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        // Not reaped yet: a zombie once it exits.
        let t0 = std::time::Instant::now();
        while owner_alive(pid, None) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(30));
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "reaped too early"
        );
        c.wait().unwrap();
        assert!(owner_alive(std::process::id(), None));
    }

    #[test]
    fn dead_owner_files_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("scratch");
        fs::write(&scratch, b"x").unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        // A pid that cannot run: beyond pid_max.
        let dead = Entries {
            owner_pid: u32::MAX - 1,
            owner_start: None,
            pools: vec![],
            files: vec![scratch.clone(), fifo.clone(), dir.path().join("gone")],
            dirs: vec![],
        };
        let l = dir.path().join("proc-1.json");
        fs::write(&l, serde_json::to_string(&dead).unwrap()).unwrap();
        let alive = Entries {
            owner_pid: 1,
            owner_start: None,
            pools: vec![],
            files: vec![dir.path().join("keep")],
            dirs: vec![],
        };
        fs::write(dir.path().join("keep"), b"k").unwrap();
        fs::write(
            dir.path().join("proc-2.json"),
            serde_json::to_string(&alive).unwrap(),
        )
        .unwrap();
        let r = cleanup_dead(dir.path());
        assert!(!scratch.exists());
        assert!(fifo.exists(), "only regular files are removed");
        assert!(!l.exists());
        assert!(dir.path().join("keep").exists());
        assert_eq!(r.live, vec![1]);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
    }
}
