//! The aggressor: its command line (with the flags `dmalab run` adds),
//! started and waited for until its load runs, then stopped and its result
//! document read.

use super::spawn::{failure_from, killpg, spawn, tail, Spawned};
use super::RunOptions;
use crate::experiment::{Aggressor, AggressorKind, Experiment};
use crate::plan::PlannedRun;
use crate::record::{AggressorOutcome, Failure};
use dmalab_core::livestats::{Reader as LiveStats, State};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running aggressor.
pub(super) struct RunningAggressor {
    sp: Spawned,
    argv: Vec<String>,
    output: Option<PathBuf>,
    /// Its live-stats page, when its command writes one.
    pub(super) stats: Option<Arc<LiveStats>>,
}

impl RunningAggressor {
    /// Its process id (its process group's too).
    pub(super) fn pid(&self) -> i32 {
        self.sp.pid
    }
}

/// A duration as a `--runtime` value: whole seconds, at least one.
fn secs_arg(d: Duration) -> String {
    format!("{}s", d.as_secs().max(1))
}

/// How a control cycle's aggressor differs from a plain start.
#[derive(Clone, Copy, Debug)]
pub(super) struct ControlArgs {
    /// The aggressor's own command turned into its engine's control
    /// (`control_flags`); false: the aggressor as written (another
    /// aggressor named as control).
    pub(super) twin: bool,
    /// The command rate to pace it at (None: unpaced).
    pub(super) rate_iops: Option<u64>,
}

/// Starts an aggressor (or a control cycle's, with `ctl`) and waits until
/// it runs plus the warm-up.
pub(super) fn start_aggressor(
    exp: &Experiment,
    opts: &RunOptions,
    a: &Aggressor,
    p: &PlannedRun,
    dir: &Path,
    ctl: Option<ControlArgs>,
) -> Result<RunningAggressor, Box<(Failure, AggressorOutcome)>> {
    let live = dir.join("live-stats");
    let output = dir.join("aggressor.json");
    let (argv, live_stats, out) = match aggressor_argv(exp, opts, a, p, &live, &output, ctl) {
        Ok(x) => x,
        Err(why) => {
            return Err(Box::new((
                Failure {
                    reason: format!("aggressor '{}': {why}", a.name),
                    ..Default::default()
                },
                AggressorOutcome::default(),
            )))
        }
    };
    let mut outcome = AggressorOutcome {
        argv: argv.clone(),
        ..Default::default()
    };
    let mut sp = match spawn(&argv, &exp.placement.aggressor, dir, "aggressor") {
        Ok(s) => s,
        Err(e) => {
            return Err(Box::new((
                failure_from(
                    format!("aggressor '{}' could not start: {e}", a.name),
                    None,
                    Path::new(""),
                ),
                outcome,
            )))
        }
    };
    let died = |sp: &mut Spawned, outcome: &mut AggressorOutcome, what: &str| {
        let st = sp.child.try_wait().ok().flatten();
        outcome.exit_status = st.and_then(|s| s.code());
        outcome.stderr_tail = tail(&sp.stderr, 2000);
        failure_from(format!("aggressor '{}' {what}", a.name), st, &sp.stderr)
    };
    let stats = if live_stats {
        match wait_for_load(&mut sp, &live) {
            Ok(ls) => Some(ls),
            Err(what) => {
                let f = died(&mut sp, &mut outcome, &what);
                return Err(Box::new((f, outcome)));
            }
        }
    } else {
        None
    };
    std::thread::sleep(exp.warmup);
    if let Ok(Some(st)) = sp.child.try_wait() {
        let f = died(
            &mut sp,
            &mut outcome,
            &format!("exited during the warm-up ({st})"),
        );
        return Err(Box::new((f, outcome)));
    }
    Ok(RunningAggressor {
        sp,
        argv,
        output: out,
        stats,
    })
}

/// Stops an aggressor (SIGINT, then SIGKILL after 15 s) and collects its
/// result document.
pub(super) fn stop_aggressor(mut ra: RunningAggressor) -> (AggressorOutcome, bool) {
    let early = ra.sp.child.try_wait().ok().flatten();
    let status = match early {
        Some(s) => Some(s),
        None => dmalab_core::process::stop_group(
            &mut ra.sp.child,
            libc::SIGINT,
            Duration::from_secs(15),
        ),
    };
    killpg(ra.sp.pid, libc::SIGKILL);
    let result = ra
        .output
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|d| d.get("result").cloned());
    (
        AggressorOutcome {
            argv: ra.argv,
            exit_status: status.and_then(|s| s.code()),
            result,
            evidence: None,
            stderr_tail: tail(&ra.sp.stderr, 2000),
        },
        early.is_some(),
    )
}

/// The aggressor's command line; whether it writes the live-stats file
/// `live`; where its result document goes (dmalab commands with
/// `--output`). dmalab commands get `--cpus-allowed` (the aggressor CPUs),
/// `--runtime` (longer than any victim) and `--live-stats` where they take
/// them and the experiment does not set them. A control cycle (`ctl`) gets
/// its engine's control flags (a twin) and `--rate-iops` (or `{rate_iops}`
/// replaced in an exec command); what cannot be made is the error.
#[allow(clippy::too_many_arguments)]
fn aggressor_argv(
    exp: &Experiment,
    opts: &RunOptions,
    a: &Aggressor,
    p: &PlannedRun,
    live: &Path,
    output: &Path,
    ctl: Option<ControlArgs>,
) -> Result<(Vec<String>, bool, Option<PathBuf>), String> {
    let rate = ctl.and_then(|c| c.rate_iops);
    match &a.kind {
        AggressorKind::Exec { argv } => {
            let uses = argv.iter().any(|x| x.contains("{live_stats}"));
            if argv.iter().any(|x| x.contains("{rate_iops}")) && rate.is_none() {
                return Err("its command takes {rate_iops}, but there is no measured command rate to pace it at".into());
            }
            let argv = argv
                .iter()
                .map(|x| {
                    let x = x.replace("{live_stats}", &live.display().to_string());
                    match rate {
                        Some(r) => x.replace("{rate_iops}", &r.to_string()),
                        None => x,
                    }
                })
                .collect();
            Ok((argv, uses, None))
        }
        k => {
            let Some(cmd) = k.child() else {
                return Err("runs no dmalab command".into());
            };
            let c = &exp.configurations[p.configuration];
            let mut flags = exp.aggressor_flags(a, c, p.sweep_value.as_deref());
            match ctl {
                Some(ControlArgs { twin: true, .. }) => {
                    flags = crate::experiment::control_flags(&flags, rate)?;
                }
                Some(ControlArgs {
                    twin: false,
                    rate_iops: Some(r),
                }) if cmd.takes(&exp.children, "rate_iops") => {
                    let norm = |k: &str| k.replace('-', "_");
                    flags.retain(|f| !matches!(norm(&f.key).as_str(), "rate" | "rate_iops"));
                    flags.push(crate::experiment::Flag {
                        key: "rate_iops".into(),
                        values: vec![r.max(1).to_string()],
                        switch: false,
                        line: a.line,
                    });
                }
                _ => {}
            }
            let mut argv = vec![opts.exe.display().to_string()];
            argv.extend(cmd.words(&exp.children).iter().map(|s| s.to_string()));
            argv.extend(cmd.argv(&exp.children, &flags)?);
            let has = |k: &str| flags.iter().any(|f| f.key.replace('_', "-") == k);
            if cmd.takes(&exp.children, "cpus-allowed") && !has("cpus-allowed") {
                argv.push("--cpus-allowed".into());
                argv.push(dmalab_core::cpus::format_cpu_list(&exp.placement.aggressor));
            }
            if cmd.takes(&exp.children, "runtime") && !has("runtime") {
                let longest = exp
                    .victims
                    .iter()
                    .map(|v| v.timeout)
                    .max()
                    .unwrap_or_default();
                argv.push("--runtime".into());
                argv.push(secs_arg(exp.warmup + longest + Duration::from_secs(120)));
            }
            let live_stats = cmd.takes(&exp.children, "live-stats");
            if live_stats {
                argv.push("--live-stats".into());
                argv.push(live.display().to_string());
            }
            let out = cmd.takes(&exp.children, "output").then(|| {
                argv.extend([
                    "--output".into(),
                    output.display().to_string(),
                    "--output-format".into(),
                    "json".into(),
                ]);
                output.to_path_buf()
            });
            Ok((argv, live_stats, out))
        }
    }
}

/// Waits until the aggressor's live-stats page says its load started (up
/// to 120 s); on failure, what happened to the aggressor, in words.
fn wait_for_load(sp: &mut Spawned, live: &Path) -> Result<Arc<LiveStats>, String> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = sp.child.try_wait() {
            return Err(format!("exited before it started its load ({st})"));
        }
        if let Ok(Some(ls)) = LiveStats::open(live) {
            if ls.snapshot().is_ok_and(|s| s.state != State::Starting) {
                return Ok(Arc::new(ls));
            }
        }
        if t0.elapsed() > Duration::from_secs(120) {
            killpg(sp.pid, libc::SIGKILL);
            let _ = sp.child.wait();
            return Err("did not start its load within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_is_whole_seconds_and_never_zero() {
        assert_eq!(secs_arg(Duration::from_millis(10)), "1s");
        assert_eq!(secs_arg(Duration::from_millis(125_900)), "125s");
    }
}
