//! The aggressor: its command line (with the flags `dmalab run` adds),
//! started and waited for until its load runs, then stopped and its result
//! document read.

use super::spawn::{failure_from, killpg, spawn, tail, Spawned};
use super::RunOptions;
use crate::experiment::{Aggressor, AggressorKind, Experiment};
use crate::plan::PlannedRun;
use crate::record::{AggressorOutcome, Failure, MemberOutcome};
use dmalab_core::livestats::{Reader as LiveStats, State};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running aggressor.
pub(super) struct RunningAggressor {
    /// Its aggressor's name.
    name: String,
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

/// A failed start: why, and the aggressor's side as far as it got.
type StartFailure = Box<(Failure, AggressorOutcome)>;

/// Starts an aggressor (or a control cycle's, with `ctl`) and waits until
/// it runs plus the warm-up.
pub(super) fn start_aggressor(
    exp: &Experiment,
    opts: &RunOptions,
    a: &Aggressor,
    p: &PlannedRun,
    dir: &Path,
    ctl: Option<ControlArgs>,
) -> Result<RunningAggressor, StartFailure> {
    // Pinned where its own cpus_allowed says, when it says: pinned to the
    // experiment's aggressor CPUs instead, a load whose cpus_allowed lies
    // outside them could not place its workers and refused to start.
    let c = &exp.configurations[p.configuration];
    let cpus = exp.aggressor_cpus(a, c, p.sweep_value.as_deref());
    let mut ra = launch(exp, opts, a, p, dir, ctl, "aggressor", &cpus)?;
    std::thread::sleep(exp.warmup);
    match ra.died_in_warmup() {
        Some(f) => Err(f),
        None => Ok(ra),
    }
}

/// One load a group's run starts: a member, or in the group's control
/// cycle what stands in for it.
pub(super) struct MemberStart<'e> {
    /// The aggressor that runs (the member, its twin's source, or the
    /// aggressor named as its control).
    pub(super) run: &'e Aggressor,
    /// The member's name, which its outcome is recorded under.
    pub(super) name: String,
    /// How it differs from a plain start (None: it runs as written).
    pub(super) ctl: Option<ControlArgs>,
}

/// Starts the loads of group `group` (each pinned to its own CPUs, with its
/// own flags and rate), waits until each runs its load, then the warm-up
/// once for all of them. When one cannot start or dies in the warm-up,
/// the others are stopped and the failure names the member.
pub(super) fn start_group(
    exp: &Experiment,
    opts: &RunOptions,
    group: &str,
    starts: &[MemberStart],
    p: &PlannedRun,
    dir: &Path,
) -> Result<Vec<RunningAggressor>, StartFailure> {
    let c = &exp.configurations[p.configuration];
    let mut started: Vec<RunningAggressor> = Vec::new();
    let fail =
        |started: Vec<RunningAggressor>, f: Failure, failed: Option<(String, AggressorOutcome)>| {
            let mut members: Vec<MemberOutcome> =
                stop_members(started).into_iter().map(|(m, _)| m).collect();
            if let Some((name, outcome)) = failed {
                members.push(MemberOutcome { name, outcome });
            }
            Box::new((
                Failure {
                    reason: format!("group '{group}': {}", f.reason),
                    ..f
                },
                AggressorOutcome {
                    members,
                    ..Default::default()
                },
            ))
        };
    for (k, s) in starts.iter().enumerate() {
        let cpus = exp.aggressor_cpus(s.run, c, None);
        match launch(
            exp,
            opts,
            s.run,
            p,
            dir,
            s.ctl,
            &format!("member-{k}"),
            &cpus,
        ) {
            Ok(mut ra) => {
                ra.name = s.name.clone();
                started.push(ra);
            }
            Err(b) => {
                let (f, o) = *b;
                return Err(fail(started, f, Some((s.name.clone(), o))));
            }
        }
    }
    std::thread::sleep(exp.warmup);
    let dead = started
        .iter_mut()
        .find_map(RunningAggressor::died_in_warmup);
    match dead {
        Some(b) => Err(fail(started, b.0, None)),
        None => Ok(started),
    }
}

/// Spawns an aggressor pinned to `cpus`, its files in `dir` under `tag`,
/// and waits until its live-stats page says its load runs (when it keeps
/// one).
#[allow(clippy::too_many_arguments)]
fn launch(
    exp: &Experiment,
    opts: &RunOptions,
    a: &Aggressor,
    p: &PlannedRun,
    dir: &Path,
    ctl: Option<ControlArgs>,
    tag: &str,
    cpus: &[usize],
) -> Result<RunningAggressor, StartFailure> {
    let live = dir.join(format!("{tag}.live-stats"));
    let output = dir.join(format!("{tag}.json"));
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
    let mut sp = match spawn(&argv, cpus, dir, tag) {
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
    let stats = if live_stats {
        match wait_for_load(&mut sp, &live) {
            Ok(ls) => Some(ls),
            Err(what) => {
                let f = died(&mut sp, &mut outcome, &a.name, &what);
                return Err(Box::new((f, outcome)));
            }
        }
    } else {
        None
    };
    Ok(RunningAggressor {
        name: a.name.clone(),
        sp,
        argv,
        output: out,
        stats,
    })
}

/// The failure of an aggressor that ended (`what` it did), with its exit
/// status and stderr in `outcome`.
fn died(sp: &mut Spawned, outcome: &mut AggressorOutcome, name: &str, what: &str) -> Failure {
    let st = sp.child.try_wait().ok().flatten();
    outcome.exit_status = st.and_then(|s| s.code());
    outcome.stderr_tail = tail(&sp.stderr, 2000);
    failure_from(format!("aggressor '{name}' {what}"), st, &sp.stderr)
}

impl RunningAggressor {
    /// The failure when it exited during the warm-up.
    fn died_in_warmup(&mut self) -> Option<StartFailure> {
        let st = self.sp.child.try_wait().ok().flatten()?;
        let mut outcome = AggressorOutcome {
            argv: self.argv.clone(),
            ..Default::default()
        };
        let f = died(
            &mut self.sp,
            &mut outcome,
            &self.name,
            &format!("exited during the warm-up ({st})"),
        );
        Some(Box::new((f, outcome)))
    }

    /// Its side of the run once it ended with `status`.
    fn outcome(self, status: Option<std::process::ExitStatus>) -> AggressorOutcome {
        killpg(self.sp.pid, libc::SIGKILL);
        let result = self
            .output
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|d| d.get("result").cloned());
        AggressorOutcome {
            argv: self.argv,
            exit_status: status.and_then(|s| s.code()),
            result,
            evidence: None,
            stderr_tail: tail(&self.sp.stderr, 2000),
            members: Vec::new(),
        }
    }
}

/// Stops an aggressor (SIGINT, then SIGKILL after 15 s) and collects its
/// result document; true when it had ended before it was stopped.
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
    (ra.outcome(status), early.is_some())
}

/// Stops a group's running members together: SIGINT to all of them, then
/// each one waited for (SIGKILL after 15 s), their result documents
/// collected; with each, true when it had ended before it was stopped.
pub(super) fn stop_members(mut members: Vec<RunningAggressor>) -> Vec<(MemberOutcome, bool)> {
    let early: Vec<Option<std::process::ExitStatus>> = members
        .iter_mut()
        .map(|ra| ra.sp.child.try_wait().ok().flatten())
        .collect();
    for (ra, e) in members.iter().zip(&early) {
        if e.is_none() {
            killpg(ra.sp.pid, libc::SIGINT);
        }
    }
    members
        .into_iter()
        .zip(early)
        .map(|(mut ra, e)| {
            // Signal 0 only waits: the SIGINT went to every member above.
            let status = e.or_else(|| {
                dmalab_core::process::stop_group(&mut ra.sp.child, 0, Duration::from_secs(15))
            });
            let name = ra.name.clone();
            let m = MemberOutcome {
                name,
                outcome: ra.outcome(status),
            };
            (m, e.is_some())
        })
        .collect()
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
            if exp.counters_exact && has("counters") && cmd.takes(&exp.children, "counters-run") {
                // Exact mode: this repetition counts one event group.
                if !has("counters-mode") {
                    argv.extend(["--counters-mode".into(), "exact".into()]);
                }
                argv.push("--counters-run".into());
                argv.push(p.repetition.saturating_sub(1).to_string());
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
