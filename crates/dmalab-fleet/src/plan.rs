//! A submit request, checked, and the units it makes: one results file
//! each, run by one array task (a node, a replica on a node, or a node and
//! one configuration).

use crate::error::FleetError;
use dmalab_run::experiment::Experiment;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the experiment is cut into array tasks (`--split`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// One task per node runs the whole experiment.
    Nodes,
    /// One task per node and configuration (`dmalab run --configuration`).
    Configurations,
}

impl Split {
    /// The value as the command line spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Nodes => "nodes",
            Split::Configurations => "configurations",
        }
    }
}

/// Where the nodes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeSource {
    /// A Slurm host list (`node[01-04]`).
    List(String),
    /// Every node of the `--partition`.
    Partition,
}

/// What `dmalab fleet submit` is asked to do, before it is checked.
#[derive(Clone, Debug)]
pub struct SubmitRequest {
    /// The experiment file.
    pub experiment: PathBuf,
    /// The nodes.
    pub nodes: NodeSource,
    /// Slurm partition (`sbatch --partition`).
    pub partition: Option<String>,
    /// Tasks per node, each with its own results file (replicas).
    pub per_node: u32,
    /// How the experiment is cut into tasks.
    pub split: Split,
    /// The results directory (shared by every node).
    pub results: PathBuf,
    /// Extra sbatch options, one each (`--time=30:00`).
    pub sbatch_args: Vec<String>,
    /// Array tasks running at once (`--array=...%K`); None: Slurm's limit.
    pub max_running: Option<u32>,
    /// Whole nodes for each task (`--exclusive`).
    pub exclusive: bool,
    /// The dmalab binary the tasks run (same path on every node).
    pub dmalab: PathBuf,
    /// Write the script and print the per-node command lines; submit
    /// nothing.
    pub dry_run: bool,
}

/// Refuses a value with a control character (a line break, a carriage
/// return, a NUL): the batch script carries values in `#` comments and
/// `#SBATCH` lines, where a line break ends the line and the rest would
/// run as a command on every node.
pub fn one_line(option: &str, value: &str) -> Result<(), FleetError> {
    if value.chars().any(char::is_control) {
        return Err(FleetError::usage(
            option,
            format!(
                "'{}' holds a control character (a line break?); the batch script cannot carry it: give it on one line",
                dmalab_core::text::shown(value)
            ),
        ));
    }
    Ok(())
}

/// The most tasks per node (`--per-node`).
pub const MAX_PER_NODE: u32 = 1000;

/// The most array tasks one submission makes (nodes x tasks per node x
/// configurations); Slurm's own `MaxArraySize` is usually far lower.
pub const MAX_TASKS: usize = 100_000;

impl SubmitRequest {
    /// Checks what can be checked without Slurm or the file system.
    pub fn validate(&self) -> Result<(), FleetError> {
        if self.per_node == 0 || self.per_node > MAX_PER_NODE {
            return Err(FleetError::usage(
                "--per-node",
                format!(
                    "{} tasks per node is out of range; give 1 to {MAX_PER_NODE}",
                    self.per_node
                ),
            ));
        }
        if self.max_running == Some(0) {
            return Err(FleetError::usage(
                "--max-running",
                "0 tasks at once runs nothing; give 1 or more (the array's %K)",
            ));
        }
        if let NodeSource::List(l) = &self.nodes {
            one_line("--nodes", l)?;
        }
        if let Some(p) = &self.partition {
            one_line("--partition", p)?;
        }
        one_line("--results", &self.results.display().to_string())?;
        one_line("--dmalab", &self.dmalab.display().to_string())?;
        if self.nodes == NodeSource::Partition && self.partition.is_none() {
            return Err(FleetError::usage(
                "--nodes",
                "name the nodes (--nodes 'node[01-04]') or a partition whose nodes to use (--partition P)",
            ));
        }
        for a in &self.sbatch_args {
            if !a.starts_with('-') || a.contains(char::is_control) {
                return Err(FleetError::usage(
                    "--sbatch-arg",
                    format!(
                        "'{a}' is not one sbatch option; give each as --sbatch-arg=--time=30:00"
                    ),
                ));
            }
            let name = a.split('=').next().unwrap_or(a);
            if [
                "--array",
                "-a",
                "--output",
                "-o",
                "--error",
                "-e",
                "--parsable",
                "--hold",
                "-H",
            ]
            .contains(&name)
                || a.starts_with("-a") && a.len() > 2 && !a.starts_with("--")
            {
                return Err(FleetError::usage(
                    "--sbatch-arg",
                    format!("'{a}': dmalab fleet sets {name} itself (use --max-running for the array's %K)"),
                ));
            }
        }
        if !self.dmalab.is_absolute() {
            return Err(FleetError::usage(
                "--dmalab",
                format!(
                    "'{}' must be an absolute path, the same on every node",
                    self.dmalab.display()
                ),
            ));
        }
        Ok(())
    }
}

/// One results file and the array task that writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// Its name: the results file's stem (`node1`, `node1.default`,
    /// `node1.r2`).
    pub key: String,
    /// The Slurm node it runs on.
    pub node: String,
    /// The name its runs carry as their host in the merged file (the node,
    /// with `.rK` for replica K when there are several per node).
    pub host: String,
    /// Replica, 1-based.
    pub replica: u32,
    /// The configuration it runs, when split by configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    /// Runs it is to record.
    pub planned_runs: usize,
}

impl Unit {
    /// Its results file name inside the results directory.
    pub fn results_file(&self) -> String {
        format!("{}.jsonl", self.key)
    }
}

/// A configuration name made safe for a file name.
fn file_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=+-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The units for these nodes, in node order (duplicate nodes are refused:
/// two tasks would write one file; use `--per-node`).
pub fn units(
    exp: &Experiment,
    nodes: &[String],
    per_node: u32,
    split: Split,
) -> Result<Vec<Unit>, FleetError> {
    let runs = dmalab_run::plan::expand(exp);
    let mut seen = std::collections::BTreeSet::new();
    for n in nodes {
        if !seen.insert(n) {
            return Err(FleetError::usage(
                "--nodes",
                format!("node '{n}' is named twice; each node gets one task (use --per-node N for N tasks per node)"),
            ));
        }
    }
    // Counted before the units are made: each is a file, an array task
    // and a line of the script.
    let per_node_units = match split {
        Split::Nodes => 1,
        Split::Configurations => exp.configurations.len(),
    };
    let total = nodes
        .len()
        .saturating_mul(per_node as usize)
        .saturating_mul(per_node_units);
    if total > MAX_TASKS {
        return Err(FleetError::usage(
            "--per-node",
            format!(
                "{} node(s) x {per_node} task(s) per node x {per_node_units} unit(s) per task make {total} array tasks; at most {MAX_TASKS} (name fewer nodes or give a smaller --per-node)",
                nodes.len()
            ),
        ));
    }
    let mut out = Vec::new();
    let mut keys = std::collections::BTreeSet::new();
    for n in nodes {
        for k in 1..=per_node {
            let host = if per_node > 1 {
                format!("{n}.r{k}")
            } else {
                n.clone()
            };
            let configs: Vec<(Option<String>, usize)> = match split {
                Split::Nodes => vec![(None, runs.len())],
                Split::Configurations => exp
                    .configurations
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        (
                            Some(c.name.clone()),
                            runs.iter().filter(|r| r.configuration == i).count(),
                        )
                    })
                    .collect(),
            };
            for (c, planned) in configs {
                let key = match &c {
                    Some(c) => format!("{host}.{}", file_part(c)),
                    None => host.clone(),
                };
                if !keys.insert(key.clone()) {
                    return Err(FleetError::usage(
                        "--split",
                        format!("two tasks would write {key}.jsonl (configuration names that differ only in punctuation); rename a configuration"),
                    ));
                }
                out.push(Unit {
                    key,
                    node: n.clone(),
                    host: host.clone(),
                    replica: k,
                    configuration: c,
                    planned_runs: planned,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    dmalab_core::child_options! {
        /// A stand-in for every child config: the experiment below has one
        /// keyless load aggressor and an idle victim (fleet does not depend
        /// on the libraries that own the real ones).
        pub struct StandIn for ["load"] {
            /// Block size.
            bs: Values = "4K",
        }
        runner_sets { output: Values = "x.json" }
    }

    fn exp() -> Experiment {
        let spec = dmalab_core::child::ChildSpec::of::<StandIn>();
        let children = dmalab_run::child::ChildCatalog {
            load: spec,
            probe_latency: spec,
            probe_bandwidth: spec,
            page: spec,
        };
        dmalab_run::experiment::parse(
            Path::new("t.toml"),
            "[experiment]\nrepetitions = 2\n[[aggressor]]\nname=\"a\"\n[[configuration]]\nname=\"small buf\"\n[[configuration]]\nname=\"big\"\n[[victim]]\nname=\"v\"\ncommand=\"idle\"\nduration=\"1s\"\n",
            &children,
        )
        .unwrap()
    }

    #[test]
    fn one_unit_per_node_or_per_node_and_configuration() {
        let e = exp();
        let nodes = vec!["n1".to_string(), "n2".to_string()];
        let u = units(&e, &nodes, 1, Split::Nodes).unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(
            (u[1].key.as_str(), u[1].host.as_str(), u[1].planned_runs),
            ("n2", "n2", 8)
        );
        let u = units(&e, &nodes, 1, Split::Configurations).unwrap();
        let keys: Vec<&str> = u.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(keys, ["n1.small_buf", "n1.big", "n2.small_buf", "n2.big"]);
        assert!(u.iter().all(|u| u.planned_runs == 4));
        assert_eq!(u[0].host, "n1");
        assert_eq!(u[0].configuration.as_deref(), Some("small buf"));
        let u = units(&e, &nodes[..1], 2, Split::Nodes).unwrap();
        let hosts: Vec<&str> = u.iter().map(|u| u.host.as_str()).collect();
        assert_eq!(hosts, ["n1.r1", "n1.r2"]);
    }

    #[test]
    fn a_node_named_twice_is_refused() {
        let e = exp();
        let nodes = vec!["n1".to_string(), "n1".to_string()];
        let err = units(&e, &nodes, 1, Split::Nodes).unwrap_err().to_string();
        assert!(err.contains("--per-node"), "{err}");
    }
}
