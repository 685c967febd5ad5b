use super::fixture::{self, *};
use super::journal::{Journal, MsrValue};
use super::regs::{ConfigSpace, Registers};
use super::*;
use std::fs;

fn host() -> (tempfile::TempDir, HostRoot) {
    let dir = tempfile::tempdir().unwrap();
    let root = fixture::intel_host(dir.path(), 2, 2).unwrap();
    (dir, root)
}

#[test]
fn root_port_walk_finds_the_port_two_bridges_up() {
    let (_d, root) = host();
    for spec in [
        "/dev/nvme0n1",
        "/dev/ng0n1",
        "/dev/nvme0",
        NVME_DEVICE,
        "19:00.0",
    ] {
        let dev = topology::resolve_device(&root, spec).unwrap();
        assert_eq!(
            topology::root_port_of(spec, &dev).unwrap(),
            NVME_ROOT_PORT,
            "{spec}"
        );
    }
    let dev = topology::resolve_device(&root, "eth0").unwrap();
    assert_eq!(topology::root_port_of("eth0", &dev).unwrap(), NIC_ROOT_PORT);
    // Naming the root port itself is fine; the host bridge on the root bus is not.
    let dev = topology::resolve_device(&root, NVME_ROOT_PORT).unwrap();
    assert_eq!(topology::root_port_of("x", &dev).unwrap(), NVME_ROOT_PORT);
    let dev = topology::resolve_device(&root, "0000:00:00.0").unwrap();
    let e = topology::root_port_of("0000:00:00.0", &dev).unwrap_err();
    assert!(e.message.contains("directly on the root bus"), "{e}");
    let e = topology::resolve_device(&root, "/dev/sda").unwrap_err();
    assert_eq!(e.option, "--device");
    let e = topology::resolve_device(&root, "eth9").unwrap_err();
    assert!(e.message.contains("no PCI device found"), "{e}");
}

#[test]
fn root_ports_with_devices_below_are_listed_and_empty_ones_are_not() {
    let (_d, root) = host();
    let ports = topology::intel_root_ports(&root);
    let names: Vec<&str> = ports.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(names, vec![NVME_ROOT_PORT, NIC_ROOT_PORT]);
    assert_eq!(
        ports[0].1,
        vec!["0000:17:00.0", "0000:18:01.0", NVME_DEVICE]
    );
    assert_eq!(topology::one_cpu_per_package(&root), vec![(0, 0), (1, 2)]);
    assert_eq!(topology::llc_ways(&root), Some(11));
}

#[test]
fn status_reads_every_port_and_package() {
    let (_d, root) = host();
    let regs = Registers::files(&root);
    let st = status(&root, &regs, None).unwrap();
    assert!(st.controllable, "{:?}", st.reasons);
    assert!(st.reasons.is_empty(), "{:?}", st.reasons);
    assert_eq!(st.root_ports.len(), 2);
    assert_eq!(st.root_ports[0].perfctrlsts_0, Some(PERFCTRL_START));
    assert_eq!(st.root_ports[0].ddio.as_deref(), Some("on"));
    assert_eq!(st.root_ports[0].no_snoop_op_wr_en, Some(false));
    assert_eq!(st.packages.len(), 2);
    assert_eq!(st.packages[1].msr_c8b, Some(WAYS_START));
    assert_eq!(st.packages[1].ways, Some(2));
    let one = status(&root, &regs, Some("/dev/nvme0n1")).unwrap();
    assert_eq!(one.root_ports.len(), 1);
    assert_eq!(one.root_ports[0].bdf, NVME_ROOT_PORT);
}

#[test]
fn off_writes_bit_7_clear_and_bit_3_set_and_restore_puts_the_byte_back() {
    let (_d, root) = host();
    let p = plan(
        &root,
        &Registers::files(&root),
        Setting::Off,
        Some("/dev/nvme0n1"),
    )
    .unwrap();
    assert_eq!(p.ports, vec![NVME_ROOT_PORT]);
    let mut s = Session::begin(&root, Registers::files(&root)).unwrap();
    let lines = s.apply(&p).unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(), 0x19);
    // The other port and every other byte are untouched.
    assert_eq!(
        fixture::perfctrl(&root, NIC_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    let blob =
        fs::read(root.path(&format!("/sys/bus/pci/devices/{NVME_ROOT_PORT}/config"))).unwrap();
    let fresh = fixture::config_blob(0x8086, 0x2030, 0x060400);
    let differing: Vec<usize> = (0..4096).filter(|&i| blob[i] != fresh[i]).collect();
    assert_eq!(differing, vec![PERFCTRLSTS_0 as usize]);
    // The journal held the original before the write.
    let j: Journal = journal::read(&root, &s.journal_path()).unwrap();
    assert_eq!(j.config[0].original, PERFCTRL_START);
    assert_eq!(j.config[0].bdf, NVME_ROOT_PORT);
    let done = s.restore().unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(
        fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert!(!s.journal_path().exists());
}

#[test]
fn on_sets_bit_7_and_clears_bit_3() {
    assert_eq!(perfctrl_value(0x19, true), 0x91);
    assert_eq!(perfctrl_value(0x91, false), 0x19);
    assert_eq!(perfctrl_value(0x00, true), 0x80);
    let (_d, root) = host();
    let regs = Registers::files(&root);
    regs.config
        .write_u8(NIC_ROOT_PORT, PERFCTRLSTS_0, 0x19)
        .unwrap();
    let p = plan(&root, &regs, Setting::On, None).unwrap();
    assert_eq!(p.ports, vec![NVME_ROOT_PORT, NIC_ROOT_PORT]);
    {
        let mut s = Session::begin(&root, Registers::files(&root)).unwrap();
        s.apply(&p).unwrap();
        assert_eq!(fixture::perfctrl(&root, NIC_ROOT_PORT).unwrap(), 0x91);
        assert_eq!(fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(), 0x91);
    }
    // Dropped: both back as they were.
    assert_eq!(fixture::perfctrl(&root, NIC_ROOT_PORT).unwrap(), 0x19);
    assert_eq!(
        fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
}

#[test]
fn ways_write_the_high_ways_on_one_cpu_per_package_and_restore() {
    assert_eq!(ways_value(0x600, 2, 11), 0x600);
    assert_eq!(ways_value(0x600, 7, 11), 0x7f0);
    assert_eq!(ways_value(0x600, 4, 11), 0x780);
    assert_eq!(ways_value(0xf000_0600, 11, 11), 0xf000_07ff);
    assert_eq!(ways_in(0x7f0, 11), 7);
    let (_d, root) = host();
    let p = plan(&root, &Registers::files(&root), Setting::Ways(4), None).unwrap();
    assert_eq!(p.cpus, vec![0, 2]);
    let mut s = Session::begin(&root, Registers::files(&root)).unwrap();
    s.apply(&p).unwrap();
    assert_eq!(fixture::ways_msr(&root, 0).unwrap(), 0x780);
    assert_eq!(
        fixture::ways_msr(&root, 1).unwrap(),
        WAYS_START,
        "one CPU per package"
    );
    assert_eq!(fixture::ways_msr(&root, 2).unwrap(), 0x780);
    // A second setting in the same session keeps the first original.
    let p7 = plan(&root, &Registers::files(&root), Setting::Ways(7), None).unwrap();
    s.apply(&p7).unwrap();
    assert_eq!(fixture::ways_msr(&root, 2).unwrap(), 0x7f0);
    s.restore().unwrap();
    assert_eq!(fixture::ways_msr(&root, 0).unwrap(), WAYS_START);
    assert_eq!(fixture::ways_msr(&root, 2).unwrap(), WAYS_START);
}

#[test]
fn a_panic_midway_still_restores() {
    let (_d, root) = host();
    let r2 = root.clone();
    let res = std::panic::catch_unwind(move || {
        let p = plan(&r2, &Registers::files(&r2), Setting::Off, None).unwrap();
        let mut s = Session::begin(&r2, Registers::files(&r2)).unwrap();
        s.apply(&p).unwrap();
        assert_eq!(fixture::perfctrl(&r2, NVME_ROOT_PORT).unwrap(), 0x19);
        panic!("midway");
    });
    assert!(res.is_err());
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

/// A port that ignores writes (firmware-locked), over the fixture's files.
struct Locked(regs::SysfsConfig);
impl ConfigSpace for Locked {
    fn read_u8(&self, bdf: &str, offset: u64) -> io::Result<u8> {
        self.0.read_u8(bdf, offset)
    }
    fn write_u8(&self, _: &str, _: u64, _: u8) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_register_that_does_not_take_the_value_is_an_error() {
    let (_d, root) = host();
    let regs = Registers {
        config: Box::new(Locked(regs::SysfsConfig::new(&root))),
        msr: Box::new(regs::DevMsr::new(&root)),
    };
    let p = plan(&root, &regs, Setting::Off, None).unwrap();
    let mut s = Session::begin(&root, regs).unwrap();
    let e = s.apply(&p).unwrap_err();
    assert!(
        e.to_string().contains("reads 0x91 after writing 0x19"),
        "{e}"
    );
    s.restore().unwrap();
    assert!(journal::journal_files(&root).is_empty());
}

#[test]
fn refusals_name_what_is_missing() {
    let (_d, root) = host();
    let regs = Registers::files(&root);
    let e = plan(&root, &regs, Setting::Ways(12), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ways: 12: this CPU's LLC has 11 ways; give 1 to 11"
    );
    let e = plan(&root, &regs, Setting::Ways(2), Some("eth0")).unwrap_err();
    assert_eq!(e.option, "--device");
    fs::remove_dir_all(root.path("/dev/cpu")).unwrap();
    let e = plan(&root, &regs, Setting::Ways(2), None).unwrap_err();
    assert!(
        e.message.starts_with("no ") && e.message.contains("/dev/cpu/0/msr: load the msr driver"),
        "{e}"
    );
    fs::remove_dir_all(root.path("/sys/devices/pci0000:16")).unwrap();
    fs::remove_dir_all(root.path("/sys/devices/pci0000:3a")).unwrap();
    let e = plan(&root, &regs, Setting::Off, None).unwrap_err();
    assert!(e.message.starts_with("no Intel PCIe root port"), "{e}");
    fs::write(
        root.path("/proc/cpuinfo"),
        "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC 7713\n",
    )
    .unwrap();
    let e = plan(&root, &regs, Setting::On, None).unwrap_err();
    assert!(
        e.message
            .starts_with("not on this CPU: AuthenticAMD family 25 model 0x1"),
        "{e}"
    );
    let st = status(&root, &regs, None).unwrap();
    assert!(!st.controllable);
    assert!(st.reasons[0].starts_with("not on this CPU"));
}

#[test]
fn leftovers_of_a_dead_owner_are_restored_and_live_ones_left() {
    let (_d, root) = host();
    let regs = Registers::files(&root);
    regs.msr.write(0, MSR_IIO_LLC_WAYS, 0x7f0).unwrap();
    let dead = Journal {
        owner_pid: u32::MAX - 1,
        owner_start: None,
        config: vec![],
        msr: vec![MsrValue {
            cpu: 0,
            msr: MSR_IIO_LLC_WAYS,
            original: WAYS_START,
        }],
    };
    let dir = journal::state_dir(&root);
    journal::persist(&dir.join("ddio-4294967294.json"), &dead).unwrap();
    let mut live = Journal::this_process();
    live.owner_pid = 1;
    live.owner_start = dmalab_core::ledger::process_start_time(1);
    journal::persist(&dir.join("ddio-1.json"), &live).unwrap();
    let st = status(&root, &regs, None).unwrap();
    assert_eq!(st.journals.len(), 2);
    let r = restore_leftovers(&root, &regs);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.live, vec![1]);
    assert_eq!(fixture::ways_msr(&root, 0).unwrap(), WAYS_START);
    assert!(!dir.join("ddio-4294967294.json").exists());
    assert!(dir.join("ddio-1.json").exists());
}

#[test]
fn settings_parse_and_print() {
    for s in ["on", "off", "ways:4"] {
        assert_eq!(s.parse::<Setting>().unwrap().to_string(), s);
    }
    for bad in ["", "ON", "ways:0", "ways:x", "ways4"] {
        assert!(bad.parse::<Setting>().is_err(), "{bad}");
    }
    // The message clap and the experiment parser print, word for word.
    assert_eq!(
        "ways:0".parse::<Setting>().unwrap_err().to_string(),
        "'ways:0' is not a DDIO setting; use \"on\", \"off\" or \"ways:N\" (N >= 1)"
    );
}

#[test]
fn a_second_owner_is_refused_while_the_first_is_alive() {
    let (_d, root) = host();
    let mut live = Journal::this_process();
    live.owner_pid = 1;
    live.owner_start = dmalab_core::ledger::process_start_time(1);
    journal::persist(&journal::state_dir(&root).join("ddio-1.json"), &live).unwrap();
    let Err(DdioError::Usage(e)) = Session::begin(&root, Registers::files(&root)) else {
        panic!("a second owner was let in");
    };
    assert!(
        e.message
            .starts_with("dmalab (pid 1) is already changing DDIO"),
        "{e}"
    );
}

#[test]
fn a_kill_between_journal_and_write_restores_cleanly() {
    // The journal is written before the register: a run killed in between
    // leaves a journal whose register still holds the original.
    let (_d, root) = host();
    let regs = Registers::files(&root);
    let dead = Journal {
        owner_pid: u32::MAX - 2,
        owner_start: None,
        config: vec![journal::ConfigByte {
            bdf: NVME_ROOT_PORT.into(),
            offset: PERFCTRLSTS_0,
            original: PERFCTRL_START,
        }],
        msr: vec![],
    };
    journal::persist(
        &journal::state_dir(&root).join("ddio-4294967293.json"),
        &dead,
    )
    .unwrap();
    let r = restore_leftovers(&root, &regs);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.done.len(), 1);
    assert_eq!(
        fixture::perfctrl(&root, NVME_ROOT_PORT).unwrap(),
        PERFCTRL_START
    );
    assert!(journal::journal_files(&root).is_empty());
}

#[test]
fn ddio_errors_print_each_cause_once() {
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
    let e = DdioError::Io {
        what: "read perfctrlsts".into(),
        cause: io,
    };
    assert_eq!(dmalab_core::error::chain_line(&e), "read perfctrlsts: gone");
    let e = DdioError::from(UsageError::new("--device", "bad"));
    let u = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<UsageError>());
    assert_eq!(u, Some(&UsageError::new("--device", "bad")));
}
