//! The safety guard through `dmalab load --direction read` (storage writes):
//! every refusal names its check and leaves the target's bytes unchanged;
//! a clean device named with --allow-destroy is written.

mod common;
mod load_util;

use load_util::{hash_file, load, load_refused, loop_devices_available, LoopDev};
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// The arguments of a storage-write run against `target`.
fn write_args(target: &Path, allow: Option<&Path>) -> Vec<String> {
    let mut args = vec![
        "--target".to_string(),
        target.display().to_string(),
        "--direction".into(),
        "read".into(),
        "--pattern".into(),
        "single".into(),
        "--commands".into(),
        "200".into(),
        "--buffer".into(),
        "1M".into(),
        "--fill".into(),
        "random:9".into(),
        "-q".into(),
    ];
    if let Some(a) = allow {
        args.push(format!("--allow-destroy={}", a.display()));
    }
    args
}

/// Tries a storage-write run against `target`; returns (exit code, stderr).
fn write_run(target: &Path, allow: Option<&Path>) -> (i32, String) {
    let args = write_args(target, allow);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err, _) = load(&refs);
    (code, err)
}

/// A storage-write run against `target` refused as bad input naming
/// `option`; returns the error line.
fn write_refused(target: &Path, allow: Option<&Path>, option: &str) -> String {
    let args = write_args(target, allow);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    load_refused(&refs, option)
}

/// Asserts that a write run is refused by `check` and changes nothing.
fn assert_refused(target: &Path, allow: Option<&Path>, check: &str) {
    let before = hash_file(target);
    write_refused(target, allow, &format!("{check} check failed"));
    assert!(
        hash_file(target) == before,
        "target bytes changed after a refusal"
    );
}

fn need_loop() -> bool {
    common::need("loop devices (root, losetup)", loop_devices_available())
}

#[test]
fn existing_regular_file_needs_allow_destroy() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("precious");
    std::fs::write(&f, vec![0x5au8; 4 * MIB as usize]).unwrap();
    assert_refused(&f, None, "allow-destroy");
    // Naming another path does not count.
    assert_refused(&f, Some(&dir.path().join("other")), "allow-destroy");
    // Reading it needs no flag and changes nothing.
    let before = hash_file(&f);
    let (code, _, err, _) = load(&[
        "--target",
        f.to_str().unwrap(),
        "--commands",
        "100",
        "--buffer",
        "1M",
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(hash_file(&f) == before);
    // Named exactly: written, and kept (dmalab did not create it).
    let (code, err) = write_run(&f, Some(&f));
    assert_eq!(code, 0, "{err}");
    assert!(f.exists());
    assert!(
        hash_file(&f) != before,
        "the allowed write did not reach the file"
    );
}

#[test]
fn mounted_ext4_is_refused() {
    if !need_loop() {
        return;
    }
    let mut l = LoopDev::new(32 * MIB, false, |_| {}, false);
    l.mkfs_ext4();
    l.mount();
    let dev = l.dev.clone();
    assert_refused(&dev, Some(&dev), "mounted");
    // Reading a mounted device is fine.
    let (code, _, err, _) = load(&[
        "--target",
        dev.to_str().unwrap(),
        "--commands",
        "50",
        "--buffer",
        "1M",
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn unmounted_filesystem_signature_is_refused() {
    if !need_loop() {
        return;
    }
    let l = LoopDev::new(32 * MIB, false, |_| {}, false);
    l.mkfs_ext4();
    assert_refused(&l.dev, Some(&l.dev), "signature");
}

#[test]
fn partition_table_is_refused() {
    if !need_loop() || !common::need("sfdisk", common::have_program("sfdisk")) {
        return;
    }
    let l = LoopDev::new(
        32 * MIB,
        false,
        |backing| {
            let mut c = Command::new("sfdisk")
                .arg("-q")
                .arg(backing)
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(b"label: dos\n,16M,L\n")
                .unwrap();
            assert!(c.wait().unwrap().success());
        },
        true,
    );
    // With -P the kernel shows the partition; either that or the table's
    // signature refuses the write.
    let before = hash_file(&l.dev);
    let err = write_refused(&l.dev, Some(&l.dev), "check failed");
    assert!(
        err.contains("partitions check failed") || err.contains("signature check failed"),
        "{err}"
    );
    assert!(hash_file(&l.dev) == before);
}

#[test]
fn clean_loop_device_needs_the_exact_flag() {
    if !need_loop() {
        return;
    }
    let l = LoopDev::new(32 * MIB, false, |_| {}, false);
    assert_refused(&l.dev, None, "allow-destroy");
    let other = LoopDev::new(8 * MIB, false, |_| {}, false);
    assert_refused(&l.dev, Some(&other.dev), "allow-destroy");
    let before = hash_file(&l.dev);
    let (code, err) = write_run(&l.dev, Some(&l.dev));
    assert_eq!(code, 0, "{err}");
    assert!(
        hash_file(&l.dev) != before,
        "the allowed write did not reach the device"
    );
}

#[test]
fn nvme_engine_takes_char_devices_only() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f");
    std::fs::write(&f, [0u8; 4096]).unwrap();
    let err = load_refused(
        &["--engine", "nvme", "--target", f.to_str().unwrap()],
        "--target",
    );
    assert!(
        err.contains("--target") && err.contains("/dev/ngXnY"),
        "{err}"
    );
    // A character device that is not an NVMe namespace is refused for writes.
    write_refused(
        Path::new("/dev/null"),
        Some(Path::new("/dev/null")),
        "--target",
    );
}

/// A small tmpfs, unmounted (and its mountpoint removed) on drop.
struct SmallFs(tempfile::TempDir);

impl SmallFs {
    fn new(size: &str) -> Self {
        let d = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -t tmpfs failed");
        Self(d)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Issue 27 item 14: `load --size 200G` on a disk with 74 GB free filled it
/// for 89 s, then failed with ENOSPC (exit 1). The room is now checked
/// before anything is written: exit 2 naming --size, the size asked and
/// what is free; nothing is left behind. For a named file and for the
/// scratch file in TMPDIR.
#[test]
fn a_file_larger_than_the_free_space_is_refused_before_writing() {
    if !common::need_root() || !common::need("mount", common::have_program("mount")) {
        return;
    }
    let fs = SmallFs::new("16m");
    let target = fs.0.path().join("big.dat");
    let o = common::dmalab()
        .args(["load", "--target"])
        .arg(&target)
        .args(["--size", "64M", "--commands", "10", "-q"])
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "--size");
    assert!(
        err.contains("67108864 bytes") && err.contains("free"),
        "{err}"
    );
    assert!(!target.exists(), "the file was created");
    let o = common::dmalab()
        .env("TMPDIR", fs.0.path())
        .args(["load", "--size", "64M", "--commands", "10", "-q"])
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "--size");
    assert!(err.contains("free"), "{err}");
    assert_eq!(
        std::fs::read_dir(fs.0.path()).unwrap().count(),
        0,
        "something was written"
    );
}

/// Issue 33 item 7: a `--buffer-file` dmalab creates is fallocated to the
/// buffer's size. On a filesystem without room the previous binary created
/// it, mapped it and died of SIGBUS at the first page with no block (exit
/// 135), leaving the 64 MiB file behind. Now the room is checked first, for
/// `load` and for `rdma serve` (one placement check): exit 2 naming
/// --buffer and what is free, nothing written.
#[test]
fn a_buffer_file_larger_than_the_free_space_is_refused_before_mapping() {
    if !common::need_root() || !common::need("mount", common::have_program("mount")) {
        return;
    }
    let fs = SmallFs::new("8m");
    let buf = fs.0.path().join("buf");
    let runs: [&[&str]; 2] = [
        &["load", "--engine", "null", "--commands", "10", "-q"],
        &["rdma", "serve"],
    ];
    for args in runs {
        let o = common::dmalab()
            .args(args)
            .arg("--buffer-file")
            .arg(&buf)
            .args(["--buffer", "64M"])
            .output()
            .unwrap();
        let err = common::assert_usage_output(&o, "--buffer");
        assert!(
            err.contains("67108864 bytes") && err.contains("8388608 bytes (8.00 MiB) free"),
            "{args:?}: {err}"
        );
        assert_eq!(
            std::fs::read_dir(fs.0.path()).unwrap().count(),
            0,
            "{args:?}: something was written"
        );
    }
    // A buffer that fits is still created (and removed after the run).
    common::dmalab()
        .args(["load", "--engine", "null", "--commands", "10", "-q"])
        .arg("--buffer-file")
        .arg(&buf)
        .args(["--buffer", "4M"])
        .assert()
        .success();
    assert!(!buf.exists());
}

/// A small ext4 filesystem on a loop device (page refuses a swap file on
/// tmpfs before it looks at the room), unmounted on drop.
struct SmallExt4 {
    dir: tempfile::TempDir,
    _image: tempfile::TempDir,
}

impl SmallExt4 {
    fn new(mib: u64) -> Self {
        let image = tempfile::tempdir().unwrap();
        let img = image.path().join("fs.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(mib * MIB)
            .unwrap();
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&img)
            .status()
            .expect("run mkfs.ext4");
        assert!(st.success(), "mkfs.ext4 failed");
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -o loop failed");
        Self { dir, _image: image }
    }
}

impl Drop for SmallExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Issue 33 item 7: `page --swap file:PATH:SIZE` writes the whole swap file
/// (a swap file may have no holes). On a filesystem without room it is now
/// refused before anything is written: exit 2 naming --swap and what is
/// free, no file left, the host unchanged.
#[test]
fn a_swap_file_larger_than_the_free_space_is_refused_before_writing() {
    if !common::need_root()
        || !common::need("mount", common::have_program("mount"))
        || !common::need("mkfs.ext4", common::have_program("mkfs.ext4"))
        || !common::need("loop devices", loop_devices_available())
    {
        return;
    }
    let fs = SmallExt4::new(16);
    let swap = fs.dir.path().join("swap");
    let o = common::dmalab()
        .args(["page", "--map", "16M", "--runtime", "0.1", "--swap"])
        .arg(format!("file:{}:64M", swap.display()))
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "--swap");
    assert!(
        err.contains("67108864 bytes") && err.contains("free"),
        "{err}"
    );
    assert!(!swap.exists(), "the swap file was written");
}
