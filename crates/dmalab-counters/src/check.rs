//! The thesis' check of counted against expected uncore events for a
//! storage load (section 5.4, Figures 5.5 and 5.6): every 64-byte line the
//! device reads from memory is a PCIeRdCur (data blocks and the 64-byte
//! submission entries), every line it writes whole is an ItoM, and every
//! completion entry (16 bytes, a partial line) is an RFO.

use serde::Serialize;
use std::collections::BTreeMap;

/// What the load itself accounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LoadAccounting {
    /// Block size, bytes.
    pub bs_bytes: u64,
    /// Commands submitted and completed.
    pub commands: u64,
    /// Completion entries written by the device.
    pub completions: u64,
    /// Blocks the device read from memory (storage writes).
    pub blocks_read_from_memory: u64,
    /// Blocks the device wrote to memory (storage reads).
    pub blocks_written_to_memory: u64,
}

/// One row of the check.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckRow {
    /// The transaction (`PCIeRdCur`, `ItoM`, `RFO`).
    pub transaction: &'static str,
    /// How the expectation is computed.
    pub formula: &'static str,
    /// Expected count from the load's accounting.
    pub expected: f64,
    /// Counted (hits + misses); `None` when not counted here.
    pub counted: Option<f64>,
    /// counted / expected.
    pub ratio: Option<f64>,
    /// The event ids counted for it.
    pub events: Vec<String>,
    /// Every one of them a whole count, never scaled (exact mode, or
    /// counted all the time it was enabled): see [`mark_exact`].
    pub exact: bool,
}

/// Marks the rows whose every event was counted exactly (`exact(id)`,
/// from the report's events): a row from scaled counts is an estimate,
/// which the thesis' method (one event per run) avoids.
pub fn mark_exact(rows: &mut [CheckRow], exact: impl Fn(&str) -> bool) {
    for r in rows {
        r.exact = r.counted.is_some() && r.events.iter().all(|id| exact(id));
    }
}

/// The rows for the events present in `totals` (event ids of the
/// `skx-pcie`/`icx-pcie`/`spr-iio` recipes: `pcirdcur_hit`, `pcirdcur_miss`,
/// ...; of `hsx-pcie`: `pcirdcur_all`, ...).
/// Empty when none of them was requested.
pub fn expected_vs_counted(
    acc: &LoadAccounting,
    totals: &BTreeMap<String, Option<f64>>,
) -> Vec<CheckRow> {
    // `hsx-pcie` counts every insert of the opcode in one event
    // (`<stem>_all`); the later recipes count hits and misses apart.
    let pair = |stem: &str| -> Option<(Option<f64>, Vec<String>)> {
        let all = format!("{stem}_all");
        if let Some(v) = totals.get(&all) {
            return Some((*v, vec![all]));
        }
        let (hit, miss) = (format!("{stem}_hit"), format!("{stem}_miss"));
        let v = match (totals.get(&hit), totals.get(&miss)) {
            (None, None) => return None,
            (Some(Some(x)), Some(Some(y))) => Some(x + y),
            _ => None,
        };
        Some((v, vec![hit, miss]))
    };
    type Row = (
        &'static str,
        &'static str,
        f64,
        Option<(Option<f64>, Vec<String>)>,
    );
    let rows: [Row; 3] = [
        (
            "PCIeRdCur",
            "(blocks read from memory x bs + commands x 64) / 64",
            (acc.blocks_read_from_memory as f64 * acc.bs_bytes as f64 + acc.commands as f64 * 64.0)
                / 64.0,
            pair("pcirdcur"),
        ),
        (
            "ItoM",
            "blocks written to memory x bs / 64",
            acc.blocks_written_to_memory as f64 * acc.bs_bytes as f64 / 64.0,
            pair("itom"),
        ),
        ("RFO", "completions", acc.completions as f64, pair("rfo")),
    ];
    rows.into_iter()
        .filter_map(|(t, f, expected, counted)| {
            let (counted, events) = counted?;
            Some(CheckRow {
                transaction: t,
                formula: f,
                expected,
                counted,
                ratio: counted.and_then(|c| (expected > 0.0).then(|| c / expected)),
                events,
                exact: false,
            })
        })
        .collect()
}

/// The check as text.
pub fn render(rows: &[CheckRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from("expected vs counted (thesis section 5.4):\n");
    for r in rows {
        let counted = r
            .counted
            .map_or("not counted".to_string(), |c| format!("{c:.0}"));
        let ratio = r.ratio.map_or(String::new(), |x| format!("  ({:.3}x)", x));
        let how = match (r.counted, r.exact) {
            (None, _) => "",
            (Some(_), true) => "  exact",
            (Some(_), false) => "  scaled",
        };
        s.push_str(&format!(
            "  {:<10} expected {:>14.0}  counted {:>14}{}{}   [{}]\n",
            r.transaction, r.expected, counted, ratio, how, r.formula
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thesis_formulas() {
        // A storage read of 1000 commands x 8 blocks of 4 KiB: the device
        // writes 8000 x 4096 / 64 = 512000 lines (ItoM), reads 1000
        // submission entries (PCIeRdCur) and writes 1000 completions (RFO).
        let acc = LoadAccounting {
            bs_bytes: 4096,
            commands: 1000,
            completions: 1000,
            blocks_read_from_memory: 0,
            blocks_written_to_memory: 8000,
        };
        let mut t = BTreeMap::new();
        t.insert("pcirdcur_hit".to_string(), Some(900.0));
        t.insert("pcirdcur_miss".to_string(), Some(100.0));
        t.insert("itom_hit".to_string(), Some(500_000.0));
        t.insert("itom_miss".to_string(), Some(12_000.0));
        t.insert("rfo_hit".to_string(), None);
        t.insert("rfo_miss".to_string(), None);
        let rows = expected_vs_counted(&acc, &t);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            (rows[0].expected, rows[0].counted, rows[0].ratio),
            (1000.0, Some(1000.0), Some(1.0))
        );
        assert_eq!(rows[1].expected, 512_000.0);
        assert_eq!(rows[1].counted, Some(512_000.0));
        assert_eq!((rows[2].expected, rows[2].counted), (1000.0, None));
        assert!(render(&rows).contains("not counted"));
        // A storage write of 10 commands x 2 blocks of 512 B: 10 x 2 x 8
        // data lines + 10 submission entries.
        let w = LoadAccounting {
            bs_bytes: 512,
            commands: 10,
            completions: 10,
            blocks_read_from_memory: 20,
            blocks_written_to_memory: 0,
        };
        assert_eq!(expected_vs_counted(&w, &t)[0].expected, 170.0);
        assert!(expected_vs_counted(&w, &BTreeMap::new()).is_empty());
    }

    /// `hsx-pcie` counts all inserts of an opcode (hits and misses) in one
    /// event: `<stem>_all` is the counted value, its `_miss` not added.
    #[test]
    fn haswell_all_inserts_are_the_counted_value() {
        let acc = LoadAccounting {
            bs_bytes: 4096,
            commands: 10,
            completions: 10,
            blocks_read_from_memory: 0,
            blocks_written_to_memory: 10,
        };
        let mut t = BTreeMap::new();
        t.insert("itom_all".to_string(), Some(640.0));
        t.insert("itom_miss".to_string(), Some(40.0));
        t.insert("rfo_all".to_string(), Some(10.0));
        let rows = expected_vs_counted(&acc, &t);
        let got: Vec<(&str, Option<f64>, Option<f64>)> = rows
            .iter()
            .map(|r| (r.transaction, r.counted, r.ratio))
            .collect();
        assert_eq!(
            got,
            [
                ("ItoM", Some(640.0), Some(1.0)),
                ("RFO", Some(10.0), Some(1.0))
            ]
        );
    }

    /// A row counted from exact values only says so; one with a scaled
    /// event (or none counted) does not.
    #[test]
    fn rows_say_whether_their_counts_were_exact() {
        let acc = LoadAccounting {
            bs_bytes: 4096,
            commands: 10,
            completions: 10,
            blocks_read_from_memory: 0,
            blocks_written_to_memory: 10,
        };
        let mut t = BTreeMap::new();
        t.insert("itom_hit".to_string(), Some(600.0));
        t.insert("itom_miss".to_string(), Some(40.0));
        t.insert("rfo_all".to_string(), Some(10.0));
        t.insert("pcirdcur_hit".to_string(), Some(10.0));
        t.insert("pcirdcur_miss".to_string(), None);
        let mut rows = expected_vs_counted(&acc, &t);
        mark_exact(&mut rows, |id| id != "itom_miss");
        let got: Vec<(&str, bool)> = rows.iter().map(|r| (r.transaction, r.exact)).collect();
        assert_eq!(got, [("PCIeRdCur", false), ("ItoM", false), ("RFO", true)]);
        assert_eq!(rows[1].events, ["itom_hit", "itom_miss"]);
        let text = render(&rows);
        assert!(text.contains("(1.000x)  exact"), "{text}");
        assert!(text.contains("(1.000x)  scaled"), "{text}");
    }
}
