//! What the kernel reports: /proc/vmstat paging counters, /proc/swaps.

use serde::{Deserialize, Serialize};
use std::fs;
use std::path::PathBuf;

/// The /proc/vmstat counters pmbench reports (pages and events).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Vmstat {
    /// Pages swapped in (`pswpin`).
    pub pswpin: u64,
    /// Pages swapped out (`pswpout`).
    pub pswpout: u64,
    /// Major faults, whole host (`pgmajfault`).
    pub pgmajfault: u64,
    /// All faults, whole host (`pgfault`).
    pub pgfault: u64,
}

impl Vmstat {
    /// Reads /proc/vmstat (zeros if unreadable).
    pub fn read() -> Self {
        let text = fs::read_to_string("/proc/vmstat").unwrap_or_default();
        Self::parse(&text)
    }

    /// Parses /proc/vmstat text.
    pub fn parse(text: &str) -> Self {
        let mut v = Self::default();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(k), Some(n)) = (it.next(), it.next().and_then(|n| n.parse().ok())) else {
                continue;
            };
            match k {
                "pswpin" => v.pswpin = n,
                "pswpout" => v.pswpout = n,
                "pgmajfault" => v.pgmajfault = n,
                "pgfault" => v.pgfault = n,
                _ => {}
            }
        }
        v
    }

    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &Vmstat) -> Vmstat {
        Vmstat {
            pswpin: self.pswpin.saturating_sub(earlier.pswpin),
            pswpout: self.pswpout.saturating_sub(earlier.pswpout),
            pgmajfault: self.pgmajfault.saturating_sub(earlier.pgmajfault),
            pgfault: self.pgfault.saturating_sub(earlier.pgfault),
        }
    }
}

/// One line of /proc/swaps.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SwapEntry {
    /// Device or file.
    pub path: PathBuf,
    /// `partition` or `file`.
    pub kind: String,
    /// Size, bytes.
    pub size_bytes: u64,
    /// In use, bytes.
    pub used_bytes: u64,
    /// Priority.
    pub priority: i32,
}

/// Reads /proc/swaps.
pub fn read_swaps() -> Vec<SwapEntry> {
    parse_swaps(&fs::read_to_string("/proc/swaps").unwrap_or_default())
}

/// Parses /proc/swaps text (sizes there are KiB).
pub fn parse_swaps(text: &str) -> Vec<SwapEntry> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 5 {
                return None;
            }
            Some(SwapEntry {
                path: PathBuf::from(dmalab_core::host::unescape_mount(f[0])),
                kind: f[1].to_string(),
                size_bytes: f[2].parse::<u64>().ok()? * 1024,
                used_bytes: f[3].parse::<u64>().ok()? * 1024,
                priority: f[4].parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmstat_and_swaps() {
        let v = Vmstat::parse("pgfault 10\npgmajfault 3\npswpin 2\npswpout 5\nnr_free_pages 1\n");
        assert_eq!(
            v,
            Vmstat {
                pswpin: 2,
                pswpout: 5,
                pgmajfault: 3,
                pgfault: 10
            }
        );
        let s = parse_swaps(
            "Filename\tType\tSize\tUsed\tPriority\n/dev/zram1  partition\t1048572\t2048\t100\n",
        );
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].path, PathBuf::from("/dev/zram1"));
        assert_eq!(s[0].used_bytes, 2048 * 1024);
        assert_eq!(s[0].priority, 100);
    }
}
