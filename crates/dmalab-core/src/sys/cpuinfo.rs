//! `/proc/cpuinfo`: a field of the first processor, its flags, and the CPU's
//! identification (vendor, family, model).

use serde::{Deserialize, Serialize};
use std::fs;
use std::path::Path;

/// The CPU as /proc/cpuinfo names it (its first processor).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CpuId {
    /// `GenuineIntel`, `AuthenticAMD`, ...
    pub vendor: String,
    /// `cpu family` (decimal in /proc/cpuinfo).
    pub family: u32,
    /// `model` number.
    pub model: u32,
    /// `model name` string.
    pub model_name: String,
}

impl CpuId {
    /// Reads the first processor's identification from a cpuinfo file
    /// (empty fields when it cannot be read).
    pub fn read(path: &Path) -> Self {
        Self::parse(&fs::read_to_string(path).unwrap_or_default())
    }

    /// Parses cpuinfo text (its first processor); a missing or bad number
    /// is 0.
    pub fn parse(text: &str) -> Self {
        let field = |name| cpuinfo_field(text, name).unwrap_or_default();
        Self {
            vendor: field("vendor_id").to_string(),
            family: field("cpu family").parse().unwrap_or(0),
            model: field("model").parse().unwrap_or(0),
            model_name: field("model name").to_string(),
        }
    }
}

/// The value of the key `name` for the first processor in cpuinfo `text`
/// (the first line whose key, before the `:`, is exactly `name`: `model`
/// is not `model name`), trimmed.
pub fn cpuinfo_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim())
}

/// The flags of the first processor in cpuinfo `text` (empty when it has no
/// `flags` line, as on non-x86 CPUs).
pub fn cpu_flags(text: &str) -> Vec<&str> {
    cpuinfo_field(text, "flags")
        .map(|v| v.split_whitespace().collect())
        .unwrap_or_default()
}

/// True when this host's `/proc/cpuinfo` lists `flag` for the first CPU
/// (false when it cannot be read).
pub fn has_cpu_flag(flag: &str) -> bool {
    fs::read_to_string("/proc/cpuinfo").is_ok_and(|t| cpu_flags(&t).contains(&flag))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7551 32-Core Processor\nflags\t\t: fpu tsc rdtscp constant_tsc hypervisor\nvmx flags\t: ept\nbugs\t\t: sysret_ss_attrs\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu other\n";

    #[test]
    fn first_processor_fields_and_flags() {
        assert_eq!(cpuinfo_field(CPUINFO, "vendor_id"), Some("AuthenticAMD"));
        assert_eq!(
            cpuinfo_field(CPUINFO, "model name"),
            Some("AMD EPYC 7551 32-Core Processor")
        );
        assert_eq!(cpuinfo_field(CPUINFO, "microcode"), None);
        // Keys match whole: `model` is its own line, not `model name`.
        let t = "model name\t: Xeon\nmodel\t\t: 143\nmodelx\t: 1\n";
        assert_eq!(cpuinfo_field(t, "model"), Some("143"));
        assert_eq!(cpuinfo_field(t, "model name"), Some("Xeon"));
        assert_eq!(cpuinfo_field(t, "mod"), None);
        let f = cpu_flags(CPUINFO);
        assert_eq!(f, ["fpu", "tsc", "rdtscp", "constant_tsc", "hypervisor"]);
        // `vmx flags` and the second processor's flags are not the flags.
        assert!(!f.contains(&"ept") && !f.contains(&"other"));
        assert!(cpu_flags("processor\t: 0\nBogoMIPS\t: 50.00\n").is_empty());
    }

    #[test]
    fn cpu_identification_of_the_first_processor() {
        let c = CpuId::parse(CPUINFO);
        assert_eq!(c.vendor, "AuthenticAMD");
        assert_eq!(c.model_name, "AMD EPYC 7551 32-Core Processor");
        assert_eq!((c.family, c.model), (0, 0), "no such lines here");
        let skx = CpuId::parse("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel(R) Xeon(R) Gold 6130\n\nprocessor\t: 1\nvendor_id\t: Other\n");
        assert_eq!(
            (skx.vendor.as_str(), skx.family, skx.model),
            ("GenuineIntel", 6, 85)
        );
        assert_eq!(
            CpuId::read(Path::new("/nonexistent/cpuinfo")),
            CpuId::default()
        );
    }

    #[test]
    fn flag_lookup_does_not_match_prefixes() {
        let f = cpu_flags("flags\t: rdtscp\n");
        assert!(f.contains(&"rdtscp") && !f.contains(&"rdtsc"));
    }
}
