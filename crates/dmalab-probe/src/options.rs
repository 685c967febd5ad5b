//! The options of `dmalab probe` as given, and their validation into the
//! resolved plans ([`LatencyPlan`], [`BandwidthPlan`], [`LoadedPlan`]).
//!
//! The binary reads its flags into these structs (with the `clap` feature
//! they are clap argument groups, their doc comments the help) and calls
//! `validate()`: every rule about the options, and every message naming a
//! flag, is here. Sizes and durations stay text until here so that a
//! message can quote what the user typed.

use crate::access::Pattern;
use crate::bandwidth::{Access, BandwidthPlan, Traffic};
use crate::latency::{LatencyPlan, Mode};
use crate::loaded::LoadedPlan;
use crate::mem::{node_cpus, numa_nodes, PageKind, LINE};
use dmalab_core::cpus::{allowed_cpus, format_cpu_list, parse_cpu_list};
use dmalab_core::units::{parse_duration, parse_size};
use dmalab_core::UsageError;

/// The most clock/per-access rounds: each keeps its figures, and a round
/// needs some time of its own.
pub const MAX_ROUNDS: usize = 10_000;

/// The most pages per chain group (`--group-pages`): 2^24, 64 GiB of 4 KiB
/// pages, more than any buffer the probe maps; the lines per group
/// (pages x lines per page) then fit a `usize` for any page size.
pub const MAX_GROUP_PAGES: usize = 1 << 24;

/// The longest spin after each line (`--delay`, `--delays`), cycles. The
/// bandwidth workers look at the clock once per chunk of 4096 lines, so
/// the spin bounds how far a run overshoots its run time: at this bound a
/// chunk spins about 4e8 cycles (a fraction of a second); at u32::MAX it
/// spun for hours past a 20 ms --runtime.
pub const MAX_DELAY_CYCLES: u32 = 100_000;

fn delay_cycles(option: &str, d: u32) -> Result<u32, UsageError> {
    if d > MAX_DELAY_CYCLES {
        return Err(UsageError::new(
            option,
            format!("{d} cycles is out of range; use 0 to {MAX_DELAY_CYCLES}"),
        ));
    }
    Ok(d)
}

/// `--group-pages` checked against [`MAX_GROUP_PAGES`]. A value past it
/// overflowed the lines-per-group product in a probe thread, whose panic
/// left the main thread waiting on the start barrier forever.
fn group_pages(n: usize) -> Result<usize, UsageError> {
    if n > MAX_GROUP_PAGES {
        return Err(UsageError::new(
            "--group-pages",
            format!(
                "{n} is out of range; use 0 (one group over the whole buffer) to {MAX_GROUP_PAGES}"
            ),
        ));
    }
    Ok(n)
}

/// The shortest `--interval`, ns.
const MIN_INTERVAL_NS: u64 = 10_000_000;

/// Where threads run and memory lives (`--pages`, `--cpus-allowed`,
/// `--membind`, `--cpunodebind`, `--oversubscribe`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Placement {
    /// Pages backing the buffers: 4k, thp (transparent huge pages via
    /// madvise), 2m or 1g (hugetlbfs; the pool is raised for the run and
    /// restored afterwards).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            ignore_case = true,
            default_value = "4k",
            value_name = "KIND"
        )
    )]
    pub pages: PageKind,
    /// CPUs to pin threads to, in order (e.g. 0-3,6); default: the CPUs
    /// this process may use (those of --cpunodebind when given).
    #[cfg_attr(feature = "clap", arg(long, value_name = "LIST"))]
    pub cpus_allowed: Option<String>,
    /// Bind the buffers to this NUMA node (mbind MPOL_BIND).
    #[cfg_attr(feature = "clap", arg(long, value_name = "NODE"))]
    pub membind: Option<usize>,
    /// Run the threads on this NUMA node's CPUs.
    #[cfg_attr(feature = "clap", arg(long, value_name = "NODE"))]
    pub cpunodebind: Option<usize>,
    /// Allow more threads than CPUs (they then share CPUs, and figures
    /// suffer).
    #[cfg_attr(feature = "clap", arg(long))]
    pub oversubscribe: bool,
}

/// `dmalab probe latency`'s options. Sizes and durations are kept as typed
/// so that a message can quote them.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct LatencyOptions {
    /// Buffer size per thread (e.g. 32K, 256M, 1G).
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "256M", value_name = "SIZE")
    )]
    pub size: String,
    /// Access pattern: chase, uniform, sequential, normal, pareto, zipf.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "chase", value_name = "NAME")
    )]
    pub pattern: String,
    /// Shape of normal (sd as a fraction of the buffer, default 0.1), pareto
    /// (alpha, 1.16) and zipf (s, 1.0).
    #[cfg_attr(feature = "clap", arg(long, value_name = "X"))]
    pub shape: Option<f64>,
    /// Stride of --pattern sequential, bytes (multiple of 64).
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "64", value_name = "BYTES")
    )]
    pub stride: String,
    /// Pages per chain group: lines are permuted within a group of this many
    /// pages, groups visited in random order; 0 = one group over the whole
    /// buffer (TLB-hostile).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 16, value_name = "N"))]
    pub group_pages: usize,
    /// Share of accesses that also write the line, percent (0-100).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0, value_name = "PCT"))]
    pub write_pct: u32,
    /// Probe threads, each with its own buffer, pinned one per CPU.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, value_name = "N"))]
    pub threads: usize,
    /// Timing: per-access (histogram), clock (mean only), or both
    /// (alternating rounds on the same chain).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, default_value = "per-access", value_name = "MODE")
    )]
    pub mode: Mode,
    /// Rounds of clock/per-access in --mode both.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, value_name = "N"))]
    pub rounds: usize,
    /// How long to measure (after setup).
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "5s", value_name = "DURATION")
    )]
    pub runtime: String,
    /// Print percentiles every DURATION while running (e.g. 1s), and keep
    /// them in the result.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION"))]
    pub interval: Option<String>,
    /// Seed of the chain and patterns.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub seed: u64,
    /// Placement.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub place: Placement,
}

/// `dmalab probe bandwidth`'s options.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct BandwidthOptions {
    /// Traffic: R, W2 (2 reads:1 write), W3 (3:1), W5 (1:1 in place), W6
    /// (non-temporal writes), copy, triad.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            ignore_case = true,
            default_value = "R",
            value_name = "TYPE"
        )
    )]
    pub traffic: Traffic,
    /// Size of each array of each thread.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "128M", value_name = "SIZE")
    )]
    pub size: String,
    /// Threads, pinned one per CPU.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1, value_name = "N"))]
    pub threads: usize,
    /// Spin this many cycles (a dec/jnz loop) after every 64-byte line.
    #[cfg_attr(
        feature = "clap",
        arg(long = "delay", default_value_t = 0, value_name = "CYCLES")
    )]
    pub delay_cycles: u32,
    /// How long to measure.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "5s", value_name = "DURATION")
    )]
    pub runtime: String,
    /// Print the bandwidth of every DURATION while running (e.g. 1s).
    #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION"))]
    pub interval: Option<String>,
    /// sequential, or random: blocks of --granularity bytes at random
    /// aligned offsets (MLC's random mode; R, W2, W3, W5 and W6).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, default_value = "sequential", value_name = "MODE")
    )]
    pub access: Access,
    /// With --access random: bytes walked in a row at each random offset
    /// (a multiple of 64; 64 = one cache line).
    #[cfg_attr(feature = "clap", arg(long, default_value = "64", value_name = "SIZE"))]
    pub granularity: String,
    /// Placement.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub place: Placement,
}

/// `dmalab probe loaded`'s options.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct LoadedOptions {
    /// Chase buffer size of the latency thread.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "256M", value_name = "SIZE")
    )]
    pub size: String,
    /// Size of each array of each load thread.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "128M", value_name = "SIZE")
    )]
    pub bw_size: String,
    /// Traffic of the load threads (as in `probe bandwidth`).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            ignore_case = true,
            default_value = "R",
            value_name = "TYPE"
        )
    )]
    pub traffic: Traffic,
    /// Load threads; default: one per remaining CPU (at least one).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub load_threads: Option<usize>,
    /// Delays to sweep, cycles per line, comma separated (an idle point
    /// with no load threads always comes first).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            default_value = "5000,1000,500,200,100,50,20,10,0",
            value_name = "LIST"
        )
    )]
    pub delays: String,
    /// Measuring time per point.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value = "2s", value_name = "DURATION")
    )]
    pub point_runtime: String,
    /// Pages per chain group (0 = whole buffer).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 16, value_name = "N"))]
    pub group_pages: usize,
    /// Seed of the chain.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 1))]
    pub seed: u64,
    /// Placement.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub place: Placement,
}

impl LatencyOptions {
    /// Checks the options and resolves them into a plan.
    pub fn validate(&self) -> Result<LatencyPlan, UsageError> {
        let size_bytes = buffer_size("--size", &self.size)?;
        let stride = usize::try_from(parse_size("--stride", &self.stride)?)
            .map_err(|_| UsageError::new("--stride", "too large"))?;
        let pattern = Pattern::parse(&self.pattern, self.shape, stride)?;
        if self.write_pct > 100 {
            return Err(UsageError::new(
                "--write-pct",
                format!("{} is not a percentage; use 0 to 100", self.write_pct),
            ));
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            return Err(UsageError::new(
                "--rounds",
                format!("{} is out of range; use 1 to {MAX_ROUNDS}", self.rounds),
            ));
        }
        let cpus = self.place.cpus(self.threads, "--threads")?;
        Ok(LatencyPlan {
            size_bytes,
            pages: self.place.pages,
            group_pages: group_pages(self.group_pages)?,
            pattern,
            write_pct: self.write_pct,
            cpus,
            membind: self.place.membind,
            mode: self.mode,
            rounds: self.rounds,
            runtime_ns: runtime("--runtime", &self.runtime)?,
            interval_ns: interval(self.interval.as_deref())?,
            seed: self.seed,
        })
    }
}

impl BandwidthOptions {
    /// Checks the options and resolves them into a plan.
    pub fn validate(&self) -> Result<BandwidthPlan, UsageError> {
        let size_bytes = buffer_size("--size", &self.size)?;
        let cpus = self.place.cpus(self.threads, "--threads")?;
        let granularity_bytes = self.granularity()?;
        if granularity_bytes > size_bytes {
            return Err(UsageError::new(
                "--granularity",
                format!(
                    "{granularity_bytes} bytes is more than an array (--size {}); use at most the array's size",
                    self.size
                ),
            ));
        }
        if self.access == Access::Random && matches!(self.traffic, Traffic::Copy | Traffic::Triad) {
            return Err(UsageError::new(
                "--access",
                format!(
                    "random access is for MLC's traffic types (R, W2, W3, W5, W6), not {}; use --access sequential",
                    self.traffic.name()
                ),
            ));
        }
        Ok(BandwidthPlan {
            access: self.access,
            granularity_bytes,
            traffic: self.traffic,
            size_bytes,
            pages: self.place.pages,
            cpus,
            membind: self.place.membind,
            delay_cycles: delay_cycles("--delay", self.delay_cycles)?,
            runtime_ns: runtime("--runtime", &self.runtime)?,
            interval_ns: interval(self.interval.as_deref())?,
        })
    }
}

impl BandwidthOptions {
    /// `--granularity`, bytes: a multiple of 64, at least 64.
    fn granularity(&self) -> Result<usize, UsageError> {
        let g = dmalab_core::units::parse_size("--granularity", &self.granularity)?;
        if g == 0 || g % LINE as u64 != 0 {
            return Err(UsageError::new(
                "--granularity",
                format!("{g} bytes is not a whole number of 64-byte lines; use 64, 128, 4K, ..."),
            ));
        }
        usize::try_from(g).map_err(|_| UsageError::new("--granularity", "too large"))
    }
}

impl LoadedOptions {
    /// Checks the options and resolves them into a plan.
    pub fn validate(&self) -> Result<LoadedPlan, UsageError> {
        let size_bytes = buffer_size("--size", &self.size)?;
        let bw_size_bytes = buffer_size("--bw-size", &self.bw_size)?;
        let point_runtime_ns = runtime("--point-runtime", &self.point_runtime)?;
        let delays_cycles = delays(&self.delays)?;
        // CPUs the placement allows, to size the default number of load
        // threads; `cpus` below checks everything.
        let p = &self.place;
        let available = match (&p.cpus_allowed, p.cpunodebind) {
            (Some(l), _) => parse_cpu_list("--cpus-allowed", l)?.len(),
            (None, Some(n)) => node_cpus(n).map_or(1, |c| c.len()),
            (None, None) => allowed_cpus().len(),
        };
        let load_threads = self
            .load_threads
            .unwrap_or(available.saturating_sub(1).max(1));
        if load_threads == 0 {
            return Err(UsageError::new(
                "--load-threads",
                "0 load threads; use at least 1",
            ));
        }
        let cpus = p
            .cpus(load_threads.saturating_add(1), "--load-threads")
            .map_err(|e| {
                UsageError::new(
                    e.option,
                    format!("{} (one CPU goes to the latency thread)", e.message),
                )
            })?;
        Ok(LoadedPlan {
            size_bytes,
            bw_size_bytes,
            pages: p.pages,
            group_pages: group_pages(self.group_pages)?,
            traffic: self.traffic,
            latency_cpu: cpus[0],
            load_cpus: cpus[1..].to_vec(),
            membind: p.membind,
            delays_cycles,
            point_runtime_ns,
            seed: self.seed,
        })
    }
}

impl Placement {
    /// Resolves where `threads` threads run: one CPU each, in order.
    /// `threads_opt` is the flag that set the count.
    pub fn cpus(&self, threads: usize, threads_opt: &str) -> Result<Vec<usize>, UsageError> {
        self.cpus_among(threads, threads_opt, &numa_nodes(), &allowed_cpus())
    }

    /// [`Placement::cpus`] on a host with these online `nodes` and these
    /// CPUs `allowed` to this process.
    fn cpus_among(
        &self,
        threads: usize,
        threads_opt: &str,
        nodes: &[usize],
        allowed: &[usize],
    ) -> Result<Vec<usize>, UsageError> {
        if threads == 0 {
            return Err(UsageError::new(threads_opt, "0 threads; use at least 1"));
        }
        for (opt, node) in [
            ("--membind", self.membind),
            ("--cpunodebind", self.cpunodebind),
        ] {
            if let Some(n) = node {
                if !nodes.contains(&n) {
                    return Err(UsageError::new(
                        opt,
                        format!(
                            "node {n} is not online (this host has node{} {}); choose one of those",
                            if nodes.len() == 1 { "" } else { "s" },
                            format_cpu_list(nodes)
                        ),
                    ));
                }
            }
        }
        let cpus = match (&self.cpus_allowed, self.cpunodebind) {
            (Some(_), Some(_)) => {
                return Err(UsageError::new(
                    "--cpunodebind",
                    "give either --cpus-allowed or --cpunodebind, not both",
                ))
            }
            (Some(list), None) => parse_cpu_list("--cpus-allowed", list)?,
            (None, Some(n)) => {
                let c: Vec<usize> = node_cpus(n)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| allowed.contains(c))
                    .collect();
                if c.is_empty() {
                    return Err(UsageError::new(
                        "--cpunodebind",
                        format!("node {n} has no CPU this process may use; choose another node"),
                    ));
                }
                c
            }
            (None, None) => allowed.to_vec(),
        };
        if threads > cpus.len() && !self.oversubscribe {
            return Err(UsageError::new(
                threads_opt,
                format!(
                    "{threads} threads but only {} CPU(s) available ({}); use at most {}, or add --oversubscribe to share CPUs",
                    cpus.len(),
                    format_cpu_list(&cpus),
                    cpus.len()
                ),
            ));
        }
        // Sharing CPUs has a bound too: thread creation fails far past it.
        dmalab_core::cpus::check_threads(threads_opt, threads)?;
        Ok((0..threads).map(|i| cpus[i % cpus.len()]).collect())
    }
}

/// A buffer size: at least one cache line, at most 128G.
fn buffer_size(option: &str, text: &str) -> Result<usize, UsageError> {
    let s = parse_size(option, text)?;
    if s < LINE as u64 {
        return Err(UsageError::new(
            option,
            format!(
                "{text} is smaller than one 64-byte cache line; use at least 64 bytes (e.g. 32K)"
            ),
        ));
    }
    if s / LINE as u64 >= 1 << 31 {
        return Err(UsageError::new(
            option,
            format!("{text} is too large (at most 128G per buffer)"),
        ));
    }
    usize::try_from(s).map_err(|_| UsageError::new(option, format!("{text} is too large")))
}

/// A measuring time, ns: longer than zero.
fn runtime(option: &str, text: &str) -> Result<u64, UsageError> {
    let d = parse_duration(option, text)?;
    if d.is_zero() {
        return Err(UsageError::new(
            option,
            format!("'{text}' is zero; give a positive duration such as 5s"),
        ));
    }
    Ok(dmalab_core::schema::ns(d))
}

/// `--interval`, ns (0: none): at least 10ms.
fn interval(text: Option<&str>) -> Result<u64, UsageError> {
    let Some(t) = text else { return Ok(0) };
    let ns = runtime("--interval", t)?;
    if ns < MIN_INTERVAL_NS {
        return Err(UsageError::new(
            "--interval",
            format!("'{t}' is shorter than 10ms; use e.g. 1s or 100ms"),
        ));
    }
    Ok(ns)
}

/// `--delays`: cycles per line, comma separated.
fn delays(text: &str) -> Result<Vec<u32>, UsageError> {
    text.split(',')
        .map(|d| {
            let n = d.trim().parse().map_err(|_| {
                UsageError::new(
                    "--delays",
                    format!("'{d}' is not a number of cycles; use e.g. 5000,1000,100,0"),
                )
            })?;
            delay_cycles("--delays", n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Placement {
        Placement {
            pages: PageKind::Small,
            cpus_allowed: None,
            membind: None,
            cpunodebind: None,
            oversubscribe: false,
        }
    }

    fn latency() -> LatencyOptions {
        LatencyOptions {
            size: "1M".into(),
            pattern: "chase".into(),
            shape: None,
            stride: "64".into(),
            group_pages: 16,
            write_pct: 0,
            threads: 1,
            mode: Mode::PerAccess,
            rounds: 1,
            runtime: "1s".into(),
            interval: None,
            seed: 1,
            place: Placement {
                cpus_allowed: Some("0".into()),
                ..place()
            },
        }
    }

    fn option_of<T: std::fmt::Debug>(r: Result<T, UsageError>) -> String {
        r.unwrap_err().option
    }

    #[test]
    fn buffer_sizes_are_a_line_to_128g() {
        assert_eq!(buffer_size("--size", "64").unwrap(), 64);
        let e = buffer_size("--size", "32").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--size: 32 is smaller than one 64-byte cache line; use at least 64 bytes (e.g. 32K)"
        );
        let e = buffer_size("--bw-size", "128G").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--bw-size: 128G is too large (at most 128G per buffer)"
        );
    }

    #[test]
    fn runtimes_are_positive_and_intervals_at_least_10ms() {
        assert_eq!(runtime("--runtime", "2s").unwrap(), 2_000_000_000);
        assert_eq!(
            option_of(runtime("--point-runtime", "0s")),
            "--point-runtime"
        );
        assert_eq!(interval(None).unwrap(), 0);
        assert_eq!(interval(Some("10ms")).unwrap(), 10_000_000);
        let e = interval(Some("1ms")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--interval: '1ms' is shorter than 10ms; use e.g. 1s or 100ms"
        );
    }

    #[test]
    fn delays_are_numbers_of_cycles() {
        assert_eq!(delays("5000, 10,0").unwrap(), vec![5000, 10, 0]);
        assert_eq!(
            delays("0,4294967295").unwrap_err().to_string(),
            "--delays: 4294967295 cycles is out of range; use 0 to 100000"
        );
        let e = delays("5000,fast").unwrap_err();
        assert_eq!(e.option, "--delays");
        assert!(
            e.message.starts_with("'fast' is not a number of cycles"),
            "{e}"
        );
    }

    #[test]
    fn placement_rules() {
        let p = place();
        let e = p.cpus_among(0, "--threads", &[0], &[0, 1]).unwrap_err();
        assert_eq!(e.to_string(), "--threads: 0 threads; use at least 1");
        assert_eq!(
            p.cpus_among(2, "--threads", &[0], &[0, 1]).unwrap(),
            vec![0, 1]
        );
        let e = p.cpus_among(3, "--threads", &[0], &[0, 1]).unwrap_err();
        assert_eq!(e.option, "--threads");
        assert!(e.message.contains("add --oversubscribe"), "{e}");
        let over = Placement {
            oversubscribe: true,
            ..place()
        };
        assert_eq!(
            over.cpus_among(3, "--threads", &[0], &[0, 1]).unwrap(),
            vec![0, 1, 0]
        );
        let bound = Placement {
            membind: Some(4),
            ..place()
        };
        let e = bound.cpus_among(1, "--threads", &[0, 1], &[0]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--membind: node 4 is not online (this host has nodes 0-1); choose one of those"
        );
        let both = Placement {
            cpus_allowed: Some("0".into()),
            cpunodebind: Some(0),
            ..place()
        };
        assert_eq!(
            option_of(both.cpus_among(1, "--threads", &[0], &[0])),
            "--cpunodebind"
        );
        let listed = Placement {
            cpus_allowed: Some("0-1".into()),
            ..place()
        };
        assert_eq!(
            listed.cpus_among(2, "--threads", &[0], &[0]).unwrap(),
            vec![0, 1]
        );
    }

    #[test]
    fn latency_options_resolve_into_a_plan() {
        let plan = latency().validate().unwrap();
        assert_eq!((plan.size_bytes, plan.cpus.clone()), (1 << 20, vec![0]));
        assert_eq!((plan.runtime_ns, plan.interval_ns), (1_000_000_000, 0));
        let e = LatencyOptions {
            write_pct: 101,
            ..latency()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--write-pct: 101 is not a percentage; use 0 to 100"
        );
        for rounds in [0, MAX_ROUNDS + 1] {
            let r = LatencyOptions {
                rounds,
                ..latency()
            };
            assert_eq!(option_of(r.validate()), "--rounds");
        }
        let r = LatencyOptions {
            pattern: "spiral".into(),
            ..latency()
        };
        assert_eq!(option_of(r.validate()), "--pattern");
        let r = LatencyOptions {
            stride: "x".into(),
            ..latency()
        };
        assert_eq!(option_of(r.validate()), "--stride");
        for group_pages in [MAX_GROUP_PAGES + 1, usize::MAX] {
            let r = LatencyOptions {
                group_pages,
                ..latency()
            };
            assert_eq!(option_of(r.validate()), "--group-pages");
        }
        let r = LatencyOptions {
            group_pages: 0,
            ..latency()
        };
        assert_eq!(r.validate().unwrap().group_pages, 0);
    }

    #[test]
    fn bandwidth_and_loaded_options_resolve_into_plans() {
        let place = Placement {
            cpus_allowed: Some("0".into()),
            oversubscribe: true,
            ..place()
        };
        let bw = BandwidthOptions {
            traffic: Traffic::W2,
            size: "1M".into(),
            threads: 1,
            delay_cycles: 0,
            runtime: "1s".into(),
            interval: Some("100ms".into()),
            access: Access::Sequential,
            granularity: "64".into(),
            place: place.clone(),
        };
        assert_eq!(bw.validate().unwrap().interval_ns, 100_000_000);
        let random = BandwidthOptions {
            access: Access::Random,
            granularity: "4K".into(),
            ..bw.clone()
        };
        let p = random.validate().unwrap();
        assert_eq!((p.access, p.granularity_bytes), (Access::Random, 4096));
        for (g, traffic, option) in [
            ("100", Traffic::W2, "--granularity"),
            ("0", Traffic::W2, "--granularity"),
            ("2M", Traffic::W2, "--granularity"),
            ("64", Traffic::Copy, "--access"),
            ("64", Traffic::Triad, "--access"),
        ] {
            let e = BandwidthOptions {
                granularity: g.into(),
                traffic,
                ..random.clone()
            }
            .validate()
            .unwrap_err();
            assert_eq!(e.option, option, "{g} {traffic:?}: {e}");
        }
        let e = BandwidthOptions {
            size: "1".into(),
            ..bw.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.option, "--size");
        let e = BandwidthOptions {
            delay_cycles: u32::MAX,
            ..bw.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.option, "--delay");
        let loaded = LoadedOptions {
            size: "1M".into(),
            bw_size: "1M".into(),
            traffic: Traffic::R,
            load_threads: None,
            delays: "10,0".into(),
            point_runtime: "1s".into(),
            group_pages: 16,
            seed: 1,
            place,
        };
        let plan = loaded.validate().unwrap();
        assert_eq!((plan.latency_cpu, plan.load_cpus.len()), (0, 1));
        assert_eq!(plan.delays_cycles, vec![10, 0]);
        let e = LoadedOptions {
            load_threads: Some(usize::MAX),
            ..loaded.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.option, "--load-threads");
        let e = LoadedOptions {
            load_threads: Some(0),
            ..loaded.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--load-threads: 0 load threads; use at least 1"
        );
        let no_over = LoadedOptions {
            load_threads: Some(1),
            place: Placement {
                oversubscribe: false,
                ..loaded.place.clone()
            },
            ..loaded
        };
        let e = no_over.validate().unwrap_err();
        assert_eq!(e.option, "--load-threads");
        assert!(
            e.message.ends_with("(one CPU goes to the latency thread)"),
            "{e}"
        );
    }
}
