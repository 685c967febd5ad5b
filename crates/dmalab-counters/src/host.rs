//! `dmalab info counters`: what this host can count, and which recipes
//! apply, found by opening each recipe's events (and closing them again).

use crate::catalog::Catalog;
use crate::recipes::{CpuId, RECIPES};
use crate::session::{Request, Scope, Session};
use crate::{resctrl, sys, Roots};
use serde::Serialize;
use std::collections::BTreeMap;

/// One PMU, summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PmuSummary {
    /// Name.
    pub name: String,
    /// `perf_event_attr.type`.
    #[serde(rename = "type")]
    pub type_id: u32,
    /// CPUs it is opened on (uncore), empty otherwise.
    pub cpumask: Vec<usize>,
    /// Format terms.
    pub formats: Vec<String>,
    /// Named events.
    pub events: usize,
    /// IIO: die -> root bus.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub iio_dies: BTreeMap<String, String>,
}

/// One recipe on this host.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecipeStatus {
    /// Name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// The CPUs it is for.
    pub cpus: String,
    /// True when this CPU is one of them.
    pub for_this_cpu: bool,
    /// Events that opened.
    pub events_ready: usize,
    /// Events asked for.
    pub events_total: usize,
    /// Why the others cannot be counted (one line per distinct reason).
    pub reasons: Vec<String>,
    /// Encodings no public table lists, derived (`event: how`).
    pub derived: Vec<String>,
}

/// What this host can count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostCounters {
    /// The CPU.
    pub cpu: CpuId,
    /// `perf_event_paranoid`, if readable.
    pub perf_event_paranoid: Option<i32>,
    /// Running as root.
    pub root: bool,
    /// Where PMUs were read.
    pub pmu_root: String,
    /// PMUs found.
    pub pmus: Vec<PmuSummary>,
    /// Why hardware (core) events cannot be counted, if so.
    pub core_absent: Option<String>,
    /// Why resctrl bandwidth monitoring is unavailable, if so.
    pub resctrl_absent: Option<String>,
    /// Recipes.
    pub recipes: Vec<RecipeStatus>,
}

/// Looks at the host through `roots`.
pub fn host_report(roots: &Roots) -> HostCounters {
    let cat = Catalog::read(&roots.pmu);
    let cpu = CpuId::read(&roots.cpuinfo);
    let pmus = cat
        .pmus
        .values()
        .map(|p| PmuSummary {
            name: p.name.clone(),
            type_id: p.type_id,
            cpumask: p.cpumask.clone(),
            formats: p.formats.keys().cloned().collect(),
            events: p.events.len(),
            iio_dies: p.iio_dies.clone(),
        })
        .collect();
    let core_absent = match crate::spec::resolve("--counters", "cycles", &cat) {
        Ok(r) => r.absent.map(|a| a.to_string()),
        Err(e) => Some(e.to_string()),
    };
    let resctrl_absent = resctrl::check(&roots.resctrl).err().map(|a| a.to_string());
    let scratch = std::env::temp_dir();
    let mut recipes = Vec::new();
    for r in RECIPES {
        let for_this_cpu = r.applies_to(&cpu);
        let (ready, total, reasons) = if r.resctrl {
            (
                usize::from(resctrl_absent.is_none()),
                1,
                resctrl_absent.iter().cloned().collect(),
            )
        } else {
            match Request::parse_with("--counters", r.name, &cat, cpu.clone()) {
                Ok(req) => {
                    let s = Session::open(&req, &Scope::this_process_threads(), roots, &scratch);
                    let rep = s.report();
                    let mut reasons: Vec<String> = Vec::new();
                    for u in &rep.unavailable {
                        if !reasons.contains(&u.message) {
                            reasons.push(u.message.clone());
                        }
                    }
                    (
                        req.events.len() - rep.unavailable.len(),
                        req.events.len(),
                        reasons,
                    )
                }
                Err(e) => (0, r.events.len(), vec![e.to_string()]),
            }
        };
        recipes.push(RecipeStatus {
            name: r.name.into(),
            description: r.description.into(),
            cpus: r.cpus.into(),
            for_this_cpu,
            events_ready: ready,
            events_total: total,
            reasons,
            derived: crate::recipes::derived(r.name)
                .map(|(id, how)| format!("{id}: {how}"))
                .collect(),
        });
    }
    HostCounters {
        cpu,
        perf_event_paranoid: sys::paranoid_level(&roots.paranoid),
        root: dmalab_core::sys::is_root(),
        pmu_root: roots.pmu.display().to_string(),
        pmus,
        core_absent,
        resctrl_absent,
        recipes,
    }
}

impl HostCounters {
    /// The text `dmalab info counters` prints.
    pub fn render_text(&self) -> String {
        let mut s = format!(
            "CPU: {} family {:#x} model {:#x} ({})\n",
            self.cpu.vendor, self.cpu.family, self.cpu.model, self.cpu.model_name
        );
        s.push_str(&format!(
            "perf_event_paranoid: {}{}\n",
            self.perf_event_paranoid
                .map_or("unreadable".to_string(), |p| p.to_string()),
            if self.root {
                " (running as root: not limited by it)"
            } else {
                ""
            }
        ));
        s.push_str(&format!("PMUs under {}:\n", self.pmu_root));
        if self.pmus.is_empty() {
            s.push_str("  none\n");
        }
        for p in &self.pmus {
            let kind = if !p.cpumask.is_empty() {
                format!("uncore, CPUs {:?}", p.cpumask)
            } else {
                "per task or CPU".to_string()
            };
            s.push_str(&format!(
                "  {:<28} type {:<4} {}; {} format terms, {} named events\n",
                p.name,
                p.type_id,
                kind,
                p.formats.len(),
                p.events
            ));
            for (die, bus) in &p.iio_dies {
                s.push_str(&format!("      {die}: root bus {bus}\n"));
            }
        }
        if let Some(c) = &self.core_absent {
            s.push_str(&format!("hardware events: cannot be counted: {c}\n"));
        }
        if let Some(r) = &self.resctrl_absent {
            s.push_str(&format!("memory bandwidth monitoring: {r}\n"));
        }
        s.push_str("recipes (--counters NAME):\n");
        for r in &self.recipes {
            let state = if r.events_ready == r.events_total && r.events_total > 0 {
                "ready".to_string()
            } else if r.events_ready > 0 {
                format!("partly ({} of {} events)", r.events_ready, r.events_total)
            } else {
                "unavailable".to_string()
            };
            s.push_str(&format!(
                "  {:<13} {:<22} {}{}\n",
                r.name,
                state,
                r.description,
                if r.for_this_cpu {
                    String::new()
                } else {
                    format!(" [for {}]", r.cpus)
                }
            ));
            for why in &r.reasons {
                s.push_str(&format!("      {why}\n"));
            }
            for d in &r.derived {
                s.push_str(&format!("      derived encoding: {d}\n"));
            }
        }
        s
    }
}
