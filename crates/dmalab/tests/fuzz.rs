//! dmalab's own fuzz harness (issue 14): the committed corpus under
//! `tests/fuzz/` mutated deterministically and driven
//!
//! - through the library parsers in-process (experiment TOML, simulator
//!   parameters, text and binary traces, pmbench XML, results JSONL,
//!   `fleet merge` on a results directory of mutated node files, and
//!   every option-value parser), where the property is: no panic (and, for
//!   `fleet merge`, no error but a usage error);
//! - through the binary for a bounded number of cases, where the property
//!   is: exit status 0, 1 or 2 (0 or 2 for `fleet merge`: every failure
//!   there is bad input), no panic (101), no death by a signal, within a
//!   kill timeout and an address-space limit (`ulimit -v`);
//! - as a byte-level client of `dmalab rdma serve` on the fake verbs
//!   library, where the property is: the server closes every connection
//!   by its deadline, never dies, and serves a well-formed client after.
//!
//! Every committed regression case (`tests/fuzz/regressions/`) runs first,
//! with the exit status it names. The iteration counts are fixed, so CI
//! cost does not depend on the machine; `DMALAB_FUZZ_ITER` raises them for
//! longer runs (`scripts/fuzz.sh ITER`), and `DMALAB_FUZZ_SEED` picks
//! another seed. A failing input is written to `fuzz-failures/`
//! (under cargo's target tmp directory) with the command line that failed: commit it under
//! `tests/fuzz/regressions/` with a name after the bug.

mod common;

use dmalab_core::child::ChildSpec;
use std::io::Read as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// In-process cases per family in CI.
const LIB_CASES: u64 = 1500;
/// Binary cases per family in CI.
const BIN_CASES: u64 = 150;
/// A binary case that runs longer than this fails (a hang).
const BIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Address-space limit of a binary case, KiB (`ulimit -v`): 4 GiB.
const BIN_MEMORY_KIB: u64 = 4 << 20;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fuzz_dir() -> PathBuf {
    repo().join("tests/fuzz")
}

fn iterations(base: u64) -> u64 {
    let scale: u64 = std::env::var("DMALAB_FUZZ_ITER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if scale == 0 {
        base
    } else {
        scale
    }
}

fn seed() -> u64 {
    std::env::var("DMALAB_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x00d3_a1ab)
}

/// SplitMix64: small, fixed, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// Values at the edges of every numeric type and parser.
const BOUNDARY: &[&str] = &[
    "0",
    "-1",
    "1",
    "-0",
    "255",
    "256",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "-9223372036854775809",
    "1e308",
    "-1e308",
    "1e-308",
    "NaN",
    "inf",
    "-inf",
    "0.5",
    "1.5",
    "0x",
    "0xffffffffffffffff",
    "1T",
    "16E",
    "1G",
    "0-4294967295",
    "0-18446744073709551615",
    "4294967295-0",
    "1,,2",
    "366d",
    "367d",
    "99999999999999999999s",
    "",
    " ",
    "\u{1b}[2J",
    "a\nb",
];

/// One deterministic mutation of `input`; `others` are splice donors.
fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        match rng.below(9) {
            // Flip one bit.
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            // Set a byte to an edge value (NUL, high bit, newline, quote).
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = *rng.pick(&[0u8, 0xff, 0x7f, 0x80, b'\n', b'"', b'-', b'[', b'=', 0xc3]);
            }
            // Truncate.
            2 => {
                let n = rng.below(v.len() + 1);
                v.truncate(n);
            }
            // Delete a range.
            3 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = (a + rng.below(64)).min(v.len());
                v.drain(a..b);
            }
            // Duplicate a range.
            4 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = (a + 1 + rng.below(256)).min(v.len());
                let piece = v[a..b].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, piece);
            }
            // Splice a piece of another seed.
            5 if !others.is_empty() => {
                let o = rng.pick(others);
                if !o.is_empty() {
                    let a = rng.below(o.len());
                    let b = (a + 1 + rng.below(512)).min(o.len());
                    let at = rng.below(v.len() + 1);
                    v.splice(at..at, o[a..b].iter().copied());
                }
            }
            // Replace a run of digits with an edge number.
            6 => {
                let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
                if !digits.is_empty() {
                    let s = *rng.pick(&digits);
                    let mut e = s;
                    while e < v.len() && (v[e].is_ascii_digit() || v[e] == b'.') {
                        e += 1;
                    }
                    let mut b = s;
                    while b > 0 && v[b - 1].is_ascii_digit() {
                        b -= 1;
                    }
                    let n = rng.pick(BOUNDARY).as_bytes().to_vec();
                    v.splice(b..e, n);
                }
            }
            // Insert bytes that are not UTF-8.
            7 => {
                let at = rng.below(v.len() + 1);
                const BAD: [&[u8]; 3] = [&[0xff, 0xfe], &[0xc3], &[0xed, 0xa0, 0x80]];
                let bad = BAD[rng.below(BAD.len())];
                v.splice(at..at, bad.iter().copied());
            }
            // Append a huge repetition of a short piece (bounded: 64 KiB).
            _ => {
                if !v.is_empty() {
                    let a = rng.below(v.len());
                    let b = (a + 1 + rng.below(8)).min(v.len());
                    let piece = v[a..b].to_vec();
                    let times = 1 + rng.below(65536 / piece.len().max(1));
                    for _ in 0..times.min(8192) {
                        v.extend_from_slice(&piece);
                    }
                }
            }
        }
    }
    v
}

/// Corpus files of a folder under `tests/fuzz/seeds` with the extension.
fn seeds(ext: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for dir in [
        fuzz_dir().join("seeds"),
        fuzz_dir().join("regressions"),
        repo().join("examples"),
        repo().join("tests/fixtures/page"),
    ] {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        paths.sort();
        for p in paths {
            out.push(std::fs::read(&p).unwrap());
        }
    }
    assert!(!out.is_empty(), "no .{ext} seeds in tests/fuzz/seeds");
    out
}

/// Failures found, written to `target/fuzz-failures/`.
static FAILURES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn failure_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn record_failure(name: &str, input: &[u8], what: String) {
    let path = failure_dir().join(name);
    let _ = std::fs::write(&path, input);
    let _ = std::fs::write(path.with_extension("why"), &what);
    FAILURES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{}: {what}", path.display()));
}

/// Runs `f` on every case of a family in-process; a panic is a failure.
fn lib_family(family: &str, ext: &str, f: &(dyn Fn(&[u8]) + std::panic::RefUnwindSafe)) -> u64 {
    let corpus = seeds(ext);
    let mut rng = Rng(seed()
        ^ family
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ b as u64));
    let n = iterations(LIB_CASES);
    let mut cases = 0;
    let t0 = Instant::now();
    for s in &corpus {
        check_lib(family, ext, cases, s, f);
        cases += 1;
    }
    for _ in 0..n {
        let base = rng.pick(&corpus).clone();
        let input = mutate(&mut rng, &base, &corpus);
        check_lib(family, ext, cases, &input, f);
        cases += 1;
    }
    eprintln!(
        "fuzz {family}: {cases} cases in-process, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    cases
}

fn check_lib(
    family: &str,
    ext: &str,
    i: u64,
    input: &[u8],
    f: &(dyn Fn(&[u8]) + std::panic::RefUnwindSafe),
) {
    if let Err(p) = std::panic::catch_unwind(|| f(input)) {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        record_failure(
            &format!("lib-{family}-{i}.{ext}"),
            input,
            format!("panic: {msg}"),
        );
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Outcome of one binary case.
fn run_bin(args: &[String], dir: &Path) -> Result<(i32, String), String> {
    // `ulimit -v` in a shell that then becomes dmalab: the limit is the
    // child's alone.
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {BIN_MEMORY_KIB}; exec \"$0\" \"$@\""))
        .arg(common::dmalab_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = (&mut stderr).take(1 << 20).read_to_end(&mut s);
        let mut sink = Vec::new();
        let _ = stderr.read_to_end(&mut sink);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if t0.elapsed() > BIN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            return Err(format!("still running after {BIN_TIMEOUT:?} (killed)"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = text(&reader.join().unwrap_or_default());
    if let Some(sig) = status.signal() {
        return Err(format!("killed by signal {sig}; stderr: {err}"));
    }
    let code = status.code().unwrap_or(-1);
    if !(0..=2).contains(&code) {
        return Err(format!("exit status {code}; stderr: {err}"));
    }
    if code != 0 {
        // One line, and nothing raw from the input on the terminal.
        // (clap's own errors start with "error:".)
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("dmalab: error:") || l.starts_with("error:"))
            .collect();
        if lines.len() != 1 || err.contains('\u{1b}') {
            return Err(format!(
                "exit {code} without one clean error line; stderr: {err:?}"
            ));
        }
    }
    Ok((code, err))
}

/// A binary family: `make(dir, input)` writes what it needs into `dir` and
/// returns the argv; the mutated input comes from the `ext` seeds.
fn bin_family(family: &str, ext: &str, make: &dyn Fn(&Path, &[u8]) -> Vec<String>) -> u64 {
    bin_family_exiting(family, ext, make, &[0, 1, 2])
}

/// [`bin_family`] where only the exit statuses `allowed` pass (a command
/// whose every failure on these inputs is bad input: 0 or 2).
fn bin_family_exiting(
    family: &str,
    ext: &str,
    make: &dyn Fn(&Path, &[u8]) -> Vec<String>,
    allowed: &[i32],
) -> u64 {
    let corpus = seeds(ext);
    let mut rng = Rng(seed()
        ^ 0xb1
        ^ family
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) ^ b as u64));
    let n = iterations(BIN_CASES);
    let mut cases = 0;
    let t0 = Instant::now();
    let mut by_code = [0u64; 3];
    let mut inputs: Vec<Vec<u8>> = corpus.clone();
    for _ in 0..n {
        let base = rng.pick(&corpus).clone();
        inputs.push(mutate(&mut rng, &base, &corpus));
    }
    for input in inputs {
        let dir = tempfile::tempdir().unwrap();
        let args = make(dir.path(), &input);
        let r = run_bin(&args, dir.path()).and_then(|(code, err)| {
            if allowed.contains(&code) {
                Ok((code, err))
            } else {
                Err(format!("exit {code} (allowed: {allowed:?}); stderr: {err}"))
            }
        });
        if let Ok((code, _)) = &r {
            by_code[*code as usize] += 1;
        }
        if let Err(why) = r {
            record_failure(
                &format!("bin-{family}-{cases}.{ext}"),
                &input,
                format!(
                    "dmalab {}: {why}",
                    dmalab_core::text::shown(&args.join(" "))
                ),
            );
        }
        cases += 1;
    }
    eprintln!(
        "fuzz {family}: {cases} cases through the binary (exit 0/1/2: {by_code:?}), {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    cases
}

fn assert_no_failures(what: &str, cases: u64) {
    eprintln!("fuzz {what}: {cases} cases");
    let f = FAILURES.lock().unwrap_or_else(|e| e.into_inner());
    assert!(f.is_empty(), "{} failure(s):\n{}", f.len(), f.join("\n"));
}

// ---- in-process ----

#[test]
fn fuzz_library_parsers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let mut cases = 0;
    // The binary's catalog of child configs (`cmd/children.rs`).
    let children = dmalab_run::child::ChildCatalog {
        load: ChildSpec::of::<dmalab_load::child::LoadChildOptions>(),
        probe_latency: ChildSpec::of::<dmalab_probe::child::LatencyChildOptions>(),
        probe_bandwidth: ChildSpec::of::<dmalab_probe::child::BandwidthChildOptions>(),
        page: ChildSpec::of::<dmalab_page::child::PageChildOptions>(),
    };
    cases += lib_family("experiment", "toml", &|b| {
        let _ = dmalab_run::experiment::parse(Path::new("fuzz.toml"), &text(b), &children);
        let _ = dmalab_sim::SimConfig::from_toml(&text(b));
    });
    let d2 = d.clone();
    cases += lib_family("trace-text", "txt", &move |b| read_trace(&d2, b));
    let d3 = d.clone();
    cases += lib_family("trace-bin", "trace", &move |b| read_trace(&d3, b));
    cases += lib_family("pmbench-xml", "xml", &|b| {
        let _ = dmalab_page::xml::import(&text(b));
    });
    let d4 = d.clone();
    cases += lib_family("results", "jsonl", &move |b| {
        let p = temp_file(&d4, "r.jsonl", b);
        if let Ok(r) = dmalab_run::record::read_for_report(&p) {
            let _ = dmalab_run::record::read(&p);
            let cells = dmalab_run::analysis::cells(&r, r.header.noisy_cv_pct);
            let _ = dmalab_run::analysis::text_table(&cells);
        }
    });
    let d5 = d.clone();
    cases += lib_family("fleet-merge", "jsonl", &move |b| {
        let res = fleet_results_dir(&d5, b);
        match dmalab_fleet::merge::merge(&res, None) {
            Ok(_) | Err(dmalab_fleet::FleetError::Usage(_)) => {}
            // Bad input is a usage error (exit 2), never a fault (exit 1).
            Err(e) => panic!("not a usage error: {e}"),
        }
    });
    cases += lib_family("option-values", "values", &|b| option_values(&text(b)));
    assert_no_failures("library parsers", cases);
}

/// A `dmalab fleet merge` results directory under `dir` made of the
/// mutated results `b`: node n1's file is `b`; n2's is `b` twice (every
/// line duplicated) or the first results seed, as the input's hash picks.
fn fleet_results_dir(dir: &Path, b: &[u8]) -> PathBuf {
    let res = dir.join("res");
    let _ = std::fs::remove_dir_all(&res);
    std::fs::create_dir_all(&res).unwrap();
    temp_file(&res, "n1.jsonl", b);
    let h = b
        .iter()
        .fold(7u64, |h, &x| h.wrapping_mul(131).wrapping_add(x as u64));
    let n2 = if h % 2 == 0 {
        [b, b].concat()
    } else {
        std::fs::read(fuzz_dir().join("seeds/results-small.jsonl")).unwrap()
    };
    temp_file(&res, "n2.jsonl", &n2);
    res
}

fn read_trace(dir: &Path, b: &[u8]) {
    let p = temp_file(dir, "t.trace", b);
    if let Ok(mut rd) = dmalab_trace::TraceReader::open(&p) {
        let mut r = dmalab_trace::Record::default();
        let mut n = 0;
        while let Ok(true) = dmalab_trace::RecordSource::next_record(&mut rd, &mut r) {
            n += 1;
            if n > 1_000_000 {
                break;
            }
        }
    }
}

/// Every value parser of every option, on each line of the input.
fn option_values(t: &str) {
    use dmalab_core::units::*;
    // A mutation can repeat a line thousands of times; the parsers see the
    // first lines (the values), which is what they are fuzzed for.
    for v in t.lines().take(64) {
        let _ = parse_size("--bs", v);
        let _ = parse_duration("--runtime", v);
        let _ = parse_count("--commands", v);
        let _ = parse_rate("--rate", v);
        let _ = parse_count_rate("--rate-iops", v);
        let _ = dmalab_core::cpus::parse_cpu_list_within("--cpus-allowed", v, &[0, 1, 2, 3]);
        let _ = dmalab_sim::Scheme::parse(v);
        let _ = dmalab_page::config::SwapSpec::parse(v);
        let _ = dmalab_core::cpus::parse_kernel_list(v);
        let mut cfg = dmalab_sim::SimConfig::named("paper").unwrap();
        for key in [
            "llc.size_bytes",
            "llc.ways",
            "llc.line_bytes",
            "llc.ddio_ways",
            "llc.hit_ns",
            "dram.preset",
            "dram.read_queue",
            "dram.bank_groups",
            "dram.row_bytes",
            "dma_cache.prefetch_degree",
            "cpu.freq_mhz",
        ] {
            let _ = cfg.set(key, v);
        }
        if let Some((k, val)) = v.split_once('=') {
            let _ = cfg.set(k, val);
        }
    }
}

// ---- through the binary ----

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// A line as an argument: no NUL, at most 4 KiB.
fn arg_value(line: &str) -> String {
    line.replace('\0', "").chars().take(4096).collect()
}

/// Each option of a command that finishes quickly whatever its value (a
/// dry run, or a simulation of a tiny trace), with the option's value taken
/// from a line of the mutated `.values` input.
fn option_argv(dir: &Path, input: &[u8]) -> Vec<String> {
    let t = text(input);
    let lines: Vec<&str> = t.lines().collect();
    let h = input
        .iter()
        .fold(7u64, |h, &b| h.wrapping_mul(131).wrapping_add(b as u64));
    let mut rng = Rng(h);
    // An argument cannot hold a NUL byte (execve's strings end there) nor
    // exceed the kernel's 128 KiB per argument: values are cut at 4 KiB.
    let v = arg_value(lines.get(rng.below(lines.len())).copied().unwrap_or(""));
    let trace = temp_file(
        dir,
        "t.txt",
        b"0 cpu-r 0x1000 64\n10 dma-w 0x2000 4096\n5 cpu-w 0x2000 64\n",
    );
    let trace = trace.display().to_string();
    // Each option with a value it takes: half the cases mutate that value,
    // half take a line of the mutated corpus of values.
    let load: [(&str, &str); 21] = [
        ("--bs", "4K"),
        ("--buffer", "64M"),
        ("--size", "256M"),
        ("--region", "1M"),
        ("--workers", "2"),
        ("--iodepth", "16"),
        ("--cpus-allowed", "0-1"),
        ("--rate", "100M/s"),
        ("--rate-iops", "10k/s"),
        ("--timeslot", "100ms"),
        ("--runtime", "5s"),
        ("--commands", "1000"),
        ("--blocks", "1000"),
        ("--max-blocks", "32"),
        ("--fill", "random:7"),
        ("--seed", "1"),
        ("--pattern", "random"),
        ("--direction", "read"),
        ("--hugepages", "2m"),
        ("--cache", "always"),
        ("--arrival", "poisson"),
    ];
    let value = |rng: &mut Rng, own: &str| -> String {
        if rng.below(2) == 0 {
            let m = mutate(rng, own.as_bytes(), &[]);
            arg_value(text(&m).lines().next().unwrap_or(""))
        } else {
            v.clone()
        }
    };
    match rng.below(5) {
        0 | 1 => {
            let mut a = s(&["load", "--engine", "null", "--dry-run"]);
            let (opt, own) = *rng.pick(&load);
            a.push(opt.to_string());
            a.push(value(&mut rng, own));
            a
        }
        2 => {
            let (opt, own) = *rng.pick(&[
                ("--set", "llc.size_bytes=4M"),
                ("--set", "llc.ways=16"),
                ("--set", "dram.read_queue=32"),
                ("--set", "llc.hit_ns=10"),
                ("--set", "dram.preset=ddr5-4800"),
                ("--set", "dram.timing.cl=22"),
                ("--set", "dma.line_gap_ns=1"),
                ("--schemes", "snoop,dma-cache-256K-pf"),
                ("--params", "modern"),
            ]);
            let mut a = s(&["sim", "compare", &trace, opt]);
            a.push(value(&mut rng, own));
            if opt != "--schemes" {
                a.extend(s(&["--schemes", "snoop"]));
            }
            a
        }
        3 => {
            let (param, own) = *rng.pick(&[
                ("llc.size_bytes", "1M,2M"),
                ("llc.ways", "8,16"),
                ("dram.preset", "ddr4-3200,ddr5-4800"),
                ("dma_cache.prefetch_degree", "2,4"),
            ]);
            let mut a = s(&[
                "sim",
                "sweep",
                &trace,
                "--schemes",
                "snoop,dma-cache-64K",
                "--param",
                param,
                "--values",
            ]);
            a.push(value(&mut rng, own));
            a
        }
        _ => {
            // Values that cannot lengthen the 20 ms run: the probe runs for
            // real (it has no dry run).
            let (opt, own) = *rng.pick(&[
                ("--size", "64K"),
                ("--stride", "64"),
                ("--cpus-allowed", "0"),
                ("--threads", "1"),
                ("--pages", "4k"),
                ("--mode", "clock"),
                ("--rounds", "3"),
                ("--group-pages", "16"),
            ]);
            let mut a = s(&["probe", "latency", "--runtime", "20ms", "--size", "64K"]);
            if opt == "--size" {
                a.truncate(4);
            }
            a.push(opt.into());
            a.push(value(&mut rng, own));
            a
        }
    }
}

#[test]
fn fuzz_binary() {
    let mut cases = 0;
    cases += bin_family("options", "values", &option_argv);
    cases += bin_family("experiment", "toml", &|d, b| {
        let p = temp_file(d, "e.toml", b);
        vec![
            "run".into(),
            p.display().to_string(),
            "--dry-run".into(),
            "--results".into(),
            d.join("r.jsonl").display().to_string(),
        ]
    });
    cases += bin_family("trace-text", "txt", &|d, b| {
        let p = temp_file(d, "t.txt", b);
        s(&[
            "sim",
            "compare",
            &p.display().to_string(),
            "--schemes",
            "snoop,dma-cache-64K-pf",
        ])
    });
    cases += bin_family("trace-bin", "trace", &|d, b| {
        let p = temp_file(d, "t.trace", b);
        let out = d.join("o.txt");
        s(&[
            "sim",
            "convert",
            &p.display().to_string(),
            &out.display().to_string(),
            "--to",
            "text",
        ])
    });
    cases += bin_family("pmbench-xml", "xml", &|d, b| {
        let p = temp_file(d, "p.xml", b);
        s(&[
            "page",
            "import",
            &p.display().to_string(),
            "--output",
            &d.join("o.json").display().to_string(),
        ])
    });
    cases += bin_family("results", "jsonl", &|d, b| {
        let p = temp_file(d, "r.jsonl", b);
        s(&[
            "report",
            &p.display().to_string(),
            "-o",
            &d.join("r.html").display().to_string(),
            "--csv",
            &d.join("r.csv").display().to_string(),
        ])
    });
    cases += bin_family_exiting(
        "fleet-merge",
        "jsonl",
        &|d, b| {
            let res = fleet_results_dir(d, b);
            vec!["fleet".into(), "merge".into(), res.display().to_string()]
        },
        &[0, 2],
    );
    assert_no_failures("binary", cases);
}

/// Every input that ever failed, committed under `tests/fuzz/regressions/`
/// with a name after the bug: `NAME.args` is a command line (one argument
/// per line; `@FILE` names another regression file, copied in), any other
/// file is an input an `.args` file names. A line `#expect-exit N` pins
/// the exit status, `#expect-stderr TEXT` a part of the error output.
#[test]
fn fuzz_regressions() {
    let dir = fuzz_dir().join("regressions");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    for p in &paths {
        if p.extension().is_none_or(|e| e != "args") {
            continue;
        }
        let t = std::fs::read_to_string(p).unwrap();
        let mut expect = None;
        let mut expect_err = Vec::new();
        let tmp = tempfile::tempdir().unwrap();
        let mut args = Vec::new();
        for line in t.lines() {
            if let Some(n) = line.strip_prefix("#expect-exit ") {
                expect = Some(n.trim().parse::<i32>().unwrap());
            } else if let Some(t) = line.strip_prefix("#expect-stderr ") {
                expect_err.push(t.to_string());
            } else if line.starts_with('#') {
            } else if let Some(f) = line.strip_prefix('@') {
                let src = dir.join(f);
                let dst = tmp.path().join(f);
                std::fs::copy(&src, &dst).unwrap();
                args.push(dst.display().to_string());
            } else {
                args.push(line.to_string());
            }
        }
        match run_bin(&args, tmp.path()) {
            Ok((code, err))
                if expect.is_none_or(|e| e == code)
                    && expect_err.iter().all(|t| err.contains(t.as_str())) => {}
            Ok((code, err)) => failures.push(format!(
                "{}: exit {code} (expected {expect:?}), stderr {err:?} (expected to contain {expect_err:?})",
                p.display()
            )),
            Err(why) => failures.push(format!("{}: {why}", p.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The rdma handshake, byte by byte (issue 27): mutated hellos, queries
/// and done messages (truncated, oversized, wrong magic, huge counts) from
/// a raw TCP client against one `dmalab rdma serve` on the fake verbs
/// library. Properties: every connection is closed by the server within
/// its handshake timeout (no hang), the server never panics or dies, and a
/// well-formed client is served afterwards.
#[test]
fn fuzz_rdma_handshake() {
    use common::rdma_peer::{good_client, hello_bytes, Serve, HANG};
    use dmalab_rdma::handshake::{Done, MAGIC};
    use std::io::Write as _;
    let mut srv = Serve::start(&["--handshake-timeout", "1s", "--max-clients", "16"]);
    let header = |kind: u8| {
        let mut h = MAGIC.to_vec();
        h.extend_from_slice(&dmalab_rdma::handshake::VERSION.to_be_bytes());
        h.push(kind);
        h
    };
    let done = |v: u64| {
        let mut d = header(4);
        for _ in 0..4 {
            d.extend_from_slice(&v.to_be_bytes());
        }
        d
    };
    let mut corpus = vec![
        hello_bytes(0x100),
        header(5),
        [hello_bytes(0x101), done(u64::MAX)].concat(),
        [hello_bytes(0x102), done(3)].concat(),
        [hello_bytes(0x103), vec![0xa5; 64 << 10]].concat(),
        [b"DMALABRX".to_vec(), hello_bytes(0x104)[8..].to_vec()].concat(),
        [header(3), vec![0xff, 0xff], vec![b'x'; 100]].concat(),
        header(8),
    ];
    corpus.push(corpus[2].repeat(2));
    let mut rng = Rng(seed() ^ 0x7264_6d61);
    let n = iterations(BIN_CASES);
    let t0 = Instant::now();
    for i in 0..n {
        let base = rng.pick(&corpus).clone();
        let input = mutate(&mut rng, &base, &corpus);
        // Now and then the client keeps its side open: the server must
        // end the connection by its own deadline.
        let keep_open = i % 50 == 49;
        let mut s = srv.connect();
        let _ = s.write_all(&input);
        if !keep_open {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        // Bounded by HANG: a server that never closes fails here.
        s.set_read_timeout(Some(HANG)).unwrap();
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        let closed = loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) => break true,
                Ok(k) => {
                    got.extend_from_slice(&buf[..k]);
                    // Accepted: a connected client may stay as long as it
                    // likes; this one now says it is done.
                    if keep_open && got.len() >= 11 && got[10] == 2 {
                        let _ = s.shutdown(std::net::Shutdown::Write);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        if !closed {
            record_failure(
                &format!("rdma-handshake-{i}.bin"),
                &input,
                format!("rdma serve did not close the connection within {HANG:?}"),
            );
        }
        if !srv.running() {
            record_failure(
                &format!("rdma-handshake-{i}.bin"),
                &input,
                format!("rdma serve died: {:?}", srv.log()),
            );
            break;
        }
    }
    let served = good_client(&srv, 0x200, Done::default());
    if let Err(e) = &served {
        record_failure(
            "rdma-handshake-after.bin",
            &hello_bytes(0x200),
            format!("a well-formed client was not served after the fuzz cases: {e}"),
        );
    }
    if srv.running() {
        let (_, log) = srv.stop();
        if log.iter().any(|l| l.contains("panicked")) {
            record_failure("rdma-handshake-log.txt", &[], format!("{log:?}"));
        }
    }
    eprintln!(
        "fuzz rdma-handshake: {n} connections, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_no_failures("rdma handshake", n);
}
