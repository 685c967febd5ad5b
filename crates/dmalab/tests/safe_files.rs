//! Issue 27: files dmalab creates or follows on root's behalf. Another user
//! who can write a directory (`/tmp`, a shared results folder) must not be
//! able to make dmalab write through a symlink planted there, nor hand it a
//! rate-control page of theirs; a FIFO never blocks a command past SIGINT.

use crate::common;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// `nobody`, the other user of these tests.
const NOBODY: u32 = 65534;

/// A world-writable sticky directory, as `/tmp` is.
fn sticky_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// A symlink `link` -> `to` that belongs to `nobody`, as if they planted it.
fn plant(link: &Path, to: &Path) {
    std::os::unix::fs::symlink(to, link).unwrap();
    std::os::unix::fs::lchown(link, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// A file outside the shared directory that nobody may change through it.
fn precious(dir: &Path, name: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, b"precious").unwrap();
    p
}

fn assert_root_regular_file(p: &Path) {
    let m = std::fs::symlink_metadata(p).unwrap();
    assert!(
        m.file_type().is_file(),
        "{} is {:?}",
        p.display(),
        m.file_type()
    );
    assert_eq!(m.uid(), 0, "{} belongs to uid {}", p.display(), m.uid());
}

/// Issue 27 item 1: the temporary name of an output was `.NAME.tmp-PID`,
/// opened with `File::create`, and `--live-stats` opened its path with
/// O_CREAT|O_TRUNC: a user who planted symlinks at the next pids' names, or
/// at the live-stats path, made root's load overwrite any file and leave
/// the output as that user's symlink.
#[test]
fn planted_symlinks_in_a_shared_directory_are_never_written_through() {
    if !common::need_root() {
        return;
    }
    let shared = sticky_dir();
    let safe = tempfile::tempdir().unwrap();
    let (v_tmp, v_live, v_out) = (
        precious(safe.path(), "tmp-victim"),
        precious(safe.path(), "live-victim"),
        precious(safe.path(), "out-victim"),
    );
    let out = shared.path().join("out.json");
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for pid in last + 1..last + 400 {
        plant(&shared.path().join(format!(".out.json.tmp-{pid}")), &v_tmp);
    }
    let live = shared.path().join("live");
    plant(&live, &v_live);
    let run = |out: &Path| {
        common::dmalab()
            .args(["load", "--engine", "null", "--commands", "200", "-q"])
            .arg("--buffer")
            .arg("1M")
            .arg("--output")
            .arg(out)
            .arg("--live-stats")
            .arg(&live)
            .assert()
            .success();
    };
    run(&out);
    // The same run again, now with a symlink planted at the output itself.
    let out2 = shared.path().join("out2.json");
    plant(&out2, &v_out);
    std::fs::remove_file(&live).ok();
    plant(&live, &v_live);
    run(&out2);
    for v in [&v_tmp, &v_live, &v_out] {
        assert_eq!(
            std::fs::read(v).unwrap(),
            b"precious",
            "{} changed",
            v.display()
        );
    }
    for p in [&out, &out2, &live] {
        assert_root_regular_file(p);
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out2).unwrap()).unwrap();
    assert_eq!(doc["status"], "completed");
}
