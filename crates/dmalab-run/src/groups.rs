//! Aggressor groups in the results: each member's work in the victim's
//! window when it ran in its group, beside the same aggressor's work when
//! it ran alone (same configuration and victim), and the group's sum; in a
//! group's control cycle, each member's stand-in beside the member in the
//! group's runs (the rate it was paced at). What
//! `dmalab run` prints after its statistics and the report's "Aggressor
//! groups" section are both drawn from [`rows`].

use crate::draw::{bw_fmt, rate_fmt};
use crate::record::{Evidence, Results, RunRecord};
use dmalab_core::schema::RunStatus;

/// One member of a group (or the group's sum) in one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberRow {
    /// Configuration.
    pub configuration: String,
    /// Victim.
    pub victim: String,
    /// The group's load name.
    pub group: String,
    /// The member's name; None for the group's sum.
    pub member: Option<String>,
    /// Completed runs of the group with evidence for this member.
    pub n: usize,
    /// Mean data bandwidth in the victim's window, bytes per second.
    pub bw_bytes: Option<f64>,
    /// Mean command rate in the victim's window, per second.
    pub cmd_per_s: Option<f64>,
    /// What the row is compared with: `alone` (the same aggressor alone
    /// beside the same victim) or, for a group's control cycle, `in GROUP`
    /// (the member in the group's runs, whose rate its stand-in was paced
    /// at).
    pub reference: String,
    /// The reference's mean bandwidth, bytes per second (None for the sum,
    /// or when it did not run).
    pub reference_bw_bytes: Option<f64>,
    /// The reference's mean command rate, per second.
    pub reference_cmd_per_s: Option<f64>,
    /// A row of a group's control cycle: compared by command rate only (a
    /// stand-in is paced at its member's command rate; the bytes it counts
    /// are not moved into host memory).
    pub control: bool,
}

impl MemberRow {
    /// The change of its work against its reference, percent: of the
    /// bandwidth, or of the command rate when it moves no data.
    pub fn change_pct(&self) -> Option<f64> {
        let pick = |x: Option<f64>, y: Option<f64>| {
            let (x, y) = (x?, y?);
            (y > 0.0).then(|| 100.0 * (x - y) / y)
        };
        let by_rate = pick(self.cmd_per_s, self.reference_cmd_per_s);
        if self.control {
            return by_rate;
        }
        pick(self.bw_bytes, self.reference_bw_bytes).or(by_rate)
    }
}

/// Mean of the figures `f` takes from each evidence.
fn mean(evs: &[&Evidence], f: impl Fn(&Evidence) -> f64) -> Option<f64> {
    (!evs.is_empty()).then(|| evs.iter().map(|e| f(e)).sum::<f64>() / evs.len() as f64)
}

fn completed(r: &RunRecord) -> bool {
    r.status == RunStatus::Completed
}

/// Every group cell's members and sum, in the order the runs were
/// recorded.
pub fn rows(res: &Results) -> Vec<MemberRow> {
    let mut cells: Vec<(String, String, String, Vec<String>)> = Vec::new();
    for r in &res.runs {
        let Some(a) = r.aggressor.as_ref().filter(|a| !a.members.is_empty()) else {
            continue;
        };
        if !cells
            .iter()
            .any(|c| c.0 == r.configuration && c.1 == r.victim && c.2 == r.load)
        {
            let names = a.members.iter().map(|m| m.name.clone()).collect();
            cells.push((
                r.configuration.clone(),
                r.victim.clone(),
                r.load.clone(),
                names,
            ));
        }
    }
    let mut out = Vec::new();
    for (c, v, g, names) in cells {
        let in_cell = |load: &str| -> Vec<&RunRecord> {
            res.runs
                .iter()
                .filter(|r| {
                    completed(r)
                        && r.configuration == c
                        && r.victim == v
                        && r.load == load
                        && r.sweep_value.is_none()
                })
                .collect()
        };
        // A group's control cycle is compared with the group's runs.
        let of_group = crate::plan::controlled(&g);
        let row = |member: Option<String>, evs: Vec<&Evidence>, refs: Vec<&Evidence>| MemberRow {
            configuration: c.clone(),
            victim: v.clone(),
            group: g.clone(),
            member,
            n: evs.len(),
            bw_bytes: mean(&evs, |e| e.bw_bytes),
            cmd_per_s: mean(&evs, |e| e.cmd_per_s),
            reference: of_group.map_or("alone".into(), |o| format!("in {o}")),
            reference_bw_bytes: mean(&refs, |e| e.bw_bytes),
            reference_cmd_per_s: mean(&refs, |e| e.cmd_per_s),
            control: of_group.is_some(),
        };
        // Each member's evidence in the group runs of load `load`.
        let member_evs = |load: &str, name: &str| -> Vec<&Evidence> {
            in_cell(load)
                .into_iter()
                .filter_map(|r| r.aggressor.as_ref())
                .filter_map(|a| a.members.iter().find(|m| m.name == name))
                .filter_map(|m| m.outcome.evidence.as_ref())
                .collect()
        };
        for name in &names {
            let refs: Vec<&Evidence> = match of_group {
                Some(o) => member_evs(o, name),
                None => in_cell(name)
                    .into_iter()
                    .filter_map(|r| r.aggressor.as_ref()?.evidence.as_ref())
                    .collect(),
            };
            out.push(row(Some(name.clone()), member_evs(&g, name), refs));
        }
        let sums: Vec<&Evidence> = in_cell(&g)
            .into_iter()
            .filter_map(|r| r.aggressor.as_ref()?.evidence.as_ref())
            .collect();
        let refs: Vec<&Evidence> = of_group
            .map(|o| {
                in_cell(o)
                    .into_iter()
                    .filter_map(|r| r.aggressor.as_ref()?.evidence.as_ref())
                    .collect()
            })
            .unwrap_or_default();
        out.push(row(None, sums, refs));
    }
    out
}

/// The rows' cells as text, in the table's column order.
pub fn row_cells(r: &MemberRow) -> [String; 9] {
    let f = |x: Option<f64>, fmt: fn(f64) -> String| x.map_or("-".into(), fmt);
    [
        r.configuration.clone(),
        r.victim.clone(),
        r.group.clone(),
        r.member.clone().unwrap_or_else(|| "sum".into()),
        r.n.to_string(),
        f(r.bw_bytes, bw_fmt),
        f(r.cmd_per_s, rate_fmt),
        match (r.reference_bw_bytes, r.reference_cmd_per_s) {
            (None, None) => "-".into(),
            (b, c) => format!("{} {} {}", r.reference, f(b, bw_fmt), f(c, rate_fmt)),
        },
        r.change_pct().map_or("-".into(), |p| format!("{p:+.2}%")),
    ]
}

/// The header of the groups table.
pub const COLUMNS: [&str; 9] = [
    "configuration",
    "victim",
    "group",
    "member",
    "n",
    "bandwidth in group",
    "commands in group",
    "reference",
    "vs reference",
];

/// The groups table as text (what `dmalab run` prints after the
/// statistics); None without groups.
pub fn text_table(res: &Results) -> Option<String> {
    let rows = rows(res);
    if rows.is_empty() {
        return None;
    }
    let mut table: Vec<[String; 9]> = vec![COLUMNS.map(String::from)];
    table.extend(rows.iter().map(row_cells));
    let mut widths = [0usize; 9];
    for r in &table {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &table {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{AggressorOutcome, MemberOutcome};

    fn ev(bw: f64, cmd: f64) -> Evidence {
        Evidence {
            bw_bytes: bw,
            cmd_per_s: cmd,
            ..Default::default()
        }
    }

    fn run(load: &str, status: RunStatus, agg: AggressorOutcome) -> RunRecord {
        let mut r: RunRecord = serde_json::from_value(serde_json::json!({
            "record": "run", "experiment_hash": "h", "index": 0, "configuration": "c",
            "repetition": 1, "victim": "v", "load": load, "started_at": "t",
            "status": "completed", "metric": "wall_s", "unit": "s", "better": "lower",
            "victim_wall_ns": 1, "victim_argv": [], "victim_cpus": "0"
        }))
        .unwrap();
        r.status = status;
        r.aggressor = Some(agg);
        r
    }

    fn group(a: (f64, f64), b: (f64, f64)) -> AggressorOutcome {
        let m = |name: &str, (bw, cmd): (f64, f64)| MemberOutcome {
            name: name.into(),
            outcome: AggressorOutcome {
                evidence: Some(ev(bw, cmd)),
                ..Default::default()
            },
        };
        AggressorOutcome {
            evidence: Some(ev(a.0 + b.0, a.1 + b.1)),
            members: vec![m("a", a), m("b", b)],
            ..Default::default()
        }
    }

    fn header() -> crate::record::Header {
        serde_json::from_value(serde_json::json!({
            "record": "header", "schema_version": 1,
            "tool": {"name": "dmalab", "version": "0"}, "experiment": "e",
            "experiment_path": "e.toml", "experiment_hash": "h", "experiment_toml": "",
            "started_at": "t", "host": serde_json::to_value(dmalab_core::host::HostInfo::default()).unwrap(),
            "planned_runs": 0, "victims": [], "configurations": ["c"], "loads": [],
            "noisy_cv_pct": 5.0, "aggressor_cpus": "1", "victim_cpus": "0"
        }))
        .unwrap()
    }

    fn alone(bw: f64, cmd: f64) -> AggressorOutcome {
        AggressorOutcome {
            evidence: Some(ev(bw, cmd)),
            ..Default::default()
        }
    }

    #[test]
    fn members_in_the_group_beside_themselves_alone_and_the_sum() {
        let res = Results {
            header: header(),
            runs: vec![
                run("a", RunStatus::Completed, alone(100.0, 10.0)),
                run("b", RunStatus::Completed, alone(0.0, 50.0)),
                run("a+b", RunStatus::Completed, group((60.0, 6.0), (0.0, 40.0))),
                run("a+b", RunStatus::Completed, group((80.0, 8.0), (0.0, 30.0))),
                // A failed run is not averaged in.
                run("a+b", RunStatus::Failed, group((1e9, 1e9), (1e9, 1e9))),
            ],
            complete_len: 0,
        };
        let rows = rows(&res);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(rows[0].member.as_deref(), Some("a"));
        assert_eq!(
            (rows[0].n, rows[0].bw_bytes, rows[0].cmd_per_s),
            (2, Some(70.0), Some(7.0))
        );
        assert_eq!(rows[0].reference, "alone");
        assert_eq!(rows[0].reference_bw_bytes, Some(100.0));
        assert_eq!(rows[0].change_pct(), Some(-30.0));
        // b moves no data: its change is its command rate's.
        assert_eq!(rows[1].change_pct(), Some(-30.0));
        assert_eq!(rows[2].member, None);
        assert_eq!(
            (rows[2].bw_bytes, rows[2].cmd_per_s),
            (Some(70.0), Some(42.0))
        );
        assert_eq!(rows[2].change_pct(), None);
        let t = text_table(&res).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("configuration  victim  group  member  n"),
            "{t}"
        );
        assert!(lines[1].contains("a+b    a "), "{t}");
        assert!(lines[3].contains("sum"), "{t}");
        assert!(lines[1].ends_with("-30.00%"), "{t}");
    }

    #[test]
    fn a_groups_control_is_compared_with_the_members_in_the_group_by_rate() {
        let res = Results {
            header: header(),
            runs: vec![
                run("a", RunStatus::Completed, alone(100.0, 10.0)),
                run("a+b", RunStatus::Completed, group((80.0, 8.0), (0.0, 40.0))),
                // The stand-ins move no data, at about the members' rates.
                run(
                    "a+b/control",
                    RunStatus::Completed,
                    group((0.0, 6.0), (0.0, 40.0)),
                ),
            ],
            complete_len: 0,
        };
        let rows = rows(&res);
        assert_eq!(rows.len(), 6, "{rows:?}");
        let ctl = &rows[3..];
        assert_eq!(ctl[0].group, "a+b/control");
        assert_eq!(ctl[0].member.as_deref(), Some("a"));
        assert_eq!(ctl[0].reference, "in a+b");
        // Against a in the group (8/s), not alone (10/s), and by rate: its
        // bandwidth is nothing by design.
        assert_eq!(ctl[0].change_pct(), Some(-25.0));
        assert_eq!(ctl[1].change_pct(), Some(0.0));
        assert_eq!(ctl[2].member, None);
        assert_eq!(ctl[2].reference_cmd_per_s, Some(48.0));
        assert_eq!(rows[0].reference, "alone");
        assert_eq!(rows[0].change_pct(), Some(-20.0));
        let t = text_table(&res).unwrap();
        let line = t.lines().nth(4).unwrap();
        assert!(
            line.contains("a+b/control") && line.contains("in a+b "),
            "{t}"
        );
        assert!(line.ends_with("-25.00%"), "{t}");
    }

    #[test]
    fn no_groups_no_table() {
        let res = Results {
            header: header(),
            runs: vec![run("a", RunStatus::Completed, alone(1.0, 1.0))],
            complete_len: 0,
        };
        assert_eq!(text_table(&res), None);
    }
}
