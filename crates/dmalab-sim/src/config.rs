//! The simulator's parameters: one serde struct, read from TOML, with
//! presets. Every field is in the result document's `config`.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A bad parameter: names the field, the value and what to do.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// The field (`llc.ways`).
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The largest simulated cache (LLC or DMA cache): 256 MiB is above the
/// LLC slice any one core shares, and keeps the model's own tables (about
/// 24 bytes a line) near 100 MiB per scheme.
pub const MAX_CACHE_BYTES: u64 = 256 << 20;
/// The most cache bytes all the schemes of one run may simulate together
/// (every scheme's machine is alive at once: see `run::compare_source`).
pub const MAX_MODEL_BYTES: u64 = 2 << 30;
/// The largest line and prefetch block.
pub const MAX_LINE_BYTES: u32 = 4096;
/// The most DRAM banks (bank groups x banks per group) and queue entries.
pub const MAX_BANKS: u64 = 4096;
/// The most entries of a DRAM read or write queue.
pub const MAX_QUEUE: u32 = 65536;
/// The most lines one DMA-cache prefetch may ask for.
pub const MAX_PREFETCH_DEGREE: u32 = 1024;
/// The longest hit time or line gap, ns (a millisecond: far beyond any
/// cache; it keeps the picosecond clock far from overflow).
pub const MAX_LATENCY_NS: f64 = 1e6;
/// The longest DRAM clock period, ps, and the most cycles of one timing.
pub const MAX_TCK_PS: u32 = 100_000;
/// The most cycles of one DRAM timing parameter.
pub const MAX_TIMING_CYCLES: u32 = 10_000;

fn err(field: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Replacement policy of a cache.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Replacement {
    /// Least recently used.
    Lru,
    /// The DMA-cache paper's order: an invalid line, else the least recently
    /// used clean line, else the least recently used dirty line.
    CleanFirst,
}

/// The processor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CpuConfig {
    /// Clock, MHz (turns ns into reported cycles).
    pub freq_mhz: u32,
    /// Outstanding CPU read misses (1: an in-order core that waits on each
    /// miss).
    pub outstanding_misses: u32,
}

/// The last-level cache.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LlcConfig {
    /// Capacity, bytes (sets = size / (ways * line); need not be a power of two).
    pub size_bytes: u64,
    /// Associativity.
    pub ways: u32,
    /// Line size, bytes (a power of two).
    pub line_bytes: u32,
    /// Replacement policy.
    pub replacement: Replacement,
    /// Hit latency, ns.
    pub hit_ns: f64,
    /// Ways DMA may allocate into under the shared-cache scheme (DDIO's way
    /// limit; equal to `ways` for an unrestricted shared cache as in DCA).
    pub ddio_ways: u32,
    /// What a core's miss pays on the chip besides the LLC lookup
    /// (`hit_ns`) and the DRAM's own time, ns: the interconnect to the
    /// memory controller and back, the home agent, the controller's front
    /// end. 0: the DRAM's time alone (files older than this field).
    #[serde(default)]
    pub miss_path_ns: f64,
    /// Slices the sets are cut into, a line's slice a fixed pseudo-random
    /// function of its address (1: set = line modulo sets). Must divide the
    /// number of sets.
    #[serde(default = "one")]
    pub slices: u32,
    /// Under `shared`, lines a device writes stay within the `ddio_ways`:
    /// a device write that finds its line in another way moves it into the
    /// DDIO ways (a new allocation there), instead of updating it in place
    /// wherever a core's fill put it.
    #[serde(default)]
    pub io_in_ddio_ways: bool,
}

fn one() -> u32 {
    1
}

/// The dedicated DMA cache (schemes `dma-cache-*`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DmaCacheConfig {
    /// Associativity.
    pub ways: u32,
    /// Replacement policy.
    pub replacement: Replacement,
    /// Hit latency, ns.
    pub hit_ns: f64,
    /// Lines fetched ahead of a DMA read by the prefetching variant.
    pub prefetch_degree: u32,
    /// Prefetches never cross a block of this many bytes (a page).
    pub prefetch_block_bytes: u64,
}

/// The DMA engine.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DmaConfig {
    /// Outstanding DMA read misses (writes are posted).
    pub outstanding_reads: u32,
    /// Gap between the line references the simulator generates for a whole
    /// transfer (`xfer` record), ns.
    pub line_gap_ns: f64,
}

/// Row-buffer policy.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PagePolicy {
    /// Rows stay open until a conflict.
    Open,
    /// Every access precharges its row (auto-precharge).
    Closed,
}

/// Command scheduler.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// Among the commands that can issue now: row hits (column commands)
    /// first, then the oldest request's command; a row with hits waiting is
    /// not precharged (up to `dram.row_hit_cap` hits).
    FrFcfs,
    /// Among the commands that can issue now, the oldest request's command.
    Fcfs,
}

/// When the controller serves the write queue instead of the read queue.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// Write mode starts when the write queue holds `write_high_watermark`,
    /// or when no read waits and more than `write_low_watermark` writes do;
    /// it ends when the write queue is empty, or at the low watermark with
    /// reads waiting. Below the low watermark, writes wait for company
    /// (until the end of the trace).
    #[default]
    Watermark,
    /// Ramulator 2's rule: write mode also starts whenever no read waits
    /// (and a write does); it ends as with `watermark`.
    Ramulator,
    /// No write mode: reads and writes are scheduled together, a write as
    /// soon as it is the oldest ready command (or a ready row hit).
    Drain,
}

/// DRAM timing, in memory clock cycles (tCK).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DramTiming {
    /// Clock period, picoseconds.
    pub tck_ps: u32,
    /// CAS (read) latency.
    pub cl: u32,
    /// CAS write latency.
    pub cwl: u32,
    /// ACT to CAS.
    pub trcd: u32,
    /// PRE to ACT.
    pub trp: u32,
    /// ACT to PRE.
    pub tras: u32,
    /// Data burst on the bus (BL/2).
    pub burst: u32,
    /// CAS to CAS, different bank group.
    pub tccd_s: u32,
    /// CAS to CAS, same bank group.
    pub tccd_l: u32,
    /// Write recovery (end of write data to PRE).
    pub twr: u32,
    /// End of write data to a read CAS, different bank group.
    pub twtr_s: u32,
    /// End of write data to a read CAS, same bank group (equal to `twtr_s`
    /// when the standard has no bank groups, or to model one tWTR).
    pub twtr_l: u32,
    /// Read CAS to PRE.
    pub trtp: u32,
    /// ACT to ACT, different bank group (0: not enforced).
    pub trrd_s: u32,
    /// ACT to ACT, same bank group (0: not enforced).
    pub trrd_l: u32,
    /// Window in which at most four ACTs may issue (0: not enforced).
    pub tfaw: u32,
    /// All-bank refresh cycle time: REF to the next ACT.
    pub trfc: u32,
    /// Average refresh interval (0: no refresh).
    pub trefi: u32,
}

/// The DRAM channel and its controller.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DramConfig {
    /// Preset these values started from (`ddr4-3200`, `ddr5-4800`, `ddr2-800`).
    pub preset: String,
    /// Timing.
    pub timing: DramTiming,
    /// Bank groups (1 when the standard has none).
    pub bank_groups: u32,
    /// Banks per bank group.
    pub banks_per_group: u32,
    /// Bytes in one row across the rank (the row buffer).
    pub row_bytes: u32,
    /// Row-buffer policy.
    pub page_policy: PagePolicy,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Address mapping, most significant field first, `-` separated, from
    /// `ro` (row), `ba` (bank), `bg` (bank group), `co` (column above the
    /// line offset). `ro-ba-bg-co` keeps a row's lines together;
    /// `ro-co-ba-bg` spreads consecutive lines over banks.
    pub mapping: String,
    /// XOR the bank and bank-group bits with the low row bits
    /// (permutation-based interleaving).
    #[serde(default)]
    pub bank_xor: bool,
    /// Read queue entries.
    pub read_queue: u32,
    /// Write queue entries.
    pub write_queue: u32,
    /// Writes are served ahead of reads once the write queue holds this
    /// many (with `write_low_watermark = 0`, 1 drains writes as they come).
    pub write_high_watermark: u32,
    /// Write mode ends at this many when reads wait; with no read waiting,
    /// more than this many writes start write mode.
    pub write_low_watermark: u32,
    /// When writes are served ahead of reads.
    #[serde(default)]
    pub write_policy: WritePolicy,
    /// With FR-FCFS, the most column commands a row serves after its ACT
    /// while a request to another row of the bank waits; then no more hits
    /// to it are scheduled and the waiting request's PRE goes next
    /// (DRAMsim3 uses 4). 0: no cap (as Ramulator 2).
    #[serde(default)]
    pub row_hit_cap: u32,
    /// At most one command (ACT, PRE, RD, WR, REF) per clock on the command
    /// bus.
    #[serde(default = "yes")]
    pub command_bus_limit: bool,
}

fn yes() -> bool {
    true
}

impl DramConfig {
    /// A preset by name: `ddr4-3200`, `ddr5-4800`, `ddr2-800`.
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let (timing, bank_groups, banks_per_group, row_bytes) = match name {
            // JEDEC DDR4-3200AA (22-22-22), x8 8 Gb devices, 8-chip rank: 1
            // KiB page a chip, 8 KiB a rank. JESD79-4 speed bin and AC
            // timing tables (as in Micron's 8Gb DDR4 x8 datasheet,
            // MT40A1G8): tRRD_S 4 nCK, tRRD_L max(4 nCK, 4.9 ns) = 8,
            // tFAW (1 KiB page) 21 ns = 34, tWTR_S max(2 nCK, 2.5 ns) = 4,
            // tWTR_L max(4 nCK, 7.5 ns) = 12, tRFC1 (8 Gb) 350 ns = 560,
            // tREFI 7.8 us = 12480. DRAMsim3's DDR4_8Gb_x8_3200.ini has the
            // same values; Ramulator 2's DDR4_3200AA too, but tRFC 360 ns.
            "ddr4-3200" => (
                DramTiming {
                    tck_ps: 625,
                    cl: 22,
                    cwl: 16,
                    trcd: 22,
                    trp: 22,
                    tras: 52,
                    burst: 4,
                    tccd_s: 4,
                    tccd_l: 8,
                    twr: 24,
                    twtr_s: 4,
                    twtr_l: 12,
                    trtp: 12,
                    trrd_s: 4,
                    trrd_l: 8,
                    tfaw: 34,
                    trfc: 560,
                    trefi: 12480,
                },
                4,
                4,
                8192,
            ),
            // JEDEC DDR5-4800B (40-39-39), one 32-bit sub-channel of x8
            // devices: 4 chips, 4 KiB a row; BL16 moves a 64-byte line.
            // JESD79-5 (as in Micron's 16Gb DDR5 datasheet): tRRD_S 8 nCK,
            // tRRD_L max(8 nCK, 5 ns) = 12, tFAW (1 KiB page) 32 nCK,
            // tWTR_S max(4 nCK, 2.5 ns) = 6, tWTR_L max(16 nCK, 10 ns) =
            // 24, tRFC1 (16 Gb) 295 ns = 710, tREFI 3.9 us = 9375 (all-bank
            // refresh; DDR5's same-bank refresh is not modelled).
            "ddr5-4800" => (
                DramTiming {
                    tck_ps: 416,
                    cl: 40,
                    cwl: 38,
                    trcd: 39,
                    trp: 39,
                    tras: 77,
                    burst: 8,
                    tccd_s: 8,
                    tccd_l: 12,
                    twr: 72,
                    twtr_s: 6,
                    twtr_l: 24,
                    trtp: 18,
                    trrd_s: 8,
                    trrd_l: 12,
                    tfaw: 32,
                    trfc: 710,
                    trefi: 9375,
                },
                8,
                4,
                4096,
            ),
            // DDR2-800 (5-5-5), the paper's memory generation; 8 banks, no
            // bank groups, 8 KiB rank rows. JESD79-2F, 1 Gb x8 (1 KiB
            // page): tRRD 7.5 ns = 3, tFAW 37.5 ns = 15, tWTR 7.5 ns = 3,
            // tRFC 127.5 ns = 51, tREFI 7.8 us = 3120.
            "ddr2-800" => (
                DramTiming {
                    tck_ps: 2500,
                    cl: 5,
                    cwl: 4,
                    trcd: 5,
                    trp: 5,
                    tras: 18,
                    burst: 4,
                    tccd_s: 2,
                    tccd_l: 2,
                    twr: 6,
                    twtr_s: 3,
                    twtr_l: 3,
                    trtp: 3,
                    trrd_s: 3,
                    trrd_l: 3,
                    tfaw: 15,
                    trfc: 51,
                    trefi: 3120,
                },
                1,
                8,
                8192,
            ),
            other => {
                return Err(err(
                    "dram.preset",
                    format!("unknown preset '{other}'; use ddr4-3200, ddr5-4800 or ddr2-800"),
                ))
            }
        };
        Ok(DramConfig {
            preset: name.into(),
            timing,
            bank_groups,
            banks_per_group,
            row_bytes,
            page_policy: PagePolicy::Open,
            scheduler: Scheduler::FrFcfs,
            mapping: "ro-ba-bg-co".into(),
            bank_xor: false,
            read_queue: 32,
            write_queue: 32,
            write_high_watermark: 24,
            write_low_watermark: 8,
            write_policy: WritePolicy::Watermark,
            row_hit_cap: 0,
            command_bus_limit: true,
        })
    }
}

/// Everything the simulator needs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Processor.
    pub cpu: CpuConfig,
    /// Last-level cache.
    pub llc: LlcConfig,
    /// Dedicated DMA cache (size comes from the scheme).
    pub dma_cache: DmaCacheConfig,
    /// DMA engine.
    pub dma: DmaConfig,
    /// Memory.
    pub dram: DramConfig,
}

/// The committed parameter set for the DMA-cache paper comparison
/// (`params/paper.toml`).
pub const PAPER_TOML: &str = include_str!("../params/paper.toml");

impl SimConfig {
    /// A modern server-like default: an 11-way 2.75 MiB LLC (two of
    /// Skylake-SP's 1.375 MiB slices) of which DMA may fill 2 ways (DDIO's
    /// default), DDR4-3200, an in-order 3 GHz core.
    pub fn modern() -> Self {
        SimConfig {
            cpu: CpuConfig {
                freq_mhz: 3000,
                outstanding_misses: 1,
            },
            llc: LlcConfig {
                size_bytes: 11 * 4096 * 64,
                ways: 11,
                line_bytes: 64,
                replacement: Replacement::Lru,
                // Skylake-SP's L3: 77 cycles load-to-use (AnandTech, "The
                // Intel Skylake-X Review", 2017, cache table), 19-22 ns at
                // its 3.5-4 GHz turbo clocks.
                hit_ns: 20.0,
                ddio_ways: 2,
                // Idle load-to-use from local DRAM on Skylake-SP is about
                // 90 ns (AnandTech, "Sizing Up Servers: Intel's Skylake-SP
                // Xeon versus AMD's EPYC 7000", 2017, LMBench random loads
                // over 384-512 MB: 89-98 ns; the DDIO article: 60-100 ns
                // per memory access). Less the L3 lookup (20 ns) and the
                // DRAM's closed-bank read (tRCD + CL + burst, 30 ns at
                // DDR4-3200, 31.5 ns at the DDR4-2666 of that test), 40 ns
                // remain for the mesh, the home agent and the controller's
                // front end.
                miss_path_ns: 40.0,
                // Two of Skylake-SP's 1.375 MiB slices.
                slices: 2,
                // Skylake-SP's L3 is non-inclusive: a line a core reads
                // moves to its L2 (or, per Park et al., "A4", 2025, to
                // the LLC's non-DDIO ways), and the device's next write
                // to it allocates in the DDIO ways again (Farshin et al.,
                // ATC '20, section 2).
                io_in_ddio_ways: true,
            },
            dma_cache: DmaCacheConfig {
                ways: 8,
                replacement: Replacement::CleanFirst,
                hit_ns: 20.0,
                prefetch_degree: 4,
                prefetch_block_bytes: 4096,
            },
            dma: DmaConfig {
                outstanding_reads: 1,
                line_gap_ns: 0.0,
            },
            dram: DramConfig::preset("ddr4-3200").expect("built-in preset"),
        }
    }

    /// The committed paper parameter set.
    pub fn paper() -> Self {
        Self::from_toml(PAPER_TOML).expect("params/paper.toml is valid")
    }

    /// A named preset: `paper` or `modern`.
    pub fn named(name: &str) -> Result<Self, ConfigError> {
        match name {
            "paper" => Ok(Self::paper()),
            "modern" => Ok(Self::modern()),
            o => Err(err(
                "--params",
                format!("unknown preset '{o}'; use paper, modern or a TOML file"),
            )),
        }
    }

    /// The parameters as a TOML file.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }

    /// Parses and checks a TOML parameter file.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let c: SimConfig = toml::from_str(text).map_err(|e| err("params", e.to_string()))?;
        c.validate()?;
        Ok(c)
    }

    /// Sets one field by its dotted path (`llc.size_bytes`) from text and
    /// checks the result; sizes (`*_bytes`) take suffixes (`4M`),
    /// `dram.preset` loads that preset's timing and geometry. To set
    /// several fields that only make sense together, use
    /// [`SimConfig::set_all`].
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.set_all([(key, value)])
    }

    /// Sets several fields (as [`SimConfig::set`]) and checks the result
    /// once, after all of them: their order does not matter
    /// (`llc.ways=1` with `llc.ddio_ways=1` in either order). Nothing
    /// changes when one fails.
    pub fn set_all<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), ConfigError> {
        let mut c = self.clone();
        for (k, v) in pairs {
            c.apply(k, v)?;
        }
        c.validate()?;
        *self = c;
        Ok(())
    }

    /// Sets one field without checking the whole set.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        if key == "dram.preset" {
            let keep = self.dram.clone();
            let mut d = DramConfig::preset(value)?;
            d.page_policy = keep.page_policy;
            d.scheduler = keep.scheduler;
            d.mapping = keep.mapping;
            d.bank_xor = keep.bank_xor;
            d.read_queue = keep.read_queue;
            d.write_queue = keep.write_queue;
            d.write_high_watermark = keep.write_high_watermark;
            d.write_low_watermark = keep.write_low_watermark;
            d.write_policy = keep.write_policy;
            d.row_hit_cap = keep.row_hit_cap;
            d.command_bus_limit = keep.command_bus_limit;
            self.dram = d;
            return Ok(());
        }
        let mut v = serde_json::to_value(&*self).map_err(|e| err(key, e.to_string()))?;
        let mut slot = &mut v;
        for part in key.split('.') {
            slot = slot.get_mut(part).ok_or_else(|| {
                err(
                    key,
                    "no such parameter; see `dmalab sim params` for the names".to_string(),
                )
            })?;
        }
        let new = if key.ends_with("_bytes") {
            parse_size(value)
                .ok_or_else(|| {
                    err(
                        key,
                        format!("'{value}' is not a size; use bytes with K, M or G"),
                    )
                })?
                .into()
        } else if slot.is_number() {
            if let Ok(i) = value.parse::<u64>() {
                i.into()
            } else {
                let f: f64 = value
                    .parse()
                    .map_err(|_| err(key, format!("'{value}' is not a number")))?;
                serde_json::Value::from(f)
            }
        } else if slot.is_boolean() {
            match value {
                "true" => true.into(),
                "false" => false.into(),
                _ => return Err(err(key, format!("'{value}': use true or false"))),
            }
        } else {
            serde_json::Value::String(value.to_string())
        };
        *slot = new;
        let c: SimConfig =
            serde_json::from_value(v).map_err(|e| err(key, format!("'{value}': {e}")))?;
        *self = c;
        Ok(())
    }

    /// Checks the values that the model cannot run with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = &self.llc;
        if !l.line_bytes.is_power_of_two() || l.line_bytes < 8 {
            return Err(err("llc.line_bytes", "must be a power of two, at least 8"));
        }
        if l.ways == 0 || l.ways > 64 {
            return Err(err("llc.ways", "must be 1 to 64"));
        }
        if l.line_bytes > MAX_LINE_BYTES {
            return Err(err(
                "llc.line_bytes",
                format!("must be at most {MAX_LINE_BYTES}"),
            ));
        }
        if l.size_bytes < l.ways as u64 * l.line_bytes as u64 {
            return Err(err("llc.size_bytes", "must hold at least one set"));
        }
        if l.size_bytes > MAX_CACHE_BYTES {
            return Err(err(
                "llc.size_bytes",
                format!(
                    "{} is more than the limit of 256M; use at most 256M",
                    l.size_bytes
                ),
            ));
        }
        if self.cpu.freq_mhz > 100_000 {
            return Err(err("cpu.freq_mhz", "must be at most 100000"));
        }
        if self.dma_cache.prefetch_degree > MAX_PREFETCH_DEGREE {
            return Err(err(
                "dma_cache.prefetch_degree",
                format!("must be at most {MAX_PREFETCH_DEGREE}"),
            ));
        }
        if self.dma_cache.prefetch_block_bytes > u64::from(MAX_LINE_BYTES) * 1024 {
            return Err(err("dma_cache.prefetch_block_bytes", "must be at most 4M"));
        }
        if l.ddio_ways == 0 || l.ddio_ways > l.ways {
            return Err(err(
                "llc.ddio_ways",
                format!("must be 1 to llc.ways ({})", l.ways),
            ));
        }
        if self.cpu.outstanding_misses == 0 || self.cpu.outstanding_misses > 64 {
            return Err(err("cpu.outstanding_misses", "must be 1 to 64"));
        }
        if self.dma.outstanding_reads == 0 || self.dma.outstanding_reads > 64 {
            return Err(err("dma.outstanding_reads", "must be 1 to 64"));
        }
        if self.cpu.freq_mhz == 0 {
            return Err(err("cpu.freq_mhz", "must be positive"));
        }
        if self.dma_cache.ways == 0 || self.dma_cache.ways > 64 {
            return Err(err("dma_cache.ways", "must be 1 to 64"));
        }
        let sets = l.size_bytes / (u64::from(l.ways) * u64::from(l.line_bytes));
        if l.slices == 0 || u64::from(l.slices) > sets || !sets.is_multiple_of(u64::from(l.slices))
        {
            return Err(err(
                "llc.slices",
                format!("must divide the LLC's {sets} sets (1 for none)"),
            ));
        }
        for (f, v) in [
            ("llc.miss_path_ns", l.miss_path_ns),
            ("llc.hit_ns", l.hit_ns),
            ("dma_cache.hit_ns", self.dma_cache.hit_ns),
            ("dma.line_gap_ns", self.dma.line_gap_ns),
        ] {
            if !(v.is_finite() && (0.0..=MAX_LATENCY_NS).contains(&v)) {
                return Err(err(f, "must be a number of ns from 0 to 1e6"));
            }
        }
        self.validate_dram()
    }

    /// Checks the DRAM's organisation, timing and queues (after the caches:
    /// a row holds at least one LLC line).
    fn validate_dram(&self) -> Result<(), ConfigError> {
        let l = &self.llc;
        let d = &self.dram;
        if d.bank_groups == 0 || !d.bank_groups.is_power_of_two() {
            return Err(err("dram.bank_groups", "must be a power of two"));
        }
        if d.banks_per_group == 0 || !d.banks_per_group.is_power_of_two() {
            return Err(err("dram.banks_per_group", "must be a power of two"));
        }
        if !d.row_bytes.is_power_of_two() || d.row_bytes < l.line_bytes {
            return Err(err(
                "dram.row_bytes",
                "must be a power of two and at least one line",
            ));
        }
        if d.timing.tck_ps == 0 || d.timing.burst == 0 {
            return Err(err("dram.timing", "tck_ps and burst must be positive"));
        }
        if d.timing.tck_ps > MAX_TCK_PS {
            return Err(err(
                "dram.timing.tck_ps",
                format!("must be at most {MAX_TCK_PS}"),
            ));
        }
        let t = &d.timing;
        for (f, v) in [
            ("cl", t.cl),
            ("cwl", t.cwl),
            ("trcd", t.trcd),
            ("trp", t.trp),
            ("tras", t.tras),
            ("burst", t.burst),
            ("tccd_s", t.tccd_s),
            ("tccd_l", t.tccd_l),
            ("twr", t.twr),
            ("twtr_s", t.twtr_s),
            ("twtr_l", t.twtr_l),
            ("trtp", t.trtp),
            ("trrd_s", t.trrd_s),
            ("trrd_l", t.trrd_l),
            ("tfaw", t.tfaw),
            ("trfc", t.trfc),
        ] {
            if v > MAX_TIMING_CYCLES {
                return Err(err(
                    &format!("dram.timing.{f}"),
                    format!("must be at most {MAX_TIMING_CYCLES} cycles"),
                ));
            }
        }
        if t.trefi > 0 && t.trefi <= t.trfc + t.trp {
            return Err(err(
                "dram.timing.trefi",
                "must exceed trfc + trp (or be 0 for no refresh)",
            ));
        }
        if t.trefi > 100 * MAX_TIMING_CYCLES {
            return Err(err(
                "dram.timing.trefi",
                format!("must be at most {} cycles", 100 * MAX_TIMING_CYCLES),
            ));
        }
        crate::dram::Mapping::parse(&d.mapping).map_err(|m| err("dram.mapping", m))?;
        if u64::from(d.bank_groups) * u64::from(d.banks_per_group) > MAX_BANKS {
            return Err(err(
                "dram.bank_groups",
                format!("bank_groups x banks_per_group must be at most {MAX_BANKS}"),
            ));
        }
        if d.read_queue == 0 || d.write_queue == 0 {
            return Err(err("dram.read_queue", "queues need at least one entry"));
        }
        for (f, v) in [
            ("dram.read_queue", d.read_queue),
            ("dram.write_queue", d.write_queue),
        ] {
            if v > MAX_QUEUE {
                return Err(err(f, format!("must be at most {MAX_QUEUE}")));
            }
        }
        if d.write_high_watermark == 0 || d.write_high_watermark > d.write_queue {
            return Err(err(
                "dram.write_high_watermark",
                format!("must be 1 to dram.write_queue ({})", d.write_queue),
            ));
        }
        if d.write_low_watermark >= d.write_high_watermark {
            return Err(err(
                "dram.write_low_watermark",
                "must be below dram.write_high_watermark",
            ));
        }
        Ok(())
    }
}

/// `4096`, `4K`, `1M`, `1.5M` (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suf) = t.split_at(split);
    let mult: u64 = match suf {
        "" | "B" => 1,
        "K" | "k" | "KiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        "G" | "g" | "GiB" => 1 << 30,
        _ => return None,
    };
    if num.contains('.') {
        let v: f64 = num.parse().ok()?;
        let b = v * mult as f64;
        (b.fract() == 0.0 && b >= 0.0 && b < u64::MAX as f64).then_some(b as u64)
    } else {
        num.parse::<u64>().ok()?.checked_mul(mult)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate_and_set_works() {
        SimConfig::modern().validate().unwrap();
        let mut p = SimConfig::paper();
        p.set("llc.size_bytes", "4M").unwrap();
        // Issue 14 item 7: a huge simulated size exhausted memory.
        for (k, v) in [
            ("llc.size_bytes", "1T"),
            ("llc.size_bytes", "18446744073709551615"),
            ("dram.read_queue", "4294967295"),
            ("dram.bank_groups", "1073741824"),
            ("llc.hit_ns", "1e308"),
            ("dma_cache.prefetch_degree", "4294967295"),
        ] {
            assert!(p.clone().set(k, v).is_err(), "{k}={v}");
        }
        assert_eq!(p.llc.size_bytes, 4 << 20);
        p.set("dram.preset", "ddr5-4800").unwrap();
        assert_eq!(p.dram.timing.cl, 40);
        p.set("dram.page_policy", "closed").unwrap();
        assert_eq!(p.dram.page_policy, PagePolicy::Closed);
        p.set("llc.hit_ns", "12.5").unwrap();
        assert_eq!(p.llc.hit_ns, 12.5);
        assert!(p
            .set("llc.nope", "1")
            .unwrap_err()
            .message
            .contains("no such"));
        assert!(p.set("llc.ways", "0").is_err());
        assert!(p.set("dram.mapping", "ro-xx").is_err());
        // Booleans (the docs' `--set dram.bank_xor=true`).
        p.set("dram.bank_xor", "true").unwrap();
        assert!(p.dram.bank_xor);
        p.set("dram.bank_xor", "false").unwrap();
        assert!(!p.dram.bank_xor);
        assert!(p
            .set("dram.bank_xor", "yes")
            .unwrap_err()
            .message
            .contains("true or false"));
    }
}
