//! The size of a block device (`BLKGETSIZE64`), checked.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

/// Size of the open block device `f`, bytes. Fails (instead of reporting 0)
/// when `f` is not a block device or the kernel refuses the ioctl.
pub fn block_device_size(f: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: the fd is open for the call's duration and BLKGETSIZE64
    // writes one u64 into the variable we own.
    if unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64, &mut size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blkgetsize64_failure_is_an_error_not_size_zero() {
        let f = tempfile::tempfile().unwrap();
        let e = block_device_size(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
    }

    #[test]
    fn a_block_device_has_its_sysfs_size() {
        // Any readable block device of this host with a size (an unbound loop
        // device has none); skipped where there is none.
        let Some((dev, sectors)) = std::fs::read_dir("/sys/class/block")
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let sectors: u64 = std::fs::read_to_string(e.path().join("size"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&n: &u64| n > 0)?;
                let f = File::open(format!("/dev/{name}")).ok()?;
                Some((f, sectors))
            })
        else {
            eprintln!("skipped: no readable block device");
            return;
        };
        assert_eq!(block_device_size(&dev).unwrap(), sectors * 512);
    }
}
