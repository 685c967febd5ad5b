//! The primitive undo steps of the ledger, what each recorded about the
//! object it undoes, and how each is undone.
//!
//! A step that removes or restores something carries an [`Ident`] of the
//! object (device, inode, type, owner, birth time where the filesystem
//! keeps one): the undo acts only while the object still matches, so a
//! path someone replaced (another file, a symlink, a different inode) is
//! left alone and reported, never removed or written through.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kind of a filesystem object, as `lstat` sees it (a symlink is a
/// symlink, never its target).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A block device.
    Block,
    /// A character device.
    Char,
    /// A FIFO, socket or anything else.
    Other,
}

impl FileKind {
    fn of(m: &fs::Metadata) -> Self {
        let t = m.file_type();
        if t.is_symlink() {
            Self::Symlink
        } else if t.is_file() {
            Self::File
        } else if t.is_dir() {
            Self::Dir
        } else if t.is_block_device() {
            Self::Block
        } else if t.is_char_device() {
            Self::Char
        } else {
            Self::Other
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::File => "a regular file",
            Self::Dir => "a directory",
            Self::Symlink => "a symlink",
            Self::Block => "a block device",
            Self::Char => "a character device",
            Self::Other => "a special file",
        }
    }
}

/// What an object was when dmalab created or found it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ident {
    /// Device of the filesystem holding it (`st_dev`).
    pub dev: u64,
    /// Its inode; None on procfs, whose inode numbers change when the
    /// kernel drops and re-creates an entry.
    pub ino: Option<u64>,
    /// Its type.
    pub kind: FileKind,
    /// Its owner.
    pub uid: u32,
    /// Its birth time, nanoseconds since the Unix epoch, where the
    /// filesystem keeps one (statx `btime`).
    pub created_ns: Option<i64>,
}

const PROC_SUPER_MAGIC: i64 = 0x9fa0;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const RDTGROUP_SUPER_MAGIC: i64 = 0x0765_5821;

/// `statfs` type of the filesystem holding `path` (None when it cannot be
/// read).
fn fs_magic(path: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and st is a valid out-pointer for the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    Some(st.f_type as i64)
}

impl Ident {
    /// What `path` is now (`lstat`: a symlink is not followed).
    pub fn of(path: &Path) -> io::Result<Self> {
        let m = fs::symlink_metadata(path)?;
        let ino = (fs_magic(path) != Some(PROC_SUPER_MAGIC)).then(|| m.ino());
        Ok(Self {
            dev: m.dev(),
            ino,
            kind: FileKind::of(&m),
            uid: m.uid(),
            created_ns: m.created().ok().and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .and_then(|d| i64::try_from(d.as_nanos()).ok())
            }),
        })
    }

    /// Why `now` is not the object this records (None when it is).
    pub fn mismatch(&self, now: &Self) -> Option<String> {
        if now.kind != self.kind {
            return Some(format!("now {}, was {}", now.kind.name(), self.kind.name()));
        }
        if now.dev != self.dev {
            return Some("now on another filesystem".into());
        }
        if let (Some(a), Some(b)) = (self.ino, now.ino) {
            if a != b {
                return Some(format!("now inode {b}, was inode {a}"));
            }
        }
        if now.uid != self.uid {
            return Some(format!(
                "now owned by uid {}, was uid {}",
                now.uid, self.uid
            ));
        }
        if let (Some(a), Some(b)) = (self.created_ns, now.created_ns) {
            if a != b {
                return Some("created again since".into());
            }
        }
        None
    }
}

/// How a directory dmalab created is removed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DirRemoval {
    /// With its contents (a scratch or per-run directory under a fresh
    /// random name).
    Tree,
    /// A cgroup: its tasks are killed (dmalab's own worker only lives
    /// there), then rmdir, retried for a few seconds while they exit.
    Cgroup,
    /// A resctrl monitoring group: rmdir (the kernel removes its files;
    /// outside resctrl, a test's fixture tree, its contents with it).
    Resctrl,
}

/// One primitive undo step, recorded before the change it undoes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "undo", rename_all = "snake_case")]
pub enum Step {
    /// Writes `old` back to a single-value file (a sysctl, a cgroup limit
    /// such as `io.max` or `memory.max`).
    RestoreSetting {
        /// The file (absolute, resolved when recorded).
        path: PathBuf,
        /// The value to write back.
        old: String,
        /// The value dmalab wrote, when it is one value: a file that reads
        /// something else was changed by someone since and is left alone.
        wrote: Option<String>,
        /// The file when dmalab changed it.
        ident: Option<Ident>,
    },
    /// Writes `old` back at `offset` of a file and reads it back: a PCI
    /// config-space byte (`/sys/bus/pci/devices/BDF/config`) or an MSR
    /// (`/dev/cpu/N/msr`, whose offset is the MSR number, 8 bytes
    /// little-endian).
    RestoreBytes {
        /// The file.
        path: PathBuf,
        /// Byte offset.
        offset: u64,
        /// The bytes before dmalab changed them.
        old: Vec<u8>,
        /// What the bytes are, for messages (`0000:17:00.0 config byte 0x180`).
        label: String,
        /// The file when dmalab changed it.
        ident: Option<Ident>,
    },
    /// Removes a file dmalab created.
    RemoveFile {
        /// The file.
        path: PathBuf,
        /// The file dmalab created (None until it exists).
        ident: Option<Ident>,
    },
    /// Removes a directory dmalab created.
    RemoveDir {
        /// The directory.
        path: PathBuf,
        /// The directory dmalab created (None until it exists).
        ident: Option<Ident>,
        /// How.
        how: DirRemoval,
    },
    /// Takes `pages` pages off a hugetlb pool (what dmalab added).
    ShrinkPool {
        /// Its `nr_hugepages` file.
        path: PathBuf,
        /// Pages to take off.
        pages: u64,
    },
    /// Switches off a swap area dmalab switched on.
    Swapoff {
        /// The device or file.
        path: PathBuf,
    },
    /// Zeroes the first 4 KiB of a block device dmalab gave a swap header,
    /// so it holds no signature again.
    WipeSwapHeader {
        /// The device.
        path: PathBuf,
        /// The device node when dmalab wrote the header.
        ident: Option<Ident>,
    },
    /// Resets and removes a zram device dmalab hot-added.
    ZramRemove {
        /// Its number (`/dev/zramN`).
        id: u32,
    },
}

/// What undoing one step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undone {
    /// The change was undone (the line says what).
    Done(String),
    /// Nothing was left to undo (the object is gone, or already as it was).
    Nothing,
    /// The object is no longer what dmalab changed: left alone (why).
    LeftAlone(String),
    /// The undo failed; the step stays in the ledger for a later try.
    Failed(String),
}

impl Step {
    /// A setting about to be changed to `wrote` (None: a value the owner
    /// keeps changing, such as a controller's `io.max`): reads its current
    /// value as the one to restore.
    pub fn restore_setting(path: &Path, wrote: Option<&str>) -> io::Result<Self> {
        let path = resolve(path);
        let old = fs::read_to_string(&path)?.trim().to_string();
        Ok(Self::RestoreSetting {
            ident: Some(Ident::of(&path)?),
            path,
            old,
            wrote: wrote.map(str::to_string),
        })
    }

    /// Bytes at `offset` of `path` about to be changed: reads the `len`
    /// current bytes as the ones to restore.
    pub fn restore_bytes(path: &Path, offset: u64, len: usize, label: &str) -> io::Result<Self> {
        let path = resolve(path);
        let mut old = vec![0u8; len];
        fs::File::open(&path)?.read_exact_at(&mut old, offset)?;
        Ok(Self::RestoreBytes {
            ident: Some(Ident::of(&path)?),
            path,
            offset,
            old,
            label: label.to_string(),
        })
    }

    /// A file about to be created (its identity is added once it exists).
    pub fn remove_file(path: &Path) -> Self {
        Self::RemoveFile {
            path: resolve(path),
            ident: None,
        }
    }

    /// A directory about to be created (its identity is added once it
    /// exists).
    pub fn remove_dir(path: &Path, how: DirRemoval) -> Self {
        Self::RemoveDir {
            path: resolve(path),
            ident: None,
            how,
        }
    }

    /// The path the step acts on (None for a zram device).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::RestoreSetting { path, .. }
            | Self::RestoreBytes { path, .. }
            | Self::RemoveFile { path, .. }
            | Self::RemoveDir { path, .. }
            | Self::ShrinkPool { path, .. }
            | Self::Swapoff { path }
            | Self::WipeSwapHeader { path, .. } => Some(path),
            Self::ZramRemove { .. } => None,
        }
    }

    /// Makes every path absolute, resolving symlinks in the directories
    /// above it (the last component is kept as named: it may not exist yet,
    /// and a symlink put there later must be seen as one).
    pub(crate) fn resolve_paths(&mut self) {
        match self {
            Self::RestoreSetting { path, .. }
            | Self::RestoreBytes { path, .. }
            | Self::RemoveFile { path, .. }
            | Self::RemoveDir { path, .. }
            | Self::ShrinkPool { path, .. }
            | Self::Swapoff { path }
            | Self::WipeSwapHeader { path, .. } => *path = resolve(path),
            Self::ZramRemove { .. } => {}
        }
    }

    /// Records what the created object is (for `RemoveFile`/`RemoveDir`).
    pub(crate) fn note_created(&mut self) -> io::Result<()> {
        match self {
            Self::RemoveFile { path, ident } | Self::RemoveDir { path, ident, .. } => {
                *ident = Some(Ident::of(path)?);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Undoes the step.
    pub fn undo(&self) -> Undone {
        match self {
            Self::RestoreSetting {
                path,
                old,
                wrote,
                ident,
            } => restore_setting(path, old, wrote.as_deref(), ident.as_ref()),
            Self::RestoreBytes {
                path,
                offset,
                old,
                label,
                ident,
            } => restore_bytes(path, *offset, old, label, ident.as_ref()),
            Self::RemoveFile { path, ident } => remove_file(path, ident.as_ref()),
            Self::RemoveDir { path, ident, how } => remove_dir(path, ident.as_ref(), *how),
            Self::ShrinkPool { path, pages } => match shrink_pool(path, *pages) {
                Ok(now) => Undone::Done(format!(
                    "gave back {pages} huge pages: {} = {now}",
                    path.display()
                )),
                Err(e) => Undone::Failed(format!(
                    "cannot give back {pages} huge pages of {}: {e}",
                    path.display()
                )),
            },
            Self::Swapoff { path } => {
                if !crate::sys::swaps::read_swaps()
                    .iter()
                    .any(|s| s.path == *path)
                {
                    return Undone::Nothing;
                }
                match swapoff(path) {
                    Ok(()) => Undone::Done(format!("swapoff {}", path.display())),
                    Err(e) => Undone::Failed(format!("cannot swapoff {}: {e}", path.display())),
                }
            }
            Self::WipeSwapHeader { path, ident } => {
                if let Some(why) = changed(path, ident.as_ref()) {
                    return why;
                }
                let wipe = || -> io::Result<()> {
                    let f = fs::OpenOptions::new().write(true).open(path)?;
                    f.write_all_at(&[0u8; 4096], 0)?;
                    f.sync_all()
                };
                match wipe() {
                    Ok(()) => Undone::Done(format!("wiped the swap header off {}", path.display())),
                    Err(e) => Undone::Failed(format!(
                        "cannot wipe the swap header off {}: {e}",
                        path.display()
                    )),
                }
            }
            Self::ZramRemove { id } => match zram_remove(*id) {
                Ok(true) => Undone::Done(format!("removed /dev/zram{id}")),
                Ok(false) => Undone::Nothing,
                Err(e) => Undone::Failed(format!("cannot remove /dev/zram{id}: {e}")),
            },
        }
    }
}

/// `p` made absolute against the working directory, with the directories
/// above its last component resolved (symlinks, `..`).
pub fn resolve(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => match fs::canonicalize(dir) {
            Ok(d) => d.join(name),
            Err(_) => abs,
        },
        _ => abs,
    }
}

/// Checks `path` against what was recorded: Some(outcome) when the undo
/// must not act (gone: nothing to do; replaced: left alone).
fn changed(path: &Path, ident: Option<&Ident>) -> Option<Undone> {
    let now = match Ident::of(path) {
        Ok(i) => i,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(Undone::Nothing),
        Err(e) => {
            return Some(Undone::Failed(format!(
                "cannot stat {}: {e}",
                path.display()
            )))
        }
    };
    let why = ident?.mismatch(&now)?;
    Some(Undone::LeftAlone(format!(
        "{} is not what dmalab made or changed ({why})",
        path.display()
    )))
}

fn restore_setting(path: &Path, old: &str, wrote: Option<&str>, ident: Option<&Ident>) -> Undone {
    // A setting inside a cgroup dmalab removed went away with it.
    if let Some(u) = changed(path, ident) {
        return u;
    }
    let cur = match fs::read_to_string(path) {
        Ok(v) => v.trim().to_string(),
        Err(e) => return Undone::Failed(format!("cannot read {}: {e}", path.display())),
    };
    if cur == old {
        return Undone::Nothing;
    }
    if let Some(w) = wrote {
        if cur != w {
            return Undone::LeftAlone(format!(
                "{} reads {cur}, not the {w} dmalab wrote: changed since by someone else (it was {old})",
                path.display()
            ));
        }
    }
    match fs::write(path, old) {
        Ok(()) => Undone::Done(format!("restored {} = {old}", path.display())),
        Err(e) => Undone::Failed(format!("cannot restore {} to {old}: {e}", path.display())),
    }
}

fn show_bytes(b: &[u8]) -> String {
    match b.len() {
        1 => format!("{:#04x}", b[0]),
        8 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            format!("{:#x}", u64::from_le_bytes(a))
        }
        _ => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

fn restore_bytes(
    path: &Path,
    offset: u64,
    old: &[u8],
    label: &str,
    ident: Option<&Ident>,
) -> Undone {
    let want = show_bytes(old);
    match changed(path, ident) {
        Some(Undone::Nothing) => {
            return Undone::Failed(format!(
                "cannot restore {label} to {want}: {} is gone",
                path.display()
            ))
        }
        Some(u) => return u,
        None => {}
    }
    let put = || -> io::Result<Vec<u8>> {
        let mut cur = vec![0u8; old.len()];
        fs::File::open(path)?.read_exact_at(&mut cur, offset)?;
        if cur != old {
            fs::OpenOptions::new()
                .write(true)
                .open(path)?
                .write_all_at(old, offset)?;
        }
        fs::File::open(path)?.read_exact_at(&mut cur, offset)?;
        Ok(cur)
    };
    match put() {
        Ok(v) if v == old => Undone::Done(format!("restored {label} = {want} (read back)")),
        Ok(v) => Undone::Failed(format!(
            "{label} reads {} after restoring {want}",
            show_bytes(&v)
        )),
        Err(e) => Undone::Failed(format!("cannot restore {label} to {want}: {e}")),
    }
}

fn not_recorded(path: &Path) -> Undone {
    Undone::LeftAlone(format!(
        "{}: no record of what dmalab created there (its owner was stopped right after creating it, or an older ledger named it by path only); check it and remove it by hand",
        path.display()
    ))
}

fn remove_file(path: &Path, ident: Option<&Ident>) -> Undone {
    if let Some(u) = changed(path, ident) {
        return u;
    }
    if ident.is_none() {
        return not_recorded(path);
    }
    match fs::remove_file(path) {
        Ok(()) => Undone::Done(format!("removed {}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Undone::Nothing,
        Err(e) => Undone::Failed(format!("cannot remove {}: {e}", path.display())),
    }
}

fn remove_dir(path: &Path, ident: Option<&Ident>, how: DirRemoval) -> Undone {
    if let Some(u) = changed(path, ident) {
        return u;
    }
    // A kernel group directory cannot be planted by another user (cgroupfs
    // and resctrl are root's): without an identity (a kill right after the
    // mkdir, an older ledger) a directory there is still removed.
    let kernel_group = matches!(
        fs_magic(path),
        Some(CGROUP2_SUPER_MAGIC | CGROUP_SUPER_MAGIC | RDTGROUP_SUPER_MAGIC)
    );
    // Older ledgers named cgroups and resctrl groups `dmalab-*` by bare path.
    let group_dir = how != DirRemoval::Tree
        && fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
        && (kernel_group
            || path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("dmalab-")));
    if ident.is_none() && !group_dir {
        return not_recorded(path);
    }
    let (r, what) = match how {
        DirRemoval::Tree => (fs::remove_dir_all(path), ""),
        DirRemoval::Cgroup => (remove_cgroup(path, Duration::from_secs(10)), "cgroup "),
        DirRemoval::Resctrl => (
            match fs::remove_dir(path) {
                // Outside resctrl (a fixture tree) the files are real.
                Err(_) if !kernel_group => fs::remove_dir_all(path),
                r => r,
            },
            "resctrl group ",
        ),
    };
    match r {
        Ok(()) => Undone::Done(format!("removed {what}{}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Undone::Nothing,
        Err(e) => Undone::Failed(format!("cannot remove {what}{}: {e}", path.display())),
    }
}

/// Removes a cgroup: kills the tasks in it (only dmalab's own worker is
/// ever placed there) and retries rmdir for up to `patience`.
pub fn remove_cgroup(path: &Path, patience: Duration) -> io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        let procs = fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // SAFETY: kill has no memory arguments; the pid comes from the
            // cgroup's own process list.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                if start.elapsed() > patience {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Takes `pages` off the pool `nr_path` (what a run added); returns its
/// new size.
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

/// swapoff(2).
pub fn swapoff(path: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::other("path holds a NUL byte"))?;
    // SAFETY: c is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Resets and hot-removes `/dev/zram<id>`; false when it does not exist.
pub fn zram_remove(id: u32) -> io::Result<bool> {
    let dir = PathBuf::from(format!("/sys/block/zram{id}"));
    if !dir.exists() {
        return Ok(false);
    }
    // reset frees the memory and fails with EBUSY while the device is open.
    let mut last = None;
    for _ in 0..50 {
        match fs::write(dir.join("reset"), "1") {
            Ok(()) => {
                last = None;
                break;
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    if let Some(e) = last {
        return Err(e);
    }
    fs::write("/sys/class/zram-control/hot_remove", id.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_or_a_symlink_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("scratch");
        let mut s = Step::remove_file(&f);
        fs::write(&f, b"ours").unwrap();
        s.note_created().unwrap();
        // Replaced by another file (another inode) under the same name.
        let other = d.path().join("other");
        fs::write(&other, b"theirs").unwrap();
        fs::rename(&other, &f).unwrap();
        assert!(matches!(s.undo(), Undone::LeftAlone(_)), "{:?}", s.undo());
        assert!(f.exists());
        // Replaced by a symlink.
        fs::remove_file(&f).unwrap();
        let target = d.path().join("target");
        fs::write(&target, b"t").unwrap();
        std::os::unix::fs::symlink(&target, &f).unwrap();
        let Undone::LeftAlone(why) = s.undo() else {
            panic!("a symlink was acted on");
        };
        assert!(why.contains("symlink"), "{why}");
        assert!(target.exists() && f.exists());
    }

    #[test]
    fn the_own_file_is_removed_and_a_missing_one_is_nothing() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("scratch");
        let mut s = Step::remove_file(&f);
        fs::write(&f, b"ours").unwrap();
        s.note_created().unwrap();
        assert!(matches!(s.undo(), Undone::Done(_)));
        assert!(!f.exists());
        assert_eq!(s.undo(), Undone::Nothing);
    }

    #[test]
    fn a_file_whose_identity_was_never_noted_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("scratch");
        let s = Step::remove_file(&f);
        fs::write(&f, b"maybe ours").unwrap();
        assert!(matches!(s.undo(), Undone::LeftAlone(_)));
        assert!(f.exists());
    }

    #[test]
    fn a_setting_changed_by_someone_else_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let k = d.path().join("knob");
        fs::write(&k, "3\n").unwrap();
        let s = Step::restore_setting(&k, Some("0")).unwrap();
        fs::write(&k, "0").unwrap();
        assert_eq!(
            s.undo(),
            Undone::Done(format!("restored {} = 3", k.display()))
        );
        assert_eq!(fs::read_to_string(&k).unwrap(), "3");
        fs::write(&k, "7").unwrap();
        assert!(matches!(s.undo(), Undone::LeftAlone(_)));
        assert_eq!(fs::read_to_string(&k).unwrap(), "7");
    }

    #[test]
    fn relative_paths_are_made_absolute_and_resolved() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let r = resolve(&d.path().join("link/./x"));
        assert_eq!(r, fs::canonicalize(&real).unwrap().join("x"));
        let rel = resolve(Path::new("some-file"));
        assert!(rel.is_absolute(), "{}", rel.display());
    }

    #[test]
    fn bytes_are_restored_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("config");
        fs::write(&f, vec![0x91u8; 512]).unwrap();
        let s = Step::restore_bytes(&f, 0x180, 1, "port config byte 0x180").unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .write_all_at(&[0x19], 0x180)
            .unwrap();
        assert_eq!(
            s.undo(),
            Undone::Done("restored port config byte 0x180 = 0x91 (read back)".into())
        );
        assert_eq!(fs::read(&f).unwrap()[0x180], 0x91);
    }
}
