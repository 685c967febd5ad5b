//! Checks before `--swap dev:PATH` overwrites a block device with a swap
//! header: the shared device safety guard of `dmalab load`
//! ([`dmalab_core::safety`]): the user must name the exact device with
//! `--allow-destroy`, and it must not be mounted (nor any partition), not be
//! active swap, have no holders and no partitions, and carry no filesystem,
//! RAID, LVM, swap, LUKS or partition-table signature. On top, dmalab page
//! needs it to be a block device it can open exclusively.

use dmalab_core::safety::Origin;
use dmalab_core::UsageError;
use std::fs;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

fn refuse(path: &Path, why: String) -> UsageError {
    UsageError::new(
        "--swap",
        format!("refusing to use {} as swap: {why}", path.display()),
    )
}

/// Runs every check; errors are usage errors naming the option and why.
pub fn check_swap_device(path: &Path, allow_destroy: Option<&Path>) -> Result<(), UsageError> {
    let meta = fs::metadata(path).map_err(|e| refuse(path, format!("cannot stat it: {e}")))?;
    if !meta.file_type().is_block_device() {
        return Err(refuse(
            path,
            "it is not a block device (for a file use --swap file:PATH:SIZE)".into(),
        ));
    }
    dmalab_core::safety::check_write_target(path, Origin::Existing, allow_destroy).map_err(
        |r| {
            UsageError::new(
                if allow_destroy.is_some() {
                    "--allow-destroy"
                } else {
                    "--swap"
                },
                r.to_string(),
            )
        },
    )?;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| refuse(path, format!("cannot open it exclusively (in use?): {e}")))?;
    let size = dmalab_core::sys::blockdev::block_device_size(&f)
        .map_err(|e| refuse(path, format!("cannot read its size: {e}")))?;
    if size < 1 << 20 {
        return Err(refuse(path, format!("it is only {size} bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_regular_files() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = check_swap_device(f.path(), Some(f.path())).unwrap_err();
        assert!(e.message.contains("not a block device"), "{e}");
    }
}
