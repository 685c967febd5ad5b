//! Everything that can be checked before the first run: the keys of each
//! dmalab command against its `--help`, the programs on PATH, counters
//! requests, configuration overrides, the sweep flag, and each aggressor's
//! own `--dry-run`.

use super::{at, usage};
use crate::error::RunError;
use crate::experiment::{control_flags, AggressorKind, Control, Experiment, Flag, VictimKind};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Long flags a dmalab subcommand accepts, from its `--help`.
fn help_flags(exe: &Path, words: &[&str]) -> Result<Vec<String>, RunError> {
    let out = Command::new(exe)
        .args(words)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            RunError::Other(format!(
                "cannot run {} {}: {e}",
                exe.display(),
                words.join(" ")
            ))
        })?;
    if !out.status.success() {
        return Err(RunError::Other(format!(
            "`dmalab {} --help` failed ({}); this build of dmalab lacks that command",
            words.join(" "),
            out.status
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let re =
        regex::Regex::new(r"--([a-z0-9][a-z0-9-]*)").map_err(|e| RunError::Other(e.to_string()))?;
    let mut flags: Vec<String> = re.captures_iter(&text).map(|c| c[1].to_string()).collect();
    flags.sort();
    flags.dedup();
    Ok(flags)
}

/// Flags `dmalab run` sets itself on dmalab children.
const RESERVED: [&str; 3] = ["output", "output-format", "live-stats"];

/// What the checks learned: the flags of each dmalab command used.
pub(super) struct Validated {
    /// Flags per subcommand (`load`, `probe latency`, ...).
    help: BTreeMap<String, Vec<String>>,
}

impl Validated {
    /// Whether `dmalab WORDS` has the flag `--KEY` (`_` read as `-`).
    pub(super) fn accepts(&self, words: &[&str], key: &str) -> bool {
        self.help
            .get(&words.join(" "))
            .is_some_and(|f| f.iter().any(|x| *x == key.replace('_', "-")))
    }
}

fn on_path(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(prog).is_file()))
}

/// Checks everything that can be checked before the first run.
pub(super) fn validate(exp: &Experiment, exe: &Path) -> Result<Validated, RunError> {
    let val = Validated {
        help: help_of_commands(exp, exe)?,
    };
    check_aggressors(exp, &val)?;
    check_victims(exp, exe, &val)?;
    check_overrides(exp, &val)?;
    check_sweep(exp, &val)?;
    dry_run_aggressors(exp, exe, &val)?;
    Ok(val)
}

/// The flags of every dmalab command the experiment uses, each read once.
fn help_of_commands(
    exp: &Experiment,
    exe: &Path,
) -> Result<BTreeMap<String, Vec<String>>, RunError> {
    let mut help = BTreeMap::new();
    let mut words_used: Vec<Vec<&str>> = Vec::new();
    for a in &exp.aggressors {
        if let Some(w) = a.kind.subcommand() {
            words_used.push(w);
        }
    }
    for v in &exp.victims {
        if let Some(w) = v.kind.subcommand() {
            words_used.push(w);
        }
    }
    for w in words_used {
        let k = w.join(" ");
        if let std::collections::btree_map::Entry::Vacant(e) = help.entry(k) {
            e.insert(help_flags(exe, &w)?);
        }
    }
    Ok(help)
}

/// A key of a dmalab command's table: a flag the command has, and not one
/// `dmalab run` sets itself.
fn check_flag(
    exp: &Experiment,
    val: &Validated,
    owner: &str,
    words: &[&str],
    f: &Flag,
) -> Result<(), RunError> {
    let long = f.key.replace('_', "-");
    if RESERVED.contains(&long.as_str()) {
        return Err(usage(
            at(exp, f.line),
            format!(
                "{owner}: key '{}': dmalab run sets --{long} itself; remove it",
                f.key
            ),
        ));
    }
    if !val.accepts(words, &f.key) {
        let list = val
            .help
            .get(&words.join(" "))
            .map(|l| l.join(", --"))
            .unwrap_or_default();
        return Err(usage(
            at(exp, f.line),
            format!(
                "{owner}: unknown key '{}': `dmalab {}` has no flag --{long} (it has --{list})",
                f.key,
                words.join(" ")
            ),
        ));
    }
    Ok(())
}

/// The aggressors' keys, and exec aggressors' programs on PATH.
fn check_aggressors(exp: &Experiment, val: &Validated) -> Result<(), RunError> {
    for a in &exp.aggressors {
        if let Some(w) = a.kind.subcommand() {
            for f in &a.flags {
                check_flag(exp, val, &format!("aggressor '{}'", a.name), &w, f)?;
            }
        } else if let AggressorKind::Exec { argv } = &a.kind {
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

/// The victims' keys, programs, counters requests and recipes' programs.
fn check_victims(exp: &Experiment, exe: &Path, val: &Validated) -> Result<(), RunError> {
    for v in &exp.victims {
        if let Some(w) = v.kind.subcommand() {
            for f in &v.flags {
                check_flag(exp, val, &format!("victim '{}'", v.name), &w, f)?;
            }
        }
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
                    .map_err(|e| RunError::Other(format!("cannot run {}: {e}", exe.display())))?;
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

/// Every configuration override is a flag of some aggressor's command.
fn check_overrides(exp: &Experiment, val: &Validated) -> Result<(), RunError> {
    for c in &exp.configurations {
        for f in &c.overrides {
            let ok = exp
                .aggressors
                .iter()
                .any(|a| a.kind.subcommand().is_some_and(|w| val.accepts(&w, &f.key)));
            if !ok {
                return Err(usage(
                    at(exp, f.line),
                    format!(
                        "configuration '{}': key '{}': no aggressor's command has a flag --{}",
                        c.name,
                        f.key,
                        f.key.replace('_', "-")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The sweep's flag is a flag of its aggressor's command.
fn check_sweep(exp: &Experiment, val: &Validated) -> Result<(), RunError> {
    if let Some(s) = &exp.sweep {
        let a = exp.aggressors.iter().find(|a| a.name == s.aggressor);
        if let Some(w) = a.and_then(|a| a.kind.subcommand()) {
            if !val.accepts(&w, &s.flag) {
                return Err(usage(
                    at(exp, s.line),
                    format!(
                        "sweep.flag: `dmalab {}` has no flag --{}",
                        w.join(" "),
                        s.flag.replace('_', "-")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Lets every aggressor that has `--dry-run` check its own values, in
/// every configuration and at every sweep value.
fn dry_run_aggressors(exp: &Experiment, exe: &Path, val: &Validated) -> Result<(), RunError> {
    for a in &exp.aggressors {
        let Some(w) = a.kind.subcommand() else {
            continue;
        };
        if !val.accepts(&w, "dry-run") {
            continue;
        }
        let values: Vec<Option<&str>> = match &exp.sweep {
            Some(s) if s.aggressor == a.name => s.values.iter().map(|v| Some(v.as_str())).collect(),
            _ => vec![None],
        };
        for c in &exp.configurations {
            for sv in &values {
                let flags = exp.aggressor_flags(a, c, *sv, &|f| val.accepts(&w, &f.key));
                let mut tries = vec![(String::new(), flags.clone())];
                if a.control == Some(Control::Twin) {
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
                    let out = Command::new(exe)
                        .args(&w)
                        .args(flags.iter().flat_map(|f| f.args()))
                        .arg("--dry-run")
                        .stdin(Stdio::null())
                        .output()
                        .map_err(|e| {
                            RunError::Other(format!("cannot run {}: {e}", exe.display()))
                        })?;
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

    fn val(words: &str, flags: &[&str]) -> Validated {
        Validated {
            help: BTreeMap::from([(
                words.to_string(),
                flags.iter().map(|f| f.to_string()).collect(),
            )]),
        }
    }

    #[test]
    fn accepts_reads_underscores_as_dashes() {
        let v = val("probe latency", &["cpus-allowed", "runtime"]);
        assert!(v.accepts(&["probe", "latency"], "cpus_allowed"));
        assert!(v.accepts(&["probe", "latency"], "runtime"));
        assert!(!v.accepts(&["probe", "latency"], "bs"));
        assert!(!v.accepts(&["load"], "runtime"), "another command");
    }

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
