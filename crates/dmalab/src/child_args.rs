//! The child configs of the libraries (`dmalab_load::child`,
//! `dmalab_probe::child`, `dmalab_page::child`) against this binary's clap
//! definitions: every argv a config writes is accepted by the real parser,
//! and every flag the parser has is a key of the config, one the starting
//! process sets, or one named here as not for experiments. A flag renamed
//! or added on one side fails here, not in an experiment at run time.

use super::{negative_values, Cli};
use clap::CommandFactory;
use dmalab_core::child::ChildOptions;
use dmalab_load::child::LoadChildOptions;
use dmalab_page::child::PageChildOptions;
use dmalab_probe::child::{BandwidthChildOptions, LatencyChildOptions};

/// Flags of a child command that no experiment table gives.
const NOT_FOR_EXPERIMENTS: [&str; 2] = ["help", "version"];

/// Parses `dmalab WORDS ARGV` with the binary's own definition.
fn parse(words: &[&str], argv: &[String]) -> Result<(), String> {
    let line: Vec<String> = std::iter::once("dmalab".to_string())
        .chain(words.iter().map(|w| w.to_string()))
        .chain(argv.iter().cloned())
        .collect();
    negative_values(Cli::command())
        .try_get_matches_from(&line)
        .map(|_| ())
        .map_err(|e| format!("`{}`: {}", line.join(" "), e.render()))
}

/// The config's every key (with its example value) and every flag the
/// runner sets are accepted together by the command's parser.
fn argv_is_accepted<C: ChildOptions>(runner_sets: Vec<String>) -> Result<(), String> {
    let mut argv = C::example().to_argv();
    argv.extend(runner_sets);
    parse(C::COMMAND, &argv)
}

/// Every long flag of the command (its own and its parents' global ones)
/// that the config does not know.
fn flags_missing_from<C: ChildOptions>() -> Vec<String> {
    let mut cmd = negative_values(Cli::command());
    cmd.build();
    let mut longs = Vec::new();
    let mut here = &cmd;
    for w in C::COMMAND {
        let Some(sub) = here.find_subcommand(w) else {
            return vec![format!("no subcommand {w}")];
        };
        here = sub;
        longs.extend(here.get_arguments().filter_map(|a| a.get_long()));
    }
    longs.sort();
    longs.dedup();
    longs
        .into_iter()
        .filter(|l| !NOT_FOR_EXPERIMENTS.contains(l) && !C::takes(l))
        .map(|l| format!("--{l}"))
        .collect()
}

#[test]
fn every_child_config_writes_an_argv_the_binary_accepts() {
    argv_is_accepted::<LoadChildOptions>(LoadChildOptions::runner_sets_example()).unwrap();
    argv_is_accepted::<LatencyChildOptions>(LatencyChildOptions::runner_sets_example()).unwrap();
    argv_is_accepted::<BandwidthChildOptions>(BandwidthChildOptions::runner_sets_example())
        .unwrap();
    argv_is_accepted::<PageChildOptions>(PageChildOptions::runner_sets_example()).unwrap();
}

#[test]
fn every_flag_of_a_child_command_is_in_its_config() {
    assert_eq!(
        flags_missing_from::<LoadChildOptions>(),
        Vec::<String>::new()
    );
    assert_eq!(
        flags_missing_from::<LatencyChildOptions>(),
        Vec::<String>::new()
    );
    assert_eq!(
        flags_missing_from::<BandwidthChildOptions>(),
        Vec::<String>::new()
    );
    assert_eq!(
        flags_missing_from::<PageChildOptions>(),
        Vec::<String>::new()
    );
}

dmalab_core::child_options! {
    /// `dmalab load`'s config with `--iodepth` misspelled, as a rename on
    /// one side would leave it.
    pub struct RenamedLoadOptions for ["load"] {
        /// Misspelled.
        iodeph: Values = "16",
        /// Right.
        bs: Values = "4K",
    }
    runner_sets { output: Values = "/tmp/x.json" }
}

/// The checks above can fail: a renamed field is refused by the parser,
/// and the flag it was meant to be shows up as missing from the config.
#[test]
fn a_renamed_field_fails_both_checks() {
    let e = argv_is_accepted::<RenamedLoadOptions>(RenamedLoadOptions::runner_sets_example())
        .unwrap_err();
    assert!(e.contains("--iodeph"), "{e}");
    assert!(flags_missing_from::<RenamedLoadOptions>().contains(&"--iodepth".to_string()));
}
