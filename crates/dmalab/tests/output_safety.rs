//! Nothing lost (issue 14): loop backing files and swap files are never
//! written, outputs never replace the target or an input (compared by
//! device and inode), `--live-stats` never removes a device node or FIFO,
//! a FIFO without a reader does not hang, every output is checked before
//! anything runs, and the locks of `dmalab run` and `dmalab page`.

mod common;
mod load_util;

use load_util::{hash_file, loop_devices_available, LoopDev};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn need_loop() -> bool {
    common::need("loop devices (root, losetup)", loop_devices_available())
}

/// Runs dmalab with `args`.
fn run(args: &[&str]) -> std::process::Output {
    common::dmalab().args(args).output().expect("run dmalab")
}

/// Runs dmalab with `args`; returns (exit code, stderr).
fn dmalab(args: &[&str]) -> (i32, String) {
    let o = run(args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Asserts a usage error ([`common::assert_usage_output`]) naming
/// `option` (and `word`).
fn assert_usage(o: std::process::Output, option: &str, word: &str) {
    let err = common::assert_usage_output(&o, &format!("error: {option}:"));
    assert!(err.contains(word), "expected {option} and '{word}': {err}");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A storage-write run of `target` with `--allow-destroy` naming `allow`,
/// refused as bad input naming `check`; returns the error line.
fn destroy_refused(target: &Path, allow: &Path, check: &str) -> String {
    common::assert_usage_output(&destroy(target, allow), check)
}

/// A storage-write run of `target` with `--allow-destroy` naming `allow`.
fn destroy(target: &Path, allow: &Path) -> std::process::Output {
    run(&[
        "load",
        "--target",
        s(target),
        "--direction",
        "read",
        "--pattern",
        "single",
        "--commands",
        "50",
        "--buffer",
        "1M",
        "--fill",
        "random:3",
        "-q",
        &format!("--allow-destroy={}", s(allow)),
    ])
}

#[test]
fn loop_backing_file_is_refused_even_with_allow_destroy() {
    if !need_loop() {
        return;
    }
    let mut l = LoopDev::new(32 * MIB, false, |_| {}, false);
    l.mkfs_ext4();
    // Attached only.
    let before = hash_file(&l.backing);
    let err = destroy_refused(&l.backing, &l.backing, "check failed");
    assert!(
        err.contains("loop check failed") && err.contains(s(&l.dev)),
        "{err}"
    );
    // Mounted, and reached through a hard link and a symlink.
    l.mount();
    let dir = l.backing.parent().unwrap().to_path_buf();
    let hard = dir.join("hard.img");
    std::fs::hard_link(&l.backing, &hard).unwrap();
    let sym = dir.join("sym.img");
    std::os::unix::fs::symlink(&l.backing, &sym).unwrap();
    // A bind mount of the image onto another file.
    let bind = dir.join("bind.img");
    std::fs::write(&bind, b"").unwrap();
    assert!(Command::new("mount")
        .arg("--bind")
        .arg(&l.backing)
        .arg(&bind)
        .status()
        .unwrap()
        .success());
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _bind = Umount(bind.clone());
    let before_mounted = hash_file(&l.backing);
    for p in [&l.backing, &hard, &sym, &bind] {
        let err = destroy_refused(p, p, "check failed");
        assert!(
            err.contains("loop check failed") && err.contains("mounted at"),
            "{err}"
        );
    }
    assert!(hash_file(&l.backing) == before_mounted);
    // And no output may land on it either.
    let err = common::assert_usage_output(
        &run(&[
            "load",
            "--engine",
            "null",
            "--commands",
            "10",
            "--buffer",
            "1M",
            "-q",
            "--output",
            s(&hard),
        ]),
        "--output",
    );
    assert!(
        err.contains("--output") && err.contains("backing file"),
        "{err}"
    );
    assert!(hash_file(&l.backing) == before_mounted);
    drop(before);
}

#[test]
fn read_only_mounted_image_is_refused() {
    if !need_loop() {
        return;
    }
    let l = LoopDev::new(32 * MIB, false, |_| {}, false);
    l.mkfs_ext4();
    let mp = l.backing.parent().unwrap().join("ro");
    std::fs::create_dir(&mp).unwrap();
    assert!(Command::new("mount")
        .args(["-o", "ro"])
        .arg(&l.dev)
        .arg(&mp)
        .status()
        .unwrap()
        .success());
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Umount(mp);
    let before = hash_file(&l.backing);
    let err = destroy_refused(&l.backing, &l.backing, "check failed");
    assert!(err.contains("loop check failed"), "{err}");
    assert!(hash_file(&l.backing) == before);
}

#[test]
fn active_swap_file_is_refused() {
    if !common::need_root() || !common::need("mkswap", common::have_program("mkswap")) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("swapfile");
    assert!(Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "count=16", "status=none"])
        .arg(format!("of={}", s(&f)))
        .status()
        .unwrap()
        .success());
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert!(Command::new("mkswap")
        .arg("-q")
        .arg(&f)
        .status()
        .unwrap()
        .success());
    let on = Command::new("swapon").arg(&f).output().unwrap();
    if !common::need("swapon on a file in /var/tmp", on.status.success()) {
        return;
    }
    struct Off(PathBuf);
    impl Drop for Off {
        fn drop(&mut self) {
            let _ = Command::new("swapoff").arg(&self.0).status();
        }
    }
    let _off = Off(f.clone());
    let before = hash_file(&f);
    let err = destroy_refused(&f, &f, "check failed");
    assert!(err.contains("swap check failed"), "{err}");
    assert!(hash_file(&f) == before);
}

#[test]
fn output_naming_the_target_is_refused_by_inode() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let t = dir.path().join("data");
    std::fs::write(&t, vec![0x5au8; 2 * MIB as usize]).unwrap();
    let hard = dir.path().join("hard");
    std::fs::hard_link(&t, &hard).unwrap();
    let before = hash_file(&t);
    // A storage-read run needs no --allow-destroy: its outputs used to
    // replace the target.
    for (opt, p) in [
        ("--output", hard.clone()),
        ("--trace", t.clone()),
        ("--live-stats", dir.path().join(".").join("data")),
    ] {
        let r = run(&[
            "load",
            "--target",
            s(&t),
            "--commands",
            "20",
            "--buffer",
            "1M",
            "-q",
            opt,
            s(&p),
        ]);
        assert_usage(r, opt, "--target");
        assert!(hash_file(&t) == before, "{opt} changed the target");
    }
}

#[test]
fn target_loop_device_protects_its_backing_file() {
    if !need_loop() {
        return;
    }
    let l = LoopDev::new(8 * MIB, false, |_| {}, false);
    let hard = l.backing.parent().unwrap().join("hard");
    std::fs::hard_link(&l.backing, &hard).unwrap();
    // The image of the target device is attached (loop check), and is the
    // target's backing file.
    let r = run(&[
        "load",
        "--target",
        s(&l.dev),
        "--commands",
        "20",
        "--buffer",
        "1M",
        "-q",
        "--output",
        s(&hard),
    ]);
    assert_usage(r, "--output", "backing file");
}

/// A synthetic trace of `dmalab sim synth`.
fn trace(dir: &Path) -> PathBuf {
    let t = dir.join("t.trace");
    let (code, err) = dmalab(&["sim", "synth", "web", "--requests", "50", "--output", s(&t)]);
    assert_eq!(code, 0, "{err}");
    t
}

#[test]
fn sim_output_naming_its_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let link = dir.path().join("link.trace");
    std::os::unix::fs::symlink(&t, &link).unwrap();
    let before = hash_file(&t);
    assert_usage(
        run(&["sim", "compare", s(&t), "--output", s(&link)]),
        "--output",
        "TRACE",
    );
    assert_usage(
        run(&["sim", "convert", s(&t), s(&link), "--to", "text"]),
        "OUT",
        "IN",
    );
    assert!(hash_file(&t) == before);
    // A missing directory is refused before the simulation runs.
    assert_usage(
        run(&[
            "sim",
            "compare",
            s(&t),
            "--output",
            s(&dir.path().join("no/r.json")),
        ]),
        "--output",
        "does not exist",
    );
}

#[test]
fn page_import_output_naming_its_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("p.xml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/page/pmbench-linux-normal.xml"),
        &x,
    )
    .unwrap();
    let before = hash_file(&x);
    assert_usage(
        run(&["page", "import", s(&x), "--output", s(&x)]),
        "--output",
        "FILE",
    );
    assert!(hash_file(&x) == before);
}

/// A real results file from a quick `dmalab run`.
fn results(dir: &Path) -> PathBuf {
    let exp = dir.join("e.toml");
    std::fs::write(
        &exp,
        r#"
[experiment]
repetitions = 2
cooldown = "0s"

[[victim]]
name = "ok"
command = "exec"
run = ["sh", "-c", "echo 'score: 41.5 points'"]
regex = 'score: ([0-9.]+)'
unit = "points"
better = "higher"
"#,
    )
    .unwrap();
    let res = dir.join("e.jsonl");
    let (code, err) = dmalab(&["run", "--quiet", "-o", s(&res), s(&exp)]);
    assert_eq!(code, 0, "{err}");
    res
}

#[test]
fn report_outputs_naming_results_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let res = results(dir.path());
    let hard = dir.path().join("hard.jsonl");
    std::fs::hard_link(&res, &hard).unwrap();
    let before = hash_file(&res);
    assert_usage(
        run(&["report", s(&res), "-o", s(&hard)]),
        "--output",
        "RESULTS",
    );
    assert_usage(
        run(&[
            "report",
            s(&res),
            "-o",
            s(&dir.path().join("r.html")),
            "--csv",
            s(&res),
        ]),
        "--csv",
        "RESULTS",
    );
    assert!(hash_file(&res) == before);
}

#[test]
fn report_checks_every_output_before_writing_the_html() {
    let dir = tempfile::tempdir().unwrap();
    let res = results(dir.path());
    let html = dir.path().join("r.html");
    assert_usage(
        run(&[
            "report",
            s(&res),
            "-o",
            s(&html),
            "--csv",
            s(&dir.path().join("missing/x.csv")),
        ]),
        "--csv",
        "does not exist",
    );
    assert!(!html.exists(), "the HTML was written before --csv failed");
}

#[test]
fn run_results_naming_the_experiment_is_refused_by_inode() {
    let dir = tempfile::tempdir().unwrap();
    let res = results(dir.path());
    let exp = dir.path().join("e.toml");
    let hard = dir.path().join("e-link.toml");
    std::fs::hard_link(&exp, &hard).unwrap();
    let before = hash_file(&exp);
    // With --restart the old results file is moved aside: that was the
    // experiment file itself when only the spelling was compared.
    // (It was not refused at all: `-o e.toml e.toml --restart` replaced the
    // experiment with its results.)
    for out in [&hard, &exp] {
        for extra in [None, Some("--restart")] {
            let mut args = vec!["run", "--quiet", "-o", s(out), s(&exp)];
            args.extend(extra);
            assert_usage(run(&args), "--results", "experiment file");
            assert!(hash_file(&exp) == before);
        }
    }
    drop(res);
}

#[test]
fn live_stats_on_a_fifo_or_device_node_is_refused_and_kept() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut nodes = vec![fifo.clone()];
    // A private alias of the null device (never the system's own node).
    if common::is_root() {
        let n = dir.path().join("null-alias");
        assert!(Command::new("mknod")
            .arg(&n)
            .args(["c", "1", "3"])
            .status()
            .unwrap()
            .success());
        nodes.push(n);
    }
    for n in &nodes {
        assert_usage(
            run(&[
                "load",
                "--engine",
                "null",
                "--commands",
                "10",
                "--buffer",
                "1M",
                "-q",
                "--live-stats",
                s(n),
            ]),
            "--live-stats",
            "regular file",
        );
        let t = std::fs::symlink_metadata(n)
            .expect("the node is still there")
            .file_type();
        assert!(t.is_fifo() || t.is_char_device());
    }
}

/// Sends SIGINT to `pid`.
fn sigint(pid: u32) {
    common::signal(pid, 2);
}

#[test]
fn output_to_a_fifo_without_reader_ends_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut child = Reap(
        Command::new(common::dmalab_bin())
            .args(["sim", "synth", "web", "--requests", "20", "--output"])
            .arg(&fifo)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // A reader of our own unblocks a binary that opens the FIFO blocking
    // (before the fix), so the test fails rather than hangs.
    let unblock = fifo.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(20));
        let _ = std::fs::read(&unblock);
    });
    // Wait until it says what it waits for, then interrupt it.
    let mut stderr = child.0.stderr.take().unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(&mut stderr);
        r.read_line(&mut line).unwrap();
    }
    assert!(line.contains("waiting for a process to read"), "{line}");
    sigint(child.0.id());
    // A hang detector, not a timing assertion.
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            panic!("dmalab still blocked on the FIFO after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Issue 27 item 11: it ended, but with exit 1; a command stopped by
    // SIGINT exits 130 as every other does.
    assert_eq!(st.code(), Some(130), "{st:?}");
    assert!(
        std::fs::symlink_metadata(&fifo).is_ok(),
        "the FIFO was removed"
    );
}

#[test]
fn two_runs_on_one_results_file_the_second_is_refused_with_the_pid() {
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("slow.toml");
    std::fs::write(
        &exp,
        r#"
[experiment]
repetitions = 50
cooldown = "0s"

[[victim]]
name = "nap"
command = "exec"
run = ["sleep", "0.2"]
"#,
    )
    .unwrap();
    let res = dir.path().join("slow.jsonl");
    let mut first = Command::new(common::dmalab_bin())
        .args(["run", "--quiet", "-o"])
        .arg(&res)
        .arg(&exp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::fs::read_to_string(&res)
        .unwrap_or_default()
        .lines()
        .count()
        < 2
    {
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = run(&["run", "--quiet", "-o", s(&res), s(&exp)]);
    sigint(first.id());
    let _ = first.wait();
    assert_usage(r, "--results", &format!("pid {}", first.id()));
}

/// A child killed (and reaped) when the test ends, even by a panic.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the process ledger of `pid` names something.
fn wait_for_ledger(pid: u32) -> String {
    let p = PathBuf::from(format!("/run/dmalab/proc-{pid}.json"));
    let t0 = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(&p) {
            if t.contains("\"undo\"") {
                return t;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no ledger at {}",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cleanup() -> String {
    let o = common::dmalab().arg("cleanup").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn killed_load_pool_scratch_and_trace_temp_are_undone_by_cleanup() {
    if !common::need_root() {
        return;
    }
    let nr = Path::new("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
    let huge = nr.exists();
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let trace = dir.path().join("t.trace");
    let live = dir.path().join("live");
    let mut args = vec![
        "load",
        "--size",
        "16M",
        "--buffer",
        "4M",
        "--runtime",
        "60s",
        "-q",
        "--live-stats",
        s(&live),
        "--trace",
    ];
    args.push(s(&trace));
    if huge {
        args.extend(["--hugepages", "2m"]);
    }
    let mut child = Reap(
        Command::new(common::dmalab_bin())
            .args(&args)
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let ledger = wait_for_ledger(child.0.id());
    // Wait until the run has its scratch file, its pool pages and its
    // trace file (made before the workers start) in the ledger. The trace
    // is an O_TMPFILE (issue 27: no predictable name), which has no name
    // to leave behind; where the filesystem cannot make one, its random
    // name is in the ledger and cleanup removes it.
    assert!(common::wait_until_load_runs(&live), "{ledger}");
    let pid = child.0.id();
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let left = std::fs::read_dir(&tmp).unwrap().count();
    assert!(left > 0, "the kill left no scratch directory to test with");
    let said = cleanup();
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "{said}");
    assert!(!trace.exists());
    assert!(
        !Path::new(&format!("/run/dmalab/proc-{pid}.json")).exists(),
        "{said}"
    );
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["live", "tmp"],
        "the trace's temporary file is left: {said}"
    );
    if huge {
        // Other processes on the host may size the pool meanwhile: what is
        // checked is that the run's own pages were taken off.
        assert!(said.contains("gave back"), "{said}");
    }
}

#[test]
fn killed_run_leaves_no_run_directory_nor_aggressor_scratch_file() {
    if !common::need_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let exp = dir.path().join("slow.toml");
    std::fs::write(
        &exp,
        "[experiment]\nrepetitions = 50\nwarmup = \"0s\"\ncooldown = \"0s\"\n\n\
         [[aggressor]]\nname = \"rnd\"\ncommand = \"load\"\nsize = \"16M\"\nbuffer = \"1M\"\n\n\
         [[victim]]\nname = \"nap\"\ncommand = \"exec\"\nrun = [\"sleep\", \"0.5\"]\n",
    )
    .unwrap();
    let res = dir.path().join("r.jsonl");
    let mut child = Command::new(common::dmalab_bin())
        .args(["run", "--quiet", "-o"])
        .arg(&res)
        .arg(&exp)
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the aggressor's scratch file beside the run's directory.
    let t0 = Instant::now();
    let scratch = || {
        std::fs::read_dir(&tmp)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.path().join("scratch.dat").exists())
    };
    while !scratch() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no aggressor scratch file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The aggressor dies with the run (PDEATHSIG); until then cleanup
    // leaves its ledger alone.
    let t0 = Instant::now();
    loop {
        let said = cleanup();
        if std::fs::read_dir(&tmp).unwrap().count() == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "left: {said}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn synth_and_convert_errors_name_the_output_not_the_temporary_file() {
    if !common::need_root() {
        return;
    }
    // A full filesystem: a 64 KiB tmpfs.
    let dir = tempfile::tempdir().unwrap();
    let tiny = dir.path().join("tiny");
    std::fs::create_dir(&tiny).unwrap();
    assert!(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&tiny)
        .status()
        .unwrap()
        .success());
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Umount(tiny.clone());
    let big = trace(dir.path());
    for (args, option, out) in [
        (
            vec!["sim", "synth", "file-copy", "--size", "8M", "--output"],
            "--output",
            tiny.join("t.trace"),
        ),
        (
            vec![
                "sim",
                "synth",
                "file-copy",
                "--size",
                "8M",
                "--text",
                "--output",
            ],
            "--output",
            tiny.join("t.txt"),
        ),
    ] {
        let mut a = args.clone();
        a.push(s(&out));
        let (code, err) = dmalab(&a);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!(
                "{option}: cannot write {}: No space left",
                s(&out)
            )),
            "{err}"
        );
        assert!(!err.contains(".tmp-"), "names the temporary file: {err}");
    }
    let out = tiny.join("x.txt");
    let (code, err) = dmalab(&["sim", "convert", s(&big), s(&out), "--to", "text"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("OUT: cannot write {}", s(&out))),
        "{err}"
    );
    assert!(!err.contains(".tmp-"), "{err}");
    assert_eq!(
        std::fs::read_dir(&tiny).unwrap().count(),
        0,
        "a temporary file was left"
    );
}

#[test]
fn two_host_changing_page_runs_the_second_is_refused_with_the_pid() {
    if !common::need_root() {
        return;
    }
    let before = std::fs::read_to_string("/proc/sys/vm/page-cluster").unwrap();
    let page = |runtime: &str| {
        let mut c = Command::new(common::dmalab_bin());
        c.args([
            "page",
            "--map",
            "8M",
            "--runtime",
            runtime,
            "--classify",
            "rusage",
            "--page-cluster",
            "0",
        ]);
        c
    };
    let dir = tempfile::tempdir().unwrap();
    let first_err = dir.path().join("first.stderr");
    let mut first = page("60")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&first_err).unwrap())
        .spawn()
        .unwrap();
    // Page's changes are steps in the one ledger, the process's own file
    // (the layout's constants, not a name copied here: the old
    // `page-PID.json` was never written again and this waited 60 s).
    let ledger = Path::new(dmalab_core::ledger::STATE_DIR).join(format!(
        "{}{}.json",
        dmalab_core::ledger::PREFIX,
        first.id()
    ));
    let t0 = Instant::now();
    while !std::fs::read_to_string(&ledger)
        .unwrap_or_default()
        .contains("page-cluster")
    {
        // A first run that ended (or never got there) says why: once in
        // CI it did not change vm.page-cluster within 60 s, and its
        // stderr had been thrown away.
        let said = || std::fs::read_to_string(&first_err).unwrap_or_default();
        if let Ok(Some(status)) = first.try_wait() {
            panic!(
                "the first run ended ({status}) before changing vm.page-cluster: {}",
                said()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the first run never changed vm.page-cluster: {}",
            said()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = page("0.1").output().unwrap();
    sigint(first.id());
    let _ = first.wait();
    assert_usage(second, "page", &format!("pid {}", first.id()));
    // The first run restored what it changed; the second changed nothing.
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/page-cluster").unwrap(),
        before
    );
}

#[test]
fn unprivileged_killed_load_is_cleaned_up_by_the_same_user() {
    if !common::need_root() || !common::need("setpriv", common::have_program("setpriv")) {
        return;
    }
    // A user's runtime directory and temporary directory, owned by nobody.
    let dir = tempfile::tempdir().unwrap();
    let (xdg, tmp) = (dir.path().join("xdg"), dir.path().join("tmp"));
    std::fs::create_dir(&xdg).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    assert!(Command::new("chown")
        .args(["-R", "nobody"])
        .arg(dir.path())
        .status()
        .unwrap()
        .success());
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(common::dmalab_bin())
            .args(args)
            .env("XDG_RUNTIME_DIR", &xdg)
            .env("TMPDIR", &tmp);
        c
    };
    let mut child = Reap(
        as_nobody(&["load", "--buffer", "4M", "--runtime", "60s", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    let ledger = xdg.join("dmalab");
    while !std::fs::read_dir(&ledger)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).any(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .contains("scratch.dat")
            })
        })
        .unwrap_or(false)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no ledger in {}",
            ledger.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(std::fs::read_dir(&tmp).unwrap().count() > 0);
    let o = as_nobody(&["cleanup"]).output().unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "{said}");
}

/// Waits until the ledger `proc-PID.json` under `dir` records a file or
/// directory named `name` together with what it is (its identity, noted
/// once created).
fn wait_for_created(dir: &Path, pid: u32, name: &str) {
    let p = dir.join(format!("proc-{pid}.json"));
    let t0 = Instant::now();
    loop {
        let v: serde_json::Value = std::fs::read_to_string(&p)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let noted = v["steps"].as_array().is_some_and(|s| {
            s.iter().any(|e| {
                e["step"]["path"]
                    .as_str()
                    .is_some_and(|x| x.ends_with(name))
                    && !e["step"]["ident"].is_null()
            })
        });
        if noted {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} never recorded {name}",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 27 item 3: `cleanup` removed whatever path a ledger named. A
/// target file replaced after the kill (another inode) or turned into a
/// symlink is not the file dmalab made: it is left alone and reported.
#[test]
fn cleanup_leaves_a_replaced_target_or_a_symlink_in_its_place_alone() {
    if !common::need_root() {
        return;
    }
    for symlink in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t.dat");
        let mut child = Reap(
            Command::new(common::dmalab_bin())
                .args(["load", "--size", "8M", "--buffer", "4M", "--runtime", "60s"])
                .arg("--target")
                .arg(&target)
                .arg("-q")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id();
        wait_for_created(Path::new("/run/dmalab"), pid, "t.dat");
        // Replaced before the kill: another test's cleanup may run at any
        // time after it.
        let precious = dir.path().join("precious");
        std::fs::write(&precious, b"not dmalab's").unwrap();
        let other = dir.path().join("other");
        if symlink {
            std::os::unix::fs::symlink(&precious, &other).unwrap();
        } else {
            std::fs::write(&other, b"someone else's file").unwrap();
        }
        std::fs::rename(&other, &target).unwrap();
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        let said = cleanup();
        if said.contains("t.dat") {
            assert!(said.contains("left alone"), "{said}");
        }
        assert!(
            std::fs::symlink_metadata(&target).is_ok(),
            "symlink {symlink}: the replacement was removed: {said}"
        );
        assert_eq!(std::fs::read(&precious).unwrap(), b"not dmalab's");
        assert!(
            !Path::new(&format!("/run/dmalab/proc-{pid}.json")).exists(),
            "{said}"
        );
    }
}

/// Issue 27 item 13: without XDG_RUNTIME_DIR (sudo -u, su, cron) a non-root
/// load kept no ledger, its scratch file survived `kill -9` and `cleanup`
/// said it needs root. Now its ledger is in /tmp/dmalab-UID (mode 0700).
#[test]
fn unprivileged_killed_load_without_a_runtime_dir_is_cleaned_up_by_the_same_user() {
    if !common::need_root() || !common::need("setpriv", common::have_program("setpriv")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    assert!(Command::new("chown")
        .args(["-R", "nobody"])
        .arg(dir.path())
        .status()
        .unwrap()
        .success());
    let uid = String::from_utf8(
        Command::new("id")
            .args(["-u", "nobody"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let ledgers = PathBuf::from(format!("/tmp/dmalab-{}", uid.trim()));
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(common::dmalab_bin())
            .args(args)
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", &tmp);
        c
    };
    let mut child = Reap(
        as_nobody(&["load", "--buffer", "4M", "--runtime", "60s", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_created(&ledgers, child.0.id(), "scratch.dat");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::symlink_metadata(&ledgers).unwrap().mode() & 0o777,
        0o700
    );
    assert!(std::fs::read_dir(&tmp).unwrap().count() > 0);
    let o = as_nobody(&["cleanup"]).output().unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "{said}");
}
