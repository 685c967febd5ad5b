//! `dmalab load --engine gpu` through the binary, on the mock driver
//! (`DMALAB_GPU_DRIVER=mock:...`, a test hook): the whole engine above the
//! driver (pacing, stop conditions, SIGINT, live stats, traces, NUMA
//! warnings, errors) runs here without a GPU. The real driver is only
//! asked for where the host has none: the one-line refusal.

use crate::common;

use serde_json::Value;
use std::path::Path;

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

fn f(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

/// Runs `dmalab load --engine gpu ARGS` with the driver `driver` (None:
/// the real one); its output and the JSON result if written.
fn gpu_run(driver: Option<&str>, args: &[&str]) -> (std::process::Output, Option<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let mut cmd = common::dmalab();
    cmd.args(["load", "--engine", "gpu"])
        .args(args)
        .arg("--output")
        .arg(&out);
    match driver {
        Some(d) => cmd.env("DMALAB_GPU_DRIVER", d),
        None => cmd.env_remove("DMALAB_GPU_DRIVER"),
    };
    let o = cmd.output().unwrap();
    let json = std::fs::read_to_string(&out)
        .ok()
        .map(|s| serde_json::from_str(&s).unwrap());
    (o, json)
}

/// [`gpu_run`] as (exit code, stdout, stderr, the JSON result if written).
fn gpu_load(driver: Option<&str>, args: &[&str]) -> (i32, String, String, Option<Value>) {
    let (o, json) = gpu_run(driver, args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        json,
    )
}

/// Asserts a usage error (exit 2, one error line) containing every `want`,
/// and no result.
fn refused(r: (std::process::Output, Option<Value>), want: &[&str]) {
    let (o, json) = r;
    let err = common::assert_usage_output(&o, want[0]);
    for w in want {
        assert!(err.contains(w), "{w:?} not in {err}");
    }
    assert!(json.is_none(), "nothing written on a refusal");
}

#[test]
fn without_a_driver_the_engine_exits_2_in_one_line() {
    refused(
        gpu_run(Some("/nonexistent/libcuda.so.1"), &["--runtime", "1"]),
        &[
            "--engine gpu: cannot load the CUDA driver /nonexistent/libcuda.so.1",
            "NVIDIA",
        ],
    );
    // The real driver, where this host has none (CI has no GPU).
    let r = gpu_run(None, &["--runtime", "1"]);
    if r.0.status.code() == Some(2) && String::from_utf8_lossy(&r.0.stderr).contains("libcuda.so.1")
    {
        refused(
            r,
            &["--engine gpu: cannot load the CUDA driver libcuda.so.1"],
        );
    } else {
        eprintln!("this host has a CUDA driver: the refusal is checked with a bad path only");
    }
}

#[test]
fn no_device_a_missing_gpu_and_bad_options_exit_2() {
    refused(
        gpu_run(Some("mock:devices=0"), &[]),
        &["CUDA_ERROR_NO_DEVICE"],
    );
    refused(
        gpu_run(Some("mock"), &["--target", "gpu:1"]),
        &["--target: GPU 1 does not exist: the driver sees 1 GPU(s)"],
    );
    refused(
        gpu_run(Some("mock"), &["--target", "/dev/nvidia0"]),
        &["--target", "gpu:N"],
    );
    refused(
        gpu_run(Some("mock:fast"), &[]),
        &["DMALAB_GPU_DRIVER: mock option 'fast'"],
    );
    refused(
        gpu_run(Some("mock:devices=2"), &["--gpus", "0,1"]),
        &["--workers: 2 GPUs need at least 2 workers"],
    );
    refused(
        gpu_run(
            Some("mock:devices=2"),
            &["--gpus", "0,1", "--target", "gpu:0", "--workers", "2"],
        ),
        &["--gpus", "not both"],
    );
    refused(
        gpu_run(Some("mock"), &["--pattern", "flush"]),
        &["--pattern", "no flush"],
    );
}

#[test]
fn an_out_of_memory_device_exits_2_naming_size() {
    // Larger than the device: refused before anything is allocated.
    refused(
        gpu_run(Some("mock:mem=64M"), &["--size", "128M"]),
        &["--size", "do not fit GPU 0"],
    );
    // Large enough, but others hold most of it: the allocation fails.
    refused(
        gpu_run(Some("mock:mem=1G,used=900M"), &["--size", "256M"]),
        &[
            "--size",
            "cuMemAlloc_v2 failed allocating 256.00 MiB on GPU 0",
            "CUDA_ERROR_OUT_OF_MEMORY",
        ],
    );
}

#[test]
fn copies_go_both_ways_with_exact_counts_and_the_gpu_described() {
    for (dir, copies) in [("write", "dtoh"), ("read", "htod")] {
        let (code, out, err, json) = gpu_load(
            Some("mock:50"),
            &[
                "--direction",
                dir,
                "--pattern",
                "single",
                "--bs",
                "64K",
                "--buffer",
                "4M",
                "--size",
                "16M",
                "--commands",
                "1000",
            ],
        );
        assert_eq!(code, 0, "{copies}: {err}");
        let j = json.unwrap();
        assert_eq!(j["status"], "completed");
        assert_eq!(j["result"]["engine"], "gpu");
        assert_eq!(u(&j, "/result/totals/commands"), 1000);
        assert_eq!(u(&j, "/result/totals/data_bytes"), 1000 * 65536);
        assert_eq!(u(&j, "/result/totals/errors"), 0);
        let g = &j["result"]["gpu"];
        assert_eq!(g["driver"], "mock", "{g}");
        assert_eq!(g["gpus"][0]["name"], "dmalab mock GPU 0");
        assert_eq!(g["gpus"][0]["pci_address"], "0000:e0:00.0");
        assert_eq!(u(g, "/device_buffer_bytes"), 16 << 20);
        assert_eq!(u(g, "/streams_per_worker"), 16);
        assert_eq!(j["host"]["target"]["kind"], "gpu");
        assert!(
            out.starts_with("GPU 0: dmalab mock GPU 0, PCI 0000:e0:00.0"),
            "{out}"
        );
    }
}

#[test]
fn direction_both_alternates_copies_with_exact_bytes_each_way() {
    // 1001 commands from the one shared stream, whichever of the two
    // workers takes them: 501 device-to-host (even), 500 host-to-device.
    let (code, out, err, json) = gpu_load(
        Some("mock:50"),
        &[
            "--direction",
            "both",
            "--pattern",
            "single",
            "--bs",
            "64K",
            "--buffer",
            "4M",
            "--size",
            "16M",
            "--workers",
            "2",
            "--iodepth",
            "8",
            "--commands",
            "1001",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    assert_eq!(j["status"], "completed");
    assert_eq!(j["config"]["direction"], "both", "{}", j["config"]);
    assert_eq!(u(&j, "/result/totals/commands"), 1001);
    assert_eq!(u(&j, "/result/totals/errors"), 0);
    let (to_memory, from_memory) = (501 * 65536, 500 * 65536);
    assert_eq!(u(&j, "/result/storage_read_bytes"), to_memory);
    assert_eq!(u(&j, "/result/storage_write_bytes"), from_memory);
    assert_eq!(u(&j, "/result/totals/storage_read_bytes"), to_memory);
    assert_eq!(u(&j, "/result/totals/storage_write_bytes"), from_memory);
    assert_eq!(u(&j, "/result/totals/data_bytes"), to_memory + from_memory);
    // The GPU side counts what each copy direction moved.
    let g = &j["result"]["gpu"];
    assert_eq!(u(g, "/device_to_host_copies"), 501, "{g}");
    assert_eq!(u(g, "/device_to_host_bytes"), to_memory);
    assert_eq!(u(g, "/host_to_device_copies"), 500);
    assert_eq!(u(g, "/host_to_device_bytes"), from_memory);
    assert!(
        out.contains(
            "  memory    the device wrote 31.31 MiB into memory and read 31.25 MiB from it\n"
        ),
        "{out}"
    );
    // One direction alone: the other's counts stay zero.
    let (code, _, err, json) = gpu_load(
        Some("mock:50"),
        &["--direction", "read", "--commands", "10", "-q"],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    let g = &j["result"]["gpu"];
    assert_eq!(u(g, "/device_to_host_copies"), 0, "{g}");
    assert_eq!(u(g, "/host_to_device_copies"), 10);
    assert_eq!(u(&j, "/result/storage_read_bytes"), 0);
    assert_eq!(
        u(&j, "/result/storage_write_bytes"),
        u(&j, "/result/totals/data_bytes")
    );
}

#[test]
fn direction_both_uses_both_copy_engines_within_their_bandwidth() {
    // The mock has one copy engine per direction at 1 GB/s each, as a real
    // GPU: alternating copies use both, and together they can never move
    // more than two engines could. (How much more than one engine they move
    // depends on how fast this host feeds them, so it is not asserted: on a
    // loaded 2-CPU machine a full-speed mock run reached 0.72 GB/s.)
    let (code, _, err, json) = gpu_load(
        Some("mock:1"),
        &[
            "--direction",
            "both",
            "--bs",
            "1M",
            "--max-blocks",
            "1",
            "--pattern",
            "single",
            "--buffer",
            "16M",
            "--iodepth",
            "4",
            "--runtime",
            "2",
            "-q",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    let bw = f(&j, "/result/rates/data_bw_bytes");
    assert!(bw > 0.0 && bw <= 2.0e9 * 1.01, "{bw}");
    let g = &j["result"]["gpu"];
    let (d2h, h2d) = (
        u(g, "/device_to_host_copies"),
        u(g, "/host_to_device_copies"),
    );
    assert!(d2h == h2d || d2h == h2d + 1, "{g}");
}

#[test]
fn copies_take_the_simulated_bandwidth() {
    // 1 GB/s: the mock completes no copy sooner than the link allows, so the
    // measured rate cannot exceed it, however fast the host.
    let (code, _, err, json) = gpu_load(
        Some("mock:1"),
        &[
            "--bs",
            "1M",
            "--max-blocks",
            "1",
            "--pattern",
            "single",
            "--buffer",
            "16M",
            "--iodepth",
            "4",
            "--runtime",
            "2",
            "-q",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    let bw = f(&j, "/result/rates/data_bw_bytes");
    assert!(bw > 0.0 && bw <= 1.0e9 * 1.01, "{bw}");
}

#[test]
fn a_rate_limit_paces_the_copies() {
    let (code, _, err, json) = gpu_load(
        Some("mock:10"),
        &[
            "--bs",
            "64K",
            "--max-blocks",
            "1",
            "--pattern",
            "single",
            "--rate",
            "100M/s",
            "--runtime",
            "3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // The per-second lines on stderr, as for every engine.
    let lines = err.lines().filter(|l| l.contains("commands/s")).count();
    assert!(lines >= 2, "{err}");
    let j = json.unwrap();
    let c = &j["result"]["rate_check"];
    assert_eq!(c["unit"], "bytes", "{c}");
    assert_eq!(c["windows_per_s"].as_array().unwrap().len(), 2, "{c}");
    // Far below the device's speed, the pacer alone sets the rate.
    let mean = f(&j, "/result/rates/data_bw_bytes");
    assert!(
        (mean - 100e6).abs() / 100e6 < 0.05,
        "{mean} vs 100 MB/s: {c}"
    );
}

#[test]
fn direction_both_rate_limits_the_sum_of_both_directions() {
    let (code, _, err, json) = gpu_load(
        Some("mock:10"),
        &[
            "--direction",
            "both",
            "--bs",
            "64K",
            "--max-blocks",
            "1",
            "--pattern",
            "single",
            "--rate",
            "100M/s",
            "--runtime",
            "3",
            "-q",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    let c = &j["result"]["rate_check"];
    assert_eq!(c["unit"], "bytes", "{c}");
    // The limit holds for both directions together, not for each.
    let mean = f(&j, "/result/rates/data_bw_bytes");
    assert!(
        (mean - 100e6).abs() / 100e6 < 0.05,
        "{mean} vs 100 MB/s: {c}"
    );
    let (rd, wr) = (
        u(&j, "/result/storage_read_bytes"),
        u(&j, "/result/storage_write_bytes"),
    );
    assert_eq!(rd + wr, u(&j, "/result/totals/data_bytes"));
    assert!(rd == wr || rd == wr + 65536, "{rd} {wr}");
}

#[test]
fn a_failing_copy_ends_the_run_keeping_what_was_measured() {
    let (code, _, err, json) = gpu_load(
        Some("mock:10,fail-copy=200"),
        &[
            "--bs",
            "64K",
            "--max-blocks",
            "1",
            "--iodepth",
            "1",
            "--runtime",
            "30",
            "-q",
        ],
    );
    assert_eq!(code, 1, "{err}");
    let j = json.expect("the result is written");
    assert_eq!(j["status"], "failed");
    let e = j["result"]["first_error"].as_str().unwrap();
    assert!(
        e.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && e.contains("GPU 0"),
        "{e}"
    );
    // With one copy in flight, the 199 before it completed.
    assert_eq!(u(&j, "/result/totals/commands"), 199);
}

#[test]
fn sigint_stops_the_copies_and_keeps_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(common::dmalab_bin());
    cmd.args(["load", "--engine", "gpu", "--runtime", "60", "-q"])
        .args(["--rate", "50M/s"])
        .env("DMALAB_GPU_DRIVER", "mock:5");
    let (j, snap) = common::interrupt_running_load(cmd, dir.path(), "gpu");
    assert_eq!(snap.commands, u(&j, "/result/totals/commands"));
    assert_eq!(snap.data_bytes, u(&j, "/result/totals/data_bytes"));
}

#[test]
fn trace_records_every_copy_with_its_direction() {
    use dmalab_sim::trace::Kind;
    let dir = tempfile::tempdir().unwrap();
    for (d, writes_memory) in [("write", true), ("read", false)] {
        let t = dir.path().join(format!("{d}.trace"));
        let (code, _, err, json) = gpu_load(
            Some("mock"),
            &[
                "--direction",
                d,
                "--max-blocks",
                "4",
                "--commands",
                "100",
                "--buffer",
                "1M",
                "-q",
                "--trace",
                t.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(u(&json.unwrap(), "/result/trace/transfers"), 100);
        let recs = common::trace_records(&t);
        assert_eq!(recs.len(), 100);
        for r in recs {
            // A GPU copy engine is neither a NIC nor a disk.
            assert_eq!(
                (r.kind, r.len, r.write, r.device),
                (
                    Kind::Xfer,
                    4 * 4096,
                    writes_memory,
                    dmalab_trace::Device::Other
                )
            );
        }
    }
    // both: half the transfers write memory, half read it.
    let t = dir.path().join("both.trace");
    let (code, _, err, _) = gpu_load(
        Some("mock"),
        &[
            "--direction",
            "both",
            "--commands",
            "100",
            "--buffer",
            "1M",
            "-q",
            "--trace",
            t.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let mut writes = [0; 2];
    for r in common::trace_records(&t) {
        writes[usize::from(r.write)] += 1;
    }
    assert_eq!(writes, [50, 50]);
}

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn a_worker_on_another_numa_node_is_warned_about() {
    // A /sys where GPU 0 sits on node 1, behind a PCIe 4 x16 link, and
    // every CPU is on node 0.
    let sys = tempfile::tempdir().unwrap();
    let d = "bus/pci/devices/0000:e0:00.0";
    put(sys.path(), &format!("{d}/numa_node"), "1\n");
    put(
        sys.path(),
        &format!("{d}/current_link_speed"),
        "16.0 GT/s PCIe\n",
    );
    put(sys.path(), &format!("{d}/current_link_width"), "16\n");
    let cpus = std::thread::available_parallelism().unwrap().get();
    for c in 0..cpus.max(64) {
        std::fs::create_dir_all(sys.path().join(format!("devices/system/cpu/cpu{c}/node0")))
            .unwrap();
    }
    let driver = format!("mock:sysfs={}", sys.path().display());
    // Not -q: the summary beside a result file is what this reads.
    let (code, out, err, json) = gpu_load(Some(&driver), &["--commands", "10"]);
    assert_eq!(code, 0, "{err}");
    let warning = "warning: worker 0 runs on NUMA node 0, GPU 0 (0000:e0:00.0) is on node 1";
    assert!(out.contains(warning), "{out}");
    assert!(out.contains("PCIe gen 4 x16, NUMA node 1"), "{out}");
    let j = json.unwrap();
    let g = &j["result"]["gpu"];
    assert_eq!(u(g, "/gpus/0/link_generation"), 4);
    assert_eq!(u(g, "/gpus/0/numa_node"), 1);
    assert_eq!(g["warnings"].as_array().unwrap().len(), 1, "{g}");
    assert_eq!(g["workers"][0]["cpu_nodes"], serde_json::json!([0]));
    // On the GPU's node: no warning.
    put(sys.path(), &format!("{d}/numa_node"), "0\n");
    let (code, out, err, _) = gpu_load(Some(&driver), &["--commands", "10"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("warning:"), "{out}");
}

#[test]
fn two_gpus_one_worker_each() {
    let (code, _, err, json) = gpu_load(
        Some("mock:devices=2"),
        &["--gpus", "0-1", "--workers", "2", "--commands", "200", "-q"],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    assert_eq!(u(&j, "/result/totals/commands"), 200);
    let g = &j["result"]["gpu"];
    assert_eq!(g["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(g["workers"][1]["gpu"], 1, "{g}");
    assert_eq!(j["config"]["target"], "gpu:0,1");
}

#[test]
fn the_gpu_interference_example_plans_every_run_through_the_engine() {
    // `run --dry-run` checks each aggressor with its own `load --dry-run`
    // (the gpu engine inspects the driver there: the mock, inherited).
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gpu-interference.toml");
    let dir = tempfile::tempdir().unwrap();
    let o = common::dmalab()
        .current_dir(dir.path())
        .env("DMALAB_GPU_DRIVER", "mock")
        .args(["run", "--dry-run"])
        .arg(&example)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    // 5 repetitions x 2 victims x (plain + 3 aggressors + their 3 control
    // twins, each checked with its own `load --dry-run`).
    assert!(
        out.contains("70 runs planned; nothing was run (--dry-run)"),
        "{out}{err}"
    );
    for load in [
        "plain",
        "d2h",
        "h2d",
        "both",
        "d2h/control",
        "h2d/control",
        "both/control",
    ] {
        assert!(out.contains(&format!("latency  {load}")), "{load}: {out}");
    }
}

#[test]
fn gpu_copy_d2d_counts_copies_within_the_device_and_touches_no_host_memory() {
    let (code, out, err, json) = gpu_load(
        Some("mock:50"),
        &[
            "--gpu-copy",
            "d2d",
            "--direction",
            "both",
            "--pattern",
            "single",
            "--bs",
            "64K",
            "--buffer",
            "4M",
            "--size",
            "16M",
            "--commands",
            "1000",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j = json.unwrap();
    assert_eq!(j["status"], "completed");
    assert_eq!(u(&j, "/result/totals/commands"), 1000);
    let g = &j["result"]["gpu"];
    assert_eq!(g["copy"], "d2d", "{g}");
    assert_eq!(u(g, "/device_to_device_copies"), 1000, "{g}");
    assert_eq!(u(g, "/device_to_device_bytes"), 1000 * 65536, "{g}");
    for host in [
        "/device_to_host_copies",
        "/device_to_host_bytes",
        "/host_to_device_copies",
        "/host_to_device_bytes",
        "/host_dma_bytes",
    ] {
        assert_eq!(u(g, host), 0, "{host}: {g}");
    }
    assert!(
        out.contains(
            "copies: device to device, within GPU memory (--gpu-copy d2d): no host memory touched"
        ),
        "{out}"
    );
    // A host load of the same shape counts its DMA into host memory.
    let (code, _, err, json) = gpu_load(
        Some("mock:50"),
        &[
            "--direction",
            "write",
            "--pattern",
            "single",
            "--bs",
            "64K",
            "--buffer",
            "4M",
            "--size",
            "16M",
            "--commands",
            "10",
            "-q",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let g = &json.unwrap()["result"]["gpu"];
    assert_eq!(g["copy"], "host", "{g}");
    assert_eq!(u(g, "/host_dma_bytes"), 10 * 65536, "{g}");
    assert_eq!(u(g, "/device_to_device_copies"), 0, "{g}");
}

#[test]
fn gpu_copy_d2d_needs_the_gpu_engine_and_twice_the_size_in_gpu_memory() {
    let mut cmd = common::dmalab();
    cmd.args(["load", "--engine", "null", "--gpu-copy", "d2d", "--dry-run"]);
    common::assert_usage_output(&cmd.output().unwrap(), "--gpu-copy");
    // 10 GiB fits the mock's 16 GiB once, not twice.
    refused(
        gpu_run(
            Some("mock"),
            &["--gpu-copy", "d2d", "--size", "10G", "--dry-run"],
        ),
        &["--size", "twice (--gpu-copy d2d)"],
    );
}

#[test]
fn the_gpu_interference_example_runs_its_control_twins_at_the_measured_rate() {
    // The example as shipped (control = "auto"), shortened for a test: one
    // repetition, short victims on small buffers.
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gpu-interference.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    assert!(text.contains("\ncontrol = \"auto\"\n"), "{text}");
    let mut short = text.clone();
    for (from, to) in [
        ("repetitions = 5", "repetitions = 1"),
        ("warmup = \"1s\"", "warmup = \"100ms\""),
        ("cooldown = \"500ms\"", "cooldown = \"0s\""),
        ("buffer = \"1G\"", "buffer = \"128M\""),
        ("size = \"256M\"", "size = \"8M\""),
        ("runtime = \"2s\"", "runtime = \"300ms\""),
    ] {
        assert!(short.contains(from), "the example changed: {from}");
        short = short.replace(from, to);
    }
    let dir = tempfile::tempdir().unwrap();
    let exp = dir.path().join("gpu.toml");
    std::fs::write(&exp, short).unwrap();
    let res = dir.path().join("gpu.jsonl");
    let o = common::dmalab()
        .current_dir(dir.path())
        .env("DMALAB_GPU_DRIVER", "mock:25")
        .args(["run", "-q", "-o"])
        .arg(&res)
        .arg(&exp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let runs: Vec<Value> = std::fs::read_to_string(&res)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "run")
        .collect();
    let loads: Vec<&str> = runs
        .iter()
        .filter(|r| r["victim"] == "latency")
        .map(|r| r["load"].as_str().unwrap())
        .collect();
    assert_eq!(
        loads,
        [
            "plain",
            "d2h",
            "h2d",
            "both",
            "d2h/control",
            "h2d/control",
            "both/control"
        ],
        "plain, loads, controls"
    );
    let mut controls = 0;
    for r in runs.iter().filter(|r| r["control"].is_object()) {
        controls += 1;
        assert_eq!(r["status"], "completed", "{r}");
        let c = &r["control"];
        let of = c["of"].as_str().unwrap();
        assert_eq!(r["load"], format!("{of}/control"));
        assert_eq!(c["kind"], "twin");
        // Paced at the rate its aggressor reached in the same repetition.
        let target = f(c, "/target_cmd_per_s");
        assert!(target > 0.0, "{c}");
        let rate = u(c, "/rate_iops");
        assert_eq!(rate, (target.round() as u64).max(1), "{c}");
        let argv: Vec<&str> = common::aggressor_argv(r);
        let rate_s = rate.to_string();
        assert!(
            common::has_flag(&argv, "--rate-iops", rate_s.as_str()),
            "{argv:?}"
        );
        assert!(common::has_flag(&argv, "--gpu-copy", "d2d"), "{argv:?}");
        for same in [["--engine", "gpu"], ["--iodepth", "4"], ["--bs", "64M"]] {
            assert!(argv.windows(2).any(|w| w == same), "{same:?}: {argv:?}");
        }
        // The twin's own result: copies within the device, none with host
        // memory (the record keeps the load document's `/result`).
        let g = &r["aggressor"]["result"]["gpu"];
        assert_eq!(g["copy"], "d2d", "{r}");
        assert!(u(g, "/device_to_device_copies") > 0, "{g}");
        assert_eq!(u(g, "/host_dma_bytes"), 0, "{g}");
    }
    // Three aggressors, two victims, one repetition.
    assert_eq!(controls, 6);
}

#[test]
fn every_gpu_wait_mode_completes_exact_byte_counts() {
    for mode in ["spin", "sleep", "block"] {
        let (code, _, err, json) = gpu_load(
            Some("mock:2"),
            &[
                "--gpu-wait",
                mode,
                "--direction",
                "both",
                "--pattern",
                "single",
                "--bs",
                "256K",
                "--buffer",
                "4M",
                "--size",
                "16M",
                "--iodepth",
                "4",
                "--commands",
                "301",
                "-q",
            ],
        );
        assert_eq!(code, 0, "{mode}: {err}");
        let j = json.unwrap();
        assert_eq!(j["status"], "completed", "{mode}");
        assert_eq!(u(&j, "/result/totals/commands"), 301, "{mode}");
        assert_eq!(u(&j, "/result/totals/data_bytes"), 301 * (256 << 10));
        let g = &j["result"]["gpu"];
        assert_eq!(g["wait"], mode, "{g}");
        assert_eq!(u(g, "/device_to_host_copies"), 151, "{mode}: {g}");
        assert_eq!(u(g, "/device_to_host_bytes"), 151 * (256 << 10));
        assert_eq!(u(g, "/host_to_device_copies"), 150, "{mode}: {g}");
        assert_eq!(u(g, "/host_to_device_bytes"), 150 * (256 << 10));
        // The workers' CPU time is in the result, whichever the mode.
        assert!(j["result"]["cpu"]["cpu_pct"].is_number(), "{mode}");
    }
    // Without the flag the result still says how the workers waited.
    let (code, _, err, json) = gpu_load(Some("mock"), &["--commands", "10", "-q"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json.unwrap()["result"]["gpu"]["wait"], "sleep");
}

#[test]
fn gpu_wait_sleep_and_block_honour_runtime_and_a_rate_limit() {
    // 1 MiB copies at 0.2 GB/s take 5.2 ms each: the waits sleep or block
    // while the pacer's timeouts (a copy every 10.5 ms) and the deadline
    // must still be kept.
    for mode in ["sleep", "block"] {
        let (code, _, err, json) = gpu_load(
            Some("mock:0.2"),
            &[
                "--gpu-wait",
                mode,
                "--bs",
                "1M",
                "--max-blocks",
                "1",
                "--pattern",
                "single",
                "--buffer",
                "4M",
                "--iodepth",
                "2",
                "--rate",
                "100M/s",
                "--runtime",
                "2",
                "-q",
            ],
        );
        assert_eq!(code, 0, "{mode}: {err}");
        let j = json.unwrap();
        assert_eq!(j["status"], "completed", "{mode}");
        let c = &j["result"]["rate_check"];
        assert_eq!(c["windows_per_s"].as_array().unwrap().len(), 1, "{c}");
        let mean = f(&j, "/result/rates/data_bw_bytes");
        assert!(
            (mean - 100e6).abs() / 100e6 < 0.1,
            "{mode}: {mean} vs 100 MB/s: {c}"
        );
    }
}

#[test]
fn gpu_wait_sleep_and_block_stop_on_sigint() {
    for mode in ["sleep", "block"] {
        let dir = tempfile::tempdir().unwrap();
        // Full speed, 5.2 ms copies: every wait sleeps or blocks.
        let mut cmd = std::process::Command::new(common::dmalab_bin());
        cmd.args(["load", "--engine", "gpu", "--gpu-wait", mode])
            .args(["--bs", "1M", "--max-blocks", "1", "--buffer", "4M"])
            .args(["--iodepth", "2", "--runtime", "60", "-q"])
            .env("DMALAB_GPU_DRIVER", "mock:0.2");
        let (j, _) = common::interrupt_running_load(cmd, dir.path(), mode);
        assert_eq!(j["result"]["gpu"]["wait"], mode);
        let copies = u(&j, "/result/gpu/device_to_host_copies");
        assert_eq!(u(&j, "/result/totals/commands"), copies, "{mode}");
        assert_eq!(u(&j, "/result/totals/data_bytes"), copies << 20, "{mode}");
    }
}

#[test]
fn a_bad_gpu_wait_exits_2_in_one_line() {
    refused(
        gpu_run(Some("mock"), &["--gpu-wait", "yield"]),
        &["--gpu-wait", "yield"],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let o = common::dmalab()
        .args([
            "load",
            "--engine",
            "null",
            "--gpu-wait",
            "spin",
            "--runtime",
            "1",
        ])
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "--gpu-wait");
    assert!(err.contains("only --engine gpu"), "{err}");
    assert!(!out.exists(), "nothing written on a refusal");
}
