//! dmalab fleet: one experiment file run across many nodes through Slurm
//! job arrays, and the per-node results merged into one file with the host
//! as a dimension. Slurm places, runs, retries and accounts; this crate
//! only writes what Slurm runs and reads back what it says.
//!
//! - [`hostlist`]: Slurm host lists (`node[01-04,07]`) expanded.
//! - [`plan`]: a submit request checked and turned into units (one results
//!   file each: a node, or a node and a configuration).
//! - [`manifest`]: `RESULTS/fleet.json`, what was submitted when.
//! - [`script`]: the sbatch script, kept beside the results.
//! - [`slurm`]: the Slurm commands and their output parsed.
//! - [`submit`], [`status`], [`merge`]: the three subcommands.

pub mod error;
pub mod hostlist;
pub mod manifest;
pub mod merge;
pub mod plan;
pub mod script;
pub mod slurm;
pub mod status;
pub mod submit;

pub use error::FleetError;

/// The first 12 characters of a hash, for messages (the whole text when a
/// hand-edited file holds something shorter or odd).
pub fn short_hash(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}
