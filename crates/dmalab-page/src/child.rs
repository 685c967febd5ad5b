//! `dmalab page` as a child of another command (an experiment's victim):
//! the keys its table may give, each a flag of the command. The binary's
//! tests parse [`PageChildOptions::example`]'s argv with the real clap
//! definition, so a flag renamed on one side fails there.

use dmalab_core::child_options;

child_options! {
    /// The options of `dmalab page` an experiment's `[[victim]]` table may
    /// set (`read_pct = 80` is `--read-pct 80`).
    pub struct PageChildOptions for ["page"] {
        /// `--map`.
        map: Values = "256M",
        /// `--set`.
        set: Values = "128M",
        /// `--threads`.
        threads: Values = "1",
        /// `--read-pct`.
        read_pct: Values = "50",
        /// `--pattern`.
        pattern: Values = "uniform",
        /// `--shape`.
        shape: Values = "1",
        /// `--offset`.
        offset: Values = "random",
        /// `--timer`.
        timer: Values = "rdtscp",
        /// `--classify`.
        classify: Values = "perf",
        /// `--cold`.
        cold: Switch,
        /// `--init-random`.
        init_random: Switch,
        /// `--delay`.
        delay: Values = "0",
        /// `--runtime`.
        runtime: Values = "10s",
        /// `--write-after-read`.
        write_after_read: Switch,
        /// `--seed`.
        seed: Values = "1",
        /// `--memory-limit`.
        memory_limit: Values = "64M",
        /// `--swap`.
        swap: Values = "existing",
        /// `--page-cluster`.
        page_cluster: Values = "0",
        /// `--swappiness`.
        swappiness: Values = "60",
        /// `--media-latency`.
        media_latency: Values = "5us",
        /// `--allow-destroy`.
        allow_destroy: Values = "/tmp/dmalab-swap",
        /// `--xml`.
        xml: Values = "/tmp/dmalab-page.xml",
        /// `--quiet`.
        quiet: Switch,
    }
    runner_sets {
        output: Values = "/tmp/dmalab-out.json",
        output_format: Values = "json",
    }
}
