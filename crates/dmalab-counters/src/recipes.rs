//! Recipes: events turned into named metrics with units, keyed by CPU
//! vendor, family and model. Each names the events it uses and where their
//! encodings come from.

use serde::Serialize;
use std::collections::BTreeMap;

pub use dmalab_core::sys::cpuinfo::CpuId;

/// Which recipes a CPU can run: vendor, family and model tests.
trait CpuKind {
    /// Intel family 6, one of `models`.
    fn intel(&self, models: &[u32]) -> bool;
    /// AMD Zen 4 or later (family 19h Zen 4 models, family 1Ah).
    fn zen4_plus(&self) -> bool;
    /// AMD Zen 1 to 3 (family 17h, family 19h before Zen 4).
    fn zen1_3(&self) -> bool;
}

impl CpuKind for CpuId {
    fn intel(&self, models: &[u32]) -> bool {
        self.vendor == "GenuineIntel" && self.family == 6 && models.contains(&self.model)
    }

    fn zen4_plus(&self) -> bool {
        self.vendor == "AuthenticAMD"
            && (self.family >= 0x1a
                || (self.family == 0x19
                    && matches!(self.model, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf)))
    }

    fn zen1_3(&self) -> bool {
        self.vendor == "AuthenticAMD"
            && (self.family == 0x17 || (self.family == 0x19 && !self.zen4_plus()))
    }
}

/// How a metric is computed from event totals (in base units: a `.unit`
/// of MiB is turned into bytes first).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Sum of the events times a factor.
    Sum {
        /// Event ids.
        events: &'static [&'static str],
        /// Multiplier (64: bytes per cache line).
        factor: f64,
    },
    /// Sum of the events times a factor, per second of counting.
    Rate {
        /// Event ids.
        events: &'static [&'static str],
        /// Multiplier.
        factor: f64,
    },
    /// Sum of `num` over sum of `den`, times a factor (100: percent).
    Ratio {
        /// Numerator event ids.
        num: &'static [&'static str],
        /// Denominator event ids.
        den: &'static [&'static str],
        /// Multiplier.
        factor: f64,
    },
}

/// A named metric.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MetricDef {
    /// Name, unit inside (`pcie_read_bw_bytes`).
    pub name: &'static str,
    /// Unit (`bytes`, `bytes/s`, `%`, `ratio`, `1/s`, `CPUs`).
    pub unit: &'static str,
    /// How.
    pub kind: Kind,
}

impl MetricDef {
    /// The ids of the events it is computed from.
    pub fn event_ids(&self) -> Vec<&'static str> {
        match self.kind {
            Kind::Sum { events, .. } | Kind::Rate { events, .. } => events.to_vec(),
            Kind::Ratio { num, den, .. } => num.iter().chain(den).copied().collect(),
        }
    }
}

/// A recipe.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Recipe {
    /// Name used with `--counters`.
    pub name: &'static str,
    /// What it shows.
    pub description: &'static str,
    /// Where the encodings come from.
    pub source: &'static str,
    /// Which CPUs it is for, in words.
    pub cpus: &'static str,
    /// Event id -> perf spec.
    pub events: &'static [(&'static str, &'static str)],
    /// Each event in its own group (a shared filter register lets the
    /// hardware count one opcode at a time: the kernel multiplexes them and
    /// the running fraction says how long each was counted).
    pub solo: bool,
    /// Not perf events: resctrl memory bandwidth monitoring.
    pub resctrl: bool,
    /// Metrics.
    pub metrics: &'static [MetricDef],
    #[serde(skip)]
    applies: fn(&CpuId) -> bool,
}

impl Recipe {
    /// True when the recipe is meant for this CPU.
    pub fn applies_to(&self, cpu: &CpuId) -> bool {
        (self.applies)(cpu)
    }
}

fn any(_: &CpuId) -> bool {
    true
}

const HSX_MODELS: &[u32] = &[0x3f, 0x4f];
const SKX_MODELS: &[u32] = &[0x55];
const ICX_MODELS: &[u32] = &[0x6a, 0x6c];
const SPR_MODELS: &[u32] = &[0x8f, 0xcf];

const IIO_PORTS: &[(&str, &str)] = &[
    ("iio_bw_in_port0", "uncore_iio_free_running/bw_in_port0/"),
    ("iio_bw_in_port1", "uncore_iio_free_running/bw_in_port1/"),
    ("iio_bw_in_port2", "uncore_iio_free_running/bw_in_port2/"),
    ("iio_bw_in_port3", "uncore_iio_free_running/bw_in_port3/"),
    ("iio_bw_in_port4", "uncore_iio_free_running/bw_in_port4/"),
    ("iio_bw_in_port5", "uncore_iio_free_running/bw_in_port5/"),
    ("iio_bw_in_port6", "uncore_iio_free_running/bw_in_port6/"),
    ("iio_bw_in_port7", "uncore_iio_free_running/bw_in_port7/"),
];
const IIO_PORT_IDS: &[&str] = &[
    "iio_bw_in_port0",
    "iio_bw_in_port1",
    "iio_bw_in_port2",
    "iio_bw_in_port3",
    "iio_bw_in_port4",
    "iio_bw_in_port5",
    "iio_bw_in_port6",
    "iio_bw_in_port7",
];

const PCIE_METRICS: &[MetricDef] = &[
    MetricDef {
        name: "pcie_read_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: &["pcirdcur_hit", "pcirdcur_miss"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "pcie_read_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["pcirdcur_hit", "pcirdcur_miss"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "pcie_write_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: &["itom_hit", "itom_miss", "rfo_hit", "rfo_miss"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "pcie_write_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["itom_hit", "itom_miss", "rfo_hit", "rfo_miss"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "ddio_write_miss_pct",
        unit: "%",
        kind: Kind::Ratio {
            num: &["itom_miss", "rfo_miss"],
            den: &["itom_hit", "itom_miss", "rfo_hit", "rfo_miss"],
            factor: 100.0,
        },
    },
    MetricDef {
        name: "pcie_read_llc_miss_pct",
        unit: "%",
        kind: Kind::Ratio {
            num: &["pcirdcur_miss"],
            den: &["pcirdcur_hit", "pcirdcur_miss"],
            factor: 100.0,
        },
    },
];

/// Haswell-EP/Broadwell-EP: the C-box counts every TOR insert of an
/// opcode (`*_all`, UNC_C_TOR_INSERTS.OPCODE, umask 0x1: hits and misses)
/// or only the misses (`*_miss`, MISS_OPCODE, umask 0x3), so bytes come
/// from `*_all` and the miss shares from `*_miss` over `*_all`.
const HSX_PCIE_METRICS: &[MetricDef] = &[
    MetricDef {
        name: "pcie_read_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: &["pcirdcur_all"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "pcie_read_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["pcirdcur_all"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "pcie_write_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: &["itom_all", "rfo_all"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "pcie_write_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["itom_all", "rfo_all"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "ddio_write_miss_pct",
        unit: "%",
        kind: Kind::Ratio {
            num: &["itom_miss", "rfo_miss"],
            den: &["itom_all", "rfo_all"],
            factor: 100.0,
        },
    },
    MetricDef {
        name: "pcie_read_llc_miss_pct",
        unit: "%",
        kind: Kind::Ratio {
            num: &["pcirdcur_miss"],
            den: &["pcirdcur_all"],
            factor: 100.0,
        },
    },
];

const IIO_METRICS: &[MetricDef] = &[
    MetricDef {
        name: "iio_inbound_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: IIO_PORT_IDS,
            factor: 1.0,
        },
    },
    MetricDef {
        name: "iio_inbound_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: IIO_PORT_IDS,
            factor: 1.0,
        },
    },
];

const DF_CHANNELS: &[&str] = &[
    "dram_ch0", "dram_ch1", "dram_ch2", "dram_ch3", "dram_ch4", "dram_ch5", "dram_ch6", "dram_ch7",
];

/// DRAM traffic from the integrated memory controllers' CAS counts: one
/// CAS command moves one 64-byte line, every `uncore_imc_N` (every
/// channel of every socket) summed, as `pcm-memory` reports it.
const IMC_METRICS: &[MetricDef] = &[
    MetricDef {
        name: "dram_read_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: &["imc_cas_rd"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "dram_write_bytes",
        unit: "bytes",
        kind: Kind::Sum {
            events: &["imc_cas_wr"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "dram_read_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["imc_cas_rd"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "dram_write_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["imc_cas_wr"],
            factor: 64.0,
        },
    },
    MetricDef {
        name: "dram_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["imc_cas_rd", "imc_cas_wr"],
            factor: 64.0,
        },
    },
];

/// Ice Lake-SP: the CAS counts, and the free-running DDR read/write
/// counters the kernel exposes per memory controller
/// (`uncore_imc_free_running_N`, events `read`/`write` with
/// `.scale` 6.103515625e-5 and `.unit` MiB: 64 bytes per count), which
/// need no programmable counter and are never multiplexed.
const ICX_IMC_METRICS: &[MetricDef] = &[
    IMC_METRICS[0],
    IMC_METRICS[1],
    IMC_METRICS[2],
    IMC_METRICS[3],
    IMC_METRICS[4],
    MetricDef {
        name: "free_running_dram_read_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["imc_free_read"],
            factor: 1.0,
        },
    },
    MetricDef {
        name: "free_running_dram_write_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["imc_free_write"],
            factor: 1.0,
        },
    },
    MetricDef {
        name: "free_running_dram_bw_bytes",
        unit: "bytes/s",
        kind: Kind::Rate {
            events: &["imc_free_read", "imc_free_write"],
            factor: 1.0,
        },
    },
];

/// The CHA `UNC_CHA_TOR_INSERTS.IO_{HIT,MISS}_{PCIRDCUR,ITOM,RFO}` events
/// (the same encodings on Ice Lake-SP and Sapphire Rapids) and the IIO
/// free-running inbound bandwidth per root port.
const CHA_IO_AND_IIO_EVENTS: &[(&str, &str)] = &[
    ("pcirdcur_hit", "uncore_cha/event=0x35,umask=0xc8f3fd04/"),
    ("pcirdcur_miss", "uncore_cha/event=0x35,umask=0xc8f3fe04/"),
    ("itom_hit", "uncore_cha/event=0x35,umask=0xcc43fd04/"),
    ("itom_miss", "uncore_cha/event=0x35,umask=0xcc43fe04/"),
    ("rfo_hit", "uncore_cha/event=0x35,umask=0xc803fd04/"),
    ("rfo_miss", "uncore_cha/event=0x35,umask=0xc803fe04/"),
    IIO_PORTS[0],
    IIO_PORTS[1],
    IIO_PORTS[2],
    IIO_PORTS[3],
    IIO_PORTS[4],
    IIO_PORTS[5],
    IIO_PORTS[6],
    IIO_PORTS[7],
];

/// The PCIe metrics of [`CHA_IO_AND_IIO_EVENTS`] and the IIO inbound ones.
const CHA_IO_AND_IIO_METRICS: &[MetricDef] = &[
    PCIE_METRICS[0],
    PCIE_METRICS[1],
    PCIE_METRICS[2],
    PCIE_METRICS[3],
    PCIE_METRICS[4],
    PCIE_METRICS[5],
    IIO_METRICS[0],
    IIO_METRICS[1],
];

/// Every recipe dmalab knows.
pub static RECIPES: &[Recipe] = &[
    Recipe {
        name: "software",
        description: "page faults, context switches, CPU migrations and CPU time from the kernel's software events",
        source: "include/uapi/linux/perf_event.h, enum perf_sw_ids",
        cpus: "any Linux host",
        events: &[
            ("task-clock", "task-clock"),
            ("page-faults", "page-faults"),
            ("context-switches", "context-switches"),
            ("cpu-migrations", "cpu-migrations"),
        ],
        solo: false,
        resctrl: false,
        metrics: &[
            MetricDef {
                name: "cpus_utilized",
                unit: "CPUs",
                kind: Kind::Rate {
                    events: &["task-clock"],
                    factor: 1e-9,
                },
            },
            MetricDef {
                name: "page_faults_per_s",
                unit: "1/s",
                kind: Kind::Rate {
                    events: &["page-faults"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "context_switches_per_s",
                unit: "1/s",
                kind: Kind::Rate {
                    events: &["context-switches"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "cpu_migrations_per_s",
                unit: "1/s",
                kind: Kind::Rate {
                    events: &["cpu-migrations"],
                    factor: 1.0,
                },
            },
        ],
        applies: any,
    },
    Recipe {
        name: "core",
        description: "IPC, LLC misses and LLC miss rate from the generic core events (on AMD, cache-misses counts core requests that leave the L2, not L3 misses)",
        source: "include/uapi/linux/perf_event.h, enum perf_hw_id; arch/x86/events/intel/core.c and amd/core.c event maps",
        cpus: "any CPU whose core PMU is exposed (not this kind of VM)",
        events: &[
            ("cycles", "cycles"),
            ("instructions", "instructions"),
            ("cache-references", "cache-references"),
            ("cache-misses", "cache-misses"),
        ],
        solo: false,
        resctrl: false,
        metrics: &[
            MetricDef {
                name: "ipc",
                unit: "ratio",
                kind: Kind::Ratio {
                    num: &["instructions"],
                    den: &["cycles"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "llc_misses",
                unit: "count",
                kind: Kind::Sum {
                    events: &["cache-misses"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "llc_misses_per_s",
                unit: "1/s",
                kind: Kind::Rate {
                    events: &["cache-misses"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "llc_miss_pct",
                unit: "%",
                kind: Kind::Ratio {
                    num: &["cache-misses"],
                    den: &["cache-references"],
                    factor: 100.0,
                },
            },
        ],
        applies: any,
    },
    Recipe {
        name: "core-l3",
        description: "the DDIO article's miss metric: of the demand data loads that missed the L2 and reached the L3, the share that missed the L3 too (the article's mem_load_retired.l3_miss / l2_miss, 53% with DDIO off against 0.6% on), from perf's generic LLC cache events",
        source: "perf's generic cache events LLC-loads and LLC-load-misses (include/uapi/linux/perf_event.h: PERF_TYPE_HW_CACHE, PERF_COUNT_HW_CACHE_LL, OP_READ, RESULT_ACCESS/RESULT_MISS); on Intel cores arch/x86/events/intel/core.c maps them to OFFCORE_RESPONSE demand data reads with LLC_ACCESS (an L2 miss reaching the L3) and L3_MISS (e.g. skl_hw_cache_extra_regs); the AMD tables (arch/x86/events/amd/core.c) have no LL entry, so the kernel refuses them there",
        cpus: "Intel CPUs whose core PMU is exposed (the kernel has no LL cache events for AMD)",
        events: &[
            ("llc-loads", "LLC-loads"),
            ("llc-load-misses", "LLC-load-misses"),
        ],
        solo: false,
        resctrl: false,
        metrics: &[
            MetricDef {
                name: "l3_miss_per_l2_miss_pct",
                unit: "%",
                kind: Kind::Ratio {
                    num: &["llc-load-misses"],
                    den: &["llc-loads"],
                    factor: 100.0,
                },
            },
            MetricDef {
                name: "l3_load_misses_per_s",
                unit: "1/s",
                kind: Kind::Rate {
                    events: &["llc-load-misses"],
                    factor: 1.0,
                },
            },
        ],
        applies: |c| c.vendor == "GenuineIntel",
    },
    Recipe {
        name: "skx-pcie",
        description: "inbound PCIe reads (PCIeRdCur) and writes (ItoM full lines, RFO partial lines), LLC hits and misses: CHA TOR inserts with opcode filters, as the thesis counted them with PCM",
        source: "tools/perf/pmu-events/arch/x86/{skylakex,cascadelakex}/uncore-cache.json (UNC_CHA_TOR_INSERTS.IO_MISS_{RDCUR,ITOM,RFO}: event 0x35, umask 0x24, Filter config1=0x43c33/0x49033/0x40033 << 32; IO hits: umask 0x14, derived: the JSON's IA_HIT 0x11 and IA_MISS 0x21 put hit/miss in umask bits 4/5 and IO_MISS 0x24 the IO queue in bit 2); the filter_opc0 values those Filter words carry in bits 41-50 are the opcodes PCIRdCur 0x21E, ItoM 0x248, RFO 0x200 that pcm-pcie filters on; filter fields from arch/x86/events/intel/uncore_snbep.c skx_uncore_cha_formats_attr",
        cpus: "Intel Skylake-SP, Cascade Lake, Cooper Lake (family 6 model 0x55)",
        events: &[
            ("pcirdcur_hit", "uncore_cha/event=0x35,umask=0x14,filter_opc0=0x21e,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/"),
            ("pcirdcur_miss", "uncore_cha/event=0x35,umask=0x24,filter_opc0=0x21e,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/"),
            ("itom_hit", "uncore_cha/event=0x35,umask=0x14,filter_opc0=0x248,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/"),
            ("itom_miss", "uncore_cha/event=0x35,umask=0x24,filter_opc0=0x248,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/"),
            ("rfo_hit", "uncore_cha/event=0x35,umask=0x14,filter_opc0=0x200,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/"),
            ("rfo_miss", "uncore_cha/event=0x35,umask=0x24,filter_opc0=0x200,filter_rem=1,filter_loc=1,filter_nm=1,filter_not_nm=1/"),
        ],
        solo: true,
        resctrl: false,
        metrics: PCIE_METRICS,
        applies: |c| c.intel(SKX_MODELS),
    },
    Recipe {
        name: "hsx-pcie",
        description: "the thesis' own events (section 4.3, on Haswell): C-box TOR inserts filtered by opcode, PCIeRdCur, RFO, ItoM, CRd, DRd, PRd and WiL, each counted as all inserts (hits and misses) and as misses",
        source: "tools/perf/pmu-events/arch/x86/{haswellx,broadwellx}/uncore-cache.json (LLC_REFERENCES.PCIE_READ, .PCIE_WRITE, .PCIE_NS_PARTIAL_WRITE, .CODE_LLC_PREFETCH: event 0x35, umask 0x1 = UNC_C_TOR_INSERTS.OPCODE; LLC_MISSES.PCIE_READ, .PCIE_NON_SNOOP_WRITE, .DATA_READ, .MMIO_READ, .MMIO_WRITE: umask 0x3 = MISS_OPCODE; their Filter terms filter_opc=0x19e/0x1c8/0x180/0x181/0x182/0x187/0x18f, filter_tid=0x3e, filter_nc=1); formats from arch/x86/events/intel/uncore_snbep.c hswep_uncore_cbox_formats_attr (filter_opc2 config1:52-60, filter_tid3 config1:0-5, filter_nc config1:62, tid_en config:19: hswep_uncore_cbox_extra_regs programs the TID filter only with tid_en set)",
        cpus: "Intel Haswell-EP, Broadwell-EP (family 6 model 0x3f, 0x4f)",
        events: &[
            ("pcirdcur_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x19e/"),
            ("pcirdcur_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x19e/"),
            ("rfo_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x180,filter_tid=0x3e,tid_en=1/"),
            ("rfo_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x180,filter_tid=0x3e,tid_en=1/"),
            ("itom_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x1c8,filter_tid=0x3e,tid_en=1/"),
            ("itom_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x1c8,filter_tid=0x3e,tid_en=1/"),
            ("crd_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x181/"),
            ("crd_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x181/"),
            ("drd_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x182/"),
            ("drd_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x182/"),
            ("prd_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x187,filter_nc=1/"),
            ("prd_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x187,filter_nc=1/"),
            ("wil_all", "uncore_cbox/event=0x35,umask=0x1,filter_opc=0x18f,filter_nc=1/"),
            ("wil_miss", "uncore_cbox/event=0x35,umask=0x3,filter_opc=0x18f,filter_nc=1/"),
        ],
        solo: true,
        resctrl: false,
        metrics: HSX_PCIE_METRICS,
        applies: |c| c.intel(HSX_MODELS),
    },
    Recipe {
        name: "icx-pcie",
        description: "inbound PCIe reads and writes with LLC hits and misses (CHA IO_* TOR inserts) and the IIO free-running inbound bandwidth per root port",
        source: "tools/perf/pmu-events/arch/x86/icelakex/uncore-cache.json (UNC_CHA_TOR_INSERTS.IO_{HIT,MISS}_{PCIRDCUR,ITOM,RFO}: event 0x35, UMask 0xC8F3FD04/0xC8F3FE04, 0xCC43FD04/0xCC43FE04, 0xC803FD04/0xC803FE04); IIO free-running bw_in_port0-7 from arch/x86/events/intel/uncore_snbep.c (sysfs events with .scale/.unit)",
        cpus: "Intel Ice Lake-SP (family 6 model 0x6a, 0x6c)",
        events: CHA_IO_AND_IIO_EVENTS,
        solo: true,
        resctrl: false,
        metrics: CHA_IO_AND_IIO_METRICS,
        applies: |c| c.intel(ICX_MODELS),
    },
    Recipe {
        name: "spr-iio",
        description: "inbound PCIe reads and writes with LLC hits and misses (CHA IO_* TOR inserts) and the IIO free-running inbound bandwidth per root port",
        source: "tools/perf/pmu-events/arch/x86/sapphirerapids/uncore-cache.json (UNC_CHA_TOR_INSERTS.IO_{HIT,MISS}_{PCIRDCUR,ITOM,RFO}: event 0x35, UMask 0xc8f3fd04/0xc8f3fe04, 0xcc43fd04/0xcc43fe04, 0xc803fd04/0xc803fe04, the same values as icelakex; umask_ext4 config:8-15,32-55 from arch/x86/events/intel/uncore_snbep.c spr_uncore_cha_formats_attr); IIO free-running bw_in_port0-7 from the same file (spr_uncore_iio_free_running, sysfs events with .scale/.unit)",
        cpus: "Intel Sapphire Rapids, Emerald Rapids (family 6 model 0x8f, 0xcf)",
        events: CHA_IO_AND_IIO_EVENTS,
        solo: true,
        resctrl: false,
        metrics: CHA_IO_AND_IIO_METRICS,
        applies: |c| c.intel(SPR_MODELS),
    },
    Recipe {
        name: "amd-df-dram",
        description: "DRAM bandwidth from the Data Fabric: requests with 64 B of data per DRAM channel controller 0-7 (all traffic at the memory controller, DMA included)",
        source: "tools/perf/pmu-events/arch/x86/amdzen2/data-fabric.json and amdzen3 (dram_channel_data_controller_0-7: EventCode 0x07,0x47,...,0x1C7, UMask 0x38); format event14 config:0-7,32-35,59-60 from arch/x86/events/amd/uncore.c",
        cpus: "AMD Zen, Zen 2, Zen 3 (family 17h, family 19h before Zen 4)",
        events: &[
            ("dram_ch0", "amd_df/event=0x07,umask=0x38/"),
            ("dram_ch1", "amd_df/event=0x47,umask=0x38/"),
            ("dram_ch2", "amd_df/event=0x87,umask=0x38/"),
            ("dram_ch3", "amd_df/event=0xc7,umask=0x38/"),
            ("dram_ch4", "amd_df/event=0x107,umask=0x38/"),
            ("dram_ch5", "amd_df/event=0x147,umask=0x38/"),
            ("dram_ch6", "amd_df/event=0x187,umask=0x38/"),
            ("dram_ch7", "amd_df/event=0x1c7,umask=0x38/"),
        ],
        solo: true,
        resctrl: false,
        metrics: &[
            MetricDef {
                name: "dram_bytes",
                unit: "bytes",
                kind: Kind::Sum {
                    events: DF_CHANNELS,
                    factor: 64.0,
                },
            },
            MetricDef {
                name: "dram_bw_bytes",
                unit: "bytes/s",
                kind: Kind::Rate {
                    events: DF_CHANNELS,
                    factor: 64.0,
                },
            },
        ],
        applies: |c| c.zen1_3(),
    },
    Recipe {
        name: "amd-umc-dram",
        description: "DRAM read and write bandwidth from the memory controllers' CAS commands (64 B each), every amd_umc_N summed",
        source: "tools/perf/pmu-events/arch/x86/amdzen4/memory-controller.json (umc_cas_cmd.rd / .wr: EventCode 0x0a, RdWrMask 0x1 / 0x2); formats event8 config:0-7, rdwrmask config:8-9 from arch/x86/events/amd/uncore.c",
        cpus: "AMD Zen 4 and later (family 19h Zen 4 models, family 1Ah)",
        events: &[
            ("umc_cas_rd", "amd_umc/event=0x0a,rdwrmask=0x1/"),
            ("umc_cas_wr", "amd_umc/event=0x0a,rdwrmask=0x2/"),
        ],
        solo: true,
        resctrl: false,
        metrics: &[
            MetricDef {
                name: "dram_read_bytes",
                unit: "bytes",
                kind: Kind::Sum {
                    events: &["umc_cas_rd"],
                    factor: 64.0,
                },
            },
            MetricDef {
                name: "dram_write_bytes",
                unit: "bytes",
                kind: Kind::Sum {
                    events: &["umc_cas_wr"],
                    factor: 64.0,
                },
            },
            MetricDef {
                name: "dram_read_bw_bytes",
                unit: "bytes/s",
                kind: Kind::Rate {
                    events: &["umc_cas_rd"],
                    factor: 64.0,
                },
            },
            MetricDef {
                name: "dram_write_bw_bytes",
                unit: "bytes/s",
                kind: Kind::Rate {
                    events: &["umc_cas_wr"],
                    factor: 64.0,
                },
            },
        ],
        applies: |c| c.zen4_plus(),
    },
    Recipe {
        name: "skx-imc-dram",
        description: "DRAM read and write bandwidth from the integrated memory controllers' CAS commands (64 B each), every uncore_imc_N channel of every socket summed (what pcm-memory shows; all traffic at the controller, DMA included)",
        source: "tools/perf/pmu-events/arch/x86/skylakex/uncore-memory.json and cascadelakex (UNC_M_CAS_COUNT.RD: EventCode 0x4, UMask 0x3; UNC_M_CAS_COUNT.WR: EventCode 0x4, UMask 0xC; Unit iMC, ScaleUnit 64Bytes in the LLC_MISSES.MEM_READ/WRITE aliases); formats event config:0-7, umask config:8-15 from arch/x86/events/intel/uncore_snbep.c skx_uncore_format_group",
        cpus: "Intel Skylake-SP, Cascade Lake, Cooper Lake (family 6 model 0x55)",
        events: &[
            ("imc_cas_rd", "uncore_imc/event=0x04,umask=0x03/"),
            ("imc_cas_wr", "uncore_imc/event=0x04,umask=0x0c/"),
        ],
        solo: false,
        resctrl: false,
        metrics: IMC_METRICS,
        applies: |c| c.intel(SKX_MODELS),
    },
    Recipe {
        name: "icx-imc-dram",
        description: "DRAM read and write bandwidth from the integrated memory controllers' CAS commands (64 B each), every uncore_imc_N channel of every socket summed (what pcm-memory shows; all traffic at the controller, DMA included)",
        source: "tools/perf/pmu-events/arch/x86/icelakex/uncore-memory.json (UNC_M_CAS_COUNT.RD: EventCode 0x04, UMask 0x0f; UNC_M_CAS_COUNT.WR: EventCode 0x04, UMask 0x30; Unit iMC); formats event config:0-7, umask config:8-15 from arch/x86/events/intel/uncore_snbep.c; free-running DDR read/write from the same file (icx_uncore_imc_freerunning_events: read event=0xff,umask=0x20, write umask=0x21, .scale 6.103515625e-5, .unit MiB)",
        cpus: "Intel Ice Lake-SP (family 6 model 0x6a, 0x6c)",
        events: &[
            ("imc_cas_rd", "uncore_imc/event=0x04,umask=0x0f/"),
            ("imc_cas_wr", "uncore_imc/event=0x04,umask=0x30/"),
            ("imc_free_read", "uncore_imc_free_running/read/"),
            ("imc_free_write", "uncore_imc_free_running/write/"),
        ],
        solo: false,
        resctrl: false,
        metrics: ICX_IMC_METRICS,
        applies: |c| c.intel(ICX_MODELS),
    },
    Recipe {
        name: "spr-imc-dram",
        description: "DRAM read and write bandwidth from the integrated memory controllers' CAS commands (64 B each), every uncore_imc_N channel of every socket summed (what pcm-memory shows; all traffic at the controller, DMA included)",
        source: "tools/perf/pmu-events/arch/x86/sapphirerapids/uncore-memory.json (UNC_M_CAS_COUNT.RD: EventCode 0x05, UMask 0xcf; UNC_M_CAS_COUNT.WR: EventCode 0x05, UMask 0xf0; Unit iMC); formats event config:0-7, umask config:8-15 from arch/x86/events/intel/uncore_snbep.c",
        cpus: "Intel Sapphire Rapids, Emerald Rapids (family 6 model 0x8f, 0xcf)",
        events: &[
            ("imc_cas_rd", "uncore_imc/event=0x05,umask=0xcf/"),
            ("imc_cas_wr", "uncore_imc/event=0x05,umask=0xf0/"),
        ],
        solo: false,
        resctrl: false,
        metrics: IMC_METRICS,
        applies: |c| c.intel(SPR_MODELS),
    },
    Recipe {
        name: "mbm",
        description: "memory bandwidth of the counted tasks per L3 domain from resctrl monitoring (mbm_total_bytes, mbm_local_bytes): a monitoring group is made for them and removed afterwards",
        source: "Documentation/arch/x86/resctrl.rst (mon_groups, mon_data/mon_L3_XX)",
        cpus: "Intel RDT / AMD PQoS hosts with resctrl mounted",
        events: &[],
        solo: false,
        resctrl: true,
        metrics: &[
            MetricDef {
                name: "mbm_total_bytes",
                unit: "bytes",
                kind: Kind::Sum {
                    events: &["mbm_total_bytes"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "mbm_total_bw_bytes",
                unit: "bytes/s",
                kind: Kind::Rate {
                    events: &["mbm_total_bytes"],
                    factor: 1.0,
                },
            },
            MetricDef {
                name: "mbm_local_bytes",
                unit: "bytes",
                kind: Kind::Sum {
                    events: &["mbm_local_bytes"],
                    factor: 1.0,
                },
            },
        ],
        applies: any,
    },
];

/// Recipe encodings that no public table lists, derived instead:
/// (recipe, event id, how). Shown by `dmalab info counters` next to the
/// recipe, so a reader knows which counts rest on a derivation.
pub static DERIVED: &[(&str, &str, &str)] = &[
    ("skx-pcie", "pcirdcur_hit", SKX_IO_HIT),
    ("skx-pcie", "itom_hit", SKX_IO_HIT),
    ("skx-pcie", "rfo_hit", SKX_IO_HIT),
    ("hsx-pcie", "rfo_miss", HSX_COMBINED),
    ("hsx-pcie", "crd_miss", HSX_COMBINED),
    ("hsx-pcie", "drd_all", HSX_COMBINED),
    ("hsx-pcie", "prd_all", HSX_COMBINED),
    ("hsx-pcie", "wil_all", HSX_COMBINED),
];

const HSX_COMBINED: &str = "no entry of haswellx/broadwellx uncore-cache.json names this opcode with this umask: the umask is that of UNC_C_TOR_INSERTS.OPCODE (0x1) or .MISS_OPCODE (0x3) and the Filter that of the table's entry for the same opcode with the other umask";

const SKX_IO_HIT: &str = "umask 0x14 (IO hit) is derived from the bit layout of skylakex/uncore-cache.json (IA_HIT 0x11, IA_MISS 0x21, IO_MISS 0x24: hit/miss in bits 4/5, the IO queue in bit 2), not found listed";

/// The derived encodings of recipe `name`: (event id, how).
pub fn derived(name: &str) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    DERIVED
        .iter()
        .filter(move |(r, _, _)| *r == name)
        .map(|&(_, id, how)| (id, how))
}

/// The recipe called `name`.
pub fn find(name: &str) -> Option<&'static Recipe> {
    RECIPES.iter().find(|r| r.name == name)
}

/// A computed metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricValue {
    /// Name (unit inside where it has one).
    pub name: String,
    /// Unit.
    pub unit: String,
    /// The value; `None` when an event it needs could not be counted.
    pub value: Option<f64>,
    /// The event ids it used.
    pub events: Vec<String>,
}

/// A value in its `.unit` turned into the base unit (MiB -> bytes).
pub fn to_base(value: f64, unit: &str) -> f64 {
    match unit {
        "MiB" => value * 1048576.0,
        "KiB" => value * 1024.0,
        "GiB" => value * 1073741824.0,
        _ => value,
    }
}

/// Computes `defs` from event totals in base units (`None`: not counted)
/// over `seconds` of counting.
pub fn compute(
    defs: &[MetricDef],
    totals: &BTreeMap<String, Option<f64>>,
    seconds: f64,
) -> Vec<MetricValue> {
    let sum = |ids: &[&str]| -> Option<f64> {
        let mut s = 0.0;
        for id in ids {
            s += (*totals.get(*id)?)?;
        }
        Some(s)
    };
    defs.iter()
        .map(|d| {
            let (value, used): (Option<f64>, Vec<&str>) = match d.kind {
                Kind::Sum { events, factor } => (sum(events).map(|s| s * factor), events.to_vec()),
                Kind::Rate { events, factor } => (
                    sum(events).and_then(|s| (seconds > 0.0).then(|| s * factor / seconds)),
                    events.to_vec(),
                ),
                Kind::Ratio { num, den, factor } => {
                    let v = match (sum(num), sum(den)) {
                        (Some(n), Some(d)) if d > 0.0 => Some(n / d * factor),
                        _ => None,
                    };
                    (v, num.iter().chain(den.iter()).copied().collect())
                }
            };
            MetricValue {
                name: d.name.to_string(),
                unit: d.unit.to_string(),
                value,
                events: used.iter().map(|s| s.to_string()).collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_keys() {
        let c = CpuId::parse(
            "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Gold 6130\n\nprocessor\t: 1\nvendor_id\t: Other\n",
        );
        assert_eq!(
            (c.vendor.as_str(), c.family, c.model),
            ("GenuineIntel", 6, 85)
        );
        assert!(find("skx-pcie").unwrap().applies_to(&c));
        assert!(!find("icx-pcie").unwrap().applies_to(&c));
        let zen2 = CpuId {
            vendor: "AuthenticAMD".into(),
            family: 0x17,
            model: 0x31,
            model_name: String::new(),
        };
        assert!(find("amd-df-dram").unwrap().applies_to(&zen2));
        assert!(!find("amd-umc-dram").unwrap().applies_to(&zen2));
        let zen4 = CpuId {
            family: 0x19,
            model: 0x11,
            ..zen2.clone()
        };
        assert!(find("amd-umc-dram").unwrap().applies_to(&zen4));
        assert!(!find("amd-df-dram").unwrap().applies_to(&zen4));
    }

    /// A Skylake-SP host with two sockets and three memory channels per
    /// socket's view (uncore_imc_0..2, each opened on CPU 0 and 28): the
    /// IMC recipe encodes the kernel table's CAS_COUNT.RD/WR into
    /// `config = umask << 8 | event` on every channel, and its bandwidth
    /// is 64 bytes per CAS over all of them.
    #[test]
    fn imc_recipe_encodes_cas_counts_on_every_channel() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..3 {
            let p = dir.path().join(format!("uncore_imc_{n}"));
            std::fs::create_dir_all(p.join("format")).unwrap();
            std::fs::write(p.join("type"), format!("{}\n", 20 + n)).unwrap();
            std::fs::write(p.join("cpumask"), "0,28\n").unwrap();
            std::fs::write(p.join("format/event"), "config:0-7\n").unwrap();
            std::fs::write(p.join("format/umask"), "config:8-15\n").unwrap();
        }
        let cat = crate::catalog::Catalog::read(dir.path());
        let skx = CpuId {
            vendor: "GenuineIntel".into(),
            family: 6,
            model: 0x55,
            model_name: String::new(),
        };
        let r =
            crate::session::Request::parse_with("--counters", "skx-imc-dram", &cat, skx).unwrap();
        for (id, config) in [("imc_cas_rd", 0x0304u64), ("imc_cas_wr", 0x0c04)] {
            let e = r.events.iter().find(|e| e.id == id).unwrap();
            assert!(e.resolved.absent.is_none(), "{id}: {:?}", e.resolved.absent);
            let got: Vec<(String, u32, u64, Vec<usize>)> = e
                .resolved
                .instances
                .iter()
                .map(|i| (i.pmu.clone(), i.type_id, i.config, i.cpus.clone()))
                .collect();
            let want: Vec<(String, u32, u64, Vec<usize>)> = (0..3)
                .map(|n| (format!("uncore_imc_{n}"), 20 + n, config, vec![0, 28]))
                .collect();
            assert_eq!(got, want, "{id}");
        }
        let icx = find("icx-imc-dram").unwrap();
        assert_eq!(
            icx.events,
            [
                ("imc_cas_rd", "uncore_imc/event=0x04,umask=0x0f/"),
                ("imc_cas_wr", "uncore_imc/event=0x04,umask=0x30/"),
                ("imc_free_read", "uncore_imc_free_running/read/"),
                ("imc_free_write", "uncore_imc_free_running/write/"),
            ]
        );
        // The free-running counts arrive in MiB (their .unit) and are
        // turned into bytes before the metric: 2 MiB + 1 MiB over 1 s.
        let mut f = BTreeMap::new();
        f.insert("imc_free_read".to_string(), Some(to_base(2.0, "MiB")));
        f.insert("imc_free_write".to_string(), Some(to_base(1.0, "MiB")));
        let fm = compute(ICX_IMC_METRICS, &f, 1.0);
        let bw = fm
            .iter()
            .find(|x| x.name == "free_running_dram_bw_bytes")
            .unwrap();
        assert_eq!(bw.value, Some(3.0 * 1048576.0));
        let mut t = BTreeMap::new();
        t.insert("imc_cas_rd".to_string(), Some(1_000_000.0));
        t.insert("imc_cas_wr".to_string(), Some(500_000.0));
        let m = compute(IMC_METRICS, &t, 2.0);
        let v = |n: &str| m.iter().find(|x| x.name == n).unwrap().value;
        assert_eq!(v("dram_read_bytes"), Some(64e6));
        assert_eq!(v("dram_write_bw_bytes"), Some(16e6));
        assert_eq!(v("dram_bw_bytes"), Some(48e6));
    }

    /// The DDIO article's figures (sockperf, DDIO off then on):
    /// 5,213,372 L3 misses over 9,775,507 L2 misses is 53%, 37,401 over
    /// 6,629,667 is 0.6%; `core-l3` computes the same share from its two
    /// generic events, which encode as perf's PERF_TYPE_HW_CACHE LL reads.
    #[test]
    fn core_l3_computes_the_ddio_articles_miss_share() {
        let r = find("core-l3").unwrap();
        let m = |misses: f64, loads: f64| {
            let mut t = BTreeMap::new();
            t.insert("llc-load-misses".to_string(), Some(misses));
            t.insert("llc-loads".to_string(), Some(loads));
            compute(r.metrics, &t, 10.0)
                .into_iter()
                .find(|x| x.name == "l3_miss_per_l2_miss_pct")
                .unwrap()
                .value
                .unwrap()
        };
        assert_eq!(format!("{:.0}", m(5_213_372.0, 9_775_507.0)), "53");
        assert_eq!(format!("{:.1}", m(37_401.0, 6_629_667.0)), "0.6");
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("cpu");
        std::fs::create_dir_all(cpu.join("format")).unwrap();
        std::fs::write(cpu.join("type"), "4\n").unwrap();
        std::fs::write(cpu.join("format/event"), "config:0-7\n").unwrap();
        let cat = crate::catalog::Catalog::read(dir.path());
        let intel = CpuId {
            vendor: "GenuineIntel".into(),
            family: 6,
            model: 0x55,
            model_name: String::new(),
        };
        let req = crate::session::Request::parse_with("--counters", "core-l3", &cat, intel.clone())
            .unwrap();
        let enc: Vec<(String, u32, u64)> = req
            .events
            .iter()
            .map(|e| {
                let i = &e.resolved.instances[0];
                (e.id.clone(), i.type_id, i.config)
            })
            .collect();
        assert_eq!(
            enc,
            [
                ("llc-loads".to_string(), 3, 0x2),
                ("llc-load-misses".to_string(), 3, 0x1_0002)
            ]
        );
        assert!(r.applies_to(&intel));
        let zen = CpuId {
            vendor: "AuthenticAMD".into(),
            family: 0x19,
            model: 0x11,
            model_name: String::new(),
        };
        assert!(!r.applies_to(&zen));
    }

    #[test]
    fn metrics_from_totals() {
        let mut t = BTreeMap::new();
        for (k, v) in [
            ("pcirdcur_hit", 10.0),
            ("pcirdcur_miss", 30.0),
            ("itom_hit", 75.0),
            ("itom_miss", 25.0),
            ("rfo_hit", 0.0),
            ("rfo_miss", 0.0),
        ] {
            t.insert(k.to_string(), Some(v));
        }
        let m = compute(PCIE_METRICS, &t, 2.0);
        let get = |n: &str| m.iter().find(|x| x.name == n).unwrap().value;
        assert_eq!(get("pcie_read_bytes"), Some(40.0 * 64.0));
        assert_eq!(get("pcie_read_bw_bytes"), Some(20.0 * 64.0));
        assert_eq!(get("ddio_write_miss_pct"), Some(25.0));
        assert_eq!(get("pcie_read_llc_miss_pct"), Some(75.0));
        t.insert("rfo_miss".into(), None);
        let m = compute(PCIE_METRICS, &t, 2.0);
        assert_eq!(
            m.iter()
                .find(|x| x.name == "ddio_write_miss_pct")
                .unwrap()
                .value,
            None
        );
    }

    #[test]
    fn every_metric_uses_events_of_its_recipe() {
        for r in RECIPES {
            let ids: Vec<&str> = r.events.iter().map(|e| e.0).collect();
            for m in r.metrics {
                let used: Vec<&str> = match m.kind {
                    Kind::Sum { events, .. } | Kind::Rate { events, .. } => events.to_vec(),
                    Kind::Ratio { num, den, .. } => num.iter().chain(den).copied().collect(),
                };
                for u in used {
                    assert!(
                        ids.contains(&u) || r.resctrl,
                        "{}: metric {} uses unknown event {u}",
                        r.name,
                        m.name
                    );
                }
            }
        }
    }
}
