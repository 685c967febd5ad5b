use super::*;

/// A pid that cannot run: beyond pid_max.
const DEAD: u32 = u32::MAX - 1;

fn write_ledger(dir: &Path, name: &str, l: &LedgerFile) {
    let p = dir.join(name);
    fs::write(&p, serde_json::to_string(l).unwrap()).unwrap();
    fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

fn dead_owner(steps: Vec<Step>) -> LedgerFile {
    LedgerFile {
        format: FORMAT,
        owner_pid: DEAD,
        owner_start: None,
        steps: steps
            .into_iter()
            .enumerate()
            .map(|(i, step)| Entry {
                id: i as u64,
                by: "test".into(),
                step,
            })
            .collect(),
    }
}

fn created(path: &Path) -> Step {
    let mut s = Step::remove_file(path);
    s.note_created().unwrap();
    s
}

#[test]
fn a_zombie_owner_is_dead() {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    // Not reaped yet: a zombie once it exits.
    let t0 = std::time::Instant::now();
    while owner_alive(pid, None) {
        assert!(t0.elapsed() < std::time::Duration::from_secs(30));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "reaped too early"
    );
    c.wait().unwrap();
    assert!(owner_alive(std::process::id(), None));
    // A recycled pid: the start time does not match.
    assert!(!owner_alive(std::process::id(), Some(1)));
}

#[test]
fn dead_owner_files_are_removed_and_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch");
    fs::write(&scratch, b"x").unwrap();
    let fifo = dir.path().join("fifo");
    fs::write(&fifo, b"was a file").unwrap();
    let fifo_step = created(&fifo);
    fs::remove_file(&fifo).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let gone = dir.path().join("gone");
    fs::write(&gone, b"x").unwrap();
    let gone_step = created(&gone);
    fs::remove_file(&gone).unwrap();
    let dead = dead_owner(vec![created(&scratch), fifo_step, gone_step]);
    write_ledger(dir.path(), "proc-1.json", &dead);
    let keep = dir.path().join("keep");
    fs::write(&keep, b"k").unwrap();
    let mut alive = dead_owner(vec![created(&keep)]);
    alive.owner_pid = 1;
    write_ledger(dir.path(), "proc-2.json", &alive);
    let r = LedgerDir::at(dir.path()).cleanup_dead();
    assert!(!scratch.exists());
    assert!(fifo.exists(), "only what dmalab created is removed");
    assert_eq!(r.left_alone.len(), 1, "{r:?}");
    assert!(!dir.path().join("proc-1.json").exists());
    assert!(keep.exists());
    assert_eq!(r.live, vec![1]);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
}

#[test]
fn steps_are_on_disk_before_the_change_and_undone_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let knob = dir.path().join("knob");
    fs::write(&knob, "1").unwrap();
    let state = LedgerDir::at(dir.path().join("state"));
    let mut c = Changes::new(state.clone(), "test");
    // Two changes of the same file: undone in reverse, the first value
    // comes back.
    c.record(Step::restore_setting(&knob, Some("2")).unwrap())
        .unwrap();
    let own = state
        .path()
        .join(format!("{PREFIX}{}.json", std::process::id()));
    let on_disk: LedgerFile = serde_json::from_str(&fs::read_to_string(&own).unwrap()).unwrap();
    assert_eq!(on_disk.steps.len(), 1);
    fs::write(&knob, "2").unwrap();
    c.record(Step::restore_setting(&knob, Some("3")).unwrap())
        .unwrap();
    fs::write(&knob, "3").unwrap();
    let f = dir.path().join("made");
    let id = c.record(Step::remove_file(&f)).unwrap();
    fs::write(&f, b"x").unwrap();
    c.created(id).unwrap();
    drop(c);
    assert_eq!(fs::read_to_string(&knob).unwrap(), "1");
    assert!(!f.exists());
    assert!(!own.exists(), "an empty ledger is removed");
}

#[test]
fn a_failed_step_stays_for_a_later_cleanup() {
    let dir = tempfile::tempdir().unwrap();
    // A register file that is gone cannot be restored: the step stays.
    let regs = dir.path().join("config");
    fs::write(&regs, [0u8; 8]).unwrap();
    let s = Step::restore_bytes(&regs, 4, 1, "a config byte").unwrap();
    fs::remove_file(&regs).unwrap();
    let f = dir.path().join("made");
    fs::write(&f, b"x").unwrap();
    let dead = dead_owner(vec![s, created(&f)]);
    write_ledger(dir.path(), "proc-9.json", &dead);
    let r = LedgerDir::at(dir.path()).cleanup_dead();
    assert_eq!(r.errors.len(), 1, "{r:?}");
    assert!(!f.exists());
    let kept: LedgerFile =
        serde_json::from_str(&fs::read_to_string(dir.path().join("proc-9.json")).unwrap()).unwrap();
    assert_eq!(kept.steps.len(), 1);
    assert!(matches!(kept.steps[0].step, Step::RestoreBytes { .. }));
}

#[test]
fn a_ledger_another_user_could_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, b"precious").unwrap();
    let dead = dead_owner(vec![created(&victim)]);
    write_ledger(dir.path(), "proc-5.json", &dead);
    fs::set_permissions(
        dir.path().join("proc-5.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let r = LedgerDir::at(dir.path()).cleanup_dead();
    assert!(victim.exists());
    assert!(r.errors[0].contains("writable by other users"), "{r:?}");
    // A symlink to a good ledger is not followed either.
    let real = tempfile::tempdir().unwrap();
    write_ledger(real.path(), "proc-5.json", &dead);
    fs::remove_file(dir.path().join("proc-5.json")).unwrap();
    std::os::unix::fs::symlink(
        real.path().join("proc-5.json"),
        dir.path().join("proc-5.json"),
    )
    .unwrap();
    let r = LedgerDir::at(dir.path()).cleanup_dead();
    assert!(victim.exists());
    assert!(r.errors[0].contains("symlink"), "{r:?}");
}

#[test]
fn old_formats_are_undone_or_reported() {
    let dir = tempfile::tempdir().unwrap();
    let knob = dir.path().join("knob");
    fs::write(&knob, "0").unwrap();
    let scratch = dir.path().join("scratch");
    fs::write(&scratch, b"x").unwrap();
    let page = serde_json::json!({
        "owner_pid": DEAD, "owner_start": null, "cgroup": null, "zram_id": null,
        "swapon": [], "swap_file": null,
        "settings": [{"path": knob, "old": "3", "new": "0"}]
    });
    let proc_ = serde_json::json!({
        "owner_pid": DEAD, "owner_start": null, "files": [scratch]
    });
    for (n, v) in [("page-7.json", page), ("proc-7.json", proc_)] {
        let p = dir.path().join(n);
        fs::write(&p, v.to_string()).unwrap();
        fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let r = LedgerDir::at(dir.path()).cleanup_dead();
    assert_eq!(fs::read_to_string(&knob).unwrap(), "3");
    assert!(scratch.exists(), "a bare path is reported, not removed");
    assert!(r.left_alone[0].contains("scratch"), "{r:?}");
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(LedgerDir::at(dir.path()).files().is_empty());
}

#[test]
fn a_pool_growth_is_settled_by_its_own_size() {
    let dir = tempfile::tempdir().unwrap();
    let nr = dir.path().join("nr_hugepages");
    let state = LedgerDir::at(dir.path().join("s"));
    let a = state
        .record(
            "hugetlb",
            Step::ShrinkPool {
                path: nr.clone(),
                pages: 3,
            },
        )
        .unwrap();
    let b = state
        .record(
            "hugetlb",
            Step::ShrinkPool {
                path: nr.clone(),
                pages: 2,
            },
        )
        .unwrap();
    state.forget(a).unwrap();
    assert_eq!(
        state.step(b),
        Some(Step::ShrinkPool {
            path: resolve(&nr),
            pages: 2
        })
    );
    state.forget(b).unwrap();
}
