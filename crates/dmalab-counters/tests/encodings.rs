//! The encoded `perf_event_attr` of each spec against a fake sysfs tree
//! with the kernel's own format strings (the workspace's
//! `tests/fixtures/counters/pmus.txt`) equals the reference values worked
//! out from the kernel's perf event JSON
//! (`tests/fixtures/counters/encodings.txt`, each line naming its source).

use dmalab_counters::catalog::Catalog;
use dmalab_counters::recipes::{self, CpuId};
use dmalab_counters::session::Request;
use dmalab_counters::spec::{self, Absence};
use std::fs;
use std::path::Path;

const PMUS: &str = include_str!("../../../tests/fixtures/counters/pmus.txt");
const ENCODINGS: &str = include_str!("../../../tests/fixtures/counters/encodings.txt");

/// Writes the fake PMU tree under `root`.
fn write_tree(root: &Path) {
    let mut cur = None;
    for line in PMUS.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[0] {
            "pmu" => {
                let d = root.join(f[1]);
                fs::create_dir_all(d.join("format")).unwrap();
                fs::create_dir_all(d.join("events")).unwrap();
                fs::write(d.join("type"), format!("{}\n", f[2])).unwrap();
                if f[3] != "-" {
                    fs::write(d.join("cpumask"), format!("{}\n", f[3])).unwrap();
                }
                cur = Some(d);
            }
            "format" => {
                let d = cur.as_ref().unwrap();
                fs::write(d.join("format").join(f[1]), format!("{}\n", f[2])).unwrap();
            }
            "event" => {
                let d = cur.as_ref().unwrap().join("events");
                fs::write(d.join(f[1]), format!("{}\n", f[2])).unwrap();
                if f.len() > 3 {
                    fs::write(d.join(format!("{}.scale", f[1])), f[3]).unwrap();
                    fs::write(d.join(format!("{}.unit", f[1])), f[4]).unwrap();
                }
            }
            "die" => {
                let d = cur.as_ref().unwrap();
                fs::write(d.join(f[1]), format!("{}\n", f[2])).unwrap();
            }
            other => panic!("fixture: unknown line kind {other}"),
        }
    }
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn every_fixture_spec_encodes_to_the_reference_attr() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path());
    let cat = Catalog::read(dir.path());
    let mut n = 0;
    for line in ENCODINGS.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        let (spec_text, pmus, type_id, config, config1, source) =
            (f[0], f[1], f[2], hex(f[3]), hex(f[4]), f[5]);
        let r = spec::resolve("--counters", spec_text, &cat).unwrap();
        assert!(r.absent.is_none(), "{spec_text}: {:?}", r.absent);
        let names: Vec<&str> = r.instances.iter().map(|i| i.pmu.as_str()).collect();
        assert_eq!(names.join(","), pmus, "{spec_text}");
        assert_eq!(
            r.instances[0].type_id,
            type_id.parse::<u32>().unwrap(),
            "{spec_text}"
        );
        for i in &r.instances {
            assert_eq!(
                (i.config, i.config1),
                (config, config1),
                "{spec_text}: got config={:#x} config1={:#x}, reference from {source}",
                i.config,
                i.config1
            );
        }
        n += 1;
    }
    assert!(n >= 15, "only {n} fixture lines");
}

#[test]
fn catalog_reads_cpumask_scale_unit_and_iio_dies() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path());
    let cat = Catalog::read(dir.path());
    let cha = &cat.pmus["uncore_cha_0"];
    assert_eq!(cha.cpumask, vec![0, 20]);
    assert!(cha.is_uncore());
    assert!(!cat.pmus["cpu"].is_uncore());
    let iio = &cat.pmus["uncore_iio_0"];
    assert_eq!(
        iio.iio_dies.get("die1").map(String::as_str),
        Some("0000:80")
    );
    let fr = spec::resolve("--counters", "uncore_iio_free_running_0/bw_in_port0/", &cat).unwrap();
    assert_eq!(fr.unit, "MiB");
    assert!((fr.scale - 3.814697266e-6).abs() < 1e-15);
    // The scale turns counts into MiB; metrics turn MiB into bytes.
    assert_eq!(recipes::to_base(1.0, "MiB"), 1048576.0);
}

#[test]
fn bad_terms_are_usage_errors_and_missing_things_are_absences() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path());
    let cat = Catalog::read(dir.path());
    let e = spec::resolve("--counters", "uncore_cha/event=0x35,bogus=1/", &cat).unwrap_err();
    assert!(e.message.contains("no term 'bogus'"), "{e}");
    let e = spec::resolve("--counters", "uncore_cha/event=0x135/", &cat).unwrap_err();
    assert!(e.message.contains("does not fit"), "{e}");
    let r = spec::resolve("--counters", "cpu/no-such-event/", &cat).unwrap();
    assert!(
        matches!(r.absent, Some(Absence::EventUnknown { .. })),
        "{r:?}"
    );
    assert!(r
        .absent
        .unwrap()
        .to_string()
        .contains("unknown on this CPU"));
    let r = spec::resolve("--counters", "uncore_m2m/event=1/", &cat).unwrap();
    assert!(matches!(r.absent, Some(Absence::NoSuchPmu { .. })));
}

#[test]
fn recipes_encode_on_their_cpus() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path());
    let cat = Catalog::read(dir.path());
    let skx = CpuId {
        vendor: "GenuineIntel".into(),
        family: 6,
        model: 0x55,
        model_name: String::new(),
    };
    let r = Request::parse_with("--counters", "skx-pcie", &cat, skx).unwrap();
    let miss = r.events.iter().find(|e| e.id == "pcirdcur_miss").unwrap();
    assert_eq!(miss.resolved.instances.len(), 2);
    assert_eq!(miss.resolved.instances[0].config, 0x2435);
    assert_eq!(miss.resolved.instances[0].config1, 0x43c3300000000);
    let hit = r.events.iter().find(|e| e.id == "itom_hit").unwrap();
    assert_eq!(hit.resolved.instances[0].config, 0x1435);
    assert_eq!(hit.resolved.instances[0].config1, 0x4903300000000);
    assert!(r.events.iter().all(|e| e.solo));
    let zen2 = CpuId {
        vendor: "AuthenticAMD".into(),
        family: 0x17,
        model: 0x31,
        model_name: String::new(),
    };
    let r = Request::parse_with("--counters", "amd-df-dram", &cat, zen2).unwrap();
    let ch4 = r.events.iter().find(|e| e.id == "dram_ch4").unwrap();
    assert_eq!(ch4.resolved.instances[0].config, 0x1_0000_3807);
    let zen4 = CpuId {
        vendor: "AuthenticAMD".into(),
        family: 0x19,
        model: 0x11,
        model_name: String::new(),
    };
    let r = Request::parse_with("--counters", "amd-umc-dram", &cat, zen4).unwrap();
    let rd = r.events.iter().find(|e| e.id == "umc_cas_rd").unwrap();
    assert_eq!(rd.resolved.instances.len(), 2);
    assert_eq!(rd.resolved.instances[1].cpus, vec![16]);
    assert_eq!(rd.resolved.instances[0].config, 0x10a);
}

/// Ice Lake-SP: the recipe's `uncore_cha/.../` specs against CHA PMUs with
/// ICX's format strings (umask_ext4 config:8-15,32-55), and the IIO
/// free-running counters' MiB turned into bytes.
#[test]
fn icx_recipe_encodes_against_icx_formats() {
    let dir = tempfile::tempdir().unwrap();
    for (n, ty) in [("uncore_cha_0", "30"), ("uncore_cha_1", "31")] {
        let d = dir.path().join(n);
        fs::create_dir_all(d.join("format")).unwrap();
        fs::write(d.join("type"), ty).unwrap();
        fs::write(d.join("cpumask"), "0,28").unwrap();
        for (t, f) in [
            ("event", "config:0-7"),
            ("umask", "config:8-15,32-55"),
            ("tid_en", "config:16"),
            ("edge", "config:18"),
            ("inv", "config:23"),
            ("thresh", "config:24-31"),
            ("filter_tid", "config1:0-9"),
        ] {
            fs::write(d.join("format").join(t), f).unwrap();
        }
    }
    let fr = dir.path().join("uncore_iio_free_running_0");
    fs::create_dir_all(fr.join("format")).unwrap();
    fs::create_dir_all(fr.join("events")).unwrap();
    fs::write(fr.join("type"), "50").unwrap();
    fs::write(fr.join("cpumask"), "0").unwrap();
    fs::write(fr.join("format/event"), "config:0-7").unwrap();
    fs::write(fr.join("format/umask"), "config:8-15").unwrap();
    for p in 0..8 {
        let e = fr.join("events").join(format!("bw_in_port{p}"));
        fs::write(&e, format!("event=0xff,umask={:#x}", 0x20 + p)).unwrap();
        fs::write(
            fr.join("events").join(format!("bw_in_port{p}.scale")),
            "3.814697266e-6",
        )
        .unwrap();
        fs::write(fr.join("events").join(format!("bw_in_port{p}.unit")), "MiB").unwrap();
    }
    let cat = Catalog::read(dir.path());
    let icx = CpuId {
        vendor: "GenuineIntel".into(),
        family: 6,
        model: 0x6a,
        model_name: String::new(),
    };
    let r = Request::parse_with("--counters", "icx-pcie", &cat, icx.clone()).unwrap();
    let get = |id: &str| r.events.iter().find(|e| e.id == id).unwrap();
    // icelakex uncore-cache.json: IO_MISS_PCIRDCUR UMask 0xC8F3FE04,
    // IO_HIT_ITOM 0xCC43FD04, IO_MISS_RFO 0xC803FE04 (event 0x35).
    assert_eq!(
        get("pcirdcur_miss").resolved.instances[0].config,
        0x00c8_f3fe_0000_0435
    );
    assert_eq!(
        get("itom_hit").resolved.instances[0].config,
        0x00cc_43fd_0000_0435
    );
    assert_eq!(
        get("rfo_miss").resolved.instances[1].config,
        0x00c8_03fe_0000_0435
    );
    assert_eq!(get("rfo_miss").resolved.instances[1].cpus, vec![0, 28]);
    let p3 = &get("iio_bw_in_port3").resolved;
    assert_eq!(p3.instances[0].config, 0x23ff);
    assert_eq!((p3.unit.as_str(), p3.scale), ("MiB", 3.814697266e-6));
    assert!(r.events.iter().all(|e| e.resolved.absent.is_none()));
    // Sapphire Rapids: the same CHA IO encodings (sapphirerapids
    // uncore-cache.json lists the icelakex values) on the same umask_ext4
    // layout.
    let spr = CpuId {
        model: 0x8f,
        ..icx.clone()
    };
    let s = Request::parse_with("--counters", "spr-iio", &cat, spr).unwrap();
    for id in [
        "pcirdcur_hit",
        "pcirdcur_miss",
        "itom_hit",
        "itom_miss",
        "rfo_hit",
        "rfo_miss",
    ] {
        let e = s.events.iter().find(|e| e.id == id).unwrap();
        assert_eq!(
            e.resolved.instances[0].config,
            get(id).resolved.instances[0].config,
            "{id}"
        );
    }
    assert_eq!(
        s.events
            .iter()
            .find(|e| e.id == "itom_miss")
            .unwrap()
            .resolved
            .instances[0]
            .config,
        0x00cc_43fe_0000_0435
    );
    // 2^18 counts of the free-running counter are 1 MiB, i.e. 4 bytes each.
    assert_eq!(
        recipes::to_base(262144.0 * p3.scale, &p3.unit).round(),
        1048576.0
    );
}

/// Haswell-EP/Broadwell-EP (the thesis' machine): all fourteen C-box events
/// of `hsx-pcie` encode against hswep's format strings, one per group
/// (the C-box has one opcode filter), on every `uncore_cbox_N`; and the
/// Sapphire Rapids iMC CAS counts on every `uncore_imc_N`.
#[test]
fn hsx_and_spr_imc_recipes_encode_on_their_cpus() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path());
    let cat = Catalog::read(dir.path());
    let hsx = CpuId {
        vendor: "GenuineIntel".into(),
        family: 6,
        model: 0x3f,
        model_name: String::new(),
    };
    let r = Request::parse_with("--counters", "hsx-pcie", &cat, hsx.clone()).unwrap();
    assert_eq!(r.events.len(), 14);
    assert!(r
        .events
        .iter()
        .all(|e| e.solo && e.resolved.absent.is_none()));
    let get = |id: &str| {
        let e = r.events.iter().find(|e| e.id == id).unwrap();
        let i = &e.resolved.instances;
        assert_eq!(i.len(), 2, "{id}: every C-box");
        (i[1].type_id, i[1].config, i[1].config1, i[1].cpus.clone())
    };
    // haswellx uncore-cache.json: LLC_REFERENCES.PCIE_READ umask 0x1 and
    // LLC_MISSES.PCIE_READ umask 0x3, filter_opc=0x19e in config1:52-60;
    // LLC_REFERENCES.PCIE_WRITE filter_opc=0x1c8,filter_tid=0x3e (tid_en
    // config:19); LLC_MISSES.MMIO_WRITE filter_opc=0x18f,filter_nc=1.
    assert_eq!(get("pcirdcur_all"), (36, 0x135, 0x19e << 52, vec![0, 18]));
    assert_eq!(get("pcirdcur_miss"), (36, 0x335, 0x19e << 52, vec![0, 18]));
    assert_eq!(
        get("itom_all"),
        (36, 0x8_0135, (0x1c8 << 52) | 0x3e, vec![0, 18])
    );
    assert_eq!(
        get("wil_miss"),
        (36, 0x335, (0x18f << 52) | (1 << 62), vec![0, 18])
    );
    let bdx = CpuId { model: 0x4f, ..hsx };
    assert!(recipes::find("hsx-pcie").unwrap().applies_to(&bdx));
    let spr = CpuId {
        vendor: "GenuineIntel".into(),
        family: 6,
        model: 0xcf,
        model_name: String::new(),
    };
    let m = Request::parse_with("--counters", "spr-imc-dram", &cat, spr).unwrap();
    for (id, config) in [("imc_cas_rd", 0xcf05u64), ("imc_cas_wr", 0xf005)] {
        let e = m.events.iter().find(|e| e.id == id).unwrap();
        let got: Vec<(&str, u64)> = e
            .resolved
            .instances
            .iter()
            .map(|i| (i.pmu.as_str(), i.config))
            .collect();
        assert_eq!(got, [("uncore_imc_0", config), ("uncore_imc_1", config)]);
    }
}
