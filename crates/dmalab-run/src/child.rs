//! The dmalab commands an experiment starts as children, each with the
//! config its own library owns (`dmalab_load::child`, `dmalab_probe::child`,
//! `dmalab_page::child`).
//!
//! A table's keys are checked against the config when the file is read
//! ([`ChildCommand::check_flag`]), and the config alone writes the child's
//! command line ([`ChildCommand::argv`]): no one learns a child's flags
//! from its `--help`.

use crate::experiment::Flag;
use dmalab_core::child::{long_flag, ChildOptions, Kind};
use dmalab_load::child::LoadChildOptions;
use dmalab_page::child::PageChildOptions;
use dmalab_probe::child::{BandwidthChildOptions, LatencyChildOptions};

/// A dmalab command an aggressor or victim runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildCommand {
    /// `dmalab load`.
    Load,
    /// `dmalab probe latency`.
    ProbeLatency,
    /// `dmalab probe bandwidth`.
    ProbeBandwidth,
    /// `dmalab page`.
    Page,
}

/// The facts of one config type, as plain values.
struct Facts {
    words: &'static [&'static str],
    keys: &'static [(&'static str, Kind)],
    runner_sets: &'static [(&'static str, Kind)],
    argv: fn(serde_json::Value) -> Result<Vec<String>, String>,
}

fn facts_of<C: ChildOptions>() -> Facts {
    Facts {
        words: C::COMMAND,
        keys: C::KEYS,
        runner_sets: C::RUNNER_SETS,
        argv: |table| {
            serde_json::from_value::<C>(table)
                .map(|c| c.to_argv())
                .map_err(|e| e.to_string())
        },
    }
}

impl ChildCommand {
    fn facts(self) -> Facts {
        match self {
            ChildCommand::Load => facts_of::<LoadChildOptions>(),
            ChildCommand::ProbeLatency => facts_of::<LatencyChildOptions>(),
            ChildCommand::ProbeBandwidth => facts_of::<BandwidthChildOptions>(),
            ChildCommand::Page => facts_of::<PageChildOptions>(),
        }
    }

    /// The subcommand words (`["probe", "latency"]`).
    pub fn words(self) -> &'static [&'static str] {
        self.facts().words
    }

    /// `load`, `probe latency`.
    pub fn name(self) -> String {
        self.words().join(" ")
    }

    /// What a table key (underscores or dashes) takes, if the command has
    /// it as a key.
    pub fn kind_of(self, key: &str) -> Option<Kind> {
        let k = key.replace('-', "_");
        self.facts()
            .keys
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, kind)| *kind)
    }

    /// Whether the command has the flag `--KEY`, as a key or as one the
    /// runner sets itself.
    pub fn takes(self, key: &str) -> bool {
        let k = key.replace('-', "_");
        self.kind_of(&k).is_some() || self.facts().runner_sets.iter().any(|(n, _)| *n == k)
    }

    /// Why a key of this command's table cannot be given, if it cannot:
    /// a flag `dmalab run` sets itself, a key the command does not take,
    /// or a value where a switch belongs (and the other way round).
    pub fn check_flag(self, f: &Flag) -> Result<(), String> {
        let long = long_flag(&f.key);
        let facts = self.facts();
        let k = f.key.replace('-', "_");
        if facts.runner_sets.iter().any(|(n, _)| *n == k) {
            return Err(format!(
                "key '{}': dmalab run sets {long} itself; remove it",
                f.key
            ));
        }
        match self.kind_of(&k) {
            None => {
                let keys: Vec<&str> = facts.keys.iter().map(|(n, _)| *n).collect();
                Err(format!(
                    "unknown key '{}' for dmalab {}; it takes: {}",
                    f.key,
                    self.name(),
                    keys.join(", ")
                ))
            }
            Some(Kind::Switch) if !f.switch => Err(format!(
                "key '{}': {long} of dmalab {} is a switch; write {} = true (or false)",
                f.key,
                self.name(),
                f.key
            )),
            Some(Kind::Values) if f.switch => Err(format!(
                "key '{}': {long} of dmalab {} takes a value; write {} = \"...\"",
                f.key,
                self.name(),
                f.key
            )),
            Some(_) => Ok(()),
        }
    }

    /// The child's arguments after its subcommand words: the flags read
    /// into the command's config, which writes them out.
    pub fn argv(self, flags: &[Flag]) -> Result<Vec<String>, String> {
        let mut table = serde_json::Map::new();
        for f in flags {
            self.check_flag(f)?;
            let v = if f.switch {
                serde_json::Value::Bool(true)
            } else {
                serde_json::Value::Array(
                    f.values
                        .iter()
                        .map(|s| serde_json::Value::String(s.clone()))
                        .collect(),
                )
            };
            table.insert(f.key.replace('-', "_"), v);
        }
        (self.facts().argv)(serde_json::Value::Object(table))
            .map_err(|e| format!("dmalab {}: {e}", self.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(key: &str, values: &[&str]) -> Flag {
        Flag {
            key: key.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
            switch: values.is_empty(),
            line: 1,
        }
    }

    #[test]
    fn argv_comes_from_the_config_in_its_order() {
        let argv = ChildCommand::Load
            .argv(&[
                flag("iodepth", &["32"]),
                flag("keep", &[]),
                flag("max-blocks", &["8", "16"]),
            ])
            .unwrap();
        assert_eq!(
            argv,
            [
                "--keep",
                "--max-blocks",
                "8",
                "--max-blocks",
                "16",
                "--iodepth",
                "32"
            ]
        );
        assert_eq!(
            ChildCommand::ProbeLatency
                .argv(&[flag("size", &["64M"])])
                .unwrap(),
            ["--size", "64M"]
        );
    }

    #[test]
    fn keys_the_command_lacks_or_the_runner_sets_are_refused() {
        let e = ChildCommand::Load
            .check_flag(&flag("iodeph", &["3"]))
            .unwrap_err();
        assert!(
            e.starts_with("unknown key 'iodeph' for dmalab load; it takes: target, engine,"),
            "{e}"
        );
        let e = ChildCommand::ProbeLatency
            .check_flag(&flag("live_stats", &["x"]))
            .unwrap_err();
        assert!(
            e.contains("unknown key 'live_stats' for dmalab probe latency"),
            "{e}"
        );
        let e = ChildCommand::Load
            .check_flag(&flag("live-stats", &["x"]))
            .unwrap_err();
        assert_eq!(
            e,
            "key 'live-stats': dmalab run sets --live-stats itself; remove it"
        );
        let e = ChildCommand::Page
            .check_flag(&flag("cold", &["yes"]))
            .unwrap_err();
        assert!(e.contains("--cold of dmalab page is a switch"), "{e}");
        let e = ChildCommand::Page
            .check_flag(&flag("map", &[]))
            .unwrap_err();
        assert!(e.contains("--map of dmalab page takes a value"), "{e}");
        assert!(ChildCommand::Load.argv(&[flag("iodeph", &["3"])]).is_err());
    }

    #[test]
    fn runner_flags_are_known_per_command() {
        assert!(ChildCommand::Load.takes("live-stats"));
        assert!(!ChildCommand::ProbeBandwidth.takes("live_stats"));
        assert!(ChildCommand::ProbeBandwidth.takes("cpus_allowed"));
        assert!(ChildCommand::Page.takes("runtime"));
        assert!(!ChildCommand::Page.takes("cpus_allowed"));
        assert!(ChildCommand::Load.takes("dry_run"));
        assert!(!ChildCommand::ProbeBandwidth.takes("dry_run"));
    }
}
