//! `/proc/swaps`: the active swap areas.

use serde::{Deserialize, Serialize};
use std::fs;
use std::path::PathBuf;

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

/// Reads this host's /proc/swaps (empty when it cannot be read).
pub fn read_swaps() -> Vec<SwapEntry> {
    parse_swaps(&fs::read_to_string("/proc/swaps").unwrap_or_default())
}

/// Parses /proc/swaps text: a header line, then one area per line with its
/// path (spaces and such escaped as in mountinfo), type, size and use in
/// KiB, and priority. Malformed lines are skipped.
pub fn parse_swaps(text: &str) -> Vec<SwapEntry> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 5 {
                return None;
            }
            Some(SwapEntry {
                path: PathBuf::from(crate::host::unescape_mount(f[0])),
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
    fn parses_areas_in_bytes() {
        let s = parse_swaps(
            "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/zram1  partition\t1048572\t2048\t100\n/var/swap\\040file                               file\t\t524284\t\t0\t\t-2\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].path, PathBuf::from("/dev/zram1"));
        assert_eq!(s[0].kind, "partition");
        assert_eq!(s[0].size_bytes, 1_048_572 * 1024);
        assert_eq!(s[0].used_bytes, 2048 * 1024);
        assert_eq!(s[0].priority, 100);
        // The kernel escapes a space in the path as \040.
        assert_eq!(s[1].path, PathBuf::from("/var/swap file"));
        assert_eq!(s[1].kind, "file");
        assert_eq!(s[1].priority, -2);
    }

    #[test]
    fn header_only_and_malformed_lines_give_nothing() {
        assert!(parse_swaps("Filename\tType\tSize\tUsed\tPriority\n").is_empty());
        assert!(parse_swaps("").is_empty());
        assert!(parse_swaps(
            "Filename Type Size Used Priority\n/dev/x partition\n/dev/y partition many 0 1\n"
        )
        .is_empty());
    }
}
