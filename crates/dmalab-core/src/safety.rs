//! The device safety guard: may dmalab make a device write host data to a
//! target?
//!
//! One set of rules for every command that writes to storage (`dmalab load
//! --direction read`, the NVMe engine, `dmalab page --swap dev:PATH`):
//!
//! * A file dmalab created in this run: always allowed.
//! * An existing regular file: only with `--allow-destroy=<that file>`, and
//!   never when it is the backing file of a loop device (mounted, read-only
//!   or only attached) or an active swap file, whatever path reaches it: the
//!   file's device and inode are compared ([`kernel_users_of_file`]), so
//!   hard links, symlinks and bind mounts are caught.
//! * A block device: only with `--allow-destroy=<that device>` (the same path
//!   after resolving symlinks), and only when it
//!   1. is not mounted, nor any of its partitions (`/proc/self/mountinfo`),
//!      and is not active swap (`/proc/swaps`),
//!   2. has no holders (device-mapper, MD RAID, bcache: `/sys/block/X/holders`,
//!      also the holders of its partitions),
//!   3. has no partitions (`/sys/block/X/*/partition`),
//!   4. carries no filesystem, RAID, LVM, swap, LUKS or partition-table
//!      signature in its first or last 4 MiB. The magics are checked here,
//!      in Rust ([`find_signature`]), so the guard needs no external tool and
//!      tests can pin it; the list covers what `wipefs` would erase on the
//!      devices dmalab is meant for (see [`SIGNATURES`]).
//! * An NVMe generic character device `/dev/ngXnY` is judged by its block
//!   device `/dev/nvmeXnY` ([`block_device_for_nvme_generic`]); the user may
//!   name either path in `--allow-destroy`.
//! * Anything else (directories, other character devices): refused.
//!
//! Reading from storage never needs the flag. A refusal names the check that
//! failed ([`Refusal::check`]).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Bytes examined for signatures at each end of a block device.
pub const SCAN_BYTES: u64 = 4 << 20;

/// Why a target may not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing to write to {path}: {check} check failed: {detail}")]
pub struct Refusal {
    /// The target the user named.
    pub path: String,
    /// The check that failed: `allow-destroy`, `loop`, `mounted`, `swap`,
    /// `holders`, `partitions`, `signature`, `kind`, `readable`.
    pub check: &'static str,
    /// What was found and what to do.
    pub detail: String,
}

fn refuse(path: &Path, check: &'static str, detail: impl Into<String>) -> Refusal {
    Refusal {
        path: path.display().to_string(),
        check,
        detail: detail.into(),
    }
}

/// What the guard knows about a target before deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// dmalab created this file in this run (it held nothing of the user's).
    CreatedThisRun,
    /// The path existed before the run.
    Existing,
}

/// Decides whether a run may make the device write host data to `target`.
///
/// `allow_destroy` is the path given with `--allow-destroy`, if any. Returns
/// the block device that was checked (for block and NVMe generic targets).
pub fn check_write_target(
    target: &Path,
    origin: Origin,
    allow_destroy: Option<&Path>,
) -> Result<Option<PathBuf>, Refusal> {
    if origin == Origin::CreatedThisRun {
        return Ok(None);
    }
    let meta =
        fs::metadata(target).map_err(|e| refuse(target, "kind", format!("cannot stat it: {e}")))?;
    let ft = meta.file_type();
    let named = |p: &Path| allow_destroy.is_some_and(|a| same_path(a, p));
    let need_flag = |what: &str| {
        refuse(
            target,
            "allow-destroy",
            format!(
                "it is an existing {what} whose contents would be overwritten; pass --allow-destroy={} if that is what you want",
                target.display()
            ),
        )
    };
    if ft.is_file() {
        // Before the flag: naming a loop device's image or a swap file in
        // --allow-destroy does not make overwriting it safe.
        if let Some(user) = kernel_users_of_file(&meta) {
            return Err(refuse(target, user.check, user.detail));
        }
        if !named(target) {
            return Err(need_flag("regular file"));
        }
        return Ok(None);
    }
    if ft.is_block_device() {
        if !named(target) {
            return Err(need_flag("block device"));
        }
        check_block_device(target)?;
        return Ok(Some(target.to_path_buf()));
    }
    if ft.is_char_device() {
        let Some(block) = block_device_for_nvme_generic(target) else {
            return Err(refuse(
                target,
                "kind",
                "it is a character device that is not an NVMe generic namespace device (/dev/ngXnY); dmalab writes only to files, block devices and NVMe namespaces",
            ));
        };
        if !named(target) && !named(&block) {
            return Err(need_flag("NVMe namespace"));
        }
        check_block_device(&block).map_err(|mut r| {
            r.path = format!("{} (checked as {})", target.display(), block.display());
            r
        })?;
        return Ok(Some(block));
    }
    Err(refuse(
        target,
        "kind",
        "it is neither a regular file nor a block device",
    ))
}

/// A file's identity: the device holding it and its inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    /// `st_dev` of the file.
    pub dev: u64,
    /// `st_ino` of the file.
    pub ino: u64,
}

impl FileId {
    /// The identity of what `meta` describes.
    pub fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// The identity of the file `path` reaches (symlinks followed).
    pub fn of_path(path: &Path) -> Option<Self> {
        fs::metadata(path).ok().map(|m| Self::of(&m))
    }
}

/// The kernel uses a regular file as storage: what uses it and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileUser {
    /// The guard check that names it: `loop` or `swap`.
    pub check: &'static str,
    /// Which loop device (and its mount point) or swap area.
    pub detail: String,
}

/// An attached loop device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub dev: PathBuf,
    /// Its `major:minor`.
    pub devno: (u32, u32),
    /// The backing file as the kernel names it (may say `(deleted)`).
    pub backing_file: String,
    /// Identity of the backing file (from `LOOP_GET_STATUS64`, or by
    /// `stat` of the name when the device cannot be opened).
    pub backing: Option<FileId>,
}

/// Every attached loop device (`/sys/block/loop*/loop/backing_file`).
pub fn loop_devices() -> Vec<LoopDevice> {
    let mut v = Vec::new();
    for name in list_dir(Path::new("/sys/block")) {
        if !name.starts_with("loop") {
            continue;
        }
        let sys = Path::new("/sys/block").join(&name);
        let Ok(backing_file) = fs::read_to_string(sys.join("loop/backing_file")) else {
            continue;
        };
        let backing_file = backing_file.trim_end_matches('\n').to_string();
        let Some(devno) = devno_of_sysfs(&sys) else {
            continue;
        };
        let dev = PathBuf::from("/dev").join(&name);
        let backing = loop_backing_id(&dev).or_else(|| {
            FileId::of_path(Path::new(
                backing_file
                    .strip_suffix(" (deleted)")
                    .unwrap_or(&backing_file),
            ))
        });
        v.push(LoopDevice {
            dev,
            devno,
            backing_file,
            backing,
        });
    }
    v
}

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;

/// Device and inode of the file behind the loop device `dev`
/// (`LOOP_GET_STATUS64`); `None` when `dev` is no attached loop device or
/// cannot be opened.
pub fn loop_backing_id(dev: &Path) -> Option<FileId> {
    use std::os::unix::io::AsRawFd;
    // Only a block device is opened (opening a FIFO could block).
    if !fs::metadata(dev).ok()?.file_type().is_block_device() {
        return None;
    }
    let f = fs::File::open(dev).ok()?;
    // SAFETY: loop_info64 is plain old data; all zero is a valid value.
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: LOOP_GET_STATUS64 fills a struct loop_info64 we own; the fd
    // is open for the duration of the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), LOOP_GET_STATUS64 as _, &mut info) };
    if r != 0 {
        return None;
    }
    Some(FileId {
        dev: info.lo_device,
        ino: info.lo_inode,
    })
}

/// Whether the kernel uses the regular file `meta` describes as storage:
/// the backing file of a loop device (mounted or not) or an active swap
/// file. Compared by device and inode, so any path to it counts.
pub fn kernel_users_of_file(meta: &fs::Metadata) -> Option<FileUser> {
    let id = FileId::of(meta);
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for l in loop_devices() {
        if l.backing != Some(id) {
            continue;
        }
        let dev = l.dev.display();
        let detail = match mounted_at(&mountinfo, &[l.devno]) {
            Some(mp) => format!(
                "it is the backing file of {dev}, whose filesystem is mounted at {mp}; unmount it and detach {dev} (losetup -d {dev}) first"
            ),
            None => format!(
                "it is the backing file of the loop device {dev}; detach it first (losetup -d {dev})"
            ),
        };
        return Some(FileUser {
            check: "loop",
            detail,
        });
    }
    for sw in crate::sys::swaps::read_swaps() {
        if FileId::of_path(&sw.path) == Some(id) {
            return Some(FileUser {
                check: "swap",
                detail: format!(
                    "it is the active swap file {}; swapoff it first",
                    sw.path.display()
                ),
            });
        }
    }
    None
}

/// True when two paths name the same file after resolving symlinks (or are
/// textually equal when either cannot be resolved).
pub fn same_path(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// `/dev/ngXnY` -> `/dev/nvmeXnY` when that block device exists.
pub fn block_device_for_nvme_generic(path: &Path) -> Option<PathBuf> {
    let canon = fs::canonicalize(path).ok()?;
    let name = canon.file_name()?.to_str()?;
    let rest = name.strip_prefix("ng")?;
    let (ctrl, ns) = rest.split_once('n')?;
    if ctrl.is_empty()
        || ns.is_empty()
        || !ctrl.bytes().all(|b| b.is_ascii_digit())
        || !ns.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let block = canon.with_file_name(format!("nvme{ctrl}n{ns}"));
    fs::metadata(&block)
        .ok()
        .filter(|m| m.file_type().is_block_device())
        .map(|_| block)
}

/// Runs every block-device check (mounts, swap, holders, partitions,
/// signatures) on `dev`, without looking at `--allow-destroy`.
pub fn check_block_device(dev: &Path) -> Result<(), Refusal> {
    let meta =
        fs::metadata(dev).map_err(|e| refuse(dev, "kind", format!("cannot stat it: {e}")))?;
    if !meta.file_type().is_block_device() {
        return Err(refuse(dev, "kind", "it is not a block device"));
    }
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).map_err(|e| {
        refuse(
            dev,
            "kind",
            format!("no sysfs entry for device {major}:{minor}: {e}"),
        )
    })?;
    let name = sys
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parts = partitions(&sys);

    // 1. Mounted (the device itself or any partition), or active swap.
    let mut devnos = vec![(major, minor)];
    devnos.extend(parts.iter().filter_map(|p| devno_of_sysfs(p)));
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(mp) = mounted_at(&mountinfo, &devnos) {
        return Err(refuse(
            dev,
            "mounted",
            format!("{name} (or one of its partitions) is mounted at {mp}; unmount it first"),
        ));
    }
    let mut names = vec![name.clone()];
    names.extend(
        parts
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
    );
    for sw in crate::sys::swaps::read_swaps() {
        let sw = sw.path;
        let sw_name = sw.file_name().map(|n| n.to_string_lossy().into_owned());
        let canon_name = fs::canonicalize(&sw)
            .ok()
            .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()));
        if names
            .iter()
            .any(|n| Some(n) == sw_name.as_ref() || Some(n) == canon_name.as_ref())
        {
            return Err(refuse(
                dev,
                "swap",
                format!("{} is in use as swap; swapoff it first", sw.display()),
            ));
        }
    }

    // 2. Holders (device-mapper, MD, bcache) of the device or its partitions.
    for d in std::iter::once(&sys).chain(parts.iter()) {
        let holders = list_dir(&d.join("holders"));
        if !holders.is_empty() {
            return Err(refuse(
                dev,
                "holders",
                format!(
                    "{} is held by {} (device-mapper, RAID or similar); tear that down first",
                    d.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default(),
                    holders.join(", ")
                ),
            ));
        }
    }

    // 3. Partitions.
    if !parts.is_empty() {
        let pnames: Vec<String> = parts
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        return Err(refuse(
            dev,
            "partitions",
            format!(
                "{name} has partitions ({}); use a device without a partition table",
                pnames.join(", ")
            ),
        ));
    }

    // 4. Signatures in the first and last SCAN_BYTES.
    let size = fs::read_to_string(sys.join("size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(0, |sectors| sectors * 512);
    let (head, tail, tail_start) = read_ends(dev, size).map_err(|e| {
        refuse(
            dev,
            "readable",
            format!("cannot read it to look for signatures: {e}"),
        )
    })?;
    if let Some(sig) = find_signature(&head, &tail, tail_start, size) {
        return Err(refuse(
            dev,
            "signature",
            format!("it carries a {sig}; erase it yourself (wipefs -a) if the data is not needed"),
        ));
    }
    Ok(())
}

fn list_dir(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Partition directories (`/sys/block/X/X1`, ...) of a disk's sysfs entry.
fn partitions(sys: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(sys)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("partition").exists())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn devno_of_sysfs(dir: &Path) -> Option<(u32, u32)> {
    let s = fs::read_to_string(dir.join("dev")).ok()?;
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The mount point of the first mountinfo line whose device (field 3,
/// `major:minor`) is in `devnos`.
pub fn mounted_at(mountinfo: &str, devnos: &[(u32, u32)]) -> Option<String> {
    for line in mountinfo.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(dev), Some(mp)) = (f.get(2), f.get(4)) else {
            continue;
        };
        let Some((a, b)) = dev.split_once(':') else {
            continue;
        };
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            if devnos.contains(&(a, b)) {
                return Some(crate::host::unescape_mount(mp));
            }
        }
    }
    None
}

fn read_ends(dev: &Path, size: u64) -> std::io::Result<(Vec<u8>, Vec<u8>, u64)> {
    let mut f = fs::File::open(dev)?;
    let size = if size == 0 {
        f.seek(SeekFrom::End(0))?
    } else {
        size
    };
    let head_len = SCAN_BYTES.min(size);
    let mut head = vec![0u8; head_len as usize];
    f.seek(SeekFrom::Start(0))?;
    f.read_exact(&mut head)?;
    let tail_start = size.saturating_sub(SCAN_BYTES);
    let mut tail = vec![0u8; (size - tail_start) as usize];
    f.seek(SeekFrom::Start(tail_start))?;
    f.read_exact(&mut tail)?;
    Ok((head, tail, tail_start))
}

/// A signature: a name, the bytes, and where they sit from the start of the
/// device.
pub struct Signature {
    /// What it means (`ext2/3/4 filesystem`).
    pub name: &'static str,
    /// Byte offset from the start of the device.
    pub offset: u64,
    /// The magic bytes.
    pub magic: &'static [u8],
}

/// Fixed-offset signatures at the start of a device.
pub const SIGNATURES: &[Signature] = &[
    Signature {
        name: "ext2/3/4 filesystem",
        offset: 1080,
        magic: &[0x53, 0xef],
    },
    Signature {
        name: "XFS filesystem",
        offset: 0,
        magic: b"XFSB",
    },
    Signature {
        name: "btrfs filesystem",
        offset: 65600,
        magic: b"_BHRfS_M",
    },
    Signature {
        name: "F2FS filesystem",
        offset: 1024,
        magic: &[0x10, 0x20, 0xf5, 0xf2],
    },
    Signature {
        name: "FAT filesystem",
        offset: 54,
        magic: b"FAT1",
    },
    Signature {
        name: "FAT32 filesystem",
        offset: 82,
        magic: b"FAT32   ",
    },
    Signature {
        name: "NTFS filesystem",
        offset: 3,
        magic: b"NTFS    ",
    },
    Signature {
        name: "exFAT filesystem",
        offset: 3,
        magic: b"EXFAT   ",
    },
    Signature {
        name: "ISO 9660 filesystem",
        offset: 32769,
        magic: b"CD001",
    },
    Signature {
        name: "squashfs filesystem",
        offset: 0,
        magic: b"hsqs",
    },
    Signature {
        name: "LUKS encrypted volume",
        offset: 0,
        magic: b"LUKS\xba\xbe",
    },
    Signature {
        name: "swap area",
        offset: 4086,
        magic: b"SWAPSPACE2",
    },
    Signature {
        name: "swap area",
        offset: 4086,
        magic: b"SWAP-SPACE",
    },
    Signature {
        name: "GPT partition table",
        offset: 512,
        magic: b"EFI PART",
    },
    Signature {
        name: "GPT partition table",
        offset: 4096,
        magic: b"EFI PART",
    },
    Signature {
        name: "MD RAID superblock (1.1)",
        offset: 0,
        magic: &[0xfc, 0x4e, 0x2b, 0xa9],
    },
    Signature {
        name: "MD RAID superblock (1.2)",
        offset: 4096,
        magic: &[0xfc, 0x4e, 0x2b, 0xa9],
    },
    Signature {
        name: "bcache superblock",
        offset: 4096 + 24,
        magic: &[0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca],
    },
    Signature {
        name: "ZFS label",
        offset: 0x20000 - 0x400,
        magic: &[0x0c, 0xb1, 0xba, 0x00],
    },
];

/// Looks for a known signature in the first (`head`) and last (`tail`,
/// starting at byte `tail_start` of a `size`-byte device) bytes of a device.
pub fn find_signature(head: &[u8], tail: &[u8], tail_start: u64, size: u64) -> Option<String> {
    let at = |buf: &[u8], off: u64, magic: &[u8]| {
        let off = off as usize;
        buf.get(off..off + magic.len()) == Some(magic)
    };
    for s in SIGNATURES {
        if at(head, s.offset, s.magic) {
            return Some(format!("{} signature at byte {}", s.name, s.offset));
        }
    }
    // LVM2 physical volume: "LABELONE" in one of the first four sectors.
    for sector in 0..4u64 {
        if at(head, sector * 512, b"LABELONE") {
            return Some(format!(
                "LVM2 physical volume label at byte {}",
                sector * 512
            ));
        }
    }
    // DOS/MBR partition table (or a boot sector): 0x55AA at byte 510.
    if at(head, 510, &[0x55, 0xaa]) {
        return Some(
            "DOS/MBR partition table or boot sector signature (0x55AA) at byte 510".into(),
        );
    }
    // Near the end: MD RAID 0.90/1.0 superblocks (4 KiB aligned), the
    // backup GPT header in the last sector (512 or 4096-byte sectors).
    let tail_at = |pos: u64, magic: &[u8]| pos >= tail_start && at(tail, pos - tail_start, magic);
    for back in [512u64, 4096] {
        if size >= back && tail_at(size - back, b"EFI PART") {
            return Some(format!("backup GPT header at byte {}", size - back));
        }
    }
    let mut pos = tail_start.div_ceil(4096) * 4096;
    while pos + 4 <= size {
        if tail_at(pos, &[0xfc, 0x4e, 0x2b, 0xa9]) {
            return Some(format!("MD RAID superblock (0.90/1.0) at byte {pos}"));
        }
        pos += 4096;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(buf: &mut [u8], off: usize, magic: &[u8]) {
        buf[off..off + magic.len()].copy_from_slice(magic);
    }

    #[test]
    fn clean_bytes_have_no_signature() {
        let head = vec![0u8; 1 << 20];
        let tail = vec![0xa5u8; 1 << 20];
        assert_eq!(find_signature(&head, &tail, 9 << 20, 10 << 20), None);
    }

    #[test]
    fn finds_each_signature() {
        for s in SIGNATURES {
            let mut head = vec![0u8; 1 << 20];
            put(&mut head, s.offset as usize, s.magic);
            let found = find_signature(&head, &[], 1 << 20, 1 << 20).unwrap();
            assert!(found.contains(s.name), "{found} vs {}", s.name);
        }
        let mut head = vec![0u8; 4096];
        put(&mut head, 512, b"LABELONE");
        assert!(find_signature(&head, &[], 0, 4096)
            .unwrap()
            .contains("LVM2"));
        let mut head = vec![0u8; 4096];
        put(&mut head, 510, &[0x55, 0xaa]);
        assert!(find_signature(&head, &[], 0, 4096).unwrap().contains("MBR"));
    }

    #[test]
    fn finds_tail_signatures() {
        let size = 64u64 << 20;
        let tail_start = size - (4 << 20);
        let mut tail = vec![0u8; 4 << 20];
        let md = (size - 8192 - tail_start) as usize;
        put(&mut tail, md, &[0xfc, 0x4e, 0x2b, 0xa9]);
        assert!(find_signature(&[], &tail, tail_start, size)
            .unwrap()
            .contains("MD RAID"));
        let mut tail = vec![0u8; 4 << 20];
        put(&mut tail, (4 << 20) - 512, b"EFI PART");
        assert!(find_signature(&[], &tail, tail_start, size)
            .unwrap()
            .contains("backup GPT"));
    }

    #[test]
    fn mountinfo_matching() {
        let mi = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                  40 22 7:3 / /mnt/a\\040b rw - ext4 /dev/loop3 rw\n";
        assert_eq!(mounted_at(mi, &[(7, 3)]).as_deref(), Some("/mnt/a b"));
        assert_eq!(mounted_at(mi, &[(7, 4)]), None);
    }

    #[test]
    fn files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, b"keep me").unwrap();
        let r = check_write_target(&p, Origin::Existing, None).unwrap_err();
        assert_eq!(r.check, "allow-destroy");
        let other = dir.path().join("g");
        let r = check_write_target(&p, Origin::Existing, Some(&other)).unwrap_err();
        assert_eq!(r.check, "allow-destroy");
        assert!(check_write_target(&p, Origin::Existing, Some(&p)).is_ok());
        assert!(check_write_target(&p, Origin::CreatedThisRun, None).is_ok());
        let r = check_write_target(dir.path(), Origin::Existing, Some(dir.path())).unwrap_err();
        assert_eq!(r.check, "kind");
    }

    #[test]
    fn nvme_generic_names() {
        assert_eq!(block_device_for_nvme_generic(Path::new("/dev/null")), None);
        assert_eq!(block_device_for_nvme_generic(Path::new("/dev/ngx")), None);
    }
}
