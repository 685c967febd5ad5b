//! The report's head: title, facts, warnings, hosts, DDIO.

use crate::draw::esc;
use crate::record::{Results, RunRecord};
use dmalab_core::schema::RunStatus;
use std::fmt::Write;

/// The facts of each host of a merged file, side by side (the first row
/// of the header above is the first host's).
fn hosts_table(h: &crate::record::Header) -> String {
    let mut t = String::from(
        r#"<h2>Hosts</h2><p class="meta">One row per results file merged by <code>dmalab fleet merge</code>; every figure below is grouped as <i>host · configuration</i>.</p>
<div class="scroll"><table class="stats"><tr><th>host</th><th>hostname</th><th>CPU</th><th>CPUs</th><th>NUMA nodes</th><th>memory</th><th>kernel</th><th>virtual</th><th>THP</th><th>clock source</th><th>steal since boot</th><th>dmalab</th><th>runs</th><th>started</th><th>results file</th></tr>
"#,
    );
    for m in &h.hosts {
        let x = &m.host;
        let _ = writeln!(
            t,
            r#"<tr><td class="l">{}</td><td class="l">{}</td><td class="l">{} ({})</td><td>{}</td><td>{}</td><td>{}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td class="l">{}</td><td>{:.2}%</td><td class="l">{}</td><td>{} of {}</td><td class="l">{}</td><td class="l">{}</td></tr>"#,
            esc(&m.name),
            esc(&x.hostname),
            esc(&x.cpu_model),
            esc(&x.cpu_vendor),
            x.cpus_online,
            x.numa_nodes,
            esc(&dmalab_core::units::fmt_bytes(x.mem_total_bytes as f64)),
            esc(&x.kernel),
            if x.virtualized { "yes" } else { "no" },
            esc(&x.thp_enabled),
            esc(&x.clocksource),
            x.steal_since_boot_pct,
            esc(&m.tool.version),
            m.recorded_runs,
            m.planned_runs,
            esc(&m.started_at),
            esc(&m.results_file)
        );
    }
    t.push_str("</table></div>\n");
    t
}

/// The title, the facts table (host, runs, placement, experiment), the
/// experiment's warnings and, for merged files, the hosts.
pub(super) fn meta(res: &Results) -> String {
    let h = &res.header;
    let mut body = String::new();
    let failed = res
        .runs
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .count();
    let host_line = if h.hosts.is_empty() {
        format!(
            "{} · {} · {} CPUs · kernel {}{}",
            esc(&h.host.hostname),
            esc(&h.host.cpu_model),
            h.host.cpus_online,
            esc(&h.host.kernel),
            if h.host.virtualized {
                " · virtual machine"
            } else {
                ""
            }
        )
    } else {
        let mut names: Vec<String> = Vec::new();
        for m in &h.hosts {
            if !names.contains(&esc(&m.name)) {
                names.push(esc(&m.name));
            }
        }
        format!(
            "{} host{}: {} ({} results files merged; facts below)",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            names.join(", "),
            h.hosts.len()
        )
    };
    let _ = write!(
        body,
        r#"<h1>dmalab report: {}</h1><table class="meta">
<tr><td>host</td><td>{}</td></tr>
<tr><td>runs</td><td>{} recorded of {} planned, {} failed · started {}</td></tr>
<tr><td>placement</td><td>aggressor on CPU {} · victims on CPU {}</td></tr>
<tr><td>experiment</td><td>{} (sha256 {}…) · dmalab {}</td></tr></table>
"#,
        esc(&h.experiment),
        host_line,
        res.runs.len(),
        h.planned_runs,
        failed,
        esc(&h.started_at),
        esc(&h.aggressor_cpus),
        esc(&h.victim_cpus),
        esc(&h.experiment_path),
        esc(&h.experiment_hash[..12.min(h.experiment_hash.len())]),
        esc(&h.tool.version)
    );
    for w in &h.warnings {
        let _ = write!(body, "<p><b>warning:</b> {}</p>", esc(w));
    }
    if !h.hosts.is_empty() {
        body.push_str(&hosts_table(h));
    }

    body
}

/// DDIO per configuration (the `ddio` key), when the experiment has one.
pub(super) fn ddio_table(res: &Results) -> String {
    let h = &res.header;
    let mut body = String::new();
    if res.runs.iter().any(|r| r.ddio.is_some()) {
        body.push_str(r#"<h2>DDIO per configuration</h2><table class="stats"><tr><th>configuration</th><th>ddio</th><th>runs with it set</th><th>registers / why not</th></tr>"#);
        for c in &h.configurations {
            let runs: Vec<&RunRecord> = res.runs.iter().filter(|r| &r.configuration == c).collect();
            let Some(d) = runs.iter().find_map(|r| r.ddio.as_ref()) else {
                continue;
            };
            let applied = runs
                .iter()
                .filter(|r| r.ddio.as_ref().is_some_and(|d| d.applied))
                .count();
            let _ = writeln!(
                body,
                r#"<tr><td class="l">{}</td><td>{}</td><td>{applied} of {}</td><td class="l">{}</td></tr>"#,
                esc(c),
                esc(&d.requested),
                runs.len(),
                esc(&d.detail)
            );
        }
        body.push_str("</table>\n");
    }

    body
}
