//! The rdma engine and `dmalab rdma serve`, tested inside the QEMU guest
//! with soft-RoCE (scripts/nvme-vm/run.sh --with-rdma, job
//! scripts/nvme-vm/guest-rdma.sh). One boot runs every case; each test here
//! judges part of its results. The oracle outside dmalab is rxe's own
//! hw_counters (sent_pkts, rcvd_pkts), read by the guest script before and
//! after each case, and SHA-256 of the buffers on both sides.

mod common;
mod rdma_serve;

use common::guest::Guest;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const KERNEL: &str = "/boot/vmlinuz-6.1.0-56-amd64";
const RXE: &str = "/lib/modules/6.1.0-56-amd64/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko";
/// rxe's path MTU over lo.
const MTU: u64 = 4096;
/// Every message in the guest cases.
const MSG: u64 = 65536;

fn prerequisites() -> bool {
    common::need(
        "QEMU, the Debian kernel 6.1.0-56-amd64 with rdma_rxe.ko, cpio, rdma-core, \
         ibverbs-providers, ibverbs-utils, perftest (scripts/debian-packages.txt)",
        common::have_program("qemu-system-x86_64")
            && Path::new(KERNEL).exists()
            && Path::new(RXE).exists()
            && common::have_program("cpio")
            && Path::new("/etc/libibverbs.d/rxe.driver").exists()
            && common::have_program("ib_write_bw")
            && common::have_program("ibv_devinfo"),
    )
}

/// The one boot of the RDMA guest, with this file's judgements of its
/// cases; its results are read through [`Guest`].
struct Boot(Guest);

impl std::ops::Deref for Boot {
    type Target = Guest;
    fn deref(&self) -> &Guest {
        &self.0
    }
}

fn boot() -> Option<&'static Boot> {
    if !prerequisites() {
        return None;
    }
    static BOOT: OnceLock<Boot> = OnceLock::new();
    Some(BOOT.get_or_init(|| {
        Boot(Guest::boot(
            "rdma-vm",
            "guest-rdma.sh",
            &["--with-rdma", "--timeout", "900"],
            "RDMA",
        ))
    }))
}

impl Boot {
    fn ok(&self, name: &str) {
        let (rc, out, err) = self.case(name);
        assert_eq!(rc, 0, "case {name} failed: {err}\n{out}");
    }

    /// A refused case: exit 2 and one error line that names `option`.
    fn refused(&self, name: &str, option: &str, words: &str) {
        let (rc, _, err) = self.case(name);
        let err = common::assert_usage_stderr(Some(rc), &err, option);
        assert!(err.contains(words), "{name}: {err}");
    }

    /// rxe0's counter deltas over a case (files counters.before/after).
    fn counters(&self, dir: &str) -> BTreeMap<String, u64> {
        let parse = |rel: &str| -> BTreeMap<String, u64> {
            self.read(rel)
                .lines()
                .filter_map(|l| l.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
                .collect()
        };
        let b = parse(&format!("{dir}/counters.before"));
        let a = parse(&format!("{dir}/counters.after"));
        a.iter()
            .map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0)))
            .collect()
    }
}

/// The engine's facts (the object under key "rdma" in a load result).
fn facts(doc: &Value) -> &Value {
    fn find(v: &Value) -> Option<&Value> {
        match v {
            Value::Object(m) => m
                .get("rdma")
                .filter(|r| r.get("moved").is_some())
                .or_else(|| m.values().find_map(find)),
            Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    find(doc).unwrap_or_else(|| panic!("no rdma facts in {doc}"))
}

fn moved(doc: &Value, key: &str) -> u64 {
    facts(doc)["moved"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("moved.{key} in {doc}"))
}

/// Packets rxe sends (and, every peer being on the same device, receives)
/// for `ops` operations of MSG bytes: the data packets at the path MTU,
/// plus one: the acknowledgement of a WRITE, or the request of a READ.
fn packets(ops: u64) -> u64 {
    ops * (MSG.div_ceil(MTU) + 1)
}

/// Checks rxe's packet counter `key` against `packets(ops)`: exactly, unless
/// the device itself recorded a retry (a retransmission on a slow, busy
/// guest adds packets that no accounting error explains). Then only more
/// packets, and not many more, pass.
fn assert_packets(c: &BTreeMap<String, u64>, key: &str, ops: u64) {
    assert_packet_count(c, key, packets(ops));
}

/// As [`assert_packets`], against a packet count `want` worked out by the
/// caller (another MTU, fences, inline sends).
fn assert_packet_count(c: &BTreeMap<String, u64>, key: &str, want: u64) {
    let got = c[key];
    let retried: u64 = [
        "completer_retry_err",
        "duplicate_request",
        "out_of_seq_request",
    ]
    .iter()
    .map(|k| c.get(*k).copied().unwrap_or(0))
    .sum();
    if retried == 0 || got == want {
        assert_eq!(got, want, "{key}: {c:?}");
    } else {
        assert!(
            got > want && got - want <= want / 4,
            "{key} {got} against {want} with {retried} retry events: {c:?}"
        );
    }
}

fn sha(doc: &Value) -> String {
    doc["result"]["buffer_sha256"]
        .as_str()
        .or_else(|| {
            fn find(v: &Value) -> Option<&str> {
                match v {
                    Value::Object(m) => m
                        .get("buffer_sha256")
                        .and_then(Value::as_str)
                        .or_else(|| m.values().find_map(find)),
                    _ => None,
                }
            }
            find(doc)
        })
        .unwrap_or_else(|| panic!("no buffer_sha256 in {doc}"))
        .to_string()
}

#[test]
fn rdma_stack_in_the_guest_works_for_perftest() {
    let Some(b) = boot() else { return };
    assert_eq!(
        b.read("perftest_client.rc").trim(),
        "0",
        "{}",
        b.read("perftest_client.txt")
    );
    assert_eq!(
        b.read("gid1.txt").trim(),
        "0000:0000:0000:0000:0000:ffff:7f00:0001"
    );
}

#[test]
fn rdma_serve_refuses_bad_input() {
    let Some(b) = boot() else { return };
    b.refused(
        "serve_no_device",
        "--device",
        "no RDMA device \"nosuch0\"; this host has: rxe0",
    );
    b.refused("serve_bad_gid", "--gid-index", "no GID at index 77");
    b.refused("serve_bad_listen", "--listen", "not ADDR:PORT");
    let idle = b.json("serve_idle/serve.json");
    assert_eq!(
        idle["result"]["gid_index"], 1,
        "the IPv4-mapped GID is chosen"
    );
    assert_eq!(idle["result"]["clients"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        b.read("serve_idle/serve.rc").trim(),
        "143",
        "SIGTERM ends serve with 128+15"
    );
}

#[test]
fn rdma_loopback_write_moves_the_data_rxe_counts() {
    let Some(b) = boot() else { return };
    b.ok("lb_write");
    let doc = b.json("lb_write.json");
    assert_eq!(moved(&doc, "writes"), 32);
    assert_eq!(moved(&doc, "write_bytes"), 32 * MSG);
    assert_eq!(moved(&doc, "reads"), 0);
    assert_eq!(moved(&doc, "errors"), 0);
    // Sequential over equal 1 MiB buffers, twice round: the target holds
    // exactly the local buffer.
    assert_eq!(
        facts(&doc)["loopback_buffer_sha256"].as_str().unwrap(),
        sha(&doc)
    );
    let c = b.counters("lb_write");
    assert_packets(&c, "sent_pkts", 32);
    assert_packets(&c, "rcvd_pkts", 32);
    let own = &facts(&doc)["nic_counters"]["delta"];
    assert_eq!(
        own["sent_pkts"].as_u64(),
        Some(c["sent_pkts"]),
        "dmalab's own reading of the counters"
    );
}

/// `--rdma-inline`: 128-byte writes posted as inline data land exactly
/// (the target holds the local buffer), one packet and one acknowledgement
/// each.
#[test]
fn rdma_loopback_inline_writes_move_the_data() {
    let Some(b) = boot() else { return };
    b.ok("lb_inline");
    let doc = b.json("lb_inline.json");
    assert_eq!(facts(&doc)["inline"], true);
    assert_eq!(moved(&doc, "writes"), 64);
    assert_eq!(moved(&doc, "write_bytes"), 64 * 128);
    assert_eq!(
        facts(&doc)["loopback_buffer_sha256"].as_str().unwrap(),
        sha(&doc)
    );
    assert_packet_count(&b.counters("lb_inline"), "sent_pkts", 64 * 2);
}

/// `--signal-every 4`: every command counted once; rxe sent each message's
/// packets and, per fence, one request and one acknowledgement more.
#[test]
fn rdma_loopback_signal_every_counts_every_command() {
    let Some(b) = boot() else { return };
    b.ok("lb_signal");
    let doc = b.json("lb_signal.json");
    assert_eq!(moved(&doc, "writes"), 41);
    assert_eq!(doc["result"]["totals"]["commands"], 41);
    let f = facts(&doc);
    // 8 requests per QP: 4 is half a queue, kept as asked.
    assert_eq!(f["signal_every"], 4, "{f}");
    let fences = f["fences"].as_u64().unwrap();
    let signalled = f["signalled_work_requests"].as_u64().unwrap();
    assert!(signalled < 41, "{signalled} of 41 signalled");
    assert_packet_count(
        &b.counters("lb_signal"),
        "sent_pkts",
        packets(41) + 2 * fences,
    );
}

/// `--mtu 1024`: each 64 KiB WRITE goes out as 64 packets of 1 KiB (rxe's
/// own count), not 16 of 4 KiB.
#[test]
fn rdma_loopback_mtu_sets_the_packet_size() {
    let Some(b) = boot() else { return };
    b.ok("lb_mtu");
    let doc = b.json("lb_mtu.json");
    assert_eq!(facts(&doc)["path_mtu_bytes"], 1024);
    assert_eq!(moved(&doc, "writes"), 8);
    assert_packet_count(&b.counters("lb_mtu"), "sent_pkts", 8 * (MSG / 1024 + 1));
}

#[test]
fn rdma_loopback_read_writes_this_hosts_buffer() {
    let Some(b) = boot() else { return };
    b.ok("lb_read");
    let doc = b.json("lb_read.json");
    assert_eq!(moved(&doc, "reads"), 16);
    assert_eq!(moved(&doc, "read_bytes"), 16 * MSG);
    assert_eq!(moved(&doc, "writes"), 0);
    // The random fill is gone: 16 x 64 KiB of the zeroed target cover it.
    assert_eq!(sha(&doc), b.read("zero1m.sha256").trim());
    assert_packets(&b.counters("lb_read"), "sent_pkts", 16);
}

#[test]
fn rdma_loopback_mixed_and_same_offsets_count_exactly() {
    let Some(b) = boot() else { return };
    b.ok("lb_mixed");
    let doc = b.json("lb_mixed.json");
    let (w, r) = (moved(&doc, "writes"), moved(&doc, "reads"));
    assert_eq!(w + r, 40);
    assert!(w > 0 && r > 0, "mixed:50 issued {w} writes and {r} reads");
    assert_eq!(moved(&doc, "read_bytes"), r * MSG);
    assert_eq!(facts(&doc)["qps"], 3);
    assert_packets(&b.counters("lb_mixed"), "sent_pkts", 40);
    b.ok("lb_same");
    assert_eq!(moved(&b.json("lb_same.json"), "writes"), 16);
    assert_packets(&b.counters("lb_same"), "sent_pkts", 16);
}

#[test]
fn rdma_served_peer_gets_and_gives_the_same_bytes() {
    let Some(b) = boot() else { return };
    b.ok("srv_read");
    b.ok("srv_write");
    let rd = b.json("srv_read.json");
    assert_eq!(moved(&rd, "reads"), 16);
    assert_eq!(
        sha(&rd),
        b.read("z1m.sha256").trim(),
        "the served fill reached this buffer"
    );
    let wr = b.json("srv_write.json");
    assert_eq!(moved(&wr, "writes"), 16);
    let srv = b.json("srv/serve.json");
    assert_eq!(
        srv["result"]["buffer_sha256"].as_str().unwrap(),
        sha(&wr),
        "the served buffer holds what the client wrote"
    );
    assert_eq!(srv["result"]["total"]["reads"], 16);
    assert_eq!(srv["result"]["total"]["writes"], 16);
    assert_eq!(srv["result"]["total"]["write_bytes"], 16 * MSG);
    assert_packets(&b.counters("srv_read"), "sent_pkts", 16);
    assert_packets(&b.counters("srv_write"), "sent_pkts", 16);
}

/// Issue 32 item 5: READs outstanding per QP were 16 on every device;
/// now both sides ask their device (ibv_query_device), and on rxe the
/// depth is what `ibv_devinfo -v` reports, not 16. `--iodepth 200` is
/// lowered to it for READs, with a note, and every READ completes.
#[test]
fn rdma_read_depth_is_the_devices() {
    let Some(b) = boot() else { return };
    let (rc, _, err) = b.case("srv_deep_read");
    assert_eq!(rc, 0, "{err}");
    let devinfo = b.read("ibv_devinfo.txt");
    let field = |key: &str| -> u64 {
        devinfo
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(key)?
                    .strip_prefix(':')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {key} in ibv_devinfo -v:\n{devinfo}"))
    };
    let (rd, init) = (field("max_qp_rd_atom"), field("max_qp_init_rd_atom"));
    let doc = b.json("srv_deep_read.json");
    let f = facts(&doc);
    assert_eq!(f["device_limits"]["max_qp_rd_atom"], rd, "{f}");
    assert_eq!(f["device_limits"]["max_qp_init_rd_atom"], init, "{f}");
    let depth = rd.min(init).min(255);
    assert_eq!(f["max_rd_atomic"], depth, "{f}");
    assert_eq!(f["iodepth"], depth.min(200), "{f}");
    assert_eq!(f["iodepth_asked"], 200, "{f}");
    if depth < 200 {
        assert!(
            err.contains(&format!("run with --iodepth {depth}")),
            "{err}"
        );
    }
    assert_eq!(moved(&doc, "reads"), 300);
    let srv = b.json("srv_deep/serve.json");
    assert_eq!(srv["result"]["total"]["reads"], 300);
}

#[test]
fn rdma_serve_serves_two_clients_at_once() {
    let Some(b) = boot() else { return };
    assert_eq!(b.read("two/a.rc").trim(), "0", "{}", b.read("two/a.out"));
    assert_eq!(b.read("two/b.rc").trim(), "0", "{}", b.read("two/b.out"));
    let (a, bb) = (b.json("two/a.json"), b.json("two/b.json"));
    let srv = b.json("two/serve.json");
    assert_eq!(
        srv["result"]["clients"].as_array().map(Vec::len),
        Some(4),
        "2 clients x 2 QPs"
    );
    let total = &srv["result"]["total"];
    assert_eq!(
        total["writes"].as_u64(),
        Some(moved(&a, "writes") + moved(&bb, "writes"))
    );
    assert_eq!(total["reads"].as_u64(), Some(moved(&bb, "reads")));
    assert_eq!(
        moved(&a, "writes") + moved(&bb, "writes") + moved(&bb, "reads"),
        80
    );
    assert_packets(&b.counters("two"), "sent_pkts", 80);
}

#[test]
fn rdma_peer_that_dies_mid_run_stops_the_client_cleanly() {
    let Some(b) = boot() else { return };
    let rc: i32 = b.read("gone/client.rc").trim().parse().unwrap();
    let err = b.read("gone/client.err");
    assert!(rc == 1, "a lost peer fails the run (rc {rc}): {err}");
    assert!(!err.contains("panicked"), "{err}");
    let doc = b.json("gone/client.json");
    assert!(
        moved(&doc, "writes") > 0,
        "it reports what it did before: {doc}"
    );
    let why = facts(&doc)["first_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        why.contains("RDMA WRITE") || why.contains("stopped answering"),
        "{why}"
    );
}

#[test]
fn rdma_engine_refuses_bad_input() {
    let Some(b) = boot() else { return };
    b.refused(
        "bad_device",
        "--rdma-device",
        "no RDMA device \"nosuch0\"; this host has: rxe0",
    );
    b.refused("bad_gid", "--gid-index", "no GID at index 9");
    b.refused("bad_op", "--rdma-op", "mixed:READ_PCT");
    b.refused("bad_target", "--target", "HOST:PORT");
    b.refused("no_server", "--target", "cannot connect to 127.0.0.1:18699");
    b.refused(
        "no_lib",
        "libibverbs",
        "apt-get install libibverbs1 ibverbs-providers",
    );
    b.refused(
        "small_remote",
        "--rdma-remote-buffer",
        "smaller than one command (65536 bytes)",
    );
    b.refused(
        "small_region",
        "--rdma-remote-buffer",
        "more than the 4096 bytes",
    );
    let (rc, _, err) = b.case("bad_version");
    assert_ne!(rc, 0);
    assert!(
        err.contains("protocol version 3, this dmalab speaks 2"),
        "{err}"
    );
}

#[test]
fn rdma_serve_without_libibverbs_says_what_to_install() {
    let err = common::assert_usage_error_of(
        common::dmalab()
            .args(["rdma", "serve", "--buffer", "1M"])
            .env("DMALAB_IBVERBS_LIB", "libdmalab-not-there.so.1"),
        "libibverbs: libdmalab-not-there.so.1 could not be loaded",
    );
    assert!(
        err.contains("apt-get install libibverbs1 ibverbs-providers"),
        "{err}"
    );
}

#[test]
fn rdma_serve_refuses_a_bad_listen_address_before_touching_the_device() {
    let err = common::assert_usage_error(["rdma", "serve", "--listen", "nowhere"], "--listen");
    assert_eq!(
        err,
        "dmalab: error: --listen: \"nowhere\" is not ADDR:PORT (e.g. 0.0.0.0:18515)"
    );
}

#[test]
fn rdma_load_without_libibverbs_says_what_to_install() {
    common::assert_usage_error_of(
        common::dmalab()
            .args([
                "load",
                "--engine",
                "rdma",
                "--target",
                "loopback",
                "--commands",
                "1",
            ])
            .env("DMALAB_IBVERBS_LIB", "libdmalab-not-there.so.1"),
        "apt-get install libibverbs1 ibverbs-providers",
    );
}

#[test]
fn rdma_flags_are_refused_by_other_engines() {
    let err = common::assert_usage_error(
        ["load", "--engine", "null", "--qps", "2", "--commands", "1"],
        "--qps",
    );
    assert_eq!(err, "dmalab: error: --qps: only with --engine rdma");
    common::assert_usage_error(
        ["load", "--engine", "rdma", "--commands", "1"],
        "--target: --engine rdma needs --target HOST:PORT",
    );
}

/// Issue 32: examples/rdma-interference.toml, cut down (scripts/nvme-vm/
/// guest-rdma.sh), runs end to end on rxe with a sweep over the number of
/// QPs, and its report draws what the example promises: the victim's
/// figure normalized to its run alone, one line per operation through the
/// swept values in order, with error bars and the plain = 1 reference.
#[test]
fn rdma_interference_example_sweeps_qps_and_draws_the_normalized_line() {
    let Some(b) = boot() else { return };
    b.ok("interference_run");
    let runs: Vec<Value> = b
        .read("interference/results.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|r| r["record"] == "run")
        .collect();
    // 2 configurations x 2 repetitions x (plain + 3 QP counts).
    assert_eq!(runs.len(), 16, "{runs:?}");
    for r in &runs {
        assert_eq!(r["status"], "completed", "{r}");
        if r["load"] == "plain" {
            assert!(r["sweep_value"].is_null(), "{r}");
            continue;
        }
        let qps = r["sweep_value"].as_str().expect("a swept value");
        let argv: Vec<&str> = common::aggressor_argv(r);
        assert!(common::has_flag(&argv, "--qps", qps), "{argv:?}");
        assert!(
            common::has_flag(&argv, "--rdma-op", r["configuration"].as_str().unwrap()),
            "{argv:?}"
        );
        // The aggressor moved data while the victim ran.
        let ev = &r["aggressor"]["evidence"];
        assert!(ev["data_bytes"].as_u64() > Some(0), "{r}");
        assert_eq!(ev["running_throughout"], true, "{r}");
    }
    b.ok("interference_report");
    let figures = b.dir.join("results/interference/figures");
    let normalized: Vec<String> = std::fs::read_dir(&figures)
        .unwrap_or_else(|e| panic!("{}: {e}", figures.display()))
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|s| s.contains("aria-label=\"normalized: seq R\""))
        .collect();
    assert_eq!(
        normalized.len(),
        1,
        "one normalized plot for the one victim"
    );
    let svg = &normalized[0];
    assert!(svg.contains("class=\"reference\""), "plain = 1: {svg}");
    assert!(svg.contains("against --qps"), "{svg}");
    for op in ["write", "read"] {
        let at = svg
            .find(&format!("class=\"mean-line\" data-series=\"{op}\""))
            .unwrap_or_else(|| panic!("no {op} line: {svg}"));
        let d_at = svg[..at].rfind("d=\"").unwrap() + 3;
        let d = &svg[d_at..d_at + svg[d_at..].find('"').unwrap()];
        let xs: Vec<f64> = d
            .split_whitespace()
            .map(|p| p[1..].split_once(',').unwrap().0.parse().unwrap())
            .collect();
        assert_eq!(xs.len(), 3, "one mean per QP count: {d}");
        assert!(
            xs.windows(2).all(|w| w[0] < w[1]),
            "1, 2, 4 QPs in order: {d}"
        );
        assert!(
            d.starts_with('M') && d.matches('L').count() == 2,
            "unbroken: {d}"
        );
    }
    // Two repetitions on each side: an error bar per QP count and line.
    assert_eq!(svg.matches("class=\"whisker\"").count(), 6, "{svg}");
}
