//! `dmalab sim` through the binary: synth, compare, sweep, convert, stat,
//! MSR replay, and bad input.

use crate::common;
use common::dmalab;
use std::path::{Path, PathBuf};

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/sim")
        .join(name)
}

#[test]
fn synth_then_compare_prints_the_scheme_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let fc = dir.path().join("fc.trace");
    let json = dir.path().join("fc.json");
    dmalab()
        .args(["sim", "synth", "file-copy", "--size", "1M", "--output"])
        .arg(&fc)
        .assert()
        .success();
    let out = dmalab()
        .args(["sim", "compare"])
        .arg(&fc)
        .arg("--output")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    for s in [
        "snoop",
        "shared",
        "dma-cache-32K",
        "dma-cache-64K",
        "dma-cache-128K",
        "dma-cache-256K",
        "dma-cache-256K-pf",
        "speedup",
        "row_c",
        "M refs/s",
    ] {
        assert!(text.contains(s), "no {s} in:\n{text}");
    }
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["command"], "sim compare");
    assert_eq!(doc["config"]["params"]["dram"]["preset"], "ddr2-800");
    let schemes = doc["result"]["schemes"].as_array().unwrap();
    assert_eq!(schemes.len(), 7);
    assert_eq!(schemes[0]["scheme"], "snoop");
    assert_eq!(schemes[0]["speedup_vs_snoop"], 1.0);
    // 1 MiB copied: 8 chunks of 2048 DMA writes and 2048 DMA reads.
    assert_eq!(schemes[0]["dma"]["refs"], 8 * 4096);
    assert_eq!(schemes[0]["cpu"]["refs"], 8 * 8192);
    let b = &schemes[0]["breakdown_ns"];
    let parts: f64 = [
        "compute_ns",
        "cache_hit_ns",
        "cpu_read_mem_ns",
        "cpu_writeback_mem_ns",
        "dma_read_mem_ns",
        "dma_write_mem_ns",
        "final_drain_ns",
    ]
    .iter()
    .map(|k| b[k].as_f64().unwrap())
    .sum();
    let total = schemes[0]["total_ns"].as_f64().unwrap();
    assert!((parts - total).abs() < 1e-3 * total, "{parts} vs {total}");
}

#[test]
fn text_trace_converts_and_compares_like_binary() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("t.txt");
    let bin = dir.path().join("t.trace");
    std::fs::write(
        &txt,
        "# hand written\n0 begin-w 0x10000 256\n0 dma-w 0x10000 256\n0 end-w 0x10000 256\n5 cpu-r 0x10000 64\n0 xfer-r 0x20000 4096 1000\n",
    )
    .unwrap();
    dmalab()
        .args(["sim", "convert"])
        .arg(&txt)
        .arg(&bin)
        .args(["--to", "binary"])
        .assert()
        .success();
    let st = dmalab().args(["sim", "stat"]).arg(&bin).output().unwrap();
    let s = stdout(&st);
    assert!(
        s.contains("cpu_refs 1") && s.contains("dma_refs 1") && s.contains("dma_transfers 1"),
        "{s}"
    );
    let a = dmalab()
        .args(["sim", "compare", "--schemes", "snoop,shared"])
        .arg(&txt)
        .output()
        .unwrap();
    let b = dmalab()
        .args(["sim", "compare", "--schemes", "snoop,shared"])
        .arg(&bin)
        .output()
        .unwrap();
    let table = |o: &std::process::Output| {
        stdout(o)
            .lines()
            .filter(|l| l.starts_with("snoop") || l.starts_with("shared"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(table(&a), table(&b));
    // Two schemes in four tables: the scheme table, device-written data,
    // the breakdown of each total and the breakdown against snoop's.
    assert_eq!(table(&a).len(), 8);
}

#[test]
fn sweep_reports_each_value_and_the_orderings() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("tp.trace");
    let json = dir.path().join("s.json");
    dmalab()
        .args(["sim", "synth", "tpch", "--size", "1M", "--output"])
        .arg(&t)
        .assert()
        .success();
    let out = dmalab()
        .args(["sim", "sweep"])
        .arg(&t)
        .args(["--param", "llc.size_bytes", "--values", "256K,1M"])
        .args(["--schemes", "snoop,shared,dma-cache-32K,dma-cache-256K-pf"])
        .args(["--set", "dram.preset=ddr4-3200", "--output"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(
        text.contains("256K") && text.contains("1M") && text.contains("pf>sn"),
        "{text}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let points = doc["result"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(doc["config"]["params"]["dram"]["timing"]["cl"], 22);
    assert!(points[0]["orderings"]["dma_cache_256k_pf_beats_snoop"].is_boolean());
}

#[test]
fn msr_cambridge_csv_replays_as_dma_transfers() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("msr.trace");
    dmalab()
        .args(["sim", "synth", "msr", "--input"])
        .arg(fixture("msr_small.csv"))
        .arg("--output")
        .arg(&t)
        .assert()
        .success();
    let s = stdout(&dmalab().args(["sim", "stat"]).arg(&t).output().unwrap());
    // 8 requests; the CPU touches every line they move: 4+16+4+64+4+128+8+4
    // KiB = 232 KiB = 3712 lines.
    assert!(s.contains("dma_transfers 8"), "{s}");
    assert!(s.contains("cpu_refs 3712"), "{s}");
    let out = dmalab().args(["sim", "compare"]).arg(&t).output().unwrap();
    assert!(out.status.success());
    assert!(stdout(&out).contains("dma-cache-256K-pf"));
}

#[test]
fn bad_input_exits_2_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("t.txt");
    std::fs::write(&txt, "0 cpu-r 0x0 64\n0 cpu-q 0x40 64\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["compare".into(), "/no/such.trace".into()], "TRACE"),
        (vec!["compare".into(), txt.display().to_string()], "t.txt:2"),
        (
            vec![
                "compare".into(),
                txt.display().to_string(),
                "--schemes".into(),
                "ddio".into(),
            ],
            "--schemes",
        ),
        (
            vec![
                "compare".into(),
                txt.display().to_string(),
                "--set".into(),
                "llc.ways=0".into(),
            ],
            "--set",
        ),
        (
            vec![
                "compare".into(),
                txt.display().to_string(),
                "--params".into(),
                "nope".into(),
            ],
            "--params",
        ),
        (
            vec![
                "synth".into(),
                "msr".into(),
                "--output".into(),
                "x.trace".into(),
            ],
            "--input",
        ),
        (
            [
                "synth",
                "rx",
                "--ring",
                "8",
                "--inflight",
                "8",
                "--output",
                "x.trace",
            ]
            .map(String::from)
            .to_vec(),
            "--inflight",
        ),
        (
            ["params", "--params", "modern", "--set", "llc.slices=3"]
                .map(String::from)
                .to_vec(),
            "--set",
        ),
    ];
    for (args, needle) in cases {
        common::assert_usage_error_of(
            dmalab().arg("sim").args(&args).current_dir(dir.path()),
            needle,
        );
    }
    // Nothing half-written by the failed synth.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
}

/// scripts/pgo-rustc.sh (used by scripts/build-pgo.sh) adds the profile only
/// to the simulator and binary crates, so every other crate of a PGO build
/// is compiled as in a plain one.
#[test]
fn pgo_wrapper_adds_the_profile_to_the_sim_and_binary_crates_only() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pgo-rustc.sh");
    let run = |crate_name: &str, profile: Option<&str>| {
        let mut c = std::process::Command::new(&script);
        // `echo` stands in for rustc: it prints the arguments it was given.
        c.args([
            "echo",
            "--edition=2021",
            "--crate-name",
            crate_name,
            "src/lib.rs",
        ]);
        c.env_remove("DMALAB_PGO_PROFILE");
        if let Some(p) = profile {
            c.env("DMALAB_PGO_PROFILE", p);
        }
        let out = c.output().expect("run scripts/pgo-rustc.sh");
        assert!(out.status.success());
        stdout(&out).trim().to_string()
    };
    let plain = "--edition=2021 --crate-name dmalab_load src/lib.rs";
    assert_eq!(run("dmalab_load", Some("/p.profdata")), plain);
    for name in ["dmalab_sim", "dmalab"] {
        let with = run(name, Some("/p.profdata"));
        assert!(
            with.ends_with(&format!(
                "--crate-name {name} src/lib.rs -Cprofile-use=/p.profdata -Cllvm-args=-profile-summary-cutoff-hot=999000"
            )),
            "{with}"
        );
        assert_eq!(
            run(name, None),
            format!("--edition=2021 --crate-name {name} src/lib.rs")
        );
    }
}

/// `--output /dev/null` (or any character device or FIFO) is written in
/// place: writing whole-or-nothing through a renamed temporary file once
/// replaced the device node with a regular file. Checked on a FIFO, not on
/// /dev/null itself, so a regression cannot break the machine.
#[test]
fn output_to_a_fifo_is_written_in_place() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("fc.trace");
    dmalab()
        .args(["sim", "synth", "file-copy", "--size", "256K", "--output"])
        .arg(&trace)
        .assert()
        .success();
    for args in [
        vec!["sim", "compare", trace.to_str().unwrap(), "--output"],
        vec!["sim", "synth", "file-copy", "--size", "256K", "--output"],
    ] {
        let fifo = dir.path().join("pipe");
        let _ = std::fs::remove_file(&fifo);
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        let rp = fifo.clone();
        let reader = std::thread::spawn(move || std::fs::read(&rp).unwrap());
        dmalab().args(&args).arg(&fifo).assert().success();
        // Checked before joining: had the FIFO been replaced, the reader
        // would wait on it for ever.
        let t = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(t.is_fifo(), "{args:?}: the FIFO was replaced");
        assert!(!reader.join().unwrap().is_empty(), "{args:?}");
        // Nothing but the trace and the FIFO in the directory.
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "{args:?}"
        );
    }
}

/// `synth --text` writes the text form directly (it once wrote a hidden
/// binary trace and converted it): the file is the one `convert --to text`
/// makes of the binary synth, byte for byte, and nothing else is left.
#[test]
fn synth_text_is_the_converted_binary_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, txt, via) = (
        dir.path().join("w.trace"),
        dir.path().join("w.txt"),
        dir.path().join("via.txt"),
    );
    for (out, text) in [(&bin, false), (&txt, true)] {
        let mut c = dmalab();
        c.args(["sim", "synth", "web", "--requests", "300", "--output"])
            .arg(out);
        if text {
            c.arg("--text");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{o:?}");
        assert!(stdout(&o).contains(" records written to "), "{o:?}");
    }
    dmalab()
        .args(["sim", "convert"])
        .arg(&bin)
        .arg(&via)
        .args(["--to", "text"])
        .assert()
        .success();
    let text = std::fs::read(&txt).unwrap();
    assert!(text.starts_with(b"0 ") && text.contains(&b'\n'));
    assert_eq!(text, std::fs::read(&via).unwrap());
    let stat = |p: &Path| stdout(&dmalab().args(["sim", "stat"]).arg(p).output().unwrap());
    assert_eq!(stat(&bin), stat(&txt));
    assert!(stat(&txt).contains("dma_transfers "));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

/// Issue 16 item 7: `--set` options were checked one by one, so
/// `--set llc.ways=1 --set llc.ddio_ways=1` failed on the first (ddio_ways
/// still 4 > ways 1) while the reverse order worked. The set is now checked
/// once, after all of them.
#[test]
fn set_llc_ways_1_then_ddio_ways_1_was_refused() {
    for order in [
        ["llc.ways=1", "llc.ddio_ways=1"],
        ["llc.ddio_ways=1", "llc.ways=1"],
    ] {
        let out = dmalab()
            .args(["sim", "params", "--set", order[0], "--set", order[1]])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{order:?}: {err}");
        let text = stdout(&out);
        assert!(text.contains("ddio_ways = 1"), "{text}");
    }
    // A set that is wrong after all of them still fails, naming --set.
    common::assert_usage_error(
        [
            "sim",
            "params",
            "--set",
            "llc.ways=1",
            "--set",
            "llc.ddio_ways=2",
        ],
        "llc.ddio_ways",
    );
}

/// Issue 29 through the binary: a receive ring within the DDIO ways under
/// the modern set. Posted device writes and a core's miss at full price:
/// `shared` reads every received line from the LLC, `snoop` from DRAM,
/// and `shared` is faster. `sim stat` prints the request sizes.
#[test]
fn receive_ring_within_ddio_ways_is_served_from_the_llc() {
    let dir = tempfile::tempdir().unwrap();
    let rx = dir.path().join("rx.trace");
    let json = dir.path().join("rx.json");
    dmalab()
        .args(["sim", "synth", "rx", "--packets", "2000", "--ring", "64"])
        .args(["--inflight", "16", "--output"])
        .arg(&rx)
        .assert()
        .success();
    let out = dmalab()
        .args([
            "sim",
            "compare",
            "--params",
            "modern",
            "--schemes",
            "snoop,shared",
        ])
        .arg(&rx)
        .arg("--output")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("% of snoop's total"), "{text}");
    assert!(!text.contains("no CPU references"), "{text}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let s = doc["result"]["schemes"].as_array().unwrap();
    let io = |i: usize, k: &str| s[i]["io"][k].as_u64().unwrap();
    // 2000 packets of 1500 bytes: 24 lines each, written and read.
    assert_eq!((io(0, "writes"), io(1, "writes")), (48_000, 48_000));
    assert_eq!(io(0, "cpu_misses"), 48_000);
    assert_eq!((io(1, "cpu_misses"), io(1, "cpu_hits")), (0, 48_000));
    assert_eq!(io(1, "dram_writes"), 0);
    let t = |i: usize| s[i]["total_ns"].as_f64().unwrap();
    assert!(t(1) < t(0), "shared {} snoop {}", t(1), t(0));
    let stat = dmalab().args(["sim", "stat"]).arg(&rx).output().unwrap();
    let st = stdout(&stat);
    assert!(
        st.contains("dma requests, device writes memory: 2000 requests, mean 1536 bytes"),
        "{st}"
    );
    assert!(st.contains("1K:0.0% 2K:100.0%"), "{st}");
    assert!(
        st.contains("dma requests, device reads memory: none"),
        "{st}"
    );
}

/// Issue 29's web criterion, per stream: `synth web` as the issue ran it
/// (ring 64, within the DDIO ways; every other option at its default, disk
/// reads included). The trace tags each DMA record with its device, and
/// `compare` counts the received packets' data (`nic-rx`) apart from the
/// disk's page-cache reads (`disk-rd`): under `shared` the received data
/// takes at least 100x fewer CPU misses and at least 10x less DRAM traffic
/// than under `snoop`, while the disk's data, which reaches DRAM once
/// either way, does not reach 10x. Before the tag only the total (3.4x)
/// could be printed.
#[test]
fn web_received_data_is_counted_apart_from_the_disks() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("web.trace");
    let j = dir.path().join("web.json");
    dmalab()
        .args(["sim", "synth", "web", "--requests", "2000", "--ring", "64"])
        .arg("--output")
        .arg(&t)
        .assert()
        .success();
    let out = dmalab()
        .args(["sim", "compare", "--params", "modern"])
        .args(["--schemes", "snoop,shared"])
        .arg(&t)
        .arg("--output")
        .arg(&j)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let s = doc["result"]["schemes"].as_array().unwrap();
    let dev = |i: usize, d: &str| {
        let v = s[i]["io_by_device"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["device"] == d)
            .unwrap_or_else(|| panic!("no {d} in {}", s[i]))
            .clone();
        let n = |k: &str| v[k].as_u64().unwrap();
        (
            n("writes"),
            n("cpu_misses"),
            n("dram_writes") + n("cpu_misses"),
        )
    };
    let (snoop_nic, shared_nic) = (dev(0, "nic"), dev(1, "nic"));
    let (snoop_disk, shared_disk) = (dev(0, "disk"), dev(1, "disk"));
    // The streams add up to the totals, and both schemes see the same writes.
    for (i, scheme) in s.iter().enumerate() {
        let total = scheme["io"]["writes"].as_u64().unwrap();
        assert_eq!(dev(i, "nic").0 + dev(i, "disk").0, total);
        assert!(dev(i, "nic").0 > 0 && dev(i, "disk").0 > 0);
    }
    assert_eq!(snoop_nic.0, shared_nic.0);
    // Received data: misses 100x fewer, DRAM traffic 10x lower.
    assert!(
        shared_nic.1 * 100 <= snoop_nic.1,
        "{snoop_nic:?} {shared_nic:?}"
    );
    assert!(
        shared_nic.2 * 10 <= snoop_nic.2,
        "{snoop_nic:?} {shared_nic:?}"
    );
    // The disk's data: its line reaches DRAM once either way.
    assert!(
        shared_disk.2 * 10 > snoop_disk.2,
        "{snoop_disk:?} {shared_disk:?}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("shared") && l.contains("nic-rx"))
        .unwrap_or_else(|| panic!("no shared nic-rx row in {text}"));
    assert!(row.contains(&format!(" {} ", shared_nic.0)), "{row}");
    assert!(text.contains("disk-rd"), "{text}");
    let stat = stdout(&dmalab().args(["sim", "stat"]).arg(&t).output().unwrap());
    for stream in ["nic-rx", "nic-tx", "disk-rd"] {
        assert!(stat.contains(&format!("dma_bytes {stream} ")), "{stat}");
    }
}

/// Issue 29, the leak's onset: a receive ring at half the DDIO ways'
/// capacity (modern: 8192 lines; 171 packets of 24 lines), kept full. With
/// 2 KiB buffers a 1500-byte packet lands on the same 24 of every 32 set
/// indices, so those sets overflow while a quarter of the set indices hold
/// nothing; a DPDK mbuf's 37-line stride (`--buf-bytes 2368`) spreads the
/// ring over every set index. Before the option the synth refused it.
#[test]
fn a_dpdk_mbuf_ring_spreads_over_every_set_and_leaks_later() {
    let dir = tempfile::tempdir().unwrap();
    let leak = |buf: &str| {
        let t = dir.path().join(format!("rx-{buf}.trace"));
        let j = dir.path().join(format!("rx-{buf}.json"));
        dmalab()
            .args(["sim", "synth", "rx", "--packets", "1368", "--ring", "171"])
            .args(["--inflight", "170", "--buf-bytes", buf, "--output"])
            .arg(&t)
            .assert()
            .success();
        dmalab()
            .args([
                "sim",
                "compare",
                "--params",
                "modern",
                "--schemes",
                "shared",
            ])
            .arg(&t)
            .arg("--output")
            .arg(&j)
            .assert()
            .success();
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
        let io = &doc["result"]["schemes"][0]["io"];
        let (w, l) = (
            io["writes"].as_u64().unwrap(),
            io["leaked"].as_u64().unwrap(),
        );
        assert_eq!(w, 1368 * 24, "{buf}");
        l as f64 / w as f64
    };
    let (page_halves, dpdk) = (leak("2048"), leak("2368"));
    assert!(page_halves > 0.10, "2 KiB buffers: {page_halves}");
    assert!(
        dpdk <= 0.05,
        "DPDK mbufs: {dpdk} (2 KiB buffers: {page_halves})"
    );
    common::assert_usage_error_of(
        dmalab()
            .args(["sim", "synth", "rx", "--buf-bytes", "2000", "--output"])
            .arg(dir.path().join("x.trace")),
        "--buf-bytes",
    );
    common::assert_usage_error_of(
        dmalab()
            .args(["sim", "synth", "rx", "--buf-bytes", "1024", "--output"])
            .arg(dir.path().join("x.trace")),
        "--packet-bytes",
    );
}

/// Issue 29: `compare` on a DMA-only trace printed seven speedups of 1.000
/// and no word why.
#[test]
fn a_dma_only_trace_gets_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("dma.txt");
    std::fs::write(&t, "0 xfer-w 0x10000 65536 0\n100 xfer-r 0x20000 65536 0\n").unwrap();
    let out = dmalab()
        .args(["sim", "compare", "--schemes", "snoop,shared"])
        .arg(&t)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("note: the trace has no CPU references"),
        "{}",
        stdout(&out)
    );
    // The note replaces the speedups: no column of 1.000 beside it.
    let text = stdout(&out);
    for scheme in ["snoop", "shared"] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(scheme))
            .unwrap_or_else(|| panic!("no {scheme} row in {text}"));
        assert_eq!(row.split_whitespace().nth(2), Some("-"), "{row}");
    }
}

/// Issue 33: `sim sweep` on a DMA-only trace printed the note that the
/// speedups were left out beside a table of speedups (1.000, 1.438, 3.051)
/// and orderings drawn from them. Every cell of a point without CPU
/// references is now `-`, as in `sim compare`.
#[test]
fn a_dma_only_sweep_prints_no_speedups_beside_its_note() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("dma.txt");
    std::fs::write(&t, "0 xfer-w 0x10000 65536 0\n100 xfer-r 0x20000 65536 0\n").unwrap();
    let out = dmalab()
        .args(["sim", "sweep"])
        .arg(&t)
        .args(["--param", "llc.size_bytes", "--values", "256K,1M"])
        .args(["--schemes", "snoop,shared,dma-cache-256K-pf"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("note: the trace has no CPU references"),
        "{text}"
    );
    for value in ["256K", "1M"] {
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(value))
            .unwrap_or_else(|| panic!("no {value} row in {text}"));
        let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
        assert_eq!(cells, ["-"; 6], "{row}");
    }
}
