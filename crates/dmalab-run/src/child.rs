//! The dmalab commands an experiment starts as children, each with the
//! config its own library owns (`dmalab_load::child`, `dmalab_probe::child`,
//! `dmalab_page::child`), known here only through the [`ChildCatalog`] the
//! binary builds from them and passes in: this library does not depend on
//! the libraries whose commands it starts.
//!
//! A table's keys are checked against the config when the file is read
//! ([`ChildCommand::check_flag`]), and the config alone writes the child's
//! command line ([`ChildCommand::argv`]): no one learns a child's flags
//! from its `--help`.

use crate::experiment::Flag;
use dmalab_core::child::{long_flag, ChildSpec, Kind};

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

/// The configs of the commands an experiment starts, one per
/// [`ChildCommand`] (`ChildSpec::of::<LoadChildOptions>()`, ...), built by
/// the binary; an [`Experiment`](crate::experiment::Experiment) keeps the
/// one it was read with.
#[derive(Clone, Copy, Debug)]
pub struct ChildCatalog {
    /// `dmalab load`'s config.
    pub load: ChildSpec,
    /// `dmalab probe latency`'s config.
    pub probe_latency: ChildSpec,
    /// `dmalab probe bandwidth`'s config.
    pub probe_bandwidth: ChildSpec,
    /// `dmalab page`'s config.
    pub page: ChildSpec,
}

impl ChildCatalog {
    /// The config of `cmd`.
    pub fn spec(&self, cmd: ChildCommand) -> &ChildSpec {
        match cmd {
            ChildCommand::Load => &self.load,
            ChildCommand::ProbeLatency => &self.probe_latency,
            ChildCommand::ProbeBandwidth => &self.probe_bandwidth,
            ChildCommand::Page => &self.page,
        }
    }
}

impl ChildCommand {
    /// Every command, for checks that walk them all.
    pub const ALL: [ChildCommand; 4] = [
        ChildCommand::Load,
        ChildCommand::ProbeLatency,
        ChildCommand::ProbeBandwidth,
        ChildCommand::Page,
    ];

    /// The subcommand words (`["probe", "latency"]`).
    pub fn words(self, cat: &ChildCatalog) -> &'static [&'static str] {
        cat.spec(self).command
    }

    /// `load`, `probe latency`.
    pub fn name(self, cat: &ChildCatalog) -> String {
        self.words(cat).join(" ")
    }

    /// What a table key (underscores or dashes) takes, if the command has
    /// it as a key.
    pub fn kind_of(self, cat: &ChildCatalog, key: &str) -> Option<Kind> {
        cat.spec(self).kind_of(key)
    }

    /// Whether the command has the flag `--KEY`, as a key or as one the
    /// runner sets itself.
    pub fn takes(self, cat: &ChildCatalog, key: &str) -> bool {
        cat.spec(self).takes(key)
    }

    /// Why a key of this command's table cannot be given, if it cannot:
    /// a flag `dmalab run` sets itself, a key the command does not take,
    /// or a value where a switch belongs (and the other way round).
    pub fn check_flag(self, cat: &ChildCatalog, f: &Flag) -> Result<(), FlagError> {
        let long = long_flag(&f.key);
        let spec = cat.spec(self);
        if spec.runner_sets(&f.key) {
            return Err(FlagError::RunnerSets {
                key: f.key.clone(),
                long,
            });
        }
        let command = self.name(cat);
        match spec.kind_of(&f.key) {
            None => {
                let keys: Vec<&str> = spec.keys.iter().map(|(n, _)| *n).collect();
                Err(FlagError::Unknown {
                    key: f.key.clone(),
                    command,
                    takes: keys.join(", "),
                })
            }
            Some(Kind::Switch) if !f.switch => Err(FlagError::Switch {
                key: f.key.clone(),
                long,
                command,
            }),
            Some(Kind::Values) if f.switch => Err(FlagError::Value {
                key: f.key.clone(),
                long,
                command,
            }),
            Some(_) => Ok(()),
        }
    }

    /// The child's arguments after its subcommand words: the flags read
    /// into the command's config, which writes them out.
    pub fn argv(self, cat: &ChildCatalog, flags: &[Flag]) -> Result<Vec<String>, String> {
        let mut table = serde_json::Map::new();
        for f in flags {
            self.check_flag(cat, f).map_err(|e| e.to_string())?;
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
        cat.spec(self)
            .argv(serde_json::Value::Object(table))
            .map_err(|e| format!("dmalab {}: {e}", self.name(cat)))
    }
}

/// Why a key of an experiment's child table cannot be given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// `dmalab run` sets the flag itself.
    #[error("key '{key}': dmalab run sets {long} itself; remove it")]
    RunnerSets {
        /// The key.
        key: String,
        /// Its flag (`--KEY`).
        long: String,
    },
    /// The command has no such flag.
    #[error("unknown key '{key}' for dmalab {command}; it takes: {takes}")]
    Unknown {
        /// The key.
        key: String,
        /// The command (`load`, `probe latency`, ...).
        command: String,
        /// The keys it takes, comma separated.
        takes: String,
    },
    /// A value where the command's flag is a switch.
    #[error("key '{key}': {long} of dmalab {command} is a switch; write {key} = true (or false)")]
    Switch {
        /// The key.
        key: String,
        /// Its flag (`--KEY`).
        long: String,
        /// The command.
        command: String,
    },
    /// A switch where the command's flag takes a value.
    #[error("key '{key}': {long} of dmalab {command} takes a value; write {key} = \"...\"")]
    Value {
        /// The key.
        key: String,
        /// Its flag (`--KEY`).
        long: String,
        /// The command.
        command: String,
    },
}

#[cfg(test)]
dmalab_core::child_options! {
    /// A stand-in for `dmalab page`'s config in this library's tests: this
    /// library does not depend on `dmalab-page`, not even for its tests
    /// (the binary's `child_args` tests check the real one).
    pub struct PageStandIn for ["page"] {
        /// A value.
        size: Values = "1G",
        /// A switch.
        cold: Switch,
    }
    runner_sets { output: Values = "x.json", runtime: Values = "10s" }
}

/// The binary's catalog for this library's tests: load's and the probes'
/// real configs (dev-dependencies), page's stand-in.
#[cfg(test)]
pub(crate) fn test_catalog() -> ChildCatalog {
    ChildCatalog {
        load: ChildSpec::of::<dmalab_load::child::LoadChildOptions>(),
        probe_latency: ChildSpec::of::<dmalab_probe::child::LatencyChildOptions>(),
        probe_bandwidth: ChildSpec::of::<dmalab_probe::child::BandwidthChildOptions>(),
        page: ChildSpec::of::<PageStandIn>(),
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
        let c = test_catalog();
        let argv = ChildCommand::Load
            .argv(
                &c,
                &[
                    flag("iodepth", &["32"]),
                    flag("keep", &[]),
                    flag("max-blocks", &["8", "16"]),
                ],
            )
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
                .argv(&c, &[flag("size", &["64M"])])
                .unwrap(),
            ["--size", "64M"]
        );
    }

    #[test]
    fn keys_the_command_lacks_or_the_runner_sets_are_refused() {
        let c = test_catalog();
        let e = ChildCommand::Load
            .check_flag(&c, &flag("iodeph", &["3"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unknown key 'iodeph' for dmalab load; it takes: target, engine,"),
            "{e}"
        );
        let e = ChildCommand::ProbeLatency
            .check_flag(&c, &flag("live_stats", &["x"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown key 'live_stats' for dmalab probe latency"),
            "{e}"
        );
        let e = ChildCommand::Load
            .check_flag(&c, &flag("live-stats", &["x"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "key 'live-stats': dmalab run sets --live-stats itself; remove it"
        );
        let e = ChildCommand::Load
            .check_flag(&c, &flag("keep", &["yes"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "key 'keep': --keep of dmalab load is a switch; write keep = true (or false)"
        );
        let e = ChildCommand::ProbeLatency
            .check_flag(&c, &flag("size", &[]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "key 'size': --size of dmalab probe latency takes a value; write size = \"...\""
        );
        assert!(ChildCommand::Load
            .argv(&c, &[flag("iodeph", &["3"])])
            .is_err());
    }

    #[test]
    fn runner_flags_are_known_per_command() {
        let c = test_catalog();
        assert!(ChildCommand::Load.takes(&c, "live-stats"));
        assert!(!ChildCommand::ProbeBandwidth.takes(&c, "live_stats"));
        assert!(ChildCommand::ProbeBandwidth.takes(&c, "cpus_allowed"));
        assert!(ChildCommand::Load.takes(&c, "dry_run"));
        assert!(!ChildCommand::ProbeBandwidth.takes(&c, "dry_run"));
    }
}
