//! Where a DMA buffer's pages live: on a NUMA node (`--membind`, bound with
//! `mbind(MPOL_BIND)` before the first touch) or in a file or DAX device
//! (`--buffer-file`, mapped shared), and where they turned out to be (every
//! page asked with `move_pages` after it was faulted in).
//!
//! One [`Mapping`] serves every buffer that takes DMA (`load`'s, whatever
//! the engine, and `rdma serve`'s), so the flags mean the same everywhere
//! and the record has one shape.
//!
//! A buffer file is a path the user names, so it is handled like any path
//! dmalab writes: one that does not exist is created (`O_EXCL|O_NOFOLLOW`),
//! sized and removed afterwards; one that exists is used only when the user
//! named it with `--allow-destroy` (its contents are overwritten by the
//! fill), it is at least the buffer's size (it is never truncated or grown)
//! and no kernel user (a loop device, swap) holds it.

use crate::sys::numa;
use crate::UsageError;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The flag that binds a buffer to a node (`probe`'s name for it).
pub const MEMBIND: &str = "--membind";
/// The flag that backs a buffer by a file or DAX device.
pub const BUFFER_FILE: &str = "--buffer-file";

const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
const MAP_SYNC: libc::c_int = 0x80000;
const STATX_ATTR_DAX: u64 = 0x0020_0000;

/// Where a buffer's pages are to live, as asked. Engine-neutral: it rides
/// on the buffer, not on any engine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementSpec {
    /// NUMA node every page must sit on (`--membind`, alias
    /// `--numa-node`); None: wherever the kernel puts them.
    #[serde(default)]
    pub membind: Option<usize>,
    /// File or DAX device (`/dev/daxX.Y`) backing the buffer
    /// (`--buffer-file`), mapped shared; None: anonymous memory.
    #[serde(default)]
    pub buffer_file: Option<PathBuf>,
    /// An existing buffer file was named with `--allow-destroy` (its
    /// contents may be overwritten).
    #[serde(default)]
    pub buffer_file_allowed: bool,
}

/// What backs a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backing {
    /// Anonymous private memory (DRAM).
    #[default]
    Anonymous,
    /// A device-DAX character device (persistent memory, whole device
    /// mapped directly).
    DaxDevice,
    /// A regular file, mapped shared (`dax` says whether the filesystem
    /// maps it directly).
    File,
}

/// Pages of a buffer on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePages {
    /// The NUMA node.
    pub node: usize,
    /// Pages of `page_bytes` on it.
    pub pages: u64,
}

/// Where a buffer's pages turned out to be (the result records it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRecord {
    /// What backs the buffer.
    pub backing: Backing,
    /// The buffer file or DAX device, when one backs it.
    pub buffer_file: Option<PathBuf>,
    /// True when dmalab created the buffer file (and removed it after).
    pub buffer_file_created: bool,
    /// True when the pages are persistent memory mapped directly (a DAX
    /// device, or a file with the DAX attribute).
    pub dax: bool,
    /// True when the file was mapped with `MAP_SYNC` (writes durable
    /// without fsync; only DAX offers it).
    pub map_sync: bool,
    /// The node asked for (`--membind`).
    pub membind: Option<usize>,
    /// Pages per node, from the kernel (`nodes_source`).
    pub nodes: Vec<NodePages>,
    /// Pages whose node the kernel could not name.
    pub unknown_pages: u64,
    /// `move_pages` (every page asked), or `sysfs` (a DAX device whose
    /// pages `move_pages` cannot name: the device's `target_node`).
    pub nodes_source: String,
    /// Size of the pages counted, bytes.
    pub page_bytes: u64,
    /// The kernel lets a device pin these pages for long (io_uring's
    /// registered buffers, RDMA memory regions): anonymous memory, tmpfs,
    /// hugetlbfs and device DAX; not page-cache or filesystem-DAX file
    /// pages, which it may move or truncate under the device.
    #[serde(default)]
    pub long_term_pins: bool,
}

impl PlacementRecord {
    /// One line for a command's text output: what backs the buffer and
    /// where its pages are; None when no placement was asked for.
    pub fn line(&self) -> Option<String> {
        if self.membind.is_none() && self.buffer_file.is_none() {
            return None;
        }
        let backing = match (&self.buffer_file, self.backing) {
            (Some(p), Backing::DaxDevice) => format!("DAX device {}", p.display()),
            (Some(p), _) => format!(
                "{}file {}{}",
                if self.dax { "DAX " } else { "" },
                p.display(),
                if self.map_sync { " (MAP_SYNC)" } else { "" }
            ),
            (None, _) => "anonymous memory".into(),
        };
        Some(format!(
            "{backing}, pages on {} ({})",
            self.nodes_text(),
            self.nodes_source
        ))
    }

    /// True when io_uring may register these pages as fixed buffers: the
    /// kernel's registration takes anonymous, tmpfs and hugetlbfs memory
    /// only (6.1 refuses every other file mapping, a DAX device included,
    /// with EOPNOTSUPP), so anything else runs unregistered.
    pub fn io_uring_registrable(&self) -> bool {
        match self.backing {
            Backing::Anonymous => true,
            Backing::File => self.long_term_pins,
            Backing::DaxDevice => false,
        }
    }

    /// The nodes the buffer occupies, as text (`node 1`, `nodes 0,1`).
    pub fn nodes_text(&self) -> String {
        let list: Vec<String> = self.nodes.iter().map(|n| n.node.to_string()).collect();
        match list.len() {
            0 => "node unknown".into(),
            1 => format!("node {}", list[0]),
            _ => format!("nodes {}", list.join(",")),
        }
    }
}

/// Errors placing a buffer.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// Bad input: a node without memory, a file that may not be used, a
    /// page that landed elsewhere.
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// The system refused (mmap, open).
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn usage(option: &str, message: String) -> PlacementError {
    PlacementError::Usage(UsageError::new(option, message))
}

impl PlacementSpec {
    /// True when nothing is asked (anonymous memory, any node).
    pub fn is_default(&self) -> bool {
        self.membind.is_none() && self.buffer_file.is_none()
    }

    /// Checks what can be checked before anything is mapped, on this host:
    /// the node exists and has memory, the buffer file may be used for a
    /// `len`-byte buffer.
    pub fn validate(&self, len: u64) -> Result<(), UsageError> {
        self.validate_on(len, &numa::online_nodes(), &numa::memory_nodes())
    }

    /// [`PlacementSpec::validate`] on a host with these `online` nodes,
    /// of which `with_memory` have memory.
    pub fn validate_on(
        &self,
        len: u64,
        online: &[usize],
        with_memory: &[usize],
    ) -> Result<(), UsageError> {
        if let Some(n) = self.membind {
            let list = crate::cpus::format_cpu_list(with_memory);
            if !online.contains(&n) {
                return Err(UsageError::new(
                    MEMBIND,
                    format!("node {n} does not exist on this host (nodes with memory: {list}); choose one of those"),
                ));
            }
            if !with_memory.contains(&n) {
                return Err(UsageError::new(
                    MEMBIND,
                    format!(
                        "node {n} has no memory (nodes with memory: {list}); choose one of those"
                    ),
                ));
            }
        }
        if let Some(p) = &self.buffer_file {
            check_buffer_file(p, len, self.buffer_file_allowed)?;
        }
        Ok(())
    }
}

/// What an existing buffer file is.
enum FileKind {
    New,
    Regular,
    DaxDevice,
}

/// The sysfs directory of a character device (`/sys/dev/char/M:m`).
fn char_sysfs(meta: &fs::Metadata) -> PathBuf {
    let rdev = meta.rdev();
    PathBuf::from(format!(
        "/sys/dev/char/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    ))
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// True for a device-DAX character device (its sysfs node sits on the dax
/// bus or in the dax class).
fn is_dax_device(meta: &fs::Metadata) -> bool {
    let sys = char_sysfs(meta);
    let subsystem = fs::read_link(sys.join("subsystem")).unwrap_or_default();
    subsystem.file_name().is_some_and(|n| n == "dax")
}

/// Size and mapping alignment of a device-DAX device, bytes.
fn dax_geometry(meta: &fs::Metadata) -> (Option<u64>, u64) {
    let sys = char_sysfs(meta);
    let size = read_u64(&sys.join("size"));
    let align = read_u64(&sys.join("align")).unwrap_or(2 << 20).max(4096);
    (size, align)
}

fn check_buffer_file(p: &Path, len: u64, allowed: bool) -> Result<FileKind, UsageError> {
    let shown = p.display();
    let meta = match fs::symlink_metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = crate::safefile::dir_of(p);
            if !dir.is_dir() {
                return Err(UsageError::new(
                    BUFFER_FILE,
                    format!(
                        "the directory of {shown} does not exist; create it or name another file"
                    ),
                ));
            }
            // The file is fallocated to the buffer's size; on a full
            // filesystem that fails (or, where fallocate is missing, the
            // mapping dies of SIGBUS at the first page with no block).
            crate::sys::check_room(
                dir,
                len,
                "--buffer",
                &format!("choose a smaller --buffer or a {BUFFER_FILE} on a filesystem with room"),
            )?;
            return Ok(FileKind::New);
        }
        Err(e) => {
            return Err(UsageError::new(
                BUFFER_FILE,
                format!("cannot use {shown}: {e}"),
            ))
        }
        Ok(m) if m.file_type().is_symlink() => {
            if !crate::safefile::symlink_trusted(p, &m) {
                return Err(UsageError::new(
                    BUFFER_FILE,
                    format!("{shown} is a symlink in a directory others may write, owned by someone else; name the file itself"),
                ));
            }
            fs::metadata(p)
                .map_err(|e| UsageError::new(BUFFER_FILE, format!("cannot use {shown}: {e}")))?
        }
        Ok(m) => m,
    };
    let need_allow = |what: &str| {
        UsageError::new(
            BUFFER_FILE,
            format!("{shown} is an existing {what} whose contents the buffer's fill and the DMA would overwrite; pass --allow-destroy={shown} if that is what you want, or name a path that does not exist"),
        )
    };
    let ft = meta.file_type();
    if ft.is_char_device() {
        if !is_dax_device(&meta) {
            return Err(UsageError::new(
                BUFFER_FILE,
                format!("{shown} is a character device that is not a device-DAX device (/dev/daxX.Y); name a DAX device or a file"),
            ));
        }
        if !allowed {
            return Err(need_allow("DAX device"));
        }
        let (size, align) = dax_geometry(&meta);
        let mapped = len.div_ceil(align) * align;
        if let Some(size) = size.filter(|&s| s < mapped) {
            return Err(UsageError::new(
                BUFFER_FILE,
                format!("{shown} holds {size} bytes, less than the buffer ({len} bytes, {mapped} mapped in its {align}-byte alignment); use a smaller --buffer"),
            ));
        }
        return Ok(FileKind::DaxDevice);
    }
    if !ft.is_file() {
        return Err(UsageError::new(
            BUFFER_FILE,
            format!("{shown} is neither a regular file nor a DAX device; name one of those or a new path"),
        ));
    }
    if let Some(u) = crate::safety::kernel_users_of_file(&meta) {
        return Err(UsageError::new(
            BUFFER_FILE,
            format!("{shown} must not be overwritten: {}", u.detail),
        ));
    }
    if !allowed {
        return Err(need_allow("file"));
    }
    if meta.len() < len {
        return Err(UsageError::new(
            BUFFER_FILE,
            format!("{shown} holds {} bytes, less than the buffer ({len} bytes); dmalab never grows or truncates a file it did not create: use a --buffer of at most its size, or name a new path", meta.len()),
        ));
    }
    Ok(FileKind::Regular)
}

/// True when `f` has the DAX attribute (statx `STATX_ATTR_DAX`: the
/// filesystem maps its pages directly, no page cache).
fn file_is_dax(f: &File) -> bool {
    // SAFETY: statx is plain data; zeroed is a valid value to fill.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: AT_EMPTY_PATH with our open descriptor and an empty,
    // NUL-terminated path; `st` is ours.
    let r = unsafe {
        libc::statx(
            f.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BASIC_STATS,
            &mut st,
        )
    };
    r == 0
        && st.stx_attributes_mask & STATX_ATTR_DAX != 0
        && st.stx_attributes & STATX_ATTR_DAX != 0
}

/// True when `f` lives on tmpfs or hugetlbfs, whose pages a device may
/// pin for long (see [`PlacementRecord::long_term_pins`]).
fn in_memory_fs(f: &File) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    // SAFETY: statfs is plain data; zeroed is a valid value to fill.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: our open descriptor and a struct we own.
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    let t = st.f_type as i64;
    t == TMPFS_MAGIC || t == HUGETLBFS_MAGIC
}

/// An owned mapping that backs a buffer; unmapped on drop (and a buffer
/// file dmalab created removed).
#[derive(Debug)]
pub struct Mapping {
    map: *mut u8,
    map_len: usize,
    ptr: *mut u8,
    len: usize,
    spec: PlacementSpec,
    backing: Backing,
    dax: bool,
    map_sync: bool,
    /// The file, kept open while mapped.
    _file: Option<File>,
    /// A buffer file this mapping created (removed on drop).
    created: Option<PathBuf>,
    /// The device's node (sysfs), for a DAX device.
    dax_node: Option<usize>,
    /// See [`PlacementRecord::long_term_pins`].
    long_term_pins: bool,
}

// SAFETY: the mapping is owned by this value and unmapped only on drop;
// it is shared with threads and devices through raw pointers only.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping hands out the pointer only.
unsafe impl Sync for Mapping {}

/// How an anonymous mapping is made (huge pages, alignment).
#[derive(Clone, Copy, Debug)]
pub struct AnonymousOptions {
    /// Extra mmap flags (`MAP_HUGETLB | MAP_HUGE_2MB`, ...).
    pub flags: libc::c_int,
    /// The usable range starts at a multiple of this (over-mapped by one
    /// unit when above 4096 and not hugetlb).
    pub align: usize,
    /// Length is rounded up to a multiple of this.
    pub granule: usize,
}

impl Default for AnonymousOptions {
    fn default() -> Self {
        AnonymousOptions {
            flags: 0,
            align: 4096,
            granule: 4096,
        }
    }
}

impl Mapping {
    /// Maps `len` bytes as `spec` asks: a buffer file (shared, `MAP_SYNC`
    /// where the file offers it) or anonymous memory made as `anon` says,
    /// bound to `spec.membind` before anything touches it. Call
    /// [`PlacementSpec::validate`] first; the checks of the file are made
    /// again here, on the file opened.
    pub fn new(
        len: u64,
        spec: &PlacementSpec,
        anon: AnonymousOptions,
    ) -> Result<Self, PlacementError> {
        let len_usize = usize::try_from(len).map_err(|_| {
            usage(
                "--buffer",
                format!("{len} bytes is too large for this host"),
            )
        })?;
        let mut m = match &spec.buffer_file {
            Some(p) => Self::file(p, len, spec)?,
            None => Self::anonymous(len_usize, anon)?,
        };
        m.spec = spec.clone();
        m.len = len_usize;
        if let (Some(node), Backing::Anonymous) = (spec.membind, m.backing) {
            numa::mbind_bind(m.map as usize, m.map_len, node).map_err(|e| {
                usage(
                    MEMBIND,
                    format!(
                        "cannot bind the buffer to node {node}: {e}; choose a node with memory"
                    ),
                )
            })?;
        }
        Ok(m)
    }

    fn anonymous(len: usize, o: AnonymousOptions) -> Result<Self, PlacementError> {
        let granule = o.granule.max(4096);
        let body = len.div_ceil(granule) * granule;
        let over = o.flags & libc::MAP_HUGETLB == 0 && o.align > 4096;
        let map_len = if over { body + o.align } else { body };
        let map = mmap(
            map_len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | o.flags,
            -1,
        )
        .map_err(|source| PlacementError::Io {
            what: format!("cannot map a {len}-byte buffer"),
            source,
        })?;
        let ptr = if over {
            let a = map as usize;
            // SAFETY: the aligned start is less than `align` past `map`,
            // and the mapping is `body + align` long.
            unsafe { map.add(a.div_ceil(o.align) * o.align - a) }
        } else {
            map
        };
        Ok(Mapping {
            map,
            map_len,
            ptr,
            len,
            spec: PlacementSpec::default(),
            backing: Backing::Anonymous,
            dax: false,
            map_sync: false,
            _file: None,
            created: None,
            dax_node: None,
            long_term_pins: true,
        })
    }

    fn file(p: &Path, len: u64, spec: &PlacementSpec) -> Result<Self, PlacementError> {
        let kind = check_buffer_file(p, len, spec.buffer_file_allowed)?;
        let io = |what: String| move |source| PlacementError::Io { what, source };
        let shown = p.display().to_string();
        let (file, created) = match kind {
            FileKind::New => {
                let f = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .mode(0o600)
                    .open(p)
                    .map_err(io(format!("{BUFFER_FILE}: cannot create {shown}")))?;
                (f, Some(p.to_path_buf()))
            }
            _ => (
                fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(p)
                    .map_err(io(format!("{BUFFER_FILE}: cannot open {shown}")))?,
                None,
            ),
        };
        // From here a created file is removed if anything fails: the
        // mapping below owns it.
        let mut m = Mapping {
            map: std::ptr::null_mut(),
            map_len: 0,
            ptr: std::ptr::null_mut(),
            len: 0,
            spec: PlacementSpec::default(),
            backing: Backing::File,
            dax: false,
            map_sync: false,
            _file: None,
            created,
            dax_node: None,
            long_term_pins: false,
        };
        let meta = file
            .metadata()
            .map_err(io(format!("{BUFFER_FILE}: cannot stat {shown}")))?;
        let mut granule = 4096u64;
        if meta.file_type().is_char_device() {
            // Re-checked on the descriptor: the path may have changed
            // since it was validated.
            if !is_dax_device(&meta) {
                return Err(usage(
                    BUFFER_FILE,
                    format!("{shown} is no longer a device-DAX device"),
                ));
            }
            let (_, align) = dax_geometry(&meta);
            granule = align;
            m.backing = Backing::DaxDevice;
            m.dax = true;
            m.long_term_pins = true;
            m.dax_node = fs::read_to_string(char_sysfs(&meta).join("target_node"))
                .or_else(|_| fs::read_to_string(char_sysfs(&meta).join("numa_node")))
                .ok()
                .and_then(|s| s.trim().parse().ok());
        } else if !meta.file_type().is_file() {
            return Err(usage(
                BUFFER_FILE,
                format!("{shown} is no longer a regular file"),
            ));
        } else {
            if m.created.is_some() {
                let r = {
                    // SAFETY: fallocate on our own descriptor.
                    unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) }
                };
                if r != 0 {
                    // Filesystems without fallocate: a sized file all the
                    // same (its blocks are then allocated on first touch).
                    file.set_len(len).map_err(io(format!(
                        "{BUFFER_FILE}: cannot size {shown} to {len} bytes"
                    )))?;
                }
            } else if meta.len() < len {
                return Err(usage(
                    BUFFER_FILE,
                    format!(
                        "{shown} now holds {} bytes, less than the buffer",
                        meta.len()
                    ),
                ));
            }
            m.dax = file_is_dax(&file);
            m.long_term_pins = !m.dax && in_memory_fs(&file);
        }
        let map_len = (len.div_ceil(granule) * granule) as usize;
        let fd = file.as_raw_fd();
        let (map, sync) = match mmap(map_len, MAP_SHARED_VALIDATE | MAP_SYNC, fd) {
            Ok(p) => (p, true),
            // EOPNOTSUPP (no DAX), EINVAL (an old kernel): plain shared.
            Err(_) => (
                mmap(map_len, libc::MAP_SHARED, fd).map_err(io(format!(
                    "{BUFFER_FILE}: cannot map {map_len} bytes of {shown} shared"
                )))?,
                false,
            ),
        };
        m.map = map;
        m.map_len = map_len;
        m.ptr = map;
        m.map_sync = sync;
        m._file = Some(file);
        Ok(m)
    }

    /// Start of the usable range.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Usable length, bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What backs it.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Asks the kernel where every `page_bytes` page of the buffer sits
    /// (call after the pages were faulted in: locked or filled). With
    /// `--membind`, a page anywhere else, or one the kernel cannot name,
    /// is refused: the measurement would not be of the node asked for.
    pub fn verify(&self, page_bytes: u64) -> Result<PlacementRecord, PlacementError> {
        let page = page_bytes.max(4096);
        let status = numa::page_nodes(self.ptr, self.len, page as usize).map_err(|source| {
            PlacementError::Io {
                what: "move_pages (asking where the buffer's pages are)".into(),
                source,
            }
        })?;
        let mut nodes: Vec<NodePages> = Vec::new();
        let mut unknown = 0u64;
        for s in &status {
            match usize::try_from(*s) {
                Ok(n) => match nodes.iter_mut().find(|x| x.node == n) {
                    Some(x) => x.pages += 1,
                    None => nodes.push(NodePages { node: n, pages: 1 }),
                },
                Err(_) => unknown += 1,
            }
        }
        let mut source = "move_pages";
        if nodes.is_empty() && self.backing == Backing::DaxDevice {
            // Device pages the kernel's page walk does not name: the
            // device's own node is where every one of them is.
            if let Some(n) = self.dax_node {
                nodes.push(NodePages {
                    node: n,
                    pages: unknown,
                });
                unknown = 0;
                source = "sysfs";
            }
        }
        nodes.sort_by_key(|n| n.node);
        let record = PlacementRecord {
            backing: self.backing,
            buffer_file: self.spec.buffer_file.clone(),
            buffer_file_created: self.created.is_some(),
            dax: self.dax,
            map_sync: self.map_sync,
            membind: self.spec.membind,
            nodes,
            unknown_pages: unknown,
            nodes_source: source.into(),
            page_bytes: page,
            long_term_pins: self.long_term_pins,
        };
        if let Some(want) = self.spec.membind {
            check_on_node(&record, want)?;
        }
        Ok(record)
    }
}

/// Refuses a record with any page off `want` (or of unknown node).
fn check_on_node(r: &PlacementRecord, want: usize) -> Result<(), UsageError> {
    let total: u64 = r.nodes.iter().map(|n| n.pages).sum::<u64>() + r.unknown_pages;
    let off: Vec<String> = r
        .nodes
        .iter()
        .filter(|n| n.node != want)
        .map(|n| format!("{} on node {}", n.pages, n.node))
        .chain(
            (r.unknown_pages > 0)
                .then(|| format!("{} on no node the kernel could name", r.unknown_pages)),
        )
        .collect();
    if off.is_empty() {
        return Ok(());
    }
    let what = match &r.buffer_file {
        Some(p) => format!("the buffer in {}", p.display()),
        None => "the buffer".into(),
    };
    Err(UsageError::new(
        MEMBIND,
        format!(
            "{} of the {total} pages of {what} are not on node {want} ({}); the kernel placed them elsewhere (node {want} full, or a backing fixed on another node): free memory on node {want}, choose another node, or drop {MEMBIND}",
            total - r.nodes.iter().find(|n| n.node == want).map_or(0, |n| n.pages),
            off.join(", ")
        ),
    ))
}

fn mmap(len: usize, flags: libc::c_int, fd: libc::c_int) -> std::io::Result<*mut u8> {
    // SAFETY: a new mapping at an address the kernel picks; the result is
    // checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !self.map.is_null() {
            // SAFETY: our own mapping, unmapped once; nothing uses it after
            // drop.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
        if let Some(p) = &self.created {
            let _ = fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(node: Option<usize>) -> PlacementSpec {
        PlacementSpec {
            membind: node,
            ..Default::default()
        }
    }

    #[test]
    fn nodes_are_checked_against_the_host() {
        let e = spec(Some(7))
            .validate_on(4096, &[0, 1], &[0, 1])
            .unwrap_err();
        assert_eq!(e.option, "--membind");
        assert!(e.message.contains("node 7 does not exist"), "{e}");
        let e = spec(Some(1)).validate_on(4096, &[0, 1], &[0]).unwrap_err();
        assert!(e.message.contains("node 1 has no memory"), "{e}");
        spec(Some(1)).validate_on(4096, &[0, 1], &[0, 1]).unwrap();
    }

    #[test]
    fn anonymous_buffer_on_a_node_is_verified() {
        let node = numa::memory_nodes()[0];
        let m = Mapping::new(64 << 10, &spec(Some(node)), AnonymousOptions::default()).unwrap();
        // SAFETY: the mapping is ours and 64 KiB long.
        unsafe { std::ptr::write_bytes(m.as_ptr(), 3, m.len()) };
        let r = m.verify(4096).unwrap();
        assert_eq!(r.nodes, vec![NodePages { node, pages: 16 }]);
        assert_eq!(r.backing, Backing::Anonymous);
        assert_eq!(r.nodes_source, "move_pages");
    }

    #[test]
    fn a_page_off_the_node_is_refused() {
        let r = PlacementRecord {
            backing: Backing::Anonymous,
            buffer_file: None,
            buffer_file_created: false,
            dax: false,
            map_sync: false,
            membind: Some(1),
            nodes: vec![
                NodePages { node: 0, pages: 3 },
                NodePages { node: 1, pages: 13 },
            ],
            unknown_pages: 0,
            nodes_source: "move_pages".into(),
            page_bytes: 4096,
            long_term_pins: true,
        };
        let e = check_on_node(&r, 1).unwrap_err();
        assert_eq!(e.option, "--membind");
        assert!(e.message.starts_with("3 of the 16 pages"), "{e}");
        check_on_node(&r, 0).unwrap_err();
        let mut ok = r.clone();
        ok.nodes.remove(0);
        check_on_node(&ok, 1).unwrap();
    }

    #[test]
    fn created_file_is_removed_and_existing_one_needs_allowing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("buf");
        let s = PlacementSpec {
            buffer_file: Some(p.clone()),
            ..Default::default()
        };
        s.validate(1 << 20).unwrap();
        {
            let m = Mapping::new(1 << 20, &s, AnonymousOptions::default()).unwrap();
            // SAFETY: the mapping is ours and 1 MiB long.
            unsafe { std::ptr::write_bytes(m.as_ptr(), 7, m.len()) };
            let r = m.verify(4096).unwrap();
            assert_eq!(r.backing, Backing::File);
            assert!(r.buffer_file_created);
            assert_eq!(fs::metadata(&p).unwrap().len(), 1 << 20);
        }
        assert!(!p.exists(), "a created buffer file is removed");
        // An existing file: refused unless allowed, never resized.
        fs::write(&p, vec![1u8; 8192]).unwrap();
        let e = s.validate(8192).unwrap_err();
        assert!(e.message.contains("--allow-destroy="), "{e}");
        let allowed = PlacementSpec {
            buffer_file_allowed: true,
            ..s.clone()
        };
        let e = allowed.validate(16384).unwrap_err();
        assert!(e.message.contains("holds 8192 bytes"), "{e}");
        {
            let m = Mapping::new(4096, &allowed, AnonymousOptions::default()).unwrap();
            // SAFETY: ours, 4096 bytes.
            unsafe { std::ptr::write_bytes(m.as_ptr(), 9, 4096) };
            assert!(!m.verify(4096).unwrap().buffer_file_created);
        }
        let back = fs::read(&p).unwrap();
        assert_eq!(back.len(), 8192, "an existing file is not truncated");
        assert_eq!(
            (back[0], back[4096]),
            (9, 1),
            "shared: the write reached the file"
        );
    }

    #[test]
    fn other_character_devices_are_refused() {
        let s = PlacementSpec {
            buffer_file: Some("/dev/null".into()),
            buffer_file_allowed: true,
            ..Default::default()
        };
        let e = s.validate(4096).unwrap_err();
        assert!(e.message.contains("not a device-DAX device"), "{e}");
    }
}
