//! The integration tests that change nothing host-global, built as one
//! binary (see the `[[test]]` entries in `crates/dmalab/Cargo.toml`): the
//! command line as a whole, the simulator, experiments and reports, the GPU
//! engine on its mock driver, `info`, bounded inputs and signals, and DDIO
//! on a fixture host. Run one group with `cargo test -p dmalab --test
//! cmdline -- sim::`.

mod common;

mod benchstat;
mod bounds;
mod cli;
mod conventions;
mod ddio;
mod doc_report;
mod gpu;
mod info;
mod run;
mod run_attrib;
mod run_ddio;
mod run_group;
mod run_report;
mod safe_files;
mod sim;
