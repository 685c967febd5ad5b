//! Latency histograms as text tables. A [`LatencySummary`] carries buckets
//! about 9% wide; a table merges them into wider rows and prints one count
//! column per histogram. Two layouts share the row merging:
//! - [`bars`] (`dmalab probe`): one histogram in half-octave rows, each row
//!   spanning the buckets it holds, with its share and a bar;
//! - [`columns`] (`dmalab page`): several named histograms side by side in
//!   octave rows labelled with their edges `[2^k, 2^(k+1))`.

use crate::hist::LatencySummary;
use crate::units::fmt_ns;
use std::collections::BTreeMap;
use std::fmt::Write;

/// How wide the rows of a table are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowWidth {
    /// Rows a factor 2^(1/2) wide.
    HalfOctave,
    /// Rows a factor 2 wide, from a power of two.
    Octave,
}

impl RowWidth {
    /// The row a bucket whose lowest value is `lo_ns` falls in.
    fn key(self, lo_ns: u64) -> i64 {
        match self {
            Self::HalfOctave => ((lo_ns.max(1) as f64).log2() * 2.0).floor() as i64,
            Self::Octave => i64::from(63 - lo_ns.max(1).leading_zeros()),
        }
    }
}

/// One row of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Row number: half-octaves or octaves above 1 ns.
    pub key: i64,
    /// Lowest value of the buckets merged into the row, nanoseconds.
    pub lo_ns: u64,
    /// Highest value of the buckets merged into the row, nanoseconds.
    pub hi_ns: u64,
    /// Samples in the row, one count per histogram.
    pub counts: Vec<u64>,
}

/// The non-empty rows of `hists` (a row appears when any histogram has a
/// bucket in it), lowest first.
pub fn rows(hists: &[&LatencySummary], width: RowWidth) -> Vec<Row> {
    let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
    for (i, s) in hists.iter().enumerate() {
        for b in &s.buckets {
            let key = width.key(b.lo_ns);
            let r = rows.entry(key).or_insert_with(|| Row {
                key,
                lo_ns: b.lo_ns,
                hi_ns: b.hi_ns,
                counts: vec![0; hists.len()],
            });
            r.lo_ns = r.lo_ns.min(b.lo_ns);
            r.hi_ns = r.hi_ns.max(b.hi_ns);
            r.counts[i] += b.count;
        }
    }
    rows.into_values().collect()
}

/// One histogram in half-octave rows: from, to (the row's buckets), samples,
/// share of all samples, and a bar of up to 40 `#` scaled to the fullest
/// row.
pub fn bars(sum: &LatencySummary) -> String {
    let rows = rows(&[sum], RowWidth::HalfOctave);
    let total: u64 = rows.iter().map(|r| r.counts[0]).sum::<u64>().max(1);
    let most = rows.iter().map(|r| r.counts[0]).max().unwrap_or(1).max(1);
    let mut s = String::from("        from           to      samples   share\n");
    for r in rows {
        let c = r.counts[0];
        let bar = "#".repeat(((c as f64 / most as f64) * 40.0).ceil() as usize);
        let _ = writeln!(
            s,
            "{:>12} {:>12} {:>12} {:>6.2}%  {}",
            fmt_ns(r.lo_ns as f64),
            fmt_ns(r.hi_ns as f64),
            c,
            c as f64 * 100.0 / total as f64,
            bar
        );
    }
    s
}

/// Named histograms side by side in octave rows `[2^k, 2^(k+1))`, each line
/// indented by two spaces.
pub fn columns(hists: &[(&str, &LatencySummary)]) -> String {
    let sums: Vec<&LatencySummary> = hists.iter().map(|(_, s)| *s).collect();
    let mut out = String::new();
    let _ = write!(out, "  {:>23}", "latency");
    for (name, _) in hists {
        let _ = write!(out, " {name:>11}");
    }
    let _ = writeln!(out);
    for r in rows(&sums, RowWidth::Octave) {
        let lo = 1u64 << r.key;
        let _ = write!(
            out,
            "  [{:>9}, {:>9})",
            fmt_ns(lo as f64),
            fmt_ns((lo * 2) as f64)
        );
        for c in r.counts {
            let _ = write!(out, " {c:>11}");
        }
        let _ = writeln!(out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::Bucket;

    fn summary(buckets: &[(u64, u64, u64)]) -> LatencySummary {
        LatencySummary {
            samples: buckets.iter().map(|b| b.2).sum(),
            buckets: buckets
                .iter()
                .map(|&(lo_ns, hi_ns, count)| Bucket {
                    lo_ns,
                    hi_ns,
                    count,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn half_octave_rows_span_their_buckets() {
        let s = summary(&[
            (0, 0, 3),
            (1, 1, 4),
            (88, 95, 10),
            (96, 104, 20),
            (105, 114, 7),
        ]);
        let r = rows(&[&s], RowWidth::HalfOctave);
        // 0 and 1 ns share the row of 1 ns; 88 ns is below 2^6.5 = 90.5.
        let got: Vec<(i64, u64, u64, u64)> = r
            .iter()
            .map(|r| (r.key, r.lo_ns, r.hi_ns, r.counts[0]))
            .collect();
        assert_eq!(got, [(0, 0, 1, 7), (12, 88, 95, 10), (13, 96, 114, 27)]);
    }

    #[test]
    fn octave_rows_count_each_histogram_apart() {
        let a = summary(&[(5, 5, 1), (64, 70, 2), (127, 127, 3)]);
        let b = summary(&[(100, 110, 4), (4096, 4400, 5)]);
        let r = rows(&[&a, &b], RowWidth::Octave);
        let got: Vec<(i64, Vec<u64>)> = r.into_iter().map(|r| (r.key, r.counts)).collect();
        assert_eq!(got, [(2, vec![1, 0]), (6, vec![5, 4]), (12, vec![0, 5])]);
    }

    #[test]
    fn empty_histograms_give_a_header_only() {
        let e = LatencySummary::default();
        assert_eq!(bars(&e), "        from           to      samples   share\n");
        assert_eq!(
            columns(&[("read", &e)]),
            "                  latency        read\n"
        );
    }

    #[test]
    fn bar_rows_add_up_and_the_fullest_row_has_40() {
        let s = summary(&[(10, 10, 50), (1000, 1100, 200), (2000, 2100, 1)]);
        let t = bars(&s);
        let lines: Vec<&str> = t.lines().skip(1).collect();
        assert_eq!(lines.len(), 3);
        let counts: u64 = lines
            .iter()
            .map(|l| l.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(counts, 251);
        assert!(lines[1].ends_with(&format!("  {}", "#".repeat(40))), "{t}");
        assert!(lines[2].ends_with("  #"), "{t}");
    }
}
