//! Helpers for the `dmalab load` integration tests: loop devices that clean
//! up after themselves (even when a test fails), hashing, running the binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// True when loop devices can be made here (root, /dev/loop-control, losetup).
pub fn loop_devices_available() -> bool {
    crate::common::is_root()
        && Path::new("/dev/loop-control").exists()
        && crate::common::have_program("losetup")
}

/// A loop device over a backing file; detached (and unmounted) on drop.
pub struct LoopDev {
    /// `/dev/loopN`.
    pub dev: PathBuf,
    /// The backing file.
    pub backing: PathBuf,
    /// Where it is mounted, if it is.
    pub mountpoint: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl LoopDev {
    /// A loop device of `size` bytes. `in_memory` puts the backing file in
    /// /dev/shm (steady latency for rate tests); `partscan` passes -P.
    pub fn new(size: u64, in_memory: bool, prepare: impl FnOnce(&Path), partscan: bool) -> Self {
        let dir = if in_memory {
            tempfile::Builder::new()
                .prefix("dmalab-test-")
                .tempdir_in("/dev/shm")
                .expect("tempdir in /dev/shm")
        } else {
            tempfile::Builder::new()
                .prefix("dmalab-test-")
                .tempdir_in("/var/tmp")
                .expect("tempdir in /var/tmp")
        };
        let backing = dir.path().join("backing.img");
        let f = std::fs::File::create(&backing).expect("create backing file");
        f.set_len(size).expect("size backing file");
        drop(f);
        prepare(&backing);
        let mut args = vec!["-f", "--show"];
        if partscan {
            args.push("-P");
        }
        let out = Command::new("losetup")
            .args(&args)
            .arg(&backing)
            .output()
            .expect("run losetup");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        if partscan {
            let _ = Command::new("udevadm").arg("settle").status();
            let _ = Command::new("partprobe").arg(&dev).status();
        }
        Self {
            dev,
            backing,
            mountpoint: None,
            _dir: dir,
        }
    }

    /// Makes an ext4 filesystem on the device (no lazy init: nothing is
    /// written behind the test's back afterwards).
    pub fn mkfs_ext4(&self) {
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&self.dev)
            .status()
            .expect("run mkfs.ext4");
        assert!(st.success());
    }

    /// Mounts the device on a fresh directory.
    pub fn mount(&mut self) {
        let mp = self._dir.path().join("mnt");
        std::fs::create_dir_all(&mp).expect("mkdir");
        let st = Command::new("mount")
            .arg(&self.dev)
            .arg(&mp)
            .status()
            .expect("run mount");
        assert!(st.success());
        self.mountpoint = Some(mp);
    }

    /// The device's whole content.
    pub fn hash(&self) -> Vec<u8> {
        hash_file(&self.dev)
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        if let Some(mp) = &self.mountpoint {
            let _ = Command::new("umount").arg(mp).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// A file or device's whole content (the devices in these tests are small).
pub fn hash_file(p: &Path) -> Vec<u8> {
    std::fs::read(p).expect("read the target's bytes")
}

/// Runs `dmalab load ARGS --output <tmp>` and returns (exit code, stdout,
/// stderr, parsed JSON if written).
/// Runs `dmalab load ARGS --output DIR/r.json` expecting a usage error
/// naming `option` ([`crate::common::assert_usage_error_of`]) and no
/// result; returns the error line.
pub fn load_refused(args: &[&str], option: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    let err = crate::common::assert_usage_error_of(
        crate::common::dmalab()
            .arg("load")
            .args(args)
            .arg("--output")
            .arg(&out),
        option,
    );
    assert!(!out.exists(), "a refused run wrote a result: {err}");
    err
}

pub fn load(args: &[&str]) -> (i32, String, String, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.json");
    let o = crate::common::dmalab()
        .arg("load")
        .args(args)
        .arg("--output")
        .arg(&out)
        .output()
        .expect("run dmalab");
    let json = std::fs::read_to_string(&out)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("valid JSON"));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        json,
    )
}
