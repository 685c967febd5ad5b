//! The sizes of a trace's DMA requests (the DMA-cache paper's Fig. 7: the
//! cumulative distribution of DMA request sizes), for `dmalab sim stat`.
//!
//! A request is one transfer: an `xfer` record, or a `begin` marker (whose
//! length is the whole transfer's). Line references outside any transfer
//! are not requests.

use crate::trace::{Kind, Record};
use serde::Serialize;
use std::fmt::{self, Write as _};

/// The request sizes of one direction, bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SizeDist {
    sizes: Vec<u32>,
}

impl SizeDist {
    /// Requests counted.
    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// Mean size, bytes (0 with no requests).
    pub fn mean(&self) -> f64 {
        if self.sizes.is_empty() {
            return 0.0;
        }
        self.sizes.iter().map(|&s| s as f64).sum::<f64>() / self.sizes.len() as f64
    }

    /// (size bound, share of requests at most that size) at every power of
    /// two from 64 bytes up to the largest request.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let mut v = self.sizes.clone();
        v.sort_unstable();
        let Some(&max) = v.last() else {
            return Vec::new();
        };
        let n = v.len() as f64;
        let mut out = Vec::new();
        let mut bound = 64u64;
        loop {
            let at_most = v.partition_point(|&s| u64::from(s) <= bound);
            out.push((bound, at_most as f64 / n));
            if bound >= u64::from(max) {
                break;
            }
            bound *= 2;
        }
        out
    }
}

/// DMA request sizes, by direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestSizes {
    /// Device writes memory (disk reads, received packets).
    pub to_memory: SizeDist,
    /// Device reads memory (disk writes, sent packets).
    pub from_memory: SizeDist,
}

impl RequestSizes {
    /// Counts one record.
    pub fn add(&mut self, r: &Record) {
        if matches!(r.kind, Kind::Xfer | Kind::Begin) {
            let d = if r.write {
                &mut self.to_memory
            } else {
                &mut self.from_memory
            };
            d.sizes.push(r.len);
        }
    }
}

fn size(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

impl fmt::Display for RequestSizes {
    /// One block per direction with requests: count, mean, and the share
    /// of requests at most each power-of-two size; no final newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        for (name, d) in [
            ("device writes memory", &self.to_memory),
            ("device reads memory", &self.from_memory),
        ] {
            if d.count() == 0 {
                let _ = writeln!(s, "dma requests, {name}: none");
                continue;
            }
            let _ = writeln!(
                s,
                "dma requests, {name}: {} requests, mean {:.0} bytes; share of requests at most SIZE bytes:",
                d.count(),
                d.mean()
            );
            let cdf = d.cdf();
            let _ = writeln!(
                s,
                "  {}",
                cdf.iter()
                    .map(|(b, p)| format!("{}:{:.1}%", size(*b), 100.0 * p))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        f.write_str(s.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::DmaDir;

    #[test]
    fn sizes_count_transfers_not_lines() {
        let mut r = RequestSizes::default();
        for (kind, dir, len) in [
            (Kind::Xfer, DmaDir::ToMemory, 4096),
            (Kind::Begin, DmaDir::ToMemory, 128),
            (Kind::End, DmaDir::ToMemory, 128),
            (Kind::Xfer, DmaDir::FromMemory, 1500),
        ] {
            r.add(&Record::transfer(kind, 0, dir, 0, len));
        }
        r.add(&Record::dma(0, true, 0, 64));
        assert_eq!((r.to_memory.count(), r.from_memory.count()), (2, 1));
        assert_eq!(r.to_memory.mean(), 2112.0);
        // 128 <= 128; 4096 only from 4K on.
        let cdf = r.to_memory.cdf();
        assert_eq!(cdf.first(), Some(&(64, 0.0)));
        assert_eq!(cdf[1], (128, 0.5));
        assert_eq!(cdf.last(), Some(&(4096, 1.0)));
        assert_eq!(r.from_memory.cdf().last(), Some(&(2048, 1.0)));
        let text = r.to_string();
        assert!(text.contains("2 requests, mean 2112 bytes"), "{text}");
        assert!(
            text.contains("128:50.0%") && text.contains("4K:100.0%"),
            "{text}"
        );
    }
}
