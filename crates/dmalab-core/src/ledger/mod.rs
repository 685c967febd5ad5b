//! The ledger: one way to undo a host change.
//!
//! Every change dmalab makes to the host that a kill would leave behind (a
//! sysctl, a cgroup and its limits, a swap area, a zram device, a hugetlb
//! pool's growth, a DDIO config byte or MSR, a resctrl group, a scratch or
//! temporary file) is written as a primitive undo [`Step`] to one file per
//! process, `DIR/proc-<pid>.json`, *before* the change is made (the file is
//! fsync'd), and taken off once the change is undone. The owner undoes its
//! own steps, newest first, on exit, error, signal or panic ([`Changes`]);
//! after `kill -9` the next start of a command that changes the host or
//! `dmalab cleanup` finds the file of a dead owner and undoes it
//! ([`LedgerDir::cleanup_dead`]).
//!
//! One liveness rule: an owner is alive while `/proc/PID` exists, is not a
//! zombie and started at the recorded time ([`owner_alive`]).
//!
//! Each kind of host change only translates itself into steps; adding one
//! is a constructor call, not a new ledger. Steps record what dmalab
//! created or found ([`Ident`]), and the undo acts only while it still
//! matches. Paths are made absolute and resolved when recorded.
//!
//! The directory is a value ([`LedgerDir`]): the system's (root:
//! `/run/dmalab`; other users: their own private directory, see [`dir`]) or
//! a test's fixture directory.

pub mod dir;
mod legacy;
pub mod step;

pub use dir::LedgerError;
pub use step::{resolve, shrink_pool, DirRemoval, FileKind, Ident, Step, Undone};

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Directory of root's ledgers (tmpfs: gone after a reboot, as the changes
/// are).
pub const STATE_DIR: &str = "/run/dmalab";

/// Version of the ledger file format (older files are read by
/// `legacy`).
pub const FORMAT: u32 = 2;

/// File name prefix of ledger files.
pub const PREFIX: &str = "proc-";

/// One recorded step and who recorded it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    /// Its number in this process.
    pub id: u64,
    /// The kind of host change it belongs to (`page`, `ddio`, `throttle`,
    /// `counters`, `hugetlb`, `scratch`), for reports.
    pub by: String,
    /// The undo.
    pub step: Step,
}

/// One process's ledger file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LedgerFile {
    /// [`FORMAT`].
    pub format: u32,
    /// The dmalab process.
    pub owner_pid: u32,
    /// Its start time (clock ticks since boot), so a recycled pid is not
    /// taken for the owner.
    pub owner_start: Option<u64>,
    /// Steps in the order they were recorded (undone in reverse).
    pub steps: Vec<Entry>,
}

/// A recorded step of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepId(u64);

struct Open {
    file: PathBuf,
    ledger: LedgerFile,
}

/// This process's open ledgers, one per directory.
static OPEN: Mutex<Vec<Open>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn with_open<R>(dir: &Path, f: impl FnOnce(&mut Open) -> R) -> R {
    let mut g = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let pid = std::process::id();
    let i = match g.iter().position(|o| o.file.parent() == Some(dir)) {
        Some(i) => i,
        None => {
            g.push(Open {
                file: dir.join(format!("{PREFIX}{pid}.json")),
                ledger: LedgerFile {
                    format: FORMAT,
                    owner_pid: pid,
                    owner_start: process_start_time(pid),
                    steps: Vec::new(),
                },
            });
            g.len() - 1
        }
    };
    f(&mut g[i])
}

/// Writes the ledger whole and durably (temporary file, fsync, rename,
/// fsync of the directory), or removes it when it holds no step.
fn persist(o: &Open) -> io::Result<()> {
    let dir = o.file.parent().unwrap_or(Path::new("/"));
    if o.ledger.steps.is_empty() {
        return match fs::remove_file(&o.file) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let text = serde_json::to_string_pretty(&o.ledger).map_err(io::Error::other)?;
    let tmp = dir.join(format!(".{PREFIX}{}.json.new", o.ledger.owner_pid));
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, &o.file)?;
    fs::File::open(dir)?.sync_all()
}

/// A directory of ledgers: the system's ([`LedgerDir::for_user`]) or any
/// other (a test's fixture, a `--host-root`'s `/run/dmalab`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerDir {
    path: PathBuf,
}

/// What undoing leftovers found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Each change undone.
    pub done: Vec<String>,
    /// Each object left alone because it is no longer what dmalab made,
    /// and why.
    pub left_alone: Vec<String>,
    /// Each undo that failed (its step stays for a later try), and each
    /// ledger refused.
    pub errors: Vec<String>,
    /// Owners still alive, this process included (their ledgers left
    /// alone).
    pub live: Vec<u32>,
}

impl Cleanup {
    /// Adds `other`'s lines to this one.
    pub fn extend(&mut self, other: Cleanup) {
        self.done.extend(other.done);
        self.left_alone.extend(other.left_alone);
        self.errors.extend(other.errors);
        self.live.extend(other.live);
    }

    fn add(&mut self, u: Undone, owner: Option<u32>) -> bool {
        let by = |s: String| match owner {
            Some(pid) => format!("{s} (left by dmalab pid {pid})"),
            None => s,
        };
        match u {
            Undone::Done(s) => self.done.push(by(s)),
            Undone::Nothing => {}
            Undone::LeftAlone(s) => self.left_alone.push(by(s)),
            Undone::Failed(s) => {
                self.errors.push(s);
                return false;
            }
        }
        true
    }
}

impl LedgerDir {
    /// The ledgers under `path`, as given.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// This user's ledger directory: `/run/dmalab` for root, else the
    /// user's own private one ([`dir::user_dir`]).
    pub fn for_user() -> Result<Self, LedgerError> {
        dir::user_dir().map(Self::at)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `step` (for the change kind `by`) in this process's ledger
    /// and makes it durable; call *before* making the change.
    pub fn record(&self, by: &str, mut step: Step) -> io::Result<StepId> {
        step.resolve_paths();
        fs::create_dir_all(&self.path)?;
        dir::check_dir(&self.path).map_err(io::Error::other)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        with_open(&self.path, |o| {
            o.ledger.steps.push(Entry {
                id,
                by: by.to_string(),
                step,
            });
            let r = persist(o);
            if r.is_err() {
                o.ledger.steps.retain(|e| e.id != id);
            }
            r
        })?;
        Ok(StepId(id))
    }

    fn edit(&self, id: StepId, f: impl FnOnce(&mut Step) -> io::Result<()>) -> io::Result<()> {
        with_open(&self.path, |o| {
            let Some(e) = o.ledger.steps.iter_mut().find(|e| e.id == id.0) else {
                return Ok(());
            };
            f(&mut e.step)?;
            persist(o)
        })
    }

    /// Replaces a recorded step (a pool that grew by fewer pages than
    /// asked).
    pub fn update(&self, id: StepId, step: Step) -> io::Result<()> {
        self.edit(id, |s| {
            *s = step;
            s.resolve_paths();
            Ok(())
        })
    }

    /// Notes what the file or directory of a `RemoveFile`/`RemoveDir` step
    /// is, once created, so the undo can tell it from anything put in its
    /// place later.
    pub fn created(&self, id: StepId) -> io::Result<()> {
        self.edit(id, Step::note_created)
    }

    /// Takes a step off (its change was undone, or is meant to stay).
    pub fn forget(&self, id: StepId) -> io::Result<()> {
        with_open(&self.path, |o| {
            let n = o.ledger.steps.len();
            o.ledger.steps.retain(|e| e.id != id.0);
            if o.ledger.steps.len() == n {
                return Ok(());
            }
            persist(o)
        })
    }

    /// The recorded step `id` (None once undone or forgotten).
    pub fn step(&self, id: StepId) -> Option<Step> {
        with_open(&self.path, |o| {
            o.ledger
                .steps
                .iter()
                .find(|e| e.id == id.0)
                .map(|e| e.step.clone())
        })
    }

    /// Undoes step `id` and takes it off unless the undo failed.
    pub fn undo(&self, id: StepId) -> Undone {
        let Some(step) = self.step(id) else {
            return Undone::Nothing;
        };
        let u = step.undo();
        if !matches!(u, Undone::Failed(_)) {
            if let Err(e) = self.forget(id) {
                warn_once(&e);
            }
        }
        u
    }

    /// The ledger files under this directory: this format's and older ones
    /// (`page-`, `ddio-`, `counters-`), sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        let Ok(rd) = fs::read_dir(&self.path) else {
            return Vec::new();
        };
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".json"))
                    .and_then(|n| {
                        [PREFIX, "page-", "ddio-", "counters-"]
                            .iter()
                            .find_map(|pre| n.strip_prefix(pre))
                    })
                    .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        v.sort();
        v
    }

    /// Reads a ledger file (this format or an older one) defensively.
    pub fn read(&self, path: &Path) -> Result<LedgerFile, LedgerError> {
        let text = dir::read_trusted(path).map_err(|e| LedgerError::NotActedOn(Box::new(e)))?;
        if let Ok(l) = serde_json::from_str::<LedgerFile>(&text) {
            return Ok(l);
        }
        legacy::translate(&self.path, path, &text)
            .ok_or_else(|| LedgerError::NotALedger(path.to_path_buf()))
    }

    /// Undoes the ledgers of dead owners under this directory, newest step
    /// first; a ledger whose steps all went is removed, one with a failed
    /// step keeps that step for a later try. Cleanups take turns on
    /// `cleanup.lock`, so no two give back the same pages.
    pub fn cleanup_dead(&self) -> Cleanup {
        let mut r = Cleanup::default();
        if !self.path.exists() {
            return r;
        }
        if let Err(e) = dir::check_dir(&self.path) {
            r.errors.push(format!("{e}; its ledgers are not acted on"));
            return r;
        }
        if self.files().is_empty() {
            return r;
        }
        let _turn = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.path.join("cleanup.lock"))
            .ok()
            .and_then(|f| {
                use std::os::unix::io::AsRawFd;
                // SAFETY: flock on a descriptor we own.
                (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0).then_some(f)
            });
        let me = std::process::id();
        for p in self.files() {
            let mut l = match self.read(&p) {
                Ok(l) => l,
                Err(e) => {
                    r.errors.push(e.to_string());
                    continue;
                }
            };
            if l.owner_pid == me || owner_alive(l.owner_pid, l.owner_start) {
                r.live.push(l.owner_pid);
                continue;
            }
            let mut kept = Vec::new();
            for e in l.steps.iter().rev() {
                if !r.add(e.step.undo(), Some(l.owner_pid)) {
                    kept.push(e.clone());
                }
            }
            if kept.is_empty() {
                let _ = fs::remove_file(&p);
            } else if p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(PREFIX))
            {
                kept.reverse();
                l.steps = kept;
                let o = Open { file: p, ledger: l };
                if let Err(e) = persist(&o) {
                    r.errors
                        .push(format!("cannot rewrite {}: {e}", o.file.display()));
                }
            }
        }
        r
    }
}

/// A set of changes one piece of code owns: recorded in a [`LedgerDir`],
/// undone newest first by [`Changes::undo_all`] or when dropped.
#[derive(Debug)]
pub struct Changes {
    dir: LedgerDir,
    by: String,
    ids: Vec<StepId>,
}

impl Changes {
    /// Changes of kind `by` recorded under `dir`.
    pub fn new(dir: LedgerDir, by: &str) -> Self {
        Self {
            dir,
            by: by.to_string(),
            ids: Vec::new(),
        }
    }

    /// The ledger directory.
    pub fn dir(&self) -> &LedgerDir {
        &self.dir
    }

    /// Records a step (call *before* the change).
    pub fn record(&mut self, step: Step) -> io::Result<StepId> {
        let id = self.dir.record(&self.by, step)?;
        self.ids.push(id);
        Ok(id)
    }

    /// Notes what a created file or directory is ([`LedgerDir::created`]).
    pub fn created(&self, id: StepId) -> io::Result<()> {
        self.dir.created(id)
    }

    /// The steps still recorded, oldest first.
    pub fn steps(&self) -> Vec<Step> {
        self.ids.iter().filter_map(|i| self.dir.step(*i)).collect()
    }

    /// True when no step is held.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Undoes every step, newest first; failed ones stay in the ledger for
    /// `dmalab cleanup`.
    pub fn undo_all(&mut self) -> Cleanup {
        let mut r = Cleanup::default();
        while let Some(id) = self.ids.pop() {
            r.add(self.dir.undo(id), None);
        }
        r
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        let r = self.undo_all();
        for e in r.errors {
            eprintln!("dmalab: warning: cleanup: {e}; run `dmalab cleanup`");
        }
        for e in r.left_alone {
            eprintln!("dmalab: warning: cleanup: left alone: {e}");
        }
    }
}

fn warn_once(e: &io::Error) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!("dmalab: warning: cannot write this run's ledger: {e}; after a kill, `dmalab cleanup` will not know its files and pools");
    }
}

/// Start time of `pid` in clock ticks since boot (/proc/PID/stat field 22).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from its ')'.
    let rest = s.get(s.rfind(')')? + 2..)?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The one liveness rule: `pid` runs (a zombie, killed and not yet reaped,
/// does not) and, when `start` is known, started at `start`.
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

// The process-wide ledger of `load`, `probe`, `run` and output files, in
// this user's ledger directory: the calls below record there and are
// no-ops (with one warning) when it cannot be used.

/// This user's ledger directory, chosen once per process.
pub fn default_dir() -> Option<&'static LedgerDir> {
    static DIR: OnceLock<Option<LedgerDir>> = OnceLock::new();
    DIR.get_or_init(|| match LedgerDir::for_user() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("dmalab: warning: no ledger directory: {e}; after a kill, `dmalab cleanup` will not know this run's files");
            None
        }
    })
    .as_ref()
}

/// Where this process keeps its ledger (see [`default_dir`]).
pub fn ledger_dir() -> Option<PathBuf> {
    default_dir().map(|d| d.path().to_path_buf())
}

/// Steps of the process-wide ledger, by the path they name.
static BY_PATH: Mutex<Vec<(PathBuf, StepId)>> = Mutex::new(Vec::new());

fn remember(path: &Path, id: StepId) {
    BY_PATH
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((resolve(path), id));
}

fn take(path: &Path) -> Option<StepId> {
    let abs = resolve(path);
    let mut g = BY_PATH.lock().unwrap_or_else(|p| p.into_inner());
    let i = g.iter().rposition(|(p, _)| *p == abs)?;
    Some(g.remove(i).1)
}

fn find(path: &Path) -> Option<StepId> {
    let abs = resolve(path);
    let g = BY_PATH.lock().unwrap_or_else(|p| p.into_inner());
    g.iter().rev().find(|(p, _)| *p == abs).map(|(_, id)| *id)
}

/// Records a file this process is about to create (call before creating
/// it, then [`file_created`] once it exists). Best effort: a ledger that
/// cannot be written is reported on stderr once and the run goes on.
pub fn add_file(path: &Path) {
    let Some(d) = default_dir() else { return };
    match d.record("scratch", Step::remove_file(path)) {
        Ok(id) => remember(path, id),
        Err(e) => warn_once(&e),
    }
}

/// Notes what the file recorded with [`add_file`] is, now that it exists,
/// so the undo removes it and nothing put in its place.
pub fn file_created(path: &Path) {
    let (Some(d), Some(id)) = (default_dir(), find(path)) else {
        return;
    };
    if let Err(e) = d.created(id) {
        warn_once(&e);
    }
}

/// Forgets a file recorded with [`add_file`] (it was renamed into place or
/// removed).
pub fn forget_file(path: &Path) {
    if let (Some(d), Some(id)) = (default_dir(), take(path)) {
        if let Err(e) = d.forget(id) {
            warn_once(&e);
        }
    }
}

/// Records a directory this process just created, under a fresh random
/// name, for its own files (removed with its contents at undo).
pub fn add_dir(path: &Path) {
    let Some(d) = default_dir() else { return };
    let r = d
        .record("scratch", Step::remove_dir(path, DirRemoval::Tree))
        .and_then(|id| d.created(id).map(|()| id));
    match r {
        Ok(id) => remember(path, id),
        Err(e) => warn_once(&e),
    }
}

/// Forgets a directory recorded with [`add_dir`].
pub fn forget_dir(path: &Path) {
    forget_file(path)
}

/// Records that the pool `nr_path` grows by `added` pages (before writing).
pub fn add_pool(nr_path: &Path, added: u64) -> io::Result<()> {
    let Some(d) = default_dir() else {
        return Ok(());
    };
    let id = d.record(
        "hugetlb",
        Step::ShrinkPool {
            path: nr_path.to_path_buf(),
            pages: added,
        },
    )?;
    remember(nr_path, id);
    Ok(())
}

/// Changes the recorded growth of `nr_path` from `from` to `to` pages
/// (`to` 0: forgets it).
pub fn settle_pool(nr_path: &Path, from: u64, to: u64) {
    let Some(d) = default_dir() else { return };
    let abs = resolve(nr_path);
    let id = {
        let mut g = BY_PATH.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = g.iter().rposition(|(p, id)| {
            *p == abs
                && matches!(d.step(*id), Some(Step::ShrinkPool { pages, .. }) if pages == from)
        }) else {
            return;
        };
        if to == 0 {
            g.remove(i).1
        } else {
            g[i].1
        }
    };
    if to == 0 {
        if let Err(e) = d.forget(id) {
            warn_once(&e);
        }
        return;
    }
    let r = d.update(
        id,
        Step::ShrinkPool {
            path: nr_path.to_path_buf(),
            pages: to,
        },
    );
    if let Err(e) = r {
        warn_once(&e);
    }
}

/// At the start of a command that changes the host: undoes what killed
/// runs left in this user's ledger directory and says so on stderr.
pub fn cleanup_at_start() {
    let Some(dir) = default_dir() else {
        return;
    };
    let r = dir.cleanup_dead();
    for d in &r.done {
        eprintln!("dmalab: cleaned up after a killed run: {d}");
    }
    for d in &r.left_alone {
        eprintln!("dmalab: cleanup of a killed run: left alone: {d}");
    }
    for e in &r.errors {
        eprintln!("dmalab: warning: cleanup of a killed run: {e}; run `dmalab cleanup`");
    }
}

#[cfg(test)]
mod tests;
