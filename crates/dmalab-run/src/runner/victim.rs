//! The victim: run once per run, timed (the evidence window open around
//! it), its figure read from its result document, its stdout or its wall
//! time.

use super::evidence::Window;
use super::spawn::{failure_from, spawn, tail, wait_timeout_usage};
use super::RunOptions;
use crate::experiment::{Experiment, Victim, VictimKind};
use crate::record::Failure;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

/// The victim's figure, its result, and its failure.
pub(super) struct VictimOutcome {
    pub(super) value: Option<f64>,
    pub(super) result: Option<serde_json::Value>,
    pub(super) failure: Option<Failure>,
    pub(super) argv: Vec<String>,
}

/// A failed victim: no figure, no result.
pub(super) fn fail(
    reason: String,
    st: Option<ExitStatus>,
    stderr: &Path,
    argv: Vec<String>,
) -> VictimOutcome {
    VictimOutcome {
        value: None,
        result: None,
        failure: Some(failure_from(reason, st, stderr)),
        argv,
    }
}

/// A figure (or the reason there is none) with the result it came from.
pub(super) fn outcome(
    found: Result<f64, String>,
    result: Option<serde_json::Value>,
    argv: Vec<String>,
) -> VictimOutcome {
    match found {
        Ok(x) => VictimOutcome {
            value: Some(x),
            result,
            failure: None,
            argv,
        },
        Err(m) => VictimOutcome {
            value: None,
            result,
            failure: Some(Failure {
                reason: m,
                ..Default::default()
            }),
            argv,
        },
    }
}

/// Where a victim's processes run: its CPUs and the run's directory.
pub(super) struct Timed<'a> {
    pub(super) v: &'a Victim,
    pub(super) cpus: &'a [usize],
    pub(super) dir: &'a Path,
    /// Exact counters mode: the run of the group rotation (the 0-based
    /// repetition).
    pub(super) exact_run: Option<u32>,
}

/// The files a victim process wrote.
pub(super) struct Outputs {
    pub(super) stdout: PathBuf,
    pub(super) stderr: PathBuf,
}

impl Timed<'_> {
    /// Runs `argv` pinned, with the evidence window open around it, up to
    /// the victim's timeout; a failure unless it exits 0.
    pub(super) fn run(
        &self,
        argv: &[String],
        w: &mut Window,
        tag: &str,
    ) -> Result<Outputs, Box<VictimOutcome>> {
        let v = self.v;
        w.start();
        let sp = match spawn(argv, self.cpus, self.dir, tag) {
            Ok(s) => s,
            Err(e) => {
                w.end();
                return Err(Box::new(fail(
                    format!("victim '{}' could not start: {e}", v.name),
                    None,
                    Path::new(""),
                    argv.to_vec(),
                )));
            }
        };
        let (stdout, stderr) = (sp.stdout.clone(), sp.stderr.clone());
        let (st, end, timed_out, usage) = wait_timeout_usage(sp, v.timeout);
        w.end_at(end);
        w.usage = usage;
        if timed_out {
            return Err(Box::new(fail(
                format!(
                    "victim '{}' timed out after {:?} and was killed",
                    v.name, v.timeout
                ),
                st,
                &stderr,
                argv.to_vec(),
            )));
        }
        match st {
            Some(s) if s.success() => Ok(Outputs { stdout, stderr }),
            Some(s) => Err(Box::new(fail(
                format!("victim '{}' failed ({s})", v.name),
                Some(s),
                &stderr,
                argv.to_vec(),
            ))),
            None => Err(Box::new(fail(
                format!("victim '{}': lost its exit status", v.name),
                None,
                &stderr,
                argv.to_vec(),
            ))),
        }
    }
}

/// Runs the victim once, inside the evidence window `w`.
pub(super) fn run_victim(
    exp: &Experiment,
    opts: &RunOptions,
    v: &Victim,
    dir: &Path,
    repetition: u32,
    w: &mut Window,
) -> VictimOutcome {
    let cpus = v
        .cpus
        .clone()
        .unwrap_or_else(|| exp.placement.victims.clone());
    let t = Timed {
        v,
        cpus: &cpus,
        dir,
        exact_run: exp.counters_exact.then(|| repetition.saturating_sub(1)),
    };
    match &v.kind {
        VictimKind::Idle { duration } => idle(*duration, w),
        VictimKind::Exec {
            argv,
            regex,
            counters,
        } => exec_victim(opts, &t, argv, regex.as_ref(), counters.as_deref(), w),
        VictimKind::Redis(r) => super::redis::redis_victim(&t, r, w),
        k => dmalab_victim(exp, opts, &t, k, w),
    }
}

/// The idle victim: waits, so the aggressor's figures alone are measured.
fn idle(duration: Duration, w: &mut Window) -> VictimOutcome {
    w.start();
    std::thread::sleep(duration);
    w.end();
    VictimOutcome {
        value: Some(w.wall_ns() as f64 / 1e9),
        result: Some(serde_json::json!({ "wall_s": w.wall_ns() as f64 / 1e9 })),
        failure: None,
        argv: vec![],
    }
}

/// Any program: its wall time, or the number its `regex` finds in its
/// stdout; its counts when it has `counters`.
fn exec_victim(
    opts: &RunOptions,
    t: &Timed,
    argv: &[String],
    regex: Option<&Regex>,
    counters: Option<&str>,
    w: &mut Window,
) -> VictimOutcome {
    let (v, dir) = (t.v, t.dir);
    let s = match t.run(
        &counted_argv(opts, argv, counters, t.exact_run, dir),
        w,
        "victim",
    ) {
        Err(o) => return *o,
        Ok(s) => s,
    };
    let wall_s = w.wall_ns() as f64 / 1e9;
    let out = std::fs::read_to_string(&s.stdout).unwrap_or_default();
    let mut result = serde_json::json!({ "wall_s": wall_s });
    if counters.is_some() {
        if let Some(c) = std::fs::read(dir.join("victim-counters.json"))
            .ok()
            .and_then(|b| crate::views::counters::of_stat_document(&b))
        {
            result["counters"] = c;
        }
    }
    let value = match regex {
        None => wall_s,
        Some(re) => match regex_value(re, &out) {
            Ok(x) => {
                result["regex_value"] = serde_json::json!(x);
                x
            }
            Err(why) => {
                return VictimOutcome {
                    value: None,
                    result: Some(result),
                    failure: Some(Failure {
                        reason: format!(
                            "victim '{}': regex {} {why} in its stdout",
                            v.name,
                            re.as_str()
                        ),
                        exit_status: Some(0),
                        signal: None,
                        stderr_tail: tail(&s.stdout, 2000),
                    }),
                    argv: argv.to_vec(),
                };
            }
        },
    };
    VictimOutcome {
        value: Some(value),
        result: Some(result),
        failure: None,
        argv: argv.to_vec(),
    }
}

/// The number `re` finds in `out`: its first group, or the whole match
/// without groups. Otherwise why not: "did not match" or "matched no
/// number".
fn regex_value(re: &Regex, out: &str) -> Result<f64, &'static str> {
    let got = re
        .captures(out)
        .and_then(|c| c.get(1).or_else(|| c.get(0)))
        .map(|m| m.as_str().trim().to_string());
    match got.as_deref().map(str::parse::<f64>) {
        Some(Ok(x)) => Ok(x),
        Some(Err(_)) => Err("matched no number"),
        None => Err("did not match"),
    }
}

/// A dmalab command: its figure is `metric` (or a fallback of its kind)
/// in the result document it writes.
fn dmalab_victim(
    exp: &Experiment,
    opts: &RunOptions,
    t: &Timed,
    k: &VictimKind,
    w: &mut Window,
) -> VictimOutcome {
    let (v, dir) = (t.v, t.dir);
    let Some(cmd) = k.child() else {
        return fail(
            format!("victim '{}': runs no dmalab command", v.name),
            None,
            Path::new(""),
            vec![],
        );
    };
    let out = dir.join("victim.json");
    let mut argv = vec![opts.exe.display().to_string()];
    argv.extend(cmd.words(&exp.children).iter().map(|s| s.to_string()));
    match cmd.argv(&exp.children, &v.flags) {
        Ok(a) => argv.extend(a),
        Err(why) => {
            return fail(
                format!("victim '{}': {why}", v.name),
                None,
                Path::new(""),
                argv,
            )
        }
    }
    let has = |k: &str| v.flags.iter().any(|f| f.key.replace('_', "-") == k);
    if cmd.takes(&exp.children, "cpus-allowed") && !has("cpus-allowed") {
        argv.push("--cpus-allowed".into());
        argv.push(dmalab_core::cpus::format_cpu_list(t.cpus));
    }
    argv.extend([
        "--output".into(),
        out.display().to_string(),
        "--output-format".into(),
        "json".into(),
    ]);
    let s = match t.run(&argv, w, "victim") {
        Err(o) => return *o,
        Ok(s) => s,
    };
    let bytes = std::fs::read(&out).unwrap_or_default();
    let doc = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
    let Some(doc) = doc else {
        return fail(
            format!("victim '{}' exited 0 but wrote no result document", v.name),
            None,
            &s.stderr,
            argv,
        );
    };
    let result = doc.get("result").cloned();
    // The kind's own figure through its typed view; a `metric = "/..."`
    // the file names is a pointer the user chose into the document.
    let found = match crate::views::default_figure(&v.kind, &bytes) {
        Some(f) if v.metric_is_default => f,
        _ => lookup_number(&doc, &v.metric),
    };
    outcome(found, result, argv)
}

/// An exec victim's command line, under `dmalab stat` when it has
/// `counters`: stat holds it until its counters are open, passes its
/// stdout and exit status through, and writes the counts beside it.
fn counted_argv(
    opts: &RunOptions,
    argv: &[String],
    counters: Option<&str>,
    exact_run: Option<u32>,
    dir: &Path,
) -> Vec<String> {
    let Some(c) = counters else {
        return argv.to_vec();
    };
    let mut v = vec![
        opts.exe.display().to_string(),
        "stat".into(),
        "--counters".into(),
        c.to_string(),
    ];
    if let Some(r) = exact_run {
        v.extend([
            "--counters-mode".into(),
            "exact".into(),
            "--counters-run".into(),
            r.to_string(),
        ]);
    }
    v.extend([
        "--quiet".into(),
        "--output".into(),
        dir.join("victim-counters.json").display().to_string(),
        "--".into(),
    ]);
    v.extend(argv.iter().cloned());
    v
}

/// The number at a JSON pointer of a result document (a number, or a
/// string holding one); otherwise what is there instead, to help fix the
/// pointer.
pub(super) fn lookup_number(doc: &serde_json::Value, pointer: &str) -> Result<f64, String> {
    match doc.pointer(pointer) {
        Some(serde_json::Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| format!("{pointer} is not a finite number")),
        Some(serde_json::Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| format!("{pointer} is '{s}', not a number")),
        Some(other) => Err(format!("{pointer} is not a number but {}", short(other))),
        None => {
            // Say what is there, to help fix the pointer.
            let mut parent = pointer.rsplit_once('/').map_or("", |p| p.0).to_string();
            loop {
                if let Some(serde_json::Value::Object(m)) = doc.pointer(&parent) {
                    let keys: Vec<&str> = m.keys().map(|k| k.as_str()).take(30).collect();
                    return Err(format!("metric {pointer} is not in the result document (keys at '{parent}': {}); set metric = \"...\" in the victim", keys.join(", ")));
                }
                match parent.rsplit_once('/') {
                    Some((p, _)) => parent = p.to_string(),
                    None => return Err(format!("metric {pointer} is not in the result document")),
                }
            }
        }
    }
}

/// A value's JSON text, cut to 80 bytes (at a character boundary) with an
/// ellipsis.
fn short(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        let end = (0..=80).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        format!("{}…", &s[..end])
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_lookup_reads_numbers_and_explains_misses() {
        let doc = serde_json::json!({"result": {"per_access": {"mean_ns": 81.5, "samples": "12"}, "threads": []}});
        assert_eq!(lookup_number(&doc, "/result/per_access/mean_ns"), Ok(81.5));
        assert_eq!(lookup_number(&doc, "/result/per_access/samples"), Ok(12.0));
        let e = lookup_number(&doc, "/result/per_access/p50_ns").unwrap_err();
        assert!(
            e.contains("keys at '/result/per_access': mean_ns, samples"),
            "{e}"
        );
        let e = lookup_number(&doc, "/result/nothing/here").unwrap_err();
        assert!(e.contains("keys at '/result': per_access, threads"), "{e}");
        assert!(lookup_number(&doc, "/result/threads")
            .unwrap_err()
            .contains("not a number"));
    }

    /// Regression: the summary of a non-number cut the JSON text at byte
    /// 80, which panicked when a character straddled it.
    #[test]
    fn short_does_not_split_a_character() {
        let v = serde_json::json!([format!("{}é", "x".repeat(77))]);
        assert_eq!(v.to_string().len(), 83);
        let s = short(&v);
        assert_eq!(s, format!("[\"{}…", "x".repeat(77)));
        let doc = serde_json::json!({"result": {"name": v}});
        assert!(lookup_number(&doc, "/result/name")
            .unwrap_err()
            .contains("not a number"));
    }

    #[test]
    fn regex_value_takes_the_first_group_or_the_match() {
        let re = Regex::new(r"took ([0-9.]+) s").unwrap();
        assert_eq!(regex_value(&re, "x\ntook 1.25 s\n"), Ok(1.25));
        assert_eq!(regex_value(&re, "nothing"), Err("did not match"));
        let re = Regex::new(r"[0-9]+ ms").unwrap();
        assert_eq!(regex_value(&re, "12 ms"), Err("matched no number"));
        let re = Regex::new(r"[0-9]+").unwrap();
        assert_eq!(regex_value(&re, "n=42"), Ok(42.0));
    }

    #[test]
    fn counters_put_the_victim_under_dmalab_stat() {
        let opts = RunOptions {
            require_quiet: false,
            exe: PathBuf::from("/bin/dmalab"),
            results: PathBuf::from("r.jsonl"),
            restart: false,
            dry_run: false,
            configuration: None,
        };
        let argv = vec!["sleep".to_string(), "1".to_string()];
        assert_eq!(
            counted_argv(&opts, &argv, None, None, Path::new("/d")),
            argv
        );
        assert_eq!(
            counted_argv(&opts, &argv, Some("dram"), None, Path::new("/d")),
            [
                "/bin/dmalab",
                "stat",
                "--counters",
                "dram",
                "--quiet",
                "--output",
                "/d/victim-counters.json",
                "--",
                "sleep",
                "1"
            ]
        );
    }
}
