//! The NVMe passthrough engine and `dmalab info nvme`, tested inside a QEMU
//! guest with an emulated NVMe controller (scripts/nvme-vm/). One boot runs
//! every check (scripts/nvme-vm/guest-tests.sh); each test here judges part
//! of its results. The oracle for commands is QEMU's own trace of every NVMe
//! Read, Write and Flush, split per case at marker reads on namespace 3.

mod common;

use common::guest::{repo, Guest};

use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

const KERNEL: &str = "/boot/vmlinuz-6.1.0-56-amd64";
const INITRD: &str = "/boot/initrd.img-6.1.0-56-amd64";

/// What the guest left behind: its results (through [`Guest`]) and QEMU's
/// trace events.
struct Boot {
    guest: Guest,
    trace: Vec<TraceEvent>,
}

impl std::ops::Deref for Boot {
    type Target = Guest;
    fn deref(&self) -> &Guest {
        &self.guest
    }
}

/// One QEMU trace event.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TraceEvent {
    /// `pci_nvme_read` (write = false) or `pci_nvme_write`.
    Rw {
        write: bool,
        nsid: u32,
        nlb: u32,
        lba: u64,
    },
    /// `pci_nvme_flush_ns`.
    Flush { nsid: u32 },
}

fn field<'a>(words: &'a [&'a str], name: &str) -> Option<&'a str> {
    words
        .iter()
        .position(|w| *w == name)
        .and_then(|i| words.get(i + 1).copied())
}

fn num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses QEMU's log-backend trace lines (`[PID@TIME:]event args`).
fn parse_trace(text: &str) -> Vec<TraceEvent> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find("pci_nvme_") else {
            continue;
        };
        let words: Vec<&str> = line[at..].split_whitespace().collect();
        let ev = match words.first().copied() {
            Some(e @ ("pci_nvme_read" | "pci_nvme_write")) => (|| {
                Some(TraceEvent::Rw {
                    write: e == "pci_nvme_write",
                    nsid: num(field(&words, "nsid")?)? as u32,
                    nlb: num(field(&words, "nlb")?)? as u32,
                    lba: num(field(&words, "lba")?)?,
                })
            })(),
            Some("pci_nvme_flush_ns") => field(&words, "nsid")
                .and_then(num)
                .map(|n| TraceEvent::Flush { nsid: n as u32 }),
            _ => None,
        };
        if let Some(ev) = ev {
            out.push(ev);
        }
    }
    out
}

fn prerequisites() -> bool {
    common::need(
        "QEMU (qemu-system-x86_64), the Debian kernel and initrd 6.1.0-56-amd64, nvme-cli, cpio",
        common::have_program("qemu-system-x86_64")
            && Path::new(KERNEL).exists()
            && Path::new(INITRD).exists()
            && common::have_program("nvme")
            && common::have_program("cpio"),
    )
}

/// Boots the guest once for all tests of this file.
fn boot() -> Option<&'static Boot> {
    if !prerequisites() {
        return None;
    }
    static BOOT: OnceLock<Boot> = OnceLock::new();
    Some(BOOT.get_or_init(|| {
        let guest = Guest::boot("nvme-vm", "guest-tests.sh", &["--timeout", "600"], "NVMe");
        let trace =
            std::fs::read_to_string(guest.dir.join("trace.log")).expect("QEMU wrote trace.log");
        Boot {
            trace: parse_trace(&trace),
            guest,
        }
    }))
}

impl Boot {
    /// Asserts a case exited 0 and returns its stdout.
    fn ok(&self, name: &str) -> String {
        let (rc, out, err) = self.case(name);
        assert_eq!(rc, 0, "case {name} failed: {err}\n{out}");
        out
    }

    /// The traced NVMe commands of a case (between its two marker reads on
    /// namespace 3), markers excluded.
    fn case_trace(&self, name: &str) -> Vec<TraceEvent> {
        let start: u64 = self.read(&format!("{name}/mark")).trim().parse().unwrap();
        let is_mark = |e: &TraceEvent, n: u64| matches!(e, TraceEvent::Rw { write: false, nsid: 3, nlb: 1, lba } if *lba == n);
        let from = self
            .trace
            .iter()
            .position(|e| is_mark(e, start))
            .unwrap_or_else(|| panic!("no start marker {start} for {name} in the trace"));
        let to = self.trace[from..]
            .iter()
            .position(|e| is_mark(e, start + 1))
            .unwrap_or_else(|| panic!("no end marker {} for {name} in the trace", start + 1));
        self.trace[from + 1..from + to].to_vec()
    }
}

#[test]
fn trace_parser_reads_qemu_log_lines() {
    let t = parse_trace(
        "pci_nvme_read cid 0 nsid 1 nlb 1 count 512 lba 0x0\n\
         123@1700000000.000001:pci_nvme_write cid 4 opname 'write' nsid 2 nlb 8 count 32768 lba 0x1f\n\
         pci_nvme_flush_ns nsid 0x2\nnoise\n",
    );
    assert_eq!(
        t,
        vec![
            TraceEvent::Rw {
                write: false,
                nsid: 1,
                nlb: 1,
                lba: 0
            },
            TraceEvent::Rw {
                write: true,
                nsid: 2,
                nlb: 8,
                lba: 0x1f
            },
            TraceEvent::Flush { nsid: 2 },
        ]
    );
}

fn trimmed(v: &Value) -> String {
    v.as_str().unwrap_or_default().trim_end().to_string()
}

/// `dmalab info` inside the guest lists the emulated controller and every
/// namespace as `nvme list` does: model, serial, firmware, size, block size
/// and the generic device.
#[test]
fn host_info_lists_the_controller_and_namespaces_as_nvme_list_does() {
    let Some(b) = boot() else { return };
    b.ok("host_info");
    let doc = b.json("host_info.json");
    assert_eq!(doc["command"], "info");
    let ctrls = doc["result"]["nvme"].as_array().expect("result.nvme");
    let namespaces: Vec<(&Value, &Value)> = ctrls
        .iter()
        .flat_map(|c| {
            c["namespaces"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |n| (c, n))
        })
        .collect();
    let list = b.json("nvme-list.json");
    let devs = list["Devices"].as_array().expect("nvme list Devices");
    assert_eq!(namespaces.len(), devs.len(), "{list}");
    for d in devs {
        let path = d["DevicePath"].as_str().unwrap();
        let name = path.trim_start_matches("/dev/");
        let (c, n) = namespaces
            .iter()
            .find(|(_, n)| n["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from dmalab info"));
        assert_eq!(c["model"].as_str().unwrap(), trimmed(&d["ModelNumber"]));
        assert_eq!(c["serial"].as_str().unwrap(), trimmed(&d["SerialNumber"]));
        assert_eq!(c["firmware"].as_str().unwrap(), trimmed(&d["Firmware"]));
        assert_eq!(n["size_bytes"], d["PhysicalSize"], "{name}");
        assert_eq!(n["logical_block_size"], d["SectorSize"], "{name}");
        if let Some(g) = d["GenericPath"].as_str() {
            assert_eq!(n["generic_device"], g);
            assert_eq!(n["generic_present"], true);
        }
    }
    assert_eq!(ctrls[0]["transport"], "pcie");
    // The same, unprivileged: every namespace line is there too.
    let text = b.ok("host_info_nobody");
    assert!(text.contains("privileged        no"), "{text}");
    for d in devs {
        let name = d["DevicePath"]
            .as_str()
            .unwrap()
            .trim_start_matches("/dev/");
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{name}: "))),
            "{name} missing from unprivileged dmalab info:\n{text}"
        );
    }
}

/// Identify fields as dmalab shows them equal nvme-cli's on the same
/// controller, for both namespaces (512 B and 4 KiB blocks).
#[test]
fn identify_matches_nvme_cli() {
    let Some(b) = boot() else { return };
    let ctrl = b.json("id-ctrl.json");
    for n in 1..=2 {
        b.ok(&format!("info{n}"));
        let doc = b.json(&format!("info{n}.json"));
        assert_eq!(doc["command"], "info nvme");
        let r = &doc["result"];
        let c = &r["controller"];
        assert_eq!(c["serial"].as_str().unwrap(), trimmed(&ctrl["sn"]));
        assert_eq!(c["model"].as_str().unwrap(), trimmed(&ctrl["mn"]));
        assert_eq!(c["firmware"].as_str().unwrap(), trimmed(&ctrl["fr"]));
        for (ours, theirs) in [
            ("vid", "vid"),
            ("ssvid", "ssvid"),
            ("mdts", "mdts"),
            ("cntlid", "cntlid"),
            ("nn", "nn"),
            ("oncs", "oncs"),
            ("vwc", "vwc"),
        ] {
            assert_eq!(c[ours], ctrl[theirs], "controller field {ours}");
        }
        let ver = ctrl["ver"].as_u64().unwrap();
        assert_eq!(
            c["version"].as_str().unwrap(),
            format!("{}.{}.{}", ver >> 16, (ver >> 8) & 0xff, ver & 0xff)
        );
        let mdts = ctrl["mdts"].as_u64().unwrap();
        assert_eq!(r["mdts_bytes"].as_u64().unwrap(), 4096 << mdts);

        let ns = b.json(&format!("id-ns{n}.json"));
        let ours = &r["namespace"];
        for f in [
            "nsze", "ncap", "nuse", "nsfeat", "nlbaf", "flbas", "mc", "dpc", "dps",
        ] {
            assert_eq!(ours[f], ns[f], "namespace {n} field {f}");
        }
        let lbafs = ns["lbafs"].as_array().unwrap();
        let fmts = ours["lba_formats"].as_array().unwrap();
        assert_eq!(fmts.len(), lbafs.len());
        let in_use = ns["flbas"].as_u64().unwrap() & 0xf;
        for (i, (f, l)) in fmts.iter().zip(lbafs).enumerate() {
            assert_eq!(f["metadata_bytes"], l["ms"], "ns {n} lbaf {i} ms");
            assert_eq!(f["lbads"], l["ds"], "ns {n} lbaf {i} ds");
            let rp = ["best", "better", "good", "degraded"][l["rp"].as_u64().unwrap() as usize];
            assert_eq!(f["relative_performance"], rp, "ns {n} lbaf {i} rp");
            assert_eq!(f["in_use"], i as u64 == in_use, "ns {n} lbaf {i} in use");
        }
        let lba = if n == 1 { 512 } else { 4096 };
        assert_eq!(r["lba_size_bytes"], lba);
        // The text view marks the format in use.
        let text = b.read(&format!("info{n}/stdout"));
        let used: Vec<&str> = text.lines().filter(|l| l.contains("(in use)")).collect();
        assert_eq!(used.len(), 1, "{text}");
        assert!(used[0].contains(&format!("Data Size: {lba:<5}")), "{text}");
        for want in [
            "model:",
            "serial:",
            "firmware:",
            "mdts:",
            "Relative Performance",
        ] {
            assert!(text.contains(want), "info text lacks {want}:\n{text}");
        }
    }
    // Identify moves data only over the admin queue: no I/O commands.
    assert!(b.case_trace("info1").is_empty());
}

/// A path that does not exist is bad input: exit 2, one line naming it.
#[test]
fn info_on_missing_device_exits_2() {
    let Some(b) = boot() else { return };
    let (rc, _, err) = b.case("info_missing");
    common::assert_usage_stderr(Some(rc), &err, "/dev/ng9n9");
}

/// A device that is not NVMe (here, on the host: the null device and, where
/// present, a virtio disk) is bad input named by its sysfs node, before any
/// ioctl is sent to it.
#[test]
fn info_on_a_device_that_is_not_nvme_exits_2() {
    for dev in ["/dev/null", "/dev/vda"] {
        if !std::path::Path::new(dev).exists() {
            continue;
        }
        let err = common::assert_usage_error(["info", "nvme", dev], "not an NVMe namespace");
        assert!(err.contains(dev), "{dev}: {err}");
    }
}

/// One pattern case: what the guest ran, and what the trace must show.
struct PatternCase {
    name: &'static str,
    nsid: u32,
    lba: u64,
    bs: u64,
    /// Blocks of `bs` per command.
    blocks_per_command: u64,
    /// Storage writes (true) or reads.
    write: bool,
    /// `--device-offsets same`: every command at LBA 0.
    same: bool,
}

/// A storage-write run's safety guard reads the namespace's first and last
/// 4 MiB through the block layer (looking for signatures) before any
/// command is sent: those Reads are in the case's trace. The run itself
/// sends only Writes, so for a writing case the Reads are checked to be the
/// guard's (starting at LBA 0) and dropped.
fn guard_reads_removed(trace: Vec<TraceEvent>, write: bool, name: &str) -> Vec<TraceEvent> {
    if !write {
        return trace;
    }
    let (reads, rest): (Vec<_>, Vec<_>) = trace
        .into_iter()
        .partition(|e| matches!(e, TraceEvent::Rw { write: false, .. }));
    assert!(
        reads
            .iter()
            .any(|e| matches!(e, TraceEvent::Rw { lba: 0, .. })),
        "{name}: the safety guard did not read the start of the namespace: {reads:?}"
    );
    rest
}

/// Checks a case's traced commands against what dmalab reported: the count,
/// every command's block count, and the starting LBAs (a gap-free tiling
/// from LBA 0 for sequential device offsets; all 0 for `same`).
fn check_pattern(b: &Boot, c: &PatternCase) -> Value {
    b.ok(c.name);
    let doc = b.json(&format!("{}.json", c.name));
    let r = &doc["result"];
    let commands = r["totals"]["commands"].as_u64().unwrap();
    let blocks = r["totals"]["blocks"].as_u64().unwrap();
    assert!(commands > 0, "{}: no commands", c.name);
    assert_eq!(r["totals"]["errors"], 0, "{}", c.name);
    let trace = guard_reads_removed(b.case_trace(c.name), c.write, c.name);
    let mut cmds: Vec<(u64, u64)> = Vec::new();
    for e in &trace {
        match *e {
            TraceEvent::Rw {
                write,
                nsid,
                nlb,
                lba,
            } => {
                assert_eq!((write, nsid), (c.write, c.nsid), "{}: {e:?}", c.name);
                cmds.push((lba, u64::from(nlb)));
            }
            TraceEvent::Flush { .. } => panic!("{}: unexpected flush", c.name),
        }
    }
    assert_eq!(
        cmds.len() as u64,
        commands,
        "{}: traced vs reported commands",
        c.name
    );
    let per_cmd = c.blocks_per_command * c.bs / c.lba;
    for (lba, nlb) in &cmds {
        assert_eq!(*nlb, per_cmd, "{}: command at LBA {lba}", c.name);
    }
    assert_eq!(
        cmds.iter().map(|(_, n)| n).sum::<u64>(),
        blocks * c.bs / c.lba,
        "{}: traced vs reported blocks",
        c.name
    );
    if c.same {
        assert!(
            cmds.iter().all(|(lba, _)| *lba == 0),
            "{}: {cmds:?}",
            c.name
        );
    } else {
        cmds.sort_unstable();
        let mut next = 0;
        for (lba, nlb) in &cmds {
            assert_eq!(*lba, next, "{}: gap or overlap in {cmds:?}", c.name);
            next = lba + nlb;
        }
    }
    doc
}

/// nvme-memload's bug: `single` put its block count (1) into the zero-based
/// NLB field and so moved two blocks per command. Here every command of a
/// `single` run with --bs = the LBA size must be exactly one block.
#[test]
fn single_moves_one_block_per_command_nvme_memload_nlb_regression() {
    let Some(b) = boot() else { return };
    let doc = check_pattern(
        b,
        &PatternCase {
            name: "single_512",
            nsid: 1,
            lba: 512,
            bs: 512,
            blocks_per_command: 1,
            write: false,
            same: false,
        },
    );
    assert_eq!(doc["result"]["engine"], "nvme-uring-cmd");
    // Identify data in the header: the result and the target description.
    let ctrl = b.json("id-ctrl.json");
    assert_eq!(
        doc["result"]["nvme"]["controller"]["model"]
            .as_str()
            .unwrap(),
        trimmed(&ctrl["mn"])
    );
    assert_eq!(doc["result"]["nvme"]["lba_size_bytes"], 512);
    assert_eq!(
        doc["host"]["target"]["model"].as_str().unwrap(),
        trimmed(&ctrl["mn"])
    );
    assert_eq!(doc["host"]["target"]["logical_block_size"], 512);
    let trace = b.case_trace("single_512");
    assert!(trace
        .iter()
        .all(|e| matches!(e, TraceEvent::Rw { nlb: 1, .. })));
}

/// Every pattern's commands, on both block sizes, are exactly what dmalab
/// reports.
#[test]
fn every_pattern_matches_qemu_trace() {
    let Some(b) = boot() else { return };
    let cases = [
        ("single_4k_on_512", 1, 512, 4096, 1, false, false),
        ("single_4k", 2, 4096, 4096, 1, false, false),
        ("random_4k", 2, 4096, 4096, 8, false, false),
        ("full_512", 1, 512, 512, 16, false, false),
        ("same_512", 1, 512, 512, 1, false, true),
        ("write_full_4k", 2, 4096, 4096, 4, true, false),
    ];
    for (name, nsid, lba, bs, blocks_per_command, write, same) in cases {
        check_pattern(
            b,
            &PatternCase {
                name,
                nsid,
                lba,
                bs,
                blocks_per_command,
                write,
                same,
            },
        );
    }
}

/// The ioctl fallback moves the same commands and says it is in use.
#[test]
fn ioctl_path_matches_qemu_trace() {
    let Some(b) = boot() else { return };
    let doc = check_pattern(
        b,
        &PatternCase {
            name: "single_512_ioctl",
            nsid: 1,
            lba: 512,
            bs: 512,
            blocks_per_command: 1,
            write: false,
            same: false,
        },
    );
    assert_eq!(doc["result"]["engine"], "nvme-ioctl");
}

/// `flush` sends Flush commands only, as many as reported; `noop` sends
/// nothing at all.
#[test]
fn flush_and_noop_match_qemu_trace() {
    let Some(b) = boot() else { return };
    b.ok("flush_1");
    let doc = b.json("flush_1.json");
    let n = doc["result"]["totals"]["commands"].as_u64().unwrap();
    assert!(n > 0);
    let trace = b.case_trace("flush_1");
    assert_eq!(trace.len() as u64, n, "{trace:?}");
    assert!(trace.iter().all(|e| *e == TraceEvent::Flush { nsid: 1 }));
    b.ok("noop_1");
    assert!(b.case_trace("noop_1").is_empty());
}

/// `dmalab run` with an NVMe aggressor and `control = "auto"`: its control
/// cycle is the same engine on the same namespace with `--pattern flush`,
/// paced at the rate the aggressor reached, once after its load and once
/// before (two repetitions); `dmalab run` prints the attribution table; and
/// QEMU's trace holds the aggressor's reads and the control's flushes, one
/// flush per command the control runs counted, and no write.
#[test]
fn run_with_an_nvme_aggressor_has_a_flush_control_and_an_attribution() {
    let Some(b) = boot() else { return };
    let out = b.ok("nvme_run");
    let runs: Vec<Value> = b
        .read("nvme_run/results.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|r| r["record"] == "run")
        .collect();
    let seq: Vec<(u64, &str, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["repetition"].as_u64().unwrap_or(0),
                r["load"].as_str().unwrap_or(""),
                r["status"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        seq,
        [
            (1, "plain", "completed"),
            (1, "nvread", "completed"),
            (1, "nvread/control", "completed"),
            (2, "plain", "completed"),
            (2, "nvread/control", "completed"),
            (2, "nvread", "completed"),
        ],
        "{runs:?}"
    );
    // The quiet-host check and the victim's evidence, in every record.
    for r in &runs {
        assert!(r["quiet"]["window_ns"].as_u64() > Some(0), "{r}");
        assert!(r["victim_evidence"]["window_ns"].as_u64() > Some(0), "{r}");
        if r["load"] != "plain" {
            assert!(
                r["victim_evidence"]["aggressor_cpu_ns"].is_u64(),
                "the aggressor's CPU time: {r}"
            );
        }
    }
    let mut flushes_counted = 0;
    for r in &runs {
        if r["load"] == "plain" {
            assert!(
                r["aggressor"].is_null(),
                "plain runs have no aggressor: {r}"
            );
            continue;
        }
        let argv = common::aggressor_argv(r);
        match r["load"].as_str() {
            Some("nvread") => {
                assert!(common::has_flag(&argv, "--engine", "nvme"), "{argv:?}");
                assert!(common::has_flag(&argv, "--pattern", "random"), "{argv:?}");
                assert!(
                    r["aggressor"]["evidence"]["cmd_per_s"].as_f64() > Some(0.0),
                    "{r}"
                );
            }
            Some("nvread/control") => {
                let c = &r["control"];
                assert_eq!((&c["of"], &c["kind"]), (&"nvread".into(), &"twin".into()));
                assert!(common::has_flag(&argv, "--engine", "nvme"), "{argv:?}");
                assert!(common::has_flag(&argv, "--pattern", "flush"), "{argv:?}");
                assert!(
                    common::has_flag(&argv, "--target", "/dev/ng0n1"),
                    "{argv:?}"
                );
                let rate = c["rate_iops"].as_u64().expect("paced").to_string();
                assert!(common::has_flag(&argv, "--rate-iops", &rate), "{argv:?}");
                flushes_counted += r["aggressor"]["result"]["totals"]["commands"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("the control's result counts its commands: {r}"));
            }
            other => panic!("unexpected load {other:?}: {r}"),
        }
    }
    let orders: Vec<&str> = runs
        .iter()
        .filter(|r| r["load"] == "nvread/control")
        .map(|r| r["control"]["order"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(orders, ["after_load", "before_load"]);
    assert!(out.contains("DMA share"), "the attribution table: {out}");
    assert!(
        out.contains("control order: 1 after the load, 1 before"),
        "{out}"
    );
    let trace = b.case_trace("nvme_run");
    let flushes = trace
        .iter()
        .filter(|e| **e == TraceEvent::Flush { nsid: 1 })
        .count() as u64;
    let reads = trace
        .iter()
        .filter(|e| {
            matches!(
                e,
                TraceEvent::Rw {
                    write: false,
                    nsid: 1,
                    ..
                }
            )
        })
        .count();
    assert!(reads > 0 && flushes > 0, "reads {reads}, flushes {flushes}");
    assert_eq!(flushes, flushes_counted, "one flush per control command");
    assert!(
        !trace
            .iter()
            .any(|e| matches!(e, TraceEvent::Rw { write: true, .. })),
        "storage reads only"
    );
}

/// A command longer than the device's maximum transfer is refused with an
/// error naming MDTS, and nothing reaches the device.
#[test]
fn command_beyond_mdts_is_refused() {
    let Some(b) = boot() else { return };
    let (rc, _, err) = b.case("mdts_too_big");
    common::assert_usage_stderr(Some(rc), &err, "--max-blocks");
    assert!(err.contains("MDTS"), "{err}");
    assert!(b.case_trace("mdts_too_big").is_empty());
}

/// `--max-blocks mdts` moves, per command, the whole blocks of `--bs` in the
/// device's maximum transfer: 2^MDTS pages (nvme-cli's Identify
/// Controller; QEMU's minimum page is 4 KiB) or the kernel's
/// `max_hw_sectors_kb`, whichever is less.
#[test]
fn max_blocks_mdts_moves_the_devices_maximum_transfer_per_command() {
    let Some(b) = boot() else { return };
    let ctrl = b.json("id-ctrl.json");
    let mdts = ctrl["mdts"].as_u64().expect("id-ctrl mdts");
    let hw_kb: u64 = b.read("max_hw_sectors_kb").trim().parse().unwrap();
    let max_bytes = match mdts {
        0 => hw_kb * 1024,
        m => ((1u64 << m) * 4096).min(hw_kb * 1024),
    };
    let doc = check_pattern(
        b,
        &PatternCase {
            name: "mdts_blocks",
            nsid: 2,
            lba: 4096,
            bs: 4096,
            blocks_per_command: max_bytes / 4096,
            write: false,
            same: false,
        },
    );
    assert_eq!(doc["result"]["totals"]["commands"], 4);
    assert_eq!(
        doc["result"]["totals"]["blocks"].as_u64().unwrap(),
        4 * max_bytes / 4096
    );
}

/// The safety guard refuses a namespace with a partition table, one with a
/// filesystem signature, and a mounted one; none of their bytes change and
/// no Write reaches the device.
#[test]
fn safety_guard_refuses_partitioned_formatted_and_mounted_namespaces() {
    let Some(b) = boot() else { return };
    assert!(
        b.read("ns1_parts").contains("nvme0n1p1"),
        "sfdisk made no partition: {}",
        b.read("sfdisk.log")
    );
    assert!(
        b.read("mounted").contains("/mnt"),
        "{}",
        b.read("mount.log")
    );
    for (case, before, after) in [
        (
            "safety_parted",
            "safety_parted.before",
            "safety_parted.after",
        ),
        ("safety_fs", "safety_fs.before", "safety_fs.after"),
        ("safety_mounted", "safety_fs.before", "safety_mounted.after"),
    ] {
        let (rc, out, err) = b.case(case);
        assert_ne!(rc, 0, "{case} was not refused: {out}{err}");
        assert!(
            err.contains("refuse") || err.contains("--allow-destroy"),
            "{case}: {err}"
        );
        assert_eq!(b.read(before), b.read(after), "{case}: bytes changed");
        assert!(
            !b.case_trace(case)
                .iter()
                .any(|e| matches!(e, TraceEvent::Rw { write: true, .. })),
            "{case}: a Write reached the device"
        );
    }
}

/// Data really moves: a storage-write run puts the buffer's random content
/// on the namespace, a storage-read run of the same region brings it back
/// into a zeroed buffer with the same checksum, and the namespace's bytes
/// (read through the block device) have it too.
#[test]
fn data_round_trips_through_the_namespace() {
    let Some(b) = boot() else { return };
    b.ok("rt_write");
    b.ok("rt_read");
    let w = b.json("rt_write.json");
    let r = b.json("rt_read.json");
    let ws = w["result"]["buffer_sha256"]
        .as_str()
        .expect("buffer_sha256");
    let rs = r["result"]["buffer_sha256"]
        .as_str()
        .expect("buffer_sha256");
    assert_eq!(ws.len(), 64);
    assert_eq!(ws, rs, "the read-back buffer differs from the written one");
    assert_eq!(b.read("rt_device.sha256").trim(), ws);
    for (case, write) in [("rt_write", true), ("rt_read", false)] {
        let t = guard_reads_removed(b.case_trace(case), write, case);
        assert_eq!(t.len(), 256, "{case}");
        assert!(t
            .iter()
            .all(|e| matches!(e, TraceEvent::Rw { write: w, nsid: 2, nlb: 1, .. } if *w == write)));
    }
}

/// `--format-before` sends Format NVM (no secure erase) before a storage-write
/// run: what was on the namespace is gone (zeros) apart from the run's own
/// block; it is refused for a run that does not write storage.
#[test]
fn format_before_erases_the_namespace() {
    let Some(b) = boot() else { return };
    let (rc, _, err) = b.case("fmt_refused");
    common::assert_usage_stderr(Some(rc), &err, "--format-before");
    assert!(b.case_trace("fmt_refused").is_empty());
    let (rc, out, err) = b.case("fmt_write");
    assert_eq!(rc, 0, "{err}{out}");
    assert!(err.contains("formatted /dev/ng0n2"), "{err}");
    assert_eq!(b.read("fmt_rest.sha256"), b.read("zero255.sha256"));
    let t = guard_reads_removed(b.case_trace("fmt_write"), true, "fmt_write");
    assert_eq!(
        t,
        vec![TraceEvent::Rw {
            write: true,
            nsid: 2,
            nlb: 1,
            lba: 0
        }]
    );
}

/// The programs mkinitrd.sh ships into the guest's usr/dmalab/bin, read
/// from its `add_bin SRC NAME` lines (busybox aside: its applets are meant to
/// be found through PATH).
fn shipped_programs() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("scripts/nvme-vm/mkinitrd.sh"))
        .expect("read mkinitrd.sh");
    let names: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("add_bin "))
        .filter_map(|rest| rest.split_whitespace().nth(1).map(str::to_string))
        .filter(|n| n != "busybox")
        .collect();
    assert!(
        names.len() >= 7,
        "mkinitrd.sh ships too few programs: {names:?}"
    );
    names
}

#[test]
fn guest_scripts_call_shipped_programs_by_absolute_path() {
    let dir = repo().join("scripts/nvme-vm");
    let shipped = shipped_programs();
    let mut scripts: Vec<String> = std::fs::read_dir(&dir)
        .expect("list scripts/nvme-vm")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("guest-") && n.ends_with(".sh"))
        .collect();
    scripts.sort();
    let mut bare = Vec::new();
    for name in &scripts {
        let text = std::fs::read_to_string(dir.join(name)).expect("read guest script");
        for (no, line) in text.lines().enumerate() {
            let code = line.split('#').next().unwrap_or("");
            // Words in a command position: after a line start, a pipe, `;`,
            // `&&`, an assignment's opening quote, `case_run NAME` or `env VAR=`.
            for word in code.split(|c: char| c.is_whitespace() || c == '"' || c == '|' || c == ';')
            {
                if shipped.iter().any(|s| s == word) && is_command_position(code, word) {
                    bare.push(format!("{name}:{}: {}", no + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bare.is_empty(),
        "shipped programs called without /usr/dmalab/bin/:\n{}",
        bare.join("\n")
    );
}

/// True when `word` appears in `code` where the shell would run it as a
/// command (not as an argument such as `--engine nvme` or `info nvme`).
fn is_command_position(code: &str, word: &str) -> bool {
    let tokens: Vec<&str> = code
        .split(|c: char| c.is_whitespace() || c == '"')
        .filter(|t| !t.is_empty())
        .collect();
    tokens.iter().enumerate().any(|(i, t)| {
        *t == word
            && (i == 0
                || matches!(
                    tokens[i - 1],
                    "|" | ";" | "&&" | "||" | "then" | "do" | "env"
                )
                || tokens[i - 1].ends_with('=')
                || tokens[i - 1].contains("=ioctl")
                || (i >= 2 && tokens[i - 2] == "case_run"))
    })
}

/// `probe latency` on QEMU's default CPU model, which has no `rdtscp`: it
/// measures with the fenced-`rdtsc` bracket and says so, instead of dying
/// of SIGILL.
#[test]
fn probe_latency_runs_on_a_cpu_without_rdtscp() {
    let Some(b) = boot() else { return };
    let out = b.ok("probe_no_rdtscp");
    let (_, _, err) = b.case("probe_no_rdtscp");
    let text = format!("{out}{err}");
    let doc = b.json("probe_no_rdtscp.json");
    let timer = &doc["result"]["timer"];
    assert_eq!(timer["bare_rdtscp_pair_median_cycles"], 0, "{timer}");
    assert!(
        timer["fenced_pair_median_cycles"].as_u64().unwrap() > 0,
        "{timer}"
    );
    assert!(text.contains("no rdtscp on this CPU"), "{text}");
}
