//! `dmalab ddio` through the binary: the refusals on this host, and on a
//! fixture Intel host (`--host-root`, files standing for config space and
//! MSRs) the writes, the restore on exit and on signals, and the journal
//! left by a `kill -9` that `dmalab ddio restore` and the next run undo.

use crate::common;

use common::dmalab;
use dmalab_host::ddio::fixture::{self, NIC_ROOT_PORT, NVME_ROOT_PORT, PERFCTRL_START, WAYS_START};
use dmalab_host::ddio::journal;
use dmalab_host::HostRoot;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture_host() -> (tempfile::TempDir, HostRoot) {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture::intel_host(dir.path(), 2, 2).unwrap();
    (dir, root)
}

fn ddio(root: &HostRoot, args: &[&str]) -> assert_cmd::Command {
    let mut c = dmalab();
    c.arg("ddio")
        .arg("--host-root")
        .arg(root.path("/"))
        .args(args);
    c
}

fn is_amd() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("AuthenticAMD"))
}

#[test]
fn ddio_status_here_says_why_it_cannot_act() {
    if !common::need(
        "an AMD host (this test pins the refusals of the development VM)",
        is_amd(),
    ) {
        return;
    }
    let out = dmalab().args(["ddio", "status"]).output().unwrap();
    common::assert_usage_output(&out, "ddio");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("controllable: no"), "{stdout}");
    assert!(
        stdout.contains("cannot act: not on this CPU: AuthenticAMD"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cannot act: no Intel PCIe root port (vendor 0x8086, class 0x0604)"),
        "{stdout}"
    );
    if !std::path::Path::new("/dev/cpu/0/msr").exists() {
        assert!(
            stdout.contains("cannot act: no /dev/cpu/0/msr: load the msr driver"),
            "{stdout}"
        );
    }
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("dmalab: error: ddio: not on this CPU: AuthenticAMD family"),
        "{stderr}"
    );
}

#[test]
fn ddio_changes_are_refused_here_with_exit_2() {
    if !common::need("an AMD host", is_amd()) {
        return;
    }
    for args in [
        &["off"][..],
        &["on", "--device", "0000:00:03.0"],
        &["ways", "2"],
        &["off", "--", "true"],
    ] {
        let out = dmalab().arg("ddio").args(args).output().unwrap();
        let stderr = common::assert_usage_output(&out, "ddio");
        assert!(
            stderr.starts_with("dmalab: error: ddio: not on this CPU"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed something");
    }
    // Nothing was journaled.
    let left: Vec<_> = std::fs::read_dir("/run/dmalab")
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("ddio-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn ddio_refusals_on_an_intel_fixture_name_what_is_missing() {
    let (_d, root) = fixture_host();
    let err =
        |args: &[&str], option: &str| common::assert_usage_error_of(&mut ddio(&root, args), option);
    assert_eq!(
        err(&["ways", "12"], "ways: 12:"),
        "dmalab: error: ways: 12: this CPU's LLC has 11 ways; give 1 to 11"
    );
    assert!(err(&["off", "--device", "eth9"], "--device: eth9:")
        .starts_with("dmalab: error: --device: eth9: no PCI device found"));
    assert!(err(&["on", "--device", "0000:00:00.0"], "0000:00:00.0")
        .contains("sits directly on the root bus"));
    std::fs::remove_dir_all(root.path("/dev/cpu")).unwrap();
    let e = err(&["ways", "4"], "ways: ");
    assert!(
        e.starts_with("dmalab: error: ways: no ")
            && e.ends_with("/dev/cpu/0/msr: load the msr driver (modprobe msr); it needs root"),
        "{e}"
    );
    std::fs::remove_dir_all(root.path("/sys/devices/pci0000:16")).unwrap();
    std::fs::remove_dir_all(root.path("/sys/devices/pci0000:3a")).unwrap();
    assert!(err(&["off"], "ddio: ").starts_with("dmalab: error: ddio: no Intel PCIe root port"));
}

#[test]
fn ddio_off_holds_for_the_command_and_restores_after() {
    let (d, root) = fixture_host();
    let seen = d.path().join("seen");
    let config = root.path(&format!("/sys/bus/pci/devices/{NVME_ROOT_PORT}/config"));
    let script = format!(
        "od -An -tx1 -j384 -N1 {} > {}; exit 3",
        config.display(),
        seen.display()
    );
    let out = ddio(
        &root,
        &["off", "--device", "/dev/nvme0n1", "--", "sh", "-c", &script],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's exit status is ours"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim(),
        "19",
        "DDIO off during the command"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("root port 0000:16:00.0: DDIO off (perfctrlsts_0 0x91 -> 0x19)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("restored 0000:16:00.0 config byte 0x180 = 0x91 (read back)"),
        "{stdout}"
    );
    assert_eq!(
        fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert_eq!(
        fixture::perfctrl(&root, NIC_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert!(journal::journal_files(&root).is_empty());

    let out = ddio(&root, &["ways", "7", "--", "true"]).output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("CPU 2: IIO LLC ways 7 of 11 (MSR 0xc8b 0x600 -> 0x7f0)"),
        "{stdout}"
    );
    assert_eq!(fixture::ways_msr(&root, 0).unwrap(), WAYS_START);
    assert_eq!(fixture::ways_msr(&root, 2).unwrap(), WAYS_START);
}

/// Starts `dmalab ddio off` holding the change; returns once both ports read
/// DDIO off.
fn start_holding(root: &HostRoot) -> std::process::Child {
    let child = Command::new(common::dmalab_bin())
        .arg("ddio")
        .arg("--host-root")
        .arg(root.path("/"))
        .arg("off")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !(fixture::perfctrl(root, NVME_ROOT_PORT).unwrap() == 0x19
        && fixture::perfctrl(root, NIC_ROOT_PORT).unwrap() == 0x19)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "dmalab ddio off never changed the ports"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn ddio_restores_on_sigint_and_sigterm() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let (_d, root) = fixture_host();
        let mut child = start_holding(&root);
        // SAFETY: signals our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = child.wait().unwrap();
        // Restored, then the exit rule of every interrupted command: 128 + signo.
        assert_eq!(st.code(), Some(128 + sig), "signal {sig}: {st:?}");
        assert_eq!(
            fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
            PERFCTRL_START
        );
        assert_eq!(
            fixture::perfctrl(&root, NIC_ROOT_PORT).unwrap(),
            PERFCTRL_START
        );
        assert!(journal::journal_files(&root).is_empty(), "signal {sig}");
    }
}

#[test]
fn ddio_kill_9_midway_leaves_a_journal_that_restore_undoes() {
    let (_d, root) = fixture_host();
    let mut child = start_holding(&root);
    child.kill().unwrap(); // SIGKILL: no chance to restore.
    child.wait().unwrap();
    assert_eq!(fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(), 0x19);
    let files = journal::journal_files(&root);
    assert_eq!(files.len(), 1);
    let j: journal::Journal =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(j.config.len(), 2);
    assert!(j
        .config
        .iter()
        .all(|c| c.original == PERFCTRL_START && c.offset == 0x180));
    // status reads only, and points at the journal.
    let out = ddio(&root, &["status"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("DDIO off (perfctrlsts_0 0x19"), "{stdout}");
    assert!(stdout.contains("unrestored journal:"), "{stdout}");
    assert_eq!(fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(), 0x19);
    let out = ddio(&root, &["restore"]).output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("(read back)").count(), 2, "{stdout}");
    assert_eq!(
        fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert_eq!(
        fixture::perfctrl(&root, NIC_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert!(journal::journal_files(&root).is_empty());
    let out = ddio(&root, &["restore"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "nothing to restore"
    );
}

#[test]
fn ddio_next_change_first_undoes_a_killed_run() {
    let (_d, root) = fixture_host();
    let mut child = start_holding(&root);
    child.kill().unwrap();
    child.wait().unwrap();
    // The next run must journal the true original (0x91), not the 0x19 the
    // killed run left.
    let out = ddio(&root, &["on", "--device", "eth0", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("first undid a killed run's change"),
        "{stdout}"
    );
    assert!(
        stdout.contains("DDIO on (perfctrlsts_0 0x91 -> 0x91)"),
        "{stdout}"
    );
    assert_eq!(
        fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert!(journal::journal_files(&root).is_empty());
}
