//! Event specs in perf's own syntax, encoded into `perf_event_attr` fields
//! from the PMU's format files the way `perf` does it
//! (tools/perf/util/pmu.c: a term `name=value` is scattered into the bits
//! its `format/name` file names; a bare term that names an entry of
//! `events/` expands to that entry's terms; a bare format term means 1).
//!
//! Accepted forms: `PMU/TERM,.../` (`uncore_iio_0/event=0x83,umask=0x04,ch_mask=0xF,fc_mask=0x7/`),
//! `PMU/NAMED/` (`cpu/cache-misses/`, `uncore_iio_free_running_0/bw_in_port0/`),
//! a PMU name without its `_N` suffix for every instance (`uncore_cha/.../`,
//! summed), raw `config=`, `config1=`, `config2=` terms, and perf's generic
//! names (`page-faults`, `task-clock`, `cycles`, `instructions`, ...).

use crate::catalog::{Catalog, Field, Pmu};
use dmalab_core::UsageError;
use serde::Serialize;

/// `PERF_TYPE_HARDWARE`.
pub const TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`.
pub const TYPE_SOFTWARE: u32 = 1;

/// perf's generic software events (include/uapi/linux/perf_event.h,
/// `enum perf_sw_ids`) with the unit of their count.
pub const SOFTWARE: &[(&str, u64, &str)] = &[
    ("cpu-clock", 0, "ns"),
    ("task-clock", 1, "ns"),
    ("page-faults", 2, "count"),
    ("faults", 2, "count"),
    ("context-switches", 3, "count"),
    ("cs", 3, "count"),
    ("cpu-migrations", 4, "count"),
    ("migrations", 4, "count"),
    ("minor-faults", 5, "count"),
    ("major-faults", 6, "count"),
];

/// perf's generic hardware events (`enum perf_hw_id`).
pub const HARDWARE: &[(&str, u64)] = &[
    ("cycles", 0),
    ("cpu-cycles", 0),
    ("instructions", 1),
    ("cache-references", 2),
    ("cache-misses", 3),
    ("branches", 4),
    ("branch-instructions", 4),
    ("branch-misses", 5),
];

/// `PERF_TYPE_HW_CACHE`.
pub const TYPE_HW_CACHE: u32 = 3;

/// perf's generic last-level-cache events (`PERF_TYPE_HW_CACHE`, config =
/// `PERF_COUNT_HW_CACHE_LL | op << 8 | result << 16`, the names perf
/// gives them in tools/perf/util/evsel.c). On Intel cores the kernel maps
/// LL read accesses to the demand data reads that reach the L3 (that is,
/// missed the L2) and LL read misses to those that also missed the L3
/// (arch/x86/events/intel/core.c, `*_hw_cache_extra_regs`, OFFCORE_RESPONSE
/// with `DEMAND_READ|LLC_ACCESS` and `DEMAND_READ|L3_MISS`); the AMD
/// tables have no LL entry, and the kernel refuses them there.
pub const HW_CACHE: &[(&str, u64)] = &[
    ("LLC-loads", 0x2),
    ("LLC-load-misses", 0x1_0002),
    ("LLC-stores", 0x102),
    ("LLC-store-misses", 0x1_0102),
];

/// The attr of one PMU instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Encoded {
    /// The PMU instance (`uncore_cha_3`), or `software`/`hardware` for the
    /// generic events.
    pub pmu: String,
    /// `perf_event_attr.type`.
    #[serde(rename = "type")]
    pub type_id: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
    /// `perf_event_attr.config2`.
    pub config2: u64,
    /// CPUs to open it on system-wide (uncore); empty: per task or per CPU
    /// as the scope says.
    pub cpus: Vec<usize>,
}

/// Why an event cannot be counted on this host. Never reported as zero.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Absence {
    /// No PMU of that name under the catalog root.
    NoSuchPmu {
        /// The PMU asked for.
        pmu: String,
        /// What to know (e.g. a VM whose hypervisor exposes no PMU).
        detail: String,
    },
    /// The PMU exists but does not know the named event.
    EventUnknown {
        /// The PMU.
        pmu: String,
        /// The event name.
        event: String,
    },
    /// `perf_event_paranoid` forbids it for an unprivileged user.
    Paranoid {
        /// The current level.
        level: i32,
        /// The highest level that allows it.
        needed: i32,
    },
    /// Refused for lack of privilege although the paranoid level allows it
    /// (or the paranoid level is unknown): needs root or CAP_PERFMON.
    NotPrivileged {
        /// The error the kernel gave.
        detail: String,
    },
    /// The kernel refused the encoded event (unsupported on this CPU model,
    /// or a counter constraint).
    Unsupported {
        /// The error the kernel gave.
        detail: String,
    },
    /// Opened, but the kernel never scheduled it (multiplexed out).
    NotCounted,
    /// The recipe is for other CPU models.
    WrongCpu {
        /// The recipe.
        recipe: String,
        /// The CPUs it is for.
        for_cpus: String,
        /// This CPU.
        this_cpu: String,
        /// The recipes meant for this CPU, to count with instead.
        recipes_here: Vec<String>,
    },
    /// A non-perf source (resctrl) that this host lacks.
    Missing {
        /// What is missing and what to do.
        detail: String,
    },
}

impl std::fmt::Display for Absence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Absence::NoSuchPmu { pmu, detail } => write!(f, "no such PMU {pmu}: {detail}"),
            Absence::EventUnknown { pmu, event } => {
                write!(f, "event {event} unknown on this CPU (not in {pmu}/events)")
            }
            Absence::Paranoid { level, needed } => write!(
                f,
                "perf_event_paranoid is {level}, this needs {needed} or less (sysctl kernel.perf_event_paranoid={needed}) or root/CAP_PERFMON"
            ),
            Absence::NotPrivileged { detail } => {
                write!(f, "not permitted ({detail}): run as root or grant CAP_PERFMON")
            }
            Absence::Unsupported { detail } => {
                write!(f, "the kernel refused it on this CPU: {detail}")
            }
            Absence::NotCounted => write!(
                f,
                "never scheduled: multiplexed out by other events; count fewer events at once"
            ),
            Absence::Missing { detail } => write!(f, "{detail}"),
            Absence::WrongCpu {
                recipe,
                for_cpus,
                this_cpu,
                recipes_here,
            } => write!(
                f,
                "recipe {recipe} is for {for_cpus}, and this host is {this_cpu}: count with a recipe for this CPU ({}; `dmalab info counters` says which are ready) or name this CPU's events as PMU/TERMS/",
                recipes_here.join(", ")
            ),
        }
    }
}

/// An event spec resolved against a catalog.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resolved {
    /// The spec as written.
    pub spec: String,
    /// One attr per PMU instance; empty when absent.
    pub instances: Vec<Encoded>,
    /// The unit of the scaled count (`count`, `ns`, or a named event's `.unit`).
    pub unit: String,
    /// A named event's `.scale` (1 otherwise).
    pub scale: f64,
    /// Why it cannot be counted here, if so.
    pub absent: Option<Absence>,
}

/// Splits a comma-separated list at the top level (commas inside
/// `PMU/.../` belong to the terms).
pub fn split_list(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    // Between the two slashes of PMU/TERMS/.
    let mut inside = false;
    for ch in text.chars() {
        match ch {
            '/' => {
                inside = !inside;
                cur.push(ch);
            }
            ',' if !inside => {
                if !cur.trim().is_empty() {
                    out.push(cur.trim().to_string());
                }
                cur.clear();
            }
            _ => cur.push(ch),
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn parse_num(option: &str, spec: &str, v: &str) -> Result<u64, UsageError> {
    let v = v.trim();
    let r = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| {
        UsageError::new(
            option,
            format!("'{v}' in {spec} is not a number; use decimal or 0x-hex"),
        )
    })
}

fn no_pmu(pmu: &str, cat: &Catalog) -> Absence {
    let detail = if cat.pmus.is_empty() {
        format!("{} lists no PMUs at all", cat.root.display())
    } else if cat.core_pmu().is_none() {
        format!(
            "{} has no {pmu} (the host exposes only {}; a VM whose hypervisor passes no PMU through has no hardware counters)",
            cat.root.display(),
            cat.pmus.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    } else {
        format!(
            "{} has no {pmu}; this CPU model or kernel does not provide it",
            cat.root.display()
        )
    };
    Absence::NoSuchPmu {
        pmu: pmu.to_string(),
        detail,
    }
}

/// Resolves one spec. Malformed specs and unknown format terms are usage
/// errors (exit 2, naming `option`); a PMU or named event this host lacks
/// is an [`Absence`].
pub fn resolve(option: &str, spec: &str, cat: &Catalog) -> Result<Resolved, UsageError> {
    let absent = |a: Absence, unit: &str| Resolved {
        spec: spec.to_string(),
        instances: Vec::new(),
        unit: unit.to_string(),
        scale: 1.0,
        absent: Some(a),
    };
    if !spec.contains('/') {
        if let Some(&(_, config, unit)) = SOFTWARE.iter().find(|(n, _, _)| *n == spec) {
            return Ok(Resolved {
                spec: spec.to_string(),
                instances: vec![Encoded {
                    pmu: "software".into(),
                    type_id: TYPE_SOFTWARE,
                    config,
                    config1: 0,
                    config2: 0,
                    cpus: Vec::new(),
                }],
                unit: unit.into(),
                scale: 1.0,
                absent: None,
            });
        }
        let generic = HARDWARE
            .iter()
            .find(|(n, _)| *n == spec)
            .map(|&(_, c)| (TYPE_HARDWARE, c))
            .or_else(|| {
                HW_CACHE
                    .iter()
                    .find(|(n, _)| *n == spec)
                    .map(|&(_, c)| (TYPE_HW_CACHE, c))
            });
        if let Some((type_id, config)) = generic {
            if cat.core_pmu().is_none() {
                return Ok(absent(no_pmu("cpu", cat), "count"));
            }
            return Ok(Resolved {
                spec: spec.to_string(),
                instances: vec![Encoded {
                    pmu: "hardware".into(),
                    type_id,
                    config,
                    config1: 0,
                    config2: 0,
                    cpus: Vec::new(),
                }],
                unit: "count".into(),
                scale: 1.0,
                absent: None,
            });
        }
        return Err(UsageError::new(
            option,
            format!(
                "'{spec}' is neither a recipe nor an event; use a recipe (see `dmalab info counters`), a generic event ({}) or PMU/TERMS/",
                SOFTWARE
                    .iter()
                    .map(|s| s.0)
                    .chain(HARDWARE.iter().map(|h| h.0))
                    .chain(HW_CACHE.iter().map(|h| h.0))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let body = spec.strip_suffix('/').ok_or_else(|| {
        UsageError::new(
            option,
            format!("'{spec}' must end with '/' (PMU/TERMS/, e.g. cpu/cache-misses/)"),
        )
    })?;
    let (pmu_name, terms) = body
        .split_once('/')
        .ok_or_else(|| UsageError::new(option, format!("'{spec}' is not PMU/TERMS/")))?;
    if pmu_name.is_empty() || terms.contains('/') {
        return Err(UsageError::new(
            option,
            format!("'{spec}' is not PMU/TERMS/ (one PMU, one term list)"),
        ));
    }
    let pmus = cat.matching(pmu_name);
    if pmus.is_empty() {
        return Ok(absent(no_pmu(pmu_name, cat), "count"));
    }
    let mut instances = Vec::new();
    let mut unit = "count".to_string();
    let mut scale = 1.0;
    for p in &pmus {
        match encode_terms(option, spec, p, terms)? {
            Ok((e, u, s)) => {
                instances.push(e);
                if let Some(u) = u {
                    unit = u;
                }
                scale = s;
            }
            Err(a) => return Ok(absent(a, "count")),
        }
    }
    Ok(Resolved {
        spec: spec.to_string(),
        instances,
        unit,
        scale,
        absent: None,
    })
}

type Term = (Encoded, Option<String>, f64);

fn encode_terms(
    option: &str,
    spec: &str,
    pmu: &Pmu,
    terms: &str,
) -> Result<Result<Term, Absence>, UsageError> {
    let mut e = Encoded {
        pmu: pmu.name.clone(),
        type_id: pmu.type_id,
        config: 0,
        config1: 0,
        config2: 0,
        cpus: pmu.cpumask.clone(),
    };
    let mut unit = None;
    let mut scale = 1.0;
    let mut list: Vec<String> = terms.split(',').map(|t| t.trim().to_string()).collect();
    // A bare term naming an entry of events/ expands to its terms.
    let mut expanded = Vec::new();
    for t in list.drain(..) {
        if t.is_empty() {
            continue;
        }
        if !t.contains('=') && !pmu.formats.contains_key(&t) {
            match pmu.events.get(&t) {
                Some(ne) => {
                    expanded.extend(ne.terms.split(',').map(|x| x.trim().to_string()));
                    unit = ne.unit.clone();
                    scale = ne.scale.unwrap_or(1.0);
                }
                None => {
                    return Ok(Err(Absence::EventUnknown {
                        pmu: pmu.name.clone(),
                        event: t,
                    }))
                }
            }
        } else {
            expanded.push(t);
        }
    }
    for t in expanded {
        if t.is_empty() {
            continue;
        }
        let (name, value) = match t.split_once('=') {
            Some((n, v)) => (n.trim(), parse_num(option, spec, v)?),
            None => (t.as_str(), 1),
        };
        match name {
            "config" => e.config |= value,
            "config1" => e.config1 |= value,
            "config2" => e.config2 |= value,
            _ => {
                let f = pmu.formats.get(name).ok_or_else(|| {
                    UsageError::new(
                        option,
                        format!(
                            "{spec}: {} has no term '{name}'; its terms are {}",
                            pmu.name,
                            pmu.formats.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    )
                })?;
                if value > f.max_value() {
                    return Err(UsageError::new(
                        option,
                        format!(
                            "{spec}: {name}={value:#x} does not fit {} ({} bits)",
                            pmu.name,
                            f.width()
                        ),
                    ));
                }
                let bits = f.scatter(value);
                match f.field {
                    Field::Config => e.config |= bits,
                    Field::Config1 => e.config1 |= bits,
                    Field::Config2 => e.config2 |= bits,
                    Field::Config3 => {
                        return Err(UsageError::new(
                            option,
                            format!(
                                "{spec}: term '{name}' uses config3, which dmalab does not set"
                            ),
                        ))
                    }
                }
            }
        }
    }
    Ok(Ok((e, unit, scale)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_top_level_only() {
        assert_eq!(
            split_list(
                "software, uncore_iio_0/event=0x83,umask=0x4/,cpu/cache-misses/,page-faults"
            ),
            [
                "software",
                "uncore_iio_0/event=0x83,umask=0x4/",
                "cpu/cache-misses/",
                "page-faults"
            ]
        );
    }

    #[test]
    fn generic_events_and_absent_pmus() {
        let cat = Catalog::default();
        let r = resolve("--counters", "page-faults", &cat).unwrap();
        assert_eq!(r.instances[0].type_id, TYPE_SOFTWARE);
        assert_eq!(r.instances[0].config, 2);
        let r = resolve("--counters", "cycles", &cat).unwrap();
        assert!(matches!(r.absent, Some(Absence::NoSuchPmu { .. })), "{r:?}");
        let r = resolve("--counters", "uncore_cha/event=0x35/", &cat).unwrap();
        assert!(matches!(r.absent, Some(Absence::NoSuchPmu { .. })));
        assert!(resolve("--counters", "bogus", &cat).is_err());
        assert!(resolve("--counters", "cpu/event=1", &cat).is_err());
    }
}
