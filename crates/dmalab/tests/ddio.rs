//! `dmalab ddio` through the binary: the refusals on this host, and on a
//! fixture Intel host (`--host-root`, files standing for config space and
//! MSRs) the writes, the restore on exit and on signals, and the journal
//! left by a `kill -9` that `dmalab ddio restore` and the next run undo.

use crate::common;

use common::dmalab;
use dmalab_host::ddio::fixture::{self, NIC_ROOT_PORT, NVME_ROOT_PORT, PERFCTRL_START, WAYS_START};
use dmalab_host::ddio::journal;
use dmalab_host::ddio::{self, regs::Registers};
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

/// What this host's `ddio off` would be refused with, as the library plans
/// it: `not on this CPU` on AMD and Intel client parts, no Intel root port
/// or no MSR device on a Xeon guest. The tests below hold the binary to it
/// on whichever vendor CI runs, and the fixture tests pin each vendor's
/// wording.
fn host_refusal(setting: ddio::Setting) -> Option<dmalab_core::UsageError> {
    let root = HostRoot::system();
    ddio::plan(&root, &Registers::files(&root), setting, None).err()
}

#[test]
fn ddio_status_here_says_why_it_cannot_act() {
    let root = HostRoot::system();
    let lib = ddio::status(&root, &Registers::files(&root), None).unwrap();
    if !common::need("a host where DDIO cannot be changed", !lib.controllable) {
        return;
    }
    let out = dmalab().args(["ddio", "status"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A status that says what it found has succeeded, whatever it found.
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(stdout.contains("controllable: no"), "{stdout}");
    assert!(!lib.reasons.is_empty());
    for r in &lib.reasons {
        assert!(stdout.contains(&format!("cannot act: {r}\n")), "{stdout}");
    }
}

#[test]
fn ddio_changes_are_refused_here_with_exit_2() {
    for args in [
        &["off"][..],
        &["on", "--device", "0000:00:03.0"],
        &["ways", "2"],
        &["off", "--", "true"],
    ] {
        let out = dmalab().arg("ddio").args(args).output().unwrap();
        let setting = match args[0] {
            "off" => ddio::Setting::Off,
            "on" => ddio::Setting::On,
            _ => ddio::Setting::Ways(2),
        };
        let stderr = common::assert_usage_output(&out, "");
        if args.len() == 1 || args[1] != "--device" {
            let Some(refusal) = host_refusal(setting) else {
                common::need("a host where DDIO cannot be changed", false);
                return;
            };
            assert_eq!(
                stderr,
                format!("dmalab: error: {}: {}", refusal.option, refusal.message),
                "{args:?}"
            );
        }
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

/// The fixture host with another CPU in `/proc/cpuinfo`.
fn with_cpu(root: &HostRoot, vendor: &str, family: u32, model: u32, name: &str) {
    std::fs::write(
        root.path("/proc/cpuinfo"),
        format!("processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: {name}\n"),
    )
    .unwrap();
}

/// Each vendor's refusal, whatever CPU runs the test: an AMD EPYC, an
/// Intel client part (family 6 model 0xa7, as a CI machine once was) and a
/// supported Xeon whose guest shows no Intel root port. `status` exits 0
/// and says why; a change exits 2 with the same reason.
#[test]
fn ddio_refusals_per_vendor_on_fixture_hosts() {
    let cases: [(&str, u32, u32, &str, &str); 3] = [
        (
            "AuthenticAMD",
            25,
            1,
            "AMD EPYC 7713",
            "ddio: not on this CPU: AuthenticAMD family 25 model 0x1 (AMD EPYC 7713)",
        ),
        (
            "GenuineIntel",
            6,
            0xa7,
            "Intel(R) Xeon(R) E-2388G",
            "ddio: not on this CPU: GenuineIntel family 6 model 0xa7",
        ),
        (
            "GenuineIntel",
            6,
            0x8f,
            "Intel(R) Xeon(R) Platinum 8480+",
            "ddio: no Intel PCIe root port",
        ),
    ];
    for (vendor, family, model, name, want) in cases {
        let (_d, root) = fixture_host();
        with_cpu(&root, vendor, family, model, name);
        if model == 0x8f {
            // A Xeon guest: no Intel root port, and no MSR the guest can read.
            std::fs::remove_dir_all(root.path("/dev/cpu")).unwrap();
            std::fs::remove_dir_all(root.path("/sys/devices/pci0000:16")).unwrap();
            std::fs::remove_dir_all(root.path("/sys/devices/pci0000:3a")).unwrap();
        }
        let out = ddio(&root, &["status"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{vendor} {model:#x}: {stdout}");
        assert!(stdout.contains("controllable: no"), "{stdout}");
        let reason = want.strip_prefix("ddio: ").unwrap();
        assert!(
            stdout.contains(&format!("cannot act: {reason}")),
            "{vendor} {model:#x}: {stdout}"
        );
        for args in [&["off"][..], &["off", "--", "true"]] {
            let e = common::assert_usage_error_of(&mut ddio(&root, args), "ddio: ");
            assert!(
                e.starts_with(&format!("dmalab: error: {want}")),
                "{vendor} {model:#x} {args:?}: {e}"
            );
        }
    }
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
    let j: journal::Journal = journal::read(&root, &files[0]).unwrap();
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

/// `dmalab cleanup` after `kill -9` puts a fixture host's DDIO back (the
/// one ledger: cleanup is the same call for every host change).
#[test]
fn cleanup_after_kill_9_restores_ddio_on_a_fixture_host() {
    let (_d, root) = fixture_host();
    let mut child = start_holding(&root);
    child.kill().unwrap(); // SIGKILL: no chance to restore.
    child.wait().unwrap();
    assert_eq!(fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(), 0x19);
    let out = dmalab()
        .arg("cleanup")
        .arg("--host-root")
        .arg(root.path("/"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
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
}

/// A ledger another user could have written (mode 0666) names paths to
/// remove and values to write back: `cleanup` refuses it (exit 1, saying
/// why) and acts on nothing it names.
#[test]
fn cleanup_refuses_a_ledger_writable_by_other_users() {
    use std::os::unix::fs::PermissionsExt;
    let (d, root) = fixture_host();
    let victim = d.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let dir = root.path("/run/dmalab");
    std::fs::create_dir_all(&dir).unwrap();
    let planted = dir.join("proc-4294967294.json");
    // Its identity as a real record would hold it: without the check on
    // the ledger file, the file would be removed.
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&victim).unwrap();
    let ident = serde_json::json!({
        "dev": m.dev(), "ino": m.ino(), "kind": "file", "uid": m.uid(), "created_ns": null
    });
    let ledger = serde_json::json!({
        "format": 2, "owner_pid": 4294967294u32, "owner_start": null,
        "steps": [{"id": 1, "by": "scratch",
                   "step": {"undo": "remove_file", "path": victim, "ident": ident}}]
    });
    std::fs::write(&planted, ledger.to_string()).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = dmalab()
        .arg("cleanup")
        .arg("--host-root")
        .arg(root.path("/"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("writable by other users"), "{stderr}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(planted.exists());
}
