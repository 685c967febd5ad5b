//! The options of a dmalab command started as a child of another (an
//! experiment's aggressor or victim), as a serde config its own library
//! owns.
//!
//! ripgrep turns raw flags into one resolved value once; the same holds
//! across a process boundary here: an experiment table is read into the
//! child's config (every key checked against the fields it has) and the
//! config alone writes the child's command line ([`ChildOptions::to_argv`]).
//! No one learns a child's flags from its `--help`.
//!
//! A config is declared with [`child_options!`]: one line per flag, its
//! kind and a value the child's parser accepts (the binary's tests feed
//! every config's argv to its clap definition, so the two cannot drift).
//! Values stay text: the child parses them as it parses its own flags, and
//! `dmalab run` lets it check them with `--dry-run` before the first run.

use serde::{Deserialize, Serialize};

/// What a key of a config takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value, or a list of them (the flag given once per value).
    Values,
    /// A switch: `true` gives the bare flag, `false` leaves it out.
    Switch,
}

/// A flag's value(s) as an experiment file gives them: strings or numbers,
/// kept as the text the child will parse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Values(pub Vec<String>);

impl From<&str> for Values {
    fn from(s: &str) -> Self {
        Values(vec![s.to_string()])
    }
}

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Scalar {
            Text(String),
            Int(i64),
            Float(f64),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Scalar),
            Many(Vec<Scalar>),
        }
        let text = |s: Scalar| match s {
            Scalar::Text(t) => t,
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
        };
        Ok(Values(match OneOrMany::deserialize(d)? {
            OneOrMany::One(s) => vec![text(s)],
            OneOrMany::Many(v) => v.into_iter().map(text).collect(),
        }))
    }
}

/// One field of a config: how it goes onto a command line.
pub trait FlagValue {
    /// Appends this value of the flag `--long` to `argv`.
    fn push_args(&self, long: &str, argv: &mut Vec<String>);
}

impl FlagValue for Values {
    fn push_args(&self, long: &str, argv: &mut Vec<String>) {
        for v in &self.0 {
            argv.push(long.to_string());
            argv.push(v.clone());
        }
    }
}

impl FlagValue for bool {
    fn push_args(&self, long: &str, argv: &mut Vec<String>) {
        if *self {
            argv.push(long.to_string());
        }
    }
}

/// A dmalab command's options as a child takes them.
pub trait ChildOptions:
    Sized + Default + serde::Serialize + serde::de::DeserializeOwned + Clone
{
    /// The subcommand words (`["probe", "latency"]`).
    const COMMAND: &'static [&'static str];
    /// Every key an experiment may give, with its kind, in argv order.
    const KEYS: &'static [(&'static str, Kind)];
    /// Flags the command has that the starting process sets itself
    /// (`dmalab run` gives `--output`, `--live-stats`); a table may not.
    const RUNNER_SETS: &'static [(&'static str, Kind)];

    /// The command line after the subcommand words: each set field as
    /// `--key-with-dashes [value]`, in the order of [`Self::KEYS`].
    fn to_argv(&self) -> Vec<String>;

    /// Every field set to a value the command's parser accepts (for the
    /// test that keeps a config and the clap definition in step).
    fn example() -> Self;

    /// What `key` (underscores or dashes) takes, if the command has it.
    fn kind_of(key: &str) -> Option<Kind> {
        let k = key.replace('-', "_");
        Self::KEYS
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, kind)| *kind)
    }

    /// Whether the command has the flag, as a key or one the runner sets.
    fn takes(key: &str) -> bool {
        let k = key.replace('-', "_");
        Self::kind_of(&k).is_some() || Self::RUNNER_SETS.iter().any(|(n, _)| *n == k)
    }
}

/// One child config with its type erased: what a process that starts the
/// command needs of it (its words, its keys, how a table becomes argv), as
/// plain values. The binary builds one per command from the config its
/// library owns ([`ChildSpec::of`]) and passes them down, so a library that
/// starts children (`dmalab-run`, and `dmalab-fleet` and `dmalab-throttle`
/// through it) does not depend on the libraries that own them.
#[derive(Clone, Copy)]
pub struct ChildSpec {
    /// The subcommand words (`["probe", "latency"]`).
    pub command: &'static [&'static str],
    /// Every key a table may give, with its kind, in argv order.
    pub keys: &'static [(&'static str, Kind)],
    /// Flags the starting process sets itself.
    pub runner_sets: &'static [(&'static str, Kind)],
    /// Reads a table (keys with underscores) into the config and writes
    /// its argv.
    to_argv: fn(serde_json::Value) -> Result<Vec<String>, serde_json::Error>,
}

impl ChildSpec {
    /// The spec of the config `C`.
    pub fn of<C: ChildOptions>() -> Self {
        ChildSpec {
            command: C::COMMAND,
            keys: C::KEYS,
            runner_sets: C::RUNNER_SETS,
            to_argv: |table| serde_json::from_value::<C>(table).map(|c| c.to_argv()),
        }
    }

    /// What `key` (underscores or dashes) takes, if the command has it as
    /// a key.
    pub fn kind_of(&self, key: &str) -> Option<Kind> {
        let k = key.replace('-', "_");
        self.keys
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, kind)| *kind)
    }

    /// Whether `key` is a flag the starting process sets itself.
    pub fn runner_sets(&self, key: &str) -> bool {
        let k = key.replace('-', "_");
        self.runner_sets.iter().any(|(n, _)| *n == k)
    }

    /// Whether the command has the flag, as a key or one the runner sets.
    pub fn takes(&self, key: &str) -> bool {
        self.kind_of(key).is_some() || self.runner_sets(key)
    }

    /// The command line after the subcommand words: `table` (keys with
    /// underscores, values as [`Values`] or switches as booleans) read
    /// into the config, unknown keys and wrong kinds refused, written out.
    pub fn argv(&self, table: serde_json::Value) -> Result<Vec<String>, serde_json::Error> {
        (self.to_argv)(table)
    }
}

impl std::fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChildSpec({})", self.command.join(" "))
    }
}

/// `max_blocks` -> `--max-blocks`.
pub fn long_flag(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// Declares a child config: a serde struct with `deny_unknown_fields`, one
/// optional field per flag, and its [`ChildOptions`] impl.
///
/// ```
/// dmalab_core::child_options! {
///     /// The options of `dmalab demo`.
///     pub struct DemoOptions for ["demo"] {
///         /// Block size.
///         bs: Values = "4K",
///         /// Keep the file.
///         keep: Switch,
///     }
///     runner_sets { output: Values = "out.json" }
/// }
/// use dmalab_core::child::ChildOptions;
/// let o = DemoOptions { bs: Some("8K".into()), keep: Some(true) };
/// assert_eq!(o.to_argv(), ["--bs", "8K", "--keep"]);
/// ```
#[macro_export]
macro_rules! child_options {
    (@ty Values) => { $crate::child::Values };
    (@ty Switch) => { bool };
    (@sample Values $s:literal) => { $crate::child::Values::from($s) };
    (@sample Switch) => { true };
    (
        $(#[$m:meta])*
        pub struct $name:ident for [$($word:literal),+] {
            $( $(#[$fm:meta])* $field:ident : $kind:ident $(= $sample:literal)? ),* $(,)?
        }
        runner_sets { $( $rfield:ident : $rkind:ident $(= $rsample:literal)? ),* $(,)? }
    ) => {
        $(#[$m])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$fm])*
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub $field: Option<$crate::child_options!(@ty $kind)>,
            )*
        }

        impl $crate::child::ChildOptions for $name {
            const COMMAND: &'static [&'static str] = &[$($word),+];
            const KEYS: &'static [(&'static str, $crate::child::Kind)] =
                &[$((stringify!($field), $crate::child::Kind::$kind)),*];
            const RUNNER_SETS: &'static [(&'static str, $crate::child::Kind)] =
                &[$((stringify!($rfield), $crate::child::Kind::$rkind)),*];

            fn to_argv(&self) -> Vec<String> {
                let mut argv = Vec::new();
                $(
                    if let Some(v) = &self.$field {
                        $crate::child::FlagValue::push_args(
                            v,
                            &$crate::child::long_flag(stringify!($field)),
                            &mut argv,
                        );
                    }
                )*
                argv
            }

            fn example() -> Self {
                $name {
                    $( $field: Some($crate::child_options!(@sample $kind $($sample)?)), )*
                }
            }
        }

        impl $name {
            /// The runner's own flags with values the command accepts (for
            /// the test that keeps them in step with the clap definition).
            pub fn runner_sets_example() -> Vec<String> {
                let mut argv = Vec::new();
                $(
                    $crate::child::FlagValue::push_args(
                        &$crate::child_options!(@sample $rkind $($rsample)?),
                        &$crate::child::long_flag(stringify!($rfield)),
                        &mut argv,
                    );
                )*
                argv
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::child_options! {
        /// A config for the tests.
        pub struct TestOptions for ["probe", "test"] {
            /// A value.
            max_blocks: Values = "8",
            /// A switch.
            keep: Switch,
            /// Another value.
            bs: Values = "4K",
        }
        runner_sets { output: Values = "x.json", live_stats: Values = "x" }
    }

    #[test]
    fn argv_follows_the_declared_order_and_kinds() {
        let o: TestOptions =
            toml_like(r#"{"bs": "4K", "max_blocks": [8, 16], "keep": false}"#).unwrap();
        assert_eq!(
            o.to_argv(),
            ["--max-blocks", "8", "--max-blocks", "16", "--bs", "4K"]
        );
        let o: TestOptions = toml_like(r#"{"keep": true, "bs": 1.5}"#).unwrap();
        assert_eq!(o.to_argv(), ["--keep", "--bs", "1.5"]);
        assert_eq!(TestOptions::default().to_argv(), Vec::<String>::new());
    }

    fn toml_like(json: &str) -> Result<TestOptions, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn unknown_keys_and_wrong_kinds_are_refused() {
        let e = toml_like(r#"{"iodeph": 3}"#).unwrap_err().to_string();
        assert!(e.contains("unknown field `iodeph`"), "{e}");
        assert!(toml_like(r#"{"keep": "yes"}"#).is_err());
        assert!(toml_like(r#"{"bs": true}"#).is_err());
    }

    #[test]
    fn keys_kinds_and_runner_flags_are_known() {
        assert_eq!(TestOptions::COMMAND, ["probe", "test"]);
        assert_eq!(TestOptions::kind_of("max-blocks"), Some(Kind::Values));
        assert_eq!(TestOptions::kind_of("keep"), Some(Kind::Switch));
        assert_eq!(TestOptions::kind_of("output"), None);
        assert!(TestOptions::takes("live-stats"));
        assert!(!TestOptions::takes("iodepth"));
        assert_eq!(
            TestOptions::example().to_argv(),
            ["--max-blocks", "8", "--keep", "--bs", "4K"]
        );
        assert_eq!(
            TestOptions::runner_sets_example(),
            ["--output", "x.json", "--live-stats", "x"]
        );
    }

    #[test]
    fn a_spec_answers_for_its_config() {
        let spec = ChildSpec::of::<TestOptions>();
        assert_eq!(spec.command, ["probe", "test"]);
        assert_eq!(spec.kind_of("max-blocks"), Some(Kind::Values));
        assert_eq!(spec.kind_of("output"), None);
        assert!(spec.runner_sets("live-stats") && !spec.runner_sets("bs"));
        assert!(spec.takes("output") && !spec.takes("iodepth"));
        let argv = spec
            .argv(serde_json::json!({"bs": ["8K"], "keep": true}))
            .unwrap();
        assert_eq!(argv, ["--keep", "--bs", "8K"]);
        let e = spec
            .argv(serde_json::json!({"iodeph": ["3"]}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `iodeph`"), "{e}");
        assert_eq!(format!("{spec:?}"), "ChildSpec(probe test)");
    }
}
