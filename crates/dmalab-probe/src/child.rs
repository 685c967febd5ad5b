//! `dmalab probe latency` and `dmalab probe bandwidth` as children of
//! another command (an experiment's victims and CPU-bandwidth aggressors):
//! the keys their tables may give, each a flag of the command. The
//! binary's tests parse each config's example argv with the real clap
//! definition, so a flag renamed on one side fails there.

use dmalab_core::child_options;

child_options! {
    /// The options of `dmalab probe latency` an experiment table may set
    /// (`group_pages = 4` is `--group-pages 4`).
    pub struct LatencyChildOptions for ["probe", "latency"] {
        /// `--size`.
        size: Values = "64M",
        /// `--pattern`.
        pattern: Values = "chase",
        /// `--shape`.
        shape: Values = "0.1",
        /// `--counters` (a flag of `dmalab probe`, given after the words).
        counters: Values = "software",
        /// `--stride`.
        stride: Values = "64",
        /// `--group-pages`.
        group_pages: Values = "1",
        /// `--write-pct`.
        write_pct: Values = "0",
        /// `--threads`.
        threads: Values = "1",
        /// `--mode`.
        mode: Values = "per-access",
        /// `--rounds`.
        rounds: Values = "1",
        /// `--runtime`.
        runtime: Values = "1s",
        /// `--interval`.
        interval: Values = "100ms",
        /// `--seed`.
        seed: Values = "1",
        /// `--pages`.
        pages: Values = "4k",
        /// `--cpus-allowed`.
        cpus_allowed: Values = "0",
        /// `--membind`.
        membind: Values = "0",
        /// `--cpunodebind`.
        cpunodebind: Values = "0",
        /// `--oversubscribe`.
        oversubscribe: Switch,
        /// `--interval-json`.
        interval_json: Switch,
        /// `--matrix`.
        matrix: Switch,
        /// `--quiet`.
        quiet: Switch,
    }
    runner_sets {
        output: Values = "/tmp/dmalab-out.json",
        output_format: Values = "json",
    }
}

child_options! {
    /// The options of `dmalab probe bandwidth` an experiment table may set.
    pub struct BandwidthChildOptions for ["probe", "bandwidth"] {
        /// `--traffic`.
        traffic: Values = "R",
        /// `--size`.
        size: Values = "64M",
        /// `--threads`.
        threads: Values = "1",
        /// `--counters` (a flag of `dmalab probe`, given after the words).
        counters: Values = "software",
        /// `--delay`.
        delay: Values = "0",
        /// `--runtime`.
        runtime: Values = "1s",
        /// `--interval`.
        interval: Values = "100ms",
        /// `--pages`.
        pages: Values = "4k",
        /// `--cpus-allowed`.
        cpus_allowed: Values = "0",
        /// `--membind`.
        membind: Values = "0",
        /// `--cpunodebind`.
        cpunodebind: Values = "0",
        /// `--oversubscribe`.
        oversubscribe: Switch,
        /// `--interval-json`.
        interval_json: Switch,
        /// `--access` (sequential or random addresses).
        access: Values = "random",
        /// `--granularity` (bytes per random access).
        granularity: Values = "64",
        /// `--quiet`.
        quiet: Switch,
    }
    runner_sets {
        output: Values = "/tmp/dmalab-out.json",
        output_format: Values = "json",
    }
}
