//! Request streams for checking the DRAM model against other simulators
//! (DRAMsim3, Ramulator 2): the streams themselves, and a replay of one
//! through [`Dram`] with the drivers' semantics.
//!
//! Semantics shared with the drivers in `scripts/dram-refs/`: requests are
//! presented in stream order; a request is presented `gap` memory clocks
//! after the previous one was accepted (later when the controller's queue
//! is full: then it is accepted when an entry frees); at most `slots` reads
//! are outstanding (a read waits for a slot). Read latency runs from
//! acceptance to the last data; the total time from the first presentation
//! to the last data of any request.

use crate::config::DramConfig;
use crate::dram::Dram;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A stream's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamKind {
    /// Reads of consecutive lines.
    Seq,
    /// Reads of uniformly random lines in 1 GiB.
    Rand,
    /// Sequential writes (a DMA buffer at 512 MiB) alternating with random
    /// reads in the first 512 MiB.
    Mix,
    /// Reads alternating between two rows of bank 0 (DDR4-3200 mapping
    /// `ro-ba-bg-co`: rows 128 KiB apart), walking their columns.
    Rows,
}

impl StreamKind {
    /// Every kind.
    pub const ALL: [StreamKind; 4] = [Self::Seq, Self::Rand, Self::Mix, Self::Rows];

    /// The kind's name (`seq`, `rand`, `mix`, `rows`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Seq => "seq",
            Self::Rand => "rand",
            Self::Mix => "mix",
            Self::Rows => "rows",
        }
    }

    /// A kind by name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// One request of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamReq {
    /// A write (else a read).
    pub write: bool,
    /// Byte address of the line.
    pub addr: u64,
}

/// `n` requests of `kind`, from a fixed seed.
pub fn stream(kind: StreamKind, n: usize, seed: u64) -> Vec<StreamReq> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let line = 64u64;
    (0..n as u64)
        .map(|i| match kind {
            StreamKind::Seq => StreamReq {
                write: false,
                addr: i * line,
            },
            StreamKind::Rand => StreamReq {
                write: false,
                addr: rng.gen_range(0..(1u64 << 30) / line) * line,
            },
            StreamKind::Mix if i % 2 == 0 => StreamReq {
                write: true,
                addr: (512 << 20) + (i / 2) * line,
            },
            StreamKind::Mix => StreamReq {
                write: false,
                addr: rng.gen_range(0..(512u64 << 20) / line) * line,
            },
            StreamKind::Rows => StreamReq {
                write: false,
                addr: (i % 2) * (128 << 10) + ((i / 2) % 128) * line,
            },
        })
        .collect()
}

/// The stream as text, one request a line: `R 0x...` or `W 0x...` (what
/// the reference drivers read).
pub fn stream_text(reqs: &[StreamReq]) -> String {
    let mut s = String::with_capacity(reqs.len() * 16);
    for r in reqs {
        s.push_str(if r.write { "W " } else { "R " });
        s.push_str(&format!("{:#x}\n", r.addr));
    }
    s
}

/// What one replay measured (the drivers print the same fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamFigures {
    /// Reads served.
    pub reads: u64,
    /// Writes served.
    pub writes: u64,
    /// Column commands to an already open row (reads and writes).
    pub row_hits: u64,
    /// Row activations.
    pub acts: u64,
    /// Mean read latency, acceptance to last data, ns.
    pub read_lat_mean_ns: f64,
    /// First presentation to the last data, ns.
    pub total_ns: f64,
}

/// Replays `reqs` through a controller for `cfg` with `gap` memory clocks
/// between acceptance and the next presentation and `slots` outstanding
/// reads.
pub fn replay(
    cfg: &DramConfig,
    reqs: &[StreamReq],
    gap: u64,
    slots: usize,
) -> Result<StreamFigures, String> {
    let mut d = Dram::new(cfg, 64)?;
    let tck = u64::from(cfg.timing.tck_ps);
    let mut t = 0u64;
    let mut outstanding: VecDeque<u64> = VecDeque::new();
    let mut last = 0u64;
    for r in reqs {
        let acc = if r.write {
            d.write(r.addr, t)
        } else {
            if outstanding.len() >= slots.max(1) {
                if let Some(old) = outstanding.pop_front() {
                    let done = d.completion(old);
                    last = last.max(done);
                    // Presented at the next clock edge after the data.
                    t = t.max(done.div_ceil(tck) * tck);
                }
            }
            let (tk, acc) = d.read(r.addr, t);
            outstanding.push_back(tk);
            acc
        };
        t = acc.div_ceil(tck) * tck + gap * tck;
    }
    for tk in outstanding {
        last = last.max(d.completion(tk));
    }
    last = last.max(d.finish());
    let s = d.stats();
    let rows = |x: crate::dram::RowStats| (x.hits, x.misses + x.conflicts);
    let (rh, ra) = rows(s.read_rows);
    let (wh, wa) = rows(s.write_rows);
    Ok(StreamFigures {
        reads: s.reads,
        writes: s.writes,
        row_hits: rh + wh,
        acts: ra + wa,
        read_lat_mean_ns: s.read_lat_mean_ns,
        total_ns: last as f64 / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_have_their_shape() {
        let s = stream(StreamKind::Rows, 4, 1);
        assert_eq!(
            s.iter().map(|r| r.addr).collect::<Vec<_>>(),
            [0, 128 << 10, 64, (128 << 10) + 64]
        );
        let m = stream(StreamKind::Mix, 4, 1);
        assert!(m[0].write && !m[1].write && m[2].write);
        assert_eq!(m[2].addr, (512 << 20) + 64);
        assert_eq!(
            stream(StreamKind::Rand, 8, 7),
            stream(StreamKind::Rand, 8, 7)
        );
        assert!(stream_text(&m).starts_with("W 0x20000000\nR 0x"));
    }

    #[test]
    fn sequential_reads_stream_at_the_bus_rate() {
        let cfg = DramConfig::preset("ddr4-3200").unwrap();
        let f = replay(&cfg, &stream(StreamKind::Seq, 4000, 1), 0, 64).unwrap();
        assert_eq!(f.reads, 4000);
        // 64 B every 4 clocks of 0.625 ns is 25.6 GB/s; one ACT per row
        // (128 lines) across the 16 banks, and refresh, cost some of it.
        let gbps = 4000.0 * 64.0 / f.total_ns;
        assert!(gbps > 15.0 && gbps <= 25.6, "{gbps} GB/s");
        assert!(f.row_hits >= 4000 - 4000 / 128 - 40, "{f:?}");
    }
}
