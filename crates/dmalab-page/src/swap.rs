//! Swap areas dmalab adds for a run: a new zram device, a swap file, or a
//! block device the user names; swapon at the highest priority, swapoff and
//! removal afterwards.

use crate::config::PAGE_SIZE;
use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Undoing a swap or a zram device is the ledger's: one swapoff and one
/// zram removal for page and for `cleanup`.
pub use dmalab_core::ledger::step::{swapoff, zram_remove};

const ZRAM_CONTROL: &str = "/sys/class/zram-control";

/// True when this kernel can add zram devices on demand.
pub fn zram_available() -> bool {
    Path::new(ZRAM_CONTROL).join("hot_add").exists()
}

/// Compression algorithms a zram device offers (the kernel's default is the
/// one in brackets).
pub fn zram_algorithms(id: u32) -> Vec<String> {
    fs::read_to_string(format!("/sys/block/zram{id}/comp_algorithm"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|a| a.trim_matches(|c| c == '[' || c == ']').to_string())
        .collect()
}

/// Takes a new zram device (reading `hot_add` creates one and returns its
/// number; devices the host already has are never touched).
pub fn zram_hot_add() -> io::Result<u32> {
    let s = fs::read_to_string(Path::new(ZRAM_CONTROL).join("hot_add"))?;
    s.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("zram hot_add returned '{}'", s.trim())))
}

/// Sets algorithm and size of a fresh zram device.
pub fn zram_configure(id: u32, size_bytes: u64, algorithm: Option<&str>) -> io::Result<()> {
    let dir = PathBuf::from(format!("/sys/block/zram{id}"));
    if let Some(a) = algorithm {
        fs::write(dir.join("comp_algorithm"), a)?;
    }
    fs::write(dir.join("disksize"), size_bytes.to_string())
}

/// Writes a version-1 Linux swap header (what mkswap writes) at the start
/// of `f`, covering `size_bytes`.
pub fn write_swap_header(f: &mut fs::File, size_bytes: u64) -> io::Result<()> {
    let pages = size_bytes / PAGE_SIZE;
    if pages < 10 {
        return Err(io::Error::other("swap area smaller than 10 pages"));
    }
    let mut page = vec![0u8; PAGE_SIZE as usize];
    // struct swap_header_v1_2 starts at byte 1024: version, last_page,
    // nr_badpages, uuid[16], volume_name[16], ...
    page[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    let last = u32::try_from(pages - 1).unwrap_or(u32::MAX);
    page[1028..1032].copy_from_slice(&last.to_ne_bytes());
    let label = b"dmalab-page";
    page[1052..1052 + label.len()].copy_from_slice(label);
    let magic = b"SWAPSPACE2";
    let at = PAGE_SIZE as usize - magic.len();
    page[at..].copy_from_slice(magic);
    use std::io::Seek;
    f.seek(io::SeekFrom::Start(0))?;
    f.write_all(&page)?;
    f.sync_all()
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path holds a NUL byte"))
}

/// Highest priority among active swap areas (None: no swap active).
pub fn max_priority() -> Option<i32> {
    dmalab_core::sys::swaps::read_swaps()
        .iter()
        .map(|s| s.priority)
        .max()
}

/// swapon `path` above every active area; returns the priority used.
pub fn swapon_highest(path: &Path) -> io::Result<i32> {
    let prio = max_priority().map_or(100, |m| (m + 1).clamp(0, 32767));
    let c = cpath(path)?;
    // <linux/swap.h>: SWAP_FLAG_PREFER 0x8000, SWAP_FLAG_PRIO_MASK 0x7fff.
    let flags = 0x8000 | (prio & 0x7fff);
    // SAFETY: c is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::swapon(c.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(prio)
}

/// Filesystems that cannot hold a swap file (no bmap/swap_activate).
pub const NO_SWAPFILE_FS: [&str; 9] = [
    "tmpfs", "ramfs", "proc", "sysfs", "overlay", "devtmpfs", "cgroup", "cgroup2", "squashfs",
];

/// Creates a swap file of `size_bytes` at `path` (fully written, no holes)
/// with a swap header. The file must not exist yet; if writing it fails
/// (ENOSPC after all, an interrupt), what was written is removed: the file
/// is ours (created here, `O_EXCL`), and half a swap file is of no use.
pub fn create_swap_file(path: &Path, size_bytes: u64) -> io::Result<()> {
    let f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    write_swap_file(f, size_bytes).inspect_err(|_| {
        let _ = fs::remove_file(path);
    })
}

fn write_swap_file(mut f: fs::File, size_bytes: u64) -> io::Result<()> {
    let chunk = vec![0u8; 1 << 20];
    let mut left = size_bytes - size_bytes % PAGE_SIZE;
    let bar = dmalab_core::progress::Bar::bytes("writing the swap file", left);
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
        bar.inc(n as u64);
    }
    bar.set_message("syncing the swap file");
    write_swap_header(&mut f, size_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        create_swap_file(&p, 1 << 20).unwrap();
        let b = fs::read(&p).unwrap();
        assert_eq!(b.len(), 1 << 20);
        assert_eq!(&b[4086..4096], b"SWAPSPACE2");
        assert_eq!(u32::from_ne_bytes(b[1024..1028].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(b[1028..1032].try_into().unwrap()), 255);
        // Never overwrites an existing file.
        assert!(create_swap_file(&p, 1 << 20).is_err());
        assert_eq!(fs::read(&p).unwrap().len(), 1 << 20);
    }

    /// A swap file that does not fit (ENOSPC past the preflight: another
    /// writer took the room) is removed, not left half written: the
    /// previous code left 13 MiB of a 64 MiB swap file on a 16 MiB disk.
    #[test]
    fn a_swap_file_that_runs_out_of_room_is_removed() {
        if !dmalab_core::sys::is_root() {
            assert!(
                std::env::var("DMALAB_CI").map_or(true, |v| v != "1"),
                "DMALAB_CI=1 and this test needs root to mount a tmpfs"
            );
            eprintln!("SKIPPED: this test needs root (to mount a 1 MiB tmpfs)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs failed");
        let p = dir.path().join("s");
        let r = create_swap_file(&p, 4 << 20);
        let left = p.exists();
        let _ = std::process::Command::new("umount")
            .arg(dir.path())
            .status();
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert!(!left, "a half-written swap file was left");
    }
}
