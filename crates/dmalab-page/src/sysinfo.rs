//! What the kernel reports: /proc/vmstat paging counters (/proc/swaps is
//! read by [`dmalab_core::sys::swaps`]).

use serde::{Deserialize, Serialize};
use std::fs;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmstat() {
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
    }
}
