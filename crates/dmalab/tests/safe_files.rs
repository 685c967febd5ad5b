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

/// A paced null load steering by the rate-control page `ctl`, with `extra`
/// arguments.
fn paced_load(ctl: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(common::dmalab_bin());
    c.args(["load", "--engine", "null", "--buffer", "1M", "-q"])
        .args(["--rate-iops", "2000"])
        .arg("--rate-control")
        .arg(ctl)
        .args(extra);
    c
}

/// Runs `cmd`, killing it after 60 s (a hang detector, not a timing
/// assertion); returns its output, or panics naming `what` if it hung.
fn output_within(mut cmd: std::process::Command, what: &str) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: dmalab still running after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Issue 27 items 5 and 8: `--rate-control` took a page another user owns
/// and can write (mode 0666), followed a symlink another user planted
/// (creating the page at its target), blocked for ever in `open` on a FIFO
/// (deaf to SIGINT) and read `/dev/zero` until memory ran out. Each is now
/// refused before the load starts, exit 2 naming --rate-control.
#[test]
fn rate_control_pages_others_could_steer_or_that_are_no_files_are_refused() {
    if !common::need_root() {
        return;
    }
    let shared = sticky_dir();
    // Another user's page, writable by anyone.
    let theirs = shared.path().join("theirs");
    let mut page = vec![0u8; 4096];
    page[..8].copy_from_slice(b"DMALRATE");
    page[8] = 1;
    std::fs::write(&theirs, &page).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o666)).unwrap();
    // A symlink they planted where root's page will be made.
    let safe = tempfile::tempdir().unwrap();
    let target = safe.path().join("made-by-root");
    let planted = shared.path().join("rate");
    plant(&planted, &target);
    // A FIFO nobody writes.
    let fifo = shared.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for (p, word) in [
        (theirs.as_path(), "belongs to uid 65534"),
        (planted.as_path(), "a symlink"),
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/zero"), "a character device"),
    ] {
        let what = p.display().to_string();
        let o = output_within(paced_load(p, &["--runtime", "1s"]), &what);
        let err = common::assert_usage_output(&o, "--rate-control");
        assert!(err.contains(word), "{what}: expected '{word}': {err}");
    }
    assert!(
        std::fs::symlink_metadata(&target).is_err(),
        "a page was created at the planted symlink's target"
    );
    assert_eq!(std::fs::read(&theirs).unwrap(), page, "their page changed");
}

/// Issue 27 item 8: the load mapped its page, so truncating the file while
/// the load ran killed it with SIGBUS (exit 135, no output). It now reads
/// the page with pread: it says the page is gone, keeps its last limits and
/// finishes with its result.
#[test]
fn truncating_the_rate_control_page_does_not_kill_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, live, out) = (
        dir.path().join("rate"),
        dir.path().join("live"),
        dir.path().join("r.json"),
    );
    let mut cmd = paced_load(&ctl, &["--runtime", "3s"]);
    cmd.arg("--live-stats")
        .arg(&live)
        .arg("--output")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    assert!(common::wait_until_load_runs(&live), "the load never ran");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ctl)
        .unwrap()
        .set_len(0)
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{:?}: {err}", o.status);
    assert!(
        err.contains("--rate-control") && err.contains("truncated"),
        "{err}"
    );
    assert!(err.contains("keeps its current limits"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["status"], "completed");
}

/// Issue 27 item 13: the README's first command (`dmalab load`, a 64 MiB
/// buffer) failed without root on a stock system, whose `ulimit -l` is
/// 8 MiB: the buffer could not be locked. It now runs with the buffer
/// unlocked (and not registered with io_uring), says so in one line, and
/// the result records that no byte of it was locked.
#[test]
fn without_root_under_an_8_mib_lock_limit_the_load_runs_unlocked_and_says_so() {
    if !common::need_root()
        || !common::need(
            "setpriv and prlimit",
            common::have_program("setpriv") && common::have_program("prlimit"),
        )
    {
        return;
    }
    let dir = sticky_dir();
    let out = dir.path().join("r.json");
    let o = std::process::Command::new("setpriv")
        .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
        .args(["prlimit", "--memlock=8388608"])
        .arg(common::dmalab_bin())
        .args(["load", "--runtime", "1s", "-q", "--output"])
        .arg(&out)
        .env("TMPDIR", dir.path())
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("unlocked")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("ulimit -l 8192 KiB"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["result"]["buffer_locked_bytes"], 0, "{doc}");
    let r = &doc["result"];
    assert!(r["totals"]["commands"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["totals"]["errors"], 0, "{r}");
    // As root the same run locks the whole buffer.
    let out = dir.path().join("root.json");
    common::dmalab()
        .args([
            "load",
            "--runtime",
            "200ms",
            "-q",
            "--buffer",
            "1M",
            "--output",
        ])
        .arg(&out)
        .assert()
        .success();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["result"]["buffer_locked_bytes"], 1 << 20);
}
