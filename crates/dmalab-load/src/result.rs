//! Accounting and the result of a load run.

use crate::check::RateCheck;
use crate::engine::Op;
use dmalab_core::hist::LatencySummary;
use dmalab_core::schema::CpuUsage;
use dmalab_core::units::{fmt_bytes, fmt_ns};
use serde::{Deserialize, Serialize};

/// Bytes of one NVMe submission queue entry (the command the device reads).
pub const NVME_COMMAND_BYTES: u64 = dmalab_nvme::cmd::SQE_BYTES;
/// Bytes of one NVMe completion queue entry (what the device writes back).
pub const NVME_COMPLETION_BYTES: u64 = dmalab_nvme::cmd::CQE_BYTES;

/// The thesis' bandwidth formula (section 5.2) with `bs` in place of 4096:
/// `(blocks * bs + commands * (64 B + 16 B)) / runtime`, bytes per second.
pub fn thesis_bandwidth(blocks: u64, commands: u64, bs: u64, runtime_s: f64) -> f64 {
    if runtime_s <= 0.0 {
        return 0.0;
    }
    (blocks as f64 * bs as f64
        + commands as f64 * (NVME_COMMAND_BYTES + NVME_COMPLETION_BYTES) as f64)
        / runtime_s
}

/// Counts of completed commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Commands completed successfully.
    pub commands: u64,
    /// Blocks of `bs` moved.
    pub blocks: u64,
    /// Data bytes moved (blocks * bs).
    pub data_bytes: u64,
    /// NVMe command traffic: commands * (64 + 16) bytes.
    pub command_overhead_bytes: u64,
    /// data_bytes + command_overhead_bytes.
    pub total_bytes: u64,
    /// Commands that failed or transferred less than asked.
    pub errors: u64,
    /// Data bytes of storage reads (the device wrote memory), bytes.
    #[serde(default)]
    pub storage_read_bytes: u64,
    /// Data bytes of storage writes (the device read memory), bytes.
    #[serde(default)]
    pub storage_write_bytes: u64,
}

impl Totals {
    /// Adds one successful command `op` of `blocks` blocks and `bytes`
    /// bytes; its bytes count in the direction `op` moved them.
    pub fn add(&mut self, op: Op, blocks: u64, bytes: u64) {
        self.commands += 1;
        self.blocks += blocks;
        self.data_bytes += bytes;
        match op {
            Op::Read => self.storage_read_bytes += bytes,
            Op::Write => self.storage_write_bytes += bytes,
            Op::Flush | Op::Noop => {}
        }
        self.command_overhead_bytes += NVME_COMMAND_BYTES + NVME_COMPLETION_BYTES;
        self.total_bytes = self.data_bytes + self.command_overhead_bytes;
    }

    /// Sums two totals.
    pub fn merge(&mut self, o: &Totals) {
        self.commands += o.commands;
        self.blocks += o.blocks;
        self.data_bytes += o.data_bytes;
        self.command_overhead_bytes += o.command_overhead_bytes;
        self.total_bytes += o.total_bytes;
        self.errors += o.errors;
        self.storage_read_bytes += o.storage_read_bytes;
        self.storage_write_bytes += o.storage_write_bytes;
    }
}

/// Rates over the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Data bandwidth, bytes per second.
    pub data_bw_bytes: f64,
    /// NVMe command + completion traffic, bytes per second.
    pub command_bw_bytes: f64,
    /// The thesis' combined bandwidth (data + command traffic), bytes per second.
    pub combined_bw_bytes: f64,
    /// Commands per second.
    pub iops: f64,
    /// Blocks per second.
    pub blocks_per_s: f64,
}

impl Rates {
    /// Rates of `t` over `runtime_ns`, with block size `bs`.
    pub fn of(t: &Totals, bs: u64, runtime_ns: u64) -> Self {
        let s = runtime_ns as f64 / 1e9;
        if s <= 0.0 {
            return Self::default();
        }
        Self {
            data_bw_bytes: t.data_bytes as f64 / s,
            command_bw_bytes: t.command_overhead_bytes as f64 / s,
            combined_bw_bytes: thesis_bandwidth(t.blocks, t.commands, bs, s),
            iops: t.commands as f64 / s,
            blocks_per_s: t.blocks as f64 / s,
        }
    }
}

/// One per-second sample (the same figures as the stderr lines).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// End of the interval, seconds since the start.
    pub t_s: f64,
    /// Length of the interval, seconds (1 except for the last one).
    pub interval_s: f64,
    /// Data bytes completed in the interval.
    pub bytes: u64,
    /// Commands completed in the interval.
    pub commands: u64,
    /// Blocks completed in the interval.
    pub blocks: u64,
    /// bytes / interval, bytes per second.
    pub bw_bytes: f64,
    /// commands / interval, commands per second.
    pub iops: f64,
    /// blocks / interval, blocks per second.
    pub blocks_per_s: f64,
    /// Steal time in the interval, nanoseconds: the most any CPU lost to
    /// the hypervisor (clock-tick resolution, 10 ms). Not zero: the VM was
    /// paused, and completions waited with it.
    #[serde(default)]
    pub steal_ns: u64,
    /// Byte rate limit in force when the sample was taken, bytes per second
    /// (with --rate; follows `--rate-control`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_target_bytes_per_s: Option<u64>,
    /// Command rate limit in force when the sample was taken, commands per
    /// second (with --rate-iops; follows `--rate-control`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_target_iops: Option<u64>,
}

impl Sample {
    /// The stderr line: `  3.000 s  12345 blocks/s  48.22 MiB/s  12345 commands/s`,
    /// then `  steal 20 ms` when the hypervisor took time from a CPU. The
    /// rate is in the summary's unit (binary, scaled to the figure). An
    /// engine that moves no data (`null`) gets its commands/s only, as in
    /// its summary: its blocks and bytes are counted, but nothing moved.
    pub fn line(&self, moves_data: bool) -> String {
        let steal = if self.steal_ns > 0 {
            format!("  steal {} ms", self.steal_ns / 1_000_000)
        } else {
            String::new()
        };
        if !moves_data {
            return format!("{:8.3} s  {:>10.0} commands/s{steal}", self.t_s, self.iops);
        }
        format!(
            "{:8.3} s  {:>10.0} blocks/s  {:>13}  {:>10.0} commands/s{steal}",
            self.t_s,
            self.blocks_per_s,
            dmalab_core::units::fmt_rate(self.bw_bytes),
            self.iops,
        )
    }
}

/// One worker's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerResult {
    /// Worker index.
    pub index: usize,
    /// Engine name.
    pub engine: String,
    /// CPUs it was pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Its counts.
    pub totals: Totals,
    /// Its rates over the run's runtime.
    pub rates: Rates,
    /// Its thread's user and system CPU time.
    pub cpu: CpuUsage,
    /// Its command latency (submission to completion), nanoseconds.
    pub lat_ns: LatencySummary,
}

/// CPU time of the whole process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuResult {
    /// User CPU time of the workers, nanoseconds.
    pub usr_ns: u64,
    /// System CPU time of the workers, nanoseconds.
    pub sys_ns: u64,
    /// (usr + sys) / commands, nanoseconds per command.
    pub cpu_ns_per_command: f64,
    /// (usr + sys) / runtime, percent of one CPU.
    pub cpu_pct: f64,
    /// (usr + sys) in seconds per GiB of data moved (None without data):
    /// the workers' own cost of the DMA they cause. An engine's kernel
    /// threads (io_uring's SQPOLL poller) are in its facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s_per_gib: Option<f64>,
}

/// What an engine's commands carry over the bus, as its driver reports it
/// ([`Driver::traffic`](crate::engine::Driver::traffic)): the summary
/// shows the figures that mean something for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Commands move blocks of data (false: an engine that completes
    /// commands and moves nothing; its blocks are counted all the same).
    pub moves_data: bool,
    /// Each command is an NVMe command: a 64 B submission entry the
    /// device reads and a 16 B completion it writes back, so the command
    /// and combined bandwidths count real bus traffic.
    pub nvme_commands: bool,
}

impl Default for Traffic {
    /// Data moves, and no NVMe commands (a file, RDMA or GPU copies).
    fn default() -> Self {
        Traffic {
            moves_data: true,
            nvme_commands: false,
        }
    }
}

/// The result of `dmalab load`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    /// Time from the start to the last completion, nanoseconds.
    pub runtime_ns: u64,
    /// The engine that ran.
    pub engine: String,
    /// What its commands carried.
    #[serde(default)]
    pub traffic: Traffic,
    /// True when SIGINT/SIGTERM stopped the run early.
    pub interrupted: bool,
    /// All workers' counts.
    pub totals: Totals,
    /// All workers' rates.
    pub rates: Rates,
    /// Bytes read from storage into memory (--direction write, the even
    /// commands of `both`), bytes.
    pub storage_read_bytes: u64,
    /// Bytes written from memory to storage (--direction read, the odd
    /// commands of `both`), bytes.
    pub storage_write_bytes: u64,
    /// Per-command latency, submission to completion, nanoseconds.
    pub lat_ns: LatencySummary,
    /// CPU time of the workers.
    pub cpu: CpuResult,
    /// Per-worker figures.
    pub workers: Vec<WorkerResult>,
    /// One sample per second.
    pub samples: Vec<Sample>,
    /// The rate checker's verdict (only with --rate or --rate-iops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_check: Option<RateCheck>,
    /// Changes of the limits through `--rate-control`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_changes: Vec<crate::limiter::RateChange>,
    /// The first failed command, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Huge pages dmalab reserved for the buffer (given back afterwards).
    pub reserved_huge_pages: u64,
    /// Bytes of the buffer locked in memory: its whole length, or 0 when
    /// the locked-memory limit (`ulimit -l`) was below it and could not be
    /// raised (then the buffer was not registered with io_uring either).
    #[serde(default)]
    pub buffer_locked_bytes: u64,
    /// Where the buffer's pages are (what backs them, the node(s) the
    /// kernel put them on), read after they were faulted in.
    pub buffer_placement: dmalab_core::placement::PlacementRecord,
    /// Under a rate limit: how late each command was submitted after its
    /// due time, nanoseconds (large values mean the host could not keep the
    /// pace: CPU contention or hypervisor steal, not the device).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacing_lateness_ns: Option<LatencySummary>,
    /// The DMA transfer trace written with --trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceResult>,
    /// SHA-256 of the whole DMA buffer after the run, hex (only with
    /// --buffer-checksum): a storage read of what a storage write wrote
    /// brings back the same checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_sha256: Option<String>,
    /// What the engine reports about its device, each under its own key
    /// (`nvme`: Identify Controller/Namespace of the target; see
    /// [`Driver::facts`](crate::engine::Driver::facts)).
    #[serde(flatten)]
    pub engine_facts: std::collections::BTreeMap<String, serde_json::Value>,
}

/// What `--trace` recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceResult {
    /// The trace file (the dmalab-trace binary format).
    pub path: String,
    /// DMA transfers recorded (one per completed data command).
    pub transfers: u64,
    /// Records written.
    pub records: u64,
    /// Transfers whose submit time was earlier than the previous record's.
    pub reordered: u64,
}

impl LoadResult {
    /// The human summary printed on stdout.
    pub fn text(&self, bs: u64) -> String {
        let mut s = String::new();
        let r = &self.rates;
        let t = &self.totals;
        s.push_str(&format!(
            "dmalab load: {} engine, {:.3} s{}\n",
            self.engine,
            self.runtime_ns as f64 / 1e9,
            if self.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        ));
        // What moved is what the engine reported: an engine that moves no
        // data has its blocks counted but no byte goes anywhere, and only
        // NVMe commands put 64 B commands and 16 B completions on the bus.
        let moved_nothing = !self.traffic.moves_data;
        let nvme_commands = self.traffic.nvme_commands;
        if moved_nothing {
            s.push_str(&format!(
                "  commands {}  errors {}  (commands only: the {} engine moves no bytes)\n",
                t.commands, t.errors, self.engine
            ));
        } else {
            s.push_str(&format!(
                "  commands {}  blocks {} of {}  data {}  errors {}\n",
                t.commands,
                t.blocks,
                fmt_bytes(bs as f64),
                fmt_bytes(t.data_bytes as f64),
                t.errors
            ));
        }
        if self.storage_read_bytes > 0 && self.storage_write_bytes > 0 {
            // --direction both: what each direction moved.
            s.push_str(&format!(
                "  memory    the device wrote {} into memory and read {} from it\n",
                fmt_bytes(self.storage_read_bytes as f64),
                fmt_bytes(self.storage_write_bytes as f64)
            ));
        }
        if moved_nothing {
            s.push_str(&format!("  commands  {:>12.0}/s\n", r.iops));
        } else {
            s.push_str(&format!(
                "  data      {:>12}/s  {:>12.0} blocks/s  {:>12.0} commands/s\n",
                fmt_bytes(r.data_bw_bytes),
                r.blocks_per_s,
                r.iops
            ));
        }
        if nvme_commands {
            s.push_str(&format!(
                "  commands  {:>12}/s  (64 B command + 16 B completion each)\n",
                fmt_bytes(r.command_bw_bytes)
            ));
            s.push_str(&format!(
                "  combined  {:>12}/s  (blocks*bs + commands*80 B) / runtime\n",
                fmt_bytes(r.combined_bw_bytes)
            ));
        }
        let p = |q: f64| self.lat_ns.p(q).map_or("-".into(), |v| fmt_ns(v as f64));
        s.push_str(&format!(
            "  latency   mean {}  p50 {}  p99 {}  p99.9 {}  max {}\n",
            fmt_ns(self.lat_ns.mean_ns),
            p(50.0),
            p(99.0),
            p(99.9),
            fmt_ns(self.lat_ns.max_ns as f64)
        ));
        s.push_str(&format!(
            "  cpu       usr {}  sys {}  {} per command  {:.1}% of a CPU\n",
            fmt_ns(self.cpu.usr_ns as f64),
            fmt_ns(self.cpu.sys_ns as f64),
            fmt_ns(self.cpu.cpu_ns_per_command),
            self.cpu.cpu_pct
        ));
        if let Some(l) = self.buffer_placement.line() {
            s.push_str(&format!("  buffer    {l}\n"));
        }
        for w in &self.workers {
            s.push_str(&format!(
                "  worker {:<3} cpus {:<8} {:>14}  {:>10.0} commands/s  usr {}  sys {}\n",
                w.index,
                if w.cpus.is_empty() {
                    "any".to_string()
                } else {
                    dmalab_core::cpus::format_cpu_list(&w.cpus)
                },
                if moved_nothing {
                    "-".to_string()
                } else {
                    format!("{}/s", fmt_bytes(w.rates.data_bw_bytes))
                },
                w.rates.iops,
                fmt_ns(w.cpu.usr_ns as f64),
                fmt_ns(w.cpu.sys_ns as f64)
            ));
        }
        if let Some(c) = &self.rate_check {
            self.rate_check_text(c, &mut s);
        }
        if let Some(t) = &self.trace {
            s.push_str(&format!(
                "  trace     {} DMA transfers in {}\n",
                t.transfers, t.path
            ));
        }
        if let Some(e) = &self.first_error {
            s.push_str(&format!("  first error: {e}\n"));
        }
        s
    }

    /// The rate check's lines: the error against the target, what the
    /// device and the host took from the pacing, how late commands went
    /// in, whether Poisson arrivals look exponential.
    fn rate_check_text(&self, c: &RateCheck, s: &mut String) {
        let target = match c.windows_target_per_s.last() {
            // Changed live: first and last, the error against the
            // schedule of targets.
            Some(last) => format!(
                "{:.0} -> {last:.0} ({} live changes)",
                c.target_per_s,
                self.rate_changes.len()
            ),
            None => format!("{:.0}", c.target_per_s),
        };
        match (c.mean_per_s, c.mean_error_pct, c.window_max_error_pct) {
            (Some(mean), Some(err), Some(worst)) => s.push_str(&format!(
                "  rate      target {target} {}/s  mean {mean:.0} ({err:.3}% off)  worst 1-s window {worst:.3}% off over {} windows\n",
                c.unit,
                c.windows_per_s.len()
            )),
            // Under a second of submission: no window to judge, so no
            // error (neither 0% nor 100%).
            _ => s.push_str(&format!(
                "  rate      target {target} {}/s  no full 1-s window: the run ended before its first whole second (raise --runtime)\n",
                c.unit
            )),
        }
        if c.windows_held_ns.iter().any(|&h| h > 0) {
            s.push_str(&format!(
                "  device    due commands waited for a full queue for {} (up to {:.2}% of a window); worst window error beyond that: {:.3}%\n",
                fmt_ns(c.windows_held_ns.iter().sum::<u64>() as f64),
                c.held_max_pct,
                c.unexplained_max_error_pct,
            ));
        }
        if c.windows_steal_ns.iter().any(|&h| h > 0) {
            s.push_str(&format!(
                "  host      the hypervisor took {} from this VM's CPUs (steal time, up to {:.2}% of a window): completions waited meanwhile\n",
                fmt_ns(c.windows_steal_ns.iter().sum::<u64>() as f64),
                c.steal_max_pct,
            ));
        }
        if let Some(l) = &self.pacing_lateness_ns {
            let p = |q: f64| l.p(q).map_or("-".into(), |v| fmt_ns(v as f64));
            s.push_str(&format!(
                "  pacing    submitted after the due time by p50 {}  p99 {}  max {}\n",
                p(50.0),
                p(99.0),
                fmt_ns(l.max_ns as f64)
            ));
        }
        if let Some(ks) = &c.ks {
            s.push_str(&format!(
                "  poisson   KS D {:.4}  p {:.3}  n {}  {}\n",
                ks.d,
                ks.p_value,
                ks.n,
                if ks.pass {
                    "exponential (not rejected at 1%)"
                } else {
                    "NOT exponential"
                }
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thesis_formula() {
        // 1000 blocks of 4 KiB in 500 commands over 2 s:
        // (4096000 + 500 * 80) / 2 = 2068000 B/s.
        assert_eq!(thesis_bandwidth(1000, 500, 4096, 2.0), 2_068_000.0);
        // Flush: commands only.
        assert_eq!(thesis_bandwidth(0, 100, 4096, 1.0), 8_000.0);
        assert_eq!(thesis_bandwidth(1, 1, 4096, 0.0), 0.0);
        let mut t = Totals::default();
        t.add(Op::Read, 32, 32 * 4096);
        t.add(Op::Read, 32, 32 * 4096);
        assert_eq!(t.total_bytes, 64 * 4096 + 160);
        let r = Rates::of(&t, 4096, 1_000_000_000);
        assert_eq!(r.combined_bw_bytes, (64 * 4096 + 160) as f64);
        assert_eq!(r.command_bw_bytes, 160.0);
        assert_eq!(r.iops, 2.0);
    }

    #[test]
    fn bytes_count_in_the_direction_of_their_command() {
        let mut t = Totals::default();
        t.add(Op::Read, 2, 8192);
        t.add(Op::Write, 1, 4096);
        t.add(Op::Noop, 0, 0);
        let mut all = Totals::default();
        all.merge(&t);
        all.merge(&t);
        assert_eq!(
            (all.storage_read_bytes, all.storage_write_bytes),
            (16384, 8192)
        );
        assert_eq!(all.data_bytes, 16384 + 8192);
        let r = LoadResult {
            totals: all,
            storage_read_bytes: all.storage_read_bytes,
            storage_write_bytes: all.storage_write_bytes,
            ..LoadResult::default()
        };
        let text = r.text(4096);
        assert!(
            text.contains(
                "  memory    the device wrote 16.00 KiB into memory and read 8.00 KiB from it\n"
            ),
            "{text}"
        );
        // One direction alone: no line of its own.
        let r = LoadResult {
            storage_read_bytes: 4096,
            ..LoadResult::default()
        };
        assert!(!r.text(4096).contains("  memory "));
    }

    /// The summary shows what the result says the engine's commands
    /// carried, whatever the engine is called.
    #[test]
    fn the_summary_follows_the_traffic_the_result_reports() {
        let mut t = Totals::default();
        t.add(Op::Read, 2, 8192);
        let r = |engine: &str, moves_data: bool, nvme_commands: bool| LoadResult {
            engine: engine.into(),
            traffic: Traffic {
                moves_data,
                nvme_commands,
            },
            totals: t,
            rates: Rates::of(&t, 4096, 1_000_000_000),
            ..LoadResult::default()
        };
        let quiet = r("idle", false, false).text(4096);
        assert!(
            quiet.contains(
                "  commands 1  errors 0  (commands only: the idle engine moves no bytes)\n"
            ),
            "{quiet}"
        );
        assert!(quiet.contains("  commands             1/s\n"), "{quiet}");
        assert!(!quiet.contains("  data "), "{quiet}");
        // Named like the engine that moves nothing, but reporting data.
        let moving = r("null", true, false).text(4096);
        assert!(moving.contains("  commands 1  blocks 2 of 4.00 KiB  data 8.00 KiB  errors 0\n"));
        assert!(moving.contains("  data          8.00 KiB/s"), "{moving}");
        assert!(!moving.contains("combined"), "{moving}");
        let nvme = r("passthrough", true, true).text(4096);
        assert!(
            nvme.contains("  commands          80 B/s  (64 B command + 16 B completion each)\n"),
            "{nvme}"
        );
        assert!(nvme.contains("  combined  "), "{nvme}");
    }

    /// Every driver reports the traffic its engine's summary always had:
    /// no data for the null engine, NVMe commands for the NVMe engine.
    #[test]
    fn each_driver_reports_its_engines_traffic() {
        use crate::engine::{driver, EngineKind};
        for kind in [
            EngineKind::IoUring,
            EngineKind::Nvme,
            EngineKind::Null,
            EngineKind::Gpu,
            EngineKind::Rdma,
        ] {
            let t = driver(kind, &Default::default()).traffic();
            let name = kind.as_str();
            assert_eq!(
                (t.moves_data, t.nvme_commands),
                (name != "null", name.starts_with("nvme")),
                "{name}"
            );
        }
    }
}
