//! Failed runs with their reasons.

use crate::draw::esc;
use crate::record::{Results, RunRecord};
use dmalab_core::schema::RunStatus;
use std::fmt::Write;

/// Failed runs with their reasons, when there are any.
pub(super) fn failed_runs(res: &Results) -> String {
    let mut body = String::new();
    let failed: Vec<&RunRecord> = res
        .runs
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .collect();
    if !failed.is_empty() {
        body.push_str(r#"<h2>Failed runs</h2><table class="stats"><tr><th>run</th><th>configuration</th><th>victim</th><th>load</th><th>rep</th><th>reason</th><th>exit status</th><th>stderr (tail)</th></tr>"#);
        for r in failed {
            let f = r.failure.clone().unwrap_or_default();
            let _ = writeln!(
                body,
                r#"<tr><td>{}</td><td class="l">{}</td><td class="l">{}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td>{}</td><td class="l"><pre>{}</pre></td></tr>"#,
                r.index,
                esc(&r.configuration),
                esc(&r.victim),
                esc(&r.load),
                r.repetition,
                esc(&f.reason),
                f.exit_status
                    .map(|s| s.to_string())
                    .or(f.signal.map(|s| format!("signal {s}")))
                    .unwrap_or_default(),
                esc(f
                    .stderr_tail
                    .lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
                    .as_str())
            );
        }
        body.push_str("</table>\n");
    }
    body
}
