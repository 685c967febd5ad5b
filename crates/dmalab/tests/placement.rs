//! Where the DMA buffer lives (`--membind`/`--numa-node`, `--buffer-file`)
//! for `load` and `rdma serve`: on this host (its nodes, files) through the
//! binary, and on a two-node NUMA kernel in the QEMU guest
//! (scripts/nvme-vm/guest-placement.sh), judged by the guest kernel's own
//! `/proc/PID/numa_maps`.

mod common;
mod load_util;

use common::guest::Guest;
use load_util::{load, load_refused};
use serde_json::Value;
use std::path::Path;

/// The nodes of this host that have memory.
fn memory_nodes() -> Vec<usize> {
    dmalab_core::sys::numa::memory_nodes()
}

/// A node this host does not have.
fn missing_node() -> String {
    (memory_nodes().iter().max().copied().unwrap_or(0) + 5).to_string()
}

const NULL: [&str; 7] = [
    "--engine",
    "null",
    "--buffer",
    "1M",
    "-q",
    "--runtime",
    "200ms",
];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    NULL.iter().copied().chain(extra.iter().copied()).collect()
}

fn placement(j: &Value) -> &Value {
    &j["result"]["buffer_placement"]
}

#[test]
fn load_numa_node_0_records_node_0_for_every_page() {
    let node = memory_nodes()[0].to_string();
    let (code, out, err, json) = load(&args(&["--numa-node", &node]));
    assert_eq!(code, 0, "{err}");
    let j = json.expect("result written");
    let p = placement(&j);
    assert_eq!(p["membind"], node.parse::<u64>().unwrap());
    assert_eq!(p["backing"], "anonymous");
    assert_eq!(p["nodes_source"], "move_pages");
    // 1 MiB on 4 KiB pages, every one on the node asked for.
    assert_eq!(
        p["nodes"],
        serde_json::json!([{"node": node.parse::<u64>().unwrap(), "pages": 256}])
    );
    assert_eq!(p["unknown_pages"], 0);
    assert_eq!(j["config"]["placement"]["membind"], p["membind"]);
    assert!(
        out.contains(&format!("buffer    anonymous memory, pages on node {node}")),
        "{out}"
    );
}

#[test]
fn load_without_placement_still_records_where_the_pages_are() {
    let (code, out, err, json) = load(&args(&[]));
    assert_eq!(code, 0, "{err}");
    let j = json.expect("result written");
    let p = placement(&j);
    assert_eq!(p["membind"], Value::Null);
    let pages: u64 = p["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["pages"].as_u64().unwrap())
        .sum();
    assert_eq!(pages, 256, "{p}");
    assert!(
        !out.contains("buffer    "),
        "no placement line unasked: {out}"
    );
}

#[test]
fn load_numa_node_that_does_not_exist_is_refused() {
    let bad = missing_node();
    let err = load_refused(&args(&["--numa-node", &bad]), "--membind");
    assert!(err.contains(&format!("node {bad} does not exist")), "{err}");
    // The same under probe's name for it.
    load_refused(&args(&["--membind", &bad]), "--membind");
}

#[test]
fn load_buffer_file_new_is_created_shared_and_removed() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let buf = dir.path().join("buf");
    let b = buf.to_str().unwrap();
    let (code, out, err, json) = load(&args(&["--buffer-file", b]));
    assert_eq!(code, 0, "{err}");
    let j = json.expect("result written");
    let p = placement(&j);
    assert_eq!(p["backing"], "file");
    assert_eq!(p["buffer_file"], b);
    assert_eq!(p["buffer_file_created"], true);
    // tmpfs: pages a device may pin, on a node the kernel names.
    assert_eq!(p["long_term_pins"], true);
    assert_eq!(p["unknown_pages"], 0);
    assert!(out.contains(&format!("buffer    file {b}")), "{out}");
    assert!(!buf.exists(), "a buffer file dmalab created is removed");
}

#[test]
fn load_buffer_file_on_disk_runs_io_uring_unregistered() {
    // Page-cache pages may not be pinned for long: io_uring's buffer
    // registration would fail (EFAULT), so the run goes unregistered.
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let buf = dir.path().join("buf");
    let target = dir.path().join("target");
    let (code, _, err, json) = load(&[
        "--target",
        target.to_str().unwrap(),
        "--size",
        "4M",
        "--buffer",
        "1M",
        "--runtime",
        "300ms",
        "-q",
        "--buffer-file",
        buf.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("the buffer is not registered"), "{err}");
    let j = json.expect("result written");
    assert_eq!(placement(&j)["long_term_pins"], false);
    assert!(j["result"]["totals"]["commands"].as_u64().unwrap() > 0);
    assert!(!buf.exists());
}

#[test]
fn load_existing_buffer_file_needs_allow_destroy_and_is_never_resized() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let buf = dir.path().join("buf");
    let b = buf.to_str().unwrap();
    std::fs::write(&buf, vec![0xa5u8; 2 << 20]).unwrap();
    let err = load_refused(&args(&["--buffer-file", b]), "--buffer-file");
    assert!(err.contains(&format!("--allow-destroy={b}")), "{err}");
    // Named, but smaller than the buffer: refused, not grown.
    let err = load_refused(
        &[
            "--engine",
            "null",
            "--buffer",
            "4M",
            "--buffer-file",
            b,
            "--allow-destroy",
            b,
        ],
        "--buffer-file",
    );
    assert!(err.contains("holds 2097152 bytes"), "{err}");
    assert_eq!(std::fs::metadata(&buf).unwrap().len(), 2 << 20);
    // Named and large enough: used in place, kept, not truncated; the fill
    // went into it (shared mapping).
    let (code, _, err, json) = load(&args(&["--buffer-file", b, "--allow-destroy", b]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(placement(&json.unwrap())["buffer_file_created"], false);
    let back = std::fs::read(&buf).expect("the file is still there");
    assert_eq!(back.len(), 2 << 20, "never truncated");
    assert!(
        back[..1 << 20].iter().all(|&x| x == 0),
        "the fill reached it"
    );
    assert!(
        back[1 << 20..].iter().all(|&x| x == 0xa5),
        "past the buffer: untouched"
    );
}

#[test]
fn load_buffer_file_may_not_be_another_output_or_a_plain_device() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let buf = dir.path().join("buf");
    let b = buf.to_str().unwrap();
    let out = common::dmalab()
        .arg("load")
        .args(args(&["--buffer-file", b, "--output", b]))
        .output()
        .unwrap();
    let err = common::assert_usage_output(&out, "--output");
    assert!(err.contains("also the file of --buffer-file"), "{err}");
    let err = load_refused(
        &args(&["--buffer-file", "/dev/null", "--allow-destroy", "/dev/null"]),
        "--buffer-file",
    );
    assert!(err.contains("not a device-DAX device"), "{err}");
    let err = load_refused(
        &args(&["--buffer-file", b, "--hugepages", "2m"]),
        "--buffer-file",
    );
    assert!(err.contains("drop --hugepages"), "{err}");
}

/// `rdma serve` on the fake verbs library with `extra` flags: its exit
/// code, stderr and result.
fn serve_once(extra: &[&str]) -> (i32, String, Option<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.json");
    let mut child = std::process::Command::new(common::dmalab_bin())
        .args(["rdma", "serve", "--listen", "127.0.0.1:0", "--buffer", "1M"])
        .args(extra)
        .arg("--output")
        .arg(&out)
        .env("DMALAB_IBVERBS_LIB", "mock")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("dmalab runs");
    let mut err = child.stderr.take().unwrap();
    // Serving says so on stderr once the buffer is placed; then stop it.
    let mut text = String::new();
    let mut byte = [0u8; 1];
    use std::io::Read;
    while !text.contains("serving ") && err.read(&mut byte).unwrap_or(0) == 1 {
        text.push(byte[0] as char);
    }
    if text.contains("serving ") {
        common::signal(child.id(), libc::SIGINT);
    }
    let _ = err.read_to_string(&mut text);
    let st = child.wait().unwrap();
    let json = std::fs::read_to_string(&out)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap());
    (st.code().unwrap_or(-1), text, json)
}

#[test]
fn rdma_serve_numa_node_0_records_node_0() {
    let node = memory_nodes()[0];
    let (code, err, json) = serve_once(&["--numa-node", &node.to_string()]);
    assert_eq!(code, 130, "{err}");
    assert!(
        err.contains(&format!("buffer: anonymous memory, pages on node {node}")),
        "{err}"
    );
    let j = json.expect("result written");
    assert_eq!(
        j["result"]["buffer_placement"]["nodes"],
        serde_json::json!([{"node": node, "pages": 256}])
    );
    assert_eq!(j["config"]["placement"]["membind"], node);
}

#[test]
fn rdma_serve_numa_node_that_does_not_exist_is_refused() {
    let bad = missing_node();
    let (code, err, json) = serve_once(&["--numa-node", &bad]);
    common::assert_usage_stderr(Some(code), &err, "--membind");
    assert!(json.is_none());
    // An --allow-destroy that is not the buffer file is refused too.
    let (code, err, _) = serve_once(&["--allow-destroy", "/etc/passwd"]);
    common::assert_usage_stderr(Some(code), &err, "--allow-destroy");
}

// --- The two-node guest ------------------------------------------------------

const KERNEL: &str = "/boot/vmlinuz-6.1.0-56-amd64";
const RXE: &str = "/lib/modules/6.1.0-56-amd64/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko";

fn guest() -> Option<&'static Guest> {
    if !common::need(
        "QEMU, the Debian kernel 6.1.0-56-amd64 with rdma_rxe.ko, cpio, rdma-core \
         (scripts/debian-packages.txt)",
        common::have_program("qemu-system-x86_64")
            && Path::new(KERNEL).exists()
            && Path::new(RXE).exists()
            && common::have_program("cpio")
            && Path::new("/etc/libibverbs.d/rxe.driver").exists(),
    ) {
        return None;
    }
    static BOOT: std::sync::OnceLock<Guest> = std::sync::OnceLock::new();
    Some(BOOT.get_or_init(|| {
        Guest::boot(
            "placement-vm",
            "guest-placement.sh",
            &["--with-rdma", "--timeout", "400"],
            "placement",
        )
    }))
}

/// The numa_maps line of the mapping bound to `node` (`bind:N`), and its
/// per-node page counts.
fn bound_line(maps: &str, node: usize) -> (String, Vec<(usize, u64)>) {
    let tag = format!("bind:{node} ");
    let line = maps
        .lines()
        .find(|l| l.contains(&tag))
        .unwrap_or_else(|| panic!("no mapping bound to node {node} in numa_maps:\n{maps}"));
    let counts = line
        .split_whitespace()
        .filter_map(|w| {
            let (n, c) = w.strip_prefix('N')?.split_once('=')?;
            Some((n.parse().ok()?, c.parse().ok()?))
        })
        .collect();
    (line.to_string(), counts)
}

#[test]
fn guest_load_and_serve_buffers_sit_on_node_1_as_the_kernel_sees_them() {
    let Some(g) = guest() else { return };
    assert_eq!(
        g.read("nodes_with_memory").trim(),
        "0-1",
        "the guest has two nodes"
    );

    // load: exit 0, the result says node 1, and so does the kernel.
    assert_eq!(
        g.read("load_node1/rc").trim(),
        "0",
        "{}",
        g.read("load_node1/stderr")
    );
    let j = g.json("load_node1/load.json");
    assert_eq!(
        placement(&j)["nodes"],
        serde_json::json!([{"node": 1, "pages": 256}])
    );
    assert!(j["result"]["totals"]["commands"].as_u64().unwrap() > 0);
    let (line, counts) = bound_line(&g.read("load_node1/numa_maps"), 1);
    assert_eq!(counts, vec![(1, 256)], "{line}");

    // rdma serve: stopped with SIGINT, its stop condition (exit 130).
    let rc = g.read("serve_node1/rc");
    assert_eq!(rc.trim(), "130", "{}", g.read("serve_node1/stderr"));
    let j = g.json("serve_node1/serve.json");
    assert_eq!(
        j["result"]["buffer_placement"]["nodes"],
        serde_json::json!([{"node": 1, "pages": 256}])
    );
    let (line, counts) = bound_line(&g.read("serve_node1/numa_maps"), 1);
    assert_eq!(counts, vec![(1, 256)], "{line}");
}

#[test]
fn guest_load_and_serve_buffers_sit_on_the_nvdimm_as_device_dax() {
    let Some(g) = guest() else { return };
    // The raw namespace became /dev/dax0.0 on node 1 (the kernel's word:
    // its target_node), 2 MiB aligned.
    let log = g.read("devdax.log");
    assert!(log.contains("/dev/dax0.0"), "{log}");
    let want = |j: &Value, pages: u64| {
        let p = placement(j);
        assert_eq!(p["backing"], "dax_device", "{p}");
        assert_eq!(p["dax"], true, "{p}");
        assert_eq!(p["map_sync"], true, "{p}");
        assert_eq!(p["buffer_file_created"], false, "{p}");
        assert_eq!(
            p["nodes"],
            serde_json::json!([{"node": 1, "pages": pages}]),
            "{p}"
        );
    };
    // load: io_uring cannot register device-DAX pages (6.1): unregistered.
    assert_eq!(
        g.read("load_dax/rc").trim(),
        "0",
        "{}",
        g.read("load_dax/stderr")
    );
    let j = g.json("load_dax/load.json");
    want(&j, 1024);
    assert_eq!(placement(&j)["membind"], 1);
    assert!(j["result"]["totals"]["commands"].as_u64().unwrap() > 0);
    assert!(g.read("load_dax/stderr").contains("not registered"));
    // The process maps the device itself (numa_maps has no per-node count
    // for device pages: the node is the device's).
    assert!(g.read("load_dax/numa_maps").contains("file=/dev/dax0.0"));
    // rdma serve: rxe registers it as the served memory region.
    assert_eq!(
        g.read("serve_dax/rc").trim(),
        "130",
        "{}",
        g.read("serve_dax/stderr")
    );
    want(&g.json("serve_dax/serve.json"), 1024);
    assert!(g.read("serve_dax/numa_maps").contains("file=/dev/dax0.0"));
    // Refused: not named with --allow-destroy; asked on node 0.
    let (rc, _, err) = g.case("dax_not_allowed");
    let line = common::assert_usage_stderr(Some(rc), &err, "--buffer-file");
    assert!(line.contains("--allow-destroy=/dev/dax0.0"), "{line}");
    let (rc, _, err) = g.case("dax_wrong_node");
    let line = common::assert_usage_stderr(Some(rc), &err, "--membind");
    assert!(line.contains("512 on node 1"), "{line}");
}

#[test]
fn guest_refuses_a_node_that_does_not_exist() {
    let Some(g) = guest() else { return };
    for case in ["load_node7", "serve_node7"] {
        let (rc, _, err) = g.case(case);
        let line = common::assert_usage_stderr(Some(rc), &err, "--membind");
        assert!(line.contains("node 7 does not exist"), "{line}");
    }
}
