//! `dmalab rdma serve` through the binary on the fake verbs library
//! (`DMALAB_IBVERBS_LIB=mock`): what a peer can and cannot make the server
//! do, on loopback, with no RDMA device.

use crate::common::rdma_peer::*;
use dmalab_rdma::access::Secret;
use dmalab_rdma::handshake::{self, Done, Endpoint, Opening, ServerInfo, MAGIC};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn rdma_serve_on_the_fake_device_serves_a_client_and_counts_it() {
    let srv = Serve::start(&[]);
    let done = Done {
        writes: 3,
        reads: 2,
        write_bytes: 3 * 4096,
        read_bytes: 2 * 4096,
    };
    let theirs = good_client(&srv, 0x42, done).expect("accepted");
    assert_eq!(theirs.len, 1 << 20, "the served buffer");
    let (out, _) = srv.stop();
    assert!(
        out.contains("served 1 client connection(s)")
            && out.contains("3 RDMA WRITEs (12288 bytes) into and 2 RDMA READs (8192 bytes)"),
        "{out}"
    );
}

/// Issue 27 item 7: 2^64-1 and 5 were summed as "4 RDMA WRITEs" (a
/// wrapped count; a debug build panicked).
#[test]
fn rdma_serve_counts_that_overflow_are_a_clients_protocol_error_not_a_wrapped_total() {
    let srv = Serve::start(&[]);
    for qp in [0x51, 0x52] {
        let d = Done {
            writes: u64::MAX - 1,
            ..Done::default()
        };
        good_client(&srv, qp, d).expect("accepted");
    }
    let (out, log) = srv.stop();
    assert!(
        out.contains(&format!("{} RDMA WRITEs", u64::MAX - 1)),
        "the first report counts, the second is left out: {out}"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("protocol error") && l.contains("overflow")),
        "{log:?}"
    );
}

/// Issue 27 item 7: one thread per connection without a cap (a flood of
/// idle connections made `thread::scope` panic).
#[test]
fn rdma_serve_over_max_clients_closes_the_connection_with_a_reason() {
    let mut srv = Serve::start(&["--max-clients", "2"]);
    let idle: Vec<TcpStream> = (0..2).map(|_| srv.connect()).collect();
    // Both are being served (their threads wait for a hello) before the
    // third arrives: the accept loop counts them as it accepts.
    std::thread::sleep(Duration::from_millis(300));
    let mut third = srv.connect();
    let said = read_to_close(&mut third);
    let text = String::from_utf8_lossy(&said);
    assert!(said.starts_with(&MAGIC), "a refusal message: {text:?}");
    assert!(
        text.contains("already serves 2 connections (--max-clients 2)"),
        "{text:?}"
    );
    srv.wait_line("refused");
    assert!(srv.running());
    drop(idle);
    // A well-formed client is served once the idle ones are gone.
    let mut served = None;
    for qp in 0x60..0x70 {
        match good_client(&srv, qp, Done::default()) {
            Ok(e) => {
                served = Some(e);
                break;
            }
            Err(e) => {
                assert!(e.contains("--max-clients"), "{e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    assert!(served.is_some(), "{:?}", srv.log());
    let (out, _) = srv.stop();
    assert!(out.contains("served"), "{out}");
}

#[test]
fn rdma_serve_refuses_a_max_clients_of_zero_or_beyond_reason() {
    for bad in ["0", "100000"] {
        let err = crate::common::assert_usage_error_of(
            crate::common::dmalab()
                .args(["rdma", "serve", "--max-clients", bad])
                .env("DMALAB_IBVERBS_LIB", "mock"),
            "--max-clients",
        );
        assert!(err.contains("is not 1..=4096 connections"), "{err}");
    }
}

/// Issue 27 item 7: a client sending its hello one byte every 2 s held a
/// handshake thread for as long as it liked.
#[test]
fn rdma_serve_drops_a_slow_loris_handshake_after_the_timeout() {
    let mut srv = Serve::start(&["--handshake-timeout", "3s"]);
    let mut s = srv.connect();
    let hello = hello_bytes(0x70);
    let mut sent = 0;
    let mut dropped = false;
    // With a 3 s timeout it is dropped at the second byte's pause; 8
    // bytes (16 s) bound the test where it is not.
    for b in &hello[..8] {
        if s.write_all(&[*b]).is_err() {
            dropped = true;
            break;
        }
        sent += 1;
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        match s.read(&mut [0u8; 64]) {
            Ok(0) => {
                dropped = true;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                dropped = true;
                break;
            }
            _ => {}
        }
    }
    assert!(
        dropped,
        "still connected after {sent} slow bytes: {:?}",
        srv.log()
    );
    srv.wait_line("--handshake-timeout");
    let (_, log) = srv.stop();
    assert!(
        log.iter().any(|l| l.contains("connection dropped")),
        "{log:?}"
    );
}

/// Issue 27 item 7: SIGINT was answered only when a slow client quit
/// (58 s measured).
#[test]
fn rdma_serve_answers_sigint_while_a_client_dribbles_its_hello() {
    let srv = Serve::start(&["--handshake-timeout", "1h"]);
    let s = srv.connect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (stop2, mut s2) = (stop.clone(), s.try_clone().unwrap());
    let dribbler = std::thread::spawn(move || {
        // One byte a second for at most 60 s, unless told to stop.
        for b in hello_bytes(0x71).iter().take(60) {
            if stop2.load(std::sync::atomic::Ordering::Relaxed) || s2.write_all(&[*b]).is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        false
    });
    std::thread::sleep(Duration::from_millis(1500));
    let (out, _) = srv.stop();
    let cut_short = !dribbler.is_finished();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        cut_short,
        "serve ended only after the slow client had sent everything"
    );
    let _ = dribbler.join();
    assert!(out.contains("served"), "{out}");
    drop(s);
}

/// A load client against a fake server made of the library's own server
/// steps: what the client's hello offers, and what its registrations and
/// QPs let a peer do (the fake verbs' log).
fn load_against_a_recording_server(op: &str) -> (Vec<Endpoint>, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let srv = std::thread::spawn(move || {
        let mut hellos = Vec::new();
        // One query, then one hello (one worker, one QP).
        for _ in 0..2 {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(HANG)).unwrap();
            match handshake::server_read_opening("c", &mut s).unwrap() {
                Opening::Query => {
                    let info = ServerInfo {
                        link_layer: 2,
                        buffer_bytes: 1 << 20,
                        max_rd_atomic: 16,
                    };
                    handshake::server_info("c", &mut s, &info).unwrap();
                }
                Opening::Hello(e) => {
                    hellos.push(e);
                    let mut ours = endpoint(0x99);
                    ours.addr = 0x10_0000;
                    ours.len = 1 << 20;
                    ours.rkey = 0x77;
                    ours.msg_bytes = 0;
                    handshake::server_accept("c", &mut s, &ours).unwrap();
                    read_to_close(&mut s);
                }
            }
        }
        hellos
    });
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("verbs.log");
    crate::common::dmalab()
        .args([
            "load",
            "--engine",
            "rdma",
            "-q",
            "--pattern",
            "single",
            "--bs",
            "4K",
        ])
        .args(["--target", &addr, "--rdma-op", op, "--buffer", "1M"])
        .args([
            "--rdma-remote-buffer",
            "1M",
            "--commands",
            "8",
            "--iodepth",
            "2",
        ])
        .env("DMALAB_IBVERBS_LIB", format!("mock:log={}", log.display()))
        .timeout(HANG)
        .assert()
        .success();
    let hellos = srv.join().unwrap();
    (hellos, std::fs::read_to_string(&log).unwrap_or_default())
}

/// Issue 27 item 6: the client registered its own buffer with remote write
/// and read and sent its address, length and rkey in its hello: whatever
/// answered at --target could write into and read the client's memory.
#[test]
fn rdma_client_offers_its_peer_no_key_and_no_remote_access() {
    for op in ["write", "read", "mixed:50"] {
        let (hellos, log) = load_against_a_recording_server(op);
        assert_eq!(hellos.len(), 1, "{op}");
        let h = hellos[0];
        assert_eq!(
            (h.addr, h.len, h.rkey),
            (0, 0, 0),
            "{op}: the hello offers {h:?}"
        );
        let regs: Vec<&str> = log.lines().filter(|l| l.starts_with("reg_mr")).collect();
        assert!(!regs.is_empty(), "{op}: {log}");
        for r in &regs {
            assert!(r.ends_with("access 0x1"), "{op}: local write only: {r}");
        }
        let qps: Vec<&str> = log.lines().filter(|l| l.starts_with("qp_init")).collect();
        assert!(!qps.is_empty(), "{op}: {log}");
        for q in &qps {
            assert!(q.ends_with("access 0x0"), "{op}: no incoming RDMA: {q}");
        }
    }
}

fn secret_file(dir: &std::path::Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

/// Issue 27 item 6: anyone who reached the port got a QP with write and
/// read on the served buffer.
#[test]
fn rdma_serve_with_a_secret_file_serves_only_clients_that_prove_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = "correct horse battery staple";
    let f = secret_file(dir.path(), "s", &format!("{good}\n"), 0o600);
    let srv = Serve::start(&["--secret-file", f.to_str().unwrap()]);
    let e = good_client(&srv, 0x80, Done::default()).unwrap_err();
    assert!(e.contains("asks for a shared secret"), "{e}");
    let wrong = Secret::from_bytes(b"incorrect horse battery staple");
    let e = good_client_with(&srv, 0x81, Done::default(), Some(&wrong)).unwrap_err();
    assert!(e.contains("the shared secret does not match"), "{e}");
    let right = Secret::from_bytes(good.as_bytes());
    good_client_with(&srv, 0x82, Done::default(), Some(&right)).expect("the secret admits it");
    // The whole client too, with its own flag.
    crate::common::dmalab()
        .args([
            "load",
            "--engine",
            "rdma",
            "-q",
            "--pattern",
            "single",
            "--bs",
            "4K",
        ])
        .args([
            "--target",
            &srv.addr,
            "--buffer",
            "1M",
            "--rdma-remote-buffer",
            "1M",
        ])
        .args(["--commands", "4", "--rdma-secret-file", f.to_str().unwrap()])
        .env("DMALAB_IBVERBS_LIB", "mock")
        .timeout(HANG)
        .assert()
        .success();
    let (_, log) = srv.stop();
    assert!(
        log.iter()
            .any(|l| l.contains("proved no knowledge of the shared secret")),
        "{log:?}"
    );
    assert!(
        !log.iter().any(|l| l.contains(good)),
        "the secret is never logged"
    );
}

#[test]
fn rdma_serve_refuses_a_secret_file_others_can_read() {
    let dir = tempfile::tempdir().unwrap();
    let f = secret_file(dir.path(), "s", "correct horse battery staple\n", 0o644);
    let err = crate::common::assert_usage_error_of(
        crate::common::dmalab()
            .args(["rdma", "serve", "--secret-file", f.to_str().unwrap()])
            .env("DMALAB_IBVERBS_LIB", "mock"),
        "--secret-file",
    );
    assert!(err.contains("has mode 0644"), "{err}");
}

#[test]
fn rdma_serve_with_allow_closes_other_peers_with_a_reason() {
    let srv = Serve::start(&["--allow", "10.0.0.0/8", "--allow", "fd00::/8"]);
    let e = good_client(&srv, 0x90, Done::default()).unwrap_err();
    assert!(
        e.contains("127.0.0.1 is not in this server's --allow list"),
        "{e}"
    );
    srv.stop();
    let srv = Serve::start(&["--allow", "127.0.0.1"]);
    good_client(&srv, 0x91, Done::default()).expect("allowed");
    srv.stop();
    let err = crate::common::assert_usage_error_of(
        crate::common::dmalab()
            .args(["rdma", "serve", "--allow", "10.0.0.0/33"])
            .env("DMALAB_IBVERBS_LIB", "mock"),
        "--allow",
    );
    assert!(err.contains("ADDR/PREFIX"), "{err}");
}

/// `dmalab load --engine rdma --target loopback` on the fake verbs library:
/// its exit status, stderr and result document.
fn mock_loopback(extra: &[&str], env: &str) -> (Option<i32>, String, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let o = crate::common::dmalab()
        .args(["load", "--engine", "rdma", "--target", "loopback", "-q"])
        .args(["--pattern", "single", "--bs", "4K", "--buffer", "1M"])
        .args(["--rdma-remote-buffer", "1M", "--output"])
        .arg(&out)
        .args(extra)
        .env("DMALAB_IBVERBS_LIB", env)
        .timeout(HANG)
        .output()
        .unwrap();
    let doc = std::fs::read_to_string(&out)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        doc,
    )
}

/// `--signal-every 8`: one work request in eight asks the NIC for a
/// completion, yet every command is counted once, exactly (the last ones
/// of the run through a fence), on one QP and on several (16 requests
/// each: 8 is half a queue, kept as asked).
#[test]
fn signal_every_signals_fewer_requests_and_still_counts_every_command() {
    for qps in ["1", "3"] {
        let (code, err, doc) = mock_loopback(
            &[
                "--commands",
                "1003",
                "--iodepth",
                "48",
                "--qps",
                qps,
                "--signal-every",
                "8",
            ],
            "mock",
        );
        assert_eq!(code, Some(0), "{err}");
        let doc = doc.unwrap();
        let r = &doc["result"];
        assert_eq!(r["totals"]["commands"], 1003, "{r}");
        assert_eq!(r["totals"]["errors"], 0, "{r}");
        let f = &r["rdma"];
        assert_eq!(f["moved"]["writes"], 1003, "{f}");
        assert_eq!(f["moved"]["write_bytes"], 1003 * 4096, "{f}");
        assert_eq!(f["signal_every"], 8);
        let signalled = f["signalled_work_requests"].as_u64().unwrap();
        // One in eight per QP, plus at most one fence per QP and wait.
        assert!(
            (1003 / 8..=1003 / 8 + 40).contains(&signalled),
            "qps {qps}: {signalled} signalled"
        );
    }
    // The default signals every request.
    let (code, err, doc) = mock_loopback(&["--commands", "100"], "mock");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        doc.unwrap()["result"]["rdma"]["signalled_work_requests"],
        100
    );
}

/// `--signal-every` at or above a queue pair's share of `--iodepth`
/// signalled only the request that filled its queue, so each worker waited
/// for the whole queue to drain before it posted again. It is lowered to
/// half the queue, with a note, and the result records both values.
#[test]
fn signal_every_above_half_a_queue_is_lowered_with_a_note() {
    let run = |every: &str| {
        let (code, err, doc) = mock_loopback(
            &[
                "--commands",
                "500",
                "--iodepth",
                "16",
                "--qps",
                "2",
                "--signal-every",
                every,
            ],
            "mock",
        );
        assert_eq!(code, Some(0), "{err}");
        let f = doc.unwrap()["result"]["rdma"].clone();
        assert_eq!(f["moved"]["writes"], 500, "{f}");
        (err, f)
    };
    // 8 requests per QP: one in four signalled, not one in eight.
    let (err, f) = run("64");
    assert!(
        err.contains("dmalab: note: --signal-every 64: a queue pair holds 8 work request(s)")
            && err.contains("so it signals every 4"),
        "{err}"
    );
    assert_eq!(
        (&f["signal_every"], &f["signal_every_asked"]),
        (&4.into(), &64.into()),
        "{f}"
    );
    let signalled = f["signalled_work_requests"].as_u64().unwrap();
    assert!(
        (500 / 4..=500 / 4 + 40).contains(&signalled),
        "{signalled} signalled"
    );
    // Within half the queue: as asked, no note.
    let (err, f) = run("4");
    assert!(!err.contains("note"), "{err}");
    assert_eq!(
        (&f["signal_every"], &f["signal_every_asked"]),
        (&4.into(), &4.into()),
        "{f}"
    );
}

/// `--iodepth` beyond what the device's queues hold: each QP is made with
/// room for its share and one fence, and `ibv_create_qp` refused a share
/// above `max_qp_wr`, so the run failed. The depth is lowered to what fits,
/// with a note, and recorded; a device whose queue holds no request beside
/// the fence is refused by name.
#[test]
fn the_depth_is_lowered_to_what_the_devices_queues_hold() {
    let deep = ["--commands", "300", "--qps", "2", "--iodepth", "64"];
    let (code, err, doc) = mock_loopback(&deep, "mock:max_qp_wr=8");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "dmalab: note: --iodepth 64: a queue pair on mock0 holds at most 8 work requests"
        ) && err.contains("run with --iodepth 14"),
        "{err}"
    );
    let doc = doc.unwrap();
    let f = &doc["result"]["rdma"];
    assert_eq!(f["device_limits"]["max_qp_wr"], 8, "{f}");
    assert_eq!(
        (&f["iodepth"], &f["iodepth_asked"]),
        (&14.into(), &64.into()),
        "{f}"
    );
    assert_eq!(f["moved"]["writes"], 300, "{f}");
    assert_eq!(
        doc["config"]["iodepth"], 14,
        "the plan records the depth that ran"
    );
    // Seven each and a fence fill the queue exactly: as asked, no note.
    let (code, err, doc) = mock_loopback(
        &["--commands", "100", "--qps", "2", "--iodepth", "14"],
        "mock:max_qp_wr=8",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("note"), "{err}");
    let f = doc.unwrap()["result"]["rdma"].clone();
    assert_eq!(
        (&f["iodepth"], &f["iodepth_asked"]),
        (&14.into(), &14.into())
    );
    // No room for a request beside the fence.
    let (code, err, doc) = mock_loopback(&deep, "mock:max_qp_wr=1");
    let line = crate::common::assert_usage_stderr(code, &err, "--rdma-device");
    assert!(
        line.contains("mock0 holds at most 1 work request(s)"),
        "{line}"
    );
    assert!(doc.is_none());
}

/// Issue 32 item 5 (perftest's speed on soft-RoCE): each command was
/// handed to the device with its own `ibv_post_send`, one doorbell (on
/// rxe, one system call) each. Now the commands a worker queued together
/// go as one list per QP; every command is still counted once, and the
/// device saw each of them in exactly one list.
#[test]
fn commands_queued_together_reach_the_device_as_one_list_per_qp() {
    for qps in ["1", "2"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("verbs.log");
        let (code, err, doc) = mock_loopback(
            &["--commands", "1000", "--iodepth", "16", "--qps", qps],
            &format!("mock:log={}", log.display()),
        );
        assert_eq!(code, Some(0), "{err}");
        let f = &doc.unwrap()["result"]["rdma"];
        assert_eq!(f["moved"]["writes"], 1000, "{f}");
        let calls = f["post_send_calls"].as_u64().unwrap_or(0);
        let fences = f["fences"].as_u64().unwrap_or(0);
        // The mock completes a request at once: the worker reaps all 16 and
        // queues 16 again, one list per QP.
        let lists: Vec<u64> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("post_send "))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .collect();
        assert_eq!(lists.iter().sum::<u64>(), 1000 + fences, "qps {qps}");
        assert_eq!(lists.len() as u64, calls + fences, "qps {qps}");
        let per_qp = 16 / qps.parse::<u64>().unwrap();
        assert!(
            calls <= 1000 / per_qp + 4 && lists.contains(&per_qp),
            "qps {qps}: {calls} calls for 1000 commands, lists {lists:?}"
        );
    }
}

/// Issue 32 item 5: READs outstanding per QP were fixed at 16 on every
/// device. Now each QP keeps the smaller of this device's
/// max_qp_init_rd_atom and the responder's max_qp_rd_atom outstanding;
/// `--iodepth` beyond that times the QPs is lowered for READs, with a
/// note, and the result records both; writes keep any depth.
#[test]
fn reads_are_capped_at_the_devices_read_depth_with_a_note_and_writes_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("verbs.log");
    let spec = format!("mock:init_rd_atom=6,log={}", log.display());
    let deep = ["--commands", "500", "--qps", "2", "--iodepth", "64"];
    let (code, err, doc) = mock_loopback(&[&deep[..], &["--rdma-op", "read"]].concat(), &spec);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("dmalab: note: --iodepth 64: a queue pair keeps at most 6 RDMA READs")
            && err.contains("run with --iodepth 12"),
        "{err}"
    );
    let doc = doc.unwrap();
    let f = &doc["result"]["rdma"];
    assert_eq!(f["device_limits"]["max_qp_init_rd_atom"], 6, "{f}");
    assert_eq!(f["device_limits"]["max_qp_rd_atom"], 16, "{f}");
    assert_eq!(f["max_rd_atomic"], 6, "{f}");
    assert_eq!(
        (&f["iodepth"], &f["iodepth_asked"]),
        (&12.into(), &64.into()),
        "{f}"
    );
    assert_eq!(f["moved"]["reads"], 500, "{f}");
    assert_eq!(
        doc["config"]["iodepth"], 12,
        "the plan records the depth that ran"
    );
    // The initiators were set to 6, their responders serve 6.
    let l = std::fs::read_to_string(&log).unwrap();
    assert_eq!(l.matches("max_rd_atomic 6").count(), 2, "{l}");
    assert_eq!(l.matches("max_dest_rd_atomic 6").count(), 2, "{l}");
    assert!(!l.contains("max_rd_atomic 16"), "{l}");
    // Writes: the same device, the depth asked for, no note.
    let (code, err, doc) = mock_loopback(&[&deep[..], &["--rdma-op", "write"]].concat(), &spec);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("note"), "{err}");
    let doc = doc.unwrap();
    let f = &doc["result"]["rdma"];
    assert_eq!(
        (&f["iodepth"], &f["iodepth_asked"]),
        (&64.into(), &64.into()),
        "{f}"
    );
    assert_eq!(doc["config"]["iodepth"], 64);
}

/// The READ depth is the smaller of both sides': a server whose device
/// serves 4 READs at once per QP says so in its info and its accept, and
/// the client issues no more.
#[test]
fn the_peers_read_depth_limits_the_clients() {
    let srv = Serve::start_on("mock:rd_atom=4", &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let log = dir.path().join("verbs.log");
    let o = crate::common::dmalab()
        .args(["load", "--engine", "rdma", "-q", "--rdma-op", "read"])
        .args(["--target", &srv.addr, "--pattern", "single", "--bs", "4K"])
        .args(["--buffer", "1M", "--rdma-remote-buffer", "1M"])
        .args(["--commands", "100", "--iodepth", "32", "--output"])
        .arg(&out)
        .env("DMALAB_IBVERBS_LIB", format!("mock:log={}", log.display()))
        .timeout(HANG)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("at most 4 RDMA READs") && err.contains("--iodepth 4"),
        "{err}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let f = &doc["result"]["rdma"];
    assert_eq!(f["max_rd_atomic"], 4, "{f}");
    assert_eq!(f["device_limits"]["max_qp_init_rd_atom"], 16, "{f}");
    let l = std::fs::read_to_string(&log).unwrap();
    assert!(
        l.contains("max_rd_atomic 4") && !l.contains("max_rd_atomic 16"),
        "{l}"
    );
    let (_, slog) = srv.stop();
    assert!(
        slog.iter()
            .any(|l| l.contains("4 RDMA READs served at once")),
        "{slog:?}"
    );
}

/// `--rdma-op mixed:30 --rdma-mix-order interleave` issues exactly 30
/// READs in every 100 commands: 300 of 1000, no more, no less.
#[test]
fn mixed_interleave_issues_exactly_pct_reads() {
    let (code, err, doc) = mock_loopback(
        &[
            "--commands",
            "1000",
            "--rdma-op",
            "mixed:30",
            "--rdma-mix-order",
            "interleave",
        ],
        "mock",
    );
    assert_eq!(code, Some(0), "{err}");
    let doc = doc.unwrap();
    let f = &doc["result"]["rdma"];
    assert_eq!(f["moved"]["reads"], 300, "{f}");
    assert_eq!(f["moved"]["writes"], 700, "{f}");
    assert_eq!(f["mix_order"], "interleave");
    // An order only makes sense for a mix.
    let (code, err, _) = mock_loopback(
        &["--commands", "10", "--rdma-mix-order", "interleave"],
        "mock",
    );
    crate::common::assert_usage_stderr(code, &err, "--rdma-mix-order");
}

/// `--mtu 1024` connects every QP with path MTU 1024 (IB code 3, as the
/// verbs library sees it at RTR); a size that is no RDMA MTU is refused
/// with one line.
#[test]
fn mtu_sets_the_path_mtu_of_every_qp() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("verbs.log");
    let (code, err, doc) = mock_loopback(
        &["--commands", "10", "--qps", "2", "--mtu", "1024"],
        &format!("mock:log={}", log.display()),
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(doc.unwrap()["result"]["rdma"]["path_mtu_bytes"], 1024);
    let text = std::fs::read_to_string(&log).unwrap();
    let rtr: Vec<&str> = text.lines().filter(|l| l.starts_with("qp_rtr ")).collect();
    // Two initiators and their two loopback responders.
    assert_eq!(rtr.len(), 4, "{text}");
    assert!(rtr.iter().all(|l| l.ends_with(" path_mtu 3")), "{text}");
    for bad in ["1500", "8192"] {
        let (code, err, _) = mock_loopback(&["--commands", "10", "--mtu", bad], "mock");
        crate::common::assert_usage_stderr(code, &err, "--mtu");
    }
}

/// A worker's completion queue holds an entry per command in flight and
/// one per QP for its fence; `ibv_create_cq` refuses more than the
/// device's `max_cqe`. The depth is lowered to fit, with a note, as for
/// `max_qp_wr`; a queue that cannot hold a command and a fence per QP is
/// refused naming the device flag.
#[test]
fn the_depth_is_lowered_to_what_the_devices_completion_queues_hold() {
    let deep = ["--commands", "300", "--qps", "2", "--iodepth", "64"];
    let (code, err, doc) = mock_loopback(&deep, "mock:max_cqe=20");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "dmalab: note: --iodepth 64: a completion queue on mock0 holds at most 20 entries"
        ) && err.contains("run with --iodepth 18"),
        "{err}"
    );
    let f = doc.unwrap()["result"]["rdma"].clone();
    assert_eq!(
        (&f["iodepth"], &f["iodepth_asked"]),
        (&18.into(), &64.into()),
        "{f}"
    );
    assert_eq!(f["moved"]["writes"], 300, "{f}");
    let (code, err, doc) = mock_loopback(&deep, "mock:max_cqe=3");
    let line = crate::common::assert_usage_stderr(code, &err, "--rdma-device");
    assert!(
        line.contains("mock0's completion queues hold at most 3 entries"),
        "{line}"
    );
    assert!(doc.is_none());
}
