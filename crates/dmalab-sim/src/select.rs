//! What a `dmalab sim compare`, `sweep` or `params` run asks for: a
//! parameter set, overrides and schemes, checked as user input (every error
//! is a [`UsageError`] naming the option).

use crate::{Scheme, SimConfig};
use dmalab_core::UsageError;
use std::path::Path;

/// The parameter sets `--params` names; anything else is a TOML file.
pub const NAMED_PARAMS: [&str; 2] = ["paper", "modern"];

/// A run's parameters and schemes, as the user gave them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamChoice {
    /// A parameter set of [`NAMED_PARAMS`] or a TOML file (`--params`).
    pub params: String,
    /// `KEY=VALUE` overrides, applied in order (`--set`).
    pub sets: Vec<String>,
    /// Scheme names; empty for the paper's seven (`--schemes`).
    pub schemes: Vec<String>,
}

impl ParamChoice {
    /// The TOML file `--params` names, if it names no built-in set: an input
    /// no output may overwrite.
    pub fn params_file(&self) -> Option<&Path> {
        (!NAMED_PARAMS.contains(&self.params.as_str())).then(|| Path::new(&self.params))
    }

    /// The parameters after every override, and the schemes to run (all of
    /// whose caches together must fit the model's limit).
    pub fn resolve(&self) -> Result<(SimConfig, Vec<Scheme>), UsageError> {
        let mut cfg = match self.params_file() {
            None => SimConfig::named(&self.params)
                .map_err(|e| UsageError::new("--params", e.message))?,
            Some(file) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    UsageError::new(
                        "--params",
                        format!(
                            "cannot read '{}' ({e}); name paper, modern or a TOML file",
                            self.params
                        ),
                    )
                })?;
                SimConfig::from_toml(&text).map_err(|e| {
                    UsageError::new("--params", format!("{}: {}", self.params, e.message))
                })?
            }
        };
        let mut pairs = Vec::new();
        for s in &self.sets {
            let (k, v) = s.split_once('=').ok_or_else(|| {
                UsageError::new(
                    "--set",
                    format!("'{s}' is not KEY=VALUE (e.g. llc.size_bytes=4M)"),
                )
            })?;
            pairs.push((k.trim(), v.trim()));
        }
        // Checked once after all are applied, so their order does not matter.
        cfg.set_all(pairs)
            .map_err(|e| UsageError::new("--set", e.to_string()))?;
        let schemes = if self.schemes.is_empty() {
            Scheme::paper_set()
        } else {
            self.schemes
                .iter()
                .map(|s| Scheme::parse(s.trim()).map_err(|m| UsageError::new("--schemes", m)))
                .collect::<Result<Vec<_>, _>>()?
        };
        Scheme::check_total(&schemes, cfg.llc.size_bytes)
            .map_err(|m| UsageError::new("--schemes", m))?;
        Ok((cfg, schemes))
    }
}

/// Checks every value of a sweep of `key` over `cfg` before the long part
/// starts: each must set, and leave the schemes' caches within the limit.
pub fn check_sweep_values(
    cfg: &SimConfig,
    schemes: &[Scheme],
    key: &str,
    values: &[String],
) -> Result<(), UsageError> {
    for v in values {
        let mut c = cfg.clone();
        c.set(key, v)
            .map_err(|e| UsageError::new("--values", e.to_string()))?;
        Scheme::check_total(schemes, c.llc.size_bytes)
            .map_err(|m| UsageError::new("--values", m))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(params: &str, sets: &[&str], schemes: &[&str]) -> ParamChoice {
        ParamChoice {
            params: params.into(),
            sets: sets.iter().map(|s| s.to_string()).collect(),
            schemes: schemes.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn option_of(c: &ParamChoice) -> String {
        c.resolve().unwrap_err().option
    }

    #[test]
    fn named_sets_overrides_and_default_schemes() {
        let (cfg, schemes) = choice("paper", &["llc.ways = 8"], &[]).resolve().unwrap();
        assert_eq!(cfg.llc.ways, 8);
        assert_eq!(schemes, Scheme::paper_set());
        let (_, s) = choice("modern", &[], &["snoop", " shared"])
            .resolve()
            .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(choice("modern", &[], &[]).params_file(), None);
    }

    #[test]
    fn each_bad_input_names_its_option() {
        assert_eq!(
            option_of(&choice("/nonexistent/p.toml", &[], &[])),
            "--params"
        );
        assert_eq!(option_of(&choice("paper", &["llc.ways"], &[])), "--set");
        assert_eq!(option_of(&choice("paper", &["llc.ways=0"], &[])), "--set");
        assert_eq!(
            option_of(&choice("paper", &[], &["dma-cache-x"])),
            "--schemes"
        );
        // Seven 256 MiB DMA caches pass the limit on the model's memory.
        let big = ["dma-cache-256M"; 9];
        assert_eq!(option_of(&choice("paper", &[], &big)), "--schemes");
    }

    #[test]
    fn params_file_is_read_and_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, SimConfig::paper().to_toml()).unwrap();
        let c = choice(p.to_str().unwrap(), &[], &[]);
        assert_eq!(c.params_file(), Some(p.as_path()));
        assert_eq!(c.resolve().unwrap().0, SimConfig::paper());
        std::fs::write(&p, "nonsense = 1\n").unwrap();
        let e = c.resolve().unwrap_err();
        assert!(
            e.option == "--params" && e.message.starts_with(p.to_str().unwrap()),
            "{e}"
        );
    }

    #[test]
    fn sweep_values_are_checked_before_the_run() {
        let (cfg, schemes) = choice("paper", &[], &["snoop"]).resolve().unwrap();
        let ok = ["1M".to_string(), "2M".to_string()];
        assert!(check_sweep_values(&cfg, &schemes, "llc.size_bytes", &ok).is_ok());
        let bad = ["1M".to_string(), "lots".to_string()];
        let e = check_sweep_values(&cfg, &schemes, "llc.size_bytes", &bad).unwrap_err();
        assert_eq!(e.option, "--values");
    }
}
