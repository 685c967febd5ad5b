//! The PMU catalog: what `/sys/bus/event_source/devices` (or a fake tree
//! under a test's own root) says about each PMU.
//!
//! Layout (the kernel's, `Documentation/ABI/testing/sysfs-bus-event_source-devices-*`):
//! `<pmu>/type` (the `perf_event_attr.type`), `<pmu>/cpumask` (the CPUs an
//! uncore PMU is opened on, a CPU list), `<pmu>/format/<term>` (the bit
//! field a term fills, e.g. `config:0-7,32-35`), `<pmu>/events/<name>` (a
//! term list such as `event=0xff,umask=0x20`) with optional
//! `<name>.scale` and `<name>.unit`, and for Intel IIO PMUs
//! `uncore_iio_N/dieX` (the PCI root bus `segment:bus` that PMU watches on
//! die X).

use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Which `perf_event_attr` field a format term fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Field {
    /// `config`.
    Config,
    /// `config1`.
    Config1,
    /// `config2`.
    Config2,
    /// `config3`.
    Config3,
}

/// A format term: the field and its bit ranges, lowest value bits first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Format {
    /// The attr field.
    pub field: Field,
    /// Inclusive bit ranges `(lo, hi)`, in the order the value's bits fill
    /// them (perf's `pmu_format_value`: value bit 0 goes to the first bit of
    /// the first range, and so on).
    pub ranges: Vec<(u32, u32)>,
}

impl Format {
    /// Parses `config:0-7,32-35` or `config1:63`.
    pub fn parse(text: &str) -> Option<Self> {
        let (field, bits) = text.trim().split_once(':')?;
        let field = match field {
            "config" => Field::Config,
            "config1" => Field::Config1,
            "config2" => Field::Config2,
            "config3" => Field::Config3,
            _ => return None,
        };
        let mut ranges = Vec::new();
        for part in bits.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
                None => {
                    let v: u32 = part.trim().parse().ok()?;
                    (v, v)
                }
            };
            if lo > hi || hi > 63 {
                return None;
            }
            ranges.push((lo, hi));
        }
        Some(Self { field, ranges })
    }

    /// Number of value bits the term holds.
    pub fn width(&self) -> u32 {
        self.ranges.iter().map(|(lo, hi)| hi - lo + 1).sum()
    }

    /// Largest value the term holds.
    pub fn max_value(&self) -> u64 {
        match self.width() {
            w if w >= 64 => u64::MAX,
            w => (1u64 << w) - 1,
        }
    }

    /// Scatters `value` into the term's bits (bits of `value` beyond the
    /// width are the caller's error: see [`Format::max_value`]).
    pub fn scatter(&self, value: u64) -> u64 {
        let mut out = 0u64;
        let mut bit = 0u32;
        for &(lo, hi) in &self.ranges {
            for pos in lo..=hi {
                if bit < 64 && value & (1u64 << bit) != 0 {
                    out |= 1u64 << pos;
                }
                bit += 1;
            }
        }
        out
    }
}

/// A named event from `<pmu>/events/`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedEvent {
    /// Its term list (`event=0xff,umask=0x20`).
    pub terms: String,
    /// `.scale`: counts times this give the unit.
    pub scale: Option<f64>,
    /// `.unit` (`MiB`, `Joules`).
    pub unit: Option<String>,
}

/// One PMU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pmu {
    /// Directory name (`cpu`, `uncore_cha_3`, `amd_df`, `software`).
    pub name: String,
    /// `perf_event_attr.type`.
    pub type_id: u32,
    /// CPUs to open it on (uncore PMUs); empty for core and software PMUs.
    pub cpumask: Vec<usize>,
    /// Format terms by name.
    pub formats: BTreeMap<String, Format>,
    /// Named events by name.
    pub events: BTreeMap<String, NamedEvent>,
    /// IIO PMUs: `dieN` -> root bus (`0000:16`), the root port it watches.
    pub iio_dies: BTreeMap<String, String>,
}

impl Pmu {
    /// True for PMUs counted system-wide on their cpumask CPUs (uncore).
    pub fn is_uncore(&self) -> bool {
        !self.cpumask.is_empty()
    }
}

/// Every PMU under a root.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Catalog {
    /// The directory read.
    pub root: PathBuf,
    /// PMUs by name.
    pub pmus: BTreeMap<String, Pmu>,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

impl Catalog {
    /// Reads every PMU under `root`. A root that does not exist gives an
    /// empty catalog (no perf support at all); an unreadable PMU is skipped.
    pub fn read(root: &Path) -> Self {
        let mut pmus = BTreeMap::new();
        let Ok(rd) = fs::read_dir(root) else {
            return Self {
                root: root.to_path_buf(),
                pmus,
            };
        };
        for e in rd.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(p) = read_pmu(&e.path(), &name) {
                pmus.insert(name, p);
            }
        }
        Self {
            root: root.to_path_buf(),
            pmus,
        }
    }

    /// PMUs whose name is `name` or `name_<N>` (perf's matching of
    /// `uncore_cha` to `uncore_cha_0`..`uncore_cha_27`), in name order.
    pub fn matching(&self, name: &str) -> Vec<&Pmu> {
        if let Some(p) = self.pmus.get(name) {
            return vec![p];
        }
        let prefix = format!("{name}_");
        let mut v: Vec<&Pmu> = self
            .pmus
            .values()
            .filter(|p| {
                p.name.strip_prefix(&prefix).is_some_and(|rest| {
                    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
                })
            })
            .collect();
        v.sort_by_key(|p| {
            p.name
                .rsplit('_')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        });
        v
    }

    /// The core PMU (`cpu` on Intel and AMD, `cpu_core` on hybrid parts),
    /// if the host exposes one; a VM whose hypervisor passes no PMU
    /// through has none.
    pub fn core_pmu(&self) -> Option<&Pmu> {
        self.pmus.get("cpu").or_else(|| self.pmus.get("cpu_core"))
    }
}

fn read_pmu(dir: &Path, name: &str) -> Option<Pmu> {
    let type_id = read_trim(&dir.join("type"))?.parse().ok()?;
    let cpumask = read_trim(&dir.join("cpumask"))
        .and_then(|s| dmalab_core::cpus::parse_kernel_list(&s))
        .unwrap_or_default();
    let mut formats = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(dir.join("format")) {
        for e in rd.filter_map(Result::ok) {
            let term = e.file_name().to_string_lossy().into_owned();
            if let Some(f) = read_trim(&e.path()).and_then(|t| Format::parse(&t)) {
                formats.insert(term, f);
            }
        }
    }
    let mut events = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(dir.join("events")) {
        for e in rd.filter_map(Result::ok) {
            let ev = e.file_name().to_string_lossy().into_owned();
            if ev.contains('.') {
                continue;
            }
            let Some(terms) = read_trim(&e.path()) else {
                continue;
            };
            let scale = read_trim(&dir.join("events").join(format!("{ev}.scale")))
                .and_then(|s| s.parse().ok());
            let unit =
                read_trim(&dir.join("events").join(format!("{ev}.unit"))).filter(|u| !u.is_empty());
            events.insert(ev, NamedEvent { terms, scale, unit });
        }
    }
    let mut iio_dies = BTreeMap::new();
    if name.starts_with("uncore_iio") {
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.filter_map(Result::ok) {
                let f = e.file_name().to_string_lossy().into_owned();
                if f.strip_prefix("die")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                {
                    if let Some(bus) = read_trim(&e.path()) {
                        iio_dies.insert(f, bus);
                    }
                }
            }
        }
    }
    Some(Pmu {
        name: name.to_string(),
        type_id,
        cpumask,
        formats,
        events,
        iio_dies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_scatter_like_perf() {
        // AMD DF event14 (arch/x86/events/amd/uncore.c): event 0x107 puts
        // 0x07 in bits 0-7 and 0x1 in bits 32-35.
        let f = Format::parse("config:0-7,32-35,59-60").unwrap();
        assert_eq!(f.width(), 14);
        assert_eq!(f.scatter(0x107), 0x1_0000_0007);
        assert_eq!(f.scatter(0x3000), 3 << 59);
        // ICX CHA umask_ext4: the high 24 bits of a 32-bit JSON UMask land in 32-55.
        let u = Format::parse("config:8-15,32-55").unwrap();
        assert_eq!(u.scatter(0xc8f3_fe04), 0x00c8_f3fe_0000_0400);
        assert_eq!(Format::parse("config1:63").unwrap().scatter(1), 1 << 63);
        assert!(Format::parse("config:7-3").is_none());
        assert!(Format::parse("bogus:1").is_none());
    }

    #[test]
    fn matching_by_prefix_numeric_order() {
        let mut c = Catalog::default();
        for n in [
            "uncore_cha_10",
            "uncore_cha_2",
            "uncore_cha",
            "uncore_chabox_1",
        ] {
            c.pmus.insert(
                n.into(),
                Pmu {
                    name: n.into(),
                    type_id: 1,
                    cpumask: vec![0],
                    formats: BTreeMap::new(),
                    events: BTreeMap::new(),
                    iio_dies: BTreeMap::new(),
                },
            );
        }
        let names: Vec<&str> = c
            .matching("uncore_cha")
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["uncore_cha"]);
        c.pmus.remove("uncore_cha");
        let names: Vec<&str> = c
            .matching("uncore_cha")
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["uncore_cha_2", "uncore_cha_10"]);
    }
}
