//! The aggressor groups' section: each member's work in the victim's
//! window in its group, beside its work alone, and the group's sum.

use crate::draw::esc;
use crate::groups::{row_cells, rows, COLUMNS};
use crate::record::Results;
use std::fmt::Write;

/// The section; empty without groups.
pub(super) fn section(res: &Results) -> String {
    let rows = rows(res);
    if rows.is_empty() {
        return String::new();
    }
    let mut body = String::from(
        r#"<h2>Aggressor groups</h2><p class="meta">A group's members ran together, each pinned and paced on its own; each one's work is counted between the victim's start and end (means of completed runs), beside the same aggressor's when it ran alone beside the same victim (<i>reference</i>); the group's row in the statistics is the sum. In a group's control cycle (<i>GROUP/control</i>), each member's stand-in is compared with the member in the group's runs, by the command rate it was paced at.</p>
<div class="scroll"><table class="stats"><tr>"#,
    );
    for c in COLUMNS {
        let _ = write!(body, "<th>{}</th>", esc(c));
    }
    body.push_str("</tr>\n");
    for r in &rows {
        body.push_str(if r.member.is_none() {
            r#"<tr class="sum">"#
        } else {
            "<tr>"
        });
        for (i, c) in row_cells(r).iter().enumerate() {
            let class = if i < 4 { r#" class="l""# } else { "" };
            let _ = write!(body, "<td{class}>{}</td>", esc(c));
        }
        body.push_str("</tr>\n");
    }
    body.push_str("</table></div>\n");
    body
}
