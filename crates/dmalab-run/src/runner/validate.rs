//! Everything that can be checked before the first run beyond the file
//! itself (whose keys, overrides and sweep flag [`crate::experiment`]
//! checked against each command's config): the programs on PATH, counters
//! requests, and each aggressor's own `--dry-run` of its values.

use super::{at, usage};
use crate::error::RunError;
use crate::experiment::{control_flags, AggressorKind, Control, Experiment, VictimKind};
use std::path::Path;
use std::process::{Command, Stdio};

fn on_path(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).exists();
    }
    dmalab_core::sys::find_program(prog).is_some()
}

/// Checks everything that can be checked before the first run.
pub(super) fn validate(exp: &Experiment, exe: &Path) -> Result<(), RunError> {
    check_aggressors(exp)?;
    check_victims(exp, exe)?;
    check_exact_counters(exp, exe)?;
    dry_run_aggressors(exp, exe)
}

/// `counters_mode = "exact"`: every `counters` request has no more event
/// groups than the experiment has repetitions (asked of `dmalab stat`,
/// which counts groups as every command does), and runs in a command
/// that rotates groups (`load`, an exec victim under `stat`).
fn check_exact_counters(exp: &Experiment, exe: &Path) -> Result<(), RunError> {
    if !exp.counters_exact {
        return Ok(());
    }
    let counters_of = |flags: &[crate::experiment::Flag]| {
        flags
            .iter()
            .find(|f| f.key.replace('-', "_") == "counters")
            .and_then(|f| f.values.first().cloned())
    };
    // (who, line, request)
    let mut asked: Vec<(String, usize, String)> = Vec::new();
    for a in &exp.aggressors {
        let Some(cmd) = a.kind.child() else {
            continue;
        };
        for c in &exp.configurations {
            let Some(req) = counters_of(&exp.aggressor_flags(a, c, None)) else {
                continue;
            };
            if !cmd.takes(&exp.children, "counters-run") {
                return Err(usage(
                    at(exp, a.line),
                    format!("experiment.counters_mode: exact: aggressor '{}' runs `dmalab {}`, which does not rotate event groups across repetitions; count with a load aggressor or an exec victim, or leave counters_mode multiplexed", a.name, cmd.name(&exp.children)),
                ));
            }
            asked.push((format!("aggressor '{}'", a.name), a.line, req));
        }
    }
    for v in &exp.victims {
        match &v.kind {
            VictimKind::Exec {
                counters: Some(c), ..
            } => asked.push((format!("victim '{}'", v.name), v.line, c.clone())),
            k => {
                if let (Some(cmd), Some(_)) = (k.child(), counters_of(&v.flags)) {
                    return Err(usage(
                        at(exp, v.line),
                        format!("experiment.counters_mode: exact: victim '{}' runs `dmalab {}`, which does not rotate event groups across repetitions; run it as an exec victim (command = \"exec\", counters = ...) or leave counters_mode multiplexed", v.name, cmd.name(&exp.children)),
                    ));
                }
            }
        }
    }
    asked.dedup();
    for (who, line, req) in asked {
        let reps = exp.repetitions.to_string();
        let out = Command::new(exe)
            .args(["stat", "--counters", &req, "--counters-mode", "exact"])
            .args(["-r", &reps, "--quiet", "--", "true"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| RunError::spawn(exe, e))?;
        if !out.status.success() {
            return Err(usage(
                at(exp, line),
                format!(
                    "experiment.counters_mode: exact with {reps} repetitions: {who}: {}",
                    String::from_utf8_lossy(&out.stderr)
                        .trim()
                        .trim_start_matches("dmalab: error: ")
                ),
            ));
        }
    }
    Ok(())
}

/// Exec aggressors' programs on PATH.
fn check_aggressors(exp: &Experiment) -> Result<(), RunError> {
    for a in &exp.aggressors {
        if let AggressorKind::Exec { argv } = &a.kind {
            if !on_path(&argv[0]) {
                return Err(usage(
                    at(exp, a.line),
                    format!(
                        "aggressor '{}': program '{}' not found on PATH",
                        a.name, argv[0]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The victims' programs, counters requests and recipes' programs.
fn check_victims(exp: &Experiment, exe: &Path) -> Result<(), RunError> {
    for v in &exp.victims {
        match &v.kind {
            VictimKind::Exec { argv, .. } if !on_path(&argv[0]) => {
                return Err(usage(
                    at(exp, v.line),
                    format!(
                        "victim '{}': program '{}' not found on PATH",
                        v.name, argv[0]
                    ),
                ));
            }
            VictimKind::Exec {
                counters: Some(c), ..
            } => {
                // The request is checked once, by the stat that will run it.
                let out = Command::new(exe)
                    .args(["stat", "--counters", c, "--quiet", "--", "true"])
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| RunError::spawn(exe, e))?;
                if !out.status.success() {
                    return Err(usage(
                        at(exp, v.line),
                        format!(
                            "victim '{}': counters: {}",
                            v.name,
                            String::from_utf8_lossy(&out.stderr)
                                .trim()
                                .trim_start_matches("dmalab: error: ")
                        ),
                    ));
                }
            }
            VictimKind::Redis(_) => {
                for prog in ["redis-server", "redis-benchmark"] {
                    if !on_path(prog) {
                        return Err(usage(
                            at(exp, v.line),
                            format!("victim '{}': the redis recipe needs {prog}, which is not installed; install it with `apt-get install redis-server redis-tools` (Debian/Ubuntu)", v.name),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Lets every aggressor that has `--dry-run` check its own values, in
/// every configuration and at every sweep value.
fn dry_run_aggressors(exp: &Experiment, exe: &Path) -> Result<(), RunError> {
    for (i, a) in exp.aggressors.iter().enumerate() {
        // Its twin runs as its own control, or as its stand-in in a
        // group's control.
        let twinned = a.control == Some(Control::Twin)
            || exp.aggressors.iter().any(|g| match &g.control {
                Some(Control::Group(cs)) => g
                    .members()
                    .iter()
                    .zip(cs)
                    .any(|(&m, c)| m == i && *c == Control::Twin),
                _ => false,
            });
        let Some(cmd) = a.kind.child() else {
            continue;
        };
        if !cmd.takes(&exp.children, "dry_run") {
            continue;
        }
        let w = cmd.words(&exp.children);
        let values: Vec<Option<&str>> = match &exp.sweep {
            Some(s) if s.aggressor == a.name => s.values.iter().map(|v| Some(v.as_str())).collect(),
            _ => vec![None],
        };
        for c in &exp.configurations {
            for sv in &values {
                let flags = exp.aggressor_flags(a, c, *sv);
                let mut tries = vec![(String::new(), flags.clone())];
                if twinned {
                    // The twin as a repetition would start it, at a rate
                    // standing in for the measured one.
                    let twin = control_flags(&flags, Some(1000)).map_err(|why| {
                        usage(
                            at(exp, a.line),
                            format!(
                                "aggressor '{}' in configuration '{}': control = \"auto\": {why}",
                                a.name, c.name
                            ),
                        )
                    })?;
                    tries.push((" (its control twin)".to_string(), twin));
                }
                for (what, flags) in tries {
                    let argv = cmd.argv(&exp.children, &flags).map_err(|why| {
                        usage(
                            at(exp, a.line),
                            format!(
                                "aggressor '{}'{what} in configuration '{}': {why}",
                                a.name, c.name
                            ),
                        )
                    })?;
                    let out = Command::new(exe)
                        .args(w)
                        .args(&argv)
                        .arg("--dry-run")
                        .stdin(Stdio::null())
                        .output()
                        .map_err(|e| RunError::spawn(exe, e))?;
                    if !out.status.success() {
                        let err = String::from_utf8_lossy(&out.stderr);
                        let last = refusal(&err);
                        return Err(usage(
                            at(exp, a.line),
                            format!("aggressor '{}'{what} in configuration '{}': `dmalab {} --dry-run` refused it: {last}", a.name, c.name, w.join(" ")),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Why a child refused, from its stderr: its error line (dmalab's own
/// `dmalab: error: ...`, or clap's `error: ...` above its usage hint)
/// without the prefix, else its last line.
fn refusal(stderr: &str) -> &str {
    let lines = || {
        stderr
            .lines()
            .rev()
            .map(str::trim)
            .filter(|l| !l.is_empty())
    };
    lines()
        .find_map(|l| {
            l.strip_prefix("dmalab: error: ")
                .or_else(|| l.strip_prefix("error: "))
        })
        .or_else(|| lines().next())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a value clap refused (`workers = "zz"`) was reported as
    /// "refused it: For more information, try '--help'.", the last line
    /// of clap's message, instead of clap's error line.
    #[test]
    fn dry_run_refusal_is_the_error_line_not_clap_help_hint() {
        let clap = "error: invalid value 'zz' for '--workers <N>': invalid digit found in string\n\nFor more information, try '--help'.\n";
        assert_eq!(
            refusal(clap),
            "invalid value 'zz' for '--workers <N>': invalid digit found in string"
        );
        assert_eq!(
            refusal("dmalab: warning: x\ndmalab: error: --bs: must be a power of two\n"),
            "--bs: must be a power of two"
        );
        assert_eq!(refusal("something odd\n\n"), "something odd");
        assert_eq!(refusal(""), "");
    }

    #[test]
    fn on_path_finds_programs_and_paths() {
        assert!(on_path("sh"));
        assert!(on_path("/bin/sh"));
        assert!(!on_path("dmalab-no-such-program"));
        assert!(!on_path("/nonexistent/sh"));
    }
}
