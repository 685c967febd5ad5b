//! [`TraceStats`]: what a trace holds, counted by kind and source.

use crate::{Device, Kind, Record, RecordSource, Source, TraceError};
use std::fmt;

/// Record counts of a trace (`dmalab sim stat` prints them, one
/// `key value` a line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// CPU memory references.
    pub cpu_refs: u64,
    /// DMA memory references (line references between transfer markers).
    pub dma_refs: u64,
    /// Whole DMA transfers (`xfer` records).
    pub dma_transfers: u64,
    /// Transfer markers (`begin` and `end` records).
    pub markers: u64,
    /// The trace's own time: the sum of its gaps, ns (saturating).
    pub span_ns: u64,
    /// Per DMA stream, indexed `[device as usize][write as usize]`
    /// ([`Device::stream`] names it): bytes the device moved, counting
    /// each line reference's length and each whole transfer's.
    pub dma_bytes_by_stream: [[u64; 2]; 4],
}

impl TraceStats {
    /// Counts one record.
    pub fn add(&mut self, r: &Record) {
        self.span_ns = self.span_ns.saturating_add(r.gap_ns);
        match (r.kind, r.source) {
            (Kind::Ref, Source::Cpu) => self.cpu_refs += 1,
            (Kind::Ref, Source::Dma) => self.dma_refs += 1,
            (Kind::Xfer, _) => self.dma_transfers += 1,
            (Kind::Begin | Kind::End, _) => self.markers += 1,
        }
        if matches!(r.kind, Kind::Ref | Kind::Xfer) && r.source == Source::Dma {
            let b = &mut self.dma_bytes_by_stream[r.device as usize][r.write as usize];
            *b = b.saturating_add(u64::from(r.len));
        }
    }

    /// Counts every record `src` yields.
    pub fn count<S: RecordSource>(src: &mut S) -> Result<Self, TraceError> {
        let mut stats = TraceStats::default();
        let mut r = Record::default();
        while src.next_record(&mut r)? {
            stats.add(&r);
        }
        Ok(stats)
    }
}

impl fmt::Display for TraceStats {
    /// `key value` lines, no final newline; then `dma_bytes STREAM N`
    /// for each DMA stream that moved data.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu_refs {}\ndma_refs {}\ndma_transfers {}\nmarkers {}\nspan_ns {}",
            self.cpu_refs, self.dma_refs, self.dma_transfers, self.markers, self.span_ns
        )?;
        for d in Device::ALL {
            for w in [true, false] {
                let b = self.dma_bytes_by_stream[d as usize][w as usize];
                if b != 0 {
                    write!(f, "\ndma_bytes {} {b}", d.stream(w))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DmaDir, VecSource};

    #[test]
    fn counts_each_kind_and_sums_the_gaps() {
        let recs = [
            Record::cpu(3, false, 0, 64),
            Record::cpu(4, true, 64, 64),
            Record::transfer(Kind::Begin, 10, DmaDir::ToMemory, 0, 128),
            Record::dma(1, true, 0, 64),
            Record::dma(1, true, 64, 64),
            Record::transfer(Kind::End, 0, DmaDir::ToMemory, 0, 128),
            Record::transfer(Kind::Xfer, 5, DmaDir::FromMemory, 0, 4096),
            Record::cpu(u64::MAX, false, 0, 64),
        ];
        let s = TraceStats::count(&mut VecSource::new(&recs)).unwrap();
        assert_eq!(
            s,
            TraceStats {
                cpu_refs: 3,
                dma_refs: 2,
                dma_transfers: 1,
                markers: 2,
                span_ns: u64::MAX,
                dma_bytes_by_stream: [[4096, 128], [0; 2], [0; 2], [0; 2]],
            }
        );
        assert_eq!(
            s.to_string(),
            format!(
                "cpu_refs 3\ndma_refs 2\ndma_transfers 1\nmarkers 2\nspan_ns {}\ndma_bytes untagged-w 128\ndma_bytes untagged-r 4096",
                u64::MAX
            )
        );
    }

    #[test]
    fn dma_bytes_are_counted_per_device_and_direction() {
        let recs = [
            Record::transfer(Kind::Begin, 0, DmaDir::ToMemory, 0, 128).from_device(Device::Nic),
            Record::dma(0, true, 0, 64).from_device(Device::Nic),
            Record::dma(0, true, 64, 64).from_device(Device::Nic),
            Record::dma(0, false, 64, 64).from_device(Device::Nic),
            Record::transfer(Kind::Xfer, 0, DmaDir::ToMemory, 0, 8192).from_device(Device::Disk),
        ];
        let s = TraceStats::count(&mut VecSource::new(&recs)).unwrap();
        assert_eq!(s.dma_bytes_by_stream[1], [64, 128]);
        assert_eq!(s.dma_bytes_by_stream[2], [0, 8192]);
        assert!(s
            .to_string()
            .ends_with("dma_bytes nic-rx 128\ndma_bytes nic-tx 64\ndma_bytes disk-rd 8192"));
    }
}
